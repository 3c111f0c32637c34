package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// The keyed path: a queue whose key limits are under the shared path's
// margin but whose max_running, if any, is far. Keyed claims run side by
// side: each takes the gate shared, one of keyedSlots slots, and every one
// of the queue's keyedBuckets key-bucket locks, exclusively those the node
// marked tight and shared the others; then one statement, with a snapshot
// taken after the locks, counts each limited key's running and leased
// tasks and admits per key: up to its limit in a bucket held exclusively,
// at most m = max(1, L / (2 × keyedSlots)) and only if running +
// keyedSlots × m ≤ L in a bucket held shared. Why no key exceeds its
// limit, which buckets are tight, how the leased part is counted and when
// a claim hands over to the exclusive path: docs/internals/postgres-claims.md,
// "The keyed path".

// keyedSlots is how many keyed claims of one queue may be in flight at
// once. Each holds keyedBuckets bucket locks, entries in the server's lock
// table (sized by max_locks_per_transaction × max_connections).
const keyedSlots = 4

// keyedBuckets is how many lock buckets a queue's concurrency keys are
// hashed into: the bits of a 64-bit mask. With keyedSlots it bounds a
// queue's keyed claims to keyedSlots × keyedBuckets (256) advisory locks
// at a time, about a twenty-fifth of the lock table of a server with the
// default settings.
const keyedBuckets = 64

// keyedNarrow is how many candidates a keyed claim reads while its
// queue's keys bind: for a second (staticRecheck) after a keyed claim of
// the queue on this node held back more than half of what it read (its
// keys at their limits). Then the keys' limits, not the claims, decide how
// many tasks run, and claims that each take all the keys free at the
// moment leave the other claimers nothing until those tasks finish;
// smaller claims keep them taking turns.
const keyedNarrow = 256

// sharedKeyed is the verdict for a queue on the keyed path.
const sharedKeyed = "keyed"

// keyedBucketSQL takes the queue's bucket locks in bucket order ($1 the
// locks' name, $2 the mask of buckets to take exclusively).
var keyedBucketSQL = `SELECT count(CASE WHEN ($2::bigint >> b) & 1 = 1 THEN pg_advisory_xact_lock(hashtext($1), b)
	ELSE pg_advisory_xact_lock_shared(hashtext($1), b) END) FROM generate_series(0, ` + strconv.Itoa(keyedBuckets-1) + `) b`

// keyedHead and keyedTail select the keyed claim's ordinary candidates:
// the first ready tasks of the queue not in ready rows, locked, if the
// verdict said keyed. They go round a condition on the claim order.
const keyedHead = `SELECT t.id, t.concurrency_key AS key, t.priority, t.ready_at FROM {s}.tasks t
	WHERE t.ist = 'ready' AND t.queue = $1 AND `

const keyedTail = `
	AND current_setting('norn.flow_shared', true) = 'keyed'
	ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED`

// keyedCandSQL, after the ordinary candidates (o), adds those of the
// queue's first $7 ready rows (locked SKIP LOCKED, as the plain claim
// locks them: batches.go), with their keys from the rows' keys, and merges
// the two in claim order into cand (rid: the ready row of a task taken
// from one, NULL for an ordinary task). As in the plain claim, the rows'
// first ids are in claim order already and are sorted with the ordinary
// ones only when there are any.
const keyedCandSQL = `,
rr AS (SELECT b.rid, b.priority, b.ready_at, b.first_id, b.ids, b.keys FROM {s}.ready b
	WHERE b.queue = $1 AND current_setting('norn.flow_shared', true) = 'keyed'
	ORDER BY b.priority DESC, b.ready_at, b.first_id LIMIT $7 FOR UPDATE SKIP LOCKED),
rw AS (SELECT rr.*, coalesce(sum(cardinality(rr.ids)) OVER (ORDER BY rr.priority DESC,
	rr.ready_at, rr.first_id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before FROM rr),
rc AS (SELECT u.id, u.key, rw.priority, rw.ready_at, rw.rid FROM rw,
	unnest(rw.ids[1 : $2 - rw.before], rw.keys[1 : $2 - rw.before]) u(id, key) WHERE rw.before < $2),
cand AS (SELECT * FROM rc WHERE NOT EXISTS (SELECT 1 FROM o)
	UNION ALL (SELECT * FROM (SELECT o.id, o.key, o.priority, o.ready_at, NULL::bigint AS rid FROM o UNION ALL SELECT * FROM rc) x
		WHERE EXISTS (SELECT 1 FROM o) ORDER BY x.priority DESC, x.ready_at, x.id LIMIT $2))`

