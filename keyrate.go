package norn

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Per-key rate limits: every concurrency key of a queue has its own token
// bucket when the queue sets KeyRateLimit or the key its own
// KeySettings.RateLimit. A claim skips the keys whose bucket holds no
// whole token and takes other keys' tasks; tasks without a key are not
// key rate limited (the queue's RateLimit still applies to every task).
// The buckets use the queue bucket's arithmetic (ratelimit.go); a stored
// bucket that has refilled to its burst is the same as none, so stores
// may forget it.

// KeyRateFor returns the rate limit of a key given its settings (nil:
// none): its own, else the queue's KeyRateLimit. Tasks without a key have
// none.
func (f QueueFlow) KeyRateFor(key string, ks *KeySettings) RateLimit {
	if key == "" {
		return RateLimit{}
	}
	if ks != nil && ks.RateLimit.PerSecond > 0 {
		return ks.RateLimit.Normalized()
	}
	return f.KeyRateLimit.Normalized()
}

// KeyRated reports whether claims of the queue take per-key tokens, given
// whether any key has a rate limit of its own.
func (f QueueFlow) KeyRated(ownRates bool) bool {
	return f.KeyRateLimit.PerSecond > 0 || ownRates
}

// SnoozeScopeKey is the Snooze.Scope that also holds back the task's
// concurrency key: the key's bucket is emptied until the snooze ends.
const SnoozeScopeKey = "key"

// KeyBackoff is the bucket of a key under rl snoozed with scope "key"
// until at: empty, and refilling so that its first whole token comes at
// at (or one token period from now, if at is nearer).
func KeyBackoff(rl RateLimit, at, now time.Time) Bucket {
	rl = rl.Normalized()
	from := at.Add(-time.Duration(float64(time.Second) / rl.PerSecond))
	if from.Before(now) {
		from = now
	}
	return Bucket{At: from}
}

// NoKeyRate is the error of a snooze with scope "key" whose task's key has
// no rate limit (or whose task has no key): there is no bucket to empty.
func NoKeyRate(queue, key string) error {
	if key == "" {
		return Invalid("scope", "the task has no concurrency key to hold back")
	}
	return Invalid("scope", "key %q of queue %q has no rate limit to hold back (set the queue's key_rate_limit or the key's rate_limit)",
		truncate(key, 40), queue)
}

// SnoozeEnd is when a snooze with Delay or RunAt ends, at now.
func (s Snooze) SnoozeEnd(now time.Time) time.Time {
	if s.Delay > 0 {
		return now.Add(s.Delay.D())
	}
	return s.RunAt
}

// checkKeyRates is the key-rate part of CheckFlow: a queue fair by a label
// groups by the label's values, not by concurrency keys.
func (u *QueueUpdate) checkKeyRates(after QueueFlow, ownRates bool) error {
	if !after.GroupsByLabel() || !after.KeyRated(ownRates) {
		return nil
	}
	const why = "a queue fair by a label cannot have key rate limits (its groups are the label's values): " +
		"fair by concurrency_key, or remove the key rate limits first"
	switch {
	case u.FairBy != nil:
		return Invalid("fair_by", why)
	case u.KeyRateLimit != nil:
		return Invalid("key_rate_limit", why)
	}
	for _, k := range slices.Sorted(maps.Keys(u.Keys)) {
		if ks := u.Keys[k]; ks != nil && ks.RateLimit.PerSecond > 0 {
			return Invalid(fmt.Sprintf("keys[%q].rate_limit", k), why)
		}
	}
	return Invalid("fair_by", why)
}
