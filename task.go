// Package norn is a persistent task scheduling system: clients submit tasks,
// workers lease them, heartbeat, report progress and finish them, and a
// monitor guarantees every task terminates.
//
// This package holds the public domain types (Task, Status, errors) and the
// Store interface. Implementations live in store/embedded (Pebble, in-process)
// and store/postgres (cluster mode); package client implements the same
// interface over HTTP, so code can move between them without changes.
package norn

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"time"
)

// Status is the lifecycle state of a task. See docs/design.md for the transitions.
type Status string

// The task statuses.
const (
	// StatusScheduled: waiting for run_at (a delay or a retry backoff).
	StatusScheduled Status = "scheduled"
	// StatusBlocked: waiting for dependencies to complete.
	StatusBlocked Status = "blocked"
	// StatusReady: claimable now.
	StatusReady Status = "ready"
	// StatusRunning: leased by a worker until its deadline.
	StatusRunning Status = "running"
	// StatusCompleted: finished successfully (terminal).
	StatusCompleted Status = "completed"
	// StatusAborted: failed for good (terminal).
	StatusAborted Status = "aborted"
	// StatusCancelled: cancelled by a client (terminal).
	StatusCancelled Status = "cancelled"
)

// AllStatuses lists every status in lifecycle order.
var AllStatuses = []Status{StatusScheduled, StatusBlocked, StatusReady, StatusRunning,
	StatusCompleted, StatusAborted, StatusCancelled}

// Terminal reports whether no further transition (other than deletion) is possible.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusAborted || s == StatusCancelled
}

// StatusCounts is a map of every status to zero: counts by status name
// every status, so that a reader of a queue's counts or the totals needs no
// default for the statuses it has none of.
func StatusCounts() map[Status]int64 {
	m := make(map[Status]int64, len(AllStatuses))
	for _, s := range AllStatuses {
		m[s] = 0
	}
	return m
}

// Valid reports whether s is one of the seven statuses.
func (s Status) Valid() bool { return slices.Contains(AllStatuses, s) }

// Pending reports whether the task has not finished yet.
func (s Status) Pending() bool { return s.Valid() && !s.Terminal() }

// HistoryType names an entry in a task's history.
type HistoryType string

// History entry types. Heartbeats are never recorded.
const (
	TaskAssignment HistoryType = "TaskAssignment" // claimed by a worker
	TaskTimeout    HistoryType = "TaskTimeout"    // lease expired; back to ready (or aborted)
	TaskYield      HistoryType = "TaskYield"      // owner gave it back
	TaskRetry      HistoryType = "TaskRetry"      // owner failed it; scheduled for retry
	TaskCancel     HistoryType = "TaskCancel"     // cancelled by a client
	TaskComplete   HistoryType = "TaskComplete"   // completed by its owner
	TaskAbort      HistoryType = "TaskAbort"      // aborted (by owner, retries used up, dependency failed, attempts exhausted)
	TaskRelease    HistoryType = "TaskRelease"    // dependency satisfied or delay elapsed
	TaskSnooze     HistoryType = "TaskSnooze"     // put back for later by its owner; attempt given back
	// TaskRedrive: retried by a client after it ended (aborted or
	// cancelled). Not TaskRetry, which records a failed attempt scheduled
	// for another by the task's retry policy.
	TaskRedrive HistoryType = "TaskRedrive"
	// TaskAwait: its owner submitted children and the task waits for
	// them, its attempt given back (see AwaitRequest).
	TaskAwait HistoryType = "TaskAwait"
)

// HistoryEntry is one recorded event in a task's life.
type HistoryEntry struct {
	Type     HistoryType `json:"type"`
	Time     time.Time   `json:"time"`
	Worker   string      `json:"worker,omitempty"`
	Lease    uint64      `json:"lease,omitempty"`
	Progress float64     `json:"progress,omitempty"`
	// Error is set for TaskRetry, TaskAbort and TaskTimeout entries.
	Error *ErrorInfo `json:"error,omitempty"`
}

// ErrorInfo describes why an attempt failed. Code is machine-readable
// (e.g. "timeout", "attempts_exhausted", "dependency_failed", or the worker's own).
type ErrorInfo struct {
	Code        string         `json:"code"`
	Description string         `json:"description,omitempty"`
	Args        map[string]any `json:"args,omitempty"`
	// RetryIn, on a fail, is the wait the worker asks for before the retry
	// (it knows best: a 429's Retry-After). It replaces the policy's backoff
	// and jitter, is capped by the policy's max, and never adds a retry the
	// policy does not allow. It is a request, not part of the error: the
	// recorded error and history leave it out.
	RetryIn Duration `json:"retry_in,omitzero"`
}

