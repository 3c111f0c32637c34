package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/worker"
)

// TestSnoozeUntilSignal: a handler waits for an approval; the task sits
// scheduled until the signal arrives, then runs again seeing the signal
// and its wait received, and completes.
func TestSnoozeUntilSignal(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	var runs atomic.Int32
	mux := worker.NewServeMux()
	mux.HandleFunc("approve", func(ctx context.Context, tk *worker.Task) error {
		runs.Add(1)
		if tk.SignalWait == nil {
			return worker.SnoozeUntilSignal("approval", time.Hour)
		}
		if !tk.SignalWait.Received || len(tk.Signals) != 1 {
			return worker.Abort(context.Canceled)
		}
		sigs, err := tk.NewSignals(ctx, 0)
		if err != nil || len(sigs) != 1 {
			return worker.Abort(err)
		}
		return tk.SetResult(string(tk.Signals[0].Data))
	})
	w := newWorker(t, st, worker.Config{Handler: mux})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "approve"})
	waitStatus(t, st, id, 5*time.Second, norn.StatusScheduled)
	if _, err := st.Signal(context.Background(), id, norn.NewSignal{Name: "approval", Data: []byte(`"ok"`)}); err != nil {
		t.Fatal(err)
	}
	tk := waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted)
	if string(tk.Result) != `"\"ok\""` || runs.Load() != 2 || tk.Attempts != 1 {
		t.Fatalf("result %s after %d runs, attempts %d", tk.Result, runs.Load(), tk.Attempts)
	}
}
