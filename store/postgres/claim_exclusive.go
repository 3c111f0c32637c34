package postgres

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nornq/norn"
)

// The exclusive path: the queue's gate held exclusively, its running tasks
// counted per key, and a pick (pickLimited, or pickFair for a fair queue)
// that admits exactly up to the limits. A queue comes here when its limits
// are near or small, it is fair or paused, or another path gave up on it.

// runningByKeySQL counts a queue's running tasks by concurrency key (the
// empty string for none), only when a count limit needs it.
const runningByKeySQL = `SELECT coalesce(concurrency_key, ''), count(*) FROM {s}.tasks
WHERE queue = $1 AND ist = 'running' AND (SELECT q.max_running > 0 OR q.key_limit > 0
	OR EXISTS (SELECT 1 FROM {s}.queue_keys k WHERE k.queue = $1 AND k.lim > 0) FROM {s}.queues q WHERE q.name = $1)
GROUP BY 1`

// claimExclusive claims up to want tasks of a flow-limited queue with
// the gate held exclusively: counted per key, admitted exactly. It holds
// the gate for as few round trips as it can, since every claim of the
// queue waits for it: BEGIN with the first reads, the pick's reads, then
// its writes with the claim and COMMIT (a rate-limited claim writes its
// bucket after the claim, one more).
func (s *Store) claimExclusive(ctx context.Context, conn *pgx.Conn, c claimCall) (out []*norn.Task, err error) {
	defer func() {
		if err != nil && !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
	}()
	g, err := s.readUnderGate(ctx, conn, c)
	if err != nil {
		return nil, err
	}
	if g.paused {
		_, err := conn.Exec(ctx, "COMMIT")
		return nil, err
	}
	// What max_running and the rate limit allow (-1: no such limit).
	maxRoom, tokens, pick := -1, -1, c.want
	if g.flow.MaxRunning > 0 {
		maxRoom = int(max(int64(g.flow.MaxRunning)-g.total, 0))
	}
	if g.flow.RateLimited() {
		tokens = g.bucket.bucket(g.flow.RateLimit).Whole()
		pick = min(pick, tokens)
	}
	// The last batch: the pick's writes, the claim, what it left ready,
	// and (without a rate limit, whose bucket is written after) COMMIT.
	var ids picked
	fast := pick > 0 && g.flow.FairBy == "" && !g.keyRated() && cannotBind(g.flow, g.own, g.running, g.total, pick)
	switch {
	case pick <= 0 || fast:
	case g.flow.FairBy != "":
		ids = s.pickFair(ctx, conn, c.queue, pick, g)
	default:
		ids = s.pickLimited(ctx, conn, c.queue, pick, g)
	}
	if ids.err != nil {
		return nil, ids.err
	}
	fb := ids.writes
	if fb == nil {
		fb = &pgx.Batch{}
	}
	if len(ids.ids) > 0 && !fast {
		// Tasks it found by key past the head may be in ready rows.
		s.queueDetach(fb, ids.ids)
		g.keyTokens.queueWrites(s, fb, c.queue)
	}
	if n := len(ids.ids); (fast || n > 0) && countLimited(g.flow, g.own) {
		if fast {
			n = pick
		}
		fb.Queue(s.q(bumpSlotSQL), c.queue, int64(n))
	}
	var claimQ *pgx.QueuedQuery
	switch {
	case fast:
		// Under the lock, with these counts, no limit can stop this
		// claim: take the first ready tasks in one statement, as an
		// unlimited queue's claim does, instead of reading candidates and
		// claiming them by id.
		s.flow.sqlOnce.Do(s.buildFlowSQL)
		claimQ = fb.Queue(s.flow.claimFirstSQL, c.queue, pick, g.bucket.now, c.worker, c.timeout, s.cfg.HistoryLimit)
	case len(ids.ids) > 0:
		// The claim's time is the bucket's: one clock for both.
		claimQ = fb.Queue(s.sql.claimIDs, ids.ids, len(ids.ids), g.bucket.now, c.worker, c.timeout, s.cfg.HistoryLimit)
	}
	if claimQ != nil {
		claimQ.Query(func(rows pgx.Rows) (err error) {
			out, err = collectClaimedRows(rows)
			return err
		})
	}
	rated := g.flow.RateLimited()
	left := 0
	if !rated {
		fb.Queue(s.q(leftSQL), c.queue, c.want).QueryRow(func(row pgx.Row) error { return row.Scan(&left) })
		fb.Queue("COMMIT")
	}
	if fb.Len() > 0 {
		if err := conn.SendBatch(ctx, fb).Close(); err != nil {
			return nil, err
		}
	}
	if !rated {
		if len(out) < c.want {
			s.noteHeld(c.queue, g.flow, norn.Bucket{}, c.want, len(out), min(left, c.want-len(out)), maxRoom, tokens)
		}
		return out, nil
	}
	if err := s.settleClaim(ctx, conn, c.queue, g.flow, g.bucket, c.want, len(out), maxRoom, tokens); err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "COMMIT")
	return out, err
}

