package wire

import "github.com/nornq/norn"

// The bodies of PATCH /v1/queues/{queue} and PATCH /v1/schedules/{name}.
// A PATCH changes only what it names, nested settings included: a member
// of retry, retention, rate_limit or a key's settings that the body leaves
// out keeps its current value ({"retention":{"completed":"1h"}} leaves
// aborted and cancelled as they were). The domain updates
// (norn.QueueUpdate, norn.ScheduleUpdate) replace a nested setting whole,
// so the server reads the current settings and completes the patch with
// them (QueuePatch.Update, SchedulePatch.Update). JSON null means "not
// named", as does leaving a member out, except for a key's settings, where
// null removes them.

// RetryPatch is a retry policy of which only the named members change.
type RetryPatch struct {
	MaxRetries *int           `json:"max_retries,omitempty"`
	Base       *norn.Duration `json:"base,omitempty"`
	Max        *norn.Duration `json:"max,omitempty"`
	Jitter     *string        `json:"jitter,omitempty"`
}

// RetentionPatch is a retention of which only the named members change.
type RetentionPatch struct {
	Completed *norn.Duration `json:"completed,omitempty"`
	Aborted   *norn.Duration `json:"aborted,omitempty"`
	Cancelled *norn.Duration `json:"cancelled,omitempty"`
}

// RateLimitPatch is a rate limit of which only the named members change;
// per_second 0 removes the limit.
type RateLimitPatch struct {
	PerSecond *float64 `json:"per_second,omitempty"`
	Burst     *int     `json:"burst,omitempty"`
}

// KeyPatch is one concurrency key's settings of which only the named
// members change.
type KeyPatch struct {
	Limit     *int            `json:"limit,omitempty"`
	Weight    *int            `json:"weight,omitempty"`
	RateLimit *RateLimitPatch `json:"rate_limit,omitempty"`
}

// QueuePatch is the body of PATCH /v1/queues/{queue}.
type QueuePatch struct {
	Paused      *bool           `json:"paused,omitempty"`
	Timeout     *norn.Duration  `json:"timeout,omitempty"`
	Retry       *RetryPatch     `json:"retry,omitempty"`
	MaxAttempts *int            `json:"max_attempts,omitempty"`
	Retention   *RetentionPatch `json:"retention,omitempty"`
	MaxRuntime  *norn.Duration  `json:"max_runtime,omitempty"`
	ExpireIn    *norn.Duration  `json:"expire_in,omitempty"`
	// SequenceOnFailure: "halt" (the default) or "continue".
	SequenceOnFailure *string         `json:"sequence_on_failure,omitempty"`
	MaxRunning        *int            `json:"max_running,omitempty"`
	KeyLimit          *int            `json:"key_limit,omitempty"`
	FairBy            *string         `json:"fair_by,omitempty"`
	RateLimit         *RateLimitPatch `json:"rate_limit,omitempty"`
	KeyRateLimit      *RateLimitPatch `json:"key_rate_limit,omitempty"`
	// Keys: a null value removes the key's own settings.
	Keys map[string]*KeyPatch `json:"keys,omitempty"`
}

// Nested reports whether the patch names a nested setting, whose unnamed
// members must be read from the queue's current settings.
func (p *QueuePatch) Nested() bool {
	return p.Retry != nil || p.Retention != nil || p.RateLimit != nil || p.KeyRateLimit != nil || len(p.Keys) > 0
}

// Update completes the patch with cur, the queue's settings now, into the
// update to apply.
func (p *QueuePatch) Update(cur norn.QueueInfo) norn.QueueUpdate {
	u := norn.QueueUpdate{Paused: p.Paused, Timeout: p.Timeout, MaxAttempts: p.MaxAttempts, MaxRuntime: p.MaxRuntime, ExpireIn: p.ExpireIn,
		SequenceOnFailure: p.SequenceOnFailure, MaxRunning: p.MaxRunning, KeyLimit: p.KeyLimit, FairBy: p.FairBy}
	if p.Retry != nil {
		r := p.Retry.merge(cur.Defaults.Retry)
		if rp := p.Retry; rp.MaxRetries != nil && *rp.MaxRetries == 0 && rp.Base == nil && rp.Max == nil && rp.Jitter == nil {
			// {"max_retries":0} alone removes the policy, backoffs and all.
			r = norn.RetryPolicy{}
		}
		u.Retry = &r
	}
	if p.Retention != nil {
		r := cur.Defaults.Retention
		set(&r.Completed, p.Retention.Completed)
		set(&r.Aborted, p.Retention.Aborted)
		set(&r.Cancelled, p.Retention.Cancelled)
		u.Retention = &r
	}
	if p.RateLimit != nil {
		r := p.RateLimit.merge(cur.RateLimit)
		u.RateLimit = &r
	}
	if p.KeyRateLimit != nil {
		r := p.KeyRateLimit.merge(cur.KeyRateLimit)
		u.KeyRateLimit = &r
	}
	if p.Keys != nil {
		u.Keys = make(map[string]*norn.KeySettings, len(p.Keys))
		for k, kp := range p.Keys {
			if kp == nil {
				u.Keys[k] = nil
				continue
			}
			var ks norn.KeySettings
			for _, ki := range cur.Keys {
				if ki.Key == k {
					ks = ki.KeySettings
				}
			}
			set(&ks.Limit, kp.Limit)
			set(&ks.Weight, kp.Weight)
			if kp.RateLimit != nil {
				ks.RateLimit = kp.RateLimit.merge(ks.RateLimit)
			}
			u.Keys[k] = &ks
		}
	}
	return u
}

