package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Fair claiming. A queue with fair_by is claimed by the exclusive path (its
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

// fairKey is one key with ready tasks during a fair claim.
type fairKey struct {
	key    string
	vt     int64
	tasks  []readyCand
	next   int
	more   bool // the read may have left tasks unread
	stored bool // it has a queue_fair row
	picked bool // this claim took a task of it
}

// readyKeysCTE is a recursive CTE, k(key), of the distinct non-null values
// of the column col among the ready tasks of queue $1, found by skipping
// through an index that starts with (queue, col) and holds ready tasks
// (tasks_fair, tasks_key_ready): one probe per value, however many tasks
// each has. Its last row is NULL.
func readyKeysCTE(col string) string {
	// tasks_key_ready holds the tasks of ready batches too,
	// tasks_fair does not (a fair queue has none).
	st := "ist = 'ready'"
	if col == "concurrency_key" {
		st = "ist IN ('ready', 'batched')"
	}
	return `k(key) AS (
	(SELECT ` + col + ` FROM {s}.tasks WHERE queue = $1 AND ` + st + ` AND ` + col + ` IS NOT NULL
		ORDER BY ` + col + ` LIMIT 1)
	UNION ALL
	SELECT (SELECT t.` + col + ` FROM {s}.tasks t WHERE t.queue = $1 AND t.` + st + `
		AND t.` + col + ` IS NOT NULL
		AND t.` + col + ` > k.key ORDER BY t.` + col + ` LIMIT 1) FROM k WHERE k.key IS NOT NULL)`
}

// pickFair chooses, in fair order, the ready tasks the limits admit.
func (s *Store) pickFair(ctx context.Context, tx flowQuerier, queue string, want int, g *gateView) picked {
	flow, own, running, total := g.flow, g.own, g.running, g.total
	byLabel := flow.GroupsByLabel()
	tokens := g.tokensFor()
	room := func(key string) int64 {
		if byLabel { // no key limits: its keys are a label's values
			return flow.Admit(total, 0, 0)
		}
		return minRoom(flow.Admit(total, running[key], flow.KeyLimitFor(key, own[key])), tokens.room(key))
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
		for k := range g.keyBuckets {
			if _, seen := running[k]; !seen && room(k) == 0 {
				blocked = append(blocked, k)
			}
		}
	}
	keys, err := s.readFairKeys(ctx, tx, queue, want, blocked, g.fairNow)
	if err != nil {
		return picked{err: err}
	}
	if len(keys) == 0 {
		return s.pickStale(ctx, tx, queue, want, g, blocked)
	}
	fairNow := g.fairNow
	var taken []string
	for len(taken) < want {
		var best *fairKey
		for _, fk := range keys {
			if fk.next == len(fk.tasks) && fk.more {
				// Its next task is unread: read up to the rest of the
				// claim after the last one read.
				if err := s.readMoreFair(ctx, tx, queue, fk, want-len(taken)); err != nil {
					return picked{err: err}
				}
			}
			if fk.next == len(fk.tasks) || room(fk.key) == 0 {
				continue
			}
			if best == nil {
				best = fk
				continue
			}
			a, b := &fk.tasks[fk.next], &best.tasks[best.next]
			c := norn.FairFirst(a.priority, fk.vt, b.priority, best.vt)
			if c < 0 || c == 0 && a.compare(*b) < 0 {
				best = fk
			}
		}
		if best == nil {
			break
		}
		taken = append(taken, best.tasks[best.next].id)
		best.next++
		best.picked = true
		fairNow = best.vt
		var w int
		if ks := own[best.key]; ks != nil {
			w = ks.Weight
		}
		best.vt += norn.FairStride(w)
		running[best.key]++
		total++
		tokens.take(best.key)
	}
	return picked{ids: taken, writes: s.fairWrites(queue, keys, fairNow, room)}
}

// readMoreFair reads up to n more ready tasks of a key during a fair
// claim, after the last one read (keyset on the fair index's order).
func (s *Store) readMoreFair(ctx context.Context, tx flowQuerier, queue string, fk *fairKey, n int) error {
	last := fk.tasks[len(fk.tasks)-1]
	rows, err := tx.Query(ctx, s.q(afterSQL(`SELECT t.id, t.priority, t.ready_at FROM {s}.tasks t`,
		`t.queue = $1 AND t.ist = 'ready' AND t.fair_key = $5`, `$6`)), queue, last.priority, last.readyAt, last.id, fk.key, n)
	if err != nil {
		return err
	}
	var c readyCand
	got := 0
	_, err = pgx.ForEachRow(rows, []any{&c.id, &c.priority, &c.readyAt}, func() error {
		fk.tasks = append(fk.tasks, c)
		got++
		return nil
	})
	fk.more = got == n
	return err
}

// pickStale claims, when no task of a fair queue has a fair key, in plain
// claim order: a task submitted while fair_by was being turned on may have
// been written without its key (its submit read the queue before the
// change). With no key blocked, the first ready tasks are admissible, so
// this reads no more than it claims.
func (s *Store) pickStale(ctx context.Context, tx flowQuerier, queue string, want int, g *gateView, blocked []string) picked {
	if len(blocked) > 0 {
		return picked{}
	}
	stale := *g
	stale.readyLeft = false
	return s.pickLimited(ctx, tx, queue, want, &stale)
}

// checkFair refuses key limits and key rate limits on a queue fair by a
// label and, when
// fair_by changes, gives the queue's live tasks their new fair keys (one
// pass over the queue's tasks) and restarts the virtual times.
func (s *Store) checkFair(ctx context.Context, tx pgx.Tx, queue string, u *norn.QueueUpdate, was, now norn.QueueFlow) error {
	if now.GroupsByLabel() {
		var keyLimits, keyRates bool
		err := tx.QueryRow(ctx, s.q(`SELECT EXISTS (SELECT 1 FROM {s}.queue_keys WHERE queue = $1 AND lim > 0),
	EXISTS (SELECT 1 FROM {s}.queue_keys WHERE queue = $1 AND rate_per_second > 0)`), queue).Scan(&keyLimits, &keyRates)
		if err != nil {
			return err
		}
		if err := u.CheckFlow(now, keyLimits, keyRates); err != nil {
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

// readFairKeys reads, for a fair pick, each key's first ready tasks with
// its virtual time (keys in blocked are at their limits: skipped).
func (s *Store) readFairKeys(ctx context.Context, tx flowQuerier, queue string, want int, blocked []string, fairNow int64) ([]*fairKey, error) {
	// Each key's first ⌊want / keys⌋ + 2 tasks, with its virtual time: as
	// many as an even share of the claim needs, so the read is O(keys +
	// want) rows; a key that gets more than its share (a weight, or a key
	// with most of the backlog) has the rest read when the pick reaches it
	// (readMoreFair). With few keys (keys × want ≤ 4096) each key's first
	// want, which saves that round trip. The key's read names its key as
	// a range of (queue, fair_key) and orders by the index's columns, which
	// only tasks_fair can serve: written as queue = $1 AND fair_key = key,
	// with statistics from when the queue was small, the planner walked
	// tasks_claim instead, filtering by key, through the other keys'
	// backlog once per key (560 ms a claim behind 100,000 tasks).
	rows, err := tx.Query(ctx, s.q(`WITH RECURSIVE `+readyKeysCTE("fair_key")+`,
ks AS MATERIALIZED (SELECT k.key, f.vt FROM k LEFT JOIN {s}.queue_fair f ON f.queue = $1 AND f.key = k.key
	WHERE k.key IS NOT NULL AND k.key <> ALL($2::text[])),
per AS (SELECT CASE WHEN count(*) * $3 <= 4096 THEN $3 ELSE $3 / count(*) + 2 END AS n FROM ks)
SELECT ks.key, ks.vt, c.id, c.priority, c.ready_at, (SELECT n FROM per) FROM ks CROSS JOIN LATERAL (
	SELECT t.id, t.priority, t.ready_at FROM {s}.tasks t WHERE (t.queue, t.fair_key) >= ($1, ks.key) AND (t.queue, t.fair_key) <= ($1, ks.key)
		AND t.ist = 'ready' AND t.fair_key IS NOT NULL
	ORDER BY t.queue, t.fair_key, t.priority DESC, t.ready_at, t.id LIMIT (SELECT n FROM per)) c`), queue, blocked, want)
	if err != nil {
		return nil, err
	}
	var keys []*fairKey
	byKey := map[string]*fairKey{}
	var key string
	var vt *int64
	var c readyCand
	var per int64
	if _, err := pgx.ForEachRow(rows, []any{&key, &vt, &c.id, &c.priority, &c.readyAt, &per}, func() error {
		fk := byKey[key]
		if fk == nil {
			fk = &fairKey{key: key, vt: fairNow}
			if vt != nil {
				fk.vt = max(*vt, fairNow)
				fk.stored = true
			}
			byKey[key] = fk
			keys = append(keys, fk)
		}
		fk.tasks = append(fk.tasks, c)
		return nil
	}); err != nil {
		return nil, err
	}
	for _, fk := range keys {
		fk.more = int64(len(fk.tasks)) == per
	}
	return keys, nil
}

// fairWrites are the fair pick's writes, sent with its claim.
func (s *Store) fairWrites(queue string, keys []*fairKey, fairNow int64, room func(string) int64) *pgx.Batch {
	// Keys still claimable keep their virtual time: the picked ones get
	// their new one; the others' rows stay as they are (a key without a
	// row starts at fair_now, and a stored time below fair_now counts as
	// fair_now, so writing either back would change nothing). Keys left
	// without ready tasks or room lose their row, as do keys that have no
	// ready task any more (their tasks were claimed, cancelled or deleted
	// since): they start again at fair_now when they come back.
	vkeys, vts, drop := []string{}, []int64{}, []string{} // not nil: pgx sends nil as NULL
	listed := make([]string, 0, len(keys))
	for _, fk := range keys {
		listed = append(listed, fk.key)
		claimable := (fk.next < len(fk.tasks) || fk.more) && room(fk.key) != 0
		switch {
		case claimable && fk.picked:
			vkeys, vts = append(vkeys, fk.key), append(vts, fk.vt)
		case !claimable && fk.stored:
			drop = append(drop, fk.key)
		}
	}
	b := &pgx.Batch{} // sent with the claim
	b.Queue(s.q(`DELETE FROM {s}.queue_fair f WHERE f.queue = $1 AND (f.key = ANY($2::text[])
	OR NOT EXISTS (SELECT 1 FROM unnest($3::text[]) u(k) WHERE u.k = f.key))`), queue, drop, listed)
	if len(vkeys) > 0 {
		b.Queue(s.q(`INSERT INTO {s}.queue_fair (queue, key, vt) SELECT $1, k, v FROM unnest($2::text[], $3::bigint[]) AS u(k, v)
ON CONFLICT (queue, key) DO UPDATE SET vt = EXCLUDED.vt`), queue, vkeys, vts)
	}
	b.Queue(s.q(`UPDATE {s}.queues SET fair_now = $2 WHERE name = $1 AND fair_now <> $2`), queue, fairNow)
	return b
}
