package norn

import (
	"math"
	"time"
)

// The ranges of values every store can hold. The embedded store keeps
// times as int64 nanoseconds since 1970, which wrap outside about
// 1677–2262, so a time or a duration added to now past that range would
// come back centuries off (a run_at of 2300 read back as 1715, a lease
// extended by 292 years expiring in 1734). The Postgres store keeps
// attempt counts and limits in 32-bit columns, and versions, lease numbers
// and log sequence numbers in signed 64-bit ones. Every value a caller
// gives is checked against these ranges before it reaches a store, and
// out of range is invalid_argument naming the field, never a value stored
// wrapped.
var (
	// MinTime and MaxTime bound every time a caller gives (run_at, the
	// created_/updated_ filters, a snooze's or a retry's run_at): it must
	// be after MinTime (the Unix epoch, which the embedded store reads as
	// "no time") and before MaxTime. The zero time.Time means "not set"
	// and is not checked.
	MinTime = time.Unix(0, 0).UTC()
	MaxTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

const (
	// MaxDuration bounds every duration a caller gives (delay, timeout,
	// max_runtime, unique_for, retention, retry backoffs, a claim's
	// timeout, a heartbeat's extend, a snooze's delay): 100 years of 365
	// days. Added to any time before MaxTime it stays within what the
	// stores hold.
	MaxDuration = 100 * 365 * 24 * time.Hour
	// MaxCount bounds the integer settings stores keep in 32 bits:
	// max_attempts, a retry policy's max_retries, max_running, key_limit
	// and a key's own limit.
	MaxCount = math.MaxInt32
	// MaxSeq bounds the versions, lease numbers and log sequence numbers
	// a caller gives (if_version, require's version, lease, seq): no
	// store hands out a larger one.
	MaxSeq = math.MaxInt64
)

// ValidateTime refuses a time outside (MinTime, MaxTime), naming field.
// The zero time (not set) passes.
func ValidateTime(field string, t time.Time) error {
	if t.IsZero() {
		return nil
	}
	if !t.After(MinTime) || !t.Before(MaxTime) {
		return Invalid(field, "must be after %s and before %s, got %s",
			MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339), t.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// ValidateDuration refuses a negative duration or one over MaxDuration,
// naming field.
func ValidateDuration(field string, d Duration) error {
	if d < 0 {
		return Invalid(field, "must not be negative")
	}
	if d.D() > MaxDuration {
		return Invalid(field, "must be at most %s (100 years), got %s", MaxDuration, d.D())
	}
	return nil
}

// ValidateCount refuses a negative integer setting or one over MaxCount,
// naming field.
func ValidateCount(field string, n int) error {
	if n < 0 {
		return Invalid(field, "must not be negative")
	}
	if n > MaxCount {
		return Invalid(field, "must be at most %d, got %d", MaxCount, n)
	}
	return nil
}

// ValidateSeq refuses a version, lease or sequence number over MaxSeq,
// naming field.
func ValidateSeq(field string, n uint64) error {
	if n > MaxSeq {
		return Invalid(field, "must be at most %d, got %d", uint64(MaxSeq), n)
	}
	return nil
}

// Validate checks a heartbeat's progress and extend: what every
// heartbeat, alone or in a lease batch, must pass before its lease is
// touched.
func (h Heartbeat) Validate() error {
	if h.Progress != nil {
		if err := ValidateProgress("progress", *h.Progress); err != nil {
			return err
		}
	}
	return ValidateDuration("extend", h.Extend)
}

// ValidateRange checks that a snooze's delay and run_at are within what
// the stores hold (Snooze.Validate checks its shape).
func (s Snooze) ValidateRange() error {
	if err := ValidateDuration("delay", s.Delay); err != nil {
		return err
	}
	if err := ValidateDuration("timeout", s.Timeout); err != nil {
		return err
	}
	return ValidateTime("run_at", s.RunAt)
}

// ValidateRange checks the numbers and times of a lease operation against
// the ranges the stores hold: its lease number, a heartbeat's extend and
// a snooze's delay or run_at. LeaseOp.Validate checks its shape.
func (op *LeaseOp) ValidateRange() error {
	if err := ValidateSeq("lease", op.Lease); err != nil {
		return err
	}
	if err := ValidateDuration("extend", op.Extend); err != nil {
		return err
	}
	if op.Op == OpSnooze {
		return op.Snooze.ValidateRange()
	}
	return nil
}

// Validate checks a retry's options: a run_at the stores can hold.
func (o RetryOptions) Validate() error {
	return ValidateTime("run_at", o.RunAt)
}

// ValidateRange checks a log append's sequence number against what the
// stores hold.
func (l LogAppend) ValidateRange() error {
	return ValidateSeq("seq", l.Seq)
}

// ValidateRange checks a requirement's version against what the stores
// hold; field names the requirement ("require[2]").
func (r Requirement) ValidateRange(field string) error {
	return ValidateSeq(field+".version", r.Version)
}
