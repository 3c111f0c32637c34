package storetest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// rateLimitCases checks rate limits (run inside Flow): the bucket's burst
// and refill under the injected clock, long polls woken by a token, the
// setting's life cycle and bad input.
func rateLimitCases(t *testing.T, setup setupFunc) {
	rateLimitCasesRateLimitIsShownWithItsTokens(t, setup)
	rateLimitCasesRateLimitBurstIsHonoured(t, setup)
	rateLimitCasesRateLimitTokensRefillOverTime(t, setup)
	rateLimitCasesRateLimitLongPollWakesWhenATokenComes(t, setup)
	rateLimitCasesRateLimitRemovedReleasesEverything(t, setup)
	rateLimitCasesRateLimitBadInputChangesNothing(t, setup)
	rateLimitCasesRateLimitHeldBackIsCounted(t, setup)
	rateLimitCasesRateLimitHoldsUnderConcurrentClaimers(t, setup)
}

func rateLimitCasesRateLimitIsShownWithItsTokens(t *testing.T, setup setupFunc) {
	t.Run("RateLimitIsShownWithItsTokens", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		qi := rlSet(b, norn.RateLimit{PerSecond: 2.5})
		if qi.RateLimit != (norn.RateLimit{PerSecond: 2.5, Burst: 3}) {
			t.Fatalf("UpdateQueue answered rate_limit %+v, want 2.5/s with the default burst 3", qi.RateLimit)
		}
		rlTokens(t, "UpdateQueue", qi, 3)
		qi = rlSet(b, norn.RateLimit{PerSecond: 100, Burst: 10})
		if qi.RateLimit != (norn.RateLimit{PerSecond: 100, Burst: 10}) {
			t.Fatalf("after a change: rate_limit %+v", qi.RateLimit)
		}
		rlTokens(t, "after a change (no claim yet: full)", qi, 10)
		rlTasks(b, 6)
		rlClaimN(b, 2)
		g, err := b.s.Queue(b.ctx, "q")
		b.must(err, "Queue")
		rlTokens(t, "Queue after two claims", g, 8)
		if g.RateLimit.PerSecond != 100 || g.RateLimit.Burst != 10 {
			t.Fatalf("Queue: rate_limit %+v", g.RateLimit)
		}
		rlTokens(t, "a lower burst caps the bucket", rlSet(b, norn.RateLimit{PerSecond: 100, Burst: 5}), 5)
		rlClaimN(b, 3)
		b.clock.Advance(10 * time.Millisecond)
		qs, err := b.s.Queues(b.ctx)
		b.must(err, "Queues")
		i := slices.IndexFunc(qs, func(q norn.QueueInfo) bool { return q.Name == "q" })
		if i < 0 || qs[i].RateLimit.PerSecond != 100 {
			t.Fatalf("Queues does not show q's rate limit: %+v", qs)
		}
		rlTokens(t, "Queues 10 ms after taking 3", qs[i], 3)
	})
}

func rateLimitCasesRateLimitBurstIsHonoured(t *testing.T, setup setupFunc) {
	t.Run("RateLimitBurstIsHonoured", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		rlSet(b, norn.RateLimit{PerSecond: 1, Burst: 3})
		rlTasks(b, 10)
		eqStrings(t, "first claim", rlClaimN(b, 10), []string{"t00", "t01", "t02"})
		b.claimNone("q")
		// Other queues are not held back.
		b.submit(norn.NewTask{ID: "other", Queue: "free"})
		if got := ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q", "free"}, N: 5})); !slices.Equal(got, []string{"other"}) {
			t.Fatalf("claim over q and free: %v, want only the free queue's task", got)
		}
	})
}

func rateLimitCasesRateLimitTokensRefillOverTime(t *testing.T, setup setupFunc) {
	t.Run("RateLimitTokensRefillOverTime", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		rlSet(b, norn.RateLimit{PerSecond: 2, Burst: 3})
		rlTasks(b, 20)
		if n := len(rlClaimN(b, 10)); n != 3 {
			t.Fatalf("first claim: %d rlTasks, want the burst of 3", n)
		}
		steps := []struct {
			after time.Duration
			want  int
		}{
			{400 * time.Millisecond, 0}, // 0.8 of a token
			{100 * time.Millisecond, 1}, // 1.0
			{250 * time.Millisecond, 0}, // 0.5
			{250 * time.Millisecond, 1},
			{time.Second, 2},
			{time.Hour, 3}, // refills up to the burst, no more
			{0, 0},
		}
		for i, s := range steps {
			b.clock.Advance(s.after)
			if n := len(rlClaimN(b, 10)); n != s.want {
				t.Fatalf("step %d (+%v): claimed %d, want %d", i, s.after, n, s.want)
			}
		}
	})
}

