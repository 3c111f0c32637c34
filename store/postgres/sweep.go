package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// sweepBatch bounds every sweep statement so a backlog is worked off in
// short transactions instead of one huge one.
const sweepBatch = 1000

// Sweep runs one monitor pass now: expired leases, due delays and
// backoffs, retention. Every change is a compare-and-set on the (status,
// lease, version) read, so two nodes sweeping at once, or a worker
// finishing a task while it is swept, can never be overwritten.
func (s *Store) Sweep(ctx context.Context) (norn.SweepReport, error) {
	var rep norn.SweepReport
	// Leases past their earliest deadline become running rows, which the
	// timeout sweep then reads (batches.go).
	if err := s.withConn(ctx, func(conn *pgx.Conn) error { return s.settleExpired(ctx, conn) }); err != nil {
		return rep, err
	}
	if err := s.sweepTimeouts(ctx, &rep); err != nil {
		return rep, err
	}
	// Before the delays: a task whose expiry comes no later than its
	// run_at expires instead of becoming ready.
	if err := s.sweepExpiries(ctx, &rep); err != nil {
		return rep, err
	}
	if err := s.sweepDelays(ctx, &rep); err != nil {
		return rep, err
	}
	if err := s.sweepRetention(ctx, &rep); err != nil {
		return rep, err
	}
	if err := s.fireSchedules(ctx, &rep); err != nil {
		return rep, err
	}
	if err := s.fireBatches(ctx, &rep); err != nil {
		return rep, err
	}
	return rep, s.pruneKeyBuckets(ctx)
}

// noSortSQL runs before the statements that take the head of a partial
// index in order (claims, due delays, expired leases), in the same
// implicit transaction of a pipeline. Those tables churn faster than
// statistics follow: after a backlog was worked off and analyzed, a new
// backlog of 100,000 tasks was estimated at one row, and the planner
// preferred a bitmap scan of the whole backlog plus an on-disk sort to
// reading the first n index entries (claims took 250 ms instead of 2).
// With explicit sorts disabled, the ordered index scan is the only
// cheap plan, whatever the estimates say. (The disabled sort's nominal
// cost must not trigger JIT compilation: the store turns jit off for its
// sessions, and this statement does so again for sessions whose URL
// turned it on.)
const noSortSQL = "SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true)"

// sweepSetupSQL is noSortSQL for the monitor's statements (expired leases,
// due delays, retention, the next due time), which also must not read the
// task table sequentially or join it by hashing or merging. After a queue
// drained and VACUUM truncated the table, statistics say it has no pages;
// a plan made then reads the whole table, which costs nothing while it is
// empty, and the monitor runs its statements several times a second, so
// pgx's prepared statements soon get such a plan cached as their generic
// plan and keep it when the next backlog arrives, until autovacuum next
// analyzes the table (a minute or more after). Found in a burn-down of
// 200,000 tasks: the monitor's reads took 20–40 ms each, 15–25 µs of
// statement time per task. With sequential scans off the partial indexes
// are read, and with hash and merge joins off the tasks a statement
// changes are found by primary key, one probe each (a bounded batch: at
// most sweepBatch), never by a scan of the whole primary key.
const sweepSetupSQL = noSeqScanSQL + ", set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)"

// noSeqScanSQL is noSortSQL with sequential scans off, for the exclusive
// claim's transaction (claim_shared.go): its count of a queue's running tasks by
// key, planned on a drained table, would otherwise read the whole table
// at every claim instead of tasks_running.
const noSeqScanSQL = noSortSQL + ", set_config('enable_seqscan', 'off', true)"

// sweepCandidatesSQL reads the first $2 tasks matching cond in order.
func (s *Store) sweepCandidatesSQL(cond, order string) string {
	return s.q(`SELECT ` + colsCore + ` FROM {s}.tasks t WHERE ` + cond + ` ORDER BY ` + order + ` LIMIT $2`)
}

// timeoutCond and timeoutOrder select expired leases, oldest first.
const timeoutCond, timeoutOrder = `t.ist = 'running' AND t.deadline < $1`, `t.deadline`

