package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/storetest"
)

// TestFlowLimitsAcrossInstances runs the concurrent flow-limit check with
// claimers spread over three store instances sharing one schema, as three
// norn server nodes would: the limits must hold across them.
func TestFlowLimitsAcrossInstances(t *testing.T) {
	first := openTest(t, nil, nil)
	stores := []norn.Store{first}
	for range 2 {
		s, err := Open(context.Background(), Config{URL: first.cfg.URL, Schema: first.cfg.Schema})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	storetest.ConcurrentLimits(t, stores, context.Background())
}

// TestFlowSharedPathAtTheLimit races claimers of four store instances
// right where claims switch between the shared path and the exclusive one:
// with 3 slots and shared claims of at most 2 tasks, a claim is shared
// only while the queue has at most 10 − 3×2 = 4 running tasks (max_running
// and key_limit 10), and sixteen claimers holding their tasks a few
// milliseconds keep the count around that edge and at the limit, where
// three shared claims in flight would exceed it if one counted too late. The limits must hold throughout
// (storetest.ConcurrentLimitsCase), and both paths must have been taken.
func TestFlowSharedPathAtTheLimit(t *testing.T) {
	first := openTest(t, nil, nil)
	stores := []norn.Store{first}
	all := []*Store{first}
	for range 3 {
		s, err := Open(context.Background(), Config{URL: first.cfg.URL, Schema: first.cfg.Schema})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		stores, all = append(stores, s), append(all, s)
	}
	for _, s := range all {
		s.flow.slots, s.flow.cap = 3, 2
	}
	storetest.ConcurrentLimitsCase(t, stores, context.Background(), storetest.LimitsCase{MaxRunning: 10, KeyLimit: 10,
		Keys: 4, PerKey: 60, Workers: 16, N: 3, HoldMs: 4})
	var shared, exclusive int64
	for _, s := range all {
		shared += s.flow.sharedClaims.Load()
		exclusive += s.flow.exclusiveClaims.Load()
	}
	t.Logf("%d shared claims, %d exclusive", shared, exclusive)
	if shared == 0 || exclusive == 0 {
		t.Fatalf("%d shared claims, %d exclusive: the edge between the paths was not exercised", shared, exclusive)
	}
}

// TestRateLimitAcrossInstances runs the concurrent rate-limit check with
// claimers spread over three store instances sharing one schema and one
// (injected) clock: the bucket in the database must hold the rate across
// them.
func TestRateLimitAcrossInstances(t *testing.T) {
	clock := storetest.NewFakeClock()
	first := openTest(t, clock, func(c *Config) { c.DisableMonitor = true })
	stores := []norn.Store{first}
	for range 2 {
		s, err := Open(context.Background(), Config{URL: first.cfg.URL, Schema: first.cfg.Schema, Clock: clock, DisableMonitor: true})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	storetest.ConcurrentRate(t, stores, clock, context.Background())
}

// TestRateLimitWakesOnlyForTokens has six long-polling claimers on one
// node burn down a queue limited to 25 tasks/s with a burst of 1. Each
// token must wake about one of them, not all six: the claims the rate
// limit sent back with nothing (the herd: about five per token when every
// waiter wakes) must stay well under two per claimed task — the winner's
// next claim, which finds the bucket empty, is one.
func TestRateLimitWakesOnlyForTokens(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.PollInterval = time.Minute })
	if _, err := s.UpdateQueue(ctx, "rl", norn.QueueUpdate{RateLimit: &norn.RateLimit{PerSecond: 25, Burst: 1}}); err != nil {
		t.Fatal(err)
	}
	const tasks, claimers = 40, 6
	nts := make([]norn.NewTask, tasks)
	for i := range nts {
		nts[i] = norn.NewTask{Queue: "rl"}
	}
	if _, err := s.Submit(ctx, nts...); err != nil {
		t.Fatal(err)
	}
	var claimed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, claimers)
	for w := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("w%d", w)
			for claimed.Load() < tasks {
				ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: worker, Queues: []string{"rl"}, N: 1, Wait: norn.Duration(500 * time.Millisecond)})
				if err != nil {
					errs <- err
					return
				}
				for _, tk := range ts {
					claimed.Add(1)
					if err := s.Complete(ctx, norn.LeaseRef{TaskID: tk.ID, Worker: worker, Lease: tk.Lease}, nil); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	empty := s.rate.emptied.Load()
	t.Logf("%d claims came back empty for %d tasks", empty, claimed.Load())
	if empty > 2*tasks {
		t.Fatalf("%d claims came back empty for %d tasks: every token woke every waiter", empty, tasks)
	}
}

// TestRateLimitClaimsDoNotSerialize claims from a rate-limited queue whose
// limit cannot bind while another instance's claim of it is in flight on
// the shared path (a connection holding the queue's gate in shared mode
// until the test ends). The claim must take its tokens in a statement of
// its own and claim on the shared path beside it; a claim that takes the
// gate exclusively for the bucket waits for the other one to commit, and
// runs out of time here.
func TestRateLimitClaimsDoNotSerialize(t *testing.T) {
	ctx := context.Background()
	first := openTest(t, nil, nil)
	second, err := Open(ctx, Config{URL: first.cfg.URL, Schema: first.cfg.Schema})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { second.Close() })
	if _, err := first.UpdateQueue(ctx, "rl", norn.QueueUpdate{RateLimit: &norn.RateLimit{PerSecond: 1_000_000, Burst: 1_000_000}}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Submit(ctx, norn.NewTask{Queue: "rl"}, norn.NewTask{Queue: "rl"}, norn.NewTask{Queue: "rl"}); err != nil {
		t.Fatal(err)
	}
	inFlight, err := pgx.Connect(ctx, first.cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inFlight.Close(context.Background()) })
	if _, err := inFlight.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := inFlight.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))`, first.channel+"/flow/rl"); err != nil {
		t.Fatal(err)
	}
	for i, s := range []*Store{first, second, second} {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ts, err := s.Claim(cctx, norn.ClaimRequest{Worker: "w", Queues: []string{"rl"}, N: 1})
		cancel()
		if err != nil || len(ts) != 1 {
			t.Fatalf("claim %d beside a shared claim in flight: %d tasks, %v", i, len(ts), err)
		}
	}
	if n := first.flow.exclusiveClaims.Load() + second.flow.exclusiveClaims.Load(); n != 0 {
		t.Fatalf("%d claims took the exclusive path", n)
	}
	// The unused tokens went back: three claims spent three tokens.
	var tokens float64
	if err := inFlight.QueryRow(ctx, first.q(`SELECT tokens FROM {s}.queue_buckets WHERE queue = 'rl'`)).Scan(&tokens); err != nil {
		t.Fatal(err)
	}
	if tokens < 1_000_000-3 || tokens > 1_000_000 {
		t.Fatalf("bucket holds %v tokens after three claims of one task from a full bucket of 1,000,000", tokens)
	}
}