// keyedPickSQL admits candidates (ka.adm). The claim statements run with
// hash and merge joins off (a cached generic plan of index scans and
// nested loops), so nothing here joins: per-key values are read once per
// key, at its first candidate, and spread over its candidates with
// windows. r1 ranks each key's candidates in claim order (rn); r2 reads
// the key's limit (its own only if the queue has keys with their own
// limits: one probe per claim, not per key); lo counts
// every key's entries in the queue's lease rows, read per key as a jsonb
// object; r counts a limited key's running rows (run0) and entries
// (ent0); kw spreads them, with the key's candidates (nk) and whether its
// bucket is held exclusively ($8, the mask; ex); lt counts, for the keys
// of exclusive buckets whose count on entries binds, their entries whose
// task is still leased (its row still ready in a ready batch; a completed
// task's row is not); ka admits (see the top of this file; $9 is
// keyedSlots, the m of a shared bucket is greatest(1, lim / (2 × $9))).
// qf is the case where no key can be near its limit (every bucket shared,
// no key limits of their own, and the queue's running rows with a key,
// at most L of them, plus the sum of its lease rows' kmax plus $9 × m fit
// L): then no key is counted, and unless a key has more than m candidates
// (dup, a hash aggregate) none is ranked either, and every candidate is
// admitted. Each CTE is computed only if a branch of ka that runs reads
// it.
const keyedPickSQL = `,
r1 AS (SELECT cand.*, row_number() OVER (PARTITION BY cand.key ORDER BY cand.priority DESC, cand.ready_at, cand.id) AS rn FROM cand),
r2 AS (SELECT r1.*, CASE WHEN r1.key IS NOT NULL AND r1.rn = 1 THEN coalesce(
		CASE WHEN (SELECT EXISTS (SELECT 1 FROM {s}.queue_keys k WHERE k.queue = $1 AND k.lim > 0)) THEN
			(SELECT nullif(k.lim, 0) FROM {s}.queue_keys k WHERE k.queue = $1 AND k.key = r1.key) END,
		(SELECT nullif(q.key_limit, 0) FROM {s}.queues q WHERE q.name = $1)) END AS lim0 FROM r1),
lo AS MATERIALIZED (SELECT coalesce(jsonb_object_agg(z.k, z.n), '{}'::jsonb) AS o FROM (SELECT u.k, count(*) AS n
	FROM {s}.leases l, unnest(l.keys) u(k) WHERE l.queue = $1 AND l.keys IS NOT NULL AND u.k IS NOT NULL GROUP BY u.k) z),
r AS MATERIALIZED (SELECT r2.*, CASE WHEN r2.lim0 IS NOT NULL THEN (SELECT count(*) FROM {s}.tasks t
	WHERE t.queue = $1 AND t.ist = 'running' AND t.running_key = r2.key) END AS run0,
	CASE WHEN r2.lim0 IS NOT NULL THEN coalesce(((SELECT lo.o FROM lo) ->> r2.key)::bigint, 0) END AS ent0 FROM r2),
kw AS MATERIALIZED (SELECT r.id, r.key, r.rn, r.rid,
	$8::bigint <> 0 AND ($8::bigint >> (hashtextextended(r.key, 0) & {bm})::int) & 1 = 1 AS ex,
	max(r.lim0) OVER k AS lim, max(r.run0) OVER k AS rows, max(r.ent0) OVER k AS ent, count(*) OVER k AS nk
	FROM r WINDOW k AS (PARTITION BY r.key)),
lt AS MATERIALIZED (SELECT coalesce(jsonb_object_agg(z.k, z.n), '{}'::jsonb) AS o FROM (SELECT u.k, count(*) AS n
	FROM {s}.leases l, unnest(l.ids, l.keys) u(id, k), {s}.tasks t
	WHERE l.queue = $1 AND l.keys IS NOT NULL
	AND u.k = ANY (ARRAY(SELECT DISTINCT kw.key FROM kw WHERE kw.ex AND kw.rows + kw.ent + kw.nk > kw.lim))
	AND t.id = u.id AND t.status = 'ready' AND t.ready_batch IS NOT NULL GROUP BY u.k) z),
qf AS MATERIALIZED (SELECT $8::bigint = 0 AND q.key_limit > 0
	AND NOT EXISTS (SELECT 1 FROM {s}.queue_keys k WHERE k.queue = $1 AND k.lim > 0)
	AND (SELECT count(*) FROM (SELECT 1 FROM {s}.tasks t WHERE t.queue = $1 AND t.ist = 'running'
		AND t.running_key IS NOT NULL LIMIT q.key_limit) x)
	+ (SELECT coalesce(sum(coalesce(l.kmax, cardinality(l.ids))), 0) FROM {s}.leases l WHERE l.queue = $1 AND l.keys IS NOT NULL)
	+ $9 * greatest(1, q.key_limit / (2 * $9)) <= q.key_limit AS fast,
	greatest(1, q.key_limit / (2 * $9)) AS m FROM {s}.queues q WHERE q.name = $1),
dup AS MATERIALIZED (SELECT cand.key FROM cand, qf WHERE qf.fast AND cand.key IS NOT NULL
	GROUP BY cand.key, qf.m HAVING count(*) > qf.m LIMIT 1),
ka AS MATERIALIZED (SELECT cand.id, cand.key, cand.rid, qf.m AS rn, false AS ex, true AS adm FROM cand, qf
	WHERE qf.fast AND NOT EXISTS (SELECT 1 FROM dup)
	UNION ALL
	SELECT r1.id, r1.key, r1.rid, r1.rn, false, r1.key IS NULL OR r1.rn <= qf.m FROM r1, qf
	WHERE qf.fast AND EXISTS (SELECT 1 FROM dup)
	UNION ALL
	SELECT kw.id, kw.key, kw.rid, kw.rn, kw.ex, kw.key IS NULL OR kw.lim IS NULL OR CASE
	WHEN NOT kw.ex THEN kw.rn <= greatest(1, kw.lim / (2 * $9)) AND kw.rows + kw.ent + $9 * greatest(1, kw.lim / (2 * $9)) <= kw.lim
	WHEN kw.rows + kw.ent + kw.nk > kw.lim THEN kw.rn <= kw.lim - kw.rows - coalesce(((SELECT lt.o FROM lt) ->> kw.key)::bigint, 0)
	ELSE true END AS adm FROM kw WHERE NOT coalesce((SELECT qf.fast FROM qf), false)),
c AS (SELECT ka.id FROM ka WHERE ka.adm AND ka.rid IS NULL LIMIT $2)`

