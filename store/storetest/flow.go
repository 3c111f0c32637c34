package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseFlow checks flow control: concurrency keys, queue limits, rate
// limits and fair claiming.
func exerciseFlow(t *testing.T, setup setupFunc) {
	exerciseFlowFlow(t, setup)
}

func exerciseFlowFlow(t *testing.T, setup setupFunc) {
	t.Run("Flow", func(t *testing.T) {
		t.Parallel()
		exerciseFlowLimits(t, setup)
		exerciseFlowKeys(t, setup)
		exerciseFlowConcurrently(t, setup)
	})
}

func exerciseFlowLimits(t *testing.T, setup setupFunc) {
	t.Run("ConcurrencyKeyIsStoredAndReturned", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		got := b.submit(norn.NewTask{ID: "k", Queue: "q", ConcurrencyKey: "tenant/é 1"},
			norn.NewTask{ID: "n", Queue: "q"})
		if got[0].ConcurrencyKey != "tenant/é 1" || got[1].ConcurrencyKey != "" {
			t.Fatalf("submit results: %q %q", got[0].ConcurrencyKey, got[1].ConcurrencyKey)
		}
		if g := b.get("k"); g.ConcurrencyKey != "tenant/é 1" {
			t.Fatalf("Get: concurrency key %q", g.ConcurrencyKey)
		}
		c := b.claimID("w", "k", "q")
		if c.ConcurrencyKey != "tenant/é 1" {
			t.Fatalf("claimed: concurrency key %q", c.ConcurrencyKey)
		}
		for _, tk := range b.listAll(norn.Query{Summary: true}) {
			want := map[string]string{"k": "tenant/é 1", "n": ""}[tk.ID]
			if tk.ConcurrencyKey != want {
				t.Fatalf("summary list: %s has key %q, want %q", tk.ID, tk.ConcurrencyKey, want)
			}
		}
	})

	t.Run("MaxRunningCapsClaims", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		qi := flowLimited(b, norn.QueueUpdate{MaxRunning: ptr(2)})
		if qi.MaxRunning != 2 || qi.KeyLimit != 0 {
			t.Fatalf("UpdateQueue answered max_running %d key_limit %d", qi.MaxRunning, qi.KeyLimit)
		}
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
			norn.NewTask{ID: "c", Queue: "q", ConcurrencyKey: "k"}, norn.NewTask{ID: "d", Queue: "q"})
		eqStrings(t, "first claim", flowClaimN(b, 10), []string{"a", "b"})
		b.claimNone("q")
		b.complete(b.get("a"), "")
		eqStrings(t, "claim after a completion", flowClaimN(b, 10), []string{"c"})
		flowLimited(b, norn.QueueUpdate{MaxRunning: ptr(0)})
		eqStrings(t, "claim after the limit was removed", flowClaimN(b, 10), []string{"d"})
		if g, err := b.s.Queue(b.ctx, "q"); err != nil || g.MaxRunning != 0 {
			t.Fatalf("Queue: max_running %d, %v", g.MaxRunning, err)
		}
	})

	t.Run("BlockedKeyNeverStopsOtherKeys", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		flowLimited(b, norn.QueueUpdate{KeyLimit: ptr(1)})
		b.submit(norn.NewTask{ID: "a1", Queue: "q", ConcurrencyKey: "a"}, norn.NewTask{ID: "a2", Queue: "q", ConcurrencyKey: "a"},
			norn.NewTask{ID: "a3", Queue: "q", ConcurrencyKey: "a"}, norn.NewTask{ID: "b1", Queue: "q", ConcurrencyKey: "b"},
			norn.NewTask{ID: "b2", Queue: "q", ConcurrencyKey: "b"}, norn.NewTask{ID: "n1", Queue: "q"}, norn.NewTask{ID: "n2", Queue: "q"})
		// Claim order is id order here; a's and b's second tasks are skipped,
		// tasks without a key are not key-limited.
		eqStrings(t, "first claim", flowClaimN(b, 10), []string{"a1", "b1", "n1", "n2"})
		b.claimNone("q")
		b.complete(b.get("a1"), "")
		eqStrings(t, "claim after a1 completed", flowClaimN(b, 10), []string{"a2"})
		qi, err := b.s.Queue(b.ctx, "q")
		b.must(err, "Queue")
		if fmt.Sprint(qi.Keys) != "[{a {0 0 {0 0}} 1} {b {0 0 {0 0}} 1}]" || qi.KeyLimit != 1 {
			t.Fatalf("Queue keys %v key_limit %d, want a and b running 1 each", qi.Keys, qi.KeyLimit)
		}
	})
}

