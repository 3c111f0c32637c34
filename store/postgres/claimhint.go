package postgres

import (
	"sync"
	"time"
)

// Claim hints: where the ready tasks of a queue start in the claim index.
// Each claimed task leaves a dead entry at the head of tasks_claim until
// VACUUM, and a scan from the head steps over all of them; a hint (the
// claim-order key of the first task the queue's last claim returned) lets
// the next claim start past them. A hint is dropped at every wake-up (a
// task became ready somewhere, possibly ahead of it), while the listener
// is disconnected, and after maxHintAge. Why ahead of a hint nothing is
// ready: docs/internals/postgres-claims.md, "The plain claim".
type claimHints struct {
	mu sync.Mutex
	m  map[string]claimHint
}

// maxHintAge is how long a hint is used before a claim scans from the
// queue's head again.
const maxHintAge = time.Second

type claimHint struct {
	gen      <-chan struct{} // s.wake's channel when the claim that set it started
	at       time.Time
	priority int64
	readyAt  time.Time
	id       string
}

// before reports whether a's claim-order key comes before b's
// (priority descending, then ready time, then id).
func (a claimHint) before(b claimHint) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if !a.readyAt.Equal(b.readyAt) {
		return a.readyAt.Before(b.readyAt)
	}
	return a.id < b.id
}

// get returns queue's hint if it may be used now: it was set since the
// latest wake-up (gen is s.wake's current channel) and is young enough.
func (h *claimHints) get(queue string, gen <-chan struct{}, now time.Time) (claimHint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.m[queue]
	if !ok || c.gen != gen || now.Sub(c.at) > maxHintAge || now.Before(c.at) {
		return claimHint{}, false
	}
	return c, true
}

// set records the first task (in claim order) a claim of queue returned;
// gen is s.wake's channel taken before the claim started, cur the current
// one. A claim during which tasks may have become ready sets nothing, and
// a hint of the same period only moves forward (concurrent claims finish
// in any order).
func (h *claimHints) set(queue string, gen, cur <-chan struct{}, c claimHint) {
	if gen != cur {
		return
	}
	c.gen = gen
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = make(map[string]claimHint)
	}
	if old, ok := h.m[queue]; ok && old.gen == gen && c.before(old) {
		return
	}
	h.m[queue] = c
}
