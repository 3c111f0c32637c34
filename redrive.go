package norn

import (
	"slices"
	"time"
)

// RetryOptions tune Retry (a redrive: a client runs again a task that
// ended without success).
type RetryOptions struct {
	// RunAt makes the task wait until then (scheduled); zero or a past
	// time makes it ready at once.
	RunAt time.Time `json:"run_at,omitzero"`
	// WithDependents also brings back, transitively, every task that was
	// aborted with dependency_failed because of this one: they wait for
	// their dependencies again (blocked).
	WithDependents bool `json:"with_dependents,omitempty"`
}

// Retryable reports whether a task in status s can be retried: it ended
// without success (aborted or cancelled).
func Retryable(s Status) bool { return s == StatusAborted || s == StatusCancelled }

// CheckRetry refuses, with ErrConflict naming the status, the retry of a
// task that is not aborted or cancelled: a completed task succeeded, and a
// pending one is still under way.
func CheckRetry(id string, s Status) error {
	if Retryable(s) {
		return nil
	}
	return Errorf(CodeConflict, "task %q is %s; only aborted or cancelled tasks can be retried", id, s)
}

// Redrive is the decided state of a retried task. Whoever persists it also
// resets Attempts to 0, clears the terminal time (the task is no longer
// subject to retention), the deadline and the progress, keeps the errors,
// the history, the owner and the lease number (the next claim increments
// it, so fencing stays monotonic), and records a TaskRedrive entry.
type Redrive struct {
	// Status is ready, scheduled (RunAt ahead) or blocked (PendingDeps > 0).
	Status Status
	RunAt  time.Time
	// PendingDeps counts the dependencies not completed yet (blocked tasks).
	PendingDeps int
}

// DecideRetry decides what Retry makes of t at now. depStatus returns the
// current status of one of t's dependencies ("" when it no longer exists).
// A task whose dependencies are not all completed waits for them again
// (blocked); one whose dependency failed cannot run and is refused with
// ErrConflict naming that dependency (retry that one, with dependents).
func DecideRetry(t *Task, now time.Time, o RetryOptions, depStatus func(id string) Status) (Redrive, error) {
	if err := o.Validate(); err != nil {
		return Redrive{}, err
	}
	if err := CheckRetry(t.ID, t.Status); err != nil {
		return Redrive{}, err
	}
	runAt := o.RunAt
	if runAt.IsZero() || !runAt.After(now) {
		runAt = now
	}
	if Expired(t.ExpiresAt, runAt) {
		return Redrive{}, Errorf(CodeConflict, "task %q expires at %s: retried, it would expire again at once; resubmit it instead",
			t.ID, t.ExpiresAt.UTC().Format(time.RFC3339Nano))
	}
	r, failed, fate := redrive(t, runAt, now, depStatus)
	if failed != "" {
		return Redrive{}, Errorf(CodeConflict, "task %q depends on %q, which is %s; retry that task with with_dependents instead",
			t.ID, failed, fate)
	}
	return r, nil
}

// DecideDependentRetry decides whether t, a dependent found by
// AbortedBecauseOf while its dependency is being retried, comes back too:
// it then waits for its dependencies again (blocked, its own run_at kept).
// It stays aborted (false) when another of its dependencies failed too, as
// it would abort again at once.
func DecideDependentRetry(t *Task, now time.Time, depStatus func(id string) Status) (Redrive, bool) {
	if !Retryable(t.Status) {
		return Redrive{}, false
	}
	r, failed, _ := redrive(t, t.RunAt, now, depStatus)
	return r, failed == ""
}

// redrive counts t's dependencies still pending. One recorded with t
// (DependencyResults) ended once and is not counted again: it was retried
// since, and its next ending replaces the record.
func redrive(t *Task, runAt, now time.Time, depStatus func(id string) Status) (r Redrive, failed string, fate Status) {
	r.RunAt = runAt
	run := t.OnDependencyFailure == DependencyRun
	recorded := make(map[string]bool, len(t.DependencyResults))
	for _, dr := range t.DependencyResults {
		recorded[dr.ID] = true
	}
	for _, d := range t.DependsOn {
		st := depStatus(d)
		switch met, fails := dependencyEnded(st, run); {
		case fails:
			if st == "" {
				st = DependencyDeletedStatus
			}
			return Redrive{}, d, st
		case met, recorded[d]:
		default:
			r.PendingDeps++
		}
	}
	r.Status = InitialStatus(runAt, now, r.PendingDeps > 0)
	return r, "", ""
}

