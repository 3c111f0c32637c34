package postgres

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Ready batches and leases (docs/internals/postgres-claims.md). A task
// submitted by the merged COPY into a queue that is not fair is also an id
// in one row of ready (one row per submitted batch, queue and priority,
// ids in claim order), and names that row in ready_batch. The plain claim takes ids from the head of ready rows and
// writes one lease row for what it took, not the task rows: while a lease
// row names such a task its row still says ready. The fast completion
// writes the task row once, from either form.
//
// Every other path works on ordinary rows only, and settles the tasks it
// is about to touch first: detach takes tasks out of their ready rows
// (they become ordinary ready tasks, in tasks_claim) and writes the tasks
// of the lease rows that hold them as running, exactly as the claim would
// have; settleLeases does the latter for every lease of a scope (reads
// that filter or count by status, the monitor for leases past their
// deadline). Settling never changes what a task is, only how it is stored,
// so it may run in a transaction of its own before the caller's.

// readyBlock is how many ready row ids one nextval of ready_seq hands out
// (its INCREMENT BY).
const readyBlock = 1024

// readyIDs hands out ready row ids from blocks taken from ready_seq.
type readyIDs struct {
	mu        sync.Mutex
	next, end int64
}

// takeReadyIDs returns n ready row ids, fetching a block when the
// current one is used up.
func (s *Store) takeReadyIDs(ctx context.Context, q querier, n int) ([]int64, error) {
	r := &s.readyIDs
	out := make([]int64, 0, n)
	for len(out) < n {
		r.mu.Lock()
		for r.next < r.end && len(out) < n {
			out = append(out, r.next)
			r.next++
		}
		r.mu.Unlock()
		if len(out) == n {
			break
		}
		var v int64
		if err := q.QueryRow(ctx, s.q(`SELECT nextval('{s}.ready_seq')`)).Scan(&v); err != nil {
			return nil, err
		}
		r.mu.Lock()
		if r.next >= r.end {
			r.next, r.end = v, v+readyBlock
		} else {
			// Another caller refilled meanwhile: this block's first id is
			// used here and the rest is left unused.
			out = append(out, v)
		}
		r.mu.Unlock()
	}
	return out, nil
}

// readyRows are the ready rows of one submit request, as the arrays the
// flush inserts them from: ids joined by commas (generated ids never hold
// one).
type readyRows struct {
	rid      []int64
	queue    []string
	priority []int64
	readyAt  []time.Time
	ids      []string
	// keys: the tasks' concurrency keys, aligned with ids, as a JSON
	// array (null for a task without one); nil when no task of the row
	// has a key (keys can hold any character, so no separator would do)
	keys []*string
}

func (r *readyRows) len() int { return len(r.rid) }

func (r *readyRows) add(o *readyRows) {
	r.rid = append(r.rid, o.rid...)
	r.queue = append(r.queue, o.queue...)
	r.priority = append(r.priority, o.priority...)
	r.readyAt = append(r.readyAt, o.readyAt...)
	r.ids = append(r.ids, o.ids...)
	r.keys = append(r.keys, o.keys...)
}

