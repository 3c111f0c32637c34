package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/nornq/norn"
)

// API is what a Worker needs from a store: the worker calls plus reading a
// task's log (for Task.PreviousLog). Every norn.Store satisfies it — the
// embedded store, the Postgres store and the HTTP client alike.
type API interface {
	norn.WorkerAPI
	norn.Awaiter
	ReadLog(ctx context.Context, id string, after uint64, limit int) ([]norn.LogEntry, error)
}

// Config configures a Worker. Zero values mean the documented defaults.
type Config struct {
	// Handler runs every claimed task. Required unless Chunk is set. A
	// *ServeMux routes by queue.
	Handler Handler
	// Chunk, instead of Handler, runs the tasks of each claim together in
	// one call (a ChunkHandler) and makes the claims batch claims: see
	// Chunk. Queues is then required.
	Chunk *Chunk
	// Queues to claim from, in preference order. Default: the queues of
	// Handler when it is a *ServeMux (in registration order); required
	// otherwise. With a *ServeMux every queue must have a handler.
	Queues []string
	// Weights, when given, share claims between Queues by weight instead of
	// their strict order (norn.ClaimRequest.Weights): {"emails": 3,
	// "reports": 1} claims from emails about three times in four while
	// both have work. A queue without a weight weighs 1.
	Weights map[string]int
	// Concurrency is the most tasks run at once; the worker claims only
	// into free slots, so it never holds more leases than this. Default
	// runtime.NumCPU().
	Concurrency int
	// Lease is the lease length requested on claim and on every heartbeat.
	// Default 0: each task's own timeout (its queue's default unless the
	// task set one).
	Lease time.Duration
	// HeartbeatInterval is how often each running task's lease is extended.
	// Default: a third of the task's lease length, so two heartbeats can be
	// lost before the lease expires. Must be shorter than Lease when both
	// are set. It is also the bound on how late a handler learns that its
	// task was cancelled or its lease lost.
	HeartbeatInterval time.Duration
	// ClaimBatch is the most tasks asked for in one claim (never more than
	// the free slots). Default 10, max norn.MaxClaim.
	ClaimBatch int
	// Wait is how long one claim long-polls when nothing is ready. Default
	// 10s; negative disables long-polling (then PollInterval paces claims).
	// Max norn.MaxClaimWait.
	Wait time.Duration
	// PollInterval is the least time between the starts of two claims that
	// came back empty, and how often a false Capacity is re-checked.
	// Default 1s.
	PollInterval time.Duration
	// ShutdownGrace is how long running handlers may keep running after a
	// shutdown starts; then their contexts are cancelled (cause
	// ErrShutdown) and their tasks yielded back to the queue. Default 10s;
	// negative yields at once.
	ShutdownGrace time.Duration
	// Capacity, when set, is asked before every claim; while it returns
	// false nothing is claimed (e.g. CPU or memory above a threshold, see
	// LoadBelow). It is called from one goroutine and should be cheap.
	Capacity func() bool
	// Name is recorded with the worker registration for operators.
	// Default "<hostname>:<pid>".
	Name string
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, gives every attempt a consumer span
	// ("process <queue>"), a child of the task's stored traceparent, that
	// ends when the outcome is reported and records it. The handler's
	// context carries the span, so its own spans nest under it. Default
	// nil: no span, but the handler's context still carries the task's
	// trace context as a remote parent (spans the handler starts with its
	// own tracer join the submitter's trace). See tracing.FromEnv.
	TracerProvider trace.TracerProvider
}

// Defaults of Config.
const (
	DefaultClaimBatch    = 10
	DefaultWait          = 10 * time.Second
	DefaultPollInterval  = time.Second
	DefaultShutdownGrace = 10 * time.Second
)

// abandonAfter is how long Run, stopped by its context, waits for handlers
// that ignore their cancelled context after their tasks were yielded. Their
// outcomes are discarded anyway; the wait only keeps logs tidy.
const abandonAfter = 5 * time.Second

