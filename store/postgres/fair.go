package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Fair claiming. A queue with fair_by is claimed by claimLimited (its
// flow_limited is set), serialized per queue by the advisory lock. Each
// task of a fair queue carries its fair key (tasks.fair_key, written at
// submit; '' for tasks without one), and the partial index tasks_fair
// orders the ready ones by (queue, fair_key, claim order). A claim
//
//  1. lists the keys with ready tasks by skipping through tasks_fair (a
//     recursive query: one index probe per key) and reads, per key, its
//     first ready tasks (an index range with a LIMIT) — O(K log n) for K
//     keys with ready tasks, however many tasks one key has;
//  2. reads the keys' virtual times (queue_fair: one row per key that was
//     claimable at the last claim) and the queue's fair_now;
//  3. hands out tasks in the order norn's rule gives (best priority, then
//     least virtual time, then claim order; a key absent from queue_fair
//     starts at fair_now), advancing each key by norn.FairStride of its
//     weight — the same rule as the embedded store's group heap;
//  4. writes back the virtual times of the keys still claimable and the
//     new fair_now, and drops the rows of the others.

// fairCand is one ready task read for a fair claim.
type fairCand struct {
	id       string
	priority int64
	readyAt  time.Time
}

// fairKey is one key with ready tasks during a fair claim.
type fairKey struct {
	key   string
	vt    int64
	tasks []fairCand
	next  int
	more  bool // the read may have left tasks unread
}

// candLess orders two ready tasks in claim order.
func candLess(a, b *fairCand) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if !a.readyAt.Equal(b.readyAt) {
		return a.readyAt.Before(b.readyAt)
	}
	return a.id < b.id
}

// pickFair chooses, in fair order, the ready tasks the limits admit.
func (s *Store) pickFair(ctx context.Context, tx pgx.Tx, queue string, want int, flow norn.QueueFlow,
	own map[string]*norn.KeySettings, running map[string]int64, total, fairNow int64) picked {
	byLabel := flow.GroupsByLabel()
	room := func(key string) int64 {
		if byLabel { // no key limits: its keys are a label's values
			return flow.Admit(total, 0, 0)
		}
		return flow.Admit(total, running[key], flow.KeyLimitFor(key, own[key]))
	}
	if flow.MaxRunning > 0 {
		want = int(min(int64(want), max(int64(flow.MaxRunning)-total, 0)))
	}
	if want <= 0 {
		return picked{}
	}
	blocked := []string{}
	if !byLabel {
		for k := range running {
			if room(k) == 0 {
				blocked = append(blocked, k)
			}
		}
	}
	// Each key's first want tasks: enough for any outcome of this claim,
	// so the read is O(keys × want) rows, never the backlog.
	per := want
	rows, err := tx.Query(ctx, s.q(`WITH RECURSIVE k(key) AS (
	(SELECT fair_key FROM {s}.tasks WHERE queue = $1 AND status = 'ready' AND fair_key IS NOT NULL
		ORDER BY fair_key LIMIT 1)
	UNION ALL
	SELECT (SELECT t.fair_key FROM {s}.tasks t WHERE t.queue = $1 AND t.status = 'ready' AND t.fair_key IS NOT NULL
		AND t.fair_key > k.key ORDER BY t.fair_key LIMIT 1) FROM k WHERE k.key IS NOT NULL)
SELECT k.key, c.id, c.priority, c.ready_at FROM k CROSS JOIN LATERAL (
	SELECT t.id, t.priority, t.ready_at FROM {s}.tasks t WHERE t.queue = $1 AND t.status = 'ready' AND t.fair_key = k.key
	ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $3) c
WHERE k.key IS NOT NULL AND k.key <> ALL($2::text[])`), queue, blocked, per)
	if err != nil {
		return picked{err: err}
	}
	var keys []*fairKey
	byKey := map[string]*fairKey{}
	var key string
	var c fairCand
	if _, err := pgx.ForEachRow(rows, []any{&key, &c.id, &c.priority, &c.readyAt}, func() error {
		fk := byKey[key]
		if fk == nil {
			fk = &fairKey{key: key, vt: fairNow}
			byKey[key] = fk
			keys = append(keys, fk)
		}
		fk.tasks = append(fk.tasks, c)
		return nil
	}); err != nil {
		return picked{err: err}
	}
	if len(keys) == 0 {
		return s.pickStale(ctx, tx, queue, want, flow, own, running, total, blocked)
	}
	names := make([]string, len(keys))
	for i, fk := range keys {
		names[i] = fk.key
		fk.more = len(fk.tasks) == per
	}
	rows, err = tx.Query(ctx, s.q(`SELECT key, vt FROM {s}.queue_fair WHERE queue = $1 AND key = ANY($2::text[])`), queue, names)
	if err != nil {
		return picked{err: err}
	}
	var vt int64
	if _, err := pgx.ForEachRow(rows, []any{&key, &vt}, func() error {
		byKey[key].vt = max(vt, fairNow)
		return nil
	}); err != nil {
		return picked{err: err}
	}
	var taken []string
	for len(taken) < want {
		var best *fairKey
		for _, fk := range keys {
			if fk.next == len(fk.tasks) || room(fk.key) == 0 {
				continue
			}
			if best == nil {
				best = fk
				continue
			}
			a, b := &fk.tasks[fk.next], &best.tasks[best.next]
			switch {
			case a.priority != b.priority:
				if a.priority > b.priority {
					best = fk
				}
			case fk.vt != best.vt:
				if fk.vt < best.vt {
					best = fk
				}
			case candLess(a, b):
				best = fk
			}
		}
		if best == nil {
			break
		}
		taken = append(taken, best.tasks[best.next].id)
		best.next++
		fairNow = best.vt
		var w int
		if ks := own[best.key]; ks != nil {
			w = ks.Weight
		}
		best.vt += norn.FairStride(w)
		running[best.key]++
		total++
	}
	// Keys still claimable keep their virtual time; the others start
	// again at fair_now when they come back.
	vkeys, vts := []string{}, []int64{} // not nil: pgx sends nil as NULL
	for _, fk := range keys {
		if (fk.next < len(fk.tasks) || fk.more) && room(fk.key) != 0 {
			vkeys, vts = append(vkeys, fk.key), append(vts, fk.vt)
		}
	}
	b := &pgx.Batch{}
	b.Queue(s.q(`DELETE FROM {s}.queue_fair WHERE queue = $1 AND key <> ALL($2::text[])`), queue, vkeys)
	b.Queue(s.q(`INSERT INTO {s}.queue_fair (queue, key, vt) SELECT $1, k, v FROM unnest($2::text[], $3::bigint[]) AS u(k, v)
ON CONFLICT (queue, key) DO UPDATE SET vt = EXCLUDED.vt`), queue, vkeys, vts)
	b.Queue(s.q(`UPDATE {s}.queues SET fair_now = $2 WHERE name = $1`), queue, fairNow)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return picked{err: err}
	}
	return picked{ids: taken}
}

