package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// RegisterWorker allocates "worker-<n>" from the database sequence.
func (s *Store) RegisterWorker(ctx context.Context, info norn.WorkerInfo) (string, error) {
	if err := info.Validate(); err != nil {
		return "", err
	}
	var id string
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		for {
			// Random ids (norn.NewWorkerID); n keeps the registration order.
			err := conn.QueryRow(ctx, s.q(`WITH n AS (SELECT nextval('{s}.worker_seq') AS n,
	coalesce($3::timestamptz, clock_timestamp()) AS now)
INSERT INTO {s}.workers (n, id, name, queues, registered, last_seen, registrar)
SELECT n.n, $4, $1, $2, n.now, n.now, nullif($5, '') FROM n ON CONFLICT (id) DO NOTHING RETURNING id`),
				info.Name, info.Queues, s.clockNow(), norn.NewWorkerID(), info.Registrar).Scan(&id)
			if err != pgx.ErrNoRows {
				return err
			}
		}
	})
	return id, err
}

// Worker returns one worker's registration, registrar included
// (norn.WorkerRegistry).
func (s *Store) Worker(ctx context.Context, id string) (norn.WorkerInfo, error) {
	var w norn.WorkerInfo
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		err := conn.QueryRow(ctx, s.q(`SELECT id, coalesce(name, ''), queues, registered, last_seen, coalesce(registrar, '')
FROM {s}.workers WHERE id = $1`), id).Scan(&w.ID, &w.Name, &w.Queues, &w.Registered, &w.LastSeen, &w.Registrar)
		if err == pgx.ErrNoRows {
			return norn.WorkerNotFound(id)
		}
		return err
	})
	w.Registered, w.LastSeen = w.Registered.UTC(), w.LastSeen.UTC()
	return w, err
}

// The assignment entry of the history is kept in the row (assign_seq,
// claimed_at, owner, lease) rather than written as a task_history_rows row:
// every task is claimed, so this saves a row and an index entry per task.
// A task reaching a claim never has an in-row assignment left (every other
// way out of running moves it into task_history_rows), so nothing is lost here.

// The assignment finds c's tasks by id only: c's rows are locked and were
// re-checked as ready when locked, so a status condition there would add
// nothing but a trap — with stale statistics the planner used it to scan the
// whole claim index as the outer side of the join (a million-row backlog
// made every claim read it all). It does not join c either: the ids are one
// array (an InitPlan) probed once through tasks_pkey. Joined with c as
// well, each of the n lookups carried both t.id = c.id and the array as
// its index condition, and PostgreSQL 15 sorts and steps through the whole
// array at every rescan of such a scan: O(n²) per claim, 22 µs per task
// at a claim of 1,000.

// Heartbeat extends the lease.
func (s *Store) Heartbeat(ctx context.Context, ref norn.LeaseRef, hb norn.Heartbeat) (time.Time, error) {
	res, err := s.leaseOps(ctx, []norn.LeaseOp{{Op: norn.OpHeartbeat, LeaseRef: ref, Heartbeat: hb}})
	if err != nil {
		return time.Time{}, err
	}
	if res[0].Err != nil {
		return time.Time{}, res[0].Err
	}
	return res[0].Deadline, nil
}

// Complete finishes the task successfully.
func (s *Store) Complete(ctx context.Context, ref norn.LeaseRef, result json.RawMessage) error {
	return s.single(ctx, norn.LeaseOp{Op: norn.OpComplete, LeaseRef: ref, Result: result})
}

// Fail records an error and retries or aborts.
func (s *Store) Fail(ctx context.Context, ref norn.LeaseRef, e norn.ErrorInfo) error {
	return s.single(ctx, norn.LeaseOp{Op: norn.OpFail, LeaseRef: ref, Error: &e})
}

// Abort finishes the task unsuccessfully.
func (s *Store) Abort(ctx context.Context, ref norn.LeaseRef, e norn.ErrorInfo) error {
	return s.single(ctx, norn.LeaseOp{Op: norn.OpAbort, LeaseRef: ref, Error: &e})
}

// Yield gives the task back.
func (s *Store) Yield(ctx context.Context, ref norn.LeaseRef) error {
	return s.single(ctx, norn.LeaseOp{Op: norn.OpYield, LeaseRef: ref})
}