// Worker claims tasks and runs them with a Handler. Create it with New and
// start it with Run; a Worker runs once.
type Worker struct {
	api API
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	id       string
	runs     map[*run]struct{}
	started  bool
	stopping bool
	stopCtx  context.Context // bounds the drain; set when stopping starts
	// stopCancel releases stopCtx when Run made it.
	stopCancel context.CancelFunc

	stop      chan struct{} // closed when a shutdown starts
	done      chan struct{} // closed when Run returns
	slotFreed chan struct{}
	hbKick    chan struct{}
	handlers  sync.WaitGroup
}

// New checks cfg, fills its defaults and returns a Worker that will talk to
// api (an embedded store, a Postgres store or a client.Client).
func New(api API, cfg Config) (*Worker, error) {
	if api == nil {
		return nil, norn.Invalid("api", "a store or client is required")
	}
	switch {
	case cfg.Handler == nil && cfg.Chunk == nil:
		return nil, norn.Invalid("Handler", "a handler is required")
	case cfg.Handler != nil && cfg.Chunk != nil:
		return nil, norn.Invalid("Chunk", "a worker runs either Handler or Chunk, not both")
	}
	if err := cfg.checkQueues(); err != nil {
		return nil, err
	}
	if cfg.Concurrency < 0 {
		return nil, norn.Invalid("Concurrency", "must not be negative")
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = runtime.NumCPU()
	}
	if cfg.Chunk != nil {
		c, err := cfg.Chunk.check(cfg.Concurrency)
		if err != nil {
			return nil, err
		}
		cfg.Chunk = c
	}
	if cfg.Lease < 0 {
		return nil, norn.Invalid("Lease", "must not be negative")
	}
	if cfg.Lease > 0 && cfg.Lease < time.Millisecond {
		return nil, norn.Invalid("Lease", "must be at least 1ms")
	}
	if cfg.HeartbeatInterval < 0 {
		return nil, norn.Invalid("HeartbeatInterval", "must not be negative")
	}
	if cfg.Lease > 0 && cfg.HeartbeatInterval >= cfg.Lease {
		return nil, norn.Invalid("HeartbeatInterval", "must be shorter than Lease (%s)", cfg.Lease)
	}
	if cfg.ClaimBatch < 0 || cfg.ClaimBatch > norn.MaxClaim {
		return nil, norn.Invalid("ClaimBatch", "must be between 0 and %d", norn.MaxClaim)
	}
	if cfg.ClaimBatch == 0 {
		cfg.ClaimBatch = DefaultClaimBatch
	}
	if cfg.Wait > norn.MaxClaimWait {
		return nil, norn.Invalid("Wait", "must be at most %s", norn.MaxClaimWait)
	}
	if cfg.Wait == 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.Wait < 0 {
		cfg.Wait = 0
	}
	if cfg.PollInterval < 0 {
		return nil, norn.Invalid("PollInterval", "must not be negative")
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.ShutdownGrace < 0 {
		cfg.ShutdownGrace = 0
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = host + ":" + strconv.Itoa(os.Getpid())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Worker{
		api:       api,
		cfg:       cfg,
		log:       cfg.Logger,
		runs:      map[*run]struct{}{},
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		slotFreed: make(chan struct{}, 1),
		hbKick:    make(chan struct{}, 1),
	}, nil
}

// checkQueues checks Queues and Weights, taking the queues from a
// ServeMux handler when none are given.
func (cfg *Config) checkQueues() error {
	mux, _ := cfg.Handler.(*ServeMux)
	if len(cfg.Queues) == 0 && mux != nil {
		cfg.Queues = mux.Queues()
	}
	if len(cfg.Queues) == 0 {
		return norn.Invalid("Queues", "at least one queue is required")
	}
	for i, q := range cfg.Queues {
		field := fmt.Sprintf("Queues[%d]", i)
		if err := norn.ValidateQueue(field, q); err != nil {
			return err
		}
		if mux != nil && mux.Handler(q) == nil {
			return norn.Invalid(field, "no handler registered for queue %q", q)
		}
	}
	for q, wt := range cfg.Weights {
		if !slices.Contains(cfg.Queues, q) {
			return norn.Invalid(fmt.Sprintf("Weights[%q]", q), "names a queue the worker does not claim from")
		}
		if wt < 1 || wt > norn.MaxWeight {
			return norn.Invalid(fmt.Sprintf("Weights[%q]", q), "must be between 1 and %d", norn.MaxWeight)
		}
	}
	return nil
}

// Config returns the configuration with defaults filled in.
func (w *Worker) Config() Config { return w.cfg }

// ID returns the worker id the store assigned ("worker-<n>"), or "" before
// Run registered it.
func (w *Worker) ID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id
}

// Running returns how many tasks this worker holds right now.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.runs)
}