// AbortedBecauseOf reports whether a task in status s whose latest error
// is last was aborted because its dependency id failed (the error
// DependencyFailed recorded, not a deletion of the dependency): the tasks
// a retry with dependents brings back.
func AbortedBecauseOf(s Status, last *ErrorInfo, id string) bool {
	if s != StatusAborted || last == nil || last.Code != CodeDependencyFailed {
		return false
	}
	return last.Description == DependencyFailed(id, StatusAborted).Description ||
		last.Description == DependencyFailed(id, StatusCancelled).Description
}

// LastError returns t's latest error, nil when it has none.
func LastError(t *Task) *ErrorInfo {
	if len(t.Errors) == 0 {
		return nil
	}
	return &t.Errors[len(t.Errors)-1]
}

// RetryFilter narrows f to what RetryMatching retries: its matches that
// are aborted or cancelled (other matches are skipped, not errors). ok is
// false when f asks only for statuses that cannot be retried, so nothing
// is. The caller refuses an empty f before narrowing it.
func RetryFilter(f Filter) (g Filter, ok bool) {
	g = f
	g.Statuses = nil
	for _, s := range []Status{StatusAborted, StatusCancelled} {
		if len(f.Statuses) == 0 || slices.Contains(f.Statuses, s) {
			g.Statuses = append(g.Statuses, s)
		}
	}
	return g, len(g.Statuses) > 0
}

// CheckRetryFilter validates the filter of RetryMatching: valid, and not
// empty (as DeleteMatching, so nobody retries a whole store by accident).
func CheckRetryFilter(f *Filter) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if f.Empty() {
		return Invalid("filter", "an empty filter would retry every failed task; give at least one condition")
	}
	return nil
}

// CancelFilter narrows f to what CancelMatching cancels: its pending
// matches. ok is false when f asks only for ended statuses, so nothing is.
func CancelFilter(f Filter) (g Filter, ok bool) {
	g = f
	g.Statuses = nil
	for _, s := range AllStatuses {
		if s.Pending() && (len(f.Statuses) == 0 || slices.Contains(f.Statuses, s)) {
			g.Statuses = append(g.Statuses, s)
		}
	}
	return g, len(g.Statuses) > 0
}

// CheckCancelFilter validates the filter of CancelMatching: valid, and not
// empty, so nobody cancels a whole store by accident.
func CheckCancelFilter(f *Filter) error {
	if err := f.Validate(); err != nil {
		return err
	}
	if f.Empty() {
		return Invalid("filter", "an empty filter would cancel every pending task; give at least one condition")
	}
	return nil
}

// RetryBatch is how many tasks RetryMatching retries per write, so memory
// stays constant whatever the number of matches.
const RetryBatch = 500

// PlanDependentRetries decides which tasks of found come back with a
// retried task, and how: found is what a store collected by following
// AbortedBecauseOf from the retried task, level by level (dependents of
// dependents included). Tasks of found count as pending for each other, so
// siblings that wait for one another come back together; one whose other
// dependency failed stays aborted, and so do the tasks that would wait for
// it. depStatus gives the status of every other task, the retried one
// included as it is after its own retry ("" when it does not exist).
func PlanDependentRetries(found []*Task, now time.Time, depStatus func(id string) Status) map[string]Redrive {
	in := make(map[string]bool, len(found))
	for _, t := range found {
		in[t.ID] = true
	}
	status := func(id string) Status {
		if in[id] {
			return StatusBlocked
		}
		return depStatus(id)
	}
	for {
		out := make(map[string]Redrive, len(in))
		dropped := false
		for _, t := range found {
			if !in[t.ID] {
				continue
			}
			r, ok := DecideDependentRetry(t, now, status)
			if !ok {
				delete(in, t.ID)
				dropped = true
				continue
			}
			out[t.ID] = r
		}
		if !dropped {
			return out
		}
	}
}

// CheckRetryUnique refuses to bring t back while another task of its queue
// holds its unique key and has not ended: a retry must never make a second
// live holder of a key (a submit would have been a duplicate of that
// holder). holders are the stored tasks holding t's key, t among them or
// not. The conflict names the holder so the caller can decide.
func CheckRetryUnique(t *Task, holders []UniqueHolder) error {
	if t.UniqueKey == "" {
		return nil
	}
	for _, h := range holders {
		if h.ID != t.ID && !h.Status.Terminal() {
			return Errorf(CodeConflict, "task %q cannot be retried: its unique key %q is held by task %q of queue %q, which has not ended",
				t.ID, t.UniqueKey, h.ID, t.Queue)
		}
	}
	return nil
}
