package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/storetest"
)

// TestFlowKeyedPath: a queue whose key limits are small and max_running
// far (or none) is claimed on the keyed path, each behaviour on a fresh
// schema.
func TestFlowKeyedPath(t *testing.T) {
	ctx := context.Background()
	type bundle struct {
		s *Store
	}
	setup := func(t *testing.T, u norn.QueueUpdate, tasks map[string]int) bundle {
		t.Helper()
		s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
		if _, err := s.UpdateQueue(ctx, "kq", u); err != nil {
			t.Fatal(err)
		}
		var nts []norn.NewTask
		for key, n := range tasks {
			for range n {
				nts = append(nts, norn.NewTask{Queue: "kq", ConcurrencyKey: key})
			}
		}
		if _, err := s.Submit(ctx, nts...); err != nil {
			t.Fatal(err)
		}
		return bundle{s: s}
	}
	claim := func(t *testing.T, s *Store, n int) map[string]int {
		t.Helper()
		ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"kq"}, N: n, Timeout: norn.Duration(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, tk := range ts {
			got[tk.ConcurrencyKey]++
		}
		return got
	}
	paths := func(s *Store) (keyed, exclusive, shared int64) {
		return s.flow.keyedClaims.Load(), s.flow.exclusiveClaims.Load(), s.flow.sharedClaims.Load()
	}

	t.Run("SmallKeyLimitTakesTheKeyedPath", func(t *testing.T) {
		keys := map[string]int{}
		for k := range 50 {
			keys[fmt.Sprintf("k%d", k)] = 3
		}
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(10)}, keys)
		// Limit 10, 4 slots: one task per key and claim (m = 1).
		for round := 1; round <= 3; round++ {
			got := claim(t, b.s, 1000)
			if len(got) != 50 {
				t.Fatalf("round %d: claimed tasks of %d keys, want all 50", round, len(got))
			}
			for k, n := range got {
				if n != 1 {
					t.Fatalf("round %d: %d tasks of %s in one claim, want 1", round, n, k)
				}
			}
		}
		if k, x, sh := paths(b.s); k != 3 || x != 0 || sh != 0 {
			t.Fatalf("keyed %d, exclusive %d, shared %d claims; want 3 keyed only", k, x, sh)
		}
	})

	t.Run("AdmitsAShareOfTheLimitPerClaim", func(t *testing.T) {
		// Limit 40: m = 40 / (2 × 4) = 5 per claim while the key has at
		// most 40 − 4 × 5 = 20 running.
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(40)}, map[string]int{"a": 100})
		for i := range 5 {
			if got := claim(t, b.s, 100)["a"]; got != 5 {
				t.Fatalf("claim %d: %d tasks, want 5", i, got)
			}
		}
		// 25 running: a is near (under 40, over 20). Nothing else to
		// claim, so the claim goes to the exclusive path, which admits up
		// to the limit exactly.
		if got := claim(t, b.s, 100)["a"]; got != 15 {
			k, x, _ := paths(b.s)
			t.Fatalf("claim at 25 running: %d tasks, want the exclusive path's 15 (keyed %d, exclusive %d)", got, k, x)
		}
		if k, x, _ := paths(b.s); k != 6 || x != 1 {
			t.Fatalf("keyed %d, exclusive %d claims; want 6 and 1", k, x)
		}
	})

	t.Run("LeavesANearKeyForTheExclusivePath", func(t *testing.T) {
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(10)}, map[string]int{"a": 20, "b": 20})
		b.s.flow.recheck = time.Millisecond
		for i := range 7 {
			// A claim reads as many candidates as it wants: 40 cover both keys.
			if got := claim(t, b.s, 40); got["a"] != 1 || got["b"] != 1 {
				t.Fatalf("claim %d: %v, want one of each", i, got)
			}
		}
		// Both keys have 7 running: 7 + 4 > 10, near. The keyed claim
		// admits nothing and the exclusive one fills both to 10.
		got := claim(t, b.s, 100)
		if got["a"] != 3 || got["b"] != 3 {
			t.Fatalf("claim at 7 running: %v, want 3 of each", got)
		}
		if got := claim(t, b.s, 100); len(got) != 0 {
			t.Fatalf("claim at the limit: %v, want nothing", got)
		}
	})

	t.Run("KeylessAndUnlimitedKeysAreNotHeldBack", func(t *testing.T) {
		// Only k0 has a limit (its own, 8): m = 1, one per claim.
		b := setup(t, norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"k0": {Limit: 8}}},
			map[string]int{"k0": 10, "free": 30, "": 30})
		got := claim(t, b.s, 1000)
		if got["k0"] != 1 || got["free"] != 30 || got[""] != 30 {
			t.Fatalf("claimed %v; want 1 of k0, 30 of free, 30 without a key", got)
		}
		if k, _, _ := paths(b.s); k != 1 {
			t.Fatalf("%d keyed claims, want 1", k)
		}
	})

	t.Run("KeyLimitUnderTwiceTheSlotsIsExclusive", func(t *testing.T) {
		// Limit 7: the keyed margin (4 × 1) would leave a key only 3.
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(7)}, map[string]int{"a": 10})
		if got := claim(t, b.s, 10)["a"]; got != 7 {
			t.Fatalf("claimed %d, want 7", got)
		}
		if k, x, _ := paths(b.s); k != 0 || x != 1 {
			t.Fatalf("keyed %d, exclusive %d claims; want 0 and 1", k, x)
		}
	})

	t.Run("CountsTasksThatStartedBeforeTheLimit", func(t *testing.T) {
		// Ten tasks of a run, claimed by plain claims before the queue had
		// limits (they wrote no running_key); the limit set then must count
		// them on the keyed path.
		b := setup(t, norn.QueueUpdate{}, map[string]int{"a": 20})
		if got := claim(t, b.s, 10)["a"]; got != 10 {
			t.Fatalf("plain claim: %d, want 10", got)
		}
		if _, err := b.s.UpdateQueue(ctx, "kq", norn.QueueUpdate{KeyLimit: ptr(10)}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.s.Submit(ctx, norn.NewTask{Queue: "kq", ConcurrencyKey: "b"}); err != nil {
			t.Fatal(err)
		}
		got := claim(t, b.s, 100)
		if got["a"] != 0 || got["b"] != 1 {
			t.Fatalf("claimed %v at a's limit; want only b's task", got)
		}
		if k, x, _ := paths(b.s); k != 1 || x != 0 {
			t.Fatalf("keyed %d, exclusive %d claims; want one keyed", k, x)
		}
	})

	t.Run("NearMaxRunningGoesExclusive", func(t *testing.T) {
		// max_running 9,000 is over the shared margin (8 × 1,000), so the
		// queue is keyed; 2,000 running tasks put the bound within the
		// margin, and the claim must count exactly.
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(10), MaxRunning: ptr(9000)}, map[string]int{"": 2100})
		claim(t, b.s, 1000)
		claim(t, b.s, 1000)
		k0, x0, _ := paths(b.s)
		if got := claim(t, b.s, 1000)[""]; got != 100 {
			t.Fatalf("claimed %d, want the last 100", got)
		}
		if k, x, _ := paths(b.s); k0 != 2 || x != x0+1 || k != k0 {
			t.Fatalf("keyed %d→%d, exclusive %d→%d claims: the claim near max_running was not exclusive", k0, k, x0, x)
		}
	})
}