// Run registers the worker, then claims and runs tasks until ctx is
// cancelled or Shutdown is called, and shuts down gracefully: it stops
// claiming, lets running handlers finish within ShutdownGrace, then cancels
// the rest and yields their tasks so another worker takes them at once. It
// returns nil after a graceful shutdown, or the error that made the worker
// unable to work (e.g. an invalid queue or a refused token).
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker: Run called twice")
	}
	w.started = true
	stopped := w.stopping
	w.mu.Unlock()
	defer close(w.done)
	defer func() {
		w.mu.Lock()
		if w.stopCancel != nil {
			w.stopCancel()
		}
		w.mu.Unlock()
	}()
	if stopped {
		return nil
	}

	// Store calls made while draining must outlive ctx.
	bg := context.WithoutCancel(ctx)
	claimCtx, cancelClaims := context.WithCancel(ctx)
	defer cancelClaims()
	go func() {
		select {
		case <-claimCtx.Done():
			// Run's own ctx ended (not just Run returning): shut down.
			if ctx.Err() != nil {
				w.beginStop(nil)
			}
		case <-w.stop:
		}
		cancelClaims()
	}()

	err := w.register(claimCtx)
	if err == nil {
		hbCtx, stopHB := context.WithCancel(bg)
		hbDone := make(chan struct{})
		go func() { defer close(hbDone); w.heartbeats(hbCtx) }()
		err = w.claimLoop(claimCtx)
		w.beginStop(nil)
		w.drain(bg)
		stopHB()
		<-hbDone
	}
	if err != nil && w.isStopping() && claimCtx.Err() != nil {
		err = nil // interrupted while registering: a clean stop
	}
	return err
}

// Shutdown stops a running worker gracefully, as cancelling Run's context
// does, and waits until Run returned or ctx is done. ctx also bounds the
// drain: when it ends before the grace period, the remaining tasks are
// yielded at once. Handlers that ignore their cancelled context are waited
// for until ctx is done. Calling Shutdown before Run makes Run return at once.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.beginStop(ctx)
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// beginStop starts a shutdown once. ctx bounds the drain (nil: the grace
// period plus abandonAfter).
func (w *Worker) beginStop(ctx context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return
	}
	w.stopping = true
	if ctx == nil {
		ctx, w.stopCancel = context.WithTimeout(context.Background(), w.cfg.ShutdownGrace+abandonAfter)
	}
	w.stopCtx = ctx
	close(w.stop)
}

func (w *Worker) isStopping() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopping
}

// register obtains a worker id, retrying transient failures.
func (w *Worker) register(ctx context.Context) error {
	delay := 100 * time.Millisecond
	for {
		id, err := w.api.RegisterWorker(ctx, norn.WorkerInfo{Name: w.cfg.Name, Queues: w.cfg.Queues})
		if err == nil {
			w.mu.Lock()
			w.id = id
			w.mu.Unlock()
			w.log.Info("worker registered", "worker", id, "queues", w.cfg.Queues, "concurrency", w.cfg.Concurrency)
			return nil
		}
		if !transient(err) || ctx.Err() != nil {
			return fmt.Errorf("worker: register: %w", err)
		}
		w.log.Warn("worker registration failed; retrying", "err", err, "in", delay)
		if !sleep(ctx, delay) {
			return fmt.Errorf("worker: register: %w", ctx.Err())
		}
		delay = min(delay*2, 5*time.Second)
	}
}