func exerciseFlowKeys(t *testing.T, setup setupFunc) {
	t.Run("KeyOwnLimitOverridesKeyLimit", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		qi := flowLimited(b, norn.QueueUpdate{KeyLimit: ptr(1), Keys: map[string]*norn.KeySettings{"a": {Limit: 2}}})
		if fmt.Sprint(qi.Keys) != "[{a {2 0 {0 0}} 0}]" {
			t.Fatalf("UpdateQueue keys %v", qi.Keys)
		}
		for i := range 4 {
			b.submit(norn.NewTask{ID: fmt.Sprintf("a%d", i), Queue: "q", ConcurrencyKey: "a"},
				norn.NewTask{ID: fmt.Sprintf("b%d", i), Queue: "q", ConcurrencyKey: "b"})
		}
		eqStrings(t, "claim", flowClaimN(b, 10), []string{"a0", "a1", "b0"})
		// Removing the key's own limit brings back the queue's: a is above it
		// now, so neither key gets more.
		qi = flowLimited(b, norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"a": nil}})
		if fmt.Sprint(qi.Keys) != "[{a {0 0 {0 0}} 2} {b {0 0 {0 0}} 1}]" {
			t.Fatalf("keys after removing a's limit: %v", qi.Keys)
		}
		b.claimNone("q")
		b.complete(b.get("a0"), "")
		b.claimNone("q")
		b.complete(b.get("a1"), "")
		eqStrings(t, "claim after a's tasks ended", flowClaimN(b, 10), []string{"a2"})
		// A limit for a key with no tasks is kept and shown.
		qi = flowLimited(b, norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"idle": {Limit: 5}}})
		if fmt.Sprint(qi.Keys) != "[{a {0 0 {0 0}} 1} {b {0 0 {0 0}} 1} {idle {5 0 {0 0}} 0}]" {
			t.Fatalf("keys with an idle key's limit: %v", qi.Keys)
		}
	})

	t.Run("EveryWayOutOfRunningFreesTheKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		flowLimited(b, norn.QueueUpdate{KeyLimit: ptr(1), MaxRunning: ptr(1)})
		exits := []struct {
			name string
			out  func(tk *norn.Task)
		}{
			{"complete", func(tk *norn.Task) { b.complete(tk, "") }},
			{"fail", func(tk *norn.Task) { b.fail(tk, "x") }},
			{"abort", func(tk *norn.Task) { b.abort(tk, "x") }},
			{"yield", func(tk *norn.Task) { b.yield(tk) }},
			{"snooze", func(tk *norn.Task) {
				_, err := b.s.Snooze(b.ctx, ref(tk), norn.Snooze{Delay: dur(time.Hour)})
				b.must(err, "Snooze")
			}},
			{"timeout", func(tk *norn.Task) { b.advance(time.Minute) }},
			{"cancel", func(tk *norn.Task) { b.cancel(tk.ID) }},
			{"delete", func(tk *norn.Task) { b.delete(tk.ID) }},
			{"batch complete", func(tk *norn.Task) {
				res, err := b.s.LeaseBatch(b.ctx, []norn.LeaseOp{{Op: norn.OpComplete, LeaseRef: ref(tk)}})
				b.must(err, "LeaseBatch")
				if res[0].Err != nil {
					t.Fatalf("LeaseBatch complete: %v", res[0].Err)
				}
			}},
		}
		for i, e := range exits {
			id := fmt.Sprintf("t%d", i)
			// A yielded or timed-out task is ready again, first in line.
			b.submit(norn.NewTask{ID: id, Queue: "q", ConcurrencyKey: "k", Timeout: dur(10 * time.Second),
				MaxAttempts: ptr(1)})
			tk := b.claimID("w", id, "q")
			b.submit(norn.NewTask{ID: id + "-next", Queue: "q", ConcurrencyKey: "k"})
			b.claimNone("q")
			e.out(tk)
			got := flowClaimN(b, 1)
			if len(got) != 1 {
				t.Fatalf("after %s: nothing claimable, the key's running count did not drop", e.name)
			}
			b.complete(b.get(got[0]), "")
			for _, left := range flowClaimN(b, 10) { // the other of the two, if still ready
				b.complete(b.get(left), "")
			}
		}
	})

	t.Run("LongPollWakesWhenTheKeyFrees", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		flowLimited(b, norn.QueueUpdate{KeyLimit: ptr(1)})
		b.submit(norn.NewTask{ID: "a1", Queue: "q", ConcurrencyKey: "a"}, norn.NewTask{ID: "a2", Queue: "q", ConcurrencyKey: "a"})
		a1 := b.claimID("w", "a1", "q")
		got := b.longPoll("q", 1)
		stillWaiting(t, got, 200*time.Millisecond, "the key was at its limit")
		b.complete(a1, "")
		if ts := woken(t, got, "the key's running task completed"); len(ts) != 1 || ts[0].ID != "a2" {
			t.Fatalf("long poll returned %v, want a2", ids(ts))
		}
	})
}

