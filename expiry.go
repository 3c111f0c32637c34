package norn

import (
	"fmt"
	"time"
)

// Expiry: a task may carry a deadline by which it must have started
// (NewTask.ExpiresAt or ExpireIn). The decisions below are shared by the
// stores; each also keeps expired tasks from its claims and aborts them
// from its monitor when the deadline passes.

// expiry is n's deadline: ExpiresAt, or ExpireIn after the time the task
// may first run (RunAt, else now plus Delay, else now); zero for none.
func (n *NewTask) expiry(now time.Time) time.Time {
	if !n.ExpiresAt.IsZero() {
		return n.ExpiresAt.UTC()
	}
	if n.ExpireIn <= 0 {
		return time.Time{}
	}
	return n.firstRun(now).Add(n.ExpireIn.D()).UTC()
}

// firstRun is when n, submitted at now, may first run: RunAt, else now
// plus Delay, else now.
func (n *NewTask) firstRun(now time.Time) time.Time {
	switch {
	case !n.RunAt.IsZero():
		return n.RunAt
	case n.Delay > 0:
		return now.Add(n.Delay.D())
	}
	return now
}

// CheckExpiries refuses, before a store writes anything, a batch in which
// a task would expire before it could run: an expires_at that has passed
// at now, or that is not after the task's run_at. prefix names the batch
// in the error ("tasks" gives tasks[3].expires_at; "" gives expires_at).
func CheckExpiries(prefix string, tasks []NewTask, now time.Time) error {
	for i := range tasks {
		n := &tasks[i]
		if n.ExpiresAt.IsZero() && n.ExpireIn <= 0 {
			continue
		}
		field := "expires_at"
		if n.ExpiresAt.IsZero() {
			field = "expire_in"
		}
		if prefix != "" {
			field = fmt.Sprintf("%s[%d].%s", prefix, i, field)
		}
		exp := n.expiry(now)
		if !exp.After(now) {
			return Invalid(field, "the task would expire at %s, which is not after now (%s)", exp.Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
		}
		if !n.RunAt.IsZero() && !exp.After(n.RunAt) {
			return Invalid(field, "the task would expire at %s, not after its run_at %s: it could never run", exp.Format(time.RFC3339Nano), n.RunAt.UTC().Format(time.RFC3339Nano))
		}
		if n.RunAt.IsZero() && n.Delay > 0 && !exp.After(now.Add(n.Delay.D())) {
			return Invalid(field, "the task would expire at %s, before its delay of %s ends: it could never run", exp.Format(time.RFC3339Nano), n.Delay)
		}
	}
	return nil
}

// Expired reports whether a task with expiry exp has expired at now.
func Expired(exp, now time.Time) bool { return !exp.IsZero() && !now.Before(exp) }

// ExpiredError is the error a task that expired ends with.
func ExpiredError(exp time.Time) ErrorInfo {
	return ErrorInfo{Code: CodeExpired, Description: "the task did not start before its expires_at " + exp.UTC().Format(time.RFC3339Nano)}
}

// Expire is the outcome for a pending task (not running) past its expiry:
// aborted with CodeExpired.
func Expire(exp time.Time) Outcome {
	return Outcome{Status: StatusAborted, History: TaskAbort, Error: ExpiredError(exp)}
}

// expireRetry turns a retry outcome o of t that would run at or past t's
// expiry into an abort with CodeExpired; other outcomes pass.
func expireRetry(t *Task, now time.Time, o Outcome) Outcome {
	if t.ExpiresAt.IsZero() || (o.Status != StatusScheduled && o.Status != StatusReady) {
		return o
	}
	at := o.RunAt
	if at.IsZero() || o.Status == StatusReady {
		at = now
	}
	if at.Before(t.ExpiresAt) {
		return o
	}
	e := ExpiredError(t.ExpiresAt)
	e.Description = fmt.Sprintf("the retry at %s would start at or past the task's expires_at %s; last error: %s%s",
		at.UTC().Format(time.RFC3339Nano), t.ExpiresAt.UTC().Format(time.RFC3339Nano), o.Error.Code, describe(o.Error.Description))
	return Outcome{Status: StatusAborted, History: TaskAbort, Error: e}
}
