package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// The keyed path: a flow-limited queue whose key limits are too small for
// the shared path (a key_limit, or a key's own limit, under flowSlots ×
// MaxClaim) but whose max_running, if any, is far. The shared path's
// margin would rule such a queue out for good and send every claim to the
// exclusive path, one at a time, although a key limit of 10 over a
// thousand keys binds nothing most of the time. Keyed claims run
// concurrently instead, and bound each key rather than the queue:
//
//   - A keyed claim takes the gate in shared mode and one of keyedSlots
//     slot locks (the first keyedSlots of the shared path's slots, so the
//     shared path's bound on max_running holds for keyed claims too: the
//     verdict writes their slot rows as it does for shared claims).
//   - Then, in one statement with a later snapshot, it locks its
//     candidates (the first ready tasks, SKIP LOCKED, from the claim hint
//     when there is one), counts each candidate key's running tasks
//     (tasks_running_key, an index probe per key: every running task of
//     a key is in it, since keyed and exclusive claims write running_key
//     and UpdateQueue writes it for the tasks that were running when the
//     queue got key limits) and admits, per key of
//     limit L, at most m = max(1, L / (2 × keyedSlots)) tasks, and only
//     if the key's count plus keyedSlots × m is at most L. Keys without a
//     limit, and tasks without a key, are admitted as they come.
//   - A key left out by that margin although it is under its limit is
//     near: the claim reports how many keys were, and a claim that found
//     one sends the queue's claims to the exclusive path (which counts
//     exactly) for a while; one that found one and admitted nothing goes
//     there at once. Without that, a key could sit a few tasks under its
//     limit for as long as other keys keep the keyed claims busy.
//
// Why a key never exceeds its limit L: take any instant and key k, and
// let y be, among the claims that admitted tasks of k and committed by
// then, the one whose snapshot came last. Every task of k admitted by a
// claim that committed before y's snapshot is in y's count (or finished,
// which only lowers the truth). Every other claim that admitted tasks of
// k and committed by then took its snapshot before y's (y is the last)
// and committed after it, so it held its slot (taken before its snapshot,
// released after its commit is visible) when y read: at most
// keyedSlots − 1 such claims, each with at most m tasks of k, and no
// exclusive claim (the gate; an exclusive claim counts exactly with no
// claim in flight). So k has at most y's count + keyedSlots × m running
// tasks, and y admitted k only if that is at most L. A change of the
// queue's limits waits for every claim in flight (UpdateQueue takes the
// gate exclusively), so the claims one bound covers all used the same
// L and m.

// keyedSlots is how many keyed claims of one queue may be in flight at
// once. Fewer slots leave a key a larger share of its limit per claim
// (m) and a smaller margin (keyedSlots × m); more let more claims run at
// once. With 4, a key of limit 10 is admitted one task per claim while
// it has at most 6 running.
const keyedSlots = 4

// keyedMin is the smallest key limit the keyed path takes: 2 ×
// keyedSlots, so that a key is admitted (one task per claim) while it has
// up to half its limit running. Under that, keyed claims would admit a
// key only while nothing of it runs, or never: the exclusive path serves
// such queues.
func keyedMin(slots int) int { return 2 * min(keyedSlots, slots) }

// sharedKeyed is the verdict for a queue on the keyed path.
const sharedKeyed = "keyed"

// keyedHead and keyedTail select the keyed claim's candidates: the first
// ready tasks of the queue, locked, if the verdict said keyed. They go
// round a condition on the claim order (buildKeyedSQL).
const keyedHead = `SELECT t.id, t.concurrency_key AS key, t.priority, t.ready_at FROM {s}.tasks t
	WHERE t.status = 'ready' AND t.queue = $1 AND `

const keyedTail = `
	AND current_setting('norn.flow_shared', true) = 'keyed'
	ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED`

