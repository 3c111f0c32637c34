package embedded

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/nornq/norn"
)

var bg = context.Background()

// newTestStore opens a store in a fresh temporary directory, closed at cleanup.
func newTestStore(t testing.TB, o Options) *Store {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// fakeClock is a manual clock (the conformance suite has its own).
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func mustSubmit(t testing.TB, s norn.Store, nts ...norn.NewTask) []*norn.Task {
	t.Helper()
	res, err := s.Submit(bg, nts...)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	out := make([]*norn.Task, len(res))
	for i, r := range res {
		out[i] = r.Task
	}
	return out
}

func mustClaim(t testing.TB, s norn.Store, worker string, n int, queues ...string) []*norn.Task {
	t.Helper()
	ts, err := s.Claim(bg, norn.ClaimRequest{Worker: worker, Queues: queues, N: n})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return ts
}

func refOf(tk *norn.Task) norn.LeaseRef {
	return norn.LeaseRef{TaskID: tk.ID, Worker: tk.Owner, Lease: tk.Lease}
}

// TestReopenRebuildsIndexes checks that every index survives a restart:
// counters, ready order, timers, dependency counters, queue settings,
// worker sequence, leases and logs.
func TestReopenRebuildsIndexes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := newFakeClock()
	s, err := Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	paused := true
	if _, err := s.UpdateQueue(bg, "p", norn.QueueUpdate{Paused: &paused}); err != nil {
		t.Fatal(err)
	}
	w1, _ := s.RegisterWorker(bg, norn.WorkerInfo{Name: "a", Registrar: "token:a"})
	mustSubmit(t, s,
		norn.NewTask{ID: "lo", Queue: "q", Priority: 1},
		norn.NewTask{ID: "hi", Queue: "q", Priority: 9},
		norn.NewTask{ID: "run", Queue: "r", Timeout: norn.Duration(time.Minute)},
		norn.NewTask{ID: "later", Queue: "q", Priority: 100, Delay: norn.Duration(time.Hour)},
		norn.NewTask{ID: "dep", Queue: "d"},
		norn.NewTask{ID: "child", Queue: "q", Priority: 50, DependsOn: []string{"dep"}, Labels: map[string]string{"k": "v"}},
		norn.NewTask{ID: "pq", Queue: "p"},
	)
	run := mustClaim(t, s, w1, 1, "r")[0]
	if _, err := s.AppendLog(bg, refOf(run), norn.LogAppend{Data: json.RawMessage(`{"step":1}`)}); err != nil {
		t.Fatal(err)
	}
	before, _ := s.CountGrouped(bg, norn.Filter{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, _ := s.CountGrouped(bg, norn.Filter{})
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("counts changed across reopen:\n%v\n%v", before, after)
	}
	if q, _ := s.Queue(bg, "p"); !q.Paused {
		t.Fatal("queue p lost its paused setting")
	}
	if got := mustClaim(t, s, "w", 1, "p"); len(got) != 0 {
		t.Fatal("claimed from a paused queue after reopen")
	}
	w2, _ := s.RegisterWorker(bg, norn.WorkerInfo{Registrar: "token:b"})
	ws, _ := s.Workers(bg)
	if w1 == w2 || len(ws) != 2 || ws[0].ID != w1 || ws[1].ID != w2 {
		t.Fatalf("worker ids %s, %s; listed %+v: the registration must survive and the order continue", w1, w2, ws)
	}
	if info, err := s.Worker(bg, w1); err != nil || info.Registrar != "token:a" || info.Name != "a" {
		t.Fatalf("Worker(%s) after reopen: %+v, %v; want its registrar back", w1, info, err)
	}
	// Ready order: hi before lo; "later" is still scheduled.
	got := mustClaim(t, s, "w", 10, "q")
	if len(got) != 2 || got[0].ID != "hi" || got[1].ID != "lo" {
		t.Fatalf("claim order after reopen: %v", got)
	}
	// The lease survives: the old owner can still log and the log continues.
	e, err := s.AppendLog(bg, refOf(run), norn.LogAppend{Data: json.RawMessage(`2`)})
	if err != nil || e.Seq != 2 {
		t.Fatalf("AppendLog after reopen: %v seq %d", err, e.Seq)
	}
	// Dependency counters: completing dep releases child.
	dep := mustClaim(t, s, "w", 1, "d")[0]
	if err := s.Complete(bg, refOf(dep), nil); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Get(bg, "child"); c.Status != norn.StatusReady || c.Labels["k"] != "v" {
		t.Fatalf("child after dependency completed: %s %v", c.Status, c.Labels)
	}
	// Timers: the lease of "run" and the delay of "later" fire.
	clock.Advance(2 * time.Hour)
	rep, err := s.Sweep(bg)
	if err != nil || rep.TimedOut != 3 || rep.Released != 1 {
		t.Fatalf("sweep after reopen: %+v %v", rep, err)
	}
	// Heap order after reopen puts the highest priority first.
	got = mustClaim(t, s, "w", 1, "q")
	if got[0].ID != "later" {
		t.Fatalf("claimed %s, want later (priority 100)", got[0].ID)
	}
}

func TestSecondOpenerRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := newTestStore(t, Options{Dir: dir})
	_, err := Open(bg, Options{Dir: dir})
	if err == nil {
		t.Fatal("second Open of the same directory succeeded")
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Open error %q does not name the directory as in use", err)
	}
	_ = s
}