// gateView is what an exclusive claim reads under the gate: the queue's
// settings and running tasks by key, and its bucket.
type gateView struct {
	readyLeft bool // ready rows past the head remain
	paused    bool
	fairNow   int64
	flow      norn.QueueFlow
	own       map[string]*norn.KeySettings
	running   map[string]int64
	total     int64
	bucket    bucketRow
	// The keys' buckets (keyrate.go; absent: full) and the claim's view
	// of their tokens (nil until a pick asks, and without key rates).
	keyBuckets map[string]norn.Bucket
	keyTokens  *keyTokens
}

// readUnderGate begins the exclusive claim's transaction, takes the gate
// exclusively, settles the queue's head and reads its gateView, in one
// round trip.
func (s *Store) readUnderGate(ctx context.Context, conn *pgx.Conn, c claimCall) (*gateView, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.channel+"/flow/"+c.queue)
	if s.cfg.Clock != nil {
		// An injected clock is read when the batch is built: once the gate
		// is held, as clock_timestamp() is, or a claim that waited for it
		// would record its tasks' assignment before the claims it waited
		// for (the tokens stay right; their times would not).
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
		b = &pgx.Batch{}
	}
	b.Queue(noSeqScanSQL)
	g := s.queueGateReads(b, c.queue, 4*c.want+16)
	return g, conn.SendBatch(ctx, b).Close()
}

// queueGateReads queues on b, inside a transaction holding queue's gate
// exclusively, the settle of its head (up to n tasks) and the reads of
// its gateView, which the batch's results fill in.
func (s *Store) queueGateReads(b *pgx.Batch, queue string, n int) *gateView {
	g := &gateView{own: map[string]*norn.KeySettings{}, running: map[string]int64{}}
	c := claimCall{queue: queue}
	// The queue's leases and first ready rows (shared and keyed claims
	// take tasks through them) become ordinary rows: the counts below
	// count running rows, and the pick reads ordinary ones at the head.
	// Each task is moved once, so this costs one more write per task at
	// most, and nothing when the queue has neither.
	s.queueSettleHead(b, c.queue, n, &g.readyLeft)
	b.Queue(s.q(`SELECT paused, max_running, key_limit, fair_by, fair_now, rate_per_second, rate_burst,
	key_rate_per_second, key_rate_burst FROM {s}.queues WHERE name = $1`), c.queue).QueryRow(func(row pgx.Row) error {
		var maxRunning, keyLimit, burst, keyBurst int32
		err := row.Scan(&g.paused, &maxRunning, &keyLimit, &g.flow.FairBy, &g.fairNow, &g.flow.RateLimit.PerSecond, &burst,
			&g.flow.KeyRateLimit.PerSecond, &keyBurst)
		g.flow.MaxRunning, g.flow.KeyLimit, g.flow.RateLimit.Burst = int(maxRunning), int(keyLimit), int(burst)
		g.flow.KeyRateLimit.Burst = int(keyBurst)
		if err == pgx.ErrNoRows {
			return nil
		}
		return err
	})
	b.Queue(s.q(`SELECT key, lim, weight, rate_per_second, rate_burst FROM {s}.queue_keys
WHERE queue = $1 AND (lim > 0 OR weight > 0 OR rate_per_second > 0)`), c.queue).Query(func(rows pgx.Rows) error {
		var key string
		var lim, weight, burst int32
		var rate float64
		_, err := pgx.ForEachRow(rows, []any{&key, &lim, &weight, &rate, &burst}, func() error {
			g.own[key] = &norn.KeySettings{Limit: int(lim), Weight: int(weight), RateLimit: norn.RateLimit{PerSecond: rate, Burst: int(burst)}}
			return nil
		})
		return err
	})
	s.readKeyBuckets(b, c.queue, g)
	// Counted only when a count limit needs it (a fair or rate-limited
	// queue may have none).
	b.Queue(s.q(runningByKeySQL), c.queue).Query(func(rows pgx.Rows) error {
		var key string
		var n int64
		_, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error {
			g.running[key] = n
			g.total += n
			return nil
		})
		return err
	})
	b.Queue(s.q(bucketInitSQL), c.queue, s.clockNow())
	b.Queue(s.q(bucketSQL), c.queue, s.clockNow()).QueryRow(func(row pgx.Row) error {
		return row.Scan(&g.bucket.now, &g.bucket.tokens, &g.bucket.at)
	})
	return g
}

