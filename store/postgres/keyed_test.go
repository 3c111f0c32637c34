package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/jackc/pgx/v5"

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
		return s.flow.claims[pathKeyed].Load(), s.flow.claims[pathExclusive].Load(), s.flow.claims[pathShared].Load()
	}

	t.Run("SmallKeyLimitTakesTheKeyedPath", func(t *testing.T) {
		keys := map[string]int{}
		for k := range 20 {
			keys[fmt.Sprintf("k%d", k)] = 12
		}
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(10)}, keys)
		got := claim(t, b.s, 1000)
		if len(got) != 20 {
			t.Fatalf("claimed tasks of %d keys, want all 20", len(got))
		}
		for k, n := range got {
			if n != 10 {
				t.Fatalf("%d tasks of %s, want its limit, 10", n, k)
			}
		}
		// Every key at its limit, and the claim read fewer candidates than
		// it wanted: nothing, and no exclusive claim.
		if got := claim(t, b.s, 1000); len(got) != 0 {
			t.Fatalf("claim at the limits: %v, want nothing", got)
		}
		if k, x, sh := paths(b.s); k != 2 || x != 0 || sh != 0 {
			t.Fatalf("keyed %d, exclusive %d, shared %d claims; want 2 keyed only", k, x, sh)
		}
	})

	t.Run("AdmitsUpToTheLimitLeftByRunningTasks", func(t *testing.T) {
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(40)}, map[string]int{"a": 100})
		if got := claim(t, b.s, 25)["a"]; got != 25 {
			t.Fatalf("first claim: %d tasks, want 25", got)
		}
		if got := claim(t, b.s, 100)["a"]; got != 15 {
			t.Fatalf("claim at 25 running: %d tasks, want 15", got)
		}
		if k, x, _ := paths(b.s); k != 2 || x != 0 {
			t.Fatalf("keyed %d, exclusive %d claims; want 2 and 0", k, x)
		}
	})

	t.Run("KeyLimitOneTakesTheKeyedPath", func(t *testing.T) {
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(1)}, map[string]int{"a": 10, "b": 10, "c": 10})
		if got := claim(t, b.s, 100); got["a"] != 1 || got["b"] != 1 || got["c"] != 1 {
			t.Fatalf("claimed %v, want one task of each key", got)
		}
		if got := claim(t, b.s, 100); len(got) != 0 {
			t.Fatalf("claim at the limit: %v, want nothing", got)
		}
		if k, x, _ := paths(b.s); k != 2 || x != 0 {
			t.Fatalf("keyed %d, exclusive %d claims; want 2 and 0", k, x)
		}
	})

	t.Run("KeysOfAnyTextRoundTrip", func(t *testing.T) {
		// Candidates go from the first statement to the second as array
		// literals: keys that need quoting there must come back the same.
		keys := map[string]int{}
		for _, k := range []string{`a,b`, `"q"`, `{x}`, `back\slash`, `NULL`, ` sp `, `ü€`, `'`} {
			keys[k] = 3
		}
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(1)}, keys)
		got := claim(t, b.s, 100)
		for k := range keys {
			if got[k] != 1 {
				t.Errorf("claimed %d tasks of key %q, want 1 (all: %v)", got[k], k, got)
			}
		}
		if len(got) != len(keys) {
			t.Fatalf("claimed %v, want one task of each of %d keys", got, len(keys))
		}
		if got := claim(t, b.s, 100); len(got) != 0 {
			t.Fatalf("claimed %v with every key at its limit, want nothing", got)
		}
	})

	t.Run("CountsTasksHeldBackByTheirKeys", func(t *testing.T) {
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(2)}, map[string]int{"a": 5})
		if got := claim(t, b.s, 10)["a"]; got != 2 {
			t.Fatalf("claimed %d, want 2", got)
		}
		stats, err := b.s.FlowStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(stats) != 1 || stats[0].Held != (norn.Held{KeyLimit: 3}) {
			t.Fatalf("flow stats %+v, want 3 held back by key_limit", stats)
		}
	})

	t.Run("ABlockedKeysBacklogDoesNotStopOtherKeys", func(t *testing.T) {
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(1)}, map[string]int{"a": 300})
		if _, err := b.s.Submit(ctx, norn.NewTask{Queue: "kq", ConcurrencyKey: "b"}); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, b.s, 1); got["a"] != 1 {
			t.Fatalf("first claim: %v, want a's first task", got)
		}
		// A claim of 1,000 finds b behind a's backlog among its
		// candidates.
		if got := claim(t, b.s, 1000); len(got) != 1 || got["b"] != 1 {
			t.Fatalf("claimed %v behind a's backlog, want b's task", got)
		}
		// A claim of ten reads ten of a's, all at a's limit: it goes on
		// to the exclusive path, which skips a and finds c.
		if _, err := b.s.Submit(ctx, norn.NewTask{Queue: "kq", ConcurrencyKey: "c"}); err != nil {
			t.Fatal(err)
		}
		if got := claim(t, b.s, 10); len(got) != 1 || got["c"] != 1 {
			t.Fatalf("claimed %v behind a's backlog, want c's task", got)
		}
		// Keyed claims that held candidates back in shared buckets claim
		// again holding those exclusively: more keyed claims than calls.
		if k, x, _ := paths(b.s); k < 3 || x != 1 {
			t.Fatalf("keyed %d, exclusive %d claims; want at least 3 and 1", k, x)
		}
	})

	t.Run("WaitsForABucketAnotherClaimHoldsExclusively", func(t *testing.T) {
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(10)}, map[string]int{"a": 5, "b": 5})
		// Another claim in flight holding a's bucket exclusively: the
		// claim waits for it (counting then what that claim admitted),
		// rather than leave a out or go to the exclusive path.
		tx := holdBucket(t, b.s, "kq", "a")
		got := make(chan map[string]int, 1)
		go func() { got <- claim(t, b.s, 100) }()
		awaitAdvisoryWaiter(t, b.s, "the claim to wait for a's bucket", "ShareLock")
		select {
		case g := <-got:
			t.Fatalf("claimed %v while a's bucket was held", g)
		default:
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		// Shared, a claim admits one task of a key of limit 10 (10 / (2 ×
		// keyedSlots), at least 1); the rest are held back, their buckets
		// become tight, and the same claim goes on holding those
		// exclusively, filling both keys to what they have.
		if g := <-got; g["a"] != 5 || g["b"] != 5 {
			t.Fatalf("claimed %v after a's bucket was released, want a's 5 and b's 5", g)
		}
		if k, x, _ := paths(b.s); k != 1 || x != 0 {
			t.Fatalf("keyed %d, exclusive %d claims; want 1 and 0", k, x)
		}
		if b.s.flow.tight("kq") == 0 {
			t.Fatal("no bucket marked tight after keys were held back in shared buckets")
		}
	})

	t.Run("SharedBucketsAdmitAtMostTheirShareOfAKey", func(t *testing.T) {
		// key_limit 16: a claim holding a's bucket shared admits 16 / (2 ×
		// keyedSlots) = 2 of a, and only while a's running tasks leave room
		// for every keyed claim in flight to do so.
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(16)}, map[string]int{"a": 40})
		// One keyed claim with every bucket shared, no retry.
		shared := func() int {
			t.Helper()
			var got int
			err := b.s.withConn(ctx, func(conn *pgx.Conn) error {
				b.s.flow.markTight("kq", 0)
				out, v, _, err := b.s.claimKeyed(ctx, conn, claimCall{queue: "kq", want: 40, worker: "w"}, true)
				if err == nil && v != sharedKeyed {
					err = fmt.Errorf("verdict %q, want keyed", v)
				}
				got = len(out)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		// Running (leased) 0, 2, 4, 6, 8: each + 4 × 2 ≤ 16, so 2 a claim.
		for i := range 5 {
			if n := shared(); n != 2 {
				t.Fatalf("shared claim %d took %d of a, want 2", i+1, n)
			}
		}
		// 10 running: 10 + 4 × 2 > 16.
		if n := shared(); n != 0 {
			t.Fatalf("a shared claim with 10 of 16 running took %d, want none", n)
		}
		if b.s.flow.tight("kq") == 0 {
			t.Fatal("a's bucket not marked tight after a was held back in it")
		}
	})

	t.Run("ReadsAllItWantsOverManyKeys", func(t *testing.T) {
		keys := map[string]int{}
		for k := range 300 {
			keys[fmt.Sprintf("k%d", k)] = 1
		}
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(5)}, keys)
		if got := claim(t, b.s, 1000); len(got) != 300 {
			t.Fatalf("claimed tasks of %d keys, want all 300", len(got))
		}
	})

	t.Run("HoldsOneLockPerBucketNotPerKey", func(t *testing.T) {
		keys := map[string]int{}
		for k := range 300 {
			keys[fmt.Sprintf("k%d", k)] = 1
		}
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(5)}, keys)
		// Another claim holds k7's bucket exclusively: the claim over 300
		// keys waits for it, holding the locks of the buckets before it in
		// bucket order (and the gate and a slot), never one per key.
		tx := holdBucket(t, b.s, "kq", "k7")
		got := make(chan map[string]int, 1)
		go func() { got <- claim(t, b.s, 1000) }()
		awaitAdvisoryWaiter(t, b.s, "the claim to wait for k7's bucket", "ShareLock")
		var held int
		if err := b.s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if want := bucketOf(t, b.s, "k7") + 2; held != want {
			t.Fatalf("the waiting claim holds %d advisory locks, want %d: the buckets before k7's, the gate and a slot", held, want)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if g := <-got; len(g) != 300 {
			t.Fatalf("claimed tasks of %d keys after the bucket was released, want all 300", len(g))
		}
	})

	t.Run("ReadsFewerCandidatesWhileKeysBind", func(t *testing.T) {
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(1)}, map[string]int{"a": 600})
		// It reads a's 600 and admits one: more than half held back.
		if got := claim(t, b.s, 1000); got["a"] != 1 {
			t.Fatalf("first claim: %v, want one of a", got)
		}
		var nts []norn.NewTask
		for k := range 300 {
			nts = append(nts, norn.NewTask{Queue: "kq", ConcurrencyKey: fmt.Sprintf("k%03d", k)})
		}
		if _, err := b.s.Submit(ctx, nts...); err != nil {
			t.Fatal(err)
		}
		// Keys bind, so the next keyed claim reads keyedNarrow candidates,
		// all of a's, admits none and goes to the exclusive path, which
		// skips a. A claim reading all it wants would have found the 300
		// keys' tasks behind a's 599 on the keyed path.
		k0, x0, _ := paths(b.s)
		if got := claim(t, b.s, 1000); len(got) != 300 || got["a"] != 0 {
			t.Fatalf("second claim: tasks of %d keys (%d of a), want one of each of the 300 others", len(got), got["a"])
		}
		if k, x, _ := paths(b.s); k != k0+1 || x != x0+1 {
			t.Fatalf("keyed %d→%d, exclusive %d→%d claims; want one of each", k0, k, x0, x)
		}
	})

	t.Run("HeldBackCountsOnlyKeysAtTheirLimits", func(t *testing.T) {
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(5)}, map[string]int{"a": 10})
		var nts []norn.NewTask
		for k := range 300 {
			nts = append(nts, norn.NewTask{Queue: "kq", ConcurrencyKey: fmt.Sprintf("k%03d", k)})
		}
		if _, err := b.s.Submit(ctx, nts...); err != nil {
			t.Fatal(err)
		}
		got := claim(t, b.s, 1000)
		if len(got) != 301 || got["a"] != 5 {
			t.Fatalf("claimed tasks of %d keys (%d of a), want 5 of a and one of each of 300 keys", len(got), got["a"])
		}
		stats, err := b.s.FlowStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(stats) != 1 || stats[0].Held != (norn.Held{KeyLimit: 5}) {
			t.Fatalf("flow stats %+v, want a's 5 held back by key_limit", stats)
		}
	})

	t.Run("KeylessAndUnlimitedKeysAreNotHeldBack", func(t *testing.T) {
		// Only k0 has a limit (its own, 8).
		b := setup(t, norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"k0": {Limit: 8}}},
			map[string]int{"k0": 10, "free": 30, "": 30})
		got := claim(t, b.s, 1000)
		if got["k0"] != 8 || got["free"] != 30 || got[""] != 30 {
			t.Fatalf("claimed %v; want 8 of k0, 30 of free, 30 without a key", got)
		}
		if k, _, _ := paths(b.s); k != 1 {
			t.Fatalf("%d keyed claims, want 1", k)
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
		// queue is keyed; over 1,000 running tasks put the bound within
		// the margin, and the claim must count exactly.
		b := setup(t, norn.QueueUpdate{KeyLimit: ptr(10), MaxRunning: ptr(9000)}, map[string]int{"": 3000})
		for i, want := range []int{1000, 1000} {
			if got := claim(t, b.s, 1000)[""]; got != want {
				t.Fatalf("keyed claim %d: %d tasks, want %d", i, got, want)
			}
		}
		k0, x0, _ := paths(b.s)
		if got := claim(t, b.s, 1000)[""]; got != 1000 {
			t.Fatalf("claimed %d, want 1000", got)
		}
		if k, x, _ := paths(b.s); k0 != 2 || x != x0+1 || k != k0 {
			t.Fatalf("keyed %d→%d, exclusive %d→%d claims: the claim near max_running was not exclusive", k0, k, x0, x)
		}
	})
}

