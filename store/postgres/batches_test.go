package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/storetest"
)

// batchSetup is a store with ready batches on, its fake clock, and a
// reader of its two tables.
type batchBundle struct {
	s     *Store
	clock *storetest.FakeClock
}

func batchSetup(t *testing.T) (*Store, *batchBundle) {
	t.Helper()
	c := storetest.NewFakeClock()
	s := openTest(t, c, func(cfg *Config) { cfg.DisableMonitor = true })
	return s, &batchBundle{s: s, clock: c}
}

// tables returns how many ready rows and lease rows there are, and the
// ids the ready rows and lease rows hold.
func (b *batchBundle) tables(t *testing.T) (readyIDs, leasedIDs []string) {
	t.Helper()
	ctx := context.Background()
	err := b.s.pool.QueryRow(ctx, b.s.q(`SELECT coalesce((SELECT array_agg(u ORDER BY u) FROM {s}.ready r, unnest(r.ids) u), '{}'),
	coalesce((SELECT array_agg(u ORDER BY u) FROM {s}.leases l, unnest(l.ids) u), '{}')`)).Scan(&readyIDs, &leasedIDs)
	if err != nil {
		t.Fatal(err)
	}
	return readyIDs, leasedIDs
}

// stored is a task's status as its row says.
func (b *batchBundle) stored(t *testing.T, id string) string {
	t.Helper()
	var st string
	if err := b.s.pool.QueryRow(context.Background(), b.s.q(`SELECT status FROM {s}.tasks WHERE id = $1`), id).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func submitN(t *testing.T, s *Store, n int, nt norn.NewTask) []string {
	t.Helper()
	tasks := make([]norn.NewTask, n)
	for i := range tasks {
		tasks[i] = nt
	}
	out, err := s.Submit(context.Background(), tasks...)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, o := range out {
		ids[i] = o.Task.ID
	}
	return ids
}

func TestReadyBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	claim := func(t *testing.T, s *Store, n int) []*norn.Task { t.Helper(); return claimQ(t, s, n, 0) }

	t.Run("ClaimTakesFromReadyRowsWithoutWritingTasks", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		ids := submitN(t, s, 10, norn.NewTask{Queue: "q"})
		if r, l := b.tables(t); len(r) != 10 || len(l) != 0 {
			t.Fatalf("after submit: ready %v, leased %v", r, l)
		}
		got := claim(t, s, 4)
		if len(got) != 4 {
			t.Fatalf("claimed %d", len(got))
		}
		for i, tk := range got {
			if tk.ID != ids[i] || tk.Status != norn.StatusRunning || tk.Lease != 1 || tk.Attempts != 1 || tk.Owner != "w" ||
				len(tk.History) != 1 || tk.History[0].Type != norn.TaskAssignment {
				t.Fatalf("claimed %d: %+v (want %s)", i, tk, ids[i])
			}
			if st := b.stored(t, tk.ID); st != "ready" {
				t.Fatalf("the claim wrote the row of %s: %s", tk.ID, st)
			}
		}
		if r, l := b.tables(t); len(r) != 6 || len(l) != 4 {
			t.Fatalf("after claim: ready %v, leased %v", r, l)
		}
	})

	t.Run("CompletionOfALeasedTaskWritesItOnce", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		submitN(t, s, 3, norn.NewTask{Queue: "q"})
		got := claim(t, s, 3)
		for _, tk := range got {
			if err := s.Complete(ctx, norn.LeaseRef{TaskID: tk.ID, Worker: "w", Lease: tk.Lease}, json.RawMessage(`1`)); err != nil {
				t.Fatal(err)
			}
		}
		if r, l := b.tables(t); len(r) != 0 || len(l) != 0 {
			t.Fatalf("after completions: ready %v, leased %v", r, l)
		}
		g, err := s.Get(ctx, got[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if g.Status != norn.StatusCompleted || g.Attempts != 1 || g.Lease != 1 || g.Owner != "w" || len(g.History) != 2 ||
			g.History[0].Type != norn.TaskAssignment || g.History[1].Type != norn.TaskComplete || g.Version != 3 {
			t.Fatalf("completed: %+v", g)
		}
		// A second completion with the same lease is a repeat, and a stale
		// lease is refused.
		if err := s.Complete(ctx, norn.LeaseRef{TaskID: got[0].ID, Worker: "w", Lease: 1}, json.RawMessage(`1`)); err != nil {
			t.Fatalf("repeat: %v", err)
		}
		if err := s.Complete(ctx, norn.LeaseRef{TaskID: got[1].ID, Worker: "other", Lease: 1}, nil); err == nil {
			t.Fatal("a completion by another worker was accepted")
		}
	})

	t.Run("ReadsSeeLeasedTasksAsRunning", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		submitN(t, s, 5, norn.NewTask{Queue: "q"})
		got := claim(t, s, 2)
		qi, err := s.Queue(ctx, "q")
		if err != nil || qi.Counts[norn.StatusRunning] != 2 || qi.Counts[norn.StatusReady] != 3 {
			t.Fatalf("queue counts %v, %v", qi.Counts, err)
		}
		st, err := s.Stats(ctx)
		if err != nil || st.Totals[norn.StatusRunning] != 2 || st.Totals[norn.StatusReady] != 3 {
			t.Fatalf("stats %v, %v", st.Totals, err)
		}
		// Counts read without writing: the leased tasks are still stored as ready.
		if stored := b.stored(t, got[0].ID); stored != "ready" {
			t.Fatalf("a count wrote the leased task: %s", stored)
		}
		g, err := s.Get(ctx, got[1].ID)
		if err != nil || g.Status != norn.StatusRunning || g.Lease != 1 || !g.Deadline.Equal(got[1].Deadline) {
			t.Fatalf("get %+v, %v (claimed %+v)", g, err, got[1])
		}
		if st := b.stored(t, got[1].ID); st != "running" {
			t.Fatalf("a read left the leased task stored as %s", st)
		}
		n, err := s.Count(ctx, norn.Filter{Statuses: []norn.Status{norn.StatusRunning}})
		if err != nil || n != 2 {
			t.Fatalf("running count %d, %v", n, err)
		}
		// The completion finds the task written as running now.
		if err := s.Complete(ctx, norn.LeaseRef{TaskID: got[0].ID, Worker: "w", Lease: 1}, nil); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ClaimOrderAcrossRowsAndOrdinaryTasks", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		low := submitN(t, s, 3, norn.NewTask{Queue: "q"})
		b.clock.Advance(time.Second)
		// An ordinary ready task (caller's id: not batched) of higher
		// priority, then a batch of the same priority as the first.
		if _, err := s.Submit(ctx, norn.NewTask{ID: "hi", Queue: "q", Priority: 5}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Second)
		later := submitN(t, s, 2, norn.NewTask{Queue: "q"})
		b.clock.Advance(time.Second)
		if _, err := s.Submit(ctx, norn.NewTask{ID: "zz", Queue: "q"}); err != nil {
			t.Fatal(err)
		}
		want := append(append([]string{"hi"}, low...), later...)
		want = append(want, "zz")
		var order []string
		for range want {
			got := claim(t, s, 1)
			if len(got) != 1 {
				t.Fatalf("claimed %d after %v", len(got), order)
			}
			order = append(order, got[0].ID)
		}
		for i := range want {
			if order[i] != want[i] {
				t.Fatalf("claim order %v, want %v", order, want)
			}
		}
	})
}

