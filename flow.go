package norn

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Flow control: limits a queue puts on claims, enforced by the store inside
// the claim (never by trusting workers), so they hold across any number of
// workers and server nodes. docs/api.md explains each setting with an
// example.

// QueueFlow is a queue's flow-control settings. Zero values mean "no limit".
type QueueFlow struct {
	// MaxRunning caps the queue's running tasks, across the whole cluster
	// (0 = unlimited).
	MaxRunning int `json:"max_running,omitempty"`
	// KeyLimit caps the running tasks of each concurrency key (0 =
	// unlimited); a key's own limit (KeySettings.Limit) overrides it.
	// Tasks without a concurrency key are limited only by MaxRunning.
	KeyLimit int `json:"key_limit,omitempty"`
	// FairBy makes claims rotate across the values of a key among ready
	// tasks of equal priority, weighted by each value's KeySettings.Weight:
	// "concurrency_key", or "label:NAME" for the value of the task's label
	// NAME (as submitted; a later label change does not move a task).
	// Tasks without the key form one group of their own. Empty (the
	// default): claim order only (priority, ready time, id). A queue fair
	// by a label cannot also have key limits: its keys are the label's
	// values.
	FairBy string `json:"fair_by,omitempty"`
	// RateLimit caps how fast claims hand out the queue's tasks (zero:
	// none); see ratelimit.go.
	RateLimit RateLimit `json:"rate_limit,omitzero"`
	// KeyRateLimit gives every concurrency key its own token bucket of
	// this rate (zero: none); a key's own KeySettings.RateLimit overrides
	// it. See keyrate.go.
	KeyRateLimit RateLimit `json:"key_rate_limit,omitzero"`
}

// Limited reports whether a running limit applies to claims (a task that
// stops running may let a waiting claimer in).
func (f QueueFlow) Limited() bool { return f.MaxRunning > 0 || f.KeyLimit > 0 }

// FairByConcurrencyKey is the FairBy value that rotates across concurrency
// keys; FairByLabelPrefix starts the value that rotates across a label's.
const (
	FairByConcurrencyKey = "concurrency_key"
	FairByLabelPrefix    = "label:"
)

// FairLabel returns the label a queue is fair by, if it is fair by one.
func (f QueueFlow) FairLabel() (string, bool) {
	if len(f.FairBy) > len(FairByLabelPrefix) && f.FairBy[:len(FairByLabelPrefix)] == FairByLabelPrefix {
		return f.FairBy[len(FairByLabelPrefix):], true
	}
	return "", false
}

// FairKey returns the key a task is rotated by under the queue's FairBy
// ("" for tasks without one, and for every task of a queue that is not
// fair).
func (f QueueFlow) FairKey(concurrencyKey string, labels map[string]string) string {
	if f.FairBy == FairByConcurrencyKey {
		return concurrencyKey
	}
	if l, ok := f.FairLabel(); ok {
		return labels[l]
	}
	return ""
}

// GroupsByLabel reports whether the queue's keys are a label's values
// rather than concurrency keys.
func (f QueueFlow) GroupsByLabel() bool {
	_, ok := f.FairLabel()
	return ok
}

// FairUnit is the virtual time a key of weight 1 spends per claimed task.
// Fair claiming takes, among the keys whose first ready task has the best
// priority, the one with the least virtual time, and advances that key by
// FairStride of its weight: over time each key gets claims in proportion
// to its weight. A key that comes back after having no ready tasks starts
// at the virtual time of the key claimed last, so it is next but has no
// credit saved up. 720720 is divisible by every weight up to 16, so small
// weights give exact shares.
const FairUnit = 720720

// FairStride is how far one claim advances a key of weight w (0 = 1).
func FairStride(w int) int64 {
	if w <= 0 {
		w = 1
	}
	return max(FairUnit/int64(w), 1)
}

// MaxKeyWeight bounds KeySettings.Weight.
const MaxKeyWeight = 1000

// ValidateFairBy checks a FairBy value.
func ValidateFairBy(field, v string) error {
	return validateKeyChoice(field, v, "fair claiming off")
}

// validateKeyChoice checks a value naming what tasks are grouped by
// (fair_by, a claim's group_by): "", "concurrency_key" or "label:NAME";
// empty says what "" turns off.
func validateKeyChoice(field, v, empty string) error {
	if v == "" || v == FairByConcurrencyKey {
		return nil
	}
	l, ok := QueueFlow{FairBy: v}.FairLabel()
	if !ok {
		return Invalid(field, "must be %q or %q followed by a label name (\"\" turns %s), not %q",
			FairByConcurrencyKey, FairByLabelPrefix, empty, truncate(v, 40))
	}
	if len(l) > MaxLabelKeyLength || strings.ContainsAny(l, ":,") {
		return Invalid(field, "label name %q must be 1..%d bytes without ':' or ','", truncate(l, 40), MaxLabelKeyLength)
	}
	return nil
}

// ValidateKeySettings checks one key's settings; field names the key
// ("" when the settings are the whole body).
func ValidateKeySettings(field string, ks KeySettings) error {
	if field != "" {
		field += "."
	}
	if ks.Limit < 0 {
		return Invalid(field+"limit", "must not be negative (0 means the queue's key_limit)")
	}
	if err := ValidateCount(field+"limit", ks.Limit); err != nil {
		return err
	}
	if ks.Weight < 0 || ks.Weight > MaxKeyWeight {
		return Invalid(field+"weight", "must be 0..%d (0 means 1)", MaxKeyWeight)
	}
	return ks.RateLimit.validate(field + "rate_limit")
}