func exerciseFlowConcurrently(t *testing.T, setup setupFunc) {
	t.Run("LimitsHoldUnderConcurrentClaimers", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		ConcurrentLimits(t, []norn.Store{s}, b.ctx)
	})

	fairCases(t, setup)
	rateLimitCases(t, setup)
	keyRateCases(t, setup)
}

// limited configures queue q with u and fails the test on error.
func flowLimited(b *testBundle, u norn.QueueUpdate) norn.QueueInfo {
	b.t.Helper()
	qi, err := b.s.UpdateQueue(b.ctx, "q", u)
	b.must(err, "UpdateQueue")
	return qi
}

func flowClaimN(b *testBundle, n int) []string {
	b.t.Helper()
	return ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n}))
}

// ConcurrentLimits checks that flow limits hold with many concurrent
// claimers spread over stores (several instances of one cluster store, or
// one store): workers claim batches from a queue with max_running and
// key_limit, hold each task a moment and complete it. No task may be
// observed running by the workers beyond a limit (a task counts from when
// its claim returned until before its completion is sent, inside the
// store's own running interval), the store's own counts (Queue) never
// exceed the limits, and every task completes exactly once.
func ConcurrentLimits(t *testing.T, stores []norn.Store, ctx context.Context) {
	ConcurrentLimitsCase(t, stores, ctx, LimitsCase{MaxRunning: 6, KeyLimit: 2, FirstKeyLimit: 1, Keys: 5, PerKey: 40,
		Workers: 8, N: 3, HoldMs: 3})
}

// LimitsCase is one configuration of ConcurrentLimitsCase.
type LimitsCase struct {
	MaxRunning, KeyLimit int // the queue's limits
	FirstKeyLimit        int // key k0's own limit (0: none)
	Keys, PerKey         int // tasks: PerKey for each of Keys keys, plus PerKey without a key
	Workers, N           int // concurrent claimers (spread over the stores), tasks per claim
	HoldMs               int // each claimed batch is held up to this long before completing
}

// ConcurrentLimitsCase is ConcurrentLimits with the limits, tasks and
// claimers of c.
func ConcurrentLimitsCase(t *testing.T, stores []norn.Store, ctx context.Context, c LimitsCase) {
	var own map[string]*norn.KeySettings
	if c.FirstKeyLimit > 0 {
		own = map[string]*norn.KeySettings{"k0": {Limit: c.FirstKeyLimit}}
	}
	s0 := stores[0]
	_, err := s0.UpdateQueue(ctx, "flow", norn.QueueUpdate{MaxRunning: ptr(c.MaxRunning), KeyLimit: ptr(c.KeyLimit), Keys: own})
	if err != nil {
		t.Fatal(err)
	}
	var nts []norn.NewTask
	for i := range c.PerKey {
		for k := range c.Keys {
			nts = append(nts, norn.NewTask{Queue: "flow", ConcurrencyKey: fmt.Sprintf("k%d", k), Spec: []byte(fmt.Sprint(i))})
		}
		nts = append(nts, norn.NewTask{Queue: "flow"})
	}
	if _, err := s0.Submit(ctx, nts...); err != nil {
		t.Fatal(err)
	}
	r := &limitsRun{c: c, tasks: len(nts), running: map[string]int{}, completed: map[string]int{}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.work(ctx, stores[w%len(stores)], w)
		}()
	}
	go r.sample(ctx, s0, done)
	wg.Wait()
	close(done)
	r.mu.Lock()
	failure := r.failure
	r.mu.Unlock()
	if failure != nil {
		t.Fatal(failure)
	}
	for id, n := range r.completed {
		if n != 1 {
			t.Fatalf("task %s was claimed %d times", id, n)
		}
	}
	if len(r.completed) != len(nts) {
		t.Fatalf("%d of %d tasks completed", len(r.completed), len(nts))
	}
}