// TestFlowKeyedPathAtTheLimit races claimers of four store instances on a
// queue on the keyed path, with two keys kept at and around their limits
// (8, and k0's own 12) by sixteen claimers holding their tasks a few
// milliseconds: keyed claims in flight at once must never over-admit a
// key (storetest.ConcurrentLimitsCase), and both the keyed path and the
// exclusive one (for keys near their limit) must have been taken.
func TestFlowKeyedPathAtTheLimit(t *testing.T) {
	stores, all := openInstances(t, 4)
	for _, s := range all {
		s.flow.recheck = time.Millisecond
	}
	storetest.ConcurrentLimitsCase(t, stores, context.Background(), storetest.LimitsCase{MaxRunning: 1 << 20, KeyLimit: 8,
		FirstKeyLimit: 12, Keys: 2, PerKey: 300, Workers: 16, N: 4, HoldMs: 10})
	var keyed, exclusive int64
	for _, s := range all {
		keyed += s.flow.keyedClaims.Load()
		exclusive += s.flow.exclusiveClaims.Load()
	}
	t.Logf("%d keyed claims, %d exclusive", keyed, exclusive)
	if keyed == 0 || exclusive == 0 {
		t.Fatalf("%d keyed claims, %d exclusive: the edge between the paths was not exercised", keyed, exclusive)
	}
}

// TestUpdateQueueWaitsForClaimsInFlight: a change of a queue's settings
// waits for the claims holding the flow gate, so no claim under the old
// limits is in flight with one under the new.
func TestUpdateQueueWaitsForClaimsInFlight(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	if _, err := s.UpdateQueue(ctx, "gq", norn.QueueUpdate{KeyLimit: ptr(10)}); err != nil {
		t.Fatal(err)
	}
	// A claim in flight: the gate held in shared mode, as claims take it.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))`, s.channel+"/flow/gq"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.UpdateQueue(ctx, "gq", norn.QueueUpdate{KeyLimit: ptr(5)})
		done <- err
	}()
	// The update waits for the gate.
	waitUntil(t, "the update waiting for the flow gate", 10*time.Second, func() bool {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND mode = 'ExclusiveLock'`).Scan(&n)
		return err == nil && n > 0
	})
	select {
	case err := <-done:
		t.Fatalf("UpdateQueue returned (%v) while a claim held the gate", err)
	default:
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	qi, err := s.Queue(ctx, "gq")
	if err != nil || qi.KeyLimit != 5 {
		t.Fatalf("key limit %d (%v) after the update, want 5", qi.KeyLimit, err)
	}
}

// TestPlainClaimWaitsForQueueUpdate: the plain claim of an unlimited
// queue takes the flow gate in shared mode, so a change of the queue's
// settings (the gate held exclusively) holds it back: no plain claim that
// read the queue unlimited commits after limits took effect.
func TestPlainClaimWaitsForQueueUpdate(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	if _, err := s.Submit(ctx, norn.NewTask{Queue: "pq"}); err != nil {
		t.Fatal(err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.channel+"/flow/pq"); err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() {
		ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"pq"}, N: 1})
		if err != nil {
			t.Error(err)
		}
		done <- len(ts)
	}()
	waitUntil(t, "the plain claim waiting for the flow gate", 10*time.Second, func() bool {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND mode = 'ShareLock'`).Scan(&n)
		return err == nil && n > 0
	})
	select {
	case n := <-done:
		t.Fatalf("the claim returned %d tasks while an update held the gate", n)
	default:
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != 1 {
		t.Fatalf("claimed %d tasks after the update, want 1", n)
	}
}
