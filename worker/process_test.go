package worker_test

// Tests with real processes: worker processes are this test binary run again
// (TestMain sees NORN_TEST_PROC), talking to a real norn server over HTTP,
// and the test sends them SIGKILL, SIGSTOP/SIGCONT and SIGTERM.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/cli"
	"github.com/nornq/norn/internal/servertest"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/store/embedded"
	"github.com/nornq/norn/worker"
)

// Environment of a re-executed test binary.
const (
	envProc   = "NORN_TEST_PROC"   // "worker" (Go SDK worker) or "cli" (the norn command)
	envServer = "NORN_TEST_SERVER" // server URL
	envQueue  = "NORN_TEST_QUEUE"
	envMode   = "NORN_TEST_MODE"  // handler behaviour: block, complete, gate
	envMarks  = "NORN_TEST_MARKS" // directory for marker files
	envConc   = "NORN_TEST_CONCURRENCY"
	envGrace  = "NORN_TEST_GRACE"
)

func TestMain(m *testing.M) {
	switch os.Getenv(envProc) {
	case "worker":
		os.Exit(workerProcess())
	case "cli":
		os.Exit(cli.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// Handlers in mode "count" track how many of them run at once.
var procRunning, procPeak atomic.Int32

// workerProcess is the body of a worker process: a Go SDK worker on the
// HTTP client whose handler behaves as NORN_TEST_MODE says. It stops
// gracefully on SIGTERM.
func workerProcess() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	c, err := client.New(os.Getenv(envServer))
	if err != nil {
		log.Error("client", "err", err)
		return 1
	}
	marks := os.Getenv(envMarks)
	mode := os.Getenv(envMode)
	mark := func(tk *worker.Task, what string) {
		name := filepath.Join(marks, fmt.Sprintf("%s.%d.end", tk.ID, tk.Lease))
		_ = os.WriteFile(name+".tmp", []byte(what), 0o600)
		_ = os.Rename(name+".tmp", name)
	}
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		if mode == "block" || mode == "gate" {
			// The test waits for this mark before it signals the process:
			// a task seen running in the store may still be on its way to
			// the worker, and the server gives back leases whose claimer
			// hung up before receiving them.
			name := filepath.Join(marks, fmt.Sprintf("%s.%d.start", tk.ID, tk.Lease))
			_ = os.WriteFile(name, nil, 0o600)
		}
		switch mode {
		case "block": // run until cancelled
			<-ctx.Done()
			mark(tk, context.Cause(ctx).Error())
			return context.Cause(ctx)
		case "gate": // run until the gate file exists, then complete
			for {
				if _, err := os.Stat(filepath.Join(marks, "gate")); err == nil {
					mark(tk, "returned")
					return tk.SetResult(map[string]int{"pid": os.Getpid()})
				}
				select {
				case <-ctx.Done():
					mark(tk, context.Cause(ctx).Error())
					return context.Cause(ctx)
				case <-time.After(10 * time.Millisecond):
				}
			}
		case "count": // complete after a short while, reporting the peak concurrency seen
			n := procRunning.Add(1)
			defer procRunning.Add(-1)
			for {
				p := procPeak.Load()
				if n <= p || procPeak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
			return tk.SetResult(map[string]int32{"peak": procPeak.Load()})
		default: // complete at once
			return tk.SetResult(map[string]int{"pid": os.Getpid()})
		}
	})
	conc, _ := strconv.Atoi(os.Getenv(envConc))
	grace, _ := time.ParseDuration(os.Getenv(envGrace))
	w, err := worker.New(c, worker.Config{
		Handler: h, Queues: []string{os.Getenv(envQueue)}, Concurrency: max(conc, 1),
		ShutdownGrace: grace, Wait: 5 * time.Second, PollInterval: 50 * time.Millisecond, Logger: log,
	})
	if err != nil {
		log.Error("worker", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Error("run", "err", err)
		return 1
	}
	return 0
}

// startServer runs a real norn server on an embedded store.
func startServer(t *testing.T) (*embedded.Store, string) {
	t.Helper()
	st := openStore(t)
	return st, servertest.Start(t, server.Config{Store: st}).URL()
}

// proc is a child process of a test.
type proc struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startProc re-executes the test binary with env and args. At cleanup it is
// killed if still running, and its output is logged when the test failed.
func startProc(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], args...), out: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.out.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit error.
func (p *proc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("process %d did not exit within %s", p.cmd.Process.Pid, timeout)
		return nil
	}
}

