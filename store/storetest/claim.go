package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
)

var workerID = regexp.MustCompile(`^worker-[0-9]+$`)

func exerciseRegisterWorker(t *testing.T, setup setupFunc) {
	t.Run("RegisterWorker", func(t *testing.T) {
		t.Parallel()

		t.Run("GivesUniqueIDsUnderConcurrency", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			var mu sync.Mutex
			seen := map[string]bool{}
			var wg sync.WaitGroup
			errs := make(chan error, 32)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 4; i++ {
						id, err := s.RegisterWorker(b.ctx, norn.WorkerInfo{Name: fmt.Sprintf("g%d", g)})
						if err != nil {
							errs <- err
							return
						}
						mu.Lock()
						if seen[id] {
							errs <- fmt.Errorf("RegisterWorker returned %q twice", id)
						}
						seen[id] = true
						mu.Unlock()
						if !workerID.MatchString(id) {
							errs <- fmt.Errorf("worker id %q does not look like worker-<n>", id)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if len(seen) != 32 {
				t.Fatalf("%d unique worker ids, want 32", len(seen))
			}
			w := b.registerWorker(norn.WorkerInfo{Name: "host-1", Queues: []string{"q"}})
			if seen[w] {
				t.Fatalf("RegisterWorker: %q given twice", w)
			}
			if ws := b.workers(); len(ws) != 33 {
				t.Fatalf("Workers lists %d, want 33", len(ws))
			}
		})

		t.Run("ListsAWorkerWithItsInfo", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			t0 := b.now()
			w := b.registerWorker(norn.WorkerInfo{Name: "host-1", Queues: []string{"q"}})
			info := findWorker(t, b.workers(), w)
			if info.Name != "host-1" || len(info.Queues) != 1 || info.Queues[0] != "q" {
				t.Fatalf("worker info %+v", info)
			}
			eqTime(t, "registered", info.Registered, t0)
		})

		t.Run("ClaimRefreshesLastSeenAndOnlyThatWorkerIsActive", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.registerWorker(norn.WorkerInfo{Name: "idle"})
			w := b.registerWorker(norn.WorkerInfo{Name: "host-1", Queues: []string{"q"}})
			b.clock.Advance(time.Hour)
			b.claimed(w, norn.NewTask{Queue: "q"})
			info := findWorker(t, b.workers(), w)
			if d := b.now().Sub(info.LastSeen); d < 0 || d > 10*time.Second {
				t.Fatalf("last_seen %v after a claim at %v", info.LastSeen.UTC(), b.now().UTC())
			}
			st, err := s.Stats(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Workers != 2 || st.ActiveWorkers != 1 {
				t.Fatalf("Stats workers %d active %d, want 2 and 1", st.Workers, st.ActiveWorkers)
			}
		})

		t.Run("RefusesABadQueueNameOrALongName", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			_, err := s.RegisterWorker(b.ctx, norn.WorkerInfo{Name: "w", Queues: []string{"ok", "no spaces"}})
			wantField(t, "RegisterWorker with a bad queue", err, norn.ErrInvalidArgument, "queues[1]")
			_, err = s.RegisterWorker(b.ctx, norn.WorkerInfo{Name: strings.Repeat("n", norn.MaxWorkerNameLength+1)})
			wantField(t, "RegisterWorker with a long name", err, norn.ErrInvalidArgument, "name")
			if ws := b.workers(); len(ws) != 0 {
				t.Fatalf("Workers after refused registrations: %+v; want none", ws)
			}
		})
	})
}

func (b *testBundle) registerWorker(info norn.WorkerInfo) string {
	b.t.Helper()
	id, err := b.s.RegisterWorker(b.ctx, info)
	b.must(err, "RegisterWorker(%+v)", info)
	return id
}

func (b *testBundle) workers() []norn.WorkerInfo {
	b.t.Helper()
	ws, err := b.s.Workers(b.ctx)
	b.must(err, "Workers")
	return ws
}

func findWorker(t *testing.T, ws []norn.WorkerInfo, id string) norn.WorkerInfo {
	t.Helper()
	return find(t, "worker", ws, id, func(w norn.WorkerInfo) string { return w.ID })
}

type claimResult struct {
	ts  []*norn.Task
	err error
}

