package worker_test

import (
	"context"
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
