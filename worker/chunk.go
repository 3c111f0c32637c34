package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nornq/norn"
)

// ChunkHandler does the work of several tasks in one call: tasks that are
// cheaper together than one by one (one bulk insert, one API call for many
// items, one model inference over a batch). It returns one outcome per
// task, in the order of tasks, each meaning what a Handler's return means
// for that task alone: nil completes it (with the result set by its
// Task.SetResult), an error fails it for retry, Abort, RetryIn, WithCode
// and Snooze work as they do for a Handler, and Task.Await works per task.
// A nil slice completes every task. A slice of another length than tasks
// aborts every task with code "invalid_outcomes" (a programming error that
// retrying cannot fix); a panic aborts every task with the panic message.
//
// Each task keeps its own lease, heartbeats and max_runtime: Task.Context
// is cancelled when that task is cancelled, its lease lost or its
// max_runtime reached, and nothing is reported for it then. ctx is
// cancelled when every task's context is, and when a shutdown's grace
// period ends (context.Cause(ctx) is ErrShutdown; the tasks are yielded).
// The tasks may come from several of the worker's queues; Task.Queue says
// which.
type ChunkHandler interface {
	ServeChunk(ctx context.Context, tasks []*Task) []error
}

// ChunkHandlerFunc adapts an ordinary function to a ChunkHandler.
type ChunkHandlerFunc func(ctx context.Context, tasks []*Task) []error

// ServeChunk calls f(ctx, tasks).
func (f ChunkHandlerFunc) ServeChunk(ctx context.Context, tasks []*Task) []error {
	return f(ctx, tasks)
}

// Chunk makes a worker run tasks in chunks (Config.Chunk): every claim is
// a batch claim (norn.ClaimRequest.Min and Linger) for up to Max tasks,
// and the tasks it answers go to Handler together. The worker claims only
// when at least Min slots of Concurrency are free, so with Max equal to
// Concurrency (the default) one chunk runs at a time, and with a smaller
// Max several chunks may run side by side.
type Chunk struct {
	// Handler runs each chunk. Required.
	Handler ChunkHandler
	// Min is the least number of tasks a chunk waits for: a claim answers
	// once Min tasks are ready in the worker's queues, or once the one
	// ready longest has waited Linger. 0 or 1: a chunk is whatever is
	// ready (up to Max) as soon as one task is. At most Max.
	Min int
	// Linger bounds how long a ready task waits for Min to gather; after
	// it the chunk is whatever is ready. 0: wait until Min are ready,
	// however long that takes. Needs a Min of 2 or more.
	Linger time.Duration
	// Max is the most tasks in one chunk. Default Concurrency (capped at
	// norn.MaxClaim); at most Concurrency.
	Max int
	// GroupBy makes every task of a chunk share a value (a group claim,
	// norn.ClaimRequest.GroupBy): "concurrency_key", or "label:NAME" for
	// the task's label NAME. Min and Linger then count per group: a chunk
	// is the first group in claim order that has Min ready tasks, or
	// whose task ready longest has waited Linger. "": no grouping.
	GroupBy string
}

// check validates c against the worker's concurrency and returns a copy
// with the defaults filled in.
func (c *Chunk) check(concurrency int) (*Chunk, error) {
	cc := *c
	if cc.Handler == nil {
		return nil, norn.Invalid("Chunk.Handler", "a chunk handler is required")
	}
	if cc.Max < 0 || cc.Max > norn.MaxClaim {
		return nil, norn.Invalid("Chunk.Max", "must be between 0 and %d", norn.MaxClaim)
	}
	if cc.Max > concurrency {
		return nil, norn.Invalid("Chunk.Max", "must be at most Concurrency (%d), got %d", concurrency, cc.Max)
	}
	if cc.Max == 0 {
		cc.Max = min(concurrency, norn.MaxClaim)
	}
	if cc.Min < 0 {
		return nil, norn.Invalid("Chunk.Min", "must not be negative")
	}
	if cc.Min > concurrency {
		return nil, norn.Invalid("Chunk.Min", "must be at most Concurrency (%d), got %d", concurrency, cc.Min)
	}
	if cc.Min > cc.Max {
		return nil, norn.Invalid("Chunk.Min", "must be at most Chunk.Max (%d), got %d", cc.Max, cc.Min)
	}
	if err := norn.ValidateDuration("Chunk.Linger", norn.Duration(cc.Linger)); err != nil {
		return nil, err
	}
	if cc.Linger > 0 && cc.Min < 2 {
		return nil, norn.Invalid("Chunk.Linger", "needs a Chunk.Min of 2 or more")
	}
	if err := norn.ValidateGroupBy("Chunk.GroupBy", cc.GroupBy); err != nil {
		return nil, err
	}
	return &cc, nil
}

