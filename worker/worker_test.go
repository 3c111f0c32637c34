package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/nornq/norn"
	"github.com/nornq/norn/worker"
)

func TestOutcomes(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	mux := worker.NewServeMux()
	mux.HandleFunc("ok", func(ctx context.Context, tk *worker.Task) error {
		var spec map[string]int
		if err := json.Unmarshal(tk.Spec, &spec); err != nil {
			return worker.Abort(err)
		}
		return tk.SetResult(map[string]int{"double": 2 * spec["n"]})
	})
	mux.HandleFunc("flaky", func(ctx context.Context, tk *worker.Task) error {
		if tk.Attempts == 1 {
			return worker.WithCode("upstream_down", errors.New("try again"))
		}
		return nil
	})
	mux.HandleFunc("fail", func(ctx context.Context, tk *worker.Task) error {
		return errors.New("always broken")
	})
	mux.HandleFunc("abort", func(ctx context.Context, tk *worker.Task) error {
		return worker.Abort(errors.New("bad input"))
	})
	mux.HandleFunc("panic", func(ctx context.Context, tk *worker.Task) error {
		panic("kaboom")
	})
	w := newWorker(t, st, worker.Config{Handler: mux})
	runWorker(t, w)

	retry := &norn.RetryPolicy{MaxRetries: 3}
	okID := submit(t, st, norn.NewTask{Queue: "ok", Spec: json.RawMessage(`{"n":21}`)})
	flakyID := submit(t, st, norn.NewTask{Queue: "flaky", Retry: retry})
	failID := submit(t, st, norn.NewTask{Queue: "fail", Retry: &norn.RetryPolicy{}})
	abortID := submit(t, st, norn.NewTask{Queue: "abort", Retry: retry})
	panicID := submit(t, st, norn.NewTask{Queue: "panic", Retry: retry})

	tk := waitStatus(t, st, okID, 5*time.Second, norn.StatusCompleted)
	if string(tk.Result) != `{"double":42}` || tk.Progress != 1 {
		t.Errorf("ok: result %s progress %v", tk.Result, tk.Progress)
	}

	tk = waitStatus(t, st, flakyID, 5*time.Second, norn.StatusCompleted)
	if tk.Attempts != 2 || !slices.Contains(historyTypes(tk), norn.TaskRetry) {
		t.Errorf("flaky: attempts %d history %v, want 2 attempts with a retry", tk.Attempts, historyTypes(tk))
	}
	if len(tk.Errors) != 1 || tk.Errors[0].Code != "upstream_down" || tk.Errors[0].Description != "try again" {
		t.Errorf("flaky: errors %+v", tk.Errors)
	}

	tk = waitStatus(t, st, failID, 5*time.Second, norn.StatusAborted)
	if len(tk.Errors) != 1 || tk.Errors[0].Code != worker.DefaultErrorCode {
		t.Errorf("fail without retries: errors %+v", tk.Errors)
	}

	tk = waitStatus(t, st, abortID, 5*time.Second, norn.StatusAborted)
	if tk.Attempts != 1 || len(tk.Errors) != 1 || tk.Errors[0].Description != "bad input" {
		t.Errorf("abort: attempts %d errors %+v, want one attempt despite retries left", tk.Attempts, tk.Errors)
	}

	tk = waitStatus(t, st, panicID, 5*time.Second, norn.StatusAborted)
	if tk.Attempts != 1 || len(tk.Errors) != 1 || tk.Errors[0].Code != "panic" ||
		!strings.Contains(tk.Errors[0].Description, "kaboom") || !strings.Contains(tk.Errors[0].Description, "goroutine") {
		t.Errorf("panic: attempts %d errors %+v, want an abort with message and stack", tk.Attempts, tk.Errors)
	}
	// The worker survived the panic and keeps working.
	again := submit(t, st, norn.NewTask{Queue: "ok", Spec: json.RawMessage(`{"n":1}`)})
	waitStatus(t, st, again, 5*time.Second, norn.StatusCompleted)
}