func TestClosedStore(t *testing.T) {
	t.Parallel()
	s, err := Open(bg, Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Get(bg, "x"); !errors.Is(err, norn.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if _, err := s.Submit(bg, norn.NewTask{Queue: "q"}); !errors.Is(err, norn.ErrClosed) {
		t.Fatalf("Submit after Close: %v", err)
	}
}

func TestOpenOptionsValidated(t *testing.T) {
	t.Parallel()
	if _, err := Open(bg, Options{}); !errors.Is(err, norn.ErrInvalidArgument) {
		t.Fatalf("Open without Dir: %v", err)
	}
	if _, err := Open(bg, Options{Dir: t.TempDir(), Durability: 7}); !errors.Is(err, norn.ErrInvalidArgument) {
		t.Fatalf("Open with bad durability: %v", err)
	}
	for in, want := range map[string]Durability{"": Strict, "strict": Strict, "opportunistic": Opportunistic} {
		if d, err := ParseDurability(in); err != nil || d != want {
			t.Errorf("ParseDurability(%q) = %v, %v", in, d, err)
		}
	}
	if _, err := ParseDurability("eventually"); err == nil {
		t.Error("ParseDurability accepted nonsense")
	}
}

// TestMonitorRealClock: with the real clock and no Sweep calls, the store's
// own event-driven monitor times out leases, releases delays and purges.
func TestMonitorRealClock(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{})
	ret := norn.Retention{Completed: norn.Duration(50 * time.Millisecond)}
	if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{Retention: &ret}); err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, s,
		norn.NewTask{ID: "lease", Queue: "q", Timeout: norn.Duration(50 * time.Millisecond)},
		norn.NewTask{ID: "delay", Queue: "d", Delay: norn.Duration(80 * time.Millisecond)},
		norn.NewTask{ID: "done", Queue: "q", Priority: 1, Timeout: norn.Duration(time.Hour)},
	)
	tk := mustClaim(t, s, "w", 2, "q")
	for _, x := range tk {
		if x.ID == "done" {
			if err := s.Complete(bg, refOf(x), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	status := func(id string) norn.Status {
		x, err := s.Get(bg, id)
		if errors.Is(err, norn.ErrNotFound) {
			return "gone"
		}
		if err != nil {
			t.Fatal(err)
		}
		return x.Status
	}
	await.Until(t, 5*time.Second, "lease timeout", func() bool { return status("lease") == norn.StatusReady })
	await.Until(t, 5*time.Second, "delay release", func() bool { return status("delay") == norn.StatusReady })
	await.Until(t, 5*time.Second, "retention purge", func() bool { return status("done") == "gone" })
	x, _ := s.Get(bg, "lease")
	if x.History[len(x.History)-1].Type != norn.TaskTimeout {
		t.Fatalf("history after timeout: %+v", x.History)
	}
}

// TestClaimWaitWakes: a long-polling claim returns as soon as a task is
// submitted, well before its wait expires.
func TestClaimWaitWakes(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{})
	got := make(chan []*norn.Task, 1)
	start := time.Now()
	go func() {
		ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"a", "b"}, Wait: norn.Duration(20 * time.Second)})
		if err != nil {
			t.Error(err)
		}
		got <- ts
	}()
	// The submit must find the claim waiting, so that it is the wake-up,
	// not the claim's first look, that hands the task over.
	await.Until(t, 10*time.Second, "the claim to wait on queue b", func() bool { return waiting(s, "b") })
	mustSubmit(t, s, norn.NewTask{ID: "x", Queue: "b"})
	select {
	case ts := <-got:
		if len(ts) != 1 || ts[0].ID != "x" {
			t.Fatalf("woken claim got %v", ts)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiting claim was not woken")
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("claim waited for its timeout instead of waking")
	}
	// A cancelled context ends the wait.
	ctx, cancel := context.WithCancel(bg)
	go func() {
		await.Until(t, 10*time.Second, "the claim to wait on queue none", func() bool { return waiting(s, "none") })
		cancel()
	}()
	if _, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"none"}, Wait: norn.Duration(time.Minute)}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with cancelled ctx: %v", err)
	}
}

