package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Flow control. A queue with limits (queues.flow_limited) is claimed by
// claimLimited, in one transaction that first takes a transaction-scoped
// advisory lock on the queue: limited claims of one queue are serialized
// across every node, so each one counts the running tasks after the
// previous one committed and can never admit more than the limits allow.
// Completions, failures, timeouts and the rest take no lock — a task that
// leaves running only lowers the count a later claim reads. The cost is
// claims of a limited queue running one at a time (each handing out up to
// N tasks), plus counting its running tasks: O(running tasks of the queue)
// per claim.

// claimLimited claims up to want tasks of a flow-limited queue.
func (s *Store) claimLimited(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) ([]*norn.Task, error) {
	var out []*norn.Task
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		out = nil
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.channel+"/flow/"+queue)
		b.Queue(noSortSQL)
		b.Queue(s.q(`SELECT paused, max_running, key_limit, fair_by, fair_now, rate_per_second, rate_burst
FROM {s}.queues WHERE name = $1`), queue)
		b.Queue(s.q(`SELECT key, lim, weight FROM {s}.queue_keys WHERE queue = $1 AND (lim > 0 OR weight > 0)`), queue)
		b.Queue(s.q(`SELECT coalesce(concurrency_key, ''), count(*) FROM {s}.tasks
WHERE queue = $1 AND status = 'running' GROUP BY 1`), queue)
		b.Queue(s.q(bucketSQL), queue, s.clockNow())
		br := tx.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		if _, err := br.Exec(); err != nil {
			br.Close()
			return err
		}
		var (
			paused                        bool
			maxRunning, keyLimit, rateBur int32
			fairBy                        string
			fairNow                       int64
			ratePS                        float64
		)
		if err := br.QueryRow().Scan(&paused, &maxRunning, &keyLimit, &fairBy, &fairNow, &ratePS, &rateBur); err != nil && err != pgx.ErrNoRows {
			br.Close()
			return err
		}
		flow := norn.QueueFlow{MaxRunning: int(maxRunning), KeyLimit: int(keyLimit), FairBy: fairBy,
			RateLimit: norn.RateLimit{PerSecond: ratePS, Burst: int(rateBur)}}
		own := map[string]*norn.KeySettings{}
		rows, _ := br.Query()
		var key string
		var n int64
		var lim, weight int32
		if _, err := pgx.ForEachRow(rows, []any{&key, &lim, &weight}, func() error {
			own[key] = &norn.KeySettings{Limit: int(lim), Weight: int(weight)}
			return nil
		}); err != nil {
			br.Close()
			return err
		}
		running := map[string]int64{}
		var total int64
		rows, _ = br.Query()
		if _, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error {
			running[key] = n
			total += n
			return nil
		}); err != nil {
			br.Close()
			return err
		}
		var bucket bucketRow
		if err := br.QueryRow().Scan(&bucket.now, &bucket.tokens, &bucket.at); err != nil {
			br.Close()
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		if paused {
			return nil
		}
		// What max_running and the rate limit allow (-1: no such limit).
		maxRoom, tokens, pick := -1, -1, want
		if flow.MaxRunning > 0 {
			maxRoom = int(max(int64(flow.MaxRunning)-total, 0))
		}
		if flow.RateLimited() {
			tokens = bucket.bucket(flow.RateLimit).Whole()
			pick = min(pick, tokens)
		}
		if pick > 0 && flow.FairBy == "" && cannotBind(flow, own, running, total, pick) {
			// Under the lock, with these counts, no limit can stop this
			// claim: take the first ready tasks in one statement, as an
			// unlimited queue's claim does, instead of reading candidates
			// and claiming them by id.
			rows, err := tx.Query(ctx, s.q(s.buildAssignSQL(`c AS (SELECT t.id FROM {s}.tasks t
	WHERE t.status = 'ready' AND t.queue = $1
	ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED)`)),
				queue, pick, bucket.now, worker, timeout, s.cfg.HistoryLimit)
			if err != nil {
				return err
			}
			if out, err = pgx.CollectRows(rows, claimedRow); err != nil {
				return err
			}
			return s.settleClaim(ctx, tx, queue, flow, bucket, want, len(out), maxRoom, tokens)
		}
		var ids picked
		switch {
		case pick <= 0:
		case flow.FairBy != "":
			ids = s.pickFair(ctx, tx, queue, pick, flow, own, running, total, fairNow)
		default:
			ids = s.pickLimited(ctx, tx, queue, pick, flow, own, running, total)
		}
		if ids.err != nil {
			return ids.err
		}
		if len(ids.ids) > 0 {
			// The claim's time is the bucket's: one clock for both.
			rows, err := tx.Query(ctx, s.sql.claimIDs, ids.ids, len(ids.ids), bucket.now, worker, timeout, s.cfg.HistoryLimit)
			if err != nil {
				return err
			}
			if out, err = pgx.CollectRows(rows, claimedRow); err != nil {
				return err
			}
		}
		return s.settleClaim(ctx, tx, queue, flow, bucket, want, len(out), maxRoom, tokens)
	})
	return out, err
}