func TestCancelStopsHandlerWithinOneHeartbeat(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	sp := newSpy(st)
	const interval = 300 * time.Millisecond
	started := make(chan struct{})
	type stop struct {
		after time.Time
		cause error
	}
	stopped := make(chan stop, 1)
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		close(started)
		<-ctx.Done()
		stopped <- stop{time.Now(), context.Cause(ctx)}
		return nil // must not be reported: the task is cancelled
	})
	w := newWorker(t, sp, worker.Config{Handler: h, Queues: []string{"q"}, Lease: 3 * interval, HeartbeatInterval: interval})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "q"})
	<-started
	cancelled := time.Now()
	if _, err := st.Cancel(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	var s stop
	select {
	case s = <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("handler context not cancelled")
	}
	// One interval plus scheduling slack (the race detector is slow).
	if d := s.after.Sub(cancelled); d > interval+300*time.Millisecond {
		t.Errorf("handler learned of the cancellation after %s, want within one heartbeat interval (%s)", d, interval)
	}
	if !errors.Is(s.cause, worker.ErrTaskCancelled) || !errors.Is(s.cause, norn.ErrCancelled) {
		t.Errorf("cause = %v, want ErrTaskCancelled", s.cause)
	}
	await.Until(t, 5*time.Second, "slot freed", func() bool { return w.Running() == 0 })
	if ops := sp.ops(id); len(ops) != 0 {
		t.Errorf("outcome calls after cancellation: %v, want none", ops)
	}
	if tk, _ := st.Get(context.Background(), id); tk.Status != norn.StatusCancelled {
		t.Errorf("status %s, want cancelled", tk.Status)
	}
}

func TestDeletedTaskIsLeaseLost(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	sp := newSpy(st)
	started := make(chan struct{})
	causes := make(chan error, 1)
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return errors.New("interrupted")
	})
	w := newWorker(t, sp, worker.Config{Handler: h, Queues: []string{"q"}, Lease: 600 * time.Millisecond})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "q"})
	<-started
	if err := st.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, worker.ErrLeaseLost) {
			t.Errorf("cause = %v, want ErrLeaseLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler context not cancelled after the task was deleted")
	}
	await.Until(t, 5*time.Second, "slot freed", func() bool { return w.Running() == 0 })
	if ops := sp.ops(id); len(ops) != 0 {
		t.Errorf("outcome calls after lease loss: %v, want none", ops)
	}
}

func TestUnreachableStoreLosesLeaseLocally(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	sp := newSpy(st)
	started := make(chan struct{})
	causes := make(chan error, 1)
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil
	})
	const lease = 400 * time.Millisecond
	// Claim once: the store's monitor times the task out too, and a second
	// claim of it is not what this test is about.
	var claims atomic.Int32
	w := newWorker(t, sp, worker.Config{Handler: h, Queues: []string{"q"}, Lease: lease, Concurrency: 1,
		Capacity: func() bool { return claims.Add(1) == 1 }})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "q"})
	<-started
	sp.setFailBeats(true)
	select {
	case cause := <-causes:
		if !errors.Is(cause, worker.ErrLeaseLost) {
			t.Errorf("cause = %v, want ErrLeaseLost", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler kept running although no heartbeat succeeded for a whole lease")
	}
	await.Until(t, 5*time.Second, "slot freed", func() bool { return w.Running() == 0 })
	if ops := sp.ops(id); len(ops) != 0 {
		t.Errorf("outcome calls after the lease expired: %v, want none", ops)
	}
}

func TestHeartbeatsKeepTheLease(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	const lease = 600 * time.Millisecond
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		select {
		case <-time.After(3 * lease):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	w := newWorker(t, st, worker.Config{Handler: h, Queues: []string{"q"}, Lease: lease})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "q"})
	tk := waitStatus(t, st, id, 10*time.Second, norn.StatusCompleted)
	if tk.Attempts != 1 || slices.Contains(historyTypes(tk), norn.TaskTimeout) {
		t.Errorf("attempts %d history %v: the lease expired although heartbeats ran", tk.Attempts, historyTypes(tk))
	}
}

func TestConcurrencyLimitNeverExceeded(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	const limit, tasks = 3, 24
	var now, peak atomic.Int32
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		n := now.Add(1)
		defer now.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
		return nil
	})
	var ids []string
	for i := 0; i < tasks; i++ {
		ids = append(ids, submit(t, st, norn.NewTask{Queue: "q"}))
	}
	w := newWorker(t, st, worker.Config{Handler: h, Queues: []string{"q"}, Concurrency: limit, ClaimBatch: 10})
	runWorker(t, w)
	for _, id := range ids {
		waitStatus(t, st, id, 10*time.Second, norn.StatusCompleted)
	}
	if p := peak.Load(); p > limit {
		t.Errorf("%d handlers ran at once, limit %d", p, limit)
	} else if p < 2 {
		t.Errorf("peak concurrency %d: tasks did not run in parallel", p)
	}
}

