package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

const queueCols = `name, paused, timeout_ns, retry, max_attempts, retention_completed_ns, retention_aborted_ns, retention_cancelled_ns,
max_runtime_ns, max_running, key_limit, fair_by, rate_per_second, rate_burst, expire_in_ns, sequence_on_failure,
key_rate_per_second, key_rate_burst`

// Queues lists every queue that has tasks or settings.
func (s *Store) Queues(ctx context.Context) ([]norn.QueueInfo, error) {
	return s.queues(ctx, nil)
}

func (s *Store) queues(ctx context.Context, only *string) ([]norn.QueueInfo, error) {
	byName := map[string]*norn.QueueInfo{}
	var names []string
	get := func(name string) *norn.QueueInfo {
		q := byName[name]
		if q == nil {
			q = &norn.QueueInfo{Name: name, Counts: norn.StatusCounts(), Defaults: norn.DefaultQueueDefaults()}
			byName[name] = q
			names = append(names, name)
		}
		return q
	}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		byName, names = map[string]*norn.QueueInfo{}, nil
		b := &pgx.Batch{}
		b.Queue(s.q(`SELECT `+queueCols+` FROM {s}.queues WHERE $1::text IS NULL OR name = $1`), only).Query(func(rows pgx.Rows) error {
			qds, err := pgx.CollectRows(rows, queueRow)
			for _, d := range qds {
				q := get(d.name)
				q.Paused, q.Defaults, q.QueueFlow = d.paused, d.QueueDefaults, d.flow
			}
			return err
		})
		b.Queue(s.q(countsSQL(`$1::text IS NULL OR t.queue = $1`)), only).Query(func(rows pgx.Rows) error {
			var name, st string
			var n int64
			_, err := pgx.ForEachRow(rows, []any{&name, &st, &n}, func() error {
				get(name).Counts[norn.Status(st)] = n
				return nil
			})
			return err
		})
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if err := s.rateTokens(ctx, conn, byName); err != nil {
			return err
		}
		if only != nil {
			keys, err := s.queueKeys(ctx, conn, *only, get(*only).GroupsByLabel())
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				get(*only).Keys = keys
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortStrings(names)
	out := make([]norn.QueueInfo, 0, len(names))
	for _, n := range names {
		out = append(out, *byName[n])
	}
	return out, nil
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Queue returns one queue; an unused queue reads as empty with defaults.
func (s *Store) Queue(ctx context.Context, name string) (norn.QueueInfo, error) {
	if err := norn.ValidateQueue("name", name); err != nil {
		return norn.QueueInfo{}, err
	}
	qs, err := s.queues(ctx, &name)
	if err != nil {
		return norn.QueueInfo{}, err
	}
	if len(qs) == 0 {
		return norn.QueueInfo{Name: name, Counts: norn.StatusCounts(), Defaults: norn.DefaultQueueDefaults()}, nil
	}
	q := qs[0]
	q.ClaimPath = s.claimPathOf(&q)
	return q, nil
}

// UpdateQueue pauses or resumes a queue and changes its defaults.
func (s *Store) UpdateQueue(ctx context.Context, name string, u norn.QueueUpdate) (norn.QueueInfo, error) {
	if err := norn.ValidateQueue("name", name); err != nil {
		return norn.QueueInfo{}, err
	}
	if err := u.Validate(); err != nil {
		return norn.QueueInfo{}, err
	}
	resumed := false
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		// The flow gate, exclusively: a barrier between claims made under
		// the old settings and claims made under the new ones. The shared
		// and keyed paths' bounds hold only over claims that read the same
		// limits (claim_shared.go, claim_keyed.go), so none may be in flight when they
		// change. Claims take the gate before they read the queue row; so
		// does this, before its row lock.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.channel+"/flow/"+name); err != nil {
			return err
		}
		d := queueDefaults{QueueDefaults: norn.DefaultQueueDefaults()}
		row := tx.QueryRow(ctx, s.q(`SELECT `+queueCols+` FROM {s}.queues WHERE name = $1 FOR UPDATE`), name)
		if got, err := scanQueue(row); err == nil {
			d = got
		} else if err != pgx.ErrNoRows {
			return err
		}
		wasPaused, wasFlow := d.paused, d.flow
		applyQueueUpdate(&d, &u)
		if err := s.writeKeySettings(ctx, tx, name, u.Keys); err != nil {
			return err
		}
		if err := s.checkFair(ctx, tx, name, &u, wasFlow, d.flow); err != nil {
			return err
		}
		// Resumed, or limits lifted or raised: waiting claimers look again.
		resumed = (wasPaused && !d.paused) || d.flow != wasFlow || len(u.Keys) > 0
		var retry *string
		if d.Retry != nil {
			b, _ := json.Marshal(d.Retry)
			r := string(b)
			retry = &r
		}
		_, err := tx.Exec(ctx, s.q(`WITH kr AS (SELECT $17::double precision > 0
	OR EXISTS (SELECT 1 FROM {s}.queue_keys k WHERE k.queue = $1 AND k.rate_per_second > 0) AS v)
INSERT INTO {s}.queues (`+queueCols+`, key_rated, flow_limited)
SELECT $1, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10, $11, $12, $13::double precision, $14, $15, $16, $17, $18, kr.v,
	$10 > 0 OR $11 > 0 OR $12 <> '' OR $13::double precision > 0 OR kr.v
	OR EXISTS (SELECT 1 FROM {s}.queue_keys k WHERE k.queue = $1 AND k.lim > 0) FROM kr
ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, timeout_ns = EXCLUDED.timeout_ns, retry = EXCLUDED.retry,
	max_attempts = EXCLUDED.max_attempts, retention_completed_ns = EXCLUDED.retention_completed_ns,
	retention_aborted_ns = EXCLUDED.retention_aborted_ns, retention_cancelled_ns = EXCLUDED.retention_cancelled_ns,
	max_runtime_ns = EXCLUDED.max_runtime_ns,
	max_running = EXCLUDED.max_running, key_limit = EXCLUDED.key_limit, flow_limited = EXCLUDED.flow_limited,
	fair_by = EXCLUDED.fair_by, rate_per_second = EXCLUDED.rate_per_second, rate_burst = EXCLUDED.rate_burst,
	expire_in_ns = EXCLUDED.expire_in_ns, sequence_on_failure = EXCLUDED.sequence_on_failure,
	key_rate_per_second = EXCLUDED.key_rate_per_second, key_rate_burst = EXCLUDED.key_rate_burst, key_rated = EXCLUDED.key_rated`),
			name, d.paused, int64(d.Timeout), retry, d.MaxAttempts, int64(d.Retention.Completed),
			int64(d.Retention.Aborted), int64(d.Retention.Cancelled), int64(d.MaxRuntime), d.flow.MaxRunning, d.flow.KeyLimit,
			d.flow.FairBy, d.flow.RateLimit.PerSecond, d.flow.RateLimit.Burst, int64(d.ExpireIn), d.SequenceOnFailure,
			d.flow.KeyRateLimit.PerSecond, d.flow.KeyRateLimit.Burst)
		if err != nil {
			return err
		}
		if err := s.settleForFlow(ctx, tx, name, wasFlow, d.flow); err != nil {
			return err
		}
		if resumed {
			// Claimers on every node should look again.
			_, err = tx.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, "wake")
		}
		return err
	})
	if err != nil {
		return norn.QueueInfo{}, err
	}
	if resumed {
		s.wake.fire()
	}
	return s.Queue(ctx, name)
}