func rateLimitCasesRateLimitLongPollWakesWhenATokenComes(t *testing.T, setup setupFunc) {
	t.Run("RateLimitLongPollWakesWhenATokenComes", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		rlSet(b, norn.RateLimit{PerSecond: 10, Burst: 1})
		rlTasks(b, 2)
		eqStrings(t, "first claim", rlClaimN(b, 5), []string{"t00"})
		got := b.longPoll("q", 5)
		stillWaiting(t, got, 300*time.Millisecond, "the bucket was empty")
		b.clock.Advance(100 * time.Millisecond) // one token; nothing else happens in the store
		eqStrings(t, "long poll", ids(woken(t, got, "a token came")), []string{"t01"})
	})
}

func rateLimitCasesRateLimitRemovedReleasesEverything(t *testing.T, setup setupFunc) {
	t.Run("RateLimitRemovedReleasesEverything", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		rlSet(b, norn.RateLimit{PerSecond: 0.01, Burst: 1})
		rlTasks(b, 4)
		eqStrings(t, "first claim", rlClaimN(b, 5), []string{"t00"})
		got := b.longPoll("q", 5)
		stillWaiting(t, got, 200*time.Millisecond, "the bucket was empty")
		qi := rlSet(b, norn.RateLimit{})
		if !qi.RateLimit.IsZero() || qi.RateTokens != nil {
			t.Fatalf("after removal: rate_limit %+v, rlTokens %v", qi.RateLimit, qi.RateTokens)
		}
		eqStrings(t, "long poll after removal", ids(woken(t, got, "the rate limit was removed")), []string{"t01", "t02", "t03"})
		// Set again later, the bucket starts full.
		tasks2 := []norn.NewTask{{ID: "u1", Queue: "q"}, {ID: "u2", Queue: "q"}, {ID: "u3", Queue: "q"}}
		b.submit(tasks2...)
		rlTokens(t, "rlSet again", rlSet(b, norn.RateLimit{PerSecond: 0.01, Burst: 2}), 2)
		eqStrings(t, "claim after setting it again", rlClaimN(b, 5), []string{"u1", "u2"})
	})
}

func rateLimitCasesRateLimitBadInputChangesNothing(t *testing.T, setup setupFunc) {
	t.Run("RateLimitBadInputChangesNothing", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		rlSet(b, norn.RateLimit{PerSecond: 5, Burst: 2})
		before, err := s.Queue(b.ctx, "q")
		b.must(err, "Queue")
		for _, c := range []struct {
			name  string
			rl    norn.RateLimit
			field string
		}{
			{"NegativeRate", norn.RateLimit{PerSecond: -1}, "rate_limit.per_second"},
			{"NegativeBurst", norn.RateLimit{PerSecond: 1, Burst: -1}, "rate_limit.burst"},
			{"BurstWithoutRate", norn.RateLimit{Burst: 4}, "rate_limit.burst"},
			{"RateTooHigh", norn.RateLimit{PerSecond: 2e6}, "rate_limit.per_second"},
			{"BurstTooLarge", norn.RateLimit{PerSecond: 1, Burst: norn.MaxRateBurst + 1}, "rate_limit.burst"},
		} {
			t.Run(c.name, func(t *testing.T) {
				rl := c.rl
				// Together with a valid change that must not happen either.
				_, err := s.UpdateQueue(t.Context(), "q", norn.QueueUpdate{Paused: ptr(true), RateLimit: &rl})
				wantField(t, c.name, err, norn.ErrInvalidArgument, c.field)
				qi, err := s.Queue(t.Context(), "q")
				if err != nil {
					t.Fatal(err)
				}
				if qi.Paused || qi.RateLimit != before.RateLimit {
					t.Fatalf("after a refused update: paused %v, rate_limit %+v (was %+v)", qi.Paused, qi.RateLimit, before.RateLimit)
				}
			})
		}
	})
}

