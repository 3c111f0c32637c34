package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// maxMerged caps how many completions one merged statement carries.
const maxMerged = 5000

// completer merges the completions of concurrent callers into one
// statement and one commit (River's completer does the same): a caller
// queues its completions and waits; one flush at a time takes everything
// queued, and completions arriving while it runs go together into the
// next one. When nothing is in flight a completion goes out at once, so
// merging adds no latency on an idle store; under load it turns many small
// commits into a few big ones. Every caller is answered only after the
// commit that holds its completions, with its own results.
type completer struct {
	s      *Store
	mu     sync.Mutex
	queue  []*completeReq
	queued int // completions in queue
	busy   int // flushes running
}

// completionFlushes is how many merged completion statements run at once.
// One at a time left a core idle a quarter of a burn-down once claims
// stopped writing task rows (ready batches); completions of distinct tasks
// do not wait for each other, and a task named in both runs is decided
// by its row lock (the second finds it completed: a repeat).
const completionFlushes = 2

// completeReq is one caller's completions (distinct tasks).
type completeReq struct {
	ids     []string
	leases  []int64
	workers []string
	results [][]byte
	// Set by the flush before ready is closed.
	done  []bool // the completion of ids[k] took effect
	err   error
	ready chan struct{}
}

// complete runs req's completions, merged with whatever other callers
// queue meanwhile. It returns when they are committed (or failed).
func (c *completer) complete(ctx context.Context, req *completeReq) error {
	req.ready = make(chan struct{})
	c.mu.Lock()
	c.queue = append(c.queue, req)
	c.queued += len(req.ids)
	if c.busy < c.s.cfg.completionFlushes {
		c.busy++
		c.mu.Unlock()
		// The flush runs on its own goroutine under the store's context:
		// a caller whose context ends must not fail the others' completions.
		go c.flushAll()
	} else {
		c.mu.Unlock()
	}
	select {
	case <-req.ready:
		return req.err
	case <-ctx.Done():
		// The completions may still be committed; the caller is not told
		// they were, as with any call interrupted in flight.
		return ctx.Err()
	}
}

// flushAll flushes until the queue is empty.
func (c *completer) flushAll() {
	for {
		c.mu.Lock()
		batch, rest, n := takeDistinct(c.queue)
		c.queue = rest
		c.queued -= n
		if len(batch) == 0 {
			c.busy--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.s.flushCompletions(batch)
	}
}

// takeDistinct takes queued requests, oldest first, until maxMerged
// completions; a request naming a task an earlier taken one names waits for
// the next flush, so one statement never completes a task twice.
func takeDistinct(q []*completeReq) (batch, rest []*completeReq, n int) {
	seen := map[string]bool{}
	for i, r := range q {
		if len(batch) > 0 && n+len(r.ids) > maxMerged {
			rest = append(rest, q[i:]...)
			break
		}
		clash := false
		for _, id := range r.ids {
			if seen[id] {
				clash = true
				break
			}
		}
		if clash {
			rest = append(rest, r)
			continue
		}
		for _, id := range r.ids {
			seen[id] = true
		}
		batch = append(batch, r)
		n += len(r.ids)
	}
	return batch, rest, n
}

// flushCompletions runs the requests' completions as one compare-and-set
// statement pipelined with the release of their dependents, in one
// implicit transaction, and answers every request.
func (s *Store) flushCompletions(batch []*completeReq) {
	var ids, workers []string
	var leases []int64
	var results [][]byte
	for _, r := range batch {
		ids = append(ids, r.ids...)
		workers = append(workers, r.workers...)
		leases = append(leases, r.leases...)
		results = append(results, r.results...)
	}
	if s.cfg.flushPause != nil {
		s.cfg.flushPause(len(batch))
	}
	got := map[string]bool{}
	released := false
	err := s.withConn(s.ctx, func(conn *pgx.Conn) error {
		clear(got)
		released = false
		b := &pgx.Batch{}
		// Both are planned once per connection, not per call, and join
		// the batch by hashing (hashJoinGUCs).
		b.Queue("SELECT " + hashJoinGUCs)
		leased := map[int64]int32{}
		var rel []string
		b.Queue(s.completeSQL(), ids, leases, workers, results, s.clockNow(), s.cfg.HistoryLimit).Query(func(rows pgx.Rows) error {
			var id string
			var lid *int64
			_, err := pgx.ForEachRow(rows, []any{&id, &lid}, func() error {
				got[id] = true
				if lid != nil {
					leased[*lid]++
				}
				return nil
			})
			return err
		})
		b.Queue(s.releaseSQL(), ids, make([]*int64, len(ids)), s.clockNow(), s.cfg.HistoryLimit).Query(releasedRows(&rel))
		if err := conn.SendBatch(s.ctx, b).Close(); err != nil {
			return err
		}
		released = len(rel) > 0
		// The completions are committed: a failure to count them only
		// leaves lease rows for the monitor to drop at their deadline.
		if err := s.countLeaseDone(s.ctx, conn, leased); err != nil && s.ctx.Err() == nil {
			s.cfg.Logger.Warn("counting completed leased tasks", "err", err)
		}
		return nil
	})
	if err != nil && s.ctx.Err() != nil {
		err = norn.ErrClosed
	}
	if released {
		s.wake.fire()
	}
	for _, r := range batch {
		r.err = err
		if err == nil {
			r.done = make([]bool, len(r.ids))
			for k, id := range r.ids {
				r.done[k] = got[id]
			}
		}
		close(r.ready)
	}
}
