package norn

import (
	"fmt"
	"time"
)

// The runtime limit (max_runtime) of a task bounds each attempt: the lease
// an attempt holds never reaches past the instant RuntimeLimit returns,
// whatever the claim's timeout or a heartbeat's extend ask for, so a hung
// handler that keeps heartbeating is stopped there by the monitor like an
// expired lease, with the error code max_runtime.

// RuntimeLimit is when an attempt claimed at started must end under
// maxRuntime: started + maxRuntime, the duration rounded up to a whole
// microsecond (the resolution of the Postgres store's timestamps, so both
// stores compute the same instant). Zero when there is no limit
// (maxRuntime 0, or no claim recorded).
func RuntimeLimit(started time.Time, maxRuntime Duration) time.Time {
	if maxRuntime <= 0 || started.IsZero() {
		return time.Time{}
	}
	return started.Add(roundUpMicro(maxRuntime.D()))
}

func roundUpMicro(d time.Duration) time.Duration {
	if r := d % time.Microsecond; r != 0 {
		d += time.Microsecond - r
	}
	return d
}

// CapLease returns deadline, or limit when limit is set and earlier.
func CapLease(deadline, limit time.Time) time.Time {
	if !limit.IsZero() && limit.Before(deadline) {
		return limit
	}
	return deadline
}

// ClaimDeadline decides the deadline of a claim at now: now + lease (the
// claim's timeout, else the task's), capped at the runtime limit of an
// attempt starting now.
func ClaimDeadline(now time.Time, lease time.Duration, maxRuntime Duration) time.Time {
	return CapLease(now.Add(lease), RuntimeLimit(now, maxRuntime))
}

// RuntimeExceeded reports whether an attempt whose runtime limit is limit
// (zero: none) has run out at now. A heartbeat then is lease_lost: the
// attempt is over even if the monitor has not stopped it yet.
func RuntimeExceeded(now, limit time.Time) bool {
	return !limit.IsZero() && !now.Before(limit)
}

// StoppedByMaxRuntime reports whether a running task whose deadline passed
// was stopped by its runtime limit rather than by a missed heartbeat: its
// lease had been capped at the limit.
func StoppedByMaxRuntime(t *Task) bool {
	limit := RuntimeLimit(t.Started, t.MaxRuntime)
	return !limit.IsZero() && !t.Deadline.Before(limit)
}

// RuntimeLeaseLost is the lease_lost error of a worker call on an attempt
// that reached its runtime limit.
func RuntimeLeaseLost(id string, lease uint64) *Error {
	return &Error{Code: CodeLeaseLost, Message: fmt.Sprintf("task %q: lease %d reached the task's max_runtime", id, lease)}
}