func TestReadyBatchesSettle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	claim := claimQ

	t.Run("ExpiredLeaseTimesOutItsTasks", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		submitN(t, s, 3, norn.NewTask{Queue: "q"})
		got := claim(t, s, 2, time.Minute)
		b.clock.Advance(2 * time.Minute)
		rep, err := s.Sweep(ctx)
		if err != nil || rep.TimedOut != 2 {
			t.Fatalf("sweep %+v, %v", rep, err)
		}
		if r, l := b.tables(t); len(r) != 1 || len(l) != 0 {
			t.Fatalf("after the sweep: ready %v, leased %v", r, l)
		}
		g, err := s.Get(ctx, got[0].ID)
		if err != nil || g.Status != norn.StatusReady || g.Attempts != 1 || g.Lease != 1 || len(g.History) != 2 ||
			g.History[1].Type != norn.TaskTimeout {
			t.Fatalf("timed out: %+v, %v", g, err)
		}
		if err := s.Complete(ctx, norn.LeaseRef{TaskID: got[0].ID, Worker: "w", Lease: 1}, nil); err == nil {
			t.Fatal("a completion under the expired lease was accepted")
		}
		again := claim(t, s, 3, time.Minute)
		if len(again) != 3 {
			t.Fatalf("claimed %d after the timeout", len(again))
		}
		for _, tk := range again {
			if tk.ID == got[0].ID && (tk.Lease != 2 || tk.Attempts != 2) {
				t.Fatalf("claimed again: %+v", tk)
			}
		}
	})

	t.Run("HeartbeatOfALeasedTask", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		submitN(t, s, 3, norn.NewTask{Queue: "q"})
		got := claim(t, s, 3, time.Minute)
		dl, err := s.Heartbeat(ctx, norn.LeaseRef{TaskID: got[1].ID, Worker: "w", Lease: 1}, norn.Heartbeat{Extend: norn.Duration(time.Hour)})
		if err != nil || !dl.Equal(b.clock.Now().Add(time.Hour)) {
			t.Fatalf("heartbeat %v, %v", dl, err)
		}
		if _, l := b.tables(t); len(l) != 0 {
			t.Fatalf("the lease row outlived a heartbeat of its task: %v", l)
		}
		for _, tk := range got {
			if err := s.Complete(ctx, norn.LeaseRef{TaskID: tk.ID, Worker: "w", Lease: 1}, nil); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("CancelledBatchedTaskIsNotClaimed", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		ids := submitN(t, s, 3, norn.NewTask{Queue: "q"})
		if _, err := s.Cancel(ctx, ids[1]); err != nil {
			t.Fatal(err)
		}
		if r, _ := b.tables(t); len(r) != 2 {
			t.Fatalf("the cancelled task is still in its ready row: %v", r)
		}
		got := claim(t, s, 3, time.Minute)
		if len(got) != 2 || got[0].ID != ids[0] || got[1].ID != ids[2] {
			t.Fatalf("claimed %v", got)
		}
	})

	t.Run("PriorityChangeMovesTheTaskOut", func(t *testing.T) {
		t.Parallel()
		s, _ := batchSetup(t)
		ids := submitN(t, s, 3, norn.NewTask{Queue: "q"})
		if _, err := s.Update(ctx, ids[2], norn.Update{Priority: ptrTo(uint32(9))}); err != nil {
			t.Fatal(err)
		}
		got := claim(t, s, 1, time.Minute)
		if len(got) != 1 || got[0].ID != ids[2] {
			t.Fatalf("claimed %v, want the reprioritized %s first", got, ids[2])
		}
		if n := len(claim(t, s, 5, time.Minute)); n != 2 {
			t.Fatalf("claimed %d more, want 2", n)
		}
	})

	t.Run("ExclusivePathSettlesItsQueuesRows", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		submitN(t, s, 5, norn.NewTask{Queue: "q"})
		claim(t, s, 2, time.Minute)
		// A count limit keeps the queue's ready rows and leases: the
		// shared and keyed paths take and count them.
		if _, err := s.UpdateQueue(ctx, "q", norn.QueueUpdate{MaxRunning: ptrTo(3)}); err != nil {
			t.Fatal(err)
		}
		if r, l := b.tables(t); len(r) != 3 || len(l) != 2 {
			t.Fatalf("after the limit: ready %v, leased %v; want 3 and 2", r, l)
		}
		// A limit this small takes the exclusive path, which makes them
		// ordinary rows first: it counts the two leased as running and
		// admits one more.
		if got := claim(t, s, 5, time.Minute); len(got) != 1 {
			t.Fatalf("the limited claim took %d, want 1", len(got))
		}
		if r, l := b.tables(t); len(r) != 0 || len(l) != 0 {
			t.Fatalf("after the exclusive claim: ready %v, leased %v", r, l)
		}
		// New submits to the limited queue write ready rows again.
		submitN(t, s, 2, norn.NewTask{Queue: "q"})
		if r, _ := b.tables(t); len(r) != 2 {
			t.Fatalf("ready rows of a limited queue: %v, want 2 tasks", r)
		}
		if got := claim(t, s, 5, time.Minute); len(got) != 0 {
			t.Fatalf("claimed %d at the limit", len(got))
		}
	})

	t.Run("FairQueuesSettleTheirRows", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		submitN(t, s, 5, norn.NewTask{Queue: "q"})
		claim(t, s, 2, time.Minute)
		// Fair claims read ordinary rows only.
		if _, err := s.UpdateQueue(ctx, "q", norn.QueueUpdate{FairBy: ptrTo(norn.FairByConcurrencyKey)}); err != nil {
			t.Fatal(err)
		}
		if r, l := b.tables(t); len(r) != 0 || len(l) != 0 {
			t.Fatalf("after fair_by: ready %v, leased %v", r, l)
		}
		submitN(t, s, 2, norn.NewTask{Queue: "q"})
		if r, _ := b.tables(t); len(r) != 0 {
			t.Fatalf("ready rows of a fair queue: %v", r)
		}
		if got := claim(t, s, 10, time.Minute); len(got) != 5 {
			t.Fatalf("claimed %d of the 5 ready", len(got))
		}
	})

	t.Run("RateLimitedClaimsTakeTheTokensTheyLease", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		if _, err := s.UpdateQueue(ctx, "q", norn.QueueUpdate{RateLimit: &norn.RateLimit{PerSecond: 1, Burst: 3}}); err != nil {
			t.Fatal(err)
		}
		submitN(t, s, 5, norn.NewTask{Queue: "q"})
		if r, _ := b.tables(t); len(r) != 5 {
			t.Fatalf("ready rows of a rate-limited queue: %v, want 5 tasks", r)
		}
		// The injected clock stands still: the burst, then nothing.
		if got := claim(t, s, 2, time.Minute); len(got) != 2 {
			t.Fatalf("first claim took %d, want 2", len(got))
		}
		if got := claim(t, s, 10, time.Minute); len(got) != 1 {
			t.Fatalf("second claim took %d, want the burst's last 1", len(got))
		}
		if _, l := b.tables(t); len(l) != 3 {
			t.Fatalf("leased %v, want the 3 claimed", l)
		}
		if got := claim(t, s, 10, time.Minute); len(got) != 0 {
			t.Fatalf("claimed %d with the bucket empty", len(got))
		}
		b.clock.Advance(2 * time.Second)
		if got := claim(t, s, 10, time.Minute); len(got) != 2 {
			t.Fatalf("claimed %d two seconds later at 1/s, want 2", len(got))
		}
	})

	t.Run("KeyedClaimsLeaveHeldBackTasksInTheirRows", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		if _, err := s.UpdateQueue(ctx, "q", norn.QueueUpdate{KeyLimit: ptrTo(2)}); err != nil {
			t.Fatal(err)
		}
		var nts []norn.NewTask
		for _, k := range []string{"a", "a", "b", "a", "", "c", "b", "b"} {
			nts = append(nts, norn.NewTask{Queue: "q", ConcurrencyKey: k})
		}
		ids, err := s.Submit(ctx, nts...)
		if err != nil {
			t.Fatal(err)
		}
		got := claim(t, s, 10, time.Minute)
		keys := map[string]int{}
		for _, tk := range got {
			keys[tk.ConcurrencyKey]++
		}
		if keys["a"] != 2 || keys["b"] != 2 || keys["c"] != 1 || keys[""] != 1 {
			t.Fatalf("claimed %v, want a 2, b 2, c 1 and the keyless one", keys)
		}
		// The third a and b stay ready in their row, ahead of nothing.
		r, l := b.tables(t)
		if len(r) != 2 || len(l) != 6 {
			t.Fatalf("ready %v, leased %v; want 2 and 6", r, l)
		}
		// The leases count: a completion of one of a's frees one place.
		for _, tk := range got {
			if tk.ConcurrencyKey == "a" {
				if err := s.Complete(ctx, norn.LeaseRef{TaskID: tk.ID, Worker: tk.Owner, Lease: tk.Lease}, nil); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		got = claim(t, s, 10, time.Minute)
		if len(got) != 1 || got[0].ConcurrencyKey != "a" || got[0].ID != ids[3].Task.ID {
			t.Fatalf("claimed %v after one of a completed, want a's third task", got)
		}
	})

	t.Run("ConcurrentClaimsReadsAndCompletionsNeverShareATask", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		const n = 3000
		for range n / 100 {
			submitN(t, s, 100, norn.NewTask{Queue: "q"})
		}
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		// A reader that lists and counts running tasks all along: each
		// settles every lease while its tasks are being completed.
		stop := make(chan struct{})
		readerDone := make(chan struct{})
		go func() {
			defer close(readerDone)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.List(ctx, norn.Query{Filter: norn.Filter{Statuses: []norn.Status{norn.StatusRunning}}, Limit: 50}); err != nil {
					errs <- err
					return
				}
				if _, err := s.Count(ctx, norn.Filter{Queues: []string{"q"}, Statuses: []norn.Status{norn.StatusRunning}}); err != nil {
					errs <- err
					return
				}
			}
		}()
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				worker := "w" + string(rune('a'+w))
				for {
					got, err := s.Claim(ctx, norn.ClaimRequest{Worker: worker, Queues: []string{"q"}, N: 37})
					if err != nil {
						errs <- err
						return
					}
					if len(got) == 0 {
						return
					}
					mu.Lock()
					for _, tk := range got {
						seen[tk.ID]++
					}
					mu.Unlock()
					// Every third task is read first (settling its lease
					// while its siblings complete), every fifth is
					// heartbeated, and all are completed.
					for i, tk := range got {
						ref := norn.LeaseRef{TaskID: tk.ID, Worker: worker, Lease: tk.Lease}
						if i%3 == 0 {
							if _, err := s.Get(ctx, tk.ID); err != nil {
								errs <- err
								return
							}
						}
						if i%5 == 0 {
							if _, err := s.Heartbeat(ctx, ref, norn.Heartbeat{}); err != nil {
								errs <- err
								return
							}
						}
					}
					ops := make([]norn.LeaseOp, len(got))
					for i, tk := range got {
						ops[i] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: tk.ID, Worker: worker, Lease: tk.Lease}}
					}
					res, err := s.LeaseBatch(ctx, ops)
					if err != nil {
						errs <- err
						return
					}
					for i, r := range res {
						if r.Err != nil {
							errs <- r.Err
							_ = i
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		close(stop)
		<-readerDone
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if len(seen) != n {
			t.Fatalf("claimed %d distinct tasks, want %d", len(seen), n)
		}
		for id, k := range seen {
			if k != 1 {
				t.Fatalf("%s was claimed %d times", id, k)
			}
		}
		c, err := s.Count(ctx, norn.Filter{Statuses: []norn.Status{norn.StatusCompleted}})
		if err != nil || c != n {
			t.Fatalf("completed %d, %v", c, err)
		}
		if r, l := b.tables(t); len(r) != 0 || len(l) != 0 {
			t.Fatalf("left: ready %v, leased %v", r, l)
		}
	})
}

