package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/nornq/norn"
)

// Task is the handler's view of one claimed task. The embedded norn.Task is a
// snapshot taken at claim time (ID, Queue, Spec, Labels, Attempts — 1 on the
// first claim —, Lease, Timeout, ...). The methods talk to the store under
// the task's lease and are safe for concurrent use by the handler's
// goroutines; they must not be called after the handler returned.
//
// Lease is the fencing token: it grows on every claim and is never reused, so
// an external system that remembers the highest lease it has seen for a task
// can refuse writes from a superseded worker.
type Task struct {
	norn.Task
	r *run
}

// Context returns the context the task's attempt runs in: the one a
// Handler receives, cancelled when the task is cancelled, its lease lost,
// its max_runtime reached or a shutdown's grace period over (see
// Handler). A ChunkHandler reads it to learn which of its tasks still
// count.
func (t *Task) Context() context.Context { return t.r.ctx }

// Ref returns the lease reference every store call for this task presents.
func (t *Task) Ref() norn.LeaseRef { return t.r.ref }

// Progress records progress p (0..1) right away with a heartbeat, which also
// extends the lease. Prefer SetProgress for frequent updates. An error
// meaning the task was cancelled or the lease lost also cancels the
// handler's context.
func (t *Task) Progress(ctx context.Context, p float64) error {
	if err := norn.ValidateProgress("progress", p); err != nil {
		return err
	}
	r := t.r
	sent := time.Now()
	_, err := r.w.api.Heartbeat(ctx, r.ref, norn.Heartbeat{Progress: &p, Extend: r.w.extend()})
	if err != nil {
		r.w.check(r, err)
		return fmt.Errorf("progress: %w", err)
	}
	r.w.beaten(r, sent)
	return nil
}

// SetProgress records progress p to be sent with the next automatic
// heartbeat: it never blocks and costs no extra store call. Values outside
// 0..1 are clamped; NaN is ignored.
func (t *Task) SetProgress(p float64) {
	if math.IsNaN(p) {
		return
	}
	p = min(max(p, 0), 1)
	r := t.r
	r.w.mu.Lock()
	r.progress = &p
	// Sent soon, not only with the next heartbeat, which may be minutes
	// away with a long lease: at most one early heartbeat per
	// ProgressEvery.
	soon := r.progressSent.Add(ProgressEvery)
	if now := time.Now(); soon.Before(now) {
		soon = now
	}
	early := r.state == stRunning && r.nextBeat.After(soon)
	if early {
		r.nextBeat = soon
	}
	r.w.mu.Unlock()
	if early {
		kick(r.w.hbKick)
	}
}

// ProgressEvery is the least time between two heartbeats a progress
// update brings forward: SetProgress reaches the store within about this
// long, whatever the lease length, without a call per update.
const ProgressEvery = time.Second

// SetResult sets the result recorded when the handler returns nil. v is
// encoded with encoding/json unless it is a json.RawMessage, which must be
// valid JSON. The last call wins.
func (t *Task) SetResult(v any) error {
	raw, err := toJSON(v)
	if err != nil {
		return fmt.Errorf("result: %w", err)
	}
	r := t.r
	r.w.mu.Lock()
	r.result = raw
	r.w.mu.Unlock()
	return nil
}