// keyedAdmitCTEs admit the candidates (cand) per key: r1 ranks each key's
// candidates in claim order; r2 reads, once per key (at its first
// candidate), the key's limit (its own only if the queue has keys with
// their own limits: one probe per claim, not per key) and its running
// tasks, materialized so that each is read once; r3 spreads them over the
// key's candidates; nr counts the keys left out by the margin alone
// (near) into norn.keyed_near; c is the admitted ids. $7 is keyedSlots.
// c's condition names nr so that the planner cannot push it down to r3
// alone: when no candidate is admitted, nr must still run.
const keyedAdmitCTEs = `,
r1 AS (SELECT cand.id, cand.key,
	row_number() OVER (PARTITION BY cand.key ORDER BY cand.priority DESC, cand.ready_at, cand.id) AS rn FROM cand),
r2 AS MATERIALIZED (SELECT r1.*, CASE WHEN r1.key IS NOT NULL AND r1.rn = 1 THEN coalesce(
		CASE WHEN (SELECT EXISTS (SELECT 1 FROM {s}.queue_keys k WHERE k.queue = $1 AND k.lim > 0)) THEN
			(SELECT nullif(k.lim, 0) FROM {s}.queue_keys k WHERE k.queue = $1 AND k.key = r1.key) END,
		(SELECT nullif(q.key_limit, 0) FROM {s}.queues q WHERE q.name = $1)) END AS lim0,
	CASE WHEN r1.key IS NOT NULL AND r1.rn = 1 THEN (SELECT count(*) FROM {s}.tasks r
		WHERE r.queue = $1 AND r.status = 'running' AND r.running_key = r1.key) END AS run0 FROM r1),
r3 AS (SELECT r2.id, r2.rn, max(r2.lim0) OVER k AS lim, max(r2.run0) OVER k AS running,
	greatest(1, max(r2.lim0) OVER k / (2 * $7::int)) AS m FROM r2 WINDOW k AS (PARTITION BY r2.key)),
nr AS (SELECT set_config('norn.keyed_near', (count(*) FILTER (WHERE r3.rn = 1 AND r3.lim IS NOT NULL
	AND r3.running < r3.lim AND r3.running + $7::int * r3.m > r3.lim))::text, true) AS near FROM r3),
c AS (SELECT r3.id FROM r3, nr WHERE CASE WHEN nr.near IS NULL THEN false
	ELSE r3.lim IS NULL OR (r3.rn <= r3.m AND r3.running + $7::int * r3.m <= r3.lim) END)`

// buildKeyedSQL builds the keyed claim, from the queue's head and from a
// claim hint ($8–$10, as buildClaimFromSQL).
func (s *Store) buildKeyedSQL() {
	s.flow.keyedSQL = s.buildAssignKeyedSQL(`cand AS (` + keyedHead + `true` + keyedTail + `)` + keyedAdmitCTEs)
	s.flow.keyedFromSQL = s.buildAssignKeyedSQL(`cand AS (SELECT u.* FROM (
	SELECT a.* FROM (` + keyedHead + `t.priority = $8 AND (t.ready_at, t.id) >= ($9::timestamptz, $10::text)` + keyedTail + `) a
	UNION ALL
	SELECT b.* FROM (` + keyedHead + `t.priority < $8` + keyedTail + `) b) u LIMIT $2)` + keyedAdmitCTEs)
}

// claimKeyed tries the keyed path in one round trip: the gate and a slot,
// the verdict, the claim (which claims nothing unless the verdict is
// keyed) and how many keys were near, in one implicit transaction.
func (s *Store) claimKeyed(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) (out []*norn.Task, verdict string, near int, err error) {
	slots, cap := s.flow.margins()
	kslots := min(keyedSlots, slots)
	s.flow.sqlOnce.Do(s.buildFlowSQL)
	want = min(want, cap)
	b := &pgx.Batch{}
	b.Queue(sharedLockSQL, s.channel+"/flow/"+queue, s.channel+"/flowslot/"+queue, kslots)
	b.Queue(s.q(sharedVerdictSQL), queue, slots*cap, false, int64(want), keyedMin(slots))
	gen := s.wake.wait()
	sql, args := s.flow.keyedSQL, []any{queue, want, s.clockNow(), worker, timeout, s.cfg.HistoryLimit, kslots}
	if s.listening.Load() {
		if h, ok := s.hints.get(queue, gen, time.Now()); ok {
			sql, args = s.flow.keyedFromSQL, append(args, h.priority, h.readyAt, h.id)
		}
	}
	b.Queue(sql, args...)
	b.Queue(`SELECT current_setting('norn.keyed_near', true)`)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, "", 0, err
	}
	verdict, _, err = scanVerdict(br.QueryRow())
	if err != nil {
		return nil, "", 0, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, "", 0, err
	}
	// The first task this claim took becomes the hint: ahead of it, ready
	// tasks are locked by other claims. A keyed claim may leave some of
	// its candidates ready; tasks left so ahead of the hint wait for the
	// next scan from the head (at most maxHintAge, or the next wake-up).
	if out, err = s.takeClaimed(rows, queue, gen); err != nil {
		return nil, "", 0, err
	}
	var nearText *string
	if err := br.QueryRow().Scan(&nearText); err != nil {
		return nil, "", 0, err
	}
	if nearText != nil && *nearText != "" {
		if near, err = strconv.Atoi(*nearText); err != nil {
			return nil, "", 0, err
		}
	}
	return out, verdict, near, br.Close()
}

// claimKeyedOrExclusive claims a queue known to be on the keyed path.
// done false: the caller claims on the exclusive path (a key near its
// limit and nothing claimed, or the verdict is no longer keyed).
func (s *Store) claimKeyedOrExclusive(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) ([]*norn.Task, bool, error) {
	out, verdict, near, err := s.claimKeyed(ctx, conn, queue, want, worker, timeout)
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
	if near > 0 {
		s.flow.ruleOut(queue)
		if len(out) == 0 {
			return nil, false, nil
		}
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