// keyedLeaseCTE takes the admitted candidates of ready rows out of their
// rows and leases them (leaseCTEs). A row's candidates are a prefix of
// its ids (nc of them); what the claim held back of that prefix stays at
// the row's head, in order, before the ids it did not read. The writes
// read the row as rr locked it, never as the statement's snapshot has it:
// a claim that committed a change to the row after that snapshot was
// taken and before the lock was granted made rr the newer version (a
// locking read follows the update), while conditions and expressions on
// the written row itself would be evaluated on the snapshot's older one —
// which once made a claim leave the tasks it took in their row, to be
// taken again (TestFlowKeyedPathAtTheLimit, keyed claims side by side). meta tells
// the caller (norn.keyed_meta: candidates read, the first ordinary one,
// the mask of shared buckets with a candidate held back), read by the
// next statement.
const keyedLeaseCTE = `,
took AS (SELECT ka.rid, count(*) FILTER (WHERE ka.adm) AS na, count(*) AS nc,
	array_agg(ka.id ORDER BY ka.id) FILTER (WHERE NOT ka.adm) AS held,
	array_agg(ka.key ORDER BY ka.id) FILTER (WHERE NOT ka.adm) AS hkeys
	FROM ka WHERE ka.rid IS NOT NULL GROUP BY ka.rid),
rd AS (DELETE FROM {s}.ready b USING took, rr WHERE b.rid = took.rid AND rr.rid = took.rid AND took.na > 0
	AND took.held IS NULL AND took.nc >= cardinality(rr.ids)),
ru AS (UPDATE {s}.ready b SET ids = coalesce(took.held, '{}'::text[]) || rr.ids[took.nc + 1:],
	keys = CASE WHEN rr.keys IS NOT NULL THEN coalesce(took.hkeys, '{}'::text[]) || rr.keys[took.nc + 1:] END,
	first_id = coalesce(took.held[1], rr.ids[took.nc + 1])
	FROM took, rr WHERE b.rid = took.rid AND rr.rid = took.rid AND took.na > 0
	AND NOT (took.held IS NULL AND took.nc >= cardinality(rr.ids))),
meta AS (SELECT set_config('norn.keyed_meta', (SELECT count(*) FROM cand)::text || ' ' ||
	coalesce((SELECT bit_or(1::bigint << (hashtextextended(ka.key, 0) & {bm})::int) FROM ka WHERE NOT ka.adm AND NOT ka.ex), 0)::text || ' ' ||
	coalesce((SELECT o.id FROM o ORDER BY o.priority DESC, o.ready_at, o.id LIMIT 1), ''), true) AS v),
`

