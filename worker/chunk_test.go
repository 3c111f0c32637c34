package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/worker"
)

// claimSpy records the claims a worker makes, on top of spy.
type claimSpy struct {
	*spy
	cmu    sync.Mutex
	claims []claimRec
	// failBatches: see failOutcomeBatches.
	failBatches int
}

// failOutcomeBatches makes the next n lease batches that carry outcomes
// fail as if the store were unavailable.
func (s *claimSpy) failOutcomeBatches(n int) {
	s.cmu.Lock()
	s.failBatches = n
	s.cmu.Unlock()
}

func (s *claimSpy) LeaseBatch(ctx context.Context, ops []norn.LeaseOp) ([]norn.LeaseOpResult, error) {
	s.cmu.Lock()
	fail := s.failBatches > 0 && slices.ContainsFunc(ops, func(op norn.LeaseOp) bool { return op.Op != norn.OpHeartbeat && op.Op != norn.OpYield })
	if fail {
		s.failBatches--
	}
	s.cmu.Unlock()
	if fail {
		return nil, norn.Unavailable(nil)
	}
	return s.spy.LeaseBatch(ctx, ops)
}

type claimRec struct {
	req   norn.ClaimRequest
	start time.Time
	got   int
}

func (s *claimSpy) Claim(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	start := time.Now()
	tasks, err := s.spy.Claim(ctx, req)
	if err == nil {
		s.cmu.Lock()
		s.claims = append(s.claims, claimRec{req: req, start: start, got: len(tasks)})
		s.cmu.Unlock()
	}
	return tasks, err
}

// emptyClaimSince reports whether a claim sent after t came back empty.
func (s *claimSpy) emptyClaimSince(t time.Time) bool {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	for _, c := range s.claims {
		if c.start.After(t) && c.got == 0 {
			return true
		}
	}
	return false
}

// chunkServer starts a real server over an embedded store and returns the
// store (to submit and inspect) and a spying HTTP client for the worker.
func chunkServer(t *testing.T) (norn.Store, *claimSpy) {
	t.Helper()
	st, url := startServer(t)
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return st, &claimSpy{spy: newSpy(c)}
}

// chunks collects the chunks a handler was called with.
type chunks struct {
	mu  sync.Mutex
	got [][]string
	at  []time.Time
}

func (c *chunks) add(tasks []*worker.Task) {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	slices.Sort(ids)
	c.mu.Lock()
	c.got = append(c.got, ids)
	c.at = append(c.at, time.Now())
	c.mu.Unlock()
}

func (c *chunks) list() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func TestChunkOfMinArrivesInOneCall(t *testing.T) {
	t.Parallel()
	st, sp := chunkServer(t)
	var seen chunks
	w := newWorker(t, sp, worker.Config{Queues: []string{"q"}, Concurrency: 4, Wait: 100 * time.Millisecond,
		Chunk: &worker.Chunk{Min: 3, Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
			seen.add(tasks)
			return nil
		})}})
	runWorker(t, w)
	a := submit(t, st, norn.NewTask{ID: "a", Queue: "q"})
	b := submit(t, st, norn.NewTask{ID: "b", Queue: "q"})
	// With two of three ready a claim comes back empty, and no chunk runs.
	mark := time.Now()
	await.Until(t, 5*time.Second, "an empty claim with two tasks ready", func() bool { return sp.emptyClaimSince(mark) })
	if got := seen.list(); len(got) != 0 {
		t.Fatalf("chunks with two of min 3 ready: %v", got)
	}
	c := submit(t, st, norn.NewTask{ID: "c", Queue: "q"})
	for _, id := range []string{a, b, c} {
		waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted)
	}
	if got := seen.list(); len(got) != 1 || !slices.Equal(got[0], []string{"a", "b", "c"}) {
		t.Errorf("chunks %v, want one chunk [a b c]", got)
	}
	sp.cmu.Lock()
	for _, cl := range sp.claims {
		if cl.req.Min != 3 || cl.req.N != 4 || cl.req.Linger != 0 {
			t.Errorf("claim min %d n %d linger %s, want min 3 n 4 (the free slots) linger 0", cl.req.Min, cl.req.N, cl.req.Linger.D())
			break
		}
	}
	sp.cmu.Unlock()
}