// limitsRun is one ConcurrentLimitsCase in progress: what its claimers
// hold, what they completed, and the first failure.
type limitsRun struct {
	c         LimitsCase
	tasks     int
	mu        sync.Mutex
	running   map[string]int
	total     int
	completed map[string]int
	failure   error
}

// limitOf is the limit of key ("": tasks without a key, bounded by
// max_running only).
func (r *limitsRun) limitOf(key string) int {
	switch key {
	case "":
		return r.c.MaxRunning
	case "k0":
		if r.c.FirstKeyLimit > 0 {
			return r.c.FirstKeyLimit
		}
	}
	return r.c.KeyLimit
}

func (r *limitsRun) fail(err error) {
	r.mu.Lock()
	if r.failure == nil {
		r.failure = err
	}
	r.mu.Unlock()
}

// work is one claimer: it claims, checks that no limit is exceeded by
// what the claimers hold, holds its tasks a random while, and completes
// them, until every task completed or something failed.
func (r *limitsRun) work(ctx context.Context, s norn.Store, w int) {
	rng := rand.New(rand.NewPCG(uint64(w), 7))
	for {
		r.mu.Lock()
		finished := len(r.completed) == r.tasks || r.failure != nil
		r.mu.Unlock()
		if finished {
			return
		}
		ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: fmt.Sprintf("w%d", w), Queues: []string{"flow"}, N: r.c.N,
			Wait: dur(50 * time.Millisecond), Timeout: dur(time.Hour)})
		if err != nil {
			r.fail(fmt.Errorf("Claim: %w", err))
			return
		}
		r.mu.Lock()
		for _, tk := range ts {
			r.running[tk.ConcurrencyKey]++
			r.total++
			if r.running[tk.ConcurrencyKey] > r.limitOf(tk.ConcurrencyKey) || r.total > r.c.MaxRunning {
				r.failure = fmt.Errorf("over-admitted: key %q has %d running (limit %d), queue %d (max %d)",
					tk.ConcurrencyKey, r.running[tk.ConcurrencyKey], r.limitOf(tk.ConcurrencyKey), r.total, r.c.MaxRunning)
			}
		}
		r.mu.Unlock()
		time.Sleep(time.Duration(rng.IntN(r.c.HoldMs)) * time.Millisecond)
		for _, tk := range ts {
			r.mu.Lock()
			r.running[tk.ConcurrencyKey]--
			r.total--
			r.completed[tk.ID]++
			r.mu.Unlock()
			if err := s.Complete(ctx, norn.LeaseRef{TaskID: tk.ID, Worker: tk.Owner, Lease: tk.Lease}, nil); err != nil {
				r.fail(fmt.Errorf("Complete(%s): %w", tk.ID, err))
				return
			}
		}
	}
}

// sample checks the store's own view of the running tasks until done.
func (r *limitsRun) sample(ctx context.Context, s norn.Store, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		default:
		}
		qi, err := s.Queue(ctx, "flow")
		if err != nil {
			r.fail(err)
			return
		}
		if n := qi.Counts[norn.StatusRunning]; n > int64(r.c.MaxRunning) {
			r.fail(fmt.Errorf("Queue shows %d running, max_running is %d", n, r.c.MaxRunning))
		}
		for _, k := range qi.Keys {
			if k.Running > int64(r.limitOf(k.Key)) {
				r.fail(fmt.Errorf("Queue shows key %q with %d running, limit %d", k.Key, k.Running, r.limitOf(k.Key)))
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}
