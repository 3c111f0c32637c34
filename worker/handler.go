// Package worker runs Norn tasks from Go, shaped like net/http: a Handler
// (or HandlerFunc) does the work of one task, a ServeMux routes tasks to
// handlers by queue, and a Worker claims tasks, keeps their leases alive with
// heartbeats, runs the handlers with a concurrency limit and reports each
// outcome:
//
//	mux := worker.NewServeMux()
//	mux.HandleFunc("emails", func(ctx context.Context, t *worker.Task) error {
//		var spec struct{ To string }
//		if err := json.Unmarshal(t.Spec, &spec); err != nil {
//			return worker.Abort(err) // malformed spec: never retry
//		}
//		return send(ctx, spec.To) // nil completes, an error fails (retried per policy)
//	})
//	w, err := worker.New(store, worker.Config{Handler: mux})
//	...
//	err = w.Run(ctx) // returns after a graceful shutdown when ctx is cancelled
//
// Work that is cheaper in bulk (one insert for many rows, one API call for
// many items) uses a ChunkHandler instead: Config.Chunk makes every claim a
// batch claim (norn.ClaimRequest.Min and Linger), and the tasks of one
// claim go to ServeChunk together, which returns one outcome per task.
// Nothing else changes: every task of a chunk takes a slot of Concurrency,
// keeps its own lease (heartbeated until its own outcome is reported), its
// own context (Task.Context) and its own outcome, with the same meaning as
// a Handler's; the outcomes of a chunk are reported in one store call, and
// a shutdown waits for a running chunk as it does for a single task:
//
//	w, err := worker.New(store, worker.Config{
//		Queues:      []string{"rows"},
//		Concurrency: 100,
//		Chunk: &worker.Chunk{Min: 50, Linger: 2 * time.Second,
//			Handler: worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
//				return insertRows(ctx, tasks) // one error (or nil) per task
//			})},
//	})
//
// The same code runs on an in-process store (store/embedded) and on a remote
// server through package client: both implement norn.Store.
//
// Delivery is at least once: a task whose worker is suspected dead (missed
// heartbeats) is given to another worker, so handlers must be idempotent or
// fence their side effects with the lease number (Task.Lease). See
// docs/workers.md.
package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nornq/norn"
)

// Handler does the work of one task. Its outcome decides what happens to the
// task:
//   - nil completes it (with the result set by Task.SetResult, if any);
//   - an error fails it: it is retried per the task's retry policy, or
//     aborted when no retries remain;
//   - an error wrapped with Abort aborts it for good;
//   - Snooze(d) puts it back for later (scheduled d from now) without
//     counting the attempt; SnoozeKey(d) also holds back every task of its
//     concurrency key until then;
//   - a panic aborts it with the panic message and stack, and the worker
//     keeps running.
//
// ctx is cancelled when the task is cancelled by a client, when its lease is
// lost (another worker may now own it), when the attempt reaches the task's
// max_runtime and when a shutdown's grace period ends; context.Cause(ctx)
// says which (ErrTaskCancelled, ErrLeaseLost, ErrMaxRuntime, ErrShutdown).
// In the first three cases nothing the handler returns is reported.
type Handler interface {
	ServeTask(ctx context.Context, t *Task) error
}

// HandlerFunc adapts an ordinary function to a Handler.
type HandlerFunc func(ctx context.Context, t *Task) error

// ServeTask calls f(ctx, t).
func (f HandlerFunc) ServeTask(ctx context.Context, t *Task) error { return f(ctx, t) }

// ServeMux routes a task to the handler registered for its queue. A Worker
// whose Config.Queues is empty claims from the mux's queues, in the order they
// were registered (that order is also the claim preference).
type ServeMux struct {
	mu     sync.RWMutex
	routes map[string]Handler
	order  []string
	mws    []Middleware
}

// Middleware wraps a Handler, for what every task should get whatever its
// queue: logging, metrics, tracing, recovering a library's panics as errors.
// It sees the task before and the outcome after the handler, and decides
// the outcome by what it returns.
type Middleware func(Handler) Handler