// applyQueueUpdate applies u's defaults and flow settings to d.
func applyQueueUpdate(d *queueDefaults, u *norn.QueueUpdate) {
	if u.Paused != nil {
		d.paused = *u.Paused
	}
	u.ApplyDefaults(&d.QueueDefaults)
	u.ApplyFlow(&d.flow)
}

// writeKeySettings stores keys' own settings (nil: removed).
func (s *Store) writeKeySettings(ctx context.Context, tx pgx.Tx, name string, keys map[string]*norn.KeySettings) error {
	for key, ks := range keys {
		if ks == nil {
			_, err := tx.Exec(ctx, s.q(`DELETE FROM {s}.queue_keys WHERE queue = $1 AND key = $2`), name, key)
			if err != nil {
				return err
			}
			continue
		}
		n := ks.Normalized()
		_, err := tx.Exec(ctx, s.q(`INSERT INTO {s}.queue_keys (queue, key, lim, weight, rate_per_second, rate_burst)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (queue, key) DO UPDATE SET lim = EXCLUDED.lim, weight = EXCLUDED.weight,
	rate_per_second = EXCLUDED.rate_per_second, rate_burst = EXCLUDED.rate_burst`),
			name, key, n.Limit, n.Weight, n.RateLimit.PerSecond, n.RateLimit.Burst)
		if err != nil {
			return err
		}
	}
	return nil
}

// settleForFlow brings a queue's rows to what its claim paths expect after
// its flow settings changed from was to now, under the gate.
func (s *Store) settleForFlow(ctx context.Context, tx pgx.Tx, name string, was, now norn.QueueFlow) error {
	// A fair queue is claimed by a path that reads ordinary task rows
	// only: its ready rows and leases are settled (batches.go), under
	// the gate, so none is in flight. The other limited paths take
	// ready rows and count leased tasks as the plain claim left them.
	if now.FairBy != "" {
		if err := s.settleQueue(ctx, tx, name); err != nil {
			return err
		}
	}
	// With key limits, the keyed path may claim this queue next: it
	// counts a key's running tasks by running_key, which plain and
	// shared claims do not write. Under the gate no claim is in flight,
	// so after this every running task of the queue with a key is
	// counted (O(running tasks), in this transaction).
	_, err := tx.Exec(ctx, s.q(`UPDATE {s}.tasks SET running_key = concurrency_key
WHERE ist = 'running' AND queue = $1 AND concurrency_key IS NOT NULL AND running_key IS NULL
	AND ($2 > 0 OR EXISTS (SELECT 1 FROM {s}.queue_keys k WHERE k.queue = $1 AND k.lim > 0))`), name, now.KeyLimit)
	if err != nil {
		return err
	}
	if was.RateLimited() && !now.RateLimited() {
		// The bucket goes with the limit: set again, it starts full.
		if _, err = tx.Exec(ctx, s.q(`DELETE FROM {s}.queue_buckets WHERE queue = $1`), name); err != nil {
			return err
		}
	}
	// The keys' buckets go when no key rate limit is left.
	_, err = tx.Exec(ctx, s.q(`DELETE FROM {s}.key_buckets b WHERE b.queue = $1
	AND NOT (SELECT q.key_rated FROM {s}.queues q WHERE q.name = $1)`), name)
	return err
}