func exerciseClaim(t *testing.T, setup setupFunc) {
	t.Run("Claim", func(t *testing.T) {
		t.Parallel()
		exerciseClaimLeases(t, setup)
		exerciseClaimWaitAndOrder(t, setup)
		exerciseClaimOrderAtScale(t, setup)
		exerciseClaimConcurrently(t, setup)
	})
}

func exerciseClaimLeases(t *testing.T, setup setupFunc) {
	t.Run("TakesALeaseAndCountsAnAttempt", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		tk := b.submitOne(norn.NewTask{ID: "a", Queue: "q", Timeout: dur(30 * time.Second)})
		b.clock.Advance(time.Second)
		now := b.now()
		c := b.claim("w1", "q")
		if c.ID != "a" || c.Owner != "w1" || c.Lease != 1 || c.Attempts != 1 || c.Progress != 0 {
			t.Fatalf("claimed task: %s", canonTask(c))
		}
		eqTime(t, "deadline", c.Deadline, now.Add(30*time.Second))
		eqTime(t, "updated", c.Updated, now)
		wantVersion(t, "claimed", c, tk.Version+1)
		h := lastHistory(t, c, norn.TaskAssignment, now)
		if h.Worker != "w1" || h.Lease != 1 {
			t.Fatalf("TaskAssignment entry %+v, want worker w1 lease 1", h)
		}
		sameTask(t, "Get after Claim", c, b.get("a"))
	})

	t.Run("RequestTimeoutOverridesTheTasks", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(norn.NewTask{ID: "b", Queue: "q", Timeout: dur(30 * time.Second)})
		ts := b.claimReq(norn.ClaimRequest{Worker: "w1", Queues: []string{"q"}, Timeout: dur(2 * time.Minute)})
		if len(ts) != 1 {
			t.Fatalf("claimed %d", len(ts))
		}
		eqTime(t, "deadline with lease override", ts[0].Deadline, b.now().Add(2*time.Minute))
	})

	t.Run("FindsNothingInAnEmptyOrUnusedQueue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.claimed("w1", norn.NewTask{ID: "a", Queue: "q"})
		b.claimNone("q")
		b.claimNone("never-used")
	})

	t.Run("FindingNothingKeepsTheWorkerActive", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		id := b.registerWorker(norn.WorkerInfo{Name: "idle", Queues: []string{"empty"}})
		b.clock.Advance(norn.ActiveWorkerWindow + time.Minute)
		if ts := b.claimReq(norn.ClaimRequest{Worker: id, Queues: []string{"empty"}}); len(ts) != 0 {
			t.Fatalf("claimed %d tasks from an empty queue", len(ts))
		}
		st, err := s.Stats(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.ActiveWorkers != 1 {
			t.Fatalf("active workers after an empty claim: %d, want 1", st.ActiveWorkers)
		}
		ws := b.workers()
		if len(ws) != 1 {
			t.Fatalf("Workers: %+v, want the idle worker", ws)
		}
		if age := b.now().Sub(ws[0].LastSeen); age < 0 || age > 5*time.Second {
			t.Fatalf("last seen %v before the empty claim, want at most 5s", age)
		}
	})

	t.Run("TakesQueuesInOrderAndHigherPriorityFirst", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q1", Priority: 1}, norn.NewTask{ID: "b", Queue: "q1", Priority: 5},
			norn.NewTask{ID: "c", Queue: "q1", Priority: 1}, norn.NewTask{ID: "x", Queue: "q2"}, norn.NewTask{ID: "y", Queue: "q2"},
			norn.NewTask{ID: "z", Queue: "q3", Priority: 99})
		eqStrings(t, "claim q2,q1 n=1", ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q2", "q1"}})), []string{"x"})
		eqStrings(t, "claim q2,q1 n=4", ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q2", "q1"}, N: 4})), []string{"y", "b", "a", "c"})
		eqStrings(t, "claim q1,q2 when empty", ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q1", "q2"}, N: 4})), []string{})
		b.status("z", norn.StatusReady)
	})

	t.Run("TakesAtMostN", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		var nts []norn.NewTask
		for i := 0; i < 5; i++ {
			nts = append(nts, norn.NewTask{ID: fmt.Sprintf("n%d", i), Queue: "q4"})
		}
		b.submit(nts...)
		eqStrings(t, "claim n=3 of 5", ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q4"}, N: 3})), []string{"n0", "n1", "n2"})
		eqStrings(t, "claim n=3 of 2 left", ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q4"}, N: 3})), []string{"n3", "n4"})
	})
}

func exerciseClaimWaitAndOrder(t *testing.T, setup setupFunc) {
	t.Run("WaitReturnsEmptyWhenNothingArrives", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		start := time.Now()
		ts := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"lp"}, Wait: dur(300 * time.Millisecond)})
		if len(ts) != 0 {
			t.Fatalf("long poll on an empty queue returned %d tasks", len(ts))
		}
		if el := time.Since(start); el < 200*time.Millisecond {
			t.Fatalf("long poll of 300ms returned after %v", el)
		}
	})

	t.Run("WaitIsWokenByASubmit", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		got := claimWaitFor(b, func() { b.submitOne(norn.NewTask{ID: "woke", Queue: "lp"}) })
		eqStrings(t, "claim woken by submit", ids(got), []string{"woke"})
		b.complete(got[0], "")
	})

	t.Run("WaitIsWokenByADelayElapsing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(norn.NewTask{ID: "later", Queue: "lp", Delay: dur(time.Minute)})
		got := claimWaitFor(b, func() { b.advance(2 * time.Minute) })
		eqStrings(t, "claim woken by a delay elapsing", ids(got), []string{"later"})
		b.complete(got[0], "")
	})

	t.Run("WaitEndsWithItsContext", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		ctx, cancel := context.WithTimeout(b.ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		ts, _ := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"lp"}, Wait: dur(time.Minute)})
		if len(ts) != 0 {
			t.Fatalf("claim with cancelled context returned %d tasks", len(ts))
		}
		if el := time.Since(start); el > 20*time.Second {
			t.Fatalf("claim ignored its context for %v", el)
		}
	})

	t.Run("SkipsAPausedQueue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		claimPaused(b)
		b.claimNone("paused")
		b.claimID("w", "r1", "paused", "run")
	})

	t.Run("PausedQueueTakesSubmitsAndUpdatesAndResumesInOrder", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		claimPaused(b)
		b.submitOne(norn.NewTask{ID: "p2", Queue: "paused"})
		if _, err := s.Update(b.ctx, "p2", norn.Update{Priority: ptr(uint32(1))}); err != nil {
			t.Fatalf("Update in paused queue: %v", err)
		}
		qi, err := s.Queue(b.ctx, "paused")
		if err != nil || !qi.Paused || qi.Counts[norn.StatusReady] != 2 {
			t.Fatalf("Queue(paused): %+v, %v", qi, err)
		}
		b.claimNone("paused")
		qi, err = s.UpdateQueue(b.ctx, "paused", norn.QueueUpdate{Paused: ptr(false)})
		if err != nil || qi.Paused {
			t.Fatalf("resume: %+v, %v", qi, err)
		}
		eqStrings(t, "claim after resume", ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"paused"}, N: 5})), []string{"p1", "p2"})
	})

	t.Run("OrdersByPriorityThenTheTimeATaskBecameReadyNotItsID", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "m", Queue: "q"}, norn.NewTask{ID: "n", Queue: "q"}, norn.NewTask{ID: "a", Queue: "q", Delay: dur(30 * time.Second)})
		m := b.claimID("w", "m", "q")
		b.clock.Advance(time.Second)
		b.yield(m)
		b.advance(30 * time.Second)
		b.submitOne(norn.NewTask{ID: "zz", Queue: "q", Priority: 1})
		// Priority first, then the time each became ready (n at t0, m after its
		// yield at t0+1s, a when its delay elapsed), whatever the ids say.
		eqStrings(t, "claim order", ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})), []string{"zz", "n", "m", "a"})
	})
}

