package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// The keyed path: a flow-limited queue with key limits under the shared
// path's margin (a key_limit, or a key's own limit, under flowSlots ×
// MaxClaim) whose max_running, if any, is far. The shared path's margin
// would rule such a queue out for good and send every claim to the
// exclusive path, one at a time across the cluster, although a key limit
// of 1 or 10 over a thousand keys binds a few keys at a time. Keyed
// claims run concurrently instead, and count each key exactly:
//
//   - A keyed claim takes the gate in shared mode and one of keyedSlots
//     slot locks (the first keyedSlots of the shared path's slots, so the
//     shared path's bound on max_running holds for keyed claims too: the
//     verdict writes their slot rows as it does for shared claims).
//   - A first statement locks its candidates (the first ready tasks, as
//     many as the claim wants; SKIP LOCKED, from the claim hint when there
//     is one) and takes the advisory lock of each key bucket its limited
//     keys fall in (keyedBuckets of them per queue, by a hash of the key),
//     waiting while another claim holds one, in the order of the locks'
//     numbers: two claims never wait for each other in a cycle.
//     It passes the candidates on to the next statement in
//     transaction-local settings, with each key's limit.
//   - A second statement, whose snapshot is taken after those bucket locks
//     are held, counts each limited key's running tasks (tasks_running_key,
//     an index probe per key: every running task of a key is in it, since
//     keyed and exclusive claims write running_key and UpdateQueue writes
//     it for the tasks that were running when the queue got key limits)
//     and admits, per key of limit L with r running, its first L − r
//     candidates in claim order.
//
// Why a key never exceeds its limit: every keyed claim that admitted
// tasks of key k held the lock of k's bucket from before its count's
// snapshot until its commit, and a transaction's commit is visible before
// its locks are released. So the claims that admit tasks of k follow one
// another, and
// each counts every task of k the ones before it admitted (or finds them
// finished). An exclusive claim holds the gate alone, so no keyed claim is
// in flight when it counts; plain and shared claims do not claim a queue
// whose verdict is keyed; a change of the limits waits for every claim in
// flight (UpdateQueue takes the gate exclusively). Completions and the
// other ways out of running take no lock: they only lower the count.
//
// Why claims wait for a key instead of leaving it to the claim that holds
// it: with few keys (ten tenants, say) every claim's window holds all of
// them, so a claim that left held keys alone admitted nothing and went to
// the exclusive path, one claim at a time behind the gate; claims of one
// key follow one another anyway. Measured in docs/benchmarks.md ("Keyed
// claims wait for a held key").
//
// Why buckets rather than a lock per key: a lock per key made a claim's
// locks grow with its keys, so a claim read at most 256 candidates to
// bound its entries in the server's lock table, and over 1,000 keys it
// admitted about 256 tasks where a plain claim takes 1,000 (a quarter of
// the tasks per claim statement and completion batch). With buckets a
// claim holds at most keyedBuckets locks however many keys it reads.
// Claims over many keys then touch every bucket and follow one another,
// as claims over few keys always did. Measured in docs/benchmarks.md
// ("Key locks by bucket").
//
// A claim whose candidates were all held back (their keys at their limits)
// while there may be more ready tasks past them
// (it read as many as it wanted) claims on the exclusive path instead,
// whose pick skips the keys at their limits: a key's backlog never stops
// another key's tasks behind it.

// keyedSlots is how many keyed claims of one queue may be in flight at
// once. Each holds up to keyedBuckets bucket locks, entries in the
// server's lock table (sized by max_locks_per_transaction ×
// max_connections).
const keyedSlots = 4

// keyedBuckets is how many lock buckets a queue's concurrency keys are
// hashed into (a power of two). With keyedSlots it bounds a queue's keyed
// claims to keyedSlots × keyedBuckets (256) advisory locks at a time,
// about a twenty-fifth of the lock table of a server with the default
// settings. More buckets let claims over a few dozen keys wait for each
// other less, for more locks per claim.
const keyedBuckets = 64

// keyedNarrow is how many candidates a keyed claim reads while its
// queue's keys bind: for a second (staticRecheck) after a keyed claim of
// the queue on this node held back more than half of what it read (its
// keys at their limits). Then the keys' limits, not the claims, decide how
// many tasks run, and claims that each take all the keys free at the
// moment leave the other claimers nothing until those tasks finish;
// smaller claims keep them taking turns. Measured in docs/benchmarks.md ("Key locks by bucket").
const keyedNarrow = 256

// sharedKeyed is the verdict for a queue on the keyed path.
const sharedKeyed = "keyed"

// keyedHead and keyedTail select the keyed claim's candidates: the first
// ready tasks of the queue, locked, if the verdict said keyed. They go
// round a condition on the claim order (buildKeyedSQL).
const keyedHead = `SELECT t.id, t.concurrency_key AS key, t.priority, t.ready_at FROM {s}.tasks t
	WHERE t.status = 'ready' AND t.ready_batch IS NULL AND t.queue = $1 AND `

const keyedTail = `
	AND current_setting('norn.flow_shared', true) = 'keyed'
	ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED`