// Snooze puts a running task back for later without counting the attempt.
func (s *Store) Snooze(ctx context.Context, ref norn.LeaseRef, sn norn.Snooze) (*norn.Task, error) {
	if sn.UntilSignal != "" {
		op := norn.LeaseOp{Op: norn.OpSnooze, LeaseRef: ref, Snooze: sn}
		if err := op.Validate(); err != nil {
			return nil, err
		}
		if err := s.snoozeUntilSignal(ctx, ref, sn); err != nil {
			return nil, err
		}
		return s.Get(ctx, ref.TaskID)
	}
	if err := s.single(ctx, norn.LeaseOp{Op: norn.OpSnooze, LeaseRef: ref, Snooze: sn}); err != nil {
		return nil, err
	}
	return s.Get(ctx, ref.TaskID)
}

func (s *Store) single(ctx context.Context, op norn.LeaseOp) error {
	res, err := s.leaseOps(ctx, []norn.LeaseOp{op})
	if err != nil {
		return err
	}
	if res[0].Err != nil {
		return res[0].Err
	}
	return nil
}

// LeaseBatch applies many lease operations; each op's error names it
// (norn.BatchOpError).
func (s *Store) LeaseBatch(ctx context.Context, ops []norn.LeaseOp) ([]norn.LeaseOpResult, error) {
	res, err := s.leaseOps(ctx, ops)
	for i := range res {
		if res[i].Err != nil {
			res[i].Err = norn.BatchOpError(i, res[i].Err)
		}
	}
	return res, err
}