// With GroupBy every chunk holds the tasks of one concurrency key, and
// the claims say so.
func TestChunkGroupBy(t *testing.T) {
	t.Parallel()
	st, sp := chunkServer(t)
	var seen chunks
	w := newWorker(t, sp, worker.Config{Queues: []string{"q"}, Concurrency: 4, Wait: 100 * time.Millisecond,
		Chunk: &worker.Chunk{Min: 2, GroupBy: norn.FairByConcurrencyKey,
			Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
				seen.add(tasks)
				return nil
			})}})
	runWorker(t, w)
	var all []string
	for _, id := range []string{"x1", "y1", "x2", "y2"} {
		all = append(all, submit(t, st, norn.NewTask{ID: id, Queue: "q", ConcurrencyKey: id[:1]}))
	}
	for _, id := range all {
		waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted)
	}
	got := seen.list()
	if len(got) != 2 {
		t.Fatalf("chunks %v, want two: x's and y's", got)
	}
	for _, c := range got {
		if len(c) != 2 || c[0][:1] != c[1][:1] {
			t.Errorf("chunk %v mixes keys (chunks %v)", c, got)
		}
	}
	sp.cmu.Lock()
	for _, cl := range sp.claims {
		if cl.req.GroupBy != norn.FairByConcurrencyKey {
			t.Errorf("claim group_by %q, want concurrency_key", cl.req.GroupBy)
			break
		}
	}
	sp.cmu.Unlock()
}

func TestChunkLingerHandsOutFewer(t *testing.T) {
	t.Parallel()
	st, sp := chunkServer(t)
	const linger = 400 * time.Millisecond
	var seen chunks
	w := newWorker(t, sp, worker.Config{Queues: []string{"q"}, Concurrency: 5, Wait: time.Second,
		Chunk: &worker.Chunk{Min: 5, Linger: linger, Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
			seen.add(tasks)
			return nil
		})}})
	runWorker(t, w)
	before := time.Now()
	_, err := st.Submit(context.Background(), norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, "a", 5*time.Second, norn.StatusCompleted)
	waitStatus(t, st, "b", 5*time.Second, norn.StatusCompleted)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.got) != 1 || !slices.Equal(seen.got[0], []string{"a", "b"}) {
		t.Fatalf("chunks %v, want one chunk [a b] after the linger", seen.got)
	}
	if waited := seen.at[0].Sub(before); waited < linger {
		t.Errorf("chunk ran %s after submit, before the linger of %s", waited, linger)
	}
}