func rateLimitCasesRateLimitHeldBackIsCounted(t *testing.T, setup setupFunc) {
	t.Run("RateLimitHeldBackIsCounted", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		fr, ok := s.(norn.FlowReporter)
		if !ok {
			t.Skip("the store does not report flow figures (the server reports its own store's)")
		}
		rlSet(b, norn.RateLimit{PerSecond: 1, Burst: 2})
		_, err := s.UpdateQueue(b.ctx, "k", norn.QueueUpdate{MaxRunning: ptr(3), KeyLimit: ptr(1)})
		b.must(err, "UpdateQueue(k)")
		rlTasks(b, 5)
		b.submit(norn.NewTask{ID: "a1", Queue: "k", ConcurrencyKey: "a"}, norn.NewTask{ID: "a2", Queue: "k", ConcurrencyKey: "a"},
			norn.NewTask{ID: "b1", Queue: "k", ConcurrencyKey: "b"}, norn.NewTask{ID: "n1", Queue: "k"}, norn.NewTask{ID: "n2", Queue: "k"})
		rlClaimN(b, 4) // 2 taken, 2 held by the rate limit
		rlClaimN(b, 4) // 0 taken, 3 ready: 3 held
		// k: 5 ready, max_running room 3, a2 blocked by its key: a1, b1, n1.
		if got := ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"k"}, N: 10})); len(got) != 3 {
			t.Fatalf("claim of k: %v", got)
		}
		stats, err := fr.FlowStats(b.ctx)
		b.must(err, "FlowStats")
		want := []norn.FlowStat{
			{Queue: "k", Limited: true, Running: 3, Held: norn.Held{MaxRunning: 2}},
			{Queue: "q", Limited: true, Running: 2, Held: norn.Held{RateLimit: 5}},
		}
		if fmt.Sprint(stats) != fmt.Sprint(want) {
			t.Fatalf("FlowStats %+v, want %+v", stats, want)
		}
	})
}

func rateLimitCasesRateLimitHoldsUnderConcurrentClaimers(t *testing.T, setup setupFunc) {
	t.Run("RateLimitHoldsUnderConcurrentClaimers", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		ConcurrentRate(t, []norn.Store{s}, b.clock, b.ctx)
	})
}

func rlSet(b *testBundle, rl norn.RateLimit) norn.QueueInfo {
	b.t.Helper()
	qi, err := b.s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{RateLimit: &rl})
	b.must(err, "UpdateQueue(rate_limit %+v)", rl)
	return qi
}

func rlClaimN(b *testBundle, n int) []string {
	b.t.Helper()
	return ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n}))
}

func rlTasks(b *testBundle, n int) {
	b.t.Helper()
	var nts []norn.NewTask
	for i := range n {
		nts = append(nts, norn.NewTask{ID: fmt.Sprintf("t%02d", i), Queue: "q"})
	}
	b.submit(nts...)
}

func rlTokens(t *testing.T, what string, qi norn.QueueInfo, want float64) {
	t.Helper()
	if qi.RateTokens == nil || math.Abs(*qi.RateTokens-want) > 1e-6 {
		got := "none"
		if qi.RateTokens != nil {
			got = fmt.Sprint(*qi.RateTokens)
		}
		t.Fatalf("%s: rate_tokens %s, want %v", what, got, want)
	}
}