// Log appends data (encoded like SetResult) to the task's update log, which
// the next claimant can read with PreviousLog to resume from a checkpoint.
// Sequence numbers are handled here: every append names the number it
// expects, so Log retries transient failures itself, and calling Log again
// with the same data after an error never appends twice.
func (t *Task) Log(ctx context.Context, data any) (norn.LogEntry, error) {
	raw, err := toJSON(data)
	if err != nil {
		return norn.LogEntry{}, fmt.Errorf("log: %w", err)
	}
	r := t.r
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if r.nextSeq == 0 {
		// Lease 1 is the first claim ever, so the log is empty; later
		// claimants learn where the log ends by reading it once.
		if r.ref.Lease == 1 {
			r.nextSeq = 1
		} else if _, err := t.loadLog(ctx); err != nil {
			return norn.LogEntry{}, fmt.Errorf("log: %w", err)
		}
	}
	delay := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		seq := r.nextSeq
		e, err := r.w.api.AppendLog(ctx, r.ref, norn.LogAppend{Seq: seq, Data: raw})
		if err == nil {
			r.nextSeq = e.Seq + 1
			return e, nil
		}
		if errors.Is(err, norn.ErrConflict) {
			// Our number is behind: an earlier append whose reply was lost
			// landed. If it is this very entry, that is success.
			entries, rerr := r.w.api.ReadLog(ctx, r.ref.TaskID, seq-1, 0)
			if rerr != nil {
				return norn.LogEntry{}, fmt.Errorf("log: %w", err)
			}
			if len(entries) > 0 {
				r.nextSeq = entries[len(entries)-1].Seq + 1
				if e := entries[0]; e.Seq == seq && e.Lease == r.ref.Lease && sameJSON(e.Data, raw) {
					return e, nil
				}
			}
			if attempt < 3 {
				continue
			}
		}
		r.w.check(r, err)
		if !transient(err) || attempt >= 3 || ctx.Err() != nil {
			return norn.LogEntry{}, fmt.Errorf("log: %w", err)
		}
		select {
		case <-time.After(delay):
			delay *= 2
		case <-ctx.Done():
			return norn.LogEntry{}, fmt.Errorf("log: %w", ctx.Err())
		}
	}
}

// PreviousLog returns the log entries written under earlier claims of this
// task (oldest first), so a handler can resume from the last checkpoint
// instead of starting over. It reads the log once and caches the answer.
func (t *Task) PreviousLog(ctx context.Context) ([]norn.LogEntry, error) {
	t.r.logMu.Lock()
	defer t.r.logMu.Unlock()
	return t.loadLog(ctx)
}

// loadLog reads the whole log once (r.logMu held): the earlier claims'
// entries are kept for PreviousLog and the next sequence number is learned.
func (t *Task) loadLog(ctx context.Context) ([]norn.LogEntry, error) {
	r := t.r
	if r.prevLoaded {
		return r.prevLog, nil
	}
	const page = 1000
	var prev []norn.LogEntry
	var after uint64
	for {
		entries, err := r.w.api.ReadLog(ctx, r.ref.TaskID, after, page)
		if err != nil {
			r.w.check(r, err)
			return nil, fmt.Errorf("previous log: %w", err)
		}
		for _, e := range entries {
			if e.Lease < r.ref.Lease {
				prev = append(prev, e)
			}
			after = e.Seq
		}
		if len(entries) < page {
			break
		}
	}
	r.prevLog, r.prevLoaded = prev, true
	if r.nextSeq <= after {
		r.nextSeq = after + 1
	}
	return prev, nil
}

// toJSON encodes v for the store: json.RawMessage as is (validated), else
// encoding/json.
func toJSON(v any) (json.RawMessage, error) {
	if raw, ok := v.(json.RawMessage); ok {
		if !json.Valid(raw) {
			return nil, errors.New("invalid JSON")
		}
		return raw, nil
	}
	return json.Marshal(v)
}