func TestChunkOutcomesPerTask(t *testing.T) {
	t.Parallel()
	st, sp := chunkServer(t)
	var seen chunks
	w := newWorker(t, sp, worker.Config{Queues: []string{"q"}, Concurrency: 4,
		Chunk: &worker.Chunk{Min: 4, Linger: 100 * time.Millisecond, Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
			seen.add(tasks)
			errs := make([]error, len(tasks))
			for i, tk := range tasks {
				switch tk.ID {
				case "ok":
					_ = tk.SetResult(map[string]int{"n": i + 100})
				case "flaky":
					if tk.Attempts == 1 {
						errs[i] = worker.WithCode("upstream_down", worker.RetryIn(10*time.Millisecond, errors.New("try again")))
					}
				case "bad":
					errs[i] = worker.Abort(errors.New("bad input"))
				case "later":
					errs[i] = worker.Snooze(time.Hour)
				}
			}
			return errs
		})}})
	runWorker(t, w)
	// A base of an hour: only the handler's RetryIn brings flaky back soon.
	retry := &norn.RetryPolicy{MaxRetries: 3, Base: norn.Duration(time.Hour)}
	_, err := st.Submit(context.Background(), norn.NewTask{ID: "ok", Queue: "q", Retry: retry}, norn.NewTask{ID: "flaky", Queue: "q", Retry: retry},
		norn.NewTask{ID: "bad", Queue: "q", Retry: retry}, norn.NewTask{ID: "later", Queue: "q", Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	tk := waitStatus(t, st, "ok", 5*time.Second, norn.StatusCompleted)
	if !strings.HasPrefix(string(tk.Result), `{"n":10`) {
		t.Errorf("ok: result %s, want the one its handler set", tk.Result)
	}
	tk = waitStatus(t, st, "flaky", 5*time.Second, norn.StatusCompleted)
	if tk.Attempts != 2 || len(tk.Errors) != 1 || tk.Errors[0].Code != "upstream_down" {
		t.Errorf("flaky: attempts %d errors %+v, want a failure then a completion", tk.Attempts, tk.Errors)
	}
	tk = waitStatus(t, st, "bad", 5*time.Second, norn.StatusAborted)
	if tk.Attempts != 1 || len(tk.Errors) != 1 || tk.Errors[0].Description != "bad input" {
		t.Errorf("bad: attempts %d errors %+v, want one attempt aborted", tk.Attempts, tk.Errors)
	}
	tk = waitStatus(t, st, "later", 5*time.Second, norn.StatusScheduled)
	if tk.Attempts != 0 || len(tk.Errors) != 0 {
		t.Errorf("later: attempts %d errors %+v, want a snooze", tk.Attempts, tk.Errors)
	}
	got := seen.list()
	if len(got) != 2 || !slices.Equal(got[0], []string{"bad", "flaky", "later", "ok"}) || !slices.Equal(got[1], []string{"flaky"}) {
		t.Errorf("chunks %v, want all four, then the retry alone after the linger", got)
	}
	for id, want := range map[string][]string{"ok": {"complete"}, "flaky": {"fail", "complete"}, "bad": {"abort"}, "later": {"snooze"}} {
		if ops := sp.ops(id); !slices.Equal(ops, want) {
			t.Errorf("%s: outcome calls %v, want %v", id, ops, want)
		}
	}
}

// When the one call reporting a chunk's outcomes fails for a reason worth
// another try, each outcome is reported on its own.
func TestChunkOutcomesReportedOneByOneWhenTheBatchFails(t *testing.T) {
	t.Parallel()
	st, sp := chunkServer(t)
	sp.failOutcomeBatches(1)
	w := newWorker(t, sp, worker.Config{Queues: []string{"q"}, Concurrency: 2,
		Chunk: &worker.Chunk{Min: 2, Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
			errs := make([]error, len(tasks))
			for i, tk := range tasks {
				if tk.ID == "b" {
					errs[i] = worker.Abort(errors.New("bad"))
				}
			}
			return errs
		})}})
	runWorker(t, w)
	_, err := st.Submit(context.Background(), norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, "a", 10*time.Second, norn.StatusCompleted)
	waitStatus(t, st, "b", 10*time.Second, norn.StatusAborted)
	if ops := sp.ops("a"); !slices.Equal(ops, []string{"complete"}) {
		t.Errorf("a: outcome calls %v, want one complete of its own", ops)
	}
	if ops := sp.ops("b"); !slices.Equal(ops, []string{"abort"}) {
		t.Errorf("b: outcome calls %v, want one abort of its own", ops)
	}
}