// Error codes the store itself writes into ErrorInfo.Code.
const (
	CodeTimeout           = "timeout"
	CodeAttemptsExhausted = "attempts_exhausted"
	CodeDependencyFailed  = "dependency_failed"
	CodeRetriesExhausted  = "retries_exhausted"
	// CodeMaxRuntime: the monitor stopped an attempt that reached the
	// task's max_runtime (see RuntimeLimit).
	CodeMaxRuntime = "max_runtime"
	// CodeExpired: the task reached its expires_at without running, or a
	// retry would have been scheduled at or past it.
	CodeExpired = "expired"
)

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("10s", "1h30m"). Plain JSON numbers are rejected: a bare number is
// ambiguous (seconds? nanoseconds?) and a silent guess is worse than an error.
type Duration time.Duration

// D converts to time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON parses a Go duration string; negative durations are rejected.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"10s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("invalid duration %q", s)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// RetryPolicy says how a failed task is retried: the n-th retry (0-based)
// waits Base·2^n, capped at Max, then spread by Jitter. The zero value means
// "never retry"; a task whose task and queue give no policy at all follows
// DefaultRetry.
type RetryPolicy struct {
	MaxRetries int      `json:"max_retries"`
	Base       Duration `json:"base,omitzero"`
	Max        Duration `json:"max,omitzero"`
	// Jitter spreads the waits of tasks that failed together, so they do not
	// come back together: "" or "none" waits exactly; "full" waits a
	// uniform share of the whole wait (0 to w); "equal" waits half of it
	// plus a uniform share of the other half (w/2 to w).
	Jitter string `json:"jitter,omitempty"`
}

// DefaultRetry is the policy of a task when neither it nor its queue gives
// one, as River, Sidekiq and Asynq retry by default: 24 retries (25
// attempts), waiting 1 s, 2 s, 4 s … doubling up to an hour, each spread by
// equal jitter — about 13 hours from the first failure to the last retry.
// It is decided at each failure, not stored with the task, so a task's
// retry reads null while it follows it.
var DefaultRetry = RetryPolicy{MaxRetries: 24, Base: Duration(time.Second), Max: Duration(time.Hour), Jitter: JitterEqual}

// Jitter modes of a RetryPolicy.
const (
	JitterNone  = "none"
	JitterFull  = "full"
	JitterEqual = "equal"
)

// jittered spreads w by the policy's jitter mode. The share is drawn from a
// hash of the task id and its attempt rather than a random source, so every
// store (and every node of a cluster) decides the same wait for the same
// failure, and a replayed fail lands where the first one did.
func (r RetryPolicy) jittered(w time.Duration, id string, attempt int) time.Duration {
	if w <= 0 {
		return w
	}
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{byte(attempt), byte(attempt >> 8), byte(attempt >> 16), byte(attempt >> 24)})
	// A fraction in [0, 1] with 2^-53 steps; uint64→float64 keeps w's scale
	// without overflowing the product.
	frac := float64(h.Sum64()>>11) / float64(uint64(1)<<53)
	switch r.Jitter {
	case JitterFull:
		return time.Duration(frac * float64(w))
	case JitterEqual:
		return w/2 + time.Duration(frac*float64(w-w/2))
	}
	return w
}

// backoff returns the wait before retry number n (0-based): Base·2^n capped at
// Max (at most MaxDuration when Max is 0), so a retry is never scheduled
// past what the stores hold.
func (r RetryPolicy) backoff(n int) time.Duration {
	base := r.Base.D()
	if base <= 0 {
		return 0
	}
	if n < 0 {
		n = 0
	}
	d := min(base, MaxDuration)
	for i := 0; i < n; i++ {
		if d > MaxDuration/2 {
			d = MaxDuration
			break
		}
		d *= 2
		if r.Max > 0 && d >= r.Max.D() {
			break
		}
	}
	if r.Max > 0 && d > r.Max.D() {
		d = r.Max.D()
	}
	return d
}

// retryWait is the wait before retry number n (0-based) of task id after
// its attempt-th attempt failed: the worker's asked wait when it gave one,
// else the jittered backoff; never beyond Max (or MaxDuration).
func (r RetryPolicy) retryWait(n int, id string, attempt int, asked time.Duration) time.Duration {
	if asked > 0 {
		if r.Max > 0 && asked > r.Max.D() {
			return r.Max.D()
		}
		return min(asked, MaxDuration)
	}
	return r.jittered(r.backoff(n), id, attempt)
}

// DefaultTimeout is the lease length a task gets when neither it nor its
// queue says otherwise.
const DefaultTimeout = 10 * time.Second