// claimLoop claims into free slots until a shutdown starts. Only this
// goroutine claims, so counting the running tasks before claiming is enough
// to never exceed Concurrency.
func (w *Worker) claimLoop(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	// A chunk worker claims only once a whole Min fits: a batch claim's
	// min may not exceed its n.
	need := 1
	if c := w.cfg.Chunk; c != nil {
		need = max(c.Min, 1)
	}
	for ctx.Err() == nil {
		free := w.cfg.Concurrency - w.Running()
		if free < need {
			select {
			case <-w.slotFreed:
			case <-ctx.Done():
			}
			continue
		}
		if w.cfg.Capacity != nil && !w.cfg.Capacity() {
			select {
			case <-time.After(w.cfg.PollInterval):
			case <-w.slotFreed:
			case <-ctx.Done():
			}
			continue
		}
		req := norn.ClaimRequest{
			Worker:  w.ID(),
			Queues:  w.cfg.Queues,
			Weights: w.cfg.Weights,
			N:       min(free, w.cfg.ClaimBatch),
			Timeout: norn.Duration(w.cfg.Lease),
			Wait:    norn.Duration(w.cfg.Wait),
		}
		if c := w.cfg.Chunk; c != nil {
			req.N = min(free, c.Max)
			req.GroupBy = c.GroupBy
			if c.Min >= 2 {
				req.Min, req.Linger = c.Min, norn.Duration(c.Linger)
			}
		}
		sent := time.Now()
		tasks, err := w.api.Claim(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			switch norn.CodeOf(err) {
			case norn.CodeInvalidArgument, norn.CodeUnauthenticated, norn.CodePermissionDenied:
				return fmt.Errorf("worker: claim: %w", err)
			}
			w.log.Warn("claim failed; retrying", "worker", req.Worker, "err", err, "in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if w.cfg.Chunk != nil {
			w.startChunk(tasks, sent)
		} else {
			for _, t := range tasks {
				w.start(t, sent)
			}
		}
		if len(tasks) == 0 {
			sleep(ctx, w.cfg.PollInterval-time.Since(sent))
		}
	}
	return nil
}

// leaseLen is the lease a task gets on claim and heartbeat.
func (w *Worker) leaseLen(t *norn.Task) time.Duration {
	switch {
	case w.cfg.Lease > 0:
		return w.cfg.Lease
	case t.Timeout > 0:
		return t.Timeout.D()
	}
	return norn.DefaultTimeout
}

// extend is the Heartbeat.Extend every heartbeat asks for.
func (w *Worker) extend() norn.Duration { return norn.Duration(w.cfg.Lease) }

// start runs the handler of a freshly claimed task. sent is when the claim
// was sent: the lease surely lasts leaseLen from then.
func (w *Worker) start(nt *norn.Task, sent time.Time) {
	r := w.newRun(nt, sent)
	kick(w.hbKick)
	w.handlers.Add(1)
	go w.serve(r)
}

// newRun registers a freshly claimed task: from now on it takes a slot
// and is heartbeated until its outcome is reported.
func (w *Worker) newRun(nt *norn.Task, sent time.Time) *run {
	r := &run{w: w, ref: norn.LeaseRef{TaskID: nt.ID, Worker: nt.Owner, Lease: nt.Lease}}
	if r.ref.Worker == "" {
		r.ref.Worker = w.ID()
	}
	r.leaseLen = w.leaseLen(nt)
	r.interval = w.cfg.HeartbeatInterval
	if r.interval <= 0 || r.interval >= r.leaseLen {
		r.interval = r.leaseLen / 3
	}
	r.ctx, r.cancel = context.WithCancelCause(w.traceStart(r, nt))
	r.task = &Task{Task: *nt, r: r}
	r.lastOK = sent
	r.nextBeat = sent.Add(r.interval)
	w.mu.Lock()
	w.runs[r] = struct{}{}
	if nt.MaxRuntime > 0 {
		// The store started the attempt after sent, so its limit is no
		// earlier than sent + MaxRuntime by the local clock: stopping then
		// needs no agreement between the clocks.
		r.limitAt = sent.Add(nt.MaxRuntime.D())
		r.limit = time.AfterFunc(time.Until(r.limitAt), func() { w.overRuntime(r) })
	}
	w.mu.Unlock()
	return r
}

// serve runs the handler and reports its outcome.
func (w *Worker) serve(r *run) {
	defer w.handlers.Done()
	err, panicInfo := w.call(r)
	w.finish(r, err, panicInfo)
	r.traceEnd()
}

// call runs the handler, turning a panic into an abort description.
func (w *Worker) call(r *run) (err error, panicInfo *norn.ErrorInfo) {
	defer func() {
		if v := recover(); v != nil {
			msg := fmt.Sprintf("panic: %v\n\n%s", v, debug.Stack())
			panicInfo = &norn.ErrorInfo{Code: "panic", Description: truncateUTF8(msg, maxDescription)}
		}
	}()
	return w.cfg.Handler.ServeTask(r.ctx, r.task), nil
}

// finish reports a handler's outcome, unless the task was lost or yielded
// meanwhile, and frees its slot.
func (w *Worker) finish(r *run, err error, panicInfo *norn.ErrorInfo) {
	defer w.release(r)
	if o, ok := w.outcome(r, err, panicInfo); ok {
		w.deliver(r, o)
	}
}

// verdict is what a handler's return asks the store to record.
type verdict struct {
	op     norn.LeaseOpKind
	info   norn.ErrorInfo
	result json.RawMessage
}

// leaseOp is o as one operation of a LeaseBatch.
func (o verdict) leaseOp(r *run) norn.LeaseOp {
	op := norn.LeaseOp{Op: o.op, LeaseRef: r.ref}
	switch o.op {
	case norn.OpComplete:
		op.Result = o.result
	case norn.OpSnooze:
		op.Snooze = r.snooze
	default:
		info := o.info
		op.Error = &info
	}
	return op
}

// outcome turns a handler's return for r into what to report, and marks r
// finishing; false when nothing is to be reported (the task was lost,
// yielded or awaited meanwhile).
func (w *Worker) outcome(r *run, err error, panicInfo *norn.ErrorInfo) (verdict, bool) {
	w.mu.Lock()
	st := r.state
	if st == stRunning {
		r.state = stFinishing
	}
	o := verdict{result: r.result}
	w.mu.Unlock()
	if st != stRunning {
		return o, false
	}
	log := w.log.With("worker", r.ref.Worker, "task", r.ref.TaskID, "lease", r.ref.Lease)
	sn, snooze := snoozeOf(err)
	switch {
	case panicInfo != nil:
		o.op, o.info = norn.OpAbort, *panicInfo
		if o.info.Code == "panic" {
			log.Error("handler panicked; task aborted", "panic", firstLine(o.info.Description))
		} else {
			log.Error("task aborted", "code", o.info.Code, "err", o.info.Description)
		}
	case err == nil:
		o.op = norn.OpComplete
	case snooze:
		o.op = norn.OpSnooze
		r.snooze = sn
		log.Debug("task snoozed by its handler", "delay", sn.Delay.D())
	case IsAbort(err):
		o.op, o.info = norn.OpAbort, errorInfo(err)
		o.info.RetryIn = 0
		log.Info("task aborted by its handler", "err", err)
	default:
		o.op, o.info = norn.OpFail, errorInfo(err)
		log.Info("task failed", "err", err)
	}
	r.traceOutcome(o.op, o.info)
	return o, true
}

// deliver reports o for r, retrying transient failures, and logs how it
// went.
func (w *Worker) deliver(r *run, o verdict) {
	log := w.log.With("worker", r.ref.Worker, "task", r.ref.TaskID, "lease", r.ref.Lease)
	rerr := w.report(r, o.op, o.result, o.info)
	if o.op == norn.OpSnooze && r.snooze.Scope != "" && scopeRefused(rerr) {
		// The key has no rate limit to hold back (or the task no key): the
		// task's own snooze still stands, and the lease expiring instead
		// would run it again at once.
		log.Warn("the key cannot be held back; snoozing the task alone", "err", rerr)
		r.snooze.Scope = ""
		rerr = w.report(r, o.op, o.result, o.info)
	}
	if rerr != nil && o.op == norn.OpComplete && !gone(rerr) && !transient(rerr) {
		// The store refused the result itself (too large, invalid): the
		// handler will produce the same result again, so give up for good.
		log.Error("result refused; aborting task", "err", rerr)
		rerr = w.report(r, norn.OpAbort, nil, norn.ErrorInfo{Code: "invalid_result", Description: truncateUTF8(rerr.Error(), maxDescription)})
	}
	w.logReport(log, o.op, rerr)
}

func (w *Worker) logReport(log *slog.Logger, op norn.LeaseOpKind, rerr error) {
	switch {
	case rerr == nil:
		log.Debug("task reported", "op", op)
	case gone(rerr):
		log.Info("outcome not recorded: task was cancelled or the lease lost", "op", op, "err", rerr)
	default:
		log.Error("could not report outcome; the lease will expire and the task run again", "op", op, "err", rerr)
	}
}

// report sends one outcome, retrying transient failures while the lease
// is still likely held (heartbeats continue meanwhile).
func (w *Worker) report(r *run, op norn.LeaseOpKind, result json.RawMessage, info norn.ErrorInfo) error {
	ctx := context.Background()
	delay := 100 * time.Millisecond
	giveUp := time.Now().Add(max(r.leaseLen, 10*time.Second))
	for {
		cctx, cancel := context.WithTimeout(ctx, max(r.leaseLen, 5*time.Second))
		var err error
		switch op {
		case norn.OpComplete:
			err = w.api.Complete(cctx, r.ref, result)
		case norn.OpFail:
			err = w.api.Fail(cctx, r.ref, info)
		case norn.OpSnooze:
			_, err = w.api.Snooze(cctx, r.ref, r.snooze)
		default:
			err = w.api.Abort(cctx, r.ref, info)
		}
		cancel()
		if err == nil || !transient(err) || time.Now().Add(delay).After(giveUp) {
			return err
		}
		w.mu.Lock()
		lost := r.state == stGone
		w.mu.Unlock()
		if lost {
			return err
		}
		time.Sleep(delay)
		delay = min(delay*2, 2*time.Second)
	}
}

// release forgets a finished run and frees its slot.
func (w *Worker) release(r *run) {
	r.cancel(context.Canceled)
	w.mu.Lock()
	delete(w.runs, r)
	if r.limit != nil {
		r.limit.Stop()
	}
	w.mu.Unlock()
	kick(w.slotFreed)
}

// drain waits for running handlers up to the grace period, then cancels and
// yields the rest, then waits for their handlers (bounded by stopCtx).
func (w *Worker) drain(bg context.Context) {
	w.mu.Lock()
	stopCtx := w.stopCtx
	w.mu.Unlock()
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
wait:
	for w.Running() > 0 {
		select {
		case <-w.slotFreed:
		case <-grace.C:
			break wait
		case <-stopCtx.Done():
			break wait
		}
	}
	w.yieldAll(bg)
	waited := make(chan struct{})
	go func() { w.handlers.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-stopCtx.Done():
		w.log.Warn("shutdown: abandoning handlers that ignore their cancelled context", "worker", w.ID(), "running", w.Running())
	}
}

// yieldAll cancels every still-running handler and gives its task back.
func (w *Worker) yieldAll(bg context.Context) {
	w.mu.Lock()
	var ops []norn.LeaseOp
	for r := range w.runs {
		if r.state != stRunning {
			continue
		}
		r.state = stYielded
		r.cancel(ErrShutdown)
		ops = append(ops, norn.LeaseOp{Op: norn.OpYield, LeaseRef: r.ref})
	}
	w.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	res, err := w.api.LeaseBatch(ctx, ops)
	if err != nil {
		w.log.Error("shutdown: yield failed; the tasks run again when their leases expire", "worker", w.ID(), "tasks", len(ops), "err", err)
		return
	}
	for i, op := range ops {
		if i < len(res) && res[i].Err != nil && !gone(res[i].Err) {
			w.log.Warn("shutdown: yield failed", "task", op.TaskID, "err", res[i].Err)
		}
	}
	w.log.Info("shutdown: yielded unfinished tasks", "worker", w.ID(), "tasks", len(ops))
}

// check reacts to an error from a call made for r: an error saying the task
// is cancelled or the lease gone cancels the handler.
func (w *Worker) check(r *run, err error) {
	if !gone(err) {
		return
	}
	w.lose(r, err)
}

// lose marks r gone and cancels its handler with a cause saying why.
func (w *Worker) lose(r *run, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.state != stRunning && r.state != stFinishing {
		return
	}
	r.state = stGone
	cause := fmt.Errorf("%w: %w", ErrLeaseLost, err)
	switch {
	case errors.Is(err, norn.ErrCancelled):
		cause = fmt.Errorf("%w: %w", ErrTaskCancelled, err)
	case errors.Is(err, norn.ErrLeaseLost) && !r.limitAt.IsZero() && !time.Now().Before(r.limitAt):
		// The store ended the attempt at its max_runtime and a heartbeat
		// heard it before the local timer (late on a busy machine) fired:
		// the handler is told the same reason either way.
		cause = fmt.Errorf("%w of %s: %w", ErrMaxRuntime, r.task.MaxRuntime.D(), err)
	}
	r.cancel(cause)
	w.log.Info("task lost; handler cancelled", "worker", r.ref.Worker, "task", r.ref.TaskID, "lease", r.ref.Lease, "cause", err)
}

// overRuntime stops a run whose attempt reached the task's max_runtime:
// the handler's context is cancelled with ErrMaxRuntime and nothing more is
// sent for it (the store stops the attempt at the same limit). A handler
// that already returned has its outcome reported as usual.
func (w *Worker) overRuntime(r *run) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.state != stRunning {
		return
	}
	r.state = stGone
	r.cancel(fmt.Errorf("%w of %s", ErrMaxRuntime, r.task.MaxRuntime.D()))
	w.log.Info("task reached its max_runtime; handler cancelled", "worker", r.ref.Worker, "task", r.ref.TaskID,
		"lease", r.ref.Lease, "max_runtime", r.task.MaxRuntime.D())
}

// beaten records a successful heartbeat sent at sent.
func (w *Worker) beaten(r *run, sent time.Time) {
	w.mu.Lock()
	if sent.After(r.lastOK) {
		r.lastOK = sent
		r.nextBeat = sent.Add(r.interval)
	}
	w.mu.Unlock()
}

// gone reports whether err means the task is no longer ours.
func gone(err error) bool {
	return errors.Is(err, norn.ErrCancelled) || errors.Is(err, norn.ErrLeaseLost) || errors.Is(err, norn.ErrNotFound)
}

// scopeRefused reports whether err refuses a snooze's scope.
func scopeRefused(err error) bool {
	var e *norn.Error
	return errors.As(err, &e) && e.Code == norn.CodeInvalidArgument && e.Field == "scope"
}

// transient reports whether a call may succeed when repeated: the store
// was unavailable, its disk full (space may be freed) or the failure is
// untyped (network, internal).
func transient(err error) bool {
	switch norn.CodeOf(err) {
	case norn.CodeUnavailable, norn.CodeInsufficientStorage, norn.CodeInternal:
		return true
	}
	return false
}

// kick wakes a goroutine waiting on a 1-buffered channel without blocking.
func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sleep waits d or until ctx is done; false if ctx ended it.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func firstLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