func TestCapacityCallbackGatesClaims(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	var allow atomic.Bool
	var asked atomic.Int32
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error { return nil })
	w := newWorker(t, st, worker.Config{Handler: h, Queues: []string{"q"}, Capacity: func() bool {
		asked.Add(1)
		return allow.Load()
	}})
	id := submit(t, st, norn.NewTask{Queue: "q"})
	runWorker(t, w)
	await.Until(t, 5*time.Second, "capacity asked 5 times", func() bool { return asked.Load() >= 5 })
	if tk, _ := st.Get(context.Background(), id); tk.Status != norn.StatusReady {
		t.Fatalf("status %s while capacity said no, want ready", tk.Status)
	}
	allow.Store(true)
	waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted)
}

func TestShutdownFinishesWithinGraceThenYields(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	finishSoon := make(chan struct{})
	var running atomic.Int32
	causes := make(chan error, 1)
	mux := worker.NewServeMux()
	mux.HandleFunc("quick", func(ctx context.Context, tk *worker.Task) error {
		running.Add(1)
		<-finishSoon
		return nil
	})
	mux.HandleFunc("slow", func(ctx context.Context, tk *worker.Task) error {
		running.Add(1)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	})
	w := newWorker(t, st, worker.Config{Handler: mux, ShutdownGrace: 300 * time.Millisecond, Lease: 5 * time.Second})
	done := runWorker(t, w)
	quick := submit(t, st, norn.NewTask{Queue: "quick"})
	slow := submit(t, st, norn.NewTask{Queue: "slow"})
	await.Until(t, 5*time.Second, "both handlers running", func() bool { return running.Load() == 2 })

	shut := make(chan error, 1)
	go func() { shut <- w.Shutdown(context.Background()) }()
	// Finishing inside the grace period counts as a normal completion.
	close(finishSoon)
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	<-done
	if !errors.Is(<-causes, worker.ErrShutdown) {
		t.Error("slow handler's cause is not ErrShutdown")
	}
	waitStatus(t, st, quick, time.Second, norn.StatusCompleted)
	tk := waitStatus(t, st, slow, time.Second, norn.StatusReady)
	if h := historyTypes(tk); len(h) == 0 || h[len(h)-1] != norn.TaskYield || tk.Attempts != 0 || tk.Owner != "" {
		t.Errorf("slow task after shutdown: history %v attempts %d owner %q, want yielded back", h, tk.Attempts, tk.Owner)
	}
	// Nothing is claimed after a shutdown.
	if err := w.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
}

func TestProgressLogAndPreviousLog(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	type seen struct {
		prev    []uint64
		seqs    []uint64
		lease   uint64
		attempt int
	}
	got := make(chan seen, 2)
	progressed := make(chan struct{})
	release := make(chan struct{})
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		var s seen
		s.lease, s.attempt = tk.Lease, tk.Attempts
		prev, err := tk.PreviousLog(ctx)
		if err != nil {
			return worker.Abort(err)
		}
		for _, e := range prev {
			s.prev = append(s.prev, e.Seq)
		}
		for i := 0; i < 2; i++ {
			e, err := tk.Log(ctx, map[string]int{"step": i, "attempt": tk.Attempts})
			if err != nil {
				return worker.Abort(err)
			}
			s.seqs = append(s.seqs, e.Seq)
		}
		got <- s
		if tk.Attempts == 1 {
			if err := tk.Progress(ctx, 0.5); err != nil {
				return worker.Abort(err)
			}
			close(progressed)
			<-release
			return errors.New("first attempt fails after checkpointing")
		}
		tk.SetProgress(0.9)
		return nil
	})
	w := newWorker(t, st, worker.Config{Handler: h, Queues: []string{"q"}})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 1}})
	<-progressed
	if tk, _ := st.Get(context.Background(), id); tk.Progress != 0.5 || tk.Status != norn.StatusRunning {
		t.Errorf("after Progress(0.5): status %s progress %v", tk.Status, tk.Progress)
	}
	close(release)
	first, second := <-got, <-got
	if first.lease != 1 || len(first.prev) != 0 || !slices.Equal(first.seqs, []uint64{1, 2}) {
		t.Errorf("first claim: %+v, want lease 1, no previous log, seqs 1 2", first)
	}
	if second.lease != 2 || !slices.Equal(second.prev, []uint64{1, 2}) || !slices.Equal(second.seqs, []uint64{3, 4}) {
		t.Errorf("second claim: %+v, want lease 2, previous 1 2, seqs 3 4", second)
	}
	waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted)
	entries, err := st.ReadLog(context.Background(), id, 0, 0)
	if err != nil || len(entries) != 4 {
		t.Fatalf("log: %d entries, %v", len(entries), err)
	}
}

