package worker_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/nornq/norn"
	"github.com/nornq/norn/worker"
)

// TestMaxRuntimeCancelsHandler: a handler that ignores time but keeps its
// task heartbeated is cancelled at the task's max_runtime with a cause
// saying so; the worker reports nothing for that attempt, and the store
// stops it with error max_runtime. The second attempt completes.
func TestMaxRuntimeCancelsHandler(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	sp := newSpy(st)
	causes := make(chan error, 2)
	mux := worker.NewServeMux()
	mux.HandleFunc("slow", func(ctx context.Context, tk *worker.Task) error {
		if tk.Attempts > 1 {
			return nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
	w := newWorker(t, sp, worker.Config{Handler: mux, HeartbeatInterval: 50 * time.Millisecond})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "slow", Timeout: norn.Duration(10 * time.Second),
		MaxRuntime: norn.Duration(400 * time.Millisecond)})
	var cause error
	select {
	case cause = <-causes:
	case <-time.After(20 * time.Second):
		t.Fatal("handler not cancelled at its max_runtime")
	}
	if !errors.Is(cause, worker.ErrMaxRuntime) || !strings.Contains(cause.Error(), "max_runtime") {
		t.Fatalf("cause %v, want worker.ErrMaxRuntime", cause)
	}
	tk := waitStatus(t, st, id, 20*time.Second, norn.StatusCompleted)
	if tk.Attempts != 2 || len(tk.Errors) != 1 || tk.Errors[0].Code != norn.CodeMaxRuntime {
		t.Fatalf("task after a stopped attempt: attempts %d errors %+v history %v", tk.Attempts, tk.Errors, historyTypes(tk))
	}
	if ops := sp.ops(id); len(ops) != 1 || ops[0] != "complete" {
		t.Fatalf("reported ops %v, want only the second attempt's complete", ops)
	}
}

// TestCommandMaxRuntimeKillsProcessGroup: the command of a task that
// reaches its max_runtime is killed with its children, though the worker
// kept the lease alive; the store records max_runtime and the next
// attempt runs.
func TestCommandMaxRuntimeKillsProcessGroup(t *testing.T) {
	t.Parallel()
	pids := filepath.Join(t.TempDir(), "pids")
	script := `if [ "$NORN_ATTEMPT" = 1 ]; then
  sleep 1000 & echo "$$ $!" > "` + pids + `.tmp"; mv "` + pids + `.tmp" "` + pids + `"; wait
fi
echo done`
	st, _ := shWorker(t, script, worker.Config{HeartbeatInterval: 50 * time.Millisecond})
	id := submit(t, st, norn.NewTask{Queue: "sh", Timeout: norn.Duration(10 * time.Second),
		MaxRuntime: norn.Duration(time.Second)})
	var procs []int
	await.Until(t, 20*time.Second, "pids written", func() bool {
		procs = pidsIn(pids)
		return len(procs) == 2
	})
	await.Until(t, 20*time.Second, "script and grandchild killed at max_runtime", func() bool {
		return !alive(procs[0]) && !alive(procs[1])
	})
	tk := waitStatus(t, st, id, 20*time.Second, norn.StatusCompleted)
	if tk.Attempts != 2 || len(tk.Errors) != 1 || tk.Errors[0].Code != norn.CodeMaxRuntime || string(tk.Result) != `"done"` {
		t.Fatalf("task: attempts %d errors %+v result %s", tk.Attempts, tk.Errors, tk.Result)
	}
}

// TestCommandSnoozeLine: exit 75 after a "norn:snooze" line snoozes the
// task (no error, attempt given back); exit 75 without one is the usual
// failure for retry, and a malformed line fails with invalid_snooze.
func TestCommandSnoozeLine(t *testing.T) {
	t.Parallel()
	script := `
spec=$(cat)
case "$spec" in
  '"delay"') echo "not yet"; echo "norn:snooze 1h"; exit 75 ;;
  '"until"') echo "norn:snooze 2099-01-02T03:04:05Z"; exit 75 ;;
  '"past"') if [ "$NORN_ATTEMPT" = 1 ] && [ ! -e "$NORN_TASK_ID.once" ]; then touch "$NORN_TASK_ID.once"; echo "norn:snooze 2001-01-01T00:00:00Z"; exit 75; fi; echo again ;;
  '"plain"') echo "busy" >&2; exit 75 ;;
  '"bad"') echo "norn:snooze soon"; exit 75 ;;
  '"exit0"') echo "norn:snooze 1h" ;;
esac`
	dir := t.TempDir()
	st := openStore(t)
	sp := newSpy(st)
	runWorker(t, newWorker(t, sp, worker.Config{Queues: []string{"sh"},
		Handler: &worker.Command{Path: "sh", Args: []string{"-c", script}, Dir: dir}}))
	ids := map[string]string{}
	one := 1
	for _, s := range []string{"delay", "until", "past", "plain", "bad", "exit0"} {
		ids[s] = submit(t, st, norn.NewTask{Queue: "sh", Spec: []byte(`"` + s + `"`), MaxAttempts: &one})
	}
	before := time.Now()
	tk := waitStatus(t, st, ids["delay"], 20*time.Second, norn.StatusScheduled)
	if tk.Attempts != 0 || len(tk.Errors) != 0 || tk.RunAt.Before(before.Add(59*time.Minute)) || tk.History[len(tk.History)-1].Type != norn.TaskSnooze {
		t.Errorf("delay: %+v (history %v)", tk, historyTypes(tk))
	}
	tk = waitStatus(t, st, ids["until"], 20*time.Second, norn.StatusScheduled)
	if !tk.RunAt.Equal(time.Date(2099, 1, 2, 3, 4, 5, 0, time.UTC)) || tk.Attempts != 0 || len(tk.Errors) != 0 {
		t.Errorf("until: run_at %v attempts %d errors %+v", tk.RunAt, tk.Attempts, tk.Errors)
	}
	// Snoozed to the past: ready at once, run again as attempt 1 (the
	// snooze gave the attempt back, so max_attempts 1 still allows it).
	tk = waitStatus(t, st, ids["past"], 20*time.Second, norn.StatusCompleted)
	if tk.Attempts != 1 || len(tk.Errors) != 0 || string(tk.Result) != `"again"` {
		t.Errorf("past: attempts %d errors %+v result %s", tk.Attempts, tk.Errors, tk.Result)
	}
	tk = waitStatus(t, st, ids["plain"], 20*time.Second, norn.StatusAborted)
	if len(tk.Errors) != 1 || tk.Errors[0].Code != norn.CodeAttemptsExhausted || !strings.Contains(tk.Errors[0].Description, "exit_75") {
		t.Errorf("plain exit 75: errors %+v", tk.Errors)
	}
	tk = waitStatus(t, st, ids["bad"], 20*time.Second, norn.StatusAborted)
	if len(tk.Errors) != 1 || !strings.Contains(tk.Errors[0].Description, "invalid_snooze") {
		t.Errorf("bad snooze line: errors %+v", tk.Errors)
	}
	tk = waitStatus(t, st, ids["exit0"], 20*time.Second, norn.StatusCompleted)
	if string(tk.Result) != `"norn:snooze 1h"` {
		t.Errorf("exit 0 with a snooze line: result %s", tk.Result)
	}
}