// TestFlowKeyedPathAtTheLimit races claimers of four store instances on a
// queue on the keyed path, with two keys kept at their limits by sixteen
// claimers holding their tasks a few milliseconds: keyed claims in flight
// at once must never over-admit a key (storetest.ConcurrentLimitsCase),
// at key limits of 8 (k0's own 12) and of 1 (k0's own 2); claims whose
// candidates are all held back go on to the exclusive path, so both
// paths run at once (at a limit of 1 at least: at 8, claims that wait for
// each other's keys rarely find both keys full).
func TestFlowKeyedPathAtTheLimit(t *testing.T) {
	// Limits of 32 and 40 (a claim holding a bucket shared admits 4 and 5
	// of a key while its running tasks are at most 16 and 20) make claims
	// cross between shared and exclusive buckets; 8 and 1 hold them
	// exclusively nearly always.
	for _, c := range []struct{ limit, first int }{{8, 12}, {1, 2}, {32, 40}} {
		t.Run(fmt.Sprintf("KeyLimit%d", c.limit), func(t *testing.T) {
			stores, all := openInstances(t, 4)
			storetest.ConcurrentLimitsCase(t, stores, context.Background(), storetest.LimitsCase{MaxRunning: 1 << 20,
				KeyLimit: c.limit, FirstKeyLimit: c.first, Keys: 2, PerKey: 300, Workers: 16, N: 4, HoldMs: 10})
			_, exclusive, keyed := claimPaths(all)
			var shared int64
			for _, s := range all {
				shared += s.flow.keyedSharedClaims.Load()
			}
			t.Logf("%d keyed claims (%d with every bucket shared), %d exclusive", keyed, shared, exclusive)
			if keyed == 0 || c.limit == 1 && exclusive == 0 || c.limit == 32 && shared == 0 {
				t.Fatalf("%d keyed claims (%d shared), %d exclusive: the edge between the paths was not exercised", keyed, shared, exclusive)
			}
		})
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
	tx := holdAdvisory(t, s, "pg_advisory_xact_lock_shared", s.channel+"/flow/gq")
	done := make(chan error, 1)
	go func() {
		_, err := s.UpdateQueue(ctx, "gq", norn.QueueUpdate{KeyLimit: ptr(5)})
		done <- err
	}()
	awaitAdvisoryWaiter(t, s, "the update waiting for the flow gate", "ExclusiveLock")
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
	tx := holdAdvisory(t, s, "pg_advisory_xact_lock", s.channel+"/flow/pq")
	done := make(chan int, 1)
	go func() {
		ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"pq"}, N: 1})
		if err != nil {
			t.Error(err)
		}
		done <- len(ts)
	}()
	awaitAdvisoryWaiter(t, s, "the plain claim waiting for the flow gate", "ShareLock")
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