// waiting reports whether a claim waits on queue.
func waiting(s *Store, queue string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queue]
	return q != nil && len(q.waiters) > 0
}

func TestOpportunistic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(bg, Options{Dir: dir, Durability: Opportunistic, SyncInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var nts []norn.NewTask
	for i := range 500 {
		nts = append(nts, norn.NewTask{ID: fmt.Sprintf("t%04d", i), Queue: "q"})
	}
	mustSubmit(t, s, nts...)
	for i := 0; i < 100; i++ {
		tk := mustClaim(t, s, "w", 1, "q")[0]
		if err := s.Complete(bg, refOf(tk), json.RawMessage(`true`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(bg, Options{Dir: dir, Durability: Opportunistic})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n, _ := s.Count(bg, norn.Filter{Statuses: []norn.Status{norn.StatusCompleted}})
	m, _ := s.Count(bg, norn.Filter{Statuses: []norn.Status{norn.StatusReady}})
	if n != 100 || m != 400 {
		t.Fatalf("after reopen: %d completed, %d ready; want 100, 400", n, m)
	}
}

func TestSubscribeLagged(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{EventBuffer: 2})
	ev, err := s.Subscribe(bg, norn.EventFilter{Queues: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	mustSubmit(t, s, norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
		norn.NewTask{ID: "c", Queue: "q"}, norn.NewTask{ID: "other", Queue: "z"})
	var kinds []norn.EventKind
	for i := 0; i < 3 && ev.Next(); i++ {
		kinds = append(kinds, ev.Item().Kind)
	}
	want := []norn.EventKind{norn.EventLagged, norn.EventSubmitted, norn.EventSubmitted}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
}

// History and log entries are their own keys: a long-lived task never
// rewrites its whole record, and the cap drops the oldest entries.
func TestHistoryCapOnDisk(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{HistoryLimit: 3})
	mustSubmit(t, s, norn.NewTask{ID: "x", Queue: "q"})
	for i := 0; i < 5; i++ {
		tk := mustClaim(t, s, "w", 1, "q")[0]
		if err := s.Yield(bg, refOf(tk)); err != nil {
			t.Fatal(err)
		}
	}
	x, _ := s.Get(bg, "x")
	if len(x.History) != 3 || x.HistoryDropped != 7 || x.History[2].Type != norn.TaskYield {
		t.Fatalf("history %d entries, dropped %d", len(x.History), x.HistoryDropped)
	}
	// Only the last 3 history keys remain on disk.
	it, _ := s.db.NewIter(nil)
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if _, suf, _ := splitTaskKey(it.Key()); len(suf) > 0 && suf[0] == sufHistory {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d history keys on disk, want 3", n)
	}
}

// The crash test: a child process submits and completes tasks in strict mode
// and prints every acknowledged operation; the parent kills it with SIGKILL
// at a random moment, reopens, and checks that everything acknowledged is
// there. It runs 20 rounds on one directory.
const crashEnv = "NORN_EMBEDDED_CRASH_CHILD"

func TestCrashSafety(t *testing.T) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir, os.Getenv(crashEnv+"_ROUND"))
		return
	}
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	dir := t.TempDir()
	acked := map[string]string{} // id -> "submitted" | "completed"
	rounds := 20
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashSafety$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir, fmt.Sprintf("%s_ROUND=%d", crashEnv, round))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(out)
		// Wait for the child to start acknowledging, then kill it at a
		// random moment while it works.
		first, err := r.ReadString('\n')
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child produced no output: %v", round, err)
		}
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		rest, _ := io.ReadAll(r)
		cmd.Wait()
		lines := strings.Split(first+string(rest), "\n")
		// The last line may be cut by the kill; only whole lines count.
		lines = lines[:len(lines)-1]
		for _, l := range lines {
			op, id, ok := strings.Cut(l, " ")
			if !ok {
				t.Fatalf("round %d: bad child line %q", round, l)
			}
			acked[id] = op
		}
		var logged strings.Builder
		logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn}))
		s, err := Open(bg, Options{Dir: dir, ManualSweep: true, Logger: logger})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		if logged.Len() > 0 {
			t.Errorf("round %d: reopen needed repair or complained:\n%s", round, logged.String())
		}
		for id, op := range acked {
			tk, err := s.Get(bg, id)
			if err != nil {
				s.Close()
				t.Fatalf("round %d: acknowledged %s task %s: %v", round, op, id, err)
			}
			if op == "completed" && tk.Status != norn.StatusCompleted {
				s.Close()
				t.Fatalf("round %d: task %s acknowledged completed is %s", round, id, tk.Status)
			}
			if err := crashHistoryOK(op, tk); err != nil {
				s.Close()
				t.Fatalf("round %d: task %s acknowledged %s: %v", round, id, op, err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %d ops acknowledged so far", round, len(acked))
	}
	if len(acked) < rounds {
		t.Fatalf("only %d acknowledged ops in %d rounds: the child barely ran", len(acked), rounds)
	}
}

// crashHistoryOK checks the history of a task acknowledged claimed (an
// assignment last, to worker w under the task's lease) or completed (that
// assignment, then the completion).
func crashHistoryOK(op string, tk *norn.Task) error {
	var want []norn.HistoryType
	switch op {
	case "claimed":
		if tk.Status != norn.StatusRunning && tk.Status != norn.StatusCompleted {
			return fmt.Errorf("status %s", tk.Status)
		}
		if tk.Status == norn.StatusRunning {
			want = []norn.HistoryType{norn.TaskAssignment}
		} else {
			want = []norn.HistoryType{norn.TaskAssignment, norn.TaskComplete}
		}
	case "completed":
		want = []norn.HistoryType{norn.TaskAssignment, norn.TaskComplete}
	default:
		return nil
	}
	if len(tk.History) != len(want) {
		return fmt.Errorf("history %+v, want %v", tk.History, want)
	}
	for i, h := range tk.History {
		if h.Type != want[i] || h.Worker != "w" || h.Lease != tk.Lease || h.Lease == 0 {
			return fmt.Errorf("history %+v, want %v by w under lease %d", tk.History, want, tk.Lease)
		}
	}
	if !tk.History[0].Time.Equal(tk.Started) {
		return fmt.Errorf("assignment at %v, started %v", tk.History[0].Time, tk.Started)
	}
	return nil
}

// crashChild works until killed: submits batches, claims and completes,
// printing each operation once the store acknowledged it.
func crashChild(dir, round string) {
	s, err := Open(bg, Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	for i := 0; ; i++ {
		var nts []norn.NewTask
		for j := range 5 {
			nts = append(nts, norn.NewTask{ID: fmt.Sprintf("r%s-%d-%d", round, i, j), Queue: "q",
				Spec: json.RawMessage(`{"payload":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`)})
		}
		res, err := s.Submit(bg, nts...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child submit:", err)
			os.Exit(2)
		}
		for _, r := range res {
			fmt.Printf("submitted %s\n", r.Task.ID)
		}
		ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 3})
		if err != nil {
			fmt.Fprintln(os.Stderr, "child claim:", err)
			os.Exit(2)
		}
		for _, tk := range ts {
			fmt.Printf("claimed %s\n", tk.ID)
		}
		for _, tk := range ts {
			if err := s.Complete(bg, refOf(tk), json.RawMessage(`1`)); err != nil {
				fmt.Fprintln(os.Stderr, "child complete:", err)
				os.Exit(2)
			}
			fmt.Printf("completed %s\n", tk.ID)
		}
	}
}