func exerciseClaimOrderAtScale(t *testing.T, setup setupFunc) {
	t.Run("Orders10kTasksByPriorityThenFIFO", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		rng := rand.New(rand.NewPCG(1, 2))
		prios := []uint32{0, 1, 2, 50}
		type key struct {
			prio         uint32
			batch, index int
			id           string
		}
		var all []key
		for bt := 0; bt < 10; bt++ {
			// Later batches get smaller ids, so FIFO cannot come from id order.
			var nts []norn.NewTask
			for i := 0; i < 1000; i++ {
				k := key{prio: prios[rng.IntN(len(prios))], batch: bt, index: i, id: fmt.Sprintf("%c-%04d", 'z'-bt, i)}
				all = append(all, k)
				nts = append(nts, norn.NewTask{ID: k.id, Queue: "q", Priority: k.prio})
			}
			b.submit(nts...)
			b.clock.Advance(time.Millisecond)
		}
		sort.SliceStable(all, func(x, y int) bool { return all[x].prio > all[y].prio })
		want := make([]string, len(all))
		for i, k := range all {
			want[i] = k.id
		}
		var got []string
		for {
			ts := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: norn.MaxClaim})
			if len(ts) == 0 {
				break
			}
			got = append(got, ids(ts)...)
			if len(got) > len(want) {
				t.Fatalf("claimed more tasks (%d) than submitted", len(got))
			}
		}
		eqStrings(t, "claim order of 10k tasks", got, want)
	})
}