// holdAdvisory begins a transaction on s's pool holding the advisory lock
// named name, as a claim or a queue update in flight does (lock: the
// locking function, pg_advisory_xact_lock or its _shared form).
func holdAdvisory(t *testing.T, s *Store, lock, name string) pgx.Tx {
	t.Helper()
	return holdLock(t, s, `SELECT `+lock+`(hashtextextended($1, 0))`, name)
}

// holdBucket begins a transaction on s's pool holding the lock of key's
// bucket in queue exclusively, as a keyed claim holding that bucket
// exclusively does.
func holdBucket(t *testing.T, s *Store, queue, key string) pgx.Tx {
	t.Helper()
	return holdLock(t, s, `SELECT pg_advisory_xact_lock(hashtext($1), (hashtextextended($2, 0) & $3)::int)`,
		s.channel+"/key/"+queue, key, keyedBuckets-1)
}

// holdLock begins a transaction on s's pool that runs sql, a statement
// taking a lock, and holds it. It is rolled back at the end of the test if
// the test has not done so.
func holdLock(t *testing.T, s *Store, sql string, args ...any) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
	return tx
}

// bucketOf is key's bucket, as the keyed claim computes it.
func bucketOf(t *testing.T, s *Store, key string) int {
	t.Helper()
	var b int
	if err := s.pool.QueryRow(context.Background(), `SELECT (hashtextextended($1, 0) & $2)::int`, key, keyedBuckets-1).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

// awaitAdvisoryWaiter waits until a session waits for an advisory lock in
// mode (ExclusiveLock or ShareLock).
func awaitAdvisoryWaiter(t *testing.T, s *Store, what, mode string) {
	t.Helper()
	await.Until(t, 10*time.Second, what, func() bool {
		var n int
		err := s.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND mode = $1`, mode).Scan(&n)
		return err == nil && n > 0
	})
}
