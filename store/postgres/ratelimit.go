package postgres

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Rate limits. A rate-limited queue is flow_limited, so its claims run in
// claimLimited under the queue's advisory lock: each reads the bucket
// (queue_buckets: tokens at a time; no row = full), the database's time,
// takes at most the whole tokens, and writes the bucket back in the same
// transaction. Claims of the queue are serialized across every node, so
// no two can spend the same token, and time comes from one clock (the
// database's), so nodes with skewed clocks cannot refill it early.
//
// A long-polling claim that a rate limit left short would otherwise sleep
// until a notification or PollInterval; the node arms one timer per queue
// for when the next token comes, which wakes its waiting claimers.

// bucketSQL reads the bucket and the time the claim uses ($2: injected
// clock), in the claim's batch after the advisory lock.
const bucketSQL = `SELECT n.now, b.tokens, b.at FROM (SELECT coalesce($2::timestamptz, clock_timestamp()) AS now) n
LEFT JOIN {s}.queue_buckets b ON b.queue = $1`

// rateState is the node's side of rate limiting: what limits held back
// from this store's claims, and the pending token timers.
type rateState struct {
	mu     sync.Mutex
	held   map[string]*norn.Held
	timers map[string]time.Time // queue → when its armed timer fires
}

// bucketRow is what bucketSQL read.
type bucketRow struct {
	now    time.Time
	tokens *float64
	at     *time.Time
}

// bucket returns the queue's bucket as of the claim's time.
func (r bucketRow) bucket(rl norn.RateLimit) norn.Bucket {
	if r.tokens == nil || r.at == nil {
		return rl.FullBucket(r.now)
	}
	return rl.Refill(norn.Bucket{Tokens: *r.tokens, At: *r.at}, r.now)
}

// settleClaim finishes a limited claim that got got of want tasks: it
// writes the bucket (rate-limited queues), counts what the limits held
// back, and arms the token timer when the rate limit left it short.
// maxRoom and tokens are what max_running and the bucket allowed (-1:
// no such limit).
func (s *Store) settleClaim(ctx context.Context, tx pgx.Tx, queue string, flow norn.QueueFlow, br bucketRow,
	want, got, maxRoom, tokens int) error {
	var b norn.Bucket
	if flow.RateLimited() {
		b = br.bucket(flow.RateLimit)
		if got > 0 {
			_, b = flow.RateLimit.Take(b, br.now, got)
			_, err := tx.Exec(ctx, s.q(`INSERT INTO {s}.queue_buckets (queue, tokens, at) VALUES ($1, $2, $3)
ON CONFLICT (queue) DO UPDATE SET tokens = EXCLUDED.tokens, at = EXCLUDED.at`), queue, b.Tokens, b.At)
			if err != nil {
				return err
			}
		}
	}
	if got >= want {
		return nil
	}
	// What was ready and not taken, counted only as far as it matters.
	var left int
	err := tx.QueryRow(ctx, s.q(`SELECT count(*) FROM (SELECT 1 FROM {s}.tasks
WHERE status = 'ready' AND queue = $1 LIMIT $2) r`), queue, want-got).Scan(&left)
	if err != nil {
		return err
	}
	held := norn.HeldBack(want, left+got, maxRoom, tokens, got)
	if held == (norn.Held{}) {
		return nil
	}
	s.rate.mu.Lock()
	defer s.rate.mu.Unlock()
	if s.rate.held == nil {
		s.rate.held = map[string]*norn.Held{}
	}
	h := s.rate.held[queue]
	if h == nil {
		h = new(norn.Held)
		s.rate.held[queue] = h
	}
	h.Add(held)
	if held.RateLimit > 0 {
		s.armTokenTimer(queue, flow.RateLimit.NextToken(b))
	}
	return nil
}

// armTokenTimer wakes this node's waiting claimers in d, unless a timer
// for the queue fires before then already. Called with s.rate.mu held.
func (s *Store) armTokenTimer(queue string, d time.Duration) {
	if d <= 0 {
		d = time.Millisecond
	}
	at := time.Now().Add(d)
	if s.rate.timers == nil {
		s.rate.timers = map[string]time.Time{}
	}
	if pending, ok := s.rate.timers[queue]; ok && !pending.After(at) {
		return
	}
	s.rate.timers[queue] = at
	time.AfterFunc(d, func() {
		s.rate.mu.Lock()
		if s.rate.timers[queue].Equal(at) {
			delete(s.rate.timers, queue)
		}
		s.rate.mu.Unlock()
		s.wake.fire()
	})
}

// FlowStats reports the queues with limits, with their running tasks, and
// what limits held back from this store's claims since it was opened; see
// norn.FlowReporter. Counting running tasks reads the (queue, status)
// index: O(running tasks of the limited queues).
func (s *Store) FlowStats(ctx context.Context) ([]norn.FlowStat, error) {
	byQueue := map[string]*norn.FlowStat{}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, s.q(`SELECT q.name,
	(SELECT count(*) FROM {s}.tasks t WHERE t.queue = q.name AND t.status = 'running')
FROM {s}.queues q WHERE q.flow_limited`))
		if err != nil {
			return err
		}
		var name string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
			byQueue[name] = &norn.FlowStat{Queue: name, Limited: true, Running: n}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.rate.mu.Lock()
	for q, h := range s.rate.held {
		st := byQueue[q]
		if st == nil {
			st = &norn.FlowStat{Queue: q}
			byQueue[q] = st
		}
		st.Held = *h
	}
	s.rate.mu.Unlock()
	out := make([]norn.FlowStat, 0, len(byQueue))
	for _, st := range byQueue {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b norn.FlowStat) int { return strings.Compare(a.Queue, b.Queue) })
	return out, nil
}

var _ norn.FlowReporter = (*Store)(nil)

// rateTokens fills in the tokens of rate-limited queues among qs.
func (s *Store) rateTokens(ctx context.Context, conn *pgx.Conn, qs map[string]*norn.QueueInfo) error {
	var names []string
	for name, q := range qs {
		if q.RateLimited() {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	rows, err := conn.Query(ctx, s.q(`SELECT q.name, n.now, b.tokens, b.at
FROM unnest($1::text[]) q(name) CROSS JOIN (SELECT coalesce($2::timestamptz, clock_timestamp()) AS now) n
LEFT JOIN {s}.queue_buckets b ON b.queue = q.name`), names, s.clockNow())
	if err != nil {
		return err
	}
	var name string
	var br bucketRow
	_, err = pgx.ForEachRow(rows, []any{&name, &br.now, &br.tokens, &br.at}, func() error {
		q := qs[name]
		t := br.bucket(q.RateLimit).Tokens
		q.RateTokens = &t
		return nil
	})
	return err
}
