package norn

import (
	"bytes"
	"time"
)

// The decisions below are pure so every store makes them identically; the
// stores only differ in how they persist the outcome.

// Outcome is the decided next state of a task after a failure or a timeout.
type Outcome struct {
	Status Status
	// RunAt is when a retried task becomes ready (zero: now).
	RunAt time.Time
	// History is the entry type to record.
	History HistoryType
	// Error is the error recorded in the history entry and appended to Errors.
	Error ErrorInfo
}

// AfterFailure decides what Fail does to a running task whose Attempts
// already counts the failed attempt: abort with attempts_exhausted when
// MaxAttempts is reached; otherwise retry (scheduled at now + backoff(k),
// k = Attempts-1 retries used so far, spread by the policy's jitter, or
// the worker's RetryIn capped by the policy's max) while the retry policy
// (DefaultRetry when the task has none) allows; else abort with the
// worker's error.
func AfterFailure(t *Task, now time.Time, e ErrorInfo) Outcome {
	asked := e.RetryIn.D()
	if t.MaxAttempts > 0 && t.Attempts >= t.MaxAttempts {
		return Outcome{Status: StatusAborted, History: TaskAbort, Error: ErrorInfo{
			Code:        CodeAttemptsExhausted,
			Description: "max_attempts reached; last error: " + e.Code + describe(e.Description),
		}}
	}
	used := t.Attempts - 1
	if used < 0 {
		used = 0
	}
	e.RetryIn = 0
	pol := t.Retry
	if pol == nil {
		pol = &DefaultRetry
	}
	if used < pol.MaxRetries {
		wait := pol.retryWait(used, t.ID, t.Attempts, asked)
		o := Outcome{Status: StatusScheduled, RunAt: now.Add(wait), History: TaskRetry, Error: e}
		if wait <= 0 {
			o.Status, o.RunAt = StatusReady, now
		}
		return expireRetry(t, now, o)
	}
	return Outcome{Status: StatusAborted, History: TaskAbort, Error: e}
}

// AfterTimeout decides what the monitor does to a running task whose
// deadline passed: back to ready (TaskTimeout), or aborted with
// attempts_exhausted when MaxAttempts is reached. The error is timeout,
// or max_runtime when the lease ended at the task's runtime limit
// (StoppedByMaxRuntime: t needs Deadline, Started and MaxRuntime); both
// follow the same attempt rules.
func AfterTimeout(t *Task, now time.Time) Outcome {
	e := ErrorInfo{Code: CodeTimeout, Description: "lease expired without a heartbeat"}
	last := "last attempt timed out"
	if StoppedByMaxRuntime(t) {
		e = ErrorInfo{Code: CodeMaxRuntime, Description: "attempt ran for its max_runtime of " + t.MaxRuntime.String()}
		last = "last attempt reached max_runtime"
	}
	if t.MaxAttempts > 0 && t.Attempts >= t.MaxAttempts {
		return Outcome{Status: StatusAborted, History: TaskAbort, Error: ErrorInfo{
			Code: CodeAttemptsExhausted, Description: "max_attempts reached; " + last}}
	}
	return expireRetry(t, now, Outcome{Status: StatusReady, RunAt: now, History: TaskTimeout, Error: e})
}

// Requeue is where an outcome that sends a running task back to the queue
// (retry, timeout, yield, snooze) puts it at now: scheduled until RunAt
// when that is later than now, otherwise ready with run_at at most now.
func (o Outcome) Requeue(now time.Time) (Status, time.Time) {
	at := o.RunAt
	if at.IsZero() {
		at = now
	}
	if o.Status == StatusScheduled && at.After(now) {
		return StatusScheduled, at
	}
	if at.After(now) {
		at = now
	}
	return StatusReady, at
}

// KeepsOwner says whether the task keeps its worker as its owner after the
// outcome. A task that ends keeps its last owner, and so does a snoozed one
// (the snooze is the worker's own plan for it); a task that goes back to the
// queue because its worker failed it, gave it up (yield) or lost its lease
// (timeout) has none until the next claim names one.
func (o Outcome) KeepsOwner() bool {
	return o.Status == StatusAborted || o.History == TaskSnooze
}