// leftSQL counts, up to $2, the ready tasks a claim left (its own are
// running by then): what a short claim was held back from.
const leftSQL = `SELECT count(*) FROM (SELECT 1 FROM {s}.tasks WHERE status = 'ready' AND queue = $1 LIMIT $2) r`

// flowQuerier is what the pick runs its statements on: the connection,
// inside the claim's transaction.
type flowQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// cannotBind reports whether the limits leave room for want more tasks
// whatever keys they have: the queue has room for want, and so has every
// key (the running ones by their counts, the others by the smallest limit
// any key may have).
func cannotBind(flow norn.QueueFlow, own map[string]*norn.KeySettings, running map[string]int64, total int64, want int) bool {
	// A rate limit does not enter into it: want is within the whole
	// tokens already.
	w := int64(want)
	if r := flow.Admit(total, 0, 0); r >= 0 && r < w {
		return false
	}
	least := int64(flow.KeyLimit)
	for _, ks := range own {
		if ks.Limit > 0 && (least == 0 || int64(ks.Limit) < least) {
			least = int64(ks.Limit)
		}
	}
	if least > 0 && least < w {
		return false
	}
	for k, n := range running {
		if l := int64(flow.KeyLimitFor(k, own[k])); l > 0 && l-n < w {
			return false
		}
	}
	return true
}

// countLimited reports whether the queue has a count limit, so that the
// shared path bounds its running tasks by the slot rows.
func countLimited(flow norn.QueueFlow, own map[string]*norn.KeySettings) bool {
	if flow.MaxRunning > 0 || flow.KeyLimit > 0 {
		return true
	}
	for _, ks := range own {
		if ks.Limit > 0 {
			return true
		}
	}
	return false
}

type picked struct {
	ids    []string
	writes *pgx.Batch // to send with the claim (nil: none)
	err    error
}

