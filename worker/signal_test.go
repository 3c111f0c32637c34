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

// TestSignalChannel: a running handler receives, on SignalC, the signals
// its task gets while it runs, in order, by the worker's heartbeats alone;
// one received before the claim is in Task.Signals and not sent again.
func TestSignalChannel(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	ctx := context.Background()
	id := submit(t, st, norn.NewTask{Queue: "listen"})
	if _, err := st.Signal(ctx, id, norn.NewSignal{Name: "early"}); err != nil {
		t.Fatal(err)
	}
	listening := make(chan struct{})
	mux := worker.NewServeMux()
	mux.HandleFunc("listen", func(ctx context.Context, tk *worker.Task) error {
		ch := tk.SignalC()
		close(listening)
		var names []string
		for len(names) < 3 {
			select {
			case s := <-ch:
				names = append(names, s.Name)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if len(tk.Signals) != 1 || tk.Signals[0].Name != "early" {
			return worker.Abort(context.Canceled)
		}
		return tk.SetResult(names)
	})
	w := newWorker(t, st, worker.Config{Handler: mux, Lease: time.Second, HeartbeatInterval: 50 * time.Millisecond})
	runWorker(t, w)
	<-listening
	for _, name := range []string{"a", "b", "c"} {
		if _, err := st.Signal(ctx, id, norn.NewSignal{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	tk := waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted)
	if string(tk.Result) != `["a","b","c"]` {
		t.Fatalf("result %s, want the three signals in order", tk.Result)
	}
}