func TestSetProgressRidesOnHeartbeats(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	release := make(chan struct{})
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		tk.SetProgress(0.25)
		<-release
		return nil
	})
	w := newWorker(t, st, worker.Config{Handler: h, Queues: []string{"q"}, Lease: 300 * time.Millisecond})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "q"})
	await.Until(t, 5*time.Second, "progress 0.25 stored", func() bool {
		tk, err := st.Get(context.Background(), id)
		return err == nil && tk.Progress == 0.25
	})
	close(release)
	waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted)
}

// TestProgressGoesOutPromptlyWithALongLease: with an hour's lease the
// heartbeats are twenty minutes apart, yet progress reaches the store
// within about ProgressEvery, each update, not only the first.
func TestProgressGoesOutPromptlyWithALongLease(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	step := make(chan float64)
	h := worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		for p := range step {
			tk.SetProgress(p)
		}
		return nil
	})
	w := newWorker(t, st, worker.Config{Handler: h, Queues: []string{"q"}, Lease: time.Hour})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "q"})
	waitStatus(t, st, id, 5*time.Second, norn.StatusRunning)
	for _, p := range []float64{0.3, 0.6} {
		step <- p
		await.Until(t, 5*time.Second, fmt.Sprintf("progress %.1f stored", p), func() bool {
			tk, err := st.Get(context.Background(), id)
			return err == nil && tk.Progress == p
		})
	}
	close(step)
	waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted)
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	h := worker.HandlerFunc(func(context.Context, *worker.Task) error { return nil })
	mux := worker.NewServeMux()
	mux.Handle("a", h)
	cases := []struct {
		cfg   worker.Config
		field string
	}{
		{worker.Config{}, "Handler"},
		{worker.Config{Handler: h}, "Queues"},
		{worker.Config{Handler: h, Queues: []string{"bad queue"}}, "Queues[0]"},
		{worker.Config{Handler: mux, Queues: []string{"a", "b"}}, "Queues[1]"},
		{worker.Config{Handler: mux, Concurrency: -1}, "Concurrency"},
		{worker.Config{Handler: mux, Lease: time.Second, HeartbeatInterval: time.Second}, "HeartbeatInterval"},
		{worker.Config{Handler: mux, ClaimBatch: norn.MaxClaim + 1}, "ClaimBatch"},
		{worker.Config{Handler: mux, Wait: time.Hour}, "Wait"},
		{worker.Config{Handler: mux, Weights: map[string]int{"b": 2}}, `Weights["b"]`},
		{worker.Config{Handler: mux, Weights: map[string]int{"a": 0}}, `Weights["a"]`},
	}
	for _, c := range cases {
		_, err := worker.New(st, c.cfg)
		var ne *norn.Error
		if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != c.field {
			t.Errorf("New(%+v) = %v, want invalid_argument on %s", c.cfg, err, c.field)
		}
	}
	w, err := worker.New(st, worker.Config{Handler: mux})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := w.Config(); !slices.Equal(cfg.Queues, []string{"a"}) || cfg.Concurrency < 1 || cfg.Wait != worker.DefaultWait {
		t.Errorf("defaults not filled: %+v", cfg)
	}
}

func TestServeMux(t *testing.T) {
	t.Parallel()
	mux := worker.NewServeMux()
	var hits []string
	for _, q := range []string{"b", "a"} {
		mux.HandleFunc(q, func(ctx context.Context, tk *worker.Task) error {
			hits = append(hits, q+":"+tk.Queue)
			return nil
		})
	}
	if got := mux.Queues(); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("Queues() = %v, want registration order", got)
	}
	for _, q := range []string{"a", "b"} {
		if err := mux.ServeTask(context.Background(), &worker.Task{Task: norn.Task{Queue: q}}); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(hits, []string{"a:a", "b:b"}) {
		t.Errorf("routed %v", hits)
	}
	err := mux.ServeTask(context.Background(), &worker.Task{Task: norn.Task{Queue: "zzz"}})
	if !worker.IsAbort(err) {
		t.Errorf("unknown queue: %v, want an abort", err)
	}
	for name, f := range map[string]func(){
		"duplicate": func() { mux.Handle("a", worker.HandlerFunc(nil)) },
		"nil":       func() { mux.Handle("c", nil) },
		"bad name":  func() { mux.HandleFunc("no spaces", func(context.Context, *worker.Task) error { return nil }) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s registration did not panic", name)
				}
			}()
			f()
		}()
	}
}

