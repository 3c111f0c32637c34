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

// Rate limits. A rate-limited queue is flow_limited, so its claims run in
// claimLimited. The bucket is a row of queue_buckets (tokens at a time; no
// row = full) and time is the database's (one clock, so nodes with skewed
// clocks cannot refill it early). Where the queue would otherwise take the
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

// settleClaim finishes a limited claim that got got of want tasks: it
// writes the bucket (rate-limited queues), counts what the limits held
// back, and arms the token timer when the rate limit left it short.
// maxRoom and tokens are what max_running and the bucket allowed (-1:
// no such limit).
func (s *Store) settleClaim(ctx context.Context, tx flowQuerier, queue string, flow norn.QueueFlow, br bucketRow,
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
	if err := tx.QueryRow(ctx, s.q(leftSQL), queue, want-got).Scan(&left); err != nil {
		return err
	}
	s.noteHeld(queue, flow, b, want, got, left, maxRoom, tokens)
	return nil
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
	(SELECT count(*) FROM {s}.tasks t WHERE t.queue = q.name AND t.status = 'running')
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

// ratedLeaseN replaces the lease claim's first CTE (assignSQL's n) in
// ratedLeaseSQL: the bucket, locked for the claim's transaction (b0), the
// queue's rate (q), the bucket refilled to the claim's time (f: the
// database's clock or $3, or the bucket's time if that is later, as
// norn.RateLimit.Take does), the tokens the claim may use (tk: up to $2, none
// without a bucket or unless the verdict is ok), and n with the bucket's
// time as the claim's.
var ratedLeaseN = `WITH b0 AS (SELECT x.tokens, x.at FROM {s}.queue_buckets x
	WHERE x.queue = $1 AND current_setting('norn.flow_shared', true) = 'ok' FOR UPDATE),
q AS (SELECT rate_per_second, ` + bucketBurstSQL + `::float8 AS burst FROM {s}.queues WHERE name = $1 AND rate_per_second > 0),
c0 AS (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now),
f AS (SELECT greatest(b0.at, c0.now) AS at, least(b0.tokens + greatest(extract(epoch FROM c0.now - b0.at)::float8, 0)
	* q.rate_per_second, q.burst) AS r FROM b0, q, c0),
tk AS (SELECT coalesce((SELECT least($2, CASE WHEN f.r <= 0 THEN 0 ELSE floor(f.r + ` + tokenEpsilonSQL + `) END)::int FROM f), 0) AS g),
n AS (SELECT f.at AS now, 'ready'::text AS ready FROM f),`

// ratedLeaseSQL is the plain lease claim (buildLeaseClaimSQL) of a
// rate-limited queue on the shared path's verdict, taking its tokens in
// the same statement: it claims at most the whole tokens the bucket holds
// at the claim's time, takes from the bucket exactly what it claimed (bu)
// and notes how many it could have (norn.rated_g). The bucket's row stays
// locked to the claim's commit, so rate-limited claims of a queue follow
// one another through that one statement; none takes tokens it does not
// use, so none gives any back: a give-back after a refill is unsound (the
// refill may have lost those tokens to the cap, and giving them back would
// let claims exceed burst + rate × window).
func (s *Store) buildRatedLeaseSQL() string {
	sql := s.buildLeaseClaimSQL(`current_setting('norn.flow_shared', true) = 'ok'`)
	const n = `WITH n AS (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now, 'ready'::text AS ready),`
	if !strings.HasPrefix(sql, s.q(n)) {
		panic("ratedLeaseSQL: the lease claim no longer starts with n")
	}
	sql = strings.ReplaceAll(sql[len(s.q(n)):], "$2", "(SELECT tk.g FROM tk)")
	sql = s.q(ratedLeaseN) + sql
	const tail = "SELECT upd.* FROM upd WHERE (SELECT count(*) FROM nt) >= 0"
	if !strings.Contains(sql, tail) {
		panic("ratedLeaseSQL: the lease claim no longer ends as assignSQL does")
	}
	return strings.Replace(sql, tail, s.q(`, bu AS (UPDATE {s}.queue_buckets x SET at = f.at,
	tokens = CASE WHEN k.n > 0 AND f.r - k.n < `+tokenEpsilonSQL+` THEN 0 ELSE f.r - k.n END
	FROM f, (SELECT count(*) AS n FROM pick) k WHERE x.queue = $1),
rm AS (SELECT set_config('norn.rated_g', (SELECT tk.g FROM tk)::text, true) AS v)
`)+tail+" AND (SELECT count(*) FROM rm) >= 0", 1)
}

// ratedAfterSQL reads, after a ratedLeaseSQL claim in its transaction,
// the tokens it could have used, the bucket as it left it and the rate
// limit.
const ratedAfterSQL = `SELECT coalesce(nullif(current_setting('norn.rated_g', true), ''), '0')::int, b.tokens, b.at,
	q.rate_per_second, q.rate_burst FROM {s}.queues q LEFT JOIN {s}.queue_buckets b ON b.queue = q.name WHERE q.name = $1`

// claimRated claims up to want tasks of a rate-limited queue that is not
// fair and not paused: the shared path's locks and verdict, then
// ratedLeaseSQL, which takes the tokens in the claim, in one round trip,
// so claims of the queue run concurrently on every node. done false:
// the queue has no rate limit now, or the shared path is ruled out; the
// caller claims on the exclusive path.
func (s *Store) claimRated(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) (out []*norn.Task, done bool, err error) {
	slots, cap := s.flow.margins()
	want = min(want, cap)
	s.flow.sqlOnce.Do(s.buildFlowSQL)
	readyRows := s.readyRows.get(queue)
	b := &pgx.Batch{}
	b.Queue(sharedLockSQL, s.channel+"/flow/"+queue, s.channel+"/flowslot/"+queue, slots)
	b.Queue(s.q(sharedVerdictSQL), queue, slots*cap, true, int64(want))
	b.Queue(s.q(bucketInitSQL), queue, s.clockNow())
	b.Queue(s.flow.ratedLeaseSQL, queue, want, s.clockNow(), worker, timeout, s.cfg.HistoryLimit, readyRows)
	b.Queue(s.q(ratedAfterSQL), queue)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, false, err
	}
	verdict, _, err := scanVerdict(br.QueryRow())
	if err != nil {
		return nil, false, err
	}
	if _, err := br.Exec(); err != nil {
		return nil, false, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, false, err
	}
	out, _, err = collectClaimed(rows)
	if err != nil {
		return nil, false, err
	}
	var (
		g     int
		rl    norn.RateLimit
		burst int32
		tok   *float64
		at    *time.Time
	)
	if err := br.QueryRow().Scan(&g, &tok, &at, &rl.PerSecond, &burst); err != nil && err != pgx.ErrNoRows {
		return nil, false, err
	}
	rl.Burst = int(burst)
	if err := br.Close(); err != nil {
		return nil, false, err
	}
	if rl.PerSecond <= 0 {
		// No rate limit now: the node learns it and claims as the
		// settings say.
		s.flow.markRated(queue, false)
		return nil, false, nil
	}
	if verdict != sharedOK {
		if verdict == sharedStatic || verdict == sharedKeyed {
			// Small key limits with a rate limit: claims take their
			// tokens and admit per key exactly, one at a time.
			s.flow.ruleOut(queue)
		}
		return nil, false, nil
	}
	s.flow.sharedClaims.Add(1)
	if len(out) < want {
		readyRows = min(readyRows*4, maxReadyRows)
	}
	s.readyRows.set(queue, readyRows, len(out) == want)
	if len(out) < want && len(out) == g {
		// Short by the rate limit: count what it held back.
		var bk norn.Bucket
		if tok != nil && at != nil {
			bk = norn.Bucket{Tokens: *tok, At: *at}
		}
		var left int
		if err := conn.QueryRow(ctx, s.q(leftSQL), queue, want-len(out)).Scan(&left); err != nil {
			return out, true, nil
		}
		s.noteHeld(queue, norn.QueueFlow{RateLimit: rl}, bk, want, len(out), left, -1, g)
	}
	return out, true, nil
}