// startChunk runs the chunk handler over the tasks of one claim. Every
// task gets its own run (slot, lease, heartbeats, max_runtime) at once.
func (w *Worker) startChunk(tasks []*norn.Task, sent time.Time) {
	if len(tasks) == 0 {
		return
	}
	runs := make([]*run, len(tasks))
	for i, nt := range tasks {
		runs[i] = w.newRun(nt, sent)
	}
	kick(w.hbKick)
	w.handlers.Add(1)
	go w.serveChunk(runs)
}

// chunkContext is cancelled once every run's context is, with the cause
// of the last one cancelled (ErrShutdown when a shutdown yielded them).
func chunkContext(runs []*run) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	var mu sync.Mutex
	left := len(runs)
	for _, r := range runs {
		context.AfterFunc(r.ctx, func() {
			mu.Lock()
			left--
			last := left == 0
			mu.Unlock()
			if last {
				cancel(context.Cause(r.ctx))
			}
		})
	}
	return ctx, cancel
}

// serveChunk runs the chunk handler and reports every task's outcome.
func (w *Worker) serveChunk(runs []*run) {
	defer w.handlers.Done()
	ctx, cancel := chunkContext(runs)
	defer cancel(context.Canceled)
	tasks := make([]*Task, len(runs))
	for i, r := range runs {
		tasks[i] = r.task
	}
	errs, panicInfo := w.callChunk(ctx, tasks)
	if panicInfo == nil && errs != nil && len(errs) != len(runs) {
		panicInfo = &norn.ErrorInfo{Code: "invalid_outcomes",
			Description: fmt.Sprintf("the chunk handler returned %d outcomes for %d tasks", len(errs), len(runs))}
	}
	w.finishChunk(runs, errs, panicInfo)
	for _, r := range runs {
		r.traceEnd()
	}
}

// callChunk runs the chunk handler, turning a panic into an abort
// description.
func (w *Worker) callChunk(ctx context.Context, tasks []*Task) (errs []error, panicInfo *norn.ErrorInfo) {
	defer func() {
		if v := recover(); v != nil {
			msg := fmt.Sprintf("panic: %v\n\n%s", v, debug.Stack())
			panicInfo = &norn.ErrorInfo{Code: "panic", Description: truncateUTF8(msg, maxDescription)}
		}
	}()
	return w.cfg.Chunk.Handler.ServeChunk(ctx, tasks), nil
}

// finishChunk reports the outcomes of a chunk in one LeaseBatch (one store
// call however big the chunk), then frees the slots. An outcome the batch
// did not record for a reason worth another try (the store unavailable, a
// refused result) goes the single task's way: reported on its own, with
// retries.
func (w *Worker) finishChunk(runs []*run, errs []error, panicInfo *norn.ErrorInfo) {
	defer func() {
		for _, r := range runs {
			w.release(r)
		}
	}()
	var sent []*run
	var outs []verdict
	for i, r := range runs {
		var err error
		if errs != nil && panicInfo == nil {
			err = errs[i]
		}
		if o, ok := w.outcome(r, err, panicInfo); ok {
			sent = append(sent, r)
			outs = append(outs, o)
		}
	}
	if len(sent) == 0 {
		return
	}
	ops := make([]norn.LeaseOp, len(sent))
	leaseLen := time.Duration(0)
	for i, r := range sent {
		ops[i] = outs[i].leaseOp(r)
		leaseLen = max(leaseLen, r.leaseLen)
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(leaseLen, 5*time.Second))
	res, err := w.api.LeaseBatch(ctx, ops)
	cancel()
	for i, r := range sent {
		var rerr error = err
		if err == nil {
			switch {
			case i >= len(res):
				rerr = norn.Errorf(norn.CodeInternal, "lease batch returned %d results for %d operations", len(res), len(ops))
			case res[i].Err != nil:
				rerr = res[i].Err
			}
		}
		if rerr == nil || gone(rerr) {
			w.logReport(w.log.With("worker", r.ref.Worker, "task", r.ref.TaskID, "lease", r.ref.Lease), outs[i].op, rerr)
			continue
		}
		w.deliver(r, outs[i])
	}
}
