package postgres

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Rate limits. A rate-limited queue is flow_limited, so its claims run on
// the flow paths (claim.go). The bucket is a row of queue_buckets (tokens
// at a time; no row = full) and time is the database's (one clock, so
// nodes with skewed clocks cannot refill it early). Where the queue would otherwise take the
// shared path (not fair, not paused, count limits far), a claim takes its
// tokens inside its lease claim (ratedLeaseSQL): the statement locks the
// bucket's row, refills it by the elapsed time (capped at the burst),
// claims at most the whole tokens it holds and takes exactly what it
// claimed, so no two claims spend a token, on any node, and none takes a
// token it does not use. Elsewhere (fair or paused queues, a count limit
// near) the exclusive path reads and writes the bucket under the gate.
//
// A long-polling claim that a rate limit left short would otherwise sleep
// until a notification or PollInterval; the node arms one timer per queue
// for when the next token comes, which wakes about as many of its waiting
// claimers as there are tokens (tokenDue), not all of them.

// bucketSQL reads the bucket and the time the claim uses ($2: injected
// clock), in the claim's batch after the advisory lock. The exclusive gate
// already holds off every other claim of the queue; the row lock (held to
// the claim's commit) keeps the bucket's read-modify-write safe on its own,
// as the rate-limited lease claim's is. bucketInitSQL stores a
// rate-limited queue's bucket first (full, as no row means), so there is a
// row to lock.
var bucketSQL = `SELECT n.now, b.tokens, b.at FROM (SELECT coalesce($2::timestamptz, clock_timestamp()) AS now) n
LEFT JOIN LATERAL (SELECT tokens, at FROM {s}.queue_buckets WHERE queue = $1 FOR UPDATE) b ON true`

// bucketInitSQL stores a full bucket for queue $1 at $2 (the injected
// clock, or now) if the queue has a rate limit and no bucket yet.
var bucketInitSQL = `INSERT INTO {s}.queue_buckets (queue, tokens, at)
SELECT $1, ` + bucketBurstSQL + `::float8, coalesce($2::timestamptz, clock_timestamp()) FROM {s}.queues WHERE name = $1 AND rate_per_second > 0
ON CONFLICT (queue) DO NOTHING`

// rateState is the node's side of rate limiting: what limits held back
// from this store's claims, the pending token timers, and the long-polling
// claims waiting for tokens.
type rateState struct {
	mu      sync.Mutex
	held    map[string]*norn.Held
	queues  map[string]*tokenQueue
	emptied atomic.Int64 // claims the rate limit left with nothing (tests)
}

// tokenQueue is one rate-limited queue's token timer and waiters on this
// node.
type tokenQueue struct {
	timer   time.Time // when the armed timer fires (zero: none armed)
	rl      norn.RateLimit
	bucket  norn.Bucket // as the last claim the limit held back left it
	armedAt time.Time   // local time of that claim
	heldAt  time.Time   // when a claim was last held back by the limit
	waiters []*tokenWaiter
	spare   int       // wake-ups the last timer had no waiter for…
	firedAt time.Time // …and when it fired
}