// pickLimited chooses, in claim order, the ready tasks the limits admit.
//
// It reads the first 4 × want + 16 ready tasks of the queue and admits
// them in order while their keys and the queue have room; that settles
// every claim whose head is not mostly keys at their limits, in O(want).
// Past them it does not step over the blocked keys' backlog, which would
// cost every claim O(ready tasks) for as long as one key's backlog fills
// the queue's head (a key_limit of 1 and a tenant with a million tasks).
// In one more round trip it reads the next pickHead ready tasks; each key
// with room's first tasks past the head, the keys listed through
// tasks_key_ready, one index probe per key (pastHeadSQL: O(K log n) for K
// keys); and, for the tasks without a key, which are not in that index,
// the next pickChunk ready tasks from where the previous pick of the queue
// stopped, wrapping round at the end. It admits what they found in claim
// order. So a pick costs O(want + pickHead + pickChunk + K log n) however
// long the backlog, and a task without a key behind a backlog of n
// held-back tasks waits at most n / pickChunk picks.
func (s *Store) pickLimited(ctx context.Context, tx flowQuerier, queue string, want int, g *gateView) picked {
	flow, own, running, total, readyLeft := g.flow, g.own, g.running, g.total, g.readyLeft
	if flow.MaxRunning > 0 {
		want = int(min(int64(want), max(int64(flow.MaxRunning)-total, 0)))
	}
	if want <= 0 {
		return picked{}
	}
	p := &limitedPick{flow: flow, own: own, running: running, total: total, want: want, tokens: g.tokensFor()}
	first := 4*want + 16
	rows, err := tx.Query(ctx, s.q(`SELECT id, coalesce(concurrency_key, ''), priority, ready_at FROM {s}.tasks
WHERE ist = 'ready' AND queue = $1 ORDER BY priority DESC, ready_at, id LIMIT $2`), queue, first)
	if err != nil {
		return picked{err: err}
	}
	head, err := collectCands(rows)
	if err != nil {
		return picked{err: err}
	}
	for _, c := range head {
		p.offer(c)
	}
	if p.full() || len(head) < first && !readyLeft {
		return picked{ids: p.taken}
	}
	// One round trip for the rest (the claim holds the queue's gate):
	// the next pickHead tasks, each key's first tasks past the head (in
	// ready rows or not), and the next chunk for tasks without a key.
	last := readyCand{priority: math.MaxInt64}
	if len(head) > 0 {
		last = head[len(head)-1]
	}
	rooms, def, err := p.rooms()
	if err != nil {
		return picked{err: err}
	}
	from := last
	if c, ok := s.flow.chunkFrom(queue); ok && c.compare(last) > 0 {
		from = c
	}
	var next, keyed, chunk []readyCand
	b := &pgx.Batch{}
	b.Queue(s.pastSQL(), queue, last.priority, last.readyAt, last.id, pickHead).Query(candRows(&next))
	b.Queue(s.pastHeadSQL(), queue, last.priority, last.readyAt, last.id, rooms, def).Query(candRows(&keyed))
	b.Queue(s.pastSQL(), queue, from.priority, from.readyAt, from.id, s.flow.chunk()).Query(candRows(&chunk))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return picked{err: err}
	}
	if len(chunk) < s.flow.chunk() {
		s.flow.setChunkFrom(queue, nil) // the end: the next pick reads from the head again
	} else {
		end := slices.MaxFunc(chunk, func(a, b readyCand) int { return a.compare(b) })
		s.flow.setChunkFrom(queue, &end)
	}
	cands := append(next, keyed...)
	for _, c := range chunk {
		if c.key == "" {
			cands = append(cands, c)
		}
	}
	slices.SortFunc(cands, func(a, b readyCand) int { return a.compare(b) })
	for i, c := range cands {
		if p.full() {
			break
		}
		if i > 0 && cands[i-1].id == c.id {
			continue // read by two of the reads
		}
		p.offer(c)
	}
	return picked{ids: p.taken}
}

// pickHead is how many ready tasks a limited pick reads right after the
// first 4 × want + 16, if those were not enough.
const pickHead = 1024

// pickChunk is how many ready tasks past the head a limited pick reads,
// from where the last one stopped, to find tasks without a key.
const pickChunk = 2 * pickHead

// readyCand is one ready task read by a limited or fair pick (key: its
// concurrency key, or "" where the read does not need it).
type readyCand struct {
	id       string
	key      string
	priority int64
	readyAt  time.Time
}

// compare orders two ready tasks in claim order.
func (a readyCand) compare(b readyCand) int {
	return compareClaimOrder(a.priority, a.readyAt, a.id, b.priority, b.readyAt, b.id)
}

// limitedPick is a limited pick in progress: what it took, and the
// running counts with its takes added.
type limitedPick struct {
	flow    norn.QueueFlow
	own     map[string]*norn.KeySettings
	running map[string]int64
	total   int64
	want    int
	taken   []string
	tokens  *keyTokens // nil: no key rate limits
}

// room is how many more tasks of key the limits admit (-1: any number).
func (p *limitedPick) room(key string) int64 {
	return minRoom(p.flow.Admit(p.total, p.running[key], p.flow.KeyLimitFor(key, p.own[key])), p.tokens.room(key))
}

// minRoom is the smaller of two rooms, -1 meaning no limit.
func minRoom(a, b int64) int64 {
	if a < 0 || b >= 0 && b < a {
		return b
	}
	return a
}

func (p *limitedPick) full() bool { return len(p.taken) >= p.want }

// offer takes the task if the claim wants more and its key has room. The
// tasks must be offered in claim order.
func (p *limitedPick) offer(c readyCand) {
	if p.full() || p.room(c.key) == 0 {
		return
	}
	p.taken = append(p.taken, c.id)
	p.running[c.key]++
	p.total++
	p.tokens.take(c.key)
}

// afterSQL selects, with sel (a SELECT list over tasks t) and the
// conditions cond, the first lim tasks in claim order after the task ($2
// priority, $3 ready_at, $4 id). It is two index ranges, the rest of that
// task's priority and the lower priorities, one after the other: as one
// condition with OR the index scan would start at the queue's head and
// filter its way to the task.
func afterSQL(sel, cond, lim string) string {
	const order = ` ORDER BY t.priority DESC, t.ready_at, t.id LIMIT `
	return `SELECT u.* FROM ((` + sel + ` WHERE ` + cond + ` AND t.priority = $2 AND (t.ready_at, t.id) > ($3::timestamptz, $4::text)` + order + lim + `)
	UNION ALL (` + sel + ` WHERE ` + cond + ` AND t.priority < $2` + order + lim + `)) u LIMIT ` + lim
}

