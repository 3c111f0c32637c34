package norn

import (
	"fmt"
	"maps"
	"slices"
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
}

// Limited reports whether any limit applies to claims.
func (f QueueFlow) Limited() bool { return f.MaxRunning > 0 || f.KeyLimit > 0 }

// KeySettings are one concurrency key's own settings in a queue.
type KeySettings struct {
	// Limit caps the key's running tasks, overriding the queue's KeyLimit
	// (0 = the queue's KeyLimit applies).
	Limit int `json:"limit,omitempty"`
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
	if len(u.Keys) > MaxKeySettings {
		return Invalid("keys", "sets %d keys, more than the limit of %d", len(u.Keys), MaxKeySettings)
	}
	for _, k := range slices.Sorted(maps.Keys(u.Keys)) {
		f := fmt.Sprintf("keys[%q]", k)
		if err := ValidateConcurrencyKey(f, k); err != nil {
			return err
		}
		if ks := u.Keys[k]; ks != nil && ks.Limit < 0 {
			return Invalid(f+".limit", "must not be negative (0 means the queue's key_limit)")
		}
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
}