// sweepCandidates reads tasks matching cond (a condition on t and $1 =
// now) without locking them.
func (s *Store) sweepCandidates(ctx context.Context, conn *pgx.Conn, cond, order string) (time.Time, []*rec, error) {
	now, err := s.dbNow(ctx, conn)
	if err != nil {
		return now, nil, err
	}
	now = micro(now)
	var out []*rec
	b := &pgx.Batch{}
	b.Queue(sweepSetupSQL)
	b.Queue(s.sweepCandidatesSQL(cond, order), now, sweepBatch).Query(func(rows pgx.Rows) (err error) {
		out, err = collectRecs(rows)
		return err
	})
	return now, out, conn.SendBatch(ctx, b).Close()
}

func (s *Store) sweepTimeouts(ctx context.Context, rep *norn.SweepReport) error {
	for {
		var n int
		err := s.withConn(ctx, func(conn *pgx.Conn) error {
			now, cands, err := s.sweepCandidates(ctx, conn, timeoutCond, timeoutOrder)
			if err != nil {
				return err
			}
			n = len(cands)
			if s.cfg.sweepPause != nil && n > 0 {
				s.cfg.sweepPause()
			}
			changes := make([]*change, 0, n)
			for _, o := range cands {
				r := o.clone()
				out := norn.AfterTimeout(&r.Task, now)
				h := norn.HistoryEntry{Type: out.History, Time: now, Worker: r.Owner, Lease: r.Lease, Progress: r.Progress, Error: &out.Error}
				r.Errors = append(r.Errors, out.Error)
				leaveRunning(r, out, now)
				changes = append(changes, &change{old: o, cur: r, hist: []norn.HistoryEntry{h}, kind: norn.EventKind(out.History)})
			}
			res, err := s.apply(ctx, conn, false, now, changes)
			if err != nil {
				return err
			}
			for _, c := range changes {
				if !res.ok[c.cur.ID] {
					continue // a heartbeat, completion or reclaim won the race
				}
				rep.CountTimeout(norn.Outcome{Status: c.cur.Status})
			}
			rep.Aborted += len(res.aborted)
			if len(res.ok) > 0 {
				s.wake.fire()
			}
			return nil
		})
		if err != nil || n < sweepBatch {
			return err
		}
	}
}

// expiryCond and expiryOrder select waiting tasks past their expiry
// (tasks_expiry), oldest first.
const expiryCond, expiryOrder = `t.expires_at <= $1 AND t.expires_at IS NOT NULL AND t.ist IN ('scheduled', 'blocked', 'ready', 'batched')`, `t.expires_at`

// sweepExpiries aborts the waiting tasks past their expiry (norn.Expire),
// with compare-and-set like the timeouts: a claim or a cancel that got
// there first wins. Their dependents follow as for any abort.
func (s *Store) sweepExpiries(ctx context.Context, rep *norn.SweepReport) error {
	for {
		var n int
		err := s.withConn(ctx, func(conn *pgx.Conn) error {
			now, cands, err := s.sweepCandidates(ctx, conn, expiryCond, expiryOrder)
			if err != nil {
				return err
			}
			n = len(cands)
			changes := make([]*change, 0, n)
			for _, o := range cands {
				r := o.clone()
				out := norn.Expire(r.ExpiresAt)
				r.Errors = append(r.Errors, out.Error)
				r.Status, r.endedAt = out.Status, now
				h := norn.HistoryEntry{Type: out.History, Time: now, Error: &out.Error}
				changes = append(changes, &change{old: o, cur: r, hist: []norn.HistoryEntry{h}, kind: norn.EventExpired})
			}
			res, err := s.apply(ctx, conn, false, now, changes)
			if err != nil {
				return err
			}
			rep.Expired += len(res.ok)
			rep.Aborted += len(res.aborted)
			return nil
		})
		if err != nil || n < sweepBatch {
			return err
		}
	}
}

// delaySQL releases due delays and backoffs ($1: now, or NULL for the
// database clock; $2 rows at most) in one statement: the due tasks are
// locked (SKIP LOCKED: a task some other transaction is changing is left
// for the next sweep) and re-checked as still scheduled and due, so there is
// no gap between reading and writing in which a cancel or update could be
// overwritten, and two nodes sweeping at once release each task once.
// The update finds them by their ids as an array, an index condition on
// the primary key whatever the estimates: joined to c, it could scan the
// whole primary key once the statistics said the table was empty.
func (s *Store) delaySQL() string { return s.sql.delay }