func TestErrorHelpers(t *testing.T) {
	t.Parallel()
	base := errors.New("x")
	if worker.Abort(nil) != nil || worker.WithCode("c", nil) != nil {
		t.Error("nil errors must stay nil")
	}
	for _, err := range []error{
		worker.Abort(worker.WithCode("c", base)),
		worker.WithCode("c", worker.Abort(base)),
		fmt.Errorf("wrapped: %w", worker.Abort(base)),
	} {
		if !worker.IsAbort(err) || !errors.Is(err, base) {
			t.Errorf("%v: IsAbort %v, Is(base) %v", err, worker.IsAbort(err), errors.Is(err, base))
		}
	}
	if worker.IsAbort(worker.WithCode("c", base)) {
		t.Error("WithCode alone must not abort")
	}
}

func TestServeMuxMiddleware(t *testing.T) {
	t.Parallel()
	mux := worker.NewServeMux()
	var trace []string
	tag := func(name string) worker.Middleware {
		return func(next worker.Handler) worker.Handler {
			return worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
				trace = append(trace, name+">")
				err := next.ServeTask(ctx, tk)
				trace = append(trace, "<"+name)
				return err
			})
		}
	}
	mux.HandleFunc("a", func(ctx context.Context, tk *worker.Task) error {
		trace = append(trace, "a")
		return errors.New("boom")
	})
	mux.Use(tag("outer"), tag("inner"))
	// Registered after Use: middleware still applies.
	mux.HandleFunc("b", func(ctx context.Context, tk *worker.Task) error {
		trace = append(trace, "b")
		return nil
	})
	// A middleware decides the outcome: this one turns failures into aborts.
	mux.Use(func(next worker.Handler) worker.Handler {
		return worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
			return worker.Abort(next.ServeTask(ctx, tk))
		})
	})

	if err := mux.ServeTask(context.Background(), &worker.Task{Task: norn.Task{Queue: "a"}}); !worker.IsAbort(err) {
		t.Errorf("a: %v, want the middleware's abort", err)
	}
	if want := []string{"outer>", "inner>", "a", "<inner", "<outer"}; !slices.Equal(trace, want) {
		t.Errorf("order %v, want %v", trace, want)
	}
	trace = nil
	if err := mux.ServeTask(context.Background(), &worker.Task{Task: norn.Task{Queue: "b"}}); err != nil {
		t.Errorf("b: %v", err)
	}
	if want := []string{"outer>", "inner>", "b", "<inner", "<outer"}; !slices.Equal(trace, want) {
		t.Errorf("order %v, want %v", trace, want)
	}
	trace = nil
	err := mux.ServeTask(context.Background(), &worker.Task{Task: norn.Task{Queue: "zzz"}})
	if !worker.IsAbort(err) || !slices.Equal(trace, []string{"outer>", "inner>", "<inner", "<outer"}) {
		t.Errorf("unknown queue: err %v, trace %v: middleware must see the no-handler abort", err, trace)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Use(nil) did not panic")
			}
		}()
		mux.Use(nil)
	}()
}

func TestMiddlewareRunsInWorker(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	mux := worker.NewServeMux()
	mux.HandleFunc("mw", func(ctx context.Context, tk *worker.Task) error { return nil })
	var seen atomic.Int64
	mux.Use(func(next worker.Handler) worker.Handler {
		return worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
			seen.Add(1)
			if err := tk.SetResult(map[string]string{"via": "middleware"}); err != nil {
				return err
			}
			return next.ServeTask(ctx, tk)
		})
	})
	w := newWorker(t, st, worker.Config{Handler: mux})
	runWorker(t, w)
	id := submit(t, st, norn.NewTask{Queue: "mw"})
	tk := waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted)
	if seen.Load() != 1 || string(tk.Result) != `{"via":"middleware"}` {
		t.Errorf("middleware calls %d, result %s", seen.Load(), tk.Result)
	}
}