func workerEnv(url, queue, mode, marks string, conc int, grace time.Duration) []string {
	return []string{envProc + "=worker", envServer + "=" + url, envQueue + "=" + queue, envMode + "=" + mode,
		envMarks + "=" + marks, envConc + "=" + strconv.Itoa(conc), envGrace + "=" + grace.String()}
}

// submitN submits n tasks with the given lease timeout.
func submitN(t *testing.T, st norn.Store, queue string, n int, timeout time.Duration) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		ids = append(ids, submit(t, st, norn.NewTask{Queue: queue, Timeout: norn.Duration(timeout)}))
	}
	return ids
}

// waitRunningBy waits until every task runs under one owner and its
// handler has started (so the worker holds the lease), and returns the owner.
func waitRunningBy(t *testing.T, st norn.Store, marks string, ids []string) string {
	t.Helper()
	await.Until(t, 20*time.Second, "handlers started", func() bool {
		for _, id := range ids {
			if _, err := os.Stat(filepath.Join(marks, id+".1.start")); err != nil {
				return false
			}
		}
		return true
	})
	var owner string
	await.Until(t, 20*time.Second, "tasks running in one worker", func() bool {
		owner = ""
		for _, id := range ids {
			tk, err := st.Get(context.Background(), id)
			if err != nil || tk.Status != norn.StatusRunning || (owner != "" && tk.Owner != owner) {
				return false
			}
			owner = tk.Owner
		}
		return true
	})
	return owner
}

func TestProcessSIGKILLedWorkersTasksRunAgainAfterLeaseExpiry(t *testing.T) {
	t.Parallel()
	st, url := startServer(t)
	marks := t.TempDir()
	ids := submitN(t, st, "killed", 3, time.Second)
	p1 := startProc(t, "worker 1", workerEnv(url, "killed", "block", marks, 3, time.Second))
	first := waitRunningBy(t, st, marks, ids)
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p1.wait(t, 10*time.Second)
	killed := time.Now()
	startProc(t, "worker 2", workerEnv(url, "killed", "complete", marks, 3, time.Second))
	for _, id := range ids {
		tk := waitStatus(t, st, id, 20*time.Second, norn.StatusCompleted)
		if tk.Attempts != 2 || tk.Lease != 2 || tk.Owner == first {
			t.Errorf("task %s: attempts %d lease %d owner %s (first owner %s), want a second attempt elsewhere",
				id, tk.Attempts, tk.Lease, tk.Owner, first)
		}
		want := []norn.HistoryType{norn.TaskAssignment, norn.TaskTimeout, norn.TaskAssignment, norn.TaskComplete}
		if h := historyTypes(tk); !slices.Equal(h, want) {
			t.Errorf("task %s: history %v, want %v", id, h, want)
		}
		if len(tk.Errors) != 1 || tk.Errors[0].Code != norn.CodeTimeout {
			t.Errorf("task %s: errors %+v, want one timeout", id, tk.Errors)
		}
	}
	t.Logf("re-run %s after SIGKILL (lease 1s)", time.Since(killed).Round(time.Millisecond))
}

