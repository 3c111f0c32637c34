package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/worker"
)

// TestAwaitFromAHandler: a handler fans out in two stages with
// Task.Await; each await ends the attempt without counting it and without
// a report, the children run, and the parent's next run sees their
// results, until it completes with their sum.
func TestAwaitFromAHandler(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	sp := newSpy(st)
	var parentRuns atomic.Int32
	mux := worker.NewServeMux()
	mux.HandleFunc("parent", func(ctx context.Context, tk *worker.Task) error {
		parentRuns.Add(1)
		switch len(tk.DependencyResults) {
		case 0:
			return tk.Await(ctx, norn.NewTask{Queue: "child", Spec: []byte(`1`)}, norn.NewTask{Queue: "child", Spec: []byte(`2`)})
		case 2:
			return tk.Await(ctx, norn.NewTask{Queue: "child", Spec: []byte(`3`)})
		}
		sum := 0
		for _, r := range tk.DependencyResults {
			var n int
			if err := json.Unmarshal(r.Result, &n); err != nil {
				return worker.Abort(fmt.Errorf("child %s: %w", r.ID, err))
			}
			sum += n
		}
		if tk.Attempts != 1 {
			return worker.Abort(fmt.Errorf("attempts %d on the last run, want 1: awaits do not count", tk.Attempts))
		}
		return tk.SetResult(sum * 10)
	})
	mux.HandleFunc("child", func(ctx context.Context, tk *worker.Task) error {
		var n int
		if err := json.Unmarshal(tk.Spec, &n); err != nil {
			return worker.Abort(err)
		}
		return tk.SetResult(n)
	})
	w := newWorker(t, sp, worker.Config{Handler: mux})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "parent"})
	tk := waitStatus(t, st, id, 10*time.Second, norn.StatusCompleted)
	if string(tk.Result) != "60" || parentRuns.Load() != 3 || len(tk.DependsOn) != 3 {
		t.Fatalf("parent: result %s after %d runs, depends_on %v; want 60 after 3 runs with 3 children", tk.Result, parentRuns.Load(), tk.DependsOn)
	}
	if ops := sp.ops(id); len(ops) != 1 || ops[0] != "complete" {
		t.Fatalf("reported ops %v, want only the final complete", ops)
	}
	awaits := 0
	for _, h := range tk.History {
		if h.Type == norn.TaskAwait {
			awaits++
		}
	}
	if awaits != 2 {
		t.Fatalf("history %v, want two TaskAwait entries", historyTypes(tk))
	}
}
