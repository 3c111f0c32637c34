package postgres

import (
	"sync"
	"time"
)

// Claim hints: where the ready tasks of a queue start in the claim index.
//
// A claim changes its tasks' status, so each claimed task leaves a dead
// entry at the head of the tasks_claim partial index until VACUUM removes
// it, and every claim's index scan starts at the queue's head and steps
// over all of them (killed entries are skipped, but their pages are still
// read). A burn-down therefore pays for the dead entries of every task
// claimed since the table was last vacuumed: at 100,000 of them a claim
// of 100 read about 1,050 index pages (3–4 ms of the database's CPU), and
// this scan was about a third of the database's CPU in a 200,000-task
// burn-down.
//
// A hint remembers the claim-order key of the first task the latest claim
// of a queue returned. Ahead of it there is nothing ready left but tasks
// other claims have locked: a task that becomes ready gets a key behind
// it (its ready time is now) unless its priority is higher or its
// transaction started long before it committed. So the next claim scans
// from the hint (its priority from the hint on, lower priorities after)
// and skips the dead entries. The hint is only trusted while nothing may
// have made tasks ready: every path that does fires s.wake, in this
// process directly and on every node through the listener's "wake"
// notification, and a hint taken before the latest wake-up is discarded;
// so is every hint while the listener is disconnected, and any hint older
// than maxHintAge (a claim that locked tasks ahead of the hint and then
// rolled back leaves them ready ahead of it: they are claimed at the next
// full scan). Without a hint the claim scans from the head, as before.
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