// sameJSON compares two JSON documents ignoring insignificant whitespace,
// because a store may re-encode what it was given.
func sameJSON(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// runState is where a claimed task is in its life on this worker.
type runState int

const (
	// stRunning: the handler runs and heartbeats keep the lease.
	stRunning runState = iota
	// stFinishing: the handler returned; its outcome is being reported.
	stFinishing
	// stGone: cancelled or lease lost; nothing more is sent.
	stGone
	// stYielded: given back at shutdown; nothing more is sent.
	stYielded
	// stAwaited: the handler awaited children (Task.Await), which ended
	// the lease; nothing more is sent.
	stAwaited
)

// run is the worker's bookkeeping for one claimed task. Fields below mu are
// guarded by Worker.mu.
type run struct {
	w      *Worker
	ref    norn.LeaseRef
	task   *Task
	ctx    context.Context
	cancel context.CancelCauseFunc
	// leaseLen is how long a lease lasts after a successful heartbeat;
	// interval how often to heartbeat.
	leaseLen, interval time.Duration
	// snooze is what the handler asked for when it returned Snooze(d);
	// written by finish before report reads it, on the same goroutine.
	snooze norn.Snooze
	// limit cancels the handler at the task's max_runtime (nil: no limit).
	limit *time.Timer
	// limitAt is when limit fires (zero without a max_runtime).
	limitAt time.Time
	// span is the attempt's span (nil without Config.TracerProvider).
	span trace.Span

	// Guarded by Worker.mu.
	state    runState
	lastOK   time.Time // local time the last successful claim/heartbeat was sent
	nextBeat time.Time
	inflight bool
	progress *float64
	// progressSent is when a heartbeat last carried progress: a new
	// progress goes out at most ProgressEvery after it.
	progressSent time.Time
	result       json.RawMessage
	// sigs, once the handler asked for it (Task.SignalC), receives the
	// task's signals with sequence numbers after sigAfter, read after
	// each successful heartbeat (watchSignals).
	sigs     chan norn.Signal
	sigAfter uint64

	logMu      sync.Mutex
	nextSeq    uint64
	prevLog    []norn.LogEntry
	prevLoaded bool
}

// Await submits children and makes the task wait for them; the handler
// then returns (whatever it returns is not reported): the attempt ends
// without counting, and once every child has ended the task is claimed
// again, its DependencyResults holding the children's outcomes. A child
// that fails aborts the task (dependency_failed); use AwaitRequest with
// on_child_failure continue to run it anyway. See norn.AwaitRequest.
//
//	if len(t.DependencyResults) == 0 {
//		return t.Await(ctx, norn.NewTask{Queue: "resize", Spec: small}, norn.NewTask{Queue: "resize", Spec: large})
//	}
//	// second attempt: every child ended; t.DependencyResults has their results
func (t *Task) Await(ctx context.Context, children ...norn.NewTask) error {
	_, err := t.AwaitRequest(ctx, norn.AwaitRequest{Tasks: children})
	return err
}

// AwaitRequest is Await with every option of the request, answering the
// children's submit results.
func (t *Task) AwaitRequest(ctx context.Context, req norn.AwaitRequest) (*norn.AwaitResult, error) {
	r := t.r
	w := r.w
	w.mu.Lock()
	if r.state != stRunning {
		w.mu.Unlock()
		return nil, fmt.Errorf("await: task %s is no longer running in this worker", r.ref.TaskID)
	}
	r.state = stFinishing // heartbeats go on while the call is in flight
	w.mu.Unlock()
	out, err := w.api.Await(ctx, r.ref, req)
	w.mu.Lock()
	if err != nil {
		if r.state == stFinishing {
			r.state = stRunning
		}
		w.mu.Unlock()
		w.check(r, err)
		return nil, fmt.Errorf("await: %w", err)
	}
	if r.state == stFinishing {
		r.state = stAwaited
	}
	w.mu.Unlock()
	return out, nil
}

// SignalC returns a channel that receives the signals the task gets
// while it runs, in order, from the first call on: after every heartbeat
// the worker reads the task's new signals and sends them (up to
// SignalBuffer may wait unread; the worker reads more once there is room).
// Signals received before the claim are in Task.Signals, not sent again.
// The channel is never closed: select on it with the task's Context.
func (t *Task) SignalC() <-chan norn.Signal {
	w, r := t.r.w, t.r
	w.mu.Lock()
	defer w.mu.Unlock()
	if r.sigs == nil {
		r.sigs = make(chan norn.Signal, SignalBuffer)
		for _, s := range t.Task.Signals {
			r.sigAfter = max(r.sigAfter, s.Seq)
		}
		// Read soon, not a whole interval later.
		r.nextBeat = time.Time{}
		select {
		case w.hbKick <- struct{}{}:
		default:
		}
	}
	return r.sigs
}

// SignalBuffer is how many signals SignalC holds unread.
const SignalBuffer = 64

// NewSignals returns the signals the task received after seq (0: all), in
// order: a long handler waiting on a person or another system can poll
// for them (Task.Signals holds those received before the claim; SignalC
// delivers them as they come).
func (t *Task) NewSignals(ctx context.Context, after uint64) ([]norn.Signal, error) {
	sig, ok := t.r.w.api.(norn.Signaler)
	if !ok {
		return nil, fmt.Errorf("signals: the worker's store does not keep signals")
	}
	return sig.Signals(ctx, t.ID, after)
}