func exerciseClaimConcurrently(t *testing.T, setup setupFunc) {
	t.Run("ConcurrentClaimsTakeEveryTaskExactlyOnce", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		const n, workers = 1000, 32
		var nts []norn.NewTask
		for i := 0; i < n; i++ {
			nts = append(nts, norn.NewTask{Queue: "q", Priority: uint32(i % 3)})
		}
		b.submit(nts...)
		var mu sync.Mutex
		claimed := map[string]string{}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for g := 0; g < workers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := fmt.Sprintf("cw-%d", g)
				for {
					ts, err := s.Claim(b.ctx, norn.ClaimRequest{Worker: w, Queues: []string{"q"}, N: 1 + g%4})
					if err != nil {
						errs <- fmt.Errorf("%s: Claim: %w", w, err)
						return
					}
					if len(ts) == 0 {
						return
					}
					for _, tk := range ts {
						mu.Lock()
						prev, dup := claimed[tk.ID]
						claimed[tk.ID] = w
						mu.Unlock()
						if dup {
							errs <- fmt.Errorf("task %s claimed by %s and %s", tk.ID, prev, w)
							return
						}
						if tk.Lease != 1 || tk.Owner != w || tk.Attempts != 1 {
							errs <- fmt.Errorf("task %s claimed with lease %d owner %s attempts %d", tk.ID, tk.Lease, tk.Owner, tk.Attempts)
							return
						}
					}
					for _, tk := range ts {
						if err := s.Complete(b.ctx, ref(tk), nil); err != nil {
							errs <- fmt.Errorf("%s: Complete %s: %w", w, tk.ID, err)
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		var msgs []string
		for err := range errs {
			msgs = append(msgs, err.Error())
		}
		if len(msgs) > 0 {
			t.Fatalf("%d errors, first: %s", len(msgs), strings.Join(clip(msgs), "\n"))
		}
		if len(claimed) != n {
			t.Fatalf("%d distinct tasks claimed, want %d", len(claimed), n)
		}
		b.claimNone("q")
		b.count(norn.Filter{Statuses: []norn.Status{norn.StatusCompleted}}, n)
	})
}

// waitFor starts a claim waiting on queue lp, runs trigger and
// returns what the claim got.
func claimWaitFor(b *testBundle, trigger func()) []*norn.Task {
	b.t.Helper()
	ch := make(chan claimResult, 1)
	go func() {
		ts, err := b.s.Claim(b.ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"lp"}, Wait: dur(time.Minute)})
		ch <- claimResult{ts, err}
	}()
	// Give the claim time to start waiting. The assertions hold either
	// way; the pause only makes the wake-up path the one exercised.
	time.Sleep(50 * time.Millisecond)
	trigger()
	select {
	case r := <-ch:
		if r.err != nil {
			b.t.Fatalf("Claim: %v", r.err)
		}
		return r.ts
	case <-time.After(20 * time.Second):
		b.t.Fatalf("a waiting Claim was not woken")
	}
	return nil
}

// paused holds p1 (priority 9) in a paused queue and r1 in another.
func claimPaused(b *testBundle) {
	b.submit(norn.NewTask{ID: "p1", Queue: "paused", Priority: 9}, norn.NewTask{ID: "r1", Queue: "run"})
	qi, err := b.s.UpdateQueue(b.ctx, "paused", norn.QueueUpdate{Paused: ptr(true)})
	if err != nil || !qi.Paused || qi.Name != "paused" {
		b.t.Fatalf("pause: %+v, %v", qi, err)
	}
}
