package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/store/embedded"
	"github.com/nornq/norn/worker"
)

// openStore opens an embedded store in a temporary directory.
func openStore(t *testing.T) *embedded.Store {
	t.Helper()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// spy wraps an API and records the outcome calls a worker makes, so tests
// can check that nothing is reported for a lost task.
type spy struct {
	worker.API
	mu    sync.Mutex
	calls map[string][]string // task id → ops
	// failBeats makes every heartbeat fail with a transient error.
	failBeats bool
}

func newSpy(api worker.API) *spy { return &spy{API: api, calls: map[string][]string{}} }

func (s *spy) record(id, op string) {
	s.mu.Lock()
	s.calls[id] = append(s.calls[id], op)
	s.mu.Unlock()
}

// ops returns the outcome calls made for a task.
func (s *spy) ops(id string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls[id]...)
}

func (s *spy) setFailBeats(v bool) {
	s.mu.Lock()
	s.failBeats = v
	s.mu.Unlock()
}

func (s *spy) Complete(ctx context.Context, ref norn.LeaseRef, result json.RawMessage) error {
	s.record(ref.TaskID, "complete")
	return s.API.Complete(ctx, ref, result)
}

func (s *spy) Fail(ctx context.Context, ref norn.LeaseRef, e norn.ErrorInfo) error {
	s.record(ref.TaskID, "fail")
	return s.API.Fail(ctx, ref, e)
}

func (s *spy) Abort(ctx context.Context, ref norn.LeaseRef, e norn.ErrorInfo) error {
	s.record(ref.TaskID, "abort")
	return s.API.Abort(ctx, ref, e)
}

func (s *spy) Yield(ctx context.Context, ref norn.LeaseRef) error {
	s.record(ref.TaskID, "yield")
	return s.API.Yield(ctx, ref)
}

func (s *spy) Snooze(ctx context.Context, ref norn.LeaseRef, sn norn.Snooze) (*norn.Task, error) {
	s.record(ref.TaskID, "snooze")
	return s.API.Snooze(ctx, ref, sn)
}

func (s *spy) Heartbeat(ctx context.Context, ref norn.LeaseRef, hb norn.Heartbeat) (time.Time, error) {
	s.mu.Lock()
	fail := s.failBeats
	s.mu.Unlock()
	if fail {
		return time.Time{}, norn.Unavailable(nil)
	}
	return s.API.Heartbeat(ctx, ref, hb)
}

func (s *spy) LeaseBatch(ctx context.Context, ops []norn.LeaseOp) ([]norn.LeaseOpResult, error) {
	s.mu.Lock()
	fail := s.failBeats
	s.mu.Unlock()
	for _, op := range ops {
		if op.Op != norn.OpHeartbeat {
			s.record(op.TaskID, string(op.Op))
		} else if fail {
			return nil, norn.Unavailable(nil)
		}
	}
	return s.API.LeaseBatch(ctx, ops)
}

// runWorker starts w.Run and, at cleanup, shuts it down and checks that
// Run returned nil. It returns a channel closed when Run returned.
func runWorker(t *testing.T, w *worker.Worker) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = w.Run(context.Background())
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-done
		if runErr != nil {
			t.Errorf("Run: %v", runErr)
		}
	})
	return done
}

// newWorker builds a worker with test-friendly defaults.
func newWorker(t *testing.T, api worker.API, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.Wait == 0 {
		cfg.Wait = 200 * time.Millisecond
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 4
	}
	w, err := worker.New(api, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// waitStatus waits until task id has one of the statuses and returns it.
func waitStatus(t *testing.T, api norn.ClientAPI, id string, timeout time.Duration, want ...norn.Status) *norn.Task {
	t.Helper()
	var last *norn.Task
	await.Check(t, timeout, fmt.Sprintf("task %s to be %v", id, want), func() (string, error) {
		tk, err := api.Get(context.Background(), id)
		if err != nil {
			return "", fmt.Errorf("get %s: %w", id, err)
		}
		last = tk
		if slices.Contains(want, tk.Status) {
			return "", nil
		}
		return "status " + string(tk.Status), nil
	})
	return last
}

// submit submits one task and returns its id.
func submit(t *testing.T, api norn.ClientAPI, nt norn.NewTask) string {
	t.Helper()
	subs, err := api.Submit(context.Background(), nt)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return subs[0].Task.ID
}

func historyTypes(tk *norn.Task) []norn.HistoryType {
	var out []norn.HistoryType
	for _, h := range tk.History {
		out = append(out, h.Type)
	}
	return out
}
