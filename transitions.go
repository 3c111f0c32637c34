package norn

import "time"

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
// MaxAttempts is reached; otherwise retry (scheduled at now + Backoff(k),
// k = Attempts-1 retries used so far) while the retry policy allows; else
// abort with the worker's error.
func AfterFailure(t *Task, now time.Time, e ErrorInfo) Outcome {
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
	if t.Retry != nil && used < t.Retry.MaxRetries {
		wait := t.Retry.Backoff(used)
		o := Outcome{Status: StatusScheduled, RunAt: now.Add(wait), History: TaskRetry, Error: e}
		if wait <= 0 {
			o.Status, o.RunAt = StatusReady, now
		}
		return o
	}
	return Outcome{Status: StatusAborted, History: TaskAbort, Error: e}
}

// AfterTimeout decides what the monitor does to a running task whose
// deadline passed: back to ready (TaskTimeout), or aborted with
// attempts_exhausted when MaxAttempts is reached.
func AfterTimeout(t *Task, now time.Time) Outcome {
	e := ErrorInfo{Code: CodeTimeout, Description: "lease expired without a heartbeat"}
	if t.MaxAttempts > 0 && t.Attempts >= t.MaxAttempts {
		return Outcome{Status: StatusAborted, History: TaskAbort, Error: ErrorInfo{
			Code: CodeAttemptsExhausted, Description: "max_attempts reached; last attempt timed out"}}
	}
	return Outcome{Status: StatusReady, RunAt: now, History: TaskTimeout, Error: e}
}

func describe(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// AppendHistory appends e, dropping the oldest entries beyond limit (> 0)
// and counting them in HistoryDropped.
func (t *Task) AppendHistory(e HistoryEntry, limit int) {
	t.History = append(t.History, e)
	if limit > 0 && len(t.History) > limit {
		drop := len(t.History) - limit
		t.History = append(t.History[:0:0], t.History[drop:]...)
		t.HistoryDropped += drop
	}
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