// rooms returns, for the read of each key's first tasks past the head
// (pastHeadSQL), each key's room where it is not the default (keys with
// running tasks or their own settings) as a JSON object, and the default:
// as many as the key's room, at most what the claim still wants.
func (p *limitedPick) rooms() (string, int64, error) {
	left := int64(p.want - len(p.taken))
	rooms := map[string]int64{}
	def := left
	// The room of a key without running tasks or settings: any non-empty
	// key's limit without settings is the queue's key_limit.
	if r := minRoom(p.flow.Admit(p.total, 0, p.flow.KeyLimitFor("any", nil)), p.tokens.defaultRoom()); r >= 0 {
		def = min(def, r)
	}
	note := func(k string) {
		if k == "" {
			return
		}
		if r := p.room(k); r >= 0 && r < left {
			rooms[k] = r
		} else {
			rooms[k] = left
		}
	}
	for k := range p.running {
		note(k)
	}
	for k := range p.own {
		note(k)
	}
	if p.tokens != nil {
		for k := range p.tokens.buckets {
			note(k)
		}
	}
	j, err := json.Marshal(rooms)
	return string(j), def, err
}

// pastHeadSQL reads, past the position $2–$4 in claim order, the first
// ready tasks of each key of queue $1 with room (its room from $5, a JSON
// object, else $6) through tasks_key_ready: the keys are listed by
// skipping through the index (readyKeysCTE: one probe per key), and a key
// at its limit costs that probe only.
func (s *Store) pastHeadSQL() string {
	return s.q(`WITH RECURSIVE ` + readyKeysCTE("concurrency_key") + `,
kr AS MATERIALIZED (SELECT k.key, coalesce(($5::jsonb ->> k.key)::bigint, $6::bigint) AS room FROM k WHERE k.key IS NOT NULL)
SELECT c.id, kr.key, c.priority, c.ready_at FROM kr CROSS JOIN LATERAL (` + afterSQL(`SELECT t.id, t.priority, t.ready_at FROM {s}.tasks t`,
		`t.queue = $1 AND t.ist IN ('ready', 'batched') AND t.concurrency_key IS NOT NULL AND t.concurrency_key = kr.key`, `kr.room`) + `) c
WHERE kr.room > 0`)
}

// pastSQL reads the ready tasks of queue $1 after the position $2–$4 in
// claim order, $5 of them at most (pickLimited).
func (s *Store) pastSQL() string {
	return s.q(afterSQL(`SELECT t.id, coalesce(t.concurrency_key, ''), t.priority, t.ready_at FROM {s}.tasks t`,
		`t.ist = 'ready' AND t.queue = $1`, `$5`))
}

// collectCands reads rows of (id, key, priority, ready_at).
func collectCands(rows pgx.Rows) ([]readyCand, error) {
	var out []readyCand
	var c readyCand
	_, err := pgx.ForEachRow(rows, []any{&c.id, &c.key, &c.priority, &c.readyAt}, func() error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// candRows collects a statement's candidates into out, for a batch's
// named handle.
func candRows(out *[]readyCand) func(pgx.Rows) error {
	return func(rows pgx.Rows) (err error) {
		*out, err = collectCands(rows)
		return err
	}
}

// chunk is how many tasks a limited pick reads for tasks without a key.
func (f *flowState) chunk() int {
	if f.keylessChunk > 0 {
		return f.keylessChunk
	}
	return pickChunk
}

// chunkFrom returns where the last limited pick of queue stopped reading
// for tasks without a key.
func (f *flowState) chunkFrom(queue string) (readyCand, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.keylessFrom[queue]
	return c, ok
}

// setChunkFrom notes where a limited pick of queue stopped reading for
// tasks without a key (nil: at the end).
func (f *flowState) setChunkFrom(queue string, c *readyCand) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c == nil {
		delete(f.keylessFrom, queue)
		return
	}
	if f.keylessFrom == nil {
		f.keylessFrom = map[string]readyCand{}
	}
	f.keylessFrom[queue] = *c
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