// keyedMetaSQL reads what the claim statement noted in norn.keyed_meta.
const keyedMetaSQL = `SELECT current_setting('norn.keyed_meta', true)`

// buildKeyedSQL builds the keyed claim statement, from the queue's head
// and from a claim hint ($10–$12, as buildClaimFromSQL).
func (s *Store) buildKeyedSQL() {
	pick := strings.ReplaceAll(keyedPickSQL+keyedLeaseCTE, "{bm}", strconv.Itoa(keyedBuckets-1)) +
		leaseCTEs(`ARRAY(SELECT ka.id FROM ka WHERE ka.adm AND ka.rid IS NOT NULL)`,
			`(SELECT max(ka.rn)::int FROM ka WHERE ka.adm AND ka.rid IS NOT NULL AND ka.key IS NOT NULL)`)
	build := func(o string) string {
		sql := s.buildAssignKeyedSQL(`o AS (` + o + `)` + keyedCandSQL + pick)
		// The statement's result waits for meta.
		sql = strings.Replace(sql, "SELECT upd.* FROM upd WHERE (SELECT count(*) FROM nt) >= 0",
			"SELECT upd.* FROM upd WHERE (SELECT count(*) FROM nt) >= 0 AND (SELECT count(*) FROM meta) >= 0", 1)
		return withLeased(sql)
	}
	s.flow.keyedSQL = build(keyedHead + `true` + keyedTail)
	s.flow.keyedFromSQL = build(`SELECT u.* FROM (
	SELECT a.* FROM (` + keyedHead + `t.priority = $10 AND (t.ready_at, t.id) >= ($11::timestamptz, $12::text)` + keyedTail + `) a
	UNION ALL
	SELECT b.* FROM (` + keyedHead + `t.priority < $10` + keyedTail + `) b) u LIMIT $2`)
}

// keyedRead is what a keyed claim read: candidates, as many as it asked
// for at most (limit); hinted, whether it read them from the claim hint;
// held, the shared buckets in which it held back a candidate.
type keyedRead struct {
	read, limit int
	hinted      bool
	held        uint64
}

