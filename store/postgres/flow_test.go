package postgres

import (
	"context"
	"fmt"
	"strings"
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
	stores, _ := openInstances(t, 3)
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
	stores, all := openInstances(t, 4)
	for _, s := range all {
		s.flow.slots, s.flow.cap = 3, 2
	}
	storetest.ConcurrentLimitsCase(t, stores, context.Background(), storetest.LimitsCase{MaxRunning: 10, KeyLimit: 10,
		Keys: 4, PerKey: 60, Workers: 16, N: 3, HoldMs: 4})
	shared, exclusive, _ := claimPaths(all)
	t.Logf("%d shared claims, %d exclusive", shared, exclusive)
	if shared == 0 || exclusive == 0 {
		t.Fatalf("%d shared claims, %d exclusive: the edge between the paths was not exercised", shared, exclusive)
	}
}

// openInstances opens n store instances on one schema, as n norn server
// nodes: as the conformance suite's stores, and as themselves.
func openInstances(t *testing.T, n int) ([]norn.Store, []*Store) {
	t.Helper()
	first := openTest(t, nil, nil)
	stores, all := []norn.Store{first}, []*Store{first}
	for range n - 1 {
		s, err := Open(context.Background(), Config{URL: first.cfg.URL, Schema: first.cfg.Schema})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		stores, all = append(stores, s), append(all, s)
	}
	return stores, all
}

// claimPaths sums, over store instances, the claims that took each flow
// path.
func claimPaths(all []*Store) (shared, exclusive, keyed int64) {
	for _, s := range all {
		shared += s.flow.claims[pathShared].Load()
		exclusive += s.flow.claims[pathExclusive].Load()
		keyed += s.flow.claims[pathKeyed].Load()
	}
	return shared, exclusive, keyed
}

// TestRateLimitAcrossInstances runs the concurrent rate-limit check with
// claimers spread over three store instances sharing one schema and one
// (injected) clock: the bucket in the database must hold the rate across
// them.
func TestRateLimitAcrossInstances(t *testing.T) {
	clock := storetest.NewFakeClock()
	storetest.ConcurrentRate(t, threeInstances(t, clock), clock, context.Background())
}

// threeInstances opens three stores on one schema (three nodes of a
// cluster) with clock, their monitors off.
func threeInstances(t *testing.T, clock *storetest.FakeClock) []norn.Store {
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
	return stores
}

