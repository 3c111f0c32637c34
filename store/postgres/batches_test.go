package postgres

import (
	"context"
	"encoding/json"
		"testing"
	"time"

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
	claim := func(t *testing.T, s *Store, n int) []*norn.Task {
		t.Helper()
		got, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

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
		n, err := s.Count(ctx, norn.Filter{Statuses: []norn.Status{norn.StatusRunning}})
		if err != nil || n != 2 {
			t.Fatalf("running count %d, %v", n, err)
		}
		qi, err := s.Queue(ctx, "q")
		if err != nil || qi.Counts[norn.StatusRunning] != 2 || qi.Counts[norn.StatusReady] != 3 {
			t.Fatalf("queue counts %v, %v", qi.Counts, err)
		}
		g, err := s.Get(ctx, got[1].ID)
		if err != nil || g.Status != norn.StatusRunning || g.Lease != 1 || !g.Deadline.Equal(got[1].Deadline) {
			t.Fatalf("get %+v, %v (claimed %+v)", g, err, got[1])
		}
		if st := b.stored(t, got[1].ID); st != "running" {
			t.Fatalf("a read left the leased task stored as %s", st)
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
