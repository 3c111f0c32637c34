package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/nornq/norn"
	"github.com/nornq/norn/worker"
)

// shWorker runs `sh -c script` per task on an embedded store.
func shWorker(t *testing.T, script string, cfg worker.Config) (norn.Store, *spy) {
	t.Helper()
	st := openStore(t)
	sp := newSpy(st)
	cfg.Handler = &worker.Command{Path: "sh", Args: []string{"-c", script}}
	if cfg.Queues == nil {
		cfg.Queues = []string{"sh"}
	}
	runWorker(t, newWorker(t, sp, cfg))
	return st, sp
}

func TestCommandOutcomes(t *testing.T) {
	t.Parallel()
	// The spec says what the script does; the environment is echoed back.
	script := `
spec=$(cat)
case "$spec" in
  '"json"') printf '{"id":"%s","queue":"%s","lease":%s,"attempt":%s}\n' "$NORN_TASK_ID" "$NORN_QUEUE" "$NORN_LEASE" "$NORN_ATTEMPT" ;;
  '"text"') echo "plain words" ;;
  '"empty"') ;;
  '"tempfail"') if [ "$NORN_ATTEMPT" = 1 ]; then echo "busy, later" >&2; exit 75; fi; echo '"second time lucky"' ;;
  '"abort"') echo "first line" >&2; echo "the reason" >&2; exit 3 ;;
  *) echo "unknown spec $spec" >&2; exit 9 ;;
esac`
	st, _ := shWorker(t, script, worker.Config{})
	ids := map[string]string{}
	for _, s := range []string{"json", "text", "empty", "tempfail", "abort"} {
		ids[s] = submit(t, st, norn.NewTask{Queue: "sh", Spec: json.RawMessage(`"` + s + `"`),
			Retry: &norn.RetryPolicy{MaxRetries: 2}})
	}

	tk := waitStatus(t, st, ids["json"], 10*time.Second, norn.StatusCompleted)
	var env struct {
		ID, Queue      string
		Lease, Attempt int
	}
	if err := json.Unmarshal(tk.Result, &env); err != nil || env.ID != ids["json"] || env.Queue != "sh" || env.Lease != 1 || env.Attempt != 1 {
		t.Errorf("json result %s (%v)", tk.Result, err)
	}
	tk = waitStatus(t, st, ids["text"], 10*time.Second, norn.StatusCompleted)
	if string(tk.Result) != `"plain words"` {
		t.Errorf("text result %s", tk.Result)
	}
	tk = waitStatus(t, st, ids["empty"], 10*time.Second, norn.StatusCompleted)
	if len(tk.Result) != 0 {
		t.Errorf("empty stdout gave result %s", tk.Result)
	}
	tk = waitStatus(t, st, ids["tempfail"], 10*time.Second, norn.StatusCompleted)
	if tk.Attempts != 2 || string(tk.Result) != `"second time lucky"` || len(tk.Errors) != 1 ||
		tk.Errors[0].Code != "exit_75" || !strings.Contains(tk.Errors[0].Description, "busy, later") {
		t.Errorf("tempfail: attempts %d result %s errors %+v", tk.Attempts, tk.Result, tk.Errors)
	}
	tk = waitStatus(t, st, ids["abort"], 10*time.Second, norn.StatusAborted)
	if tk.Attempts != 1 || len(tk.Errors) != 1 || tk.Errors[0].Code != "exit_3" ||
		!strings.Contains(tk.Errors[0].Description, "first line\nthe reason") {
		t.Errorf("abort: attempts %d errors %+v", tk.Attempts, tk.Errors)
	}
}

func TestCommandProgressLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gate := filepath.Join(dir, "go")
	script := `echo "progress: 0.4" >&2; while [ ! -e "` + gate + `" ]; do sleep 0.02; done`
	st, _ := shWorker(t, script, worker.Config{Lease: 300 * time.Millisecond})
	id := submit(t, st, norn.NewTask{Queue: "sh"})
	await.Until(t, 10*time.Second, "progress 0.4 stored", func() bool {
		tk, err := st.Get(context.Background(), id)
		return err == nil && tk.Status == norn.StatusRunning && tk.Progress == 0.4
	})
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, id, 10*time.Second, norn.StatusCompleted)
}

func TestCommandCancelKillsProcessGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	// The script starts a grandchild, records both pids, then waits forever.
	script := `sleep 1000 & echo "$$ $!" > "` + pids + `.tmp"; mv "` + pids + `.tmp" "` + pids + `"; wait`
	st, sp := shWorker(t, script, worker.Config{Lease: 600 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond})
	id := submit(t, st, norn.NewTask{Queue: "sh"})
	var procs []int
	await.Until(t, 10*time.Second, "pids written", func() bool {
		procs = pidsIn(pids)
		return len(procs) == 2
	})
	for _, p := range procs {
		if !alive(p) {
			t.Fatalf("process %d not running before the cancel", p)
		}
	}
	if _, err := st.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 5*time.Second, "script and grandchild killed", func() bool {
		return !alive(procs[0]) && !alive(procs[1])
	})
	if ops := sp.ops(id); len(ops) != 0 {
		t.Errorf("outcome calls for a cancelled task: %v", ops)
	}
}

// alive reports whether pid runs (a zombie waiting to be reaped counts as dead).
// pidsIn reads the process ids a test script wrote to path (nil while
// the file is not there yet).
func pidsIn(path string) []int {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		pids = append(pids, n)
	}
	return pids
}

func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || (s[i+2] != 'Z' && s[i+2] != 'X')
}

// TestCommandSnoozeKey: a command that exits 75 with "norn:snooze 1h key"
// snoozes its task and holds back its concurrency key, while another
// key's task runs.
func TestCommandSnoozeKey(t *testing.T) {
	t.Parallel()
	st, _ := shWorker(t, `[ "$(cat)" = '"hold"' ] && { echo "norn:snooze 1h key"; exit 75; }; exit 0`, worker.Config{})
	ctx := context.Background()
	if _, err := st.UpdateQueue(ctx, "sh", norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 100, Burst: 5}}); err != nil {
		t.Fatal(err)
	}
	submit(t, st, norn.NewTask{ID: "a0", Queue: "sh", ConcurrencyKey: "a", Spec: json.RawMessage(`"hold"`)})
	if tk := waitStatus(t, st, "a0", 10*time.Second, norn.StatusScheduled); tk.Attempts != 0 || len(tk.Errors) != 0 {
		t.Fatalf("a0 snoozed with attempts %d errors %+v", tk.Attempts, tk.Errors)
	}
	// One submit: the claim that takes b0 sees a1 as well.
	if _, err := st.Submit(ctx, norn.NewTask{ID: "a1", Queue: "sh", ConcurrencyKey: "a"},
		norn.NewTask{ID: "b0", Queue: "sh", ConcurrencyKey: "b"}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, "b0", 10*time.Second, norn.StatusCompleted)
	if a1, err := st.Get(ctx, "a1"); err != nil || a1.Status != norn.StatusReady {
		t.Fatalf("a1 of the held-back key: status %v, %v; want ready", a1.Status, err)
	}
}