// tokenWaiter is a long-polling claim waiting for tokens: the timer wakes
// it by closing c.
type tokenWaiter struct {
	c      chan struct{}
	queues []string
	woken  bool
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

// noteHeld counts what the limits held back from a claim that got got of
// want tasks and left left ready, and arms the token timer when the rate
// limit left it short (b: the bucket after the claim).
func (s *Store) noteHeld(queue string, flow norn.QueueFlow, b norn.Bucket, want, got, left, maxRoom, tokens int) {
	held := norn.HeldBack(want, left+got, maxRoom, tokens, got)
	if held == (norn.Held{}) {
		return
	}
	if got == 0 && held.RateLimit > 0 {
		s.rate.emptied.Add(1)
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
		tq := s.rate.queue(queue)
		tq.rl, tq.bucket, tq.armedAt, tq.heldAt = flow.RateLimit, b, time.Now(), time.Now()
		s.armTokenTimer(queue, tq, flow.RateLimit.NextToken(b))
	}
}

// queue returns the queue's token state. Called with s.rate.mu held.
func (r *rateState) queue(name string) *tokenQueue {
	if r.queues == nil {
		r.queues = map[string]*tokenQueue{}
	}
	tq := r.queues[name]
	if tq == nil {
		tq = &tokenQueue{}
		r.queues[name] = tq
	}
	return tq
}

// armTokenTimer wakes waiters of the queue in d, unless its timer fires
// before then already. Called with s.rate.mu held.
func (s *Store) armTokenTimer(queue string, tq *tokenQueue, d time.Duration) {
	d = max(d, time.Millisecond)
	at := time.Now().Add(d)
	if !tq.timer.IsZero() && !tq.timer.After(at) {
		return
	}
	tq.timer = at
	time.AfterFunc(d, func() { s.tokenDue(queue, at) })
}

// tokenDue wakes as many of the queue's waiters as the bucket holds whole
// tokens now (at least one), oldest first, rather than every claimer of
// the node: each woken one claims, so more would mostly come back empty.
// Wake-ups nobody was waiting for are kept for claims that were under way
// when the timer fired (tokenWait).
func (s *Store) tokenDue(queue string, at time.Time) {
	s.rate.mu.Lock()
	defer s.rate.mu.Unlock()
	tq := s.rate.queues[queue]
	if tq == nil || !tq.timer.Equal(at) {
		return // replaced by an earlier timer, which did the waking
	}
	tq.timer = time.Time{}
	b := tq.bucket
	n := max(tq.rl.Refill(b, b.At.Add(time.Since(tq.armedAt))).Whole(), 1)
	woken := 0
	for woken < n && len(tq.waiters) > 0 {
		w := tq.waiters[0]
		tq.waiters = tq.waiters[1:]
		if !w.woken {
			w.woken = true
			close(w.c)
			woken++
		}
	}
	tq.spare, tq.firedAt = n-woken, time.Now()
}

// tokenWait registers a long-polling claim that started at started and
// came back empty as a waiter for the tokens of those of queues whose rate
// limit held back a claim since it started. Its channel is closed when a
// token timer wakes it, at once if a timer fired while it was claiming
// with a wake-up to spare; nil (blocks forever) when no such queue. Every
// wait ends with endTokenWait.
func (s *Store) tokenWait(queues []string, started time.Time) *tokenWaiter {
	s.rate.mu.Lock()
	defer s.rate.mu.Unlock()
	if len(s.rate.queues) == 0 {
		return &tokenWaiter{}
	}
	w := &tokenWaiter{c: make(chan struct{})}
	for _, q := range queues {
		tq := s.rate.queues[q]
		if tq == nil || tq.heldAt.Before(started) {
			continue
		}
		if tq.spare > 0 && !tq.firedAt.Before(started) {
			tq.spare--
			w.woken = true
			close(w.c)
			return w
		}
		tq.waiters = append(tq.waiters, w)
		w.queues = append(w.queues, q)
		if tq.timer.IsZero() {
			// The timer fired while this claim ran and woke others:
			// make sure one comes for the token after theirs.
			s.armTokenTimer(q, tq, time.Until(tq.armedAt.Add(tq.rl.NextToken(tq.bucket))))
		}
	}
	if len(w.queues) == 0 {
		return &tokenWaiter{}
	}
	return w
}

// endTokenWait removes a waiter that woke for another reason, so a timer
// does not spend a wake-up on it.
func (s *Store) endTokenWait(w *tokenWaiter) {
	if len(w.queues) == 0 {
		return
	}
	s.rate.mu.Lock()
	defer s.rate.mu.Unlock()
	w.woken = true
	for _, q := range w.queues {
		if tq := s.rate.queues[q]; tq != nil {
			tq.waiters = slices.DeleteFunc(tq.waiters, func(x *tokenWaiter) bool { return x == w })
		}
	}
}

// flowStatsSQL counts the running tasks of each flow-limited queue.
const flowStatsSQL = `SELECT q.name,
	(SELECT count(*) FROM {s}.tasks t WHERE t.queue = q.name AND t.ist = 'running')
FROM {s}.queues q WHERE q.flow_limited`

// FlowStats reports the queues with limits, with their running tasks, and
// what limits held back from this store's claims since it was opened; see
// norn.FlowReporter. Counting running tasks reads tasks_running: O(running
// tasks), with sequential scans off so that a plan made on a drained table
// (metrics are scraped periodically) does not read the whole table.
func (s *Store) FlowStats(ctx context.Context) ([]norn.FlowStat, error) {
	byQueue := map[string]*norn.FlowStat{}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		b := &pgx.Batch{}
		b.Queue(noSeqScanSQL)
		b.Queue(s.q(flowStatsSQL))
		type row struct {
			name string
			n    int64
		}
		rows, err := batchRows(ctx, conn, b, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.name, &x.n)
			return x, err
		})
		for _, x := range rows {
			byQueue[x.name] = &norn.FlowStat{Queue: x.name, Limited: true, Running: x.n}
		}
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

// bucketBurstSQL is a queue's burst as norn.RateLimit.Normalized has it.
var bucketBurstSQL = `(CASE WHEN rate_burst > 0 THEN rate_burst ELSE least(ceil(rate_per_second), ` +
	strconv.Itoa(norn.MaxRateBurst) + `) END)::int`

// tokenEpsilon is norn's: a bucket this close to a whole token holds it.
const tokenEpsilon = 1e-9

// tokenEpsilonSQL is tokenEpsilon as an SQL literal.
var tokenEpsilonSQL = strconv.FormatFloat(tokenEpsilon, 'g', -1, 64)