// keyedLockSQL is the first statement's tail, after the candidates
// (cand). The claim's statements run with hash and merge joins off (a
// cached generic plan of index scans and nested loops), so nothing here
// joins, and per-key values are spread over a key's candidates with
// windows in the second statement. r1 ranks each key's candidates in
// claim order (rn); r2 reads, once per key (at its first candidate), its
// limit (its own only if the queue has keys with their own limits: one
// probe per claim, not per key); lk takes the lock of each bucket a
// limited key falls in ($3: the locks' name prefix), once (r2 is
// materialized, the buckets distinct), in the order of the locks' numbers
// (PostgreSQL evaluates a volatile select-list function after the sort),
// and r3 makes every row wait for lk. Every candidate goes on in
// norn.keyed_* (ids, keys, ranks, and at each key's first candidate its
// limit, as arrays). It returns how many candidates it read and the first
// of them in claim order. {bm} is the bucket mask, keyedBuckets − 1.
const keyedLockSQL = `,
r1 AS (SELECT cand.*, row_number() OVER (PARTITION BY cand.key ORDER BY cand.priority DESC, cand.ready_at, cand.id) AS rn FROM cand),
r2 AS MATERIALIZED (SELECT r1.*, CASE WHEN r1.key IS NOT NULL AND r1.rn = 1 THEN coalesce(
		CASE WHEN (SELECT EXISTS (SELECT 1 FROM {s}.queue_keys k WHERE k.queue = $1 AND k.lim > 0)) THEN
			(SELECT nullif(k.lim, 0) FROM {s}.queue_keys k WHERE k.queue = $1 AND k.key = r1.key) END,
		(SELECT nullif(q.key_limit, 0) FROM {s}.queues q WHERE q.name = $1)) END AS lim0 FROM r1),
lk AS MATERIALIZED (SELECT pg_advisory_xact_lock(l.h) FROM
	(SELECT DISTINCT hashtextextended($3 || (hashtextextended(r2.key, 0) & {bm})::text, 0) AS h
	FROM r2 WHERE r2.lim0 IS NOT NULL) l ORDER BY l.h),
r3 AS (SELECT r2.* FROM r2 WHERE (SELECT count(*) FROM lk) >= 0)
SELECT (SELECT count(*) FROM cand), (SELECT cand.id FROM cand ORDER BY cand.priority DESC, cand.ready_at, cand.id LIMIT 1),
	set_config('norn.keyed_ids', coalesce(array_agg(r3.id)::text, '{}'), true),
	set_config('norn.keyed_keys', coalesce(array_agg(r3.key)::text, '{}'), true),
	set_config('norn.keyed_rn', coalesce(array_agg(r3.rn)::text, '{}'), true),
	set_config('norn.keyed_lim', coalesce(array_agg(r3.lim0)::text, '{}'), true)
FROM r3`

// keyedAdmitCTE is the second statement's pick (c), with a snapshot that
// sees every claim that held a key's lock before this one: x is what the
// first statement passed on; r counts the running tasks of each limited
// key, once per key (at its first candidate), materialized so that each
// is counted once; kw spreads limit and count over each key's candidates;
// c admits the tasks without a key or limit, and a limited key's first
// lim − running candidates.
const keyedAdmitCTE = `x AS (SELECT * FROM unnest(current_setting('norn.keyed_ids', true)::text[],
	current_setting('norn.keyed_keys', true)::text[], current_setting('norn.keyed_rn', true)::int[],
	current_setting('norn.keyed_lim', true)::int[])
	AS x(id, key, rn, lim0)),
r AS MATERIALIZED (SELECT x.*, CASE WHEN x.lim0 IS NOT NULL THEN (SELECT count(*) FROM {s}.tasks t
	WHERE t.queue = $1 AND t.status = 'running' AND t.running_key = x.key) END AS run0 FROM x),
kw AS (SELECT r.id, r.key, r.rn, max(r.lim0) OVER k AS lim, max(r.run0) OVER k AS running
	FROM r WINDOW k AS (PARTITION BY r.key)),
c AS (SELECT kw.id FROM kw WHERE kw.key IS NULL OR kw.lim IS NULL OR kw.rn <= kw.lim - kw.running LIMIT $2)`

// buildKeyedSQL builds the keyed claim's two statements: the candidates
// and bucket locks, from the queue's head and from a claim hint (as
// buildClaimFromSQL; $4–$6 here), and the pick with its assignment.
func (s *Store) buildKeyedSQL() {
	lockSQL := strings.ReplaceAll(keyedLockSQL, "{bm}", strconv.Itoa(keyedBuckets-1))
	s.flow.keyedSQL = s.q(`WITH cand AS (` + keyedHead + `true` + keyedTail + `)` + lockSQL)
	s.flow.keyedFromSQL = s.q(`WITH cand AS (SELECT u.* FROM (
	SELECT a.* FROM (` + keyedHead + `t.priority = $4 AND (t.ready_at, t.id) >= ($5::timestamptz, $6::text)` + keyedTail + `) a
	UNION ALL
	SELECT b.* FROM (` + keyedHead + `t.priority < $4` + keyedTail + `) b) u LIMIT $2)` + lockSQL)
	s.flow.keyedAdmitSQL = s.buildAssignKeyedSQL(keyedAdmitCTE)
}