// TestKeyRateLimitAcrossInstances: per-key rate limits hold exactly with
// claimers on three instances of one schema (three nodes of a cluster).
func TestKeyRateLimitAcrossInstances(t *testing.T) {
	clock := storetest.NewFakeClock()
	storetest.ConcurrentKeyRate(t, threeInstances(t, clock), clock, context.Background())
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
	if n := first.flow.claims[pathExclusive].Load() + second.flow.claims[pathExclusive].Load(); n != 0 {
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

// flowClaim claims up to n tasks of queue q and returns how many it got.
func flowClaim(t *testing.T, s *Store, q string, n int) int {
	t.Helper()
	ts, err := s.Claim(context.Background(), norn.ClaimRequest{Worker: "w", Queues: []string{q}, N: n})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return len(ts)
}

func flowQueue(t *testing.T, s *Store, q string, maxRunning, tasks int) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.UpdateQueue(ctx, q, norn.QueueUpdate{MaxRunning: &maxRunning}); err != nil {
		t.Fatal(err)
	}
	nt := make([]norn.NewTask, tasks)
	for i := range nt {
		nt[i] = norn.NewTask{Queue: q}
	}
	if _, err := s.Submit(ctx, nt...); err != nil {
		t.Fatal(err)
	}
}

// TestFlowSharedPathCountsRarely: shared claims of a queue far from its
// limit bound its running tasks by the last count plus what was admitted
// since, so they count them only now and then, not every claim (the count
// walks the running tasks' index entries, dead ones included).
func TestFlowSharedPathCountsRarely(t *testing.T) {
	s := openTest(t, nil, nil)
	flowQueue(t, s, "far", 1<<20, 60)
	got := 0
	for range 60 {
		got += flowClaim(t, s, "far", 1)
	}
	shared, counts := s.flow.claims[pathShared].Load(), s.flow.counts.Load()
	t.Logf("%d tasks, %d shared claims, %d counted", got, shared, counts)
	if got != 60 || shared != 60 {
		t.Fatalf("%d tasks in %d shared claims, want 60 in 60", got, shared)
	}
	if counts > 2 {
		t.Fatalf("%d of 60 shared claims counted the running tasks", counts)
	}
}

// TestFlowSlotBoundSeesExclusiveClaims: a shared claim that bounds the
// running tasks by an older count must see what exclusive claims admitted
// since. One slot, shared claims of one task, so the shared path needs at
// most 9 running of max_running 10: a shared claim counts (0), exclusive
// claims then fill the queue to 10, and the next claim must not take an
// eleventh task on the strength of that count.
func TestFlowSlotBoundSeesExclusiveClaims(t *testing.T) {
	s := openTest(t, nil, nil)
	s.flow.slots, s.flow.cap = 1, 1
	flowQueue(t, s, "ex", 10, 20)
	if n := flowClaim(t, s, "ex", 1); n != 1 || s.flow.claims[pathShared].Load() != 1 {
		t.Fatalf("first claim: %d tasks, %d shared claims", n, s.flow.claims[pathShared].Load())
	}
	s.flow.mark(&s.flow.exclusive, "ex", true)
	if n := flowClaim(t, s, "ex", 9); n != 9 {
		t.Fatalf("exclusive claim: %d tasks, want 9", n)
	}
	s.flow.mu.Lock()
	delete(s.flow.exclusive, "ex")
	s.flow.mu.Unlock()
	if n := flowClaim(t, s, "ex", 1); n != 0 {
		t.Fatalf("a claim at max_running 10 with 10 running took %d more", n)
	}
}

// TestFlowSlotBoundIgnoresOtherSettings: a count made before the queue's
// settings changed is not used: while the queue was unlimited its claims
// admitted tasks without the slot rows.
func TestFlowSlotBoundIgnoresOtherSettings(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, nil)
	s.flow.slots, s.flow.cap = 1, 1
	flowQueue(t, s, "ver", 10, 20)
	if n := flowClaim(t, s, "ver", 1); n != 1 {
		t.Fatalf("first claim: %d tasks", n)
	}
	zero, ten := 0, 10
	if _, err := s.UpdateQueue(ctx, "ver", norn.QueueUpdate{MaxRunning: &zero}); err != nil {
		t.Fatal(err)
	}
	for running := 1; running < 10; {
		n := flowClaim(t, s, "ver", 10-running)
		if n == 0 {
			t.Fatalf("unlimited queue: no task at %d running", running)
		}
		running += n
	}
	if _, err := s.UpdateQueue(ctx, "ver", norn.QueueUpdate{MaxRunning: &ten}); err != nil {
		t.Fatal(err)
	}
	if n := flowClaim(t, s, "ver", 1); n != 0 {
		t.Fatalf("a claim at max_running 10 with 10 running took %d more", n)
	}
}