func (s *Store) buildDelaySQL() string {
	return s.q(`WITH n AS (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now),
c AS (SELECT t.id FROM {s}.tasks t WHERE t.ist = 'scheduled' AND t.run_at <= (SELECT now FROM n)
	ORDER BY t.run_at LIMIT $2 FOR UPDATE SKIP LOCKED),
upd AS (UPDATE {s}.tasks t SET status = 'ready', ready_at = n.now, updated = n.now, version = t.version + 1,
	history_count = t.history_count + 1
	FROM n WHERE t.id = ANY (ARRAY(SELECT c.id FROM c))
	RETURNING t.id, t.queue, t.status, t.version, t.history_count, 'TaskRelease'::text AS kind, t.updated AS time),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time) SELECT id, history_count, 'TaskRelease', time FROM upd)` +
		replaceHL(trimHistory, "$3") + s.eventsCTE("upd") + `
SELECT count(*), (SELECT count(*) FROM nt) FROM upd`)
}

func (s *Store) sweepDelays(ctx context.Context, rep *norn.SweepReport) error {
	for {
		var n int64
		err := s.withConn(ctx, func(conn *pgx.Conn) error {
			var cnt int64
			b := &pgx.Batch{}
			b.Queue(sweepSetupSQL)
			b.Queue(s.delaySQL(), s.clockNow(), sweepBatch, s.cfg.HistoryLimit).QueryRow(func(row pgx.Row) error {
				return row.Scan(&n, &cnt)
			})
			return conn.SendBatch(ctx, b).Close()
		})
		if err != nil {
			return err
		}
		rep.Released += int(n)
		if n > 0 {
			s.wake.fire()
		}
		if n < sweepBatch {
			return nil
		}
	}
}

// retained is what retention deletes: terminal tasks by status, each with
// its queue column and default.
var retained = []struct {
	status norn.Status
	col    string
	def    time.Duration
}{
	{norn.StatusCompleted, "retention_completed_ns", norn.DefaultRetention.Completed.D()},
	{norn.StatusAborted, "retention_aborted_ns", norn.DefaultRetention.Aborted.D()},
	{norn.StatusCancelled, "retention_cancelled_ns", norn.DefaultRetention.Cancelled.D()},
}

// sweepRetention deletes terminal tasks whose queue's retention for their
// status has passed since they ended: those tasks_ended holds (the index
// bounds the scan to tasks older than the shortest retention in force),
// then the plain completed tasks that ended_log holds.
func (s *Store) sweepRetention(ctx context.Context, rep *norn.SweepReport) error {
	drain := func(status norn.Status, col string, def time.Duration, logged bool) error {
		for more := true; more; {
			var err error
			if more, err = s.retainOnce(ctx, status, col, def, logged, rep); err != nil {
				return err
			}
		}
		return nil
	}
	for _, st := range retained {
		if err := drain(st.status, st.col, st.def, false); err != nil {
			return err
		}
	}
	c := retained[0] // completed: the only status ended_log holds
	return drain(c.status, c.col, c.def, true)
}

// retainOnce deletes one batch of the tasks of status whose retention has
// passed, found in tasks_ended or (logged) in ended_log, whose rows it
// drops in the same transaction. It says whether there may be more.
func (s *Store) retainOnce(ctx context.Context, status norn.Status, col string, def time.Duration, logged bool,
	rep *norn.SweepReport) (more bool, err error) {
	err = s.withTx(ctx, func(tx pgx.Tx) error {
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		now = micro(now)
		var minNS *int64
		if err := tx.QueryRow(ctx, s.q(`SELECT min(`+col+`) FROM {s}.queues WHERE `+col+` > 0`)).Scan(&minNS); err != nil {
			return err
		}
		minRet := def
		if minNS != nil && time.Duration(*minNS) < minRet {
			minRet = time.Duration(*minNS)
		}
		if _, err := tx.Exec(ctx, sweepSetupSQL); err != nil {
			return err
		}
		var ids []string
		if logged {
			var entries int
			err = tx.QueryRow(ctx, s.endedLogSQL(col), now.Add(-minRet), int64(def), now, sweepBatch).Scan(&entries, &ids)
			more = entries > 0
		} else {
			rows, qerr := tx.Query(ctx, s.retentionSQL(col), string(status), now.Add(-minRet), int64(def), now, sweepBatch)
			if qerr != nil {
				return qerr
			}
			ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
			more = len(ids) == sweepBatch
		}
		if err != nil || len(ids) == 0 {
			return err
		}
		// Only tasks still terminal in that status go: one that was
		// deleted or replaced meanwhile is left alone.
		rows, err := tx.Query(ctx, s.purgeSQL(), ids, string(status), now)
		if err != nil {
			return err
		}
		purged, err := pgx.CollectRows(rows, pgx.RowTo[string])
		rep.Purged += len(purged)
		return err
	})
	return more, err
}