// batchReady groups a decided merged submit's ready tasks of queues
// that are not fair by queue and priority, gives each group a ready row id
// and sets it on the group's recs. The flush writes the rows. (A queue
// made fair since its settings were read here: the flush refuses its
// rows, at the price of one more write per task.) Fair claims read
// ordinary rows only.
func (s *Store) batchReady(ctx context.Context, q querier, p *submitPlan) (*readyRows, error) {
	type group struct {
		queue    string
		priority uint32
	}
	groups := map[group][]*rec{}
	var order []group
	for _, r := range p.recs {
		// A task with an expiry stays an ordinary row: claims from ready
		// rows do not read task rows, so they could not skip it once
		// expired.
		if r == nil || r.Status != norn.StatusReady || !r.ExpiresAt.IsZero() {
			continue
		}
		if d, ok := p.defaults[r.Queue]; ok && d.flow.FairBy != "" {
			continue
		}
		g := group{r.Queue, r.Priority}
		if groups[g] == nil {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
	}
	if len(order) == 0 {
		return nil, nil
	}
	rids, err := s.takeReadyIDs(ctx, q, len(order))
	if err != nil {
		return nil, err
	}
	out := &readyRows{}
	for i, g := range order {
		recs := groups[g]
		slices.SortFunc(recs, func(a, b *rec) int { return strings.Compare(a.ID, b.ID) })
		ids := make([]string, len(recs))
		keys := make([]*string, len(recs))
		keyed := false
		for k, r := range recs {
			r.batch = rids[i]
			ids[k] = r.ID
			if r.ConcurrencyKey != "" {
				keys[k], keyed = &r.ConcurrencyKey, true
			}
		}
		var kj *string
		if keyed {
			b, err := json.Marshal(keys)
			if err != nil {
				return nil, err
			}
			js := string(b)
			kj = &js
		}
		out.keys = append(out.keys, kj)
		out.rid = append(out.rid, rids[i])
		out.queue = append(out.queue, g.queue)
		out.priority = append(out.priority, int64(g.priority))
		out.readyAt = append(out.readyAt, p.now)
		out.ids = append(out.ids, strings.Join(ids, ","))
	}
	return out, nil
}

// insertReadySQL writes a flush's ready rows, except those of queues that
// became fair since their submit read the queue (the flush holds the
// queues' flow gates in shared mode, so UpdateQueue is either before it,
// and seen here, or after it, and settles the rows itself: batchReady has
// why such queues have none). It returns the ids of the rows it did not
// write.
const insertReadySQL = `WITH x AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::timestamptz[], $5::text[], $6::text[])
	AS x(rid, queue, priority, ready_at, ids, keys)),
ok AS (SELECT x.* FROM x WHERE NOT EXISTS (SELECT 1 FROM {s}.queues q WHERE q.name = x.queue AND q.fair_by <> '')),
ins AS (INSERT INTO {s}.ready (rid, queue, priority, ready_at, first_id, ids, keys)
	SELECT rid, queue, priority, ready_at, split_part(ids, ',', 1), string_to_array(ids, ','),
		CASE WHEN keys IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(keys::jsonb)) END FROM ok)
SELECT x.ids FROM x WHERE x.rid NOT IN (SELECT rid FROM ok)`

// flowGatesSQL takes the flow gates of the queues $2 (prefixed with $1)
// in shared mode, as the plain claim does (plainGateSQL).
const flowGatesSQL = `SELECT count(pg_advisory_xact_lock_shared(hashtextextended($1 || q, 0)))
FROM (SELECT DISTINCT q FROM unnest($2::text[]) q ORDER BY q) d`

// writeReady writes the ready rows of a flush in its transaction, after
// the tasks' COPY. Tasks of rows it may not write (their queue got limits)
// become ordinary ready tasks.
func (s *Store) writeReady(ctx context.Context, tx pgx.Tx, rows *readyRows) error {
	b := &pgx.Batch{}
	b.Queue(flowGatesSQL, s.channel+"/flow/", rows.queue)
	var refused []string
	b.Queue(s.q(insertReadySQL), rows.rid, rows.queue, rows.priority, rows.readyAt, rows.ids, rows.keys).Query(func(rs pgx.Rows) (err error) {
		refused, err = pgx.CollectRows(rs, pgx.RowTo[string])
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if len(refused) == 0 {
		return nil
	}
	var ids []string
	for _, r := range refused {
		ids = append(ids, strings.Split(r, ",")...)
	}
	_, err := tx.Exec(ctx, s.q(`UPDATE {s}.tasks SET ready_batch = NULL WHERE id = ANY($1)`), ids)
	return err
}

// settleSQL writes the tasks of the lease rows the CTE k selects (locked,
// in id order) as running, as their claim would have, and deletes the
// rows. A task of them that is ordinary already (completed) is left alone.
// It writes running_key too, as the keyed claim does: the keyed path
// counts a key's running rows by it, and its leased entries while the
// lease row lasts (claim_keyed.go), so a settle moves a task from one count to
// the other in one step.
func settleSQL(k string) string {
	return `WITH ` + k + `,
l AS (DELETE FROM {s}.leases x WHERE x.id IN (SELECT id FROM k) RETURNING x.*),
upd AS (UPDATE {s}.tasks t SET status = 'running', owner = l.worker, lease = t.lease + 1, attempts = t.attempts + 1,
	deadline = ` + leasedDeadline("l.created", "l.timeout_ns") + `,
	updated = l.created, version = t.version + 1, history_count = t.history_count + 1,
	assign_seq = t.history_count + 1, claimed_at = l.created, ready_batch = NULL, running_key = t.concurrency_key
	FROM l, unnest(l.ids) u(id) WHERE t.id = u.id AND t.status = 'ready' AND t.ready_batch IS NOT NULL RETURNING t.id)
SELECT count(*) FROM upd`
}

// detachReadySQL takes the tasks $1 that are still in ready rows out of
// them: the rows are locked first (a claim taking from one finishes
// before), and the tasks become ordinary ready tasks.
const detachReadySQL = `WITH b AS (SELECT DISTINCT t.ready_batch AS rid FROM {s}.tasks t WHERE t.id = ANY($1) AND t.ready_batch IS NOT NULL),
r AS (SELECT r.rid, r.ids, r.keys FROM {s}.ready r WHERE r.rid IN (SELECT rid FROM b) ORDER BY r.rid FOR UPDATE),
gone AS (SELECT r.rid, u.id FROM r, unnest(r.ids) u(id) WHERE u.id = ANY($1)),
keep AS (SELECT r.rid, array_agg(u.id ORDER BY u.o) AS ids, array_agg(u.k ORDER BY u.o) AS keys
	FROM r, unnest(r.ids, r.keys) WITH ORDINALITY u(id, k, o)
	WHERE NOT (u.id = ANY($1)) GROUP BY r.rid),
rd AS (DELETE FROM {s}.ready x WHERE x.rid IN (SELECT rid FROM r) AND x.rid NOT IN (SELECT rid FROM keep)),
ru AS (UPDATE {s}.ready x SET ids = keep.ids, keys = CASE WHEN x.keys IS NOT NULL THEN keep.keys END, first_id = keep.ids[1]
	FROM keep WHERE x.rid = keep.rid AND cardinality(keep.ids) < cardinality(x.ids)),
tu AS (UPDATE {s}.tasks t SET ready_batch = NULL FROM gone WHERE t.id = gone.id AND t.ready_batch = gone.rid RETURNING t.id)
SELECT count(*) FROM tu`

// detachLeasedSQL settles the leases that hold any of the tasks $1 still
// stored as leased. It runs after detachReadySQL, in a statement of its
// own: a claim that took one of them from its ready row committed before
// detachReadySQL got that row's lock, and only a later statement's
// snapshot sees its lease row.
// The lease rows are found through the ready rows their tasks came from
// (leases_batches), not by reading every lease row: with many workers
// holding leases, each heartbeat would otherwise read them all.
var detachLeasedSQL = settleSQL(`h AS MATERIALIZED (SELECT t.id, t.ready_batch FROM {s}.tasks t
	WHERE t.id = ANY($1) AND t.ready_batch IS NOT NULL),
k AS (SELECT l.id FROM {s}.leases l WHERE l.batches && ARRAY(SELECT DISTINCT h.ready_batch FROM h)
	AND l.ids && ARRAY(SELECT h.id FROM h) ORDER BY l.id FOR UPDATE)`)

// queueDetach queues the statements that detach ids on b (see detach).
func (s *Store) queueDetach(b *pgx.Batch, ids []string) {
	b.Queue(s.q(detachReadySQL), ids)
	b.Queue(s.q(detachLeasedSQL), ids)
}

// readDetached runs sql (a read of tasks by the ids $1) after detaching
// the ids, in one round trip: the read of a change about to be made.
func (s *Store) readDetached(ctx context.Context, q querier, sql string, ids []string) (map[string]*rec, error) {
	b := &pgx.Batch{}
	s.queueDetach(b, ids)
	return s.readAfter(ctx, q, b, sql, ids)
}

// readSettled runs sql (a read of tasks by the ids $1) after settling the
// leases that hold any of them, in one round trip: a read only. Tasks in
// ready rows read as what they are, ready, and stay in their rows.
func (s *Store) readSettled(ctx context.Context, q querier, sql string, ids []string) (map[string]*rec, error) {
	b := &pgx.Batch{}
	b.Queue(s.q(detachLeasedSQL), ids)
	return s.readAfter(ctx, q, b, sql, ids)
}

// readAfter runs b's statements and then sql, a read of the tasks ids.
func (s *Store) readAfter(ctx context.Context, q querier, b *pgx.Batch, sql string, ids []string) (recs map[string]*rec, err error) {
	b.Queue(sql, ids).Query(func(rows pgx.Rows) (err error) {
		recs, err = recsByID(rows)
		return err
	})
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return recs, nil
}

// detach makes the tasks ids ordinary rows (see the top of this file).
func (s *Store) detach(ctx context.Context, q querier, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	s.queueDetach(b, ids)
	return q.SendBatch(ctx, b).Close()
}

// settleLeases writes the tasks of every lease row (of queue, unless it is
// empty) as running: reads that filter, count or list by status see every
// claimed task as running afterwards.
func (s *Store) settleLeases(ctx context.Context, q querier, queue string) error {
	_, err := q.Exec(ctx, s.q(settleSQL(`k AS (SELECT l.id FROM {s}.leases l WHERE $1 = '' OR l.queue = $1 ORDER BY l.id FOR UPDATE)`)), queue)
	return err
}

// countsSQL counts tasks by queue and status, of the queues cond (on t)
// selects, with the tasks of lease rows counted as running, not as the
// ready their rows say: in one statement, one snapshot, and without
// writing anything (the dashboard and the metrics poll these counts; a
// settle would write every task in flight at each poll). cond must only
// name t.queue.
func countsSQL(cond string) string {
	return `WITH g AS (SELECT t.queue, t.status, count(*) AS n FROM {s}.tasks t WHERE ` + cond + ` GROUP BY 1, 2),
lc AS (SELECT t.queue, count(*) AS n FROM {s}.leases l, unnest(l.ids) u(id), {s}.tasks t
	WHERE t.id = u.id AND t.status = 'ready' AND t.ready_batch IS NOT NULL AND (` + cond + `) GROUP BY 1),
adj AS (SELECT queue, status, n FROM g
	UNION ALL SELECT queue, 'ready', -n FROM lc UNION ALL SELECT queue, 'running', n FROM lc)
SELECT queue, status, sum(n)::bigint FROM adj GROUP BY 1, 2 HAVING sum(n) <> 0`
}

// settleExpired settles the lease rows whose earliest deadline has
// passed, so the timeout sweep finds their tasks as running.
func (s *Store) settleExpired(ctx context.Context, q querier) error {
	_, err := q.Exec(ctx, s.q(settleSQL(`n AS (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now),
k AS (SELECT l.id FROM {s}.leases l, n WHERE l.deadline <= n.now ORDER BY l.id FOR UPDATE)`)), s.clockNow())
	return err
}

// settleQueue makes every task of queue an ordinary row: its ready rows
// are dissolved and its leases settled. UpdateQueue runs it, under the
// queue's exclusive flow gate, when the queue becomes fair: the fair
// claim reads ordinary rows only.
func (s *Store) settleQueue(ctx context.Context, q querier, queue string) error {
	b := &pgx.Batch{}
	s.queueSettleQueue(b, queue)
	return q.SendBatch(ctx, b).Close()
}

// queueSettleHead queues on b the exclusive flow path's settle: every
// lease of queue (its counts are of running rows), and its first ready
// rows in claim order, up to n tasks and the row that passes n (its pick
// reads the first ordinary tasks; what is past them it reaches by key
// through tasks_key_ready, which holds batched tasks too, or chunk by
// chunk as later claims make more ordinary). Then whether ready rows are
// left. Unlike settleQueue it costs a claim O(n), not O(backlog): a queue
// whose backlog was all in ready rows when its limits began to bind
// would otherwise stop every claim of it while a million rows are
// rewritten.
func (s *Store) queueSettleHead(b *pgx.Batch, queue string, n int, readyLeft *bool) {
	b.Queue(s.q(settleSQL(`k AS (SELECT l.id FROM {s}.leases l WHERE l.queue = $1 ORDER BY l.id FOR UPDATE)`)), queue)
	// The rows are read one at a time in claim order until they cover n
	// tasks: reading n rows to sum their sizes read (and decompressed)
	// hundreds of rows of a thousand ids each per claim behind a large
	// backlog.
	const next = `SELECT b.rid, b.priority, b.ready_at, b.first_id, b.ids FROM {s}.ready b WHERE b.queue = $1 AND `
	const order = ` ORDER BY b.priority DESC, b.ready_at, b.first_id LIMIT 1`
	b.Queue(s.q(`WITH RECURSIVE p AS (
	(SELECT b.rid, b.priority, b.ready_at, b.first_id, cardinality(b.ids)::bigint AS total FROM {s}.ready b
		WHERE b.queue = $1`+order+`)
	UNION ALL
	SELECT x.rid, x.priority, x.ready_at, x.first_id, p.total + cardinality(x.ids) FROM p CROSS JOIN LATERAL (
		SELECT u.* FROM ((`+next+`b.priority = p.priority AND (b.ready_at, b.first_id) > (p.ready_at, p.first_id)`+order+`)
		UNION ALL (`+next+`b.priority < p.priority`+order+`)) u LIMIT 1) x
	WHERE p.total < $2),
r AS (DELETE FROM {s}.ready x WHERE x.rid IN (SELECT rid FROM p) RETURNING x.rid, x.ids)
UPDATE {s}.tasks t SET ready_batch = NULL FROM r, unnest(r.ids) u(id) WHERE t.id = u.id AND t.ready_batch = r.rid`), queue, n)
	b.Queue(s.q(`SELECT EXISTS (SELECT 1 FROM {s}.ready WHERE queue = $1)`), queue).QueryRow(func(row pgx.Row) error {
		return row.Scan(readyLeft)
	})
}

// queueSettleQueue queues settleQueue's two statements on b.
func (s *Store) queueSettleQueue(b *pgx.Batch, queue string) {
	b.Queue(s.q(settleSQL(`k AS (SELECT l.id FROM {s}.leases l WHERE l.queue = $1 ORDER BY l.id FOR UPDATE)`)), queue)
	b.Queue(s.q(`WITH r AS (DELETE FROM {s}.ready WHERE queue = $1 RETURNING rid, ids)
UPDATE {s}.tasks t SET ready_batch = NULL FROM r, unnest(r.ids) u(id) WHERE t.id = u.id AND t.ready_batch = r.rid`), queue)
}

// leaseDoneSQL counts completions against their lease rows ($1 lease row
// ids, locked in order first, $2 counts); the next statement deletes the
// rows all of whose tasks are done.
const (
	leaseLockSQL = `SELECT count(*) FROM (SELECT l.id FROM {s}.leases l WHERE l.id = ANY($1) ORDER BY l.id FOR UPDATE) x`
	leaseDoneSQL = `UPDATE {s}.leases l SET done = l.done + k.n FROM unnest($1::bigint[], $2::int[]) k(lid, n) WHERE l.id = k.lid`
	leaseDropSQL = `DELETE FROM {s}.leases l WHERE l.id = ANY($1) AND l.done >= cardinality(l.ids)`
)

// countLeaseDone records completions of leased tasks (lease row id →
// tasks completed) in their lease rows and drops the rows whose tasks are
// all done. It runs after the completions committed, in a transaction of
// its own that locks lease rows only: a row it misses (a crash in between)
// is settled and dropped by the monitor at its deadline.
func (s *Store) countLeaseDone(ctx context.Context, conn *pgx.Conn, done map[int64]int32) error {
	if len(done) == 0 {
		return nil
	}
	lids := make([]int64, 0, len(done))
	for lid := range done {
		lids = append(lids, lid)
	}
	slices.Sort(lids)
	ns := make([]int32, len(lids))
	for i, lid := range lids {
		ns[i] = done[lid]
	}
	b := &pgx.Batch{}
	// Not worth a wait for the disk: a count lost in a crash only leaves
	// the rows to the monitor (above).
	b.Queue("SELECT set_config('synchronous_commit', 'off', true)")
	b.Queue(s.q(leaseLockSQL), lids)
	b.Queue(s.q(leaseDoneSQL), lids, ns)
	b.Queue(s.q(leaseDropSQL), lids)
	return conn.SendBatch(ctx, b).Close()
}

// Ready rows a plain claim locks: small batches make small rows, and a
// claim of n over rows of one task each would otherwise take n/4
// statements, each a commit. Starting from minReadyRows, a claim that got
// some but not all it wanted claims again with four times the rows (up to
// maxReadyRows); the next claim of the queue starts from the half of what
// its predecessor ended with when that sufficed, else from the same.
const (
	minReadyRows = 4
	maxReadyRows = 256
)

// readyRowLimits remembers, per queue, how many ready rows its claims lock.
type readyRowLimits struct{ m sync.Map }

func (r *readyRowLimits) get(queue string) int {
	if v, ok := r.m.Load(queue); ok {
		return v.(int)
	}
	return minReadyRows
}

// set records what the last claim of queue ended with; sufficed: it got
// all it wanted.
func (r *readyRowLimits) set(queue string, rows int, sufficed bool) {
	if sufficed {
		rows = max(rows/2, minReadyRows)
	}
	if rows == minReadyRows {
		r.m.Delete(queue)
		return
	}
	r.m.Store(queue, rows)
}

// leaseClaimSQL is the plain claim with ready rows: it takes up to $2
// tasks in claim order from both the ordinary ready tasks (tasks_claim,
// written as running as buildClaimSQL does) and the head of the queue's
// first ready rows (taken out of the rows, one lease row written for
// them, their task rows left alone). Parameters as buildClaimSQL's, and
// $7 the most ready rows to lock. Only
// the first $2 ids of the rows, in row order, are candidates (rc), and
// they are in claim order already: they are merged with the ordinary ones
// by a sort only when there are ordinary ones. (Sorting the first $2 ids
// of every row locked took half the statement's time.) gate is the
// condition under which it claims: plainLeaseGate for the plain claim,
// the verdict for the shared flow path's (claim_shared.go).
//
// The lease row holds its tasks' concurrency keys (NULL when none has
// one), so the flow paths count a key's leased tasks without settling
// them (claim_keyed.go), whatever limits the queue gets later.
func (s *Store) buildLeaseClaimSQL(gate string) string {
	c := `c AS (SELECT t.id, t.priority, t.ready_at FROM {s}.tasks t
	WHERE t.ist = 'ready' AND t.queue = $1 AND ` + gate + `
	ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED),
r AS (SELECT b.rid, b.priority, b.ready_at, b.first_id, b.ids, b.keys FROM {s}.ready b WHERE b.queue = $1 AND ` + gate + `
	ORDER BY b.priority DESC, b.ready_at, b.first_id LIMIT $7 FOR UPDATE SKIP LOCKED),
rw AS (SELECT r.rid, r.priority, r.ready_at, r.ids, coalesce(sum(cardinality(r.ids)) OVER (ORDER BY r.priority DESC,
	r.ready_at, r.first_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before FROM r),
rc AS (SELECT u.id, rw.priority, rw.ready_at, rw.rid FROM rw, unnest(rw.ids[1 : $2 - rw.before]) u(id) WHERE rw.before < $2),
pick AS (SELECT * FROM rc WHERE NOT EXISTS (SELECT 1 FROM c)
	UNION ALL (SELECT * FROM (SELECT c.id, c.priority, c.ready_at, NULL::bigint AS rid FROM c UNION ALL SELECT * FROM rc) x
		WHERE EXISTS (SELECT 1 FROM c) ORDER BY x.priority DESC, x.ready_at, x.id LIMIT $2)),
took AS (SELECT pick.rid, count(*)::int AS k FROM pick WHERE pick.rid IS NOT NULL GROUP BY pick.rid),
rd AS (DELETE FROM {s}.ready b USING took, r WHERE b.rid = took.rid AND r.rid = took.rid AND took.k >= cardinality(r.ids)),
ru AS (UPDATE {s}.ready b SET ids = r.ids[took.k + 1:], keys = r.keys[took.k + 1:], first_id = r.ids[took.k + 1] FROM took, r
	WHERE b.rid = took.rid AND r.rid = took.rid AND took.k < cardinality(r.ids)),
` + leaseCTEs(`ARRAY(SELECT pick.id FROM pick WHERE pick.rid IS NOT NULL)`, `NULL::int`)
	sql := s.assignSQL(c, "")
	// The assignment of the ordinary tasks picked.
	sql = strings.Replace(sql, "t.id = ANY (ARRAY(SELECT c.id FROM c))", "t.id = ANY (ARRAY(SELECT pick.id FROM pick WHERE pick.rid IS NULL))", 1)
	return withLeased(sql)
}

// leaseCTEs are the CTEs of a claim that write one lease row for the
// tasks ids (an array expression: tasks the claim took out of its ready
// rows): sel, their rows as the claim leaves them (dl: the deadline), l,
// the lease row, and wl, their assignment events. ids must name tasks
// still stored as ready-batch tasks (rows the claim holds locked). kmax
// is the lease row's kmax (an expression; NULL: not known).
func leaseCTEs(ids, kmax string) string {
	return `sel AS (SELECT t.*, ` + leasedDeadline("n.now", "$5::bigint") + ` AS dl FROM {s}.tasks t, n
	WHERE t.id = ANY (` + ids + `) AND t.status = n.ready AND t.ready_batch IS NOT NULL),
l AS (INSERT INTO {s}.leases (queue, worker, created, timeout_ns, deadline, ids, batches, keys, kmax)
	SELECT $1, $4, n.now, $5::bigint, min(sel.dl), array_agg(sel.id), array_agg(DISTINCT sel.ready_batch),
		CASE WHEN count(sel.concurrency_key) > 0 THEN array_agg(sel.concurrency_key) END, ` + kmax + `
	FROM sel, n GROUP BY n.now),
wl AS (SELECT 'TaskAssignment'::text AS kind, t.id, t.queue, 'running'::text AS status, t.version + 1 AS version, n.now AS time
	FROM sel t, n)`
}

// withLeased makes an assign statement (assignSQL's, whose c carries
// leaseCTEs) also return the leased tasks' rows as the claim leaves them
// and emit their assignment events.
func withLeased(sql string) string {
	sql = strings.Replace(sql, ", e AS (SELECT 'TaskAssignment'::text AS kind, id, queue, status, version, updated AS time FROM upd)",
		", e AS (SELECT 'TaskAssignment'::text AS kind, id, queue, status, version, updated AS time FROM upd UNION ALL SELECT * FROM wl)", 1)
	return sql + ` UNION ALL SELECT ` + leasedCols + ` FROM sel t, n`
}

// plainLeaseGate is the plain claim's condition: the queue is neither
// paused nor flow-limited (those claims take the flow paths).
const plainLeaseGate = `NOT EXISTS (SELECT 1 FROM {s}.queues q WHERE q.name = $1 AND (q.paused OR q.flow_limited))`

// leasedCols is colsClaim for a task a lease row just took: its row as the
// claim would have written it. Such a task is always fresh (only the
// merged submit writes ready rows), so its history is just the assignment,
// which the caller adds.
var leasedCols = strings.NewReplacer(
	"t.status", "'running'::text",
	"t.updated", "n.now",
	"t.owner", "$4::text",
	"t.deadline", "t.dl",
	"t.lease", "t.lease + 1",
	"t.attempts", "t.attempts + 1",
	"t.version", "t.version + 1",
	"t.history_count", "t.history_count + 1",
	"t.assign_seq", "t.history_count + 1",
	"t.claimed_at", "n.now",
).Replace(colsBase) + `, t.spec, t.result, t.errors, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb`