// TestFlowLimitedPickPastTheHead: when the first ready tasks of a limited
// queue (more than a pick reads first) belong to keys at their limits, the
// pick reaches the tasks behind them key by key, as the limits admit and
// in claim order, and the tasks without a key there chunk by chunk.
func TestFlowLimitedPickPastTheHead(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T, u norn.QueueUpdate) *Store {
		t.Helper()
		s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
		if _, err := s.UpdateQueue(ctx, "kq", u); err != nil {
			t.Fatal(err)
		}
		return s
	}
	submit := func(t *testing.T, s *Store, keys ...string) []string {
		t.Helper()
		nts := make([]norn.NewTask, len(keys))
		for i, k := range keys {
			nts[i] = norn.NewTask{Queue: "kq", ConcurrencyKey: k}
		}
		got, err := s.Submit(ctx, nts...)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(got))
		for i, g := range got {
			ids[i] = g.Task.ID
		}
		return ids
	}
	backlog := func(t *testing.T, s *Store, key string) {
		t.Helper()
		// What a claim of 100 reads before it looks past (4 × 100 + 16,
		// then pickHead), and 100 more.
		keys := make([]string, 4*100+16+pickHead+100)
		for i := range keys {
			keys[i] = key
		}
		submit(t, s, keys...)
	}
	claim := func(t *testing.T, s *Store, n int) ([]string, map[string]int) {
		t.Helper()
		ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"kq"}, N: n, Timeout: norn.Duration(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		byKey := map[string]int{}
		for _, tk := range ts {
			ids = append(ids, tk.ID)
			byKey[tk.ConcurrencyKey]++
		}
		return ids, byKey
	}
	t.Run("ReachesOtherKeysAsTheirLimitsAdmit", func(t *testing.T) {
		s := setup(t, norn.QueueUpdate{KeyLimit: ptr(2), Keys: map[string]*norn.KeySettings{"d": {Limit: 3}}})
		submit(t, s, "a", "a", "b")
		if _, got := claim(t, s, 10); got["a"] != 2 || got["b"] != 1 {
			t.Fatalf("first claim %v, want a 2 and b 1", got)
		}
		backlog(t, s, "a")
		submit(t, s, "b", "b", "b", "c", "c", "c", "d", "d", "d", "d", "e")
		if _, got := claim(t, s, 100); len(got) != 4 || got["b"] != 1 || got["c"] != 2 || got["d"] != 3 || got["e"] != 1 {
			t.Fatalf("claimed %v behind a's backlog, want b 1 (one running), c 2, d 3 (its own limit), e 1", got)
		}
		if _, got := claim(t, s, 100); len(got) != 0 {
			t.Fatalf("claimed %v with every key at its limit, want nothing", got)
		}
	})

	t.Run("TakesTheKeysTasksInClaimOrder", func(t *testing.T) {
		s := setup(t, norn.QueueUpdate{KeyLimit: ptr(1), MaxRunning: ptr(1000)})
		submit(t, s, "a")
		claim(t, s, 1)
		backlog(t, s, "a")
		var want []string
		for _, k := range []string{"x", "y", "z", "w"} {
			want = append(want, submit(t, s, k)...)
		}
		got, _ := claim(t, s, 3)
		if fmt.Sprint(got) != fmt.Sprint(want[:3]) {
			t.Fatalf("claimed %v, want the first three in claim order %v", got, want[:3])
		}
	})

	t.Run("FindsTasksWithoutAKeyChunkByChunk", func(t *testing.T) {
		s := setup(t, norn.QueueUpdate{KeyLimit: ptr(1)})
		s.flow.keylessChunk = 400
		submit(t, s, "a")
		claim(t, s, 1)
		backlog(t, s, "a") // 1,124 of a past the first 416 a claim of 100 reads
		submit(t, s, "", "b", "")
		// Each claim reads the next 400 tasks past the first 416: a's,
		// a's, then the rest with the two without a key. b is found by its
		// key at once.
		if _, got := claim(t, s, 100); len(got) != 1 || got["b"] != 1 {
			t.Fatalf("first claim %v, want b's task", got)
		}
		if _, got := claim(t, s, 100); len(got) != 0 {
			t.Fatalf("second claim %v, want nothing", got)
		}
		if _, got := claim(t, s, 100); len(got) != 1 || got[""] != 2 {
			t.Fatalf("third claim %v, want the two tasks without a key", got)
		}
		// At the end of the queue the next read starts past the head again.
		submit(t, s, "")
		if _, got := claim(t, s, 100); len(got) != 0 {
			t.Fatalf("fourth claim %v, want nothing: it reads the first 400 past the head", got)
		}
		for range 2 {
			claim(t, s, 100)
		}
		if _, ok := s.flow.chunkFrom("kq"); ok {
			t.Fatalf("the read did not start over at the end of the queue")
		}
	})
}

// TestLimitedPickPlans checks the plans of the limited pick's reads past
// the head, made with statistics taken while the table was empty (cached
// generic plans, sorts off as in the exclusive claim): the keys must be
// listed and read through tasks_key_ready, never by a scan of tasks_claim
// filtered by key (which would step over the held-back backlog), and the
// reads past a position must start their index scans there.
func TestLimitedPickPlans(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	if err := s.withConn(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, s.q(`ANALYZE {s}.tasks`))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		nts := make([]norn.NewTask, 1000)
		for j := range nts {
			nts[j] = norn.NewTask{Queue: "q", ConcurrencyKey: "big", Priority: uint32(j % 2)}
			if j%100 == 0 {
				nts[j].ConcurrencyKey = fmt.Sprintf("k%d", i*10+j/100)
			}
		}
		if _, err := s.Submit(ctx, nts...); err != nil {
			t.Fatal(err)
		}
	}
	// As the exclusive claim runs them (pgx prepares them: custom plans,
	// then perhaps a generic one), and forced generic.
	for _, setup := range []string{noSeqScanSQL, noSeqScanSQL + ", set_config('plan_cache_mode', 'force_generic_plan', true)"} {
		p := genericPlan(t, s, setup, s.pastHeadSQL(), `'q', 1, now(), 'x', '{"big":0}', 5`)
		if strings.Count(p, "Scan using tasks_key_ready") != 3 || strings.Contains(p, "tasks_claim") || strings.Contains(p, "Seq Scan on tasks") ||
			!strings.Contains(p, "(priority < ") || !strings.Contains(p, "(ROW(ready_at, id) > ROW(") {
			t.Errorf("the keys past the head are not read through tasks_key_ready from the position:\n%s", p)
		}
		p = genericPlan(t, s, setup, s.pastSQL(), `'q', 1, now(), 'x', 2048`)
		if strings.Count(p, "Index Scan using tasks_claim") != 2 || strings.Contains(p, "Seq Scan on tasks") ||
			!strings.Contains(p, "(priority < ") || !strings.Contains(p, "(ROW(ready_at, id) > ROW(") {
			t.Errorf("the read past the head does not start tasks_claim's scans at the position:\n%s", p)
		}
	}
}