func ptrTo[T any](v T) *T { return &v }

// claimQ claims up to n tasks of queue q as worker w (timeout 0: the
// tasks' own).
func claimQ(t *testing.T, s *Store, n int, timeout time.Duration) []*norn.Task {
	t.Helper()
	got, err := s.Claim(context.Background(), norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n, Timeout: norn.Duration(timeout)})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestReadyBatchesSmallRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("AClaimOverOneTaskRowsLocksMoreRowsAndRemembers", func(t *testing.T) {
		t.Parallel()
		s, b := batchSetup(t)
		var ids []string
		for range 60 {
			ids = append(ids, submitN(t, s, 1, norn.NewTask{Queue: "q"})...)
		}
		leases := func() int {
			var n int
			if err := s.pool.QueryRow(ctx, s.q(`SELECT count(*) FROM {s}.leases`)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		got, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 40})
		if err != nil || len(got) != 40 {
			t.Fatalf("claimed %d, %v", len(got), err)
		}
		for i, tk := range got {
			if tk.ID != ids[i] {
				t.Fatalf("claim %d is %s, want %s", i, tk.ID, ids[i])
			}
		}
		// 4 rows, then 16, then 64: three statements, not ten.
		if n := leases(); n != 3 {
			t.Fatalf("the claim took %d statements, want 3", n)
		}
		// The next claim starts from the rows that sufficed, halved: 32.
		got, err = s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 20})
		if err != nil || len(got) != 20 || leases() != 4 {
			t.Fatalf("the next claim took %d in %d statements, %v", len(got), leases()-3, err)
		}
		if r, _ := b.tables(t); len(r) != 0 {
			t.Fatalf("left in ready rows: %v", r)
		}
	})
}

// TestDetachPlanUsesLeaseBatches: with many workers holding leases, the
// settle before a heartbeat or a cancel finds its lease rows through
// leases_batches, not by reading them all.
func TestDetachPlanUsesLeaseBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := batchSetup(t)
	if _, err := s.pool.Exec(ctx, s.q(`INSERT INTO {s}.leases (queue, worker, created, deadline, ids, batches)
SELECT 'q', 'w' || i, now(), now(), ARRAY['x' || i], ARRAY[i::bigint] FROM generate_series(1, 20000) i`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, s.q(`ANALYZE {s}.leases`)); err != nil {
		t.Fatal(err)
	}
	var plan []string
	rows, err := s.pool.Query(ctx, "EXPLAIN "+s.q(detachLeasedSQL), []string{"a", "b"})
	if err == nil {
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	p := strings.Join(plan, "\n")
	if !strings.Contains(p, "leases_batches") || strings.Contains(p, "Seq Scan on leases") {
		t.Fatalf("the detach does not find lease rows through leases_batches:\n%s", p)
	}
}