// keyedRead is what a keyed claim read: candidates, as many as it asked
// for at most (limit); hinted, whether it read them from the claim hint.
type keyedRead struct {
	read, limit int
	hinted      bool
}

// claimKeyed tries the keyed path in one round trip: the gate and a slot,
// the verdict, the candidates and bucket locks (nothing unless the
// verdict is keyed) and the pick with its claim, in one implicit
// transaction. It reads as many candidates as it wants, or keyedNarrow
// while the queue's keys bind. A claim reading from the head never uses
// the hint.
func (s *Store) claimKeyed(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64, head bool) (out []*norn.Task, verdict string, kr keyedRead, err error) {
	slots, cap := s.flow.margins()
	s.flow.sqlOnce.Do(s.buildFlowSQL)
	want = min(want, cap)
	b := &pgx.Batch{}
	b.Queue(sharedLockSQL, s.channel+"/flow/"+queue, s.channel+"/flowslot/"+queue, min(keyedSlots, slots))
	b.Queue(s.q(sharedVerdictSQL), queue, slots*cap, false, int64(want))
	gen := s.wake.wait()
	kr.limit = want
	if s.flow.known(&s.flow.narrow, queue) {
		kr.limit = min(want, keyedNarrow)
	}
	sql, args := s.flow.keyedSQL, []any{queue, kr.limit, s.channel + "/key/" + queue + "/"}
	if s.listening.Load() && !head {
		if h, ok := s.hints.get(queue, gen, time.Now()); ok {
			sql, args, kr.hinted = s.flow.keyedFromSQL, append(args, h.priority, h.readyAt, h.id), true
		}
	}
	b.Queue(sql, args...)
	b.Queue(s.flow.keyedAdmitSQL, queue, want, s.clockNow(), worker, timeout, s.cfg.HistoryLimit)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, "", kr, err
	}
	verdict, _, err = scanVerdict(br.QueryRow())
	if err != nil {
		return nil, "", kr, err
	}
	var n int64
	var firstCand *string
	if err := br.QueryRow().Scan(&n, &firstCand, nil, nil, nil, nil); err != nil {
		return nil, "", kr, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, "", kr, err
	}
	out, first, err := collectClaimed(rows)
	if err != nil {
		return nil, "", kr, err
	}
	// The first claimed task becomes the hint only if it was the first
	// candidate: ahead of it, ready tasks are then locked by other claims.
	// A candidate held back (its key at its limit) must be read again from
	// the head.
	if first != nil && firstCand != nil && first.ID == *firstCand {
		s.setHint(queue, gen, first)
	}
	if verdict == sharedKeyed && 2*(int(n)-len(out)) > int(n) {
		// Marked for a while, not until the next claim that admits all it
		// reads: while keys bind, narrow claims do admit nearly all.
		s.flow.mark(&s.flow.narrow, queue, true)
	}
	kr.read = int(n)
	return out, verdict, kr, br.Close()
}

// claimKeyedOrExclusive claims a queue known to be on the keyed path.
// done false: the caller claims on the exclusive path (the claim read a
// full window of candidates and could admit none of them, or the verdict
// is no longer keyed).
func (s *Store) claimKeyedOrExclusive(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) ([]*norn.Task, bool, error) {
	out, verdict, kr, err := s.claimKeyed(ctx, conn, queue, want, worker, timeout, false)
	if err == nil && verdict == sharedKeyed && len(out) == 0 && kr.hinted {
		// Nothing past the hint; ready tasks ahead of it, locked by other
		// claims, may have been released since.
		out, verdict, kr, err = s.claimKeyed(ctx, conn, queue, want, worker, timeout, true)
	}
	if err != nil {
		return nil, false, err
	}
	if verdict != sharedKeyed {
		s.flow.mark(&s.flow.keyed, queue, false)
		switch verdict {
		case sharedStatic:
			s.flow.ruleOut(queue)
		case sharedRated:
			s.flow.markRated(queue, true)
		}
		return nil, false, nil
	}
	s.flow.keyedClaims.Add(1)
	if len(out) == 0 && kr.read >= kr.limit {
		return nil, false, nil
	}
	if len(out) < want {
		// The candidates it read and left ready were held back by their
		// keys, at their limits.
		s.noteHeld(queue, norn.QueueFlow{}, norn.Bucket{}, want, len(out), kr.read-len(out), -1, -1)
	}
	return out, true, nil
}

// scanVerdict reads the verdict statement's row: the verdict, whether it
// counted the running tasks, and the settings it made. No queues row:
// nothing to claim here (static).
func scanVerdict(row pgx.Row) (verdict string, counted bool, err error) {
	verdict = sharedStatic
	dest := make([]any, 3+strings.Count(claimSetupGUCs, "set_config("))
	dest[0], dest[1] = &verdict, &counted // the settings' columns are skipped (nil)
	if err := row.Scan(dest...); err != nil && err != pgx.ErrNoRows {
		return "", false, err
	}
	return verdict, counted, nil
}
