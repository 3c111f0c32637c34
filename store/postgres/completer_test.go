package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/nornq/norn"
)

// TestCompletionsMerged holds the first completion statement while other
// callers complete: their completions then go out together in one
// statement, and each caller still gets its own answer — successes, a lost
// lease, a cancelled task, a repeat of a completion that took effect, and
// two callers completing the same task (the second is a repeat of the
// first) — and every acknowledged completion is stored.
func TestCompletionsMerged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hold := make(chan struct{})
	var mu sync.Mutex
	var flushes []int
	s := openTest(t, nil, func(c *Config) {
		c.DisableMonitor = true
		c.completionFlushes = 1 // what is queued behind a flush goes out together
		c.flushPause = func(callers int) {
			mu.Lock()
			flushes = append(flushes, callers)
			held := len(flushes) == 2
			mu.Unlock()
			if held {
				<-hold
			}
		}
	})
	var in []norn.NewTask
	for i := 0; i < 20; i++ {
		in = append(in, norn.NewTask{ID: fmt.Sprintf("t%02d", i), Queue: "q"})
	}
	if _, err := s.Submit(ctx, in...); err != nil {
		t.Fatal(err)
	}
	tasks, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 20, Timeout: norn.Duration(time.Hour)})
	if err != nil || len(tasks) != 20 {
		t.Fatalf("claim: %d %v", len(tasks), err)
	}
	ref := func(i int) norn.LeaseRef {
		return norn.LeaseRef{TaskID: tasks[i].ID, Worker: "w", Lease: tasks[i].Lease}
	}
	complete := func(i int) norn.LeaseOp {
		return norn.LeaseOp{Op: norn.OpComplete, LeaseRef: ref(i), Result: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))}
	}
	// t19 completes before the merge: completing it again is a repeat.
	if err := s.Complete(ctx, ref(19), json.RawMessage(`{"n":19}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, tasks[18].ID); err != nil {
		t.Fatal(err)
	}
	// The second flush, t00's, is held.
	first := make(chan error, 1)
	go func() { first <- s.Complete(ctx, ref(0), json.RawMessage(`{"n":0}`)) }()
	await.Until(t, 10*time.Second, "the first flush", func() bool { mu.Lock(); defer mu.Unlock(); return len(flushes) == 2 })

	lost := complete(17)
	lost.Lease++
	calls := [][]norn.LeaseOp{
		{complete(1), complete(2), complete(3)},
		{complete(4), complete(5)},
		{complete(6), lost},
		{complete(18)},
		{complete(19)},
		{complete(7), complete(8)},
		{complete(8)}, // the same task as the call before: decided after it
	}
	want := [][]norn.Code{{"", "", ""}, {"", ""}, {"", norn.CodeLeaseLost}, {norn.CodeCancelled}, {""}, {"", ""}, {""}}
	res := make([][]norn.LeaseOpResult, len(calls))
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, ops := range calls {
		wg.Add(1)
		go func() { defer wg.Done(); res[i], errs[i] = s.LeaseBatch(ctx, ops) }()
	}
	await.Until(t, 10*time.Second, "every caller queued", func() bool {
		s.completer.mu.Lock()
		defer s.completer.mu.Unlock()
		return len(s.completer.queue) == len(calls)
	})
	close(hold)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("held completion: %v", err)
	}
	for i := range calls {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		for k, r := range res[i] {
			var code norn.Code
			if r.Err != nil {
				code = r.Err.Code
			}
			if code != want[i][k] {
				t.Errorf("call %d op %d: %v, want %q", i, k, r.Err, want[i][k])
			}
		}
	}
	mu.Lock()
	got := append([]int(nil), flushes...)
	mu.Unlock()
	// t19 alone, t00 held, then the six callers without a clash in one
	// statement, then the one naming t08 again.
	if len(got) != 4 || got[2] != len(calls)-1 || got[3] != 1 {
		t.Fatalf("flushes answered %v callers each, want [1 1 %d 1]", got, len(calls)-1)
	}
	for i := 0; i < 20; i++ {
		tk, err := s.Get(ctx, tasks[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		want := norn.StatusCompleted
		switch i {
		case 17:
			want = norn.StatusRunning
		case 18:
			want = norn.StatusCancelled
		}
		if i >= 9 && i < 17 {
			want = norn.StatusRunning
		}
		if tk.Status != want {
			t.Errorf("%s is %s, want %s", tk.ID, tk.Status, want)
		}
		if want == norn.StatusCompleted && string(tk.Result) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Errorf("%s result %s", tk.ID, tk.Result)
		}
	}
}

// TestCompletionCallerGivesUp: a caller whose context ends while its
// completion waits gets the context's error and the others are unaffected.
func TestCompletionCallerGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tasks, first, release := heldFlush(t, 1)
	cctx, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		second <- s.Complete(cctx, norn.LeaseRef{TaskID: tasks[1].ID, Worker: "w", Lease: tasks[1].Lease}, nil)
	}()
	await.Until(t, 10*time.Second, "the second caller queued", func() bool {
		s.completer.mu.Lock()
		defer s.completer.mu.Unlock()
		return len(s.completer.queue) == 1
	})
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	release()
	if err := <-first; err != nil {
		t.Fatalf("first caller: %v", err)
	}
	// The abandoned completion may still be written; either way the store
	// serves the task consistently and a retry is answered as a repeat.
	if err := s.Complete(ctx, norn.LeaseRef{TaskID: tasks[1].ID, Worker: "w", Lease: tasks[1].Lease}, nil); err != nil {
		t.Fatalf("retried completion: %v", err)
	}
	if tk, err := s.Get(ctx, tasks[1].ID); err != nil || tk.Status != norn.StatusCompleted {
		t.Fatalf("task after the retry: %v %v", tk, err)
	}
}

// TestCompletionsTwoFlushesAtOnce: while one merged completion statement
// is held, the next caller's completion goes out in a second one and is
// answered, and the held one still completes when it resumes.
func TestCompletionsTwoFlushesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, tasks, first, release := heldFlush(t, 2)
	if err := s.Complete(ctx, norn.LeaseRef{TaskID: tasks[1].ID, Worker: "w", Lease: tasks[1].Lease}, nil); err != nil {
		t.Fatalf("completion beside a held flush: %v", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the held completion returned before its flush resumed: %v", err)
	default:
	}
	release()
	if err := <-first; err != nil {
		t.Fatalf("held completion: %v", err)
	}
	for _, tk := range tasks {
		if g, err := s.Get(ctx, tk.ID); err != nil || g.Status != norn.StatusCompleted {
			t.Fatalf("%s: %v %v", tk.ID, g, err)
		}
	}
}

// heldFlush opens a store running n merged completion statements at once
// whose first statement waits until release is called, claims the tasks
// a and b, and starts completing a: it returns once a's flush is held,
// with a's answer to come on first.
func heldFlush(t *testing.T, n int) (s *Store, tasks []*norn.Task, first <-chan error, release func()) {
	t.Helper()
	ctx := context.Background()
	hold := make(chan struct{})
	var flushes atomic.Int32
	entered := make(chan struct{})
	s = openTest(t, nil, func(c *Config) {
		c.DisableMonitor = true
		c.completionFlushes = n
		c.flushPause = func(int) {
			if flushes.Add(1) == 1 {
				close(entered)
				<-hold
			}
		}
	})
	if _, err := s.Submit(ctx, norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	tasks, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 2})
	if err != nil || len(tasks) != 2 {
		t.Fatalf("claim: %v %v", tasks, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.Complete(ctx, norn.LeaseRef{TaskID: tasks[0].ID, Worker: "w", Lease: tasks[0].Lease}, nil)
	}()
	<-entered
	return s, tasks, done, func() { close(hold) }
}
