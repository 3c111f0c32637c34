package embedded

import (
	"time"

	"github.com/nornq/norn"
)

// gather counts what a batch claim (norn.ClaimRequest.Min) decides on:
// the ready tasks of the claim's queues, up to req.Min, and when the one
// ready longest became ready. Callers hold s.mu.
func (s *Store) gather(req *norn.ClaimRequest) (ready int, oldest int64) {
	for _, name := range req.Queues {
		q := s.queues[name]
		if q == nil || q.paused {
			continue
		}
		ready += int(q.counts[stReady])
	}
	if ready >= req.Min {
		return ready, 0
	}
	// Fewer than Min (at most a thousand) are ready: look at each.
	for _, name := range req.Queues {
		q := s.queues[name]
		if q == nil || q.paused {
			continue
		}
		q.nokey.ready.each(func(e *readyEnt) { oldest = earliest(oldest, e.readyAt) })
		for _, g := range q.keys {
			g.ready.each(func(e *readyEnt) { oldest = earliest(oldest, e.readyAt) })
		}
	}
	return ready, oldest
}

func earliest(a, b int64) int64 {
	if a == 0 || b < a {
		return b
	}
	return a
}

// each calls fn with every live entry.
func (r *readyQueue) each(fn func(*readyEnt)) {
	for i := range r.heap {
		fn(&r.heap[i])
	}
	if r.live == 0 {
		return
	}
	for i := r.front; i < len(r.run); i++ {
		if !r.run[i].dead {
			fn(&r.run[i])
		}
	}
}

// gathered applies norn's decision to the store's state: whether a batch
// claim takes tasks now and, when not, how long until it should look
// again by itself (0: only when woken).
func (tx *txn) gathered(req *norn.ClaimRequest) (bool, time.Duration) {
	if req.Min <= 1 {
		return true, 0
	}
	ready, oldest := tx.s.gather(req)
	now := fromNanos(tx.now)
	take, retry := req.Gathered(ready, fromNanos(oldest), now)
	if take || retry.IsZero() {
		return take, 0
	}
	return false, retry.Sub(now)
}