// endedLogSQL takes the oldest rows of ended_log ended by $1 (now less the
// shortest retention in force) whose queue's retention (col, or the
// default $2 in nanoseconds) has passed at $3, up to about $4 tasks (at
// least one row), and deletes them. It answers how many rows it took and
// the ids among their tasks still completed whose own retention has
// passed: a task completed again since counts from its last end, and a
// later row holds it.
func (s *Store) endedLogSQL(col string) string {
	return s.q(fmt.Sprintf(`WITH e AS (SELECT x.id, x.ids, x.ret FROM (
	SELECT l.id, l.ids, coalesce(q.%[1]s, $2) AS ret,
		coalesce(sum(cardinality(l.ids)) OVER (ORDER BY l.ended_at, l.id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
	FROM {s}.ended_log l LEFT JOIN {s}.queues q ON q.name = l.queue COLLATE "default"
	WHERE l.ended_at <= $1 AND coalesce(q.%[1]s, $2) > 0
		AND l.ended_at + (coalesce(q.%[1]s, $2) / 1000) * interval '1 microsecond' <= $3
	ORDER BY l.ended_at, l.id LIMIT 256) x WHERE x.before < $4),
d AS (DELETE FROM {s}.ended_log l USING e WHERE l.id = e.id)
SELECT (SELECT count(*) FROM e)::int, coalesce((SELECT array_agg(t.id) FROM e, unnest(e.ids) u(id) JOIN {s}.tasks t ON t.id = u.id
	WHERE t.status = 'completed' AND t.ended_at + (e.ret / 1000) * interval '1 microsecond' <= $3), '{}')`, col))
}

// retentionSQL reads the ids of the first $5 tasks of status $1 that ended
// by $2 (now less the shortest retention in force) and whose queue's
// retention for that status (col, or the default $3 in nanoseconds) has
// passed at $4, oldest first, from tasks_ended. Task queues are in the C
// collation and queue names in the default one: the comparison names the
// latter so that queues_pkey can find each task's queue.
func (s *Store) retentionSQL(col string) string {
	return s.q(fmt.Sprintf(`SELECT t.id FROM {s}.tasks t LEFT JOIN {s}.queues q ON q.name = t.queue COLLATE "default"
WHERE t.ist = $1 AND t.ended_idx IS NOT NULL AND t.ended_idx <= $2
	AND coalesce(q.%[1]s, $3) > 0 AND t.ended_idx + (coalesce(q.%[1]s, $3) / 1000) * interval '1 microsecond' <= $4
ORDER BY t.ended_idx LIMIT $5`, col))
}

// purgeSQL deletes the tasks of ids ($1) still in status $2, with their
// history and log rows, and answers the ids it deleted.
func (s *Store) purgeSQL() string {
	return s.q(`WITH d AS (DELETE FROM {s}.tasks t WHERE t.id = ANY($1) AND t.status = $2
	RETURNING t.id, t.queue, t.status, t.version + 1 AS version, 'TaskDelete'::text AS kind, $3::timestamptz AS time),
dh AS (DELETE FROM {s}.task_history_rows h USING d WHERE h.task_id = d.id),
dl AS (DELETE FROM {s}.task_log l USING d WHERE l.task_id = d.id),
dg AS (DELETE FROM {s}.signals g USING d WHERE g.task_id = d.id)` + s.eventsCTE("d") + `
SELECT d.id FROM d WHERE (SELECT count(*) FROM nt) >= 0`)
}