// Use appends middleware to the mux. Middleware applies to every task the mux
// dispatches, including tasks of queues registered before Use, in the order
// given: the first one is the outermost. Like Handle it panics on a nil
// middleware.
func (m *ServeMux) Use(mws ...Middleware) {
	for _, mw := range mws {
		if mw == nil {
			panic("worker: nil middleware")
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mws = append(m.mws, mws...)
}

// NewServeMux returns an empty mux.
func NewServeMux() *ServeMux { return &ServeMux{routes: map[string]Handler{}} }

// Handle registers h for queue. Like http.ServeMux it panics on programming
// errors: an invalid queue name, a nil handler or a queue registered twice.
func (m *ServeMux) Handle(queue string, h Handler) {
	if err := norn.ValidateQueue("queue", queue); err != nil {
		panic("worker: " + err.Error())
	}
	if h == nil {
		panic("worker: nil handler for queue " + queue)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.routes == nil {
		m.routes = map[string]Handler{}
	}
	if _, dup := m.routes[queue]; dup {
		panic("worker: multiple registrations for queue " + queue)
	}
	m.routes[queue] = h
	m.order = append(m.order, queue)
}

// HandleFunc registers f for queue.
func (m *ServeMux) HandleFunc(queue string, f func(ctx context.Context, t *Task) error) {
	if f == nil {
		panic("worker: nil handler for queue " + queue)
	}
	m.Handle(queue, HandlerFunc(f))
}

// Queues returns the registered queues in registration order.
func (m *ServeMux) Queues() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Clone(m.order)
}

// Handler returns the handler for queue, or nil.
func (m *ServeMux) Handler(queue string) Handler {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.routes[queue]
}

// ServeTask dispatches t to its queue's handler through the middleware. A
// task from a queue nobody registered is aborted (retrying it on this worker
// could never succeed); the middleware sees that outcome too.
func (m *ServeMux) ServeTask(ctx context.Context, t *Task) error {
	m.mu.RLock()
	h, mws := m.routes[t.Queue], m.mws
	m.mu.RUnlock()
	if h == nil {
		h = noHandler
	}
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h.ServeTask(ctx, t)
}

var noHandler = HandlerFunc(func(_ context.Context, t *Task) error {
	return WithCode("no_handler", Abort(fmt.Errorf("no handler registered for queue %q", t.Queue)))
})

// Causes of a handler's context cancellation (read with context.Cause).
var (
	// ErrTaskCancelled: a client cancelled the task. Nothing more is reported.
	ErrTaskCancelled = errors.New("worker: task was cancelled")
	// ErrLeaseLost: the lease is gone (expired and possibly re-claimed by
	// another worker, or the task was deleted). Nothing more is reported.
	ErrLeaseLost = errors.New("worker: lease lost")
	// ErrShutdown: the worker is shutting down and the grace period is over;
	// the task is yielded back to the queue.
	ErrShutdown = errors.New("worker: shutting down")
	// ErrMaxRuntime: the attempt ran for the task's max_runtime. Nothing
	// more is reported: the store stops the attempt (error code
	// max_runtime) and the task's attempt rules decide what follows.
	ErrMaxRuntime = errors.New("worker: task reached its max_runtime")
)

// abortError marks an error as unrecoverable.
type abortError struct{ err error }

func (e *abortError) Error() string { return e.err.Error() }
func (e *abortError) Unwrap() error { return e.err }

// Abort wraps err so that returning it from a handler aborts the task for
// good instead of failing it for retry. Abort(nil) returns nil.
func Abort(err error) error {
	if err == nil {
		return nil
	}
	return &abortError{err: err}
}

// IsAbort reports whether err (or an error it wraps) was made by Abort.
func IsAbort(err error) bool {
	var a *abortError
	return errors.As(err, &a)
}

// snoozeError asks for a snooze: until at when set, else for d.
type snoozeError struct {
	d  time.Duration
	at time.Time
	// signal, when set, waits for that signal (at most d).
	signal string
	// key also holds back the task's concurrency key (norn.SnoozeScopeKey).
	key bool
}

func (e *snoozeError) Error() string {
	if e.signal != "" {
		return "worker: snooze until signal " + e.signal
	}
	what := "snooze"
	if e.key {
		what = "snooze with its key"
	}
	if !e.at.IsZero() {
		return "worker: " + what + " until " + e.at.UTC().Format(time.RFC3339Nano)
	}
	return "worker: " + what + " for " + e.d.String()
}

// Snooze returns an error that, returned from a handler, puts the task back
// for later instead of finishing it: scheduled d from now (ready at once
// when d <= 0), the attempt does not count, and its history records
// TaskSnooze. Use it for "not yet" (a resource is busy, a rate limit says
// wait): unlike a failure it records no error and spends no retry.
func Snooze(d time.Duration) error { return &snoozeError{d: d} }

// SnoozeUntil is Snooze to a point in time: the task is scheduled until t
// (ready at once when t has passed, by the store's clock).
func SnoozeUntil(t time.Time) error {
	if t.IsZero() {
		return Snooze(0)
	}
	return &snoozeError{at: t}
}

// SnoozeUntilSignal is Snooze until a signal (norn.Signal) named name
// arrives, at most timeout (0: norn.DefaultSignalTimeout): the task is
// claimed again with Task.SignalWait saying whether the signal came (a
// signal sent before counts, and makes it ready at once).
func SnoozeUntilSignal(name string, timeout time.Duration) error {
	return &snoozeError{signal: name, d: timeout}
}

// SnoozeKey is Snooze that also holds back the task's concurrency key:
// the key's rate-limit bucket is emptied, so that no task of the key (on
// any worker, any node) is claimed before d has passed, while other keys'
// tasks keep flowing. Use it for back-pressure from whatever serves the
// key: a tenant's API answering 429 with a Retry-After. The key needs a
// rate limit (the queue's key_rate_limit or the key's own rate_limit);
// when it has none, or the task has no key, the store refuses the scope
// and the worker snoozes the task alone instead (and logs a warning).
func SnoozeKey(d time.Duration) error { return &snoozeError{d: d, key: true} }

// SnoozeKeyUntil is SnoozeKey to a point in time: the key's first task is
// claimed again at t.
func SnoozeKeyUntil(t time.Time) error {
	if t.IsZero() {
		return SnoozeKey(0)
	}
	return &snoozeError{at: t, key: true}
}

// snoozeOf returns the snooze a handler asked for, if it did.
func snoozeOf(err error) (norn.Snooze, bool) {
	var s *snoozeError
	if !errors.As(err, &s) {
		return norn.Snooze{}, false
	}
	if s.signal != "" {
		return norn.Snooze{UntilSignal: s.signal, Timeout: norn.Duration(max(s.d, 0))}, true
	}
	var sn norn.Snooze
	switch {
	case !s.at.IsZero():
		sn.RunAt = s.at.UTC()
	case s.d <= 0:
		// A past run_at is "ready at once", whatever the store's clock says.
		sn.RunAt = time.Unix(1, 0).UTC()
	default:
		sn.Delay = norn.Duration(s.d)
	}
	if s.key {
		sn.Scope = norn.SnoozeScopeKey
	}
	return sn, true
}

// codedError attaches an error code.
type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// WithCode attaches a machine-readable code (recorded as ErrorInfo.Code in
// the task's errors and history) to err. Without one the code is
// "handler_error". It composes with Abort in either order. WithCode(c, nil)
// returns nil.
func WithCode(code string, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

// retryInError asks for the retry's wait.
type retryInError struct {
	d   time.Duration
	err error
}

func (e *retryInError) Error() string { return e.err.Error() }
func (e *retryInError) Unwrap() error { return e.err }

// RetryIn fails the attempt like err and asks for the retry d from now
// instead of the policy's backoff (the handler knows best: a 429's
// Retry-After, a maintenance window). The policy still decides whether
// there is a retry at all, and caps d at its max. It composes with WithCode
// in either order; RetryIn(d, nil) returns nil.
func RetryIn(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &retryInError{d: d, err: err}
}

// DefaultErrorCode is the ErrorInfo.Code recorded for a handler error that
// carries no code of its own.
const DefaultErrorCode = "handler_error"

// errorInfo turns a handler error into what the store records.
func errorInfo(err error) norn.ErrorInfo {
	code := DefaultErrorCode
	var c *codedError
	if errors.As(err, &c) && c.code != "" {
		code = c.code
	}
	info := norn.ErrorInfo{Code: code, Description: truncateUTF8(err.Error(), maxDescription)}
	var r *retryInError
	if errors.As(err, &r) && r.d > 0 {
		info.RetryIn = norn.Duration(min(r.d, norn.MaxDuration))
	}
	return info
}

// maxDescription keeps recorded errors well inside norn.MaxErrorBytes.
const maxDescription = norn.MaxErrorBytes - 1024

// truncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence,
// keeping the beginning.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