// leaseOps applies lease operations in two round trips: one read of every
// task involved, one pipelined compare-and-set write. Operations that lose
// a race with a concurrent change are decided again on fresh state.
func (s *Store) leaseOps(ctx context.Context, ops []norn.LeaseOp) ([]norn.LeaseOpResult, error) {
	if err := norn.ValidateBatchSize(ops); err != nil {
		return nil, err
	}
	results := make([]norn.LeaseOpResult, len(ops))
	todo := make([]int, 0, len(ops))
	for i, op := range ops {
		if err := op.ValidateInBatch(); err != nil {
			results[i].Err = asNornErr(err)
			continue
		}
		todo = append(todo, i)
	}
	if fast := completions(ops, todo); len(fast) > 0 {
		done, err := s.completeFast(ctx, ops, fast)
		if err != nil {
			return nil, err
		}
		rest := todo[:0]
		for _, i := range todo {
			if !done[i] {
				rest = append(rest, i)
			}
		}
		todo = rest
	}
	for round := 0; len(todo) > 0; round++ {
		if round > 20 {
			return nil, norn.Unavailable(fmt.Errorf("lease operations keep losing races with concurrent changes"))
		}
		var retry []int
		err := s.withConn(ctx, func(conn *pgx.Conn) error {
			retry = retry[:0]
			ids := make([]string, 0, len(todo))
			for _, i := range todo {
				ids = append(ids, ops[i].TaskID)
			}
			now, recs, err := s.readWithNow(ctx, conn, ids)
			if err != nil {
				return err
			}
			holds, refused, err := s.keyHolds(ctx, conn, ops, todo, recs, results)
			if err != nil {
				return err
			}
			changes, order, opsOf := s.decideAll(ops, todo, recs, refused, now, results)
			if err := s.repeats(ctx, conn, ops, todo, recs, changes, results); err != nil {
				return err
			}
			res, err := s.apply(ctx, conn, false, now, order)
			if err != nil {
				return err
			}
			for _, c := range order {
				if !res.ok[c.cur.ID] {
					retry = append(retry, opsOf[c.cur.ID]...)
				}
			}
			if err := s.holdKeys(ctx, conn, ops, holds, recs, res.ok, now); err != nil {
				return err
			}
			if len(res.released) > 0 || readyAmong(order) {
				s.wake.fire()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		todo = retry
	}
	return results, nil
}

// decideAll decides every operation of ops[todo] in order on the evolving
// state (the tasks' rows in recs); several operations on one task become
// one change. Operations refused before (refused) are skipped. It returns
// the changes by task, in order, and each task's operations.
func (s *Store) decideAll(ops []norn.LeaseOp, todo []int, recs map[string]*rec, refused map[int]bool, now time.Time,
	results []norn.LeaseOpResult) (changes map[string]*change, order []*change, opsOf map[string][]int) {
	changes, opsOf = map[string]*change{}, map[string][]int{}
	for _, i := range todo {
		if refused[i] {
			continue // a snooze holding back a key without a rate limit
		}
		op := ops[i]
		id := op.TaskID
		c := changes[id]
		var r *rec
		if c != nil {
			r = c.cur
		} else if o := recs[id]; o != nil {
			r = o.clone()
		}
		dl, kind, hist, err := s.decide(op, r, now)
		results[i] = norn.LeaseOpResult{Deadline: dl, Err: asNornErr(err)}
		if err != nil {
			continue
		}
		if c == nil {
			c = &change{old: recs[id], cur: r}
			changes[id] = c
			order = append(order, c)
		}
		c.hist = append(c.hist, hist...)
		if kind != "" || c.kind == "" {
			c.kind = kind
		}
		opsOf[id] = append(opsOf[id], i)
	}
	return changes, order, opsOf
}

// repeats turns into successes the finishing operations refused as
// lease_lost that repeat the call that ended their lease (norn.IsRepeat),
// judged on the stored task: operations on a task this batch changes are
// left as decided.
func (s *Store) repeats(ctx context.Context, q querier, ops []norn.LeaseOp, todo []int, recs map[string]*rec,
	changes map[string]*change, results []norn.LeaseOpResult) error {
	var cand []int
	var ids []string
	for _, i := range todo {
		op := &ops[i]
		r := recs[op.TaskID]
		if op.Op == norn.OpHeartbeat || results[i].Err == nil || results[i].Err.Code != norn.CodeLeaseLost ||
			r == nil || r.Lease != op.Lease || changes[op.TaskID] != nil {
			continue
		}
		cand = append(cand, i)
		ids = append(ids, op.TaskID)
	}
	if len(cand) == 0 {
		return nil
	}
	rows, err := q.Query(ctx, s.q(`SELECT DISTINCT ON (task_id) task_id, type, coalesce(worker, ''), lease, error
FROM {s}.task_history WHERE task_id = ANY($1) AND lease IS NOT NULL ORDER BY task_id, seq DESC`), ids)
	if err != nil {
		return err
	}
	last := map[string]*norn.HistoryEntry{}
	for rows.Next() {
		var id, typ, worker string
		var lease int64
		var e []byte
		if err := rows.Scan(&id, &typ, &worker, &lease, &e); err != nil {
			rows.Close()
			return err
		}
		h := &norn.HistoryEntry{Type: norn.HistoryType(typ), Worker: worker, Lease: uint64(lease)}
		if len(e) > 0 {
			h.Error = new(norn.ErrorInfo)
			if err := json.Unmarshal(e, h.Error); err != nil {
				rows.Close()
				return err
			}
		}
		last[id] = h
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, i := range cand {
		if norn.IsRepeat(&ops[i], recs[ops[i].TaskID].Lease, last[ops[i].TaskID]) {
			results[i] = norn.LeaseOpResult{}
		}
	}
	return nil
}

// completions returns the operations the complete fast path may take:
// all of todo when every one is a completion of a different task (several
// operations on one task must be decided in order by the general path).
func completions(ops []norn.LeaseOp, todo []int) []int {
	seen := make(map[string]bool, len(todo))
	for _, i := range todo {
		if ops[i].Op != norn.OpComplete || seen[ops[i].TaskID] {
			return nil
		}
		seen[ops[i].TaskID] = true
	}
	return todo
}

// completeSQL completes tasks ($1 ids, $2 leases, $3 workers, $4 results)
// that are still running under the given lease and owner: one
// compare-and-set UPDATE that keeps the TaskComplete history entry in the
// row (done_seq), with the history trim and the events in the same
// statement. The status is compared with
// n.running, a join condition, rather than the literal 'running': a
// literal lets the planner prove the tasks_running partial index applies,
// and with stale statistics it then scanned every running task as the
// outer side of the join instead of looking the batch up by id.
func (s *Store) completeSQL() string { return s.sql.complete }

// buildCompleteSQL builds completeSQL. A task may also be running as a
// lease row's (still stored as ready), and then
// the completion writes the claim's part of the row as well (attempts,
// the assignment kept in the row, owner and lease). It also returns the
// lease row each such task was completed from (NULL for the others), for
// countLeaseDone.
func (s *Store) buildCompleteSQL() string {
	return s.q(`WITH n AS (SELECT coalesce($5::timestamptz, clock_timestamp()) AS now, 'running'::text AS running,
	'ready'::text AS ready),
lm AS (SELECT l.id AS lid, l.worker, l.created, u.id FROM {s}.leases l, unnest(l.ids) u(id) WHERE l.worker = ANY ($3::text[])),
x AS (SELECT x.id, x.lease, x.worker, x.result, lm.lid, lm.created
	FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[]) AS x(id, lease, worker, result)
	LEFT JOIN lm ON lm.id = x.id AND lm.worker = x.worker),
upd AS (UPDATE {s}.tasks t SET status = 'completed', progress = 1, result = x.result, deadline = NULL,
	ended_at = n.now, updated = n.now, owner = x.worker, lease = x.lease,
	attempts = t.attempts + CASE WHEN t.status = n.ready THEN 1 ELSE 0 END,
	claimed_at = CASE WHEN t.status = n.ready THEN x.created ELSE t.claimed_at END,
	assign_seq = CASE WHEN t.status = n.ready THEN t.history_count + 1 ELSE t.assign_seq END,
	version = t.version + CASE WHEN t.status = n.ready THEN 2 ELSE 1 END,
	history_count = t.history_count + CASE WHEN t.status = n.ready THEN 2 ELSE 1 END,
	done_seq = t.history_count + CASE WHEN t.status = n.ready THEN 2 ELSE 1 END,
	ready_batch = NULL
	FROM x, n
	WHERE t.id = x.id AND t.id = ANY ($1::text[]) AND (
		(t.status = n.running AND t.lease = x.lease AND t.owner = x.worker)
		OR (t.status = n.ready AND t.ready_batch IS NOT NULL AND x.lid IS NOT NULL AND x.lease = t.lease + 1))
	RETURNING t.id, t.queue, t.status, t.version, t.history_count, 'TaskComplete'::text AS kind, t.updated AS time, x.lid,
		t.ended_at, t.ist IS NULL AS logged)` +
		replaceHL(trimHistory, "$6") + s.eventsCTE("upd") + endedLog("upd") + `
SELECT id, lid FROM upd WHERE (SELECT count(*) FROM nt) >= 0`)
}

// completeFast applies completions (ops[i] for i in idx, distinct tasks) in
// one round trip, merged with other callers' (completer): the
// compare-and-set of completeSQL and, pipelined in the same implicit
// transaction, the release of their dependents. It returns
// the operations that took effect; the others (lease lost, cancelled, not
// found, ...) go through the general path, which reads the tasks and says
// why. No read precedes the write: a live lease is all a completion needs.
func (s *Store) completeFast(ctx context.Context, ops []norn.LeaseOp, idx []int) (map[int]bool, error) {
	req := &completeReq{ids: make([]string, len(idx)), leases: make([]int64, len(idx)),
		workers: make([]string, len(idx)), results: make([][]byte, len(idx))}
	for k, i := range idx {
		op := ops[i]
		req.ids[k], req.leases[k], req.workers[k] = op.TaskID, int64(op.Lease), op.Worker
		if len(op.Result) > 0 {
			req.results[k] = op.Result
		}
	}
	if err := s.completer.complete(ctx, req); err != nil {
		return nil, err
	}
	done := make(map[int]bool, len(idx))
	for k, i := range idx {
		if req.done[k] {
			done[i] = true
		}
	}
	return done, nil
}

func readyAmong(cs []*change) bool {
	for _, c := range cs {
		if c.cur.Status == norn.StatusReady && c.old.Status != norn.StatusReady {
			return true
		}
	}
	return false
}

// readWithNow reads tasks and the time in one round trip.
func (s *Store) readWithNow(ctx context.Context, q querier, ids []string) (time.Time, map[string]*rec, error) {
	b := &pgx.Batch{}
	s.queueDetach(b, ids)
	var now time.Time
	var recs map[string]*rec
	b.Queue("SELECT clock_timestamp()").QueryRow(func(row pgx.Row) error { return row.Scan(&now) })
	b.Queue(s.q(`SELECT `+colsCore+` FROM {s}.tasks t WHERE t.id = ANY($1)`), ids).Query(func(rows pgx.Rows) (err error) {
		recs, err = recsByID(rows)
		return err
	})
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return now, nil, err
	}
	if c := s.clockNow(); c != nil {
		now = *c
	}
	return micro(now), recs, nil
}

// checkLease is the fencing rule shared by every worker call.
func checkLease(r *rec, ref norn.LeaseRef) error {
	if r == nil {
		return norn.NotFound(ref.TaskID)
	}
	if r.Status == norn.StatusCancelled {
		return norn.Cancelled(ref.TaskID)
	}
	if r.Status != norn.StatusRunning || r.Lease != ref.Lease || r.Owner != ref.Worker {
		return norn.LeaseLost(ref.TaskID, ref.Lease)
	}
	return nil
}

// decide applies one lease operation to r in memory (the same rules the
// embedded store follows, through the shared pure decisions of package norn).
func asNornErr(err error) *norn.Error {
	if err == nil {
		return nil
	}
	if ne, ok := err.(*norn.Error); ok {
		return ne
	}
	return &norn.Error{Code: norn.CodeInternal, Message: err.Error()}
}

func (s *Store) decide(op norn.LeaseOp, r *rec, now time.Time) (deadline time.Time, kind norn.EventKind, hist []norn.HistoryEntry, err error) {
	if err := checkLease(r, op.LeaseRef); err != nil {
		return time.Time{}, "", nil, err
	}
	entry := func(t norn.HistoryType, e *norn.ErrorInfo) norn.HistoryEntry {
		return norn.HistoryEntry{Type: t, Time: now, Worker: r.Owner, Lease: r.Lease, Progress: r.Progress, Error: e}
	}
	switch op.Op {
	case norn.OpHeartbeat:
		dl, ok := norn.HeartbeatDeadline(now, r.Updated, r.Deadline, r.Timeout.D(), op.Extend.D(), norn.RuntimeLimit(r.Started, r.MaxRuntime))
		if !ok {
			return time.Time{}, "", nil, norn.RuntimeLeaseLost(op.TaskID, op.Lease)
		}
		r.Deadline = micro(dl)
		if op.Progress != nil {
			r.Progress = *op.Progress
			kind = norn.EventProgress
		}
		return r.Deadline, kind, nil, nil
	case norn.OpComplete:
		r.Progress = 1
		r.Status = norn.StatusCompleted
		r.Result = append(json.RawMessage(nil), op.Result...)
		if len(r.Result) == 0 {
			r.Result = nil
		}
		r.Deadline, r.endedAt = time.Time{}, now
		return time.Time{}, norn.EventKind(norn.TaskComplete), []norn.HistoryEntry{entry(norn.TaskComplete, nil)}, nil
	case norn.OpFail:
		o := norn.AfterFailure(&r.Task, now, *op.Error)
		h := entry(o.History, &o.Error)
		r.Errors = append(r.Errors, o.Error)
		leaveRunning(r, o, now)
		return time.Time{}, norn.EventKind(o.History), []norn.HistoryEntry{h}, nil
	case norn.OpAbort:
		e := *op.Error
		r.Errors = append(r.Errors, e)
		leaveRunning(r, norn.Outcome{Status: norn.StatusAborted}, now)
		return time.Time{}, norn.EventKind(norn.TaskAbort), []norn.HistoryEntry{entry(norn.TaskAbort, &e)}, nil
	case norn.OpYield, norn.OpSnooze:
		o := norn.AfterYield(now)
		if op.Op == norn.OpSnooze {
			o = norn.AfterSnooze(now, op.Snooze)
		}
		h := entry(o.History, nil)
		leaveRunning(r, o, now)
		return time.Time{}, norn.EventKind(o.History), []norn.HistoryEntry{h}, nil
	}
	return time.Time{}, "", nil, norn.Invalid("op", "unknown operation %q", op.Op)
}

// leaveRunning writes what o does to a running task at now, by the rules
// the embedded store applies too: it ends (aborted), or goes back to the
// queue (norn.Outcome.Requeue) with no deadline or progress, its owner and
// attempt as o says. The lease number stays, so the next claim still
// fences out the last worker.
func leaveRunning(r *rec, o norn.Outcome, now time.Time) {
	r.Deadline = time.Time{}
	if o.Status == norn.StatusAborted {
		r.Status, r.endedAt = o.Status, now
		return
	}
	r.Progress = 0
	if !o.KeepsOwner() {
		r.Owner = ""
	}
	if o.GivesAttemptBack() && r.Attempts > 0 {
		r.Attempts--
	}
	var at time.Time
	r.Status, at = o.Requeue(now)
	r.RunAt = micro(at)
	if r.Status == norn.StatusReady {
		r.readyAt = now
	}
}

// AppendLog appends a log entry under a live lease in one statement.
func (s *Store) AppendLog(ctx context.Context, ref norn.LeaseRef, entry norn.LogAppend) (norn.LogEntry, error) {
	if err := ref.Validate(); err != nil {
		return norn.LogEntry{}, err
	}
	if err := entry.Validate(); err != nil {
		return norn.LogEntry{}, err
	}
	var out norn.LogEntry
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		var seq int64
		var at time.Time
		err := conn.QueryRow(ctx, s.q(`WITH n AS (SELECT coalesce($5::timestamptz, clock_timestamp()) AS now),
t AS (UPDATE {s}.tasks SET log_seq = log_seq + 1
	WHERE id = $1 AND status = 'running' AND lease = $2 AND owner = $3 AND ($4::bigint = 0 OR log_seq + 1 = $4::bigint)
	RETURNING id, log_seq),
i AS (INSERT INTO {s}.task_log (task_id, seq, lease, time, data) SELECT t.id, t.log_seq, $2, n.now, $6 FROM t, n)
SELECT t.log_seq, n.now FROM t, n`), ref.TaskID, int64(ref.Lease), ref.Worker, int64(entry.Seq), s.clockNow(), []byte(entry.Data)).Scan(&seq, &at)
		if err == pgx.ErrNoRows {
			recs, err := s.readCore(ctx, conn, []string{ref.TaskID}, false)
			if err != nil {
				return err
			}
			r := recs[ref.TaskID]
			if r != nil && entry.Seq != 0 && entry.Seq <= r.logSeq {
				// A retried append whose first attempt took effect.
				prev := norn.LogEntry{Seq: entry.Seq}
				var lease int64
				err := conn.QueryRow(ctx, s.q(`SELECT lease, time, data FROM {s}.task_log WHERE task_id = $1 AND seq = $2`),
					ref.TaskID, int64(entry.Seq)).Scan(&lease, &prev.Time, &prev.Data)
				if err != nil && err != pgx.ErrNoRows {
					return err
				}
				prev.Lease, prev.Time = uint64(lease), prev.Time.UTC()
				if err == nil && norn.IsLogRepeat(ref, entry, &prev) {
					out = prev
					return nil
				}
			}
			if err := checkLease(r, ref); err != nil {
				return err
			}
			return entry.CheckSeq(ref.TaskID, r.logSeq+1)
		}
		if err != nil {
			return err
		}
		out = norn.LogEntry{Seq: uint64(seq), Lease: ref.Lease, Time: at.UTC(), Data: append(json.RawMessage(nil), entry.Data...)}
		return nil
	})
	return out, err
}

// ReadLog returns log entries after a sequence number.
func (s *Store) ReadLog(ctx context.Context, id string, after uint64, limit int) ([]norn.LogEntry, error) {
	if err := norn.ValidateLogRead(id, limit); err != nil {
		return nil, err
	}
	var out []norn.LogEntry
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = nil
		var lim any
		if limit > 0 {
			lim = limit
		}
		b := &pgx.Batch{}
		b.Queue(s.q(`SELECT 1 FROM {s}.tasks WHERE id = $1`), id).QueryRow(func(row pgx.Row) error {
			var one int
			if err := row.Scan(&one); err != pgx.ErrNoRows {
				return err
			}
			return norn.NotFound(id)
		})
		b.Queue(s.q(`SELECT seq, lease, time, data FROM {s}.task_log WHERE task_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`), id, int64(after), lim).Query(func(rows pgx.Rows) (err error) {
			out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (norn.LogEntry, error) {
				var e norn.LogEntry
				var seq, lease int64
				var data []byte
				err := row.Scan(&seq, &lease, &e.Time, &data)
				e.Seq, e.Lease, e.Time, e.Data = uint64(seq), uint64(lease), e.Time.UTC(), data
				return e, err
			})
			return err
		})
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if out == nil {
			out = []norn.LogEntry{} // as the embedded store answers: [] over HTTP, not null
		}
		return nil
	})
	return out, err
}