// TestClaimedTasksDoNotShareMemory: the tasks of one claim are decoded
// into shared memory (one allocation for all); appending to one task's
// spec or history must not write into another's.
func TestClaimedTasksDoNotShareMemory(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{})
	var nts []norn.NewTask
	for i := range 3 {
		nts = append(nts, norn.NewTask{Queue: "q", Spec: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
	mustSubmit(t, s, nts...)
	got := mustClaim(t, s, "w", 3, "q")
	if len(got) != 3 {
		t.Fatalf("claimed %d tasks, want 3", len(got))
	}
	specs := make([]string, 3)
	for i, tk := range got {
		specs[i] = string(tk.Spec)
		if len(tk.History) != 1 || tk.History[0].Type != norn.TaskAssignment {
			t.Fatalf("task %d history %+v", i, tk.History)
		}
	}
	for i, tk := range got {
		tk.Spec = append(tk.Spec, "XXXXXXXX"...)
		tk.History = append(tk.History, norn.HistoryEntry{Type: norn.TaskComplete})
		for j := i + 1; j < 3; j++ {
			if string(got[j].Spec) != specs[j] || len(got[j].History) != 1 || got[j].History[0].Type != norn.TaskAssignment {
				t.Fatalf("appending to task %d changed task %d: spec %s, history %+v", i, j, got[j].Spec, got[j].History)
			}
		}
	}
}

// TestClaimReturnsWhatGetReads: Claim decodes its tasks from a view taken
// before its own write and adds the new state and assignment entry
// itself; what it returns must be exactly what Get reads afterwards, for
// fresh tasks, tasks with labels changed, tasks claimed again after
// failures (errors, longer history) and tasks whose history reached the
// limit, with generated and chosen ids, over several claim sizes.
func TestClaimReturnsWhatGetReads(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s := newTestStore(t, Options{HistoryLimit: 4, Clock: clock, ManualSweep: true})
	var nts []norn.NewTask
	for i := range 40 {
		nt := norn.NewTask{Queue: "q", Priority: uint32(i % 3), Spec: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			Labels: map[string]string{"n": fmt.Sprint(i)}}
		if i%2 == 0 {
			nt.ID = fmt.Sprintf("own-%02d", i)
		}
		nts = append(nts, nt)
	}
	tasks := mustSubmit(t, s, nts...)
	for i, tk := range tasks {
		if i%5 == 0 {
			if _, err := s.Update(bg, tk.ID, norn.Update{Labels: map[string]string{"changed": "yes"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(round int, got []*norn.Task) {
		t.Helper()
		for _, tk := range got {
			want, err := s.Get(bg, tk.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tk, want) {
				t.Fatalf("round %d: claimed task differs from Get:\nclaim %+v\nget   %+v", round, tk, want)
			}
		}
	}
	for round := 0; round < 12; round++ {
		got := mustClaim(t, s, fmt.Sprintf("w%d", round%3), 1+round%7, "q")
		if len(got) == 0 {
			break
		}
		check(round, got)
		// Send most back (fail with a retry, yield) so that later claims
		// see tasks with errors and history beyond the limit.
		for i, tk := range got {
			var err error
			switch i % 3 {
			case 0:
				err = s.Fail(bg, refOf(tk), norn.ErrorInfo{Code: "boom", Description: fmt.Sprint(round)})
			case 1:
				err = s.Yield(bg, refOf(tk))
			default:
				err = s.Complete(bg, refOf(tk), json.RawMessage(`{"ok":true}`))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(time.Hour) // retries become due
		if _, err := s.Sweep(bg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBlockCacheHoldsBlocks: Pebble counts its memtables against the
// block cache; the store must leave the cache room for blocks once the
// memtables have grown to their full size (they start small), or every
// read goes to the file. Small memtables and cache here make that
// happen after a few MB.
func TestBlockCacheHoldsBlocks(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{CacheSize: 1 << 20, memTableSize: 1 << 20})
	spec := json.RawMessage(`{"p":"` + strings.Repeat("x", 1000) + `"}`)
	var ids []string
	for range 8 {
		var nts []norn.NewTask
		for range 1000 {
			nts = append(nts, norn.NewTask{Queue: "q", Spec: spec})
		}
		for _, tk := range mustSubmit(t, s, nts...) {
			ids = append(ids, tk.ID)
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	read := func() {
		for _, id := range ids[:200] {
			if _, err := s.Get(bg, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	read()
	before := s.db.Metrics().BlockCache
	read()
	after := s.db.Metrics().BlockCache
	if hits := after.Hits - before.Hits; hits == 0 {
		t.Fatalf("reading the same 200 tasks again hit the block cache 0 times (%d misses; cache %+v)", after.Misses-before.Misses, after)
	}
}