// CheckFlow checks the flow settings a queue would have after u, given
// whether any of its keys would then have its own limit (keyLimits) or
// rate limit (keyRates): a queue fair by a label has the label's values
// as keys, so key limits and key rate limits (which are per concurrency
// key) cannot apply to it. The error names the field u set.
// Stores call it before they commit an update.
func (u *QueueUpdate) CheckFlow(after QueueFlow, keyLimits, keyRates bool) error {
	if err := u.checkKeyRates(after, keyRates); err != nil {
		return err
	}
	if !after.GroupsByLabel() || (after.KeyLimit == 0 && !keyLimits) {
		return nil
	}
	const why = "a queue fair by a label cannot have key limits (its keys are the label's values): " +
		"limit by concurrency_key and set fair_by to concurrency_key, or remove the key limits first"
	switch {
	case u.FairBy != nil:
		return Invalid("fair_by", why)
	case u.KeyLimit != nil:
		return Invalid("key_limit", why)
	}
	for _, k := range slices.Sorted(maps.Keys(u.Keys)) {
		if ks := u.Keys[k]; ks != nil && ks.Limit > 0 {
			return Invalid(fmt.Sprintf("keys[%q].limit", k), why)
		}
	}
	return Invalid("fair_by", why)
}

// RateLimited reports whether claims take tokens from a bucket.
func (f QueueFlow) RateLimited() bool { return f.RateLimit.PerSecond > 0 }

// KeySettings are one concurrency key's own settings in a queue.
type KeySettings struct {
	// Limit caps the key's running tasks, overriding the queue's KeyLimit
	// (0 = the queue's KeyLimit applies).
	Limit int `json:"limit,omitempty"`
	// Weight is the key's share of claims in a queue with FairBy: a key
	// of weight 3 gets three claims for every one of a key of weight 1
	// while both have ready tasks (0 = 1, at most MaxKeyWeight).
	Weight int `json:"weight,omitempty"`
	// RateLimit is the key's own rate limit, overriding the queue's
	// KeyRateLimit (zero: the queue's applies).
	RateLimit RateLimit `json:"rate_limit,omitzero"`
}

// Normalized returns the settings as stored: the rate limit's default
// burst filled in.
func (ks KeySettings) Normalized() KeySettings {
	ks.RateLimit = ks.RateLimit.Normalized()
	return ks
}

// KeyInfo is one concurrency key of a queue: its settings and how many of
// its tasks run now.
type KeyInfo struct {
	Key string `json:"key"`
	KeySettings
	Running int64 `json:"running"`
}

// MaxKeySettings bounds how many keys one queue update may set.
const MaxKeySettings = 1000

// KeyLimitFor returns the running limit of a key given its settings
// (nil: none) under the queue's flow settings; 0 means unlimited. Tasks
// without a key ("") have no key limit.
func (f QueueFlow) KeyLimitFor(key string, ks *KeySettings) int {
	if key == "" {
		return 0
	}
	if ks != nil && ks.Limit > 0 {
		return ks.Limit
	}
	return f.KeyLimit
}

// Admit decides how many more tasks of a key may start, given how many of
// the queue's and the key's tasks run now; -1 means no limit applies.
func (f QueueFlow) Admit(queueRunning, keyRunning int64, keyLimit int) int64 {
	room := int64(-1)
	if f.MaxRunning > 0 {
		room = max(int64(f.MaxRunning)-queueRunning, 0)
	}
	if keyLimit > 0 {
		k := max(int64(keyLimit)-keyRunning, 0)
		if room < 0 || k < room {
			room = k
		}
	}
	return room
}

// validateFlow checks the flow-control part of a queue update.
func (u *QueueUpdate) validateFlow() error {
	if u.MaxRunning != nil && *u.MaxRunning < 0 {
		return Invalid("max_running", "must not be negative (0 removes the limit)")
	}
	if u.KeyLimit != nil && *u.KeyLimit < 0 {
		return Invalid("key_limit", "must not be negative (0 removes the limit)")
	}
	if u.MaxRunning != nil {
		if err := ValidateCount("max_running", *u.MaxRunning); err != nil {
			return err
		}
	}
	if u.KeyLimit != nil {
		if err := ValidateCount("key_limit", *u.KeyLimit); err != nil {
			return err
		}
	}
	if u.RateLimit != nil {
		if err := u.RateLimit.validate("rate_limit"); err != nil {
			return err
		}
	}
	if u.KeyRateLimit != nil {
		if err := u.KeyRateLimit.validate("key_rate_limit"); err != nil {
			return err
		}
	}
	if len(u.Keys) > MaxKeySettings {
		return Invalid("keys", "sets %d keys, more than the limit of %d", len(u.Keys), MaxKeySettings)
	}
	for _, k := range slices.Sorted(maps.Keys(u.Keys)) {
		f := fmt.Sprintf("keys[%q]", k)
		if err := ValidateConcurrencyKey(f, k); err != nil {
			return err
		}
		if ks := u.Keys[k]; ks != nil {
			if err := ValidateKeySettings(f, *ks); err != nil {
				return err
			}
		}
	}
	if u.FairBy != nil {
		return ValidateFairBy("fair_by", *u.FairBy)
	}
	return nil
}

// ApplyFlow applies the flow-control part of u to f.
func (u *QueueUpdate) ApplyFlow(f *QueueFlow) {
	if u.MaxRunning != nil {
		f.MaxRunning = *u.MaxRunning
	}
	if u.KeyLimit != nil {
		f.KeyLimit = *u.KeyLimit
	}
	if u.FairBy != nil {
		f.FairBy = *u.FairBy
	}
	if u.RateLimit != nil {
		f.RateLimit = u.RateLimit.Normalized()
	}
	if u.KeyRateLimit != nil {
		f.KeyRateLimit = u.KeyRateLimit.Normalized()
	}
}