// GivesAttemptBack says whether the outcome returns the attempt the claim
// counted (Attempts - 1): a yield or a snooze is not a failed attempt.
func (o Outcome) GivesAttemptBack() bool {
	return o.History == TaskYield || o.History == TaskSnooze
}

// CountTimeout counts in r what the monitor did to one task whose lease
// expired: every expired lease is timed out, and one that aborted the
// task (attempts_exhausted) is also aborted.
func (r *SweepReport) CountTimeout(o Outcome) {
	r.TimedOut++
	if o.Status == StatusAborted {
		r.Aborted++
	}
}

func describe(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// DefaultHistoryLimit is the history cap stores use unless configured.
const DefaultHistoryLimit = 100

// InitialStatus is the status of a new task given its run_at and whether it
// still waits for dependencies.
func InitialStatus(runAt, now time.Time, waitingDeps bool) Status {
	switch {
	case waitingDeps:
		return StatusBlocked
	case runAt.After(now):
		return StatusScheduled
	default:
		return StatusReady
	}
}

// HeartbeatDeadline decides the deadline a heartbeat at now gives a running
// task: now + extend when the worker asks for a length, otherwise now + the
// length of the current lease, so a heartbeat never shortens what the claim
// granted (a claim's Timeout may exceed the task's). A running task changes
// only when a lease is granted (claim, heartbeat; log appends are not
// changes), so that length is deadline − updated; timeout is the fallback
// should it not be positive.
//
// limit is the attempt's runtime limit (RuntimeLimit; zero: none): the
// deadline never goes past it, and ok is false when now has reached it,
// which the store answers with lease_lost.
func HeartbeatDeadline(now, updated, deadline time.Time, timeout, extend time.Duration, limit time.Time) (_ time.Time, ok bool) {
	if RuntimeExceeded(now, limit) {
		return time.Time{}, false
	}
	length := extend
	if length <= 0 {
		length = deadline.Sub(updated)
	}
	if length <= 0 {
		length = timeout
	}
	return CapLease(now.Add(length), limit), true
}

// IsRepeat decides whether a finishing call (complete, fail, abort, yield)
// that no longer holds a live lease repeats the call that ended that lease,
// so a worker whose reply was lost and who retries is told it succeeded.
// lease is the task's current lease number and last its latest history
// entry that carries a lease. It is a repeat when the task was not claimed
// again since, and that entry records the same worker, lease and outcome:
// TaskComplete for complete; TaskYield for yield; TaskAbort with the same
// error code for abort; TaskRetry with the same error code, or TaskAbort
// with it or with attempts_exhausted, for fail. Any other case stays
// lease_lost.
func IsRepeat(op *LeaseOp, lease uint64, last *HistoryEntry) bool {
	if last == nil || lease != op.Lease || last.Lease != op.Lease || last.Worker != op.Worker {
		return false
	}
	code := ""
	if last.Error != nil {
		code = last.Error.Code
	}
	switch op.Op {
	case OpComplete:
		return last.Type == TaskComplete
	case OpYield:
		return last.Type == TaskYield
	case OpAbort:
		return op.Error != nil && last.Type == TaskAbort && code == op.Error.Code
	case OpFail:
		if op.Error == nil {
			return false
		}
		switch last.Type {
		case TaskRetry:
			return code == op.Error.Code
		case TaskAbort:
			return code == op.Error.Code || code == CodeAttemptsExhausted
		}
	}
	return false
}

// IsLogRepeat decides whether an append that names a sequence number
// already used repeats the append that wrote entry: same lease, same data.
func IsLogRepeat(ref LeaseRef, a LogAppend, entry *LogEntry) bool {
	return entry != nil && a.Seq == entry.Seq && ref.Lease == entry.Lease && bytes.Equal(a.Data, entry.Data)
}