// merge completes the patch with cur: {"per_second":0} alone removes the
// limit, burst and all.
func (p *RateLimitPatch) merge(cur norn.RateLimit) norn.RateLimit {
	r := cur
	set(&r.PerSecond, p.PerSecond)
	set(&r.Burst, p.Burst)
	if p.PerSecond != nil && *p.PerSecond == 0 && p.Burst == nil {
		r = norn.RateLimit{}
	}
	return r
}

func (p *RetryPatch) merge(cur *norn.RetryPolicy) norn.RetryPolicy {
	var r norn.RetryPolicy
	if cur != nil {
		r = *cur
	}
	set(&r.MaxRetries, p.MaxRetries)
	set(&r.Base, p.Base)
	set(&r.Max, p.Max)
	set(&r.Jitter, p.Jitter)
	return r
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// FromQueueUpdate converts a domain update for the wire: every nested
// setting it carries is named whole.
func FromQueueUpdate(u norn.QueueUpdate) QueuePatch {
	p := QueuePatch{Paused: u.Paused, Timeout: u.Timeout, MaxAttempts: u.MaxAttempts, MaxRuntime: u.MaxRuntime, ExpireIn: u.ExpireIn,
		SequenceOnFailure: u.SequenceOnFailure, MaxRunning: u.MaxRunning, KeyLimit: u.KeyLimit, FairBy: u.FairBy}
	if r := u.Retry; r != nil {
		p.Retry = &RetryPatch{MaxRetries: &r.MaxRetries, Base: &r.Base, Max: &r.Max, Jitter: &r.Jitter}
	}
	if r := u.Retention; r != nil {
		p.Retention = &RetentionPatch{Completed: &r.Completed, Aborted: &r.Aborted, Cancelled: &r.Cancelled}
	}
	if r := u.RateLimit; r != nil {
		p.RateLimit = &RateLimitPatch{PerSecond: &r.PerSecond, Burst: &r.Burst}
	}
	if r := u.KeyRateLimit; r != nil {
		p.KeyRateLimit = &RateLimitPatch{PerSecond: &r.PerSecond, Burst: &r.Burst}
	}
	if u.Keys != nil {
		p.Keys = make(map[string]*KeyPatch, len(u.Keys))
		for k, ks := range u.Keys {
			if ks != nil {
				p.Keys[k] = &KeyPatch{Limit: &ks.Limit, Weight: &ks.Weight,
					RateLimit: &RateLimitPatch{PerSecond: &ks.RateLimit.PerSecond, Burst: &ks.RateLimit.Burst}}
			} else {
				p.Keys[k] = nil
			}
		}
	}
	return p
}

// SchedulePatch is the body of PATCH /v1/schedules/{name}: a
// norn.ScheduleUpdate whose retry policy may name only some members.
type SchedulePatch struct {
	// Retry comes first so that it, not the embedded update's, names
	// the member in decoding errors.
	Retry *RetryPatch `json:"retry,omitempty"`
	norn.ScheduleUpdate
}

// Update completes the patch with cur, the schedule now.
func (p *SchedulePatch) Update(cur *norn.Schedule) norn.ScheduleUpdate {
	u := p.ScheduleUpdate
	if p.Retry != nil {
		r := p.Retry.merge(cur.Retry)
		u.Retry = &r
	}
	return u
}

// FromScheduleUpdate converts a domain update for the wire: a retry
// policy it carries is named whole.
func FromScheduleUpdate(u norn.ScheduleUpdate) SchedulePatch {
	p := SchedulePatch{ScheduleUpdate: u}
	if r := u.Retry; r != nil {
		p.Retry = &RetryPatch{MaxRetries: &r.MaxRetries, Base: &r.Base, Max: &r.Max, Jitter: &r.Jitter}
		p.ScheduleUpdate.Retry = nil
	}
	return p
}
