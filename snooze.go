package norn

import "time"

// Snooze says until when a snoozed task waits: exactly one of Delay (> 0,
// from now) or RunAt (a past time makes the task ready at once).
type Snooze struct {
	Delay Duration  `json:"delay,omitzero"`
	RunAt time.Time `json:"run_at,omitzero"`
	// UntilSignal, instead of Delay or RunAt, waits for a signal of that
	// name (see Signal), at most Timeout (default DefaultSignalTimeout).
	UntilSignal string   `json:"until_signal,omitempty"`
	Timeout     Duration `json:"timeout,omitzero"`
	// Scope "key" (SnoozeScopeKey) also holds back the task's concurrency
	// key: its rate-limit bucket is emptied until the snooze ends, so no
	// task of the key is claimed before then (back-pressure from a
	// worker, a 429 from the key's API). The key needs a rate limit (the
	// queue's key_rate_limit or its own). Empty: the task alone.
	Scope string `json:"scope,omitempty"`
}

// Validate checks that exactly one of Delay, RunAt and UntilSignal is set
// and that Delay is positive; errors name "delay", "run_at",
// "until_signal", "timeout" or "scope".
func (s Snooze) Validate() error {
	switch s.Scope {
	case "", SnoozeScopeKey:
	default:
		return Invalid("scope", "must be %q or empty, not %q", SnoozeScopeKey, truncate(s.Scope, 40))
	}
	if s.UntilSignal != "" {
		if s.Scope != "" {
			return Invalid("scope", "holds a key back until a time: give delay or run_at, not until_signal")
		}
		switch {
		case s.Delay != 0 || !s.RunAt.IsZero():
			return Invalid("until_signal", "give until_signal, or delay or run_at, not both")
		case s.Timeout < 0:
			return Invalid("timeout", "must be positive, got %s", s.Timeout.D())
		}
		return validateKey("until_signal", s.UntilSignal, MaxSignalNameLength)
	}
	if s.Timeout != 0 {
		return Invalid("timeout", "is the longest wait for until_signal; it needs one")
	}
	switch {
	case s.Delay != 0 && !s.RunAt.IsZero():
		return Invalid("run_at", "give either delay or run_at, not both")
	case s.Delay < 0:
		return Invalid("delay", "must be positive, got %s", s.Delay.D())
	case s.Delay == 0 && s.RunAt.IsZero():
		return Invalid("delay", "a snooze needs a positive delay or a run_at")
	}
	return nil
}

// AfterSnooze decides what Snooze does to a running task at now: scheduled
// until the snooze's time, or ready at once when that time is not in the
// future. The caller gives the attempt back (Attempts - 1) and keeps the
// lease number, so the next claim still fences out the snoozing worker.
func AfterSnooze(now time.Time, s Snooze) Outcome {
	at := s.RunAt
	if s.Delay > 0 {
		at = now.Add(s.Delay.D())
	}
	if at.After(now) {
		return Outcome{Status: StatusScheduled, RunAt: at, History: TaskSnooze}
	}
	return Outcome{Status: StatusReady, RunAt: now, History: TaskSnooze}
}