// claimKeyed tries the keyed path in one round trip: the gate and a slot,
// the bucket locks, the verdict, and the claim (nothing unless the
// verdict is keyed), in one implicit transaction. It reads as many
// candidates as it wants, or keyedNarrow while the queue's keys bind. A
// claim reading from the head never uses the hint.
func (s *Store) claimKeyed(ctx context.Context, conn *pgx.Conn, c claimCall, head bool) (out []*rec, verdict string, kr keyedRead, err error) {
	slots, cap := s.flow.margins()
	s.flow.sqlOnce.Do(s.buildFlowSQL)
	c.want = min(c.want, cap)
	kslots := min(keyedSlots, slots)
	tight := s.flow.tight(c.queue)
	b := &pgx.Batch{}
	b.Queue(sharedLockSQL, s.channel+"/flow/"+c.queue, s.channel+"/flowslot/"+c.queue, kslots)
	b.Queue(keyedBucketSQL, s.channel+"/key/"+c.queue, int64(tight))
	b.Queue(s.q(sharedVerdictSQL), c.queue, slots*cap, false, int64(c.want)).QueryRow(func(row pgx.Row) (err error) {
		verdict, _, err = scanVerdict(row)
		return err
	})
	gen := s.wake.wait()
	kr.limit = c.want
	if s.flow.known(&s.flow.narrow, c.queue) {
		kr.limit = min(c.want, keyedNarrow)
	}
	readyRows := s.readyRows.get(c.queue)
	sql, args := s.flow.keyedSQL, []any{c.queue, kr.limit, s.clockNow(), c.worker, c.timeout, s.cfg.HistoryLimit, readyRows, int64(tight), kslots}
	if s.listening.Load() && !head {
		if h, ok := s.hints.get(c.queue, gen, time.Now()); ok {
			sql, args, kr.hinted = s.flow.keyedFromSQL, append(args, h.priority, h.readyAt, h.id), true
		}
	}
	var meta *string
	b.Queue(sql, args...).Query(func(rows pgx.Rows) (err error) {
		out, err = collectRecs(rows)
		return err
	})
	b.Queue(keyedMetaSQL).QueryRow(func(row pgx.Row) error { return row.Scan(&meta) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, "", kr, err
	}
	sortClaimed(out)
	var first *rec
	if len(out) > 0 {
		first = out[0]
	}
	var firstCand string
	if verdict == sharedKeyed && meta != nil {
		f := strings.SplitN(*meta, " ", 3)
		if len(f) == 3 {
			kr.read, _ = strconv.Atoi(f[0])
			held, _ := strconv.ParseInt(f[1], 10, 64)
			kr.held = uint64(held)
			firstCand = f[2]
		}
	}
	// The first claimed task becomes the hint only if it was the first
	// ordinary candidate: ahead of it, ready tasks are then locked by
	// other claims. A candidate held back (its key at its limit) must be
	// read again from the head, and a task taken from a ready row is not
	// in the index the hint is a place in.
	if first != nil && first.ID == firstCand {
		s.setHint(c.queue, gen, first)
	}
	if verdict == sharedKeyed {
		if tight == 0 && len(out) > 0 {
			s.flow.keyedSharedClaims.Add(1)
		}
		if kr.held == 0 && 2*(kr.read-len(out)) > kr.read {
			// Marked for a while, not until the next claim that admits all
			// it reads: while keys bind, narrow claims do admit nearly all.
			// (Only by what it held back in buckets it held exclusively:
			// what shared buckets hold back is their share, not a limit.)
			s.flow.mark(&s.flow.narrow, c.queue, true)
		}
		if kr.held&^tight != 0 {
			s.flow.markTight(c.queue, tight|kr.held)
		}
		// Fewer candidates than it asked for: the ready rows it locked
		// may have run out first; the next claim locks more.
		if kr.read < kr.limit {
			readyRows = min(readyRows*4, maxReadyRows)
		}
		s.readyRows.set(c.queue, readyRows, kr.read >= kr.limit)
	}
	return out, verdict, kr, nil
}

// claimKeyedOrExclusive claims a queue known to be on the keyed path.
// done false: the claim goes on to the exclusive path (the claim read a
// full window of candidates and could admit none of them, or the verdict
// is no longer keyed).
func (s *Store) claimKeyedOrExclusive(ctx context.Context, conn *pgx.Conn, c claimCall) ([]*norn.Task, bool, error) {
	out, verdict, kr, err := s.claimKeyed(ctx, conn, c, false)
	if err == nil && verdict == sharedKeyed && len(out) == 0 && kr.hinted {
		// Nothing past the hint; ready tasks ahead of it, locked by other
		// claims, may have been released since.
		out, verdict, kr, err = s.claimKeyed(ctx, conn, c, true)
	}
	last := len(out) // what the last claim got
	if err == nil && verdict == sharedKeyed && len(out) < c.want && kr.held != 0 {
		// It held candidates back in buckets it held shared: those are
		// tight now, and a claim holding them exclusively counts their
		// keys exactly and fills them to their limits.
		var more []*rec
		rest := c
		rest.want -= len(out)
		more, verdict, kr, err = s.claimKeyed(ctx, conn, rest, true)
		if err != nil && len(out) > 0 {
			// What the first claim took is committed: hand it out; the
			// error comes back at the next claim.
			return claimedTasks(out), true, nil
		}
		out, last = append(out, more...), len(more)
		// Both claims' tasks, in claim order.
		sortClaimed(out)
		if verdict != sharedKeyed && len(out) > 0 {
			return claimedTasks(out), true, nil
		}
	}
	if err != nil {
		return nil, false, err
	}
	if verdict != sharedKeyed {
		s.flow.mark(&s.flow.keyed, c.queue, false)
		s.afterVerdict(c.queue, verdict, pathKeyed)
		return nil, false, nil
	}
	s.flow.claims[pathKeyed].Add(1)
	if len(out) == 0 && kr.read >= kr.limit {
		return nil, false, nil
	}
	if len(out) < c.want {
		// The candidates the last claim read and left ready were held
		// back by their keys' limits.
		s.noteHeld(c.queue, norn.QueueFlow{}, norn.Bucket{}, c.want, len(out), kr.read-last, -1, -1)
	}
	return claimedTasks(out), true, nil
}

// tight is the mask of queue's buckets its keyed claims hold exclusively
// (see the top of this file): those in which a claim held back a
// candidate less than staticRecheck ago.
func (f *flowState) tight(queue string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tightBuckets[queue]
	if !ok || time.Now().After(t.until) {
		return 0
	}
	return t.mask
}

// markTight sets queue's tight buckets to mask, for staticRecheck.
func (f *flowState) markTight(queue string, mask uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tightBuckets == nil {
		f.tightBuckets = map[string]tightMark{}
	}
	f.tightBuckets[queue] = tightMark{mask: mask, until: time.Now().Add(f.recheckFor())}

}

// tightMark is a queue's tight buckets and until when they are.
type tightMark struct {
	mask  uint64
	until time.Time
}