func TestChunkPanicAndWrongOutcomeCountAbort(t *testing.T) {
	t.Parallel()
	st, sp := chunkServer(t)
	w := newWorker(t, sp, worker.Config{Queues: []string{"q"}, Concurrency: 2,
		Chunk: &worker.Chunk{Min: 2, Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
			var spec struct{ Panic bool }
			_ = json.Unmarshal(tasks[0].Spec, &spec)
			if spec.Panic {
				panic("kaboom")
			}
			return []error{nil} // one outcome for two tasks
		})}})
	runWorker(t, w)
	retry := &norn.RetryPolicy{MaxRetries: 3}
	panicky := json.RawMessage(`{"panic":true}`)
	_, err := st.Submit(context.Background(), norn.NewTask{ID: "p1", Queue: "q", Spec: panicky, Retry: retry},
		norn.NewTask{ID: "p2", Queue: "q", Spec: panicky, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p1", "p2"} {
		tk := waitStatus(t, st, id, 5*time.Second, norn.StatusAborted)
		if len(tk.Errors) != 1 || tk.Errors[0].Code != "panic" || !strings.Contains(tk.Errors[0].Description, "kaboom") {
			t.Errorf("%s: errors %+v, want the panic", id, tk.Errors)
		}
	}
	_, err = st.Submit(context.Background(), norn.NewTask{ID: "w1", Queue: "q", Retry: retry}, norn.NewTask{ID: "w2", Queue: "q", Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"w1", "w2"} {
		tk := waitStatus(t, st, id, 5*time.Second, norn.StatusAborted)
		if len(tk.Errors) != 1 || tk.Errors[0].Code != "invalid_outcomes" || !strings.Contains(tk.Errors[0].Description, "1 outcomes for 2 tasks") {
			t.Errorf("%s: errors %+v, want invalid_outcomes", id, tk.Errors)
		}
	}
}

// Every task of a chunk keeps its own lease: heartbeats hold all of them
// through a chunk that runs for several lease lengths, and cancelling one
// task cancels only its context.
func TestChunkLeasesHeldPerTask(t *testing.T) {
	t.Parallel()
	st, sp := chunkServer(t)
	const lease = 300 * time.Millisecond
	started := make(chan []*worker.Task, 1)
	release := make(chan struct{})
	type end struct {
		chunkErr error
		causes   map[string]error
	}
	ended := make(chan end, 1)
	w := newWorker(t, sp, worker.Config{Queues: []string{"q"}, Concurrency: 3, Lease: lease, HeartbeatInterval: lease / 3,
		Chunk: &worker.Chunk{Min: 3, Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
			started <- tasks
			<-release
			e := end{chunkErr: ctx.Err(), causes: map[string]error{}}
			for _, tk := range tasks {
				e.causes[tk.ID] = context.Cause(tk.Context())
			}
			ended <- e
			return nil
		})}})
	runWorker(t, w)
	_, err := st.Submit(context.Background(), norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"}, norn.NewTask{ID: "c", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	tasks := <-started
	if _, err := st.Cancel(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	var b *worker.Task
	for _, tk := range tasks {
		if tk.ID == "b" {
			b = tk
		}
	}
	await.Until(t, 5*time.Second, "b's context cancelled", func() bool { return b.Context().Err() != nil })
	// Outlive the lease several times over: only heartbeats keep a and c.
	deadline := time.Now().Add(4 * lease)
	await.Until(t, 10*time.Second, "four lease lengths", func() bool { return time.Now().After(deadline) })
	close(release)
	e := <-ended
	if e.chunkErr != nil {
		t.Errorf("chunk context ended (%v) though two tasks still run", e.chunkErr)
	}
	if !errors.Is(e.causes["b"], worker.ErrTaskCancelled) || e.causes["a"] != nil || e.causes["c"] != nil {
		t.Errorf("task context causes %v, want only b cancelled", e.causes)
	}
	for _, id := range []string{"a", "c"} {
		tk := waitStatus(t, st, id, 5*time.Second, norn.StatusCompleted, norn.StatusReady)
		if tk.Status != norn.StatusCompleted || tk.Attempts != 1 {
			t.Errorf("%s: %s after %d attempts, want completed on the first: its lease was lost", id, tk.Status, tk.Attempts)
		}
	}
	if tk, _ := st.Get(context.Background(), "b"); tk.Status != norn.StatusCancelled || slices.Contains(sp.ops("b"), "complete") {
		t.Errorf("b: %s, outcome calls %v; want cancelled and nothing reported", tk.Status, sp.ops("b"))
	}
}

func TestChunkShutdownWaitsForRunningChunk(t *testing.T) {
	t.Parallel()
	st, sp := chunkServer(t)
	started := make(chan struct{})
	release := make(chan struct{})
	w := newWorker(t, sp, worker.Config{Queues: []string{"q"}, Concurrency: 2, ShutdownGrace: time.Minute,
		Chunk: &worker.Chunk{Min: 2, Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
			close(started)
			<-release
			if ctx.Err() != nil {
				return []error{ctx.Err(), ctx.Err()}
			}
			return nil
		})}})
	runWorker(t, w)
	_, err := st.Submit(context.Background(), norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- w.Shutdown(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Shutdown returned (%v) while a chunk was running", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if tk, _ := st.Get(context.Background(), id); tk.Status != norn.StatusCompleted {
			t.Errorf("%s: %s, want completed by the chunk the shutdown waited for", id, tk.Status)
		}
	}
}