// ConcurrentRate checks that a rate limit holds with many concurrent
// claimers spread over stores (several instances of one cluster store, or
// one store) while the clock moves on in small steps: from the claimed
// tasks' assignment times, no interval [a, b] saw more than burst + rate ×
// (b − a) claims, and the claimers did get the tasks at about the rate.
// clock must be the stores' (injected) clock.
func ConcurrentRate(t *testing.T, stores []norn.Store, clock *FakeClock, ctx context.Context) {
	const (
		rate  = 200.0
		burst = 5
		n     = 150
	)
	s0 := stores[0]
	if _, err := s0.UpdateQueue(ctx, "rated", norn.QueueUpdate{RateLimit: &norn.RateLimit{PerSecond: rate, Burst: burst}}); err != nil {
		t.Fatal(err)
	}
	nts := make([]norn.NewTask, n)
	for i := range nts {
		nts[i] = norn.NewTask{Queue: "rated"}
	}
	if _, err := s0.Submit(ctx, nts...); err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	claimed := claimWhileTheClockRuns(t, stores, clock, ctx, "rated", n, 8)
	var at []time.Time
	for _, c := range claimed {
		at = append(at, c.at)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	withinRate(t, "the queue", at, burst, rate)
	// The window check above implies this; it says it in one line.
	if took := at[len(at)-1].Sub(start); took.Seconds() < (n-burst)/rate-1e-6 {
		t.Fatalf("%d claims in %v of clock time: faster than %v/s with burst %d", n, took, rate, burst)
	}
}

// claimedAt is a task a concurrent claimer got: its key and when.
type claimedAt struct {
	key string
	at  time.Time
}

// claimWhileTheClockRuns has workers claimers spread over stores claim
// queue's n tasks while the clock moves on in 5 ms steps, and returns
// each task's key and assignment time. It fails on an error, a task
// claimed twice, or tasks left after two minutes.
func claimWhileTheClockRuns(t *testing.T, stores []norn.Store, clock *FakeClock, ctx context.Context, queue string,
	n, workers int) map[string]claimedAt {
	var (
		mu      sync.Mutex
		claimed = map[string]claimedAt{}
		failure error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			s := stores[w%len(stores)]
			for ctx.Err() == nil {
				ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: fmt.Sprintf("w%d", w), Queues: []string{queue}, N: 4,
					Wait: dur(20 * time.Millisecond), Timeout: dur(time.Hour)})
				mu.Lock()
				if err != nil && ctx.Err() == nil && failure == nil {
					failure = fmt.Errorf("Claim: %w", err)
				}
				for _, tk := range ts {
					if _, dup := claimed[tk.ID]; dup && failure == nil {
						failure = fmt.Errorf("task %s claimed twice", tk.ID)
					}
					claimed[tk.ID] = claimedAt{tk.ConcurrencyKey, tk.History[len(tk.History)-1].Time}
				}
				done := len(claimed) == n || failure != nil
				mu.Unlock()
				if done {
					cancel()
				}
			}
		})
	}
	deadline := time.Now().Add(2 * time.Minute)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // lets claims run between the clock's steps
		clock.Advance(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	if len(claimed) != n {
		t.Fatalf("%d of %d tasks claimed before the deadline", len(claimed), n)
	}
	return claimed
}

// withinRate fails if in the sorted assignment times at some interval
// [a, b] saw more than burst + rate × (b − a) claims.
func withinRate(t *testing.T, what string, at []time.Time, burst int, rate float64) {
	t.Helper()
	for i := range at {
		for j := i; j < len(at); j++ {
			if allowed := float64(burst) + rate*at[j].Sub(at[i]).Seconds(); float64(j-i+1) > allowed+1e-6 {
				t.Fatalf("%s: %d claims in %v: more than burst %d + %v/s allows (%.2f)", what, j-i+1, at[j].Sub(at[i]), burst, rate, allowed)
			}
		}
	}
}

// longPoll starts a claim of up to n tasks of queue that waits up to a
// minute; its tasks arrive on the channel.
func (b *testBundle) longPoll(queue string, n int) <-chan []*norn.Task {
	got := make(chan []*norn.Task, 1)
	go func() {
		ts, _ := b.s.Claim(b.ctx, norn.ClaimRequest{Worker: "poller", Queues: []string{queue}, N: n, Wait: dur(time.Minute)})
		got <- ts
	}()
	return got
}

// stillWaiting fails if the long poll returned within d (while, as why
// says, it had nothing to take).
func stillWaiting(t *testing.T, got <-chan []*norn.Task, d time.Duration, why string) {
	t.Helper()
	select {
	case ts := <-got:
		t.Fatalf("long poll returned %v while %s", ids(ts), why)
	case <-time.After(d):
	}
}

// woken returns the long poll's tasks once it returns, failing after 30 s
// (it should have woken when what happened).
func woken(t *testing.T, got <-chan []*norn.Task, what string) []*norn.Task {
	t.Helper()
	select {
	case ts := <-got:
		return ts
	case <-time.After(30 * time.Second):
		t.Fatalf("long poll did not wake when %s", what)
		return nil
	}
}