// cannotBind reports whether the limits leave room for want more tasks
// whatever keys they have: the queue has room for want, and so has every
// key (the running ones by their counts, the others by the smallest limit
// any key may have).
func cannotBind(flow norn.QueueFlow, own map[string]*norn.KeySettings, running map[string]int64, total int64, want int) bool {
	if flow.RateLimited() { // a rate limit binds by time, not by counts
		return false
	}
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

type picked struct {
	ids []string
	err error
}

// pickLimited chooses, in claim order, the ready tasks the limits admit.
// Keys at their limit are excluded in SQL; rows of a key that fills up
// while a batch of candidates is read are skipped, and when that leaves
// the claim short the next batch excludes that key too, until it has want
// tasks or the queue has no more.
func (s *Store) pickLimited(ctx context.Context, tx pgx.Tx, queue string, want int, flow norn.QueueFlow,
	own map[string]*norn.KeySettings, running map[string]int64, total int64) picked {
	room := func(key string) int64 {
		return flow.Admit(total, running[key], flow.KeyLimitFor(key, own[key]))
	}
	if flow.MaxRunning > 0 {
		want = int(min(int64(want), max(int64(flow.MaxRunning)-total, 0)))
	}
	blocked, taken := []string{}, []string{} // not nil: pgx sends a nil slice as NULL, and x <> ALL(NULL) is never true
	for k := range running {
		if k != "" && room(k) == 0 {
			blocked = append(blocked, k)
		}
	}
	for len(taken) < want {
		fetch := min(4*(want-len(taken))+16, 1000)
		rows, err := tx.Query(ctx, s.q(`SELECT id, coalesce(concurrency_key, '') FROM {s}.tasks
WHERE status = 'ready' AND queue = $1 AND (concurrency_key IS NULL OR concurrency_key <> ALL($2::text[]))
	AND id <> ALL($3::text[])
ORDER BY priority DESC, ready_at, id LIMIT $4`), queue, blocked, taken, fetch)
		if err != nil {
			return picked{err: err}
		}
		var id, key string
		got := 0
		_, err = pgx.ForEachRow(rows, []any{&id, &key}, func() error {
			got++
			if len(taken) == want || room(key) == 0 {
				return nil
			}
			taken = append(taken, id)
			running[key]++
			total++
			if key != "" && room(key) == 0 {
				blocked = append(blocked, key)
			}
			return nil
		})
		if err != nil {
			return picked{err: err}
		}
		if got < fetch {
			break // the queue has no more admissible tasks
		}
	}
	return picked{ids: taken}
}

// queueKeys lists the keys of a queue that have their own settings or
// running tasks, sorted.
// A queue fair by a label counts its running tasks by the label's value.
func (s *Store) queueKeys(ctx context.Context, conn *pgx.Conn, queue string, byLabel bool) ([]norn.KeyInfo, error) {
	col := "concurrency_key"
	if byLabel {
		col = "nullif(fair_key, '')"
	}
	rows, err := conn.Query(ctx, s.q(`SELECT key, coalesce(k.lim, 0), coalesce(k.weight, 0), coalesce(r.n, 0)
FROM (SELECT key, lim, weight FROM {s}.queue_keys WHERE queue = $1) k
FULL JOIN (SELECT `+col+` AS key, count(*) AS n FROM {s}.tasks
	WHERE queue = $1 AND status = 'running' AND `+col+` IS NOT NULL GROUP BY 1) r USING (key)
ORDER BY key`), queue)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (norn.KeyInfo, error) {
		var k norn.KeyInfo
		var lim, weight int32
		err := row.Scan(&k.Key, &lim, &weight, &k.Running)
		k.Limit, k.Weight = int(lim), int(weight)
		return k, err
	})
}