func TestChunkShutdownGraceYieldsChunk(t *testing.T) {
	t.Parallel()
	st, sp := chunkServer(t)
	started := make(chan struct{})
	cause := make(chan error, 1)
	w := newWorker(t, sp, worker.Config{Queues: []string{"q"}, Concurrency: 2, ShutdownGrace: 100 * time.Millisecond,
		Chunk: &worker.Chunk{Min: 2, Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil // not reported: the tasks were yielded
		})}})
	runWorker(t, w)
	_, err := st.Submit(context.Background(), norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := w.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := <-cause; !errors.Is(c, worker.ErrShutdown) {
		t.Errorf("chunk context cause %v, want ErrShutdown", c)
	}
	for _, id := range []string{"a", "b"} {
		if tk, _ := st.Get(context.Background(), id); tk.Status != norn.StatusReady || !slices.Equal(sp.ops(id), []string{"yield"}) {
			t.Errorf("%s: %s, outcome calls %v; want ready again after one yield", id, tk.Status, sp.ops(id))
		}
	}
}

func TestChunkConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	st := openStore(t)
	h := worker.ChunkHandlerFunc(func(context.Context, []*worker.Task) []error { return nil })
	for _, c := range []struct {
		name  string
		cfg   worker.Config
		field string
	}{
		{"handler and chunk", worker.Config{Queues: []string{"q"}, Handler: worker.HandlerFunc(func(context.Context, *worker.Task) error { return nil }),
			Chunk: &worker.Chunk{Handler: h}}, "Chunk"},
		{"no chunk handler", worker.Config{Queues: []string{"q"}, Chunk: &worker.Chunk{Min: 2}}, "Chunk.Handler"},
		{"min above concurrency", worker.Config{Queues: []string{"q"}, Concurrency: 4, Chunk: &worker.Chunk{Handler: h, Min: 5}}, "Chunk.Min"},
		{"min above max", worker.Config{Queues: []string{"q"}, Concurrency: 4, Chunk: &worker.Chunk{Handler: h, Min: 3, Max: 2}}, "Chunk.Min"},
		{"negative min", worker.Config{Queues: []string{"q"}, Chunk: &worker.Chunk{Handler: h, Min: -1}}, "Chunk.Min"},
		{"max above concurrency", worker.Config{Queues: []string{"q"}, Concurrency: 4, Chunk: &worker.Chunk{Handler: h, Max: 5}}, "Chunk.Max"},
		{"linger without min", worker.Config{Queues: []string{"q"}, Chunk: &worker.Chunk{Handler: h, Linger: time.Second}}, "Chunk.Linger"},
		{"negative linger", worker.Config{Queues: []string{"q"}, Chunk: &worker.Chunk{Handler: h, Min: 2, Linger: -time.Second}}, "Chunk.Linger"},
		{"no queues", worker.Config{Chunk: &worker.Chunk{Handler: h}}, "Queues"},
		{"unknown group_by", worker.Config{Queues: []string{"q"}, Chunk: &worker.Chunk{Handler: h, GroupBy: "tenant"}}, "Chunk.GroupBy"},
	} {
		_, err := worker.New(st, c.cfg)
		var ne *norn.Error
		if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != c.field {
			t.Errorf("%s: %v, want invalid argument naming %s", c.name, err, c.field)
		}
	}
	w, err := worker.New(st, worker.Config{Queues: []string{"q"}, Concurrency: 6, Chunk: &worker.Chunk{Handler: h, Min: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Config().Chunk.Max; got != 6 {
		t.Errorf("default Chunk.Max %d, want Concurrency (6)", got)
	}
}

// chunkShWorker runs `sh -c script` once per chunk on an embedded store.
func chunkShWorker(t *testing.T, script string, chunk worker.Chunk) norn.Store {
	t.Helper()
	st := openStore(t)
	chunk.Handler = &worker.ChunkCommand{Path: "sh", Args: []string{"-c", script}}
	runWorker(t, newWorker(t, st, worker.Config{Queues: []string{"sh"}, Concurrency: 5, Chunk: &chunk}))
	return st
}

func TestChunkCommandOutcomeLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Input and environment are kept for the test; one outcome line per
	// task but c-none, whose outcome is the exit status's.
	script := `
in=$(cat)
printf '%s\n' "$in" > "` + dir + `/in.$NORN_CHUNK"
echo "progress: 50%" >&2
echo '{"id":"c-ok","result":{"n":1}}'
echo 'not an outcome, ignored'
if printf '%s\n' "$in" | grep -q '"id":"c-fail".*"attempt":1'; then
  echo '{"id":"c-fail","error":"busy","code":"busy","retry_in":"10ms"}'
else
  echo '{"id":"c-fail","result":"second"}'
fi
echo '{"id":"c-abort","error":"bad row","abort":true}'
echo '{"id":"c-snooze","snooze":"1h"}'
echo '{"id":"elsewhere","result":1}'
exit 0`
	st := chunkShWorker(t, script, worker.Chunk{Min: 5, Linger: 100 * time.Millisecond})
	retry := &norn.RetryPolicy{MaxRetries: 2}
	_, err := st.Submit(context.Background(),
		norn.NewTask{ID: "c-ok", Queue: "sh", Spec: json.RawMessage(`{"row":1}`), Retry: retry},
		norn.NewTask{ID: "c-fail", Queue: "sh", Retry: retry},
		norn.NewTask{ID: "c-abort", Queue: "sh", Retry: retry},
		norn.NewTask{ID: "c-snooze", Queue: "sh", Retry: retry},
		norn.NewTask{ID: "c-none", Queue: "sh", Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	tk := waitStatus(t, st, "c-ok", 10*time.Second, norn.StatusCompleted)
	if string(tk.Result) != `{"n":1}` {
		t.Errorf("c-ok result %s", tk.Result)
	}
	tk = waitStatus(t, st, "c-fail", 10*time.Second, norn.StatusCompleted)
	if tk.Attempts != 2 || string(tk.Result) != `"second"` || len(tk.Errors) != 1 || tk.Errors[0].Code != "busy" || tk.Errors[0].Description != "busy" {
		t.Errorf("c-fail: attempts %d result %s errors %+v", tk.Attempts, tk.Result, tk.Errors)
	}
	tk = waitStatus(t, st, "c-abort", 10*time.Second, norn.StatusAborted)
	if tk.Attempts != 1 || len(tk.Errors) != 1 || tk.Errors[0].Description != "bad row" {
		t.Errorf("c-abort: attempts %d errors %+v", tk.Attempts, tk.Errors)
	}
	waitStatus(t, st, "c-snooze", 10*time.Second, norn.StatusScheduled)
	tk = waitStatus(t, st, "c-none", 10*time.Second, norn.StatusCompleted)
	if len(tk.Result) != 0 || tk.Progress != 1 {
		t.Errorf("c-none: result %s progress %v", tk.Result, tk.Progress)
	}
	in, err := os.ReadFile(filepath.Join(dir, "in.5"))
	if err != nil {
		t.Fatalf("no input of a chunk of 5: %v", err)
	}
	var first struct {
		ID      string          `json:"id"`
		Queue   string          `json:"queue"`
		Lease   uint64          `json:"lease"`
		Attempt int             `json:"attempt"`
		Spec    json.RawMessage `json:"spec"`
	}
	lines := strings.Split(strings.TrimSpace(string(in)), "\n")
	if len(lines) != 5 {
		t.Fatalf("stdin of the chunk:\n%s", in)
	}
	i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, `"c-ok"`) })
	if i < 0 || json.Unmarshal([]byte(lines[i]), &first) != nil ||
		first.ID != "c-ok" || first.Queue != "sh" || first.Lease != 1 || first.Attempt != 1 || string(first.Spec) != `{"row":1}` {
		t.Errorf("stdin of the chunk:\n%s\nwant a line for c-ok with its queue, lease, attempt and spec", in)
	}
	if _, err := os.Stat(filepath.Join(dir, "in.1")); err != nil {
		t.Errorf("the retry did not run as a chunk of 1 after the linger: %v", err)
	}
}

func TestChunkCommandExitStatusDecidesTheRest(t *testing.T) {
	t.Parallel()
	st := chunkShWorker(t, `cat >/dev/null; echo '{"id":"d-ok"}'; echo "disk full" >&2; exit 3`, worker.Chunk{Min: 2})
	_, err := st.Submit(context.Background(), norn.NewTask{ID: "d-ok", Queue: "sh"}, norn.NewTask{ID: "d-rest", Queue: "sh"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, "d-ok", 10*time.Second, norn.StatusCompleted)
	tk := waitStatus(t, st, "d-rest", 10*time.Second, norn.StatusAborted)
	if len(tk.Errors) != 1 || tk.Errors[0].Code != "exit_3" || !strings.Contains(tk.Errors[0].Description, "disk full") {
		t.Errorf("d-rest: errors %+v, want exit_3 with the stderr tail", tk.Errors)
	}
}