// Workers lists registered workers in registration order.
func (s *Store) Workers(ctx context.Context) ([]norn.WorkerInfo, error) {
	var out []norn.WorkerInfo
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = []norn.WorkerInfo{}
		rows, err := conn.Query(ctx, s.q(`SELECT id, coalesce(name, ''), queues, registered, last_seen FROM {s}.workers ORDER BY n`))
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (norn.WorkerInfo, error) {
			var w norn.WorkerInfo
			err := row.Scan(&w.ID, &w.Name, &w.Queues, &w.Registered, &w.LastSeen)
			w.Registered, w.LastSeen = w.Registered.UTC(), w.LastSeen.UTC()
			return w, err
		})
		return err
	})
	return out, err
}

// Stats returns counts by queue and status, totals and worker counts.
func (s *Store) Stats(ctx context.Context) (norn.Stats, error) {
	groups, err := s.groupCounts(ctx, "TRUE", nil)
	if err != nil {
		return norn.Stats{}, err
	}
	st := norn.Stats{Counts: groups, Totals: norn.StatusCounts()}
	for _, g := range groups {
		st.Totals[g.Status] += g.Count
		st.Total += g.Count
	}
	err = s.withConn(ctx, func(conn *pgx.Conn) error {
		now, err := s.dbNow(ctx, conn)
		if err != nil {
			return err
		}
		return conn.QueryRow(ctx, s.q(`SELECT count(*), count(*) FILTER (WHERE last_seen > $1) FROM {s}.workers`),
			now.Add(-norn.ActiveWorkerWindow)).Scan(&st.Workers, &st.ActiveWorkers)
	})
	return st, err
}

var _ = time.Second

// Vacuum reclaims now the row versions that finished and deleted tasks
// left in the task table, instead of when autovacuum next gets to them (by
// default up to a minute after the table crosses its threshold, and then
// while other work runs). Until one of the two runs, the next inserts
// cannot reuse that space: the table grows and the vacuum, when it comes,
// shares the machine with whatever runs then. Call it after deleting many
// tasks at once; norn bench does after each run. It blocks no submit,
// claim or completion. A role that does not own the table gets a warning
// from PostgreSQL and nothing is vacuumed.
func (s *Store) Vacuum(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, s.q("VACUUM {s}.tasks"))
	return err
}

// queueKeys lists the keys of a queue that have their own settings or
// running tasks, sorted.
// A queue fair by a label counts its running tasks by the label's value.
func (s *Store) queueKeys(ctx context.Context, conn *pgx.Conn, queue string, byLabel bool) ([]norn.KeyInfo, error) {
	col := "concurrency_key"
	if byLabel {
		col = "nullif(fair_key, '')"
	}
	// Running tasks are running rows and, by concurrency key, tasks still
	// in lease rows (batches.go; a fair queue has none).
	leased := ""
	if !byLabel {
		leased = ` UNION ALL SELECT u.k, 1 FROM {s}.leases l, unnest(l.ids, l.keys) u(id, k), {s}.tasks t
	WHERE l.queue = $1 AND l.keys IS NOT NULL AND u.k IS NOT NULL AND t.id = u.id AND t.status = 'ready' AND t.ready_batch IS NOT NULL`
	}
	rows, err := conn.Query(ctx, s.q(`SELECT key, coalesce(k.lim, 0), coalesce(k.weight, 0), coalesce(r.n, 0),
	coalesce(k.rate_per_second, 0), coalesce(k.rate_burst, 0)
FROM (SELECT key, lim, weight, rate_per_second, rate_burst FROM {s}.queue_keys WHERE queue = $1) k
FULL JOIN (SELECT key, count(*) AS n FROM (SELECT `+col+` AS key, 1 FROM {s}.tasks
	WHERE queue = $1 AND ist = 'running' AND `+col+` IS NOT NULL`+leased+`) z GROUP BY 1) r USING (key)
ORDER BY key`), queue)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (norn.KeyInfo, error) {
		var k norn.KeyInfo
		var lim, weight, burst int32
		err := row.Scan(&k.Key, &lim, &weight, &k.Running, &k.RateLimit.PerSecond, &burst)
		k.Limit, k.Weight, k.RateLimit.Burst = int(lim), int(weight), int(burst)
		return k, err
	})
}