// Task is the full record of a task. The JSON form is the wire format of the
// HTTP API. Fields marked "summary" are kept in the summary view; spec,
// result, errors and history are omitted there.
type Task struct {
	ID       string            `json:"id"`
	Queue    string            `json:"queue"`
	Spec     json.RawMessage   `json:"spec,omitempty"`
	Priority uint32            `json:"priority"`
	Status   Status            `json:"status"`
	Progress float64           `json:"progress"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Traceparent and Tracestate are the W3C trace context the task was
	// submitted in (empty: none); a worker's span for an attempt is a
	// child of it. See docs/tracing.md.
	Traceparent string    `json:"traceparent,omitempty"`
	Tracestate  string    `json:"tracestate,omitempty"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	// RunAt: not claimable before this time.
	RunAt     time.Time `json:"run_at"`
	DependsOn []string  `json:"depends_on,omitempty"`
	// OnDependencyFailure is DependencyRun or "" (DependencyAbort); see
	// NewTask.
	OnDependencyFailure string `json:"on_dependency_failure,omitempty"`
	// Owner is the worker holding (or that last held) the task.
	Owner string `json:"owner,omitempty"`
	// Deadline is the lease expiry while running.
	Deadline time.Time `json:"deadline,omitzero"`
	// Lease is the claim number: +1 on every claim, never reused. It is the
	// fencing token every worker call must present.
	Lease uint64 `json:"lease"`
	// Attempts counts claims that were not yielded back.
	Attempts int `json:"attempts"`
	// MaxAttempts aborts the task with attempts_exhausted when reached by a
	// timeout or a failure; 0 means unlimited.
	MaxAttempts int          `json:"max_attempts"`
	Retry       *RetryPolicy `json:"retry,omitempty"`
	// Timeout is the lease length granted on claim and heartbeat.
	Timeout Duration `json:"timeout"`
	// UniqueKey is the key the task was submitted with (see NewTask).
	UniqueKey string `json:"unique_key,omitempty"`
	// ConcurrencyKey is the flow-control key given at submit (NewTask).
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// MaxRuntime bounds one attempt: its lease never runs past Started +
	// MaxRuntime, however often the worker heartbeats (0: no limit).
	MaxRuntime Duration `json:"max_runtime,omitzero"`
	// ExpiresAt is when the task expires if it is not running then (zero:
	// never); see NewTask.ExpiresAt.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Batch is the batch the task joined at submit ("" for none).
	Batch string `json:"batch,omitempty"`
	// SequenceKey is the sequence the task joined at submit (see
	// NewTask.SequenceKey); "" for none.
	SequenceKey string `json:"sequence_key,omitempty"`
	// SignalWait is the task's last wait for a signal (nil: none).
	SignalWait *SignalWait `json:"signal_wait,omitempty"`
	// Started is when the current (or last) attempt was claimed.
	Started time.Time       `json:"started,omitzero"`
	Result  json.RawMessage `json:"result,omitempty"`
	Errors  []ErrorInfo     `json:"errors,omitempty"`
	// DependencyResults are the outcomes of the dependencies that ended,
	// in depends_on order, kept with the task even when retention purged
	// the dependency. A claim hands them to the worker.
	DependencyResults []DependencyResult `json:"dependency_results,omitempty"`
	// Signals are the signals the task received, in order.
	Signals []Signal       `json:"signals,omitempty"`
	History []HistoryEntry `json:"history,omitempty"`
	// HistoryDropped counts the oldest history entries dropped by the cap.
	HistoryDropped int `json:"history_dropped,omitempty"`
	// Version is +1 on every write; use it for compare-and-set updates.
	Version uint64 `json:"version"`
}

// Summary returns a copy without spec, result, errors and history.
func (t *Task) Summary() *Task {
	c := *t
	c.Spec, c.Result, c.Errors, c.History, c.HistoryDropped = nil, nil, nil, nil, 0
	c.DependencyResults, c.Signals, c.SignalWait = nil, nil, nil
	return &c
}

// Clone returns a deep copy, so a store can hand out tasks without sharing
// memory with its own state.
func (t *Task) Clone() *Task {
	c := *t
	if t.Labels != nil {
		c.Labels = maps.Clone(t.Labels)
	}
	c.Spec = cloneRaw(t.Spec)
	c.Result = cloneRaw(t.Result)
	c.DependsOn = append([]string(nil), t.DependsOn...)
	if t.DependsOn == nil {
		c.DependsOn = nil
	}
	if t.Retry != nil {
		r := *t.Retry
		c.Retry = &r
	}
	if t.Errors != nil {
		c.Errors = append([]ErrorInfo(nil), t.Errors...)
	}
	if t.SignalWait != nil {
		w := *t.SignalWait
		c.SignalWait = &w
	}
	if t.Signals != nil {
		c.Signals = make([]Signal, len(t.Signals))
		for i, s := range t.Signals {
			c.Signals[i] = s
			c.Signals[i].Data = cloneRaw(s.Data)
		}
	}
	if t.DependencyResults != nil {
		c.DependencyResults = make([]DependencyResult, len(t.DependencyResults))
		for i, r := range t.DependencyResults {
			c.DependencyResults[i] = r
			c.DependencyResults[i].Result = cloneRaw(r.Result)
		}
	}
	if t.History != nil {
		c.History = append([]HistoryEntry(nil), t.History...)
	}
	return &c
}

func cloneRaw(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

// LogEntry is one update in a task's log (Skuld's checkpoints). Seq starts at
// 1 and is contiguous per task across all claims, so a later claimant can
// resume from the last checkpoint.
type LogEntry struct {
	Seq   uint64          `json:"seq"`
	Lease uint64          `json:"lease"`
	Time  time.Time       `json:"time"`
	Data  json.RawMessage `json:"data"`
}
