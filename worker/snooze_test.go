package worker_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/worker"
)

// TestSnoozeReturnedByHandler: Snooze(0) makes the task ready at once and
// the next run sees the same attempt number; Snooze(d) leaves it scheduled
// d later with the attempt given back and no error recorded.
func TestSnoozeReturnedByHandler(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	sp := newSpy(st)
	var runs, firstAttempts, secondAttempts atomic.Int32
	mux := worker.NewServeMux()
	mux.HandleFunc("later", func(ctx context.Context, tk *worker.Task) error {
		switch runs.Add(1) {
		case 1:
			firstAttempts.Store(int32(tk.Attempts))
			return worker.Snooze(0)
		default:
			secondAttempts.Store(int32(tk.Attempts))
			return worker.Snooze(time.Hour)
		}
	})
	w := newWorker(t, sp, worker.Config{Handler: mux})
	runWorker(t, w)
	before := time.Now()
	id := submit(t, st, norn.NewTask{Queue: "later"})
	tk := waitStatus(t, st, id, 5*time.Second, norn.StatusScheduled)
	if runs.Load() != 2 || firstAttempts.Load() != 1 || secondAttempts.Load() != 1 {
		t.Fatalf("runs %d, attempts seen %d and %d; want 2 runs both at attempt 1", runs.Load(), firstAttempts.Load(), secondAttempts.Load())
	}
	if tk.Attempts != 0 || len(tk.Errors) != 0 || tk.RunAt.Before(before.Add(time.Hour)) || tk.RunAt.After(time.Now().Add(time.Hour)) {
		t.Fatalf("snoozed task: attempts %d errors %v run_at %v", tk.Attempts, tk.Errors, tk.RunAt)
	}
	var snoozes int
	for _, h := range tk.History {
		if h.Type == norn.TaskSnooze {
			snoozes++
		}
	}
	if snoozes != 2 {
		t.Fatalf("history %v, want two TaskSnooze entries", historyTypes(tk))
	}
	if ops := sp.ops(id); len(ops) != 2 || ops[0] != "snooze" || ops[1] != "snooze" {
		t.Fatalf("reported ops %v, want two snoozes", ops)
	}
}

// TestSnoozeKeyHoldsBackTheKey: a handler's SnoozeKey snoozes its task and
// empties its key's bucket, so the key's next task is not claimed by a
// claim that takes another key's task, and the snooze records no error.
func TestSnoozeKeyHoldsBackTheKey(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	ctx := context.Background()
	if _, err := st.UpdateQueue(ctx, "tenants", norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 100, Burst: 5}}); err != nil {
		t.Fatal(err)
	}
	sp := newSpy(st)
	var mu sync.Mutex
	var ran []string
	mux := worker.NewServeMux()
	mux.HandleFunc("tenants", func(ctx context.Context, tk *worker.Task) error {
		mu.Lock()
		ran = append(ran, tk.ID)
		mu.Unlock()
		if tk.ID == "a0" {
			return worker.SnoozeKey(time.Hour)
		}
		return nil
	})
	w := newWorker(t, sp, worker.Config{Handler: mux})
	runWorker(t, w)
	before := time.Now()
	submit(t, st, norn.NewTask{ID: "a0", Queue: "tenants", ConcurrencyKey: "a"})
	tk := waitStatus(t, st, "a0", 5*time.Second, norn.StatusScheduled)
	if tk.Attempts != 0 || len(tk.Errors) != 0 || tk.RunAt.Before(before.Add(time.Hour)) {
		t.Fatalf("snoozed task: attempts %d errors %v run_at %v", tk.Attempts, tk.Errors, tk.RunAt)
	}
	// One submit: the claim that takes b0 sees a1 as well.
	if _, err := st.Submit(ctx, norn.NewTask{ID: "a1", Queue: "tenants", ConcurrencyKey: "a"},
		norn.NewTask{ID: "b0", Queue: "tenants", ConcurrencyKey: "b"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, "b0", 5*time.Second, norn.StatusCompleted)
	if a1, err := st.Get(ctx, "a1"); err != nil || a1.Status != norn.StatusReady {
		t.Fatalf("a1 of the held-back key: %+v, %v; want it still ready", a1, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(ran, "a1") {
		t.Fatalf("handler ran %v: a1 ran while its key was held back", ran)
	}
}

// TestSnoozeKeyWithoutAKeyRateSnoozesTheTask: when the store refuses the
// key scope (no rate limit to hold back), the worker snoozes the task
// alone rather than leaving it to its lease's expiry.
func TestSnoozeKeyWithoutAKeyRateSnoozesTheTask(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	sp := newSpy(st)
	mux := worker.NewServeMux()
	mux.HandleFunc("plain", func(ctx context.Context, tk *worker.Task) error {
		return worker.SnoozeKey(time.Hour)
	})
	w := newWorker(t, sp, worker.Config{Handler: mux})
	runWorker(t, w)
	before := time.Now()
	id := submit(t, st, norn.NewTask{Queue: "plain", ConcurrencyKey: "k"})
	tk := waitStatus(t, st, id, 5*time.Second, norn.StatusScheduled)
	if tk.Attempts != 0 || len(tk.Errors) != 0 || tk.RunAt.Before(before.Add(time.Hour)) {
		t.Fatalf("snoozed task: attempts %d errors %v run_at %v", tk.Attempts, tk.Errors, tk.RunAt)
	}
	if ops := sp.ops(id); len(ops) != 2 || ops[0] != "snooze" || ops[1] != "snooze" {
		t.Fatalf("reported ops %v, want the refused key snooze and the task's own", ops)
	}
}