func TestProcessSIGSTOPPastLeaseLateCompleteIsRefused(t *testing.T) {
	t.Parallel()
	st, url := startServer(t)
	marks := t.TempDir()
	ids := submitN(t, st, "stopped", 1, time.Second)
	id := ids[0]
	p1 := startProc(t, "worker 1", workerEnv(url, "stopped", "gate", marks, 1, time.Second))
	first := waitRunningBy(t, st, marks, ids)
	if err := p1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The monitor times the stopped worker's lease out; a second worker
	// takes the task and completes it.
	tk := waitStatus(t, st, id, 20*time.Second, norn.StatusReady, norn.StatusRunning, norn.StatusCompleted)
	if tk.Status == norn.StatusRunning && tk.Owner == first {
		tk = waitStatus(t, st, id, 20*time.Second, norn.StatusReady)
	}
	p2 := startProc(t, "worker 2", workerEnv(url, "stopped", "complete", marks, 1, time.Second))
	done := waitStatus(t, st, id, 20*time.Second, norn.StatusCompleted)
	if done.Owner == first || done.Lease != 2 {
		t.Fatalf("completed by %s under lease %d, want the second worker under lease 2", done.Owner, done.Lease)
	}
	// Let the first worker finish its handler and try to report.
	if err := os.WriteFile(filepath.Join(marks, "gate"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p1.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	end := filepath.Join(marks, id+".1.end")
	await.Until(t, 10*time.Second, "first worker's handler to return", func() bool {
		_, err := os.Stat(end)
		return err == nil
	})
	// Give its report (if the SDK sent one at all) time to reach the store,
	// by asking the first worker process to stop and waiting for it.
	_ = p1.cmd.Process.Signal(syscall.SIGTERM)
	if err := p1.wait(t, 10*time.Second); err != nil {
		t.Errorf("first worker exit: %v", err)
	}
	tk, err := st.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Status != norn.StatusCompleted || string(tk.Result) != string(done.Result) || tk.Version != done.Version {
		t.Errorf("task changed after the late worker resumed: %s result %s version %d (was %d)",
			tk.Status, tk.Result, tk.Version, done.Version)
	}
	completions := 0
	for _, h := range tk.History {
		if h.Type == norn.TaskComplete {
			completions++
		}
	}
	if completions != 1 {
		t.Errorf("%d completions in history %v, want exactly one", completions, historyTypes(tk))
	}
	// And the store itself refuses the stale lease over HTTP.
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Complete(context.Background(), norn.LeaseRef{TaskID: id, Worker: first, Lease: 1}, nil)
	if !errors.Is(err, norn.ErrLeaseLost) {
		t.Errorf("late complete with lease 1: %v, want lease lost", err)
	}
	_ = p2.cmd.Process.Signal(syscall.SIGTERM)
	_ = p2.wait(t, 10*time.Second)
}

func TestProcessSIGTERMYieldsToSecondWorker(t *testing.T) {
	t.Parallel()
	st, url := startServer(t)
	marks := t.TempDir()
	// Leases far longer than the test: only a yield can move these tasks.
	ids := submitN(t, st, "termed", 2, time.Minute)
	p1 := startProc(t, "worker 1", workerEnv(url, "termed", "block", marks, 2, 100*time.Millisecond))
	first := waitRunningBy(t, st, marks, ids)
	// The second worker is already long-polling when the first one stops.
	p2 := startProc(t, "worker 2", workerEnv(url, "termed", "complete", marks, 2, time.Second))
	await.Until(t, 10*time.Second, "second worker registered", func() bool {
		ws, err := st.Workers(context.Background())
		return err == nil && len(ws) == 2
	})
	termed := time.Now()
	if err := p1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p1.wait(t, 10*time.Second); err != nil {
		t.Errorf("first worker exit after SIGTERM: %v", err)
	}
	for _, id := range ids {
		tk := waitStatus(t, st, id, 10*time.Second, norn.StatusCompleted)
		want := []norn.HistoryType{norn.TaskAssignment, norn.TaskYield, norn.TaskAssignment, norn.TaskComplete}
		if h := historyTypes(tk); !slices.Equal(h, want) || tk.Attempts != 1 || tk.Owner == first {
			t.Errorf("task %s: history %v attempts %d owner %s (first %s), want yielded to the second worker",
				id, h, tk.Attempts, tk.Owner, first)
		}
		b, err := os.ReadFile(filepath.Join(marks, id+".1.end"))
		if err != nil || !strings.Contains(string(b), "shutting down") {
			t.Errorf("first handler of %s: cause %q (%v), want the shutdown cause", id, b, err)
		}
	}
	// One claim round: the waiting claim wakes on the yield; far sooner
	// than the one-minute lease could expire.
	if d := time.Since(termed); d > 5*time.Second {
		t.Errorf("tasks picked up %s after SIGTERM", d)
	}
	_ = p2.cmd.Process.Signal(syscall.SIGTERM)
	if err := p2.wait(t, 10*time.Second); err != nil {
		t.Errorf("second worker exit: %v", err)
	}
}

func TestProcessNornWorkRunsCommandsAndKillsCancelled(t *testing.T) {
	t.Parallel()
	st, url := startServer(t)
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	script := `spec=$(cat)
if [ "$spec" = '"hang"' ]; then
  sleep 1000 & echo "$$ $!" > "` + pids + `.tmp"; mv "` + pids + `.tmp" "` + pids + `"; wait
fi
echo "progress: 0.5" >&2
printf '{"spec":%s,"attempt":%s}' "$spec" "$NORN_ATTEMPT"`
	p := startProc(t, "norn work", []string{envProc + "=cli"},
		"--server", url, "work", "-q", "cmd", "-c", "2", "--kill-grace", "0", "--grace", "1s", "--", "sh", "-c", script)
	ok := submit(t, st, norn.NewTask{Queue: "cmd", Spec: []byte(`{"n":1}`)})
	tk := waitStatus(t, st, ok, 20*time.Second, norn.StatusCompleted)
	if string(tk.Result) != `{"spec":{"n":1},"attempt":1}` {
		t.Errorf("result %s", tk.Result)
	}

	hang := submit(t, st, norn.NewTask{Queue: "cmd", Spec: []byte(`"hang"`), Timeout: norn.Duration(900 * time.Millisecond)})
	var procs []int
	await.Until(t, 20*time.Second, "hanging command started", func() bool {
		procs = pidsIn(pids)
		return len(procs) == 2 && alive(procs[0]) && alive(procs[1])
	})
	if _, err := st.Cancel(context.Background(), hang); err != nil {
		t.Fatal(err)
	}
	// Within one heartbeat (a third of 900ms) plus slack.
	await.Until(t, 5*time.Second, "cancelled command and its child killed", func() bool {
		return !alive(procs[0]) && !alive(procs[1])
	})
	if tk, _ := st.Get(context.Background(), hang); tk.Status != norn.StatusCancelled {
		t.Errorf("cancelled task is %s", tk.Status)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 10*time.Second); err != nil {
		t.Errorf("norn work exit after SIGTERM: %v", err)
	}
}

func TestProcessConcurrencyLimitNeverExceeded(t *testing.T) {
	t.Parallel()
	st, url := startServer(t)
	const limit = 3
	ids := submitN(t, st, "counted", 30, 10*time.Second)
	startProc(t, "worker", workerEnv(url, "counted", "count", t.TempDir(), limit, time.Second))
	peak := 0
	for _, id := range ids {
		tk := waitStatus(t, st, id, 20*time.Second, norn.StatusCompleted)
		var res struct{ Peak int }
		if err := json.Unmarshal(tk.Result, &res); err != nil {
			t.Fatalf("result %s: %v", tk.Result, err)
		}
		peak = max(peak, res.Peak)
	}
	if peak > limit {
		t.Errorf("%d handlers ran at once in the worker process, limit %d", peak, limit)
	} else if peak < 2 {
		t.Errorf("peak %d: tasks never ran in parallel, the check proves nothing", peak)
	}
}