// pickStale claims, when no task of a fair queue has a fair key, in plain
// claim order: a task submitted while fair_by was being turned on may have
// been written without its key (its submit read the queue before the
// change). With no key blocked, the first ready tasks are admissible, so
// this reads no more than it claims.
func (s *Store) pickStale(ctx context.Context, tx pgx.Tx, queue string, want int, flow norn.QueueFlow,
	own map[string]*norn.KeySettings, running map[string]int64, total int64, blocked []string) picked {
	if len(blocked) > 0 {
		return picked{}
	}
	return s.pickLimited(ctx, tx, queue, want, flow, own, running, total)
}

// checkFair refuses key limits on a queue fair by a label and, when
// fair_by changes, gives the queue's live tasks their new fair keys (one
// pass over the queue's tasks) and restarts the virtual times.
func (s *Store) checkFair(ctx context.Context, tx pgx.Tx, queue string, u *norn.QueueUpdate, was, now norn.QueueFlow) error {
	if now.GroupsByLabel() {
		var keyLimits bool
		err := tx.QueryRow(ctx, s.q(`SELECT EXISTS (SELECT 1 FROM {s}.queue_keys WHERE queue = $1 AND lim > 0)`), queue).Scan(&keyLimits)
		if err != nil {
			return err
		}
		if err := u.CheckFlow(now, keyLimits); err != nil {
			return err
		}
	}
	if was.FairBy == now.FairBy {
		return nil
	}
	b := &pgx.Batch{}
	switch label, byLabel := now.FairLabel(); {
	case now.FairBy == "":
		b.Queue(s.q(`UPDATE {s}.tasks SET fair_key = NULL WHERE queue = $1 AND fair_key IS NOT NULL`), queue)
	case byLabel:
		b.Queue(s.q(`UPDATE {s}.tasks SET fair_key = coalesce(labels->>$2, '')
WHERE queue = $1 AND status IN ('scheduled', 'blocked', 'ready', 'running')`), queue, label)
	default:
		b.Queue(s.q(`UPDATE {s}.tasks SET fair_key = coalesce(concurrency_key, '')
WHERE queue = $1 AND status IN ('scheduled', 'blocked', 'ready', 'running')`), queue)
	}
	b.Queue(s.q(`DELETE FROM {s}.queue_fair WHERE queue = $1`), queue)
	b.Queue(s.q(`UPDATE {s}.queues SET fair_now = 0 WHERE name = $1`), queue)
	return tx.SendBatch(ctx, b).Close()
}
