package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// change is one computed state change of a task: old is the state it was
// computed from, and the write only applies if the row still has old's
// (status, lease, version) — the compare-and-set every transition uses.
type change struct {
	old  *rec
	cur  *rec
	hist []norn.HistoryEntry
	// kind is the event published (empty: none, e.g. a plain heartbeat).
	kind norn.EventKind
}

// eventsCTE publishes the changes in the CTE src (columns kind, id, queue,
// status, version, time). While some node has a Subscribe stream that
// wants every event (a live row in event_subscribers without counts_only)
// it sends one notification line per row, in chunks that stay well under
// NOTIFY's 8000-byte payload limit. While the live rows all say
// counts_only, the counted kinds (norn.CountedKinds) go as one line per
// kind, queue and status, with the count in the version field and no id
// (eventLine), and the rest one line per row. With no live row it sends
// nothing per row: only "wake" when a task became ready (long-polling
// claimers on other nodes look again) and "sched" when one was delayed (the
// monitor leader recomputes its next sweep); PostgreSQL folds repeated
// notifications of a transaction into one. The statement's final SELECT
// must reference nt, or PostgreSQL never evaluates it; it does so as
// "WHERE (SELECT count(*) FROM nt) >= 0" or a scalar subquery in the select
// list — both run once — never by joining the count as a subquery in FROM,
// which PostgreSQL re-aggregates once per row of the other side.
// Each branch of ev tests the level alone (a one-time filter: a branch
// whose level is not in force reads none of src's rows).
func (s *Store) eventsCTE(src string) string {
	return `, evon AS (SELECT level, level = 0 AS off FROM (` + eventLevelSQL + `) l),
ev AS (SELECT ` + eventLineSQL + ` AS line FROM ` + src + ` WHERE (SELECT level FROM evon) = 2 AND kind <> ''
	UNION ALL SELECT ` + eventLineSQL + ` FROM ` + src + `
	WHERE (SELECT level FROM evon) = 1 AND kind <> '' AND kind NOT IN ` + countedKindsSQL + `
	UNION ALL SELECT kind || chr(9) || chr(9) || queue || chr(9) || status || chr(9) || count(*)::text
	|| chr(9) || (extract(epoch FROM max(time)) * 1000000)::bigint::text FROM ` + src + `
	WHERE (SELECT level FROM evon) = 1 AND kind IN ` + countedKindsSQL + ` GROUP BY kind, queue, status),
nt AS (SELECT pg_notify(` + s.chanLit + `, string_agg(line, chr(10))) FROM
	(SELECT line, (row_number() OVER () - 1) / 20 AS g FROM ev) x GROUP BY g
	UNION ALL SELECT pg_notify(` + s.chanLit + `, 'wake') WHERE (SELECT off FROM evon)
		AND EXISTS (SELECT 1 FROM ` + src + ` WHERE status = 'ready')
	UNION ALL SELECT pg_notify(` + s.chanLit + `, 'sched') WHERE (SELECT off FROM evon)
		AND EXISTS (SELECT 1 FROM ` + src + ` WHERE status = 'scheduled'))`
}

// eventLineSQL is one row's event line (eventLine).
const eventLineSQL = `kind || chr(9) || id || chr(9) || queue || chr(9) || status || chr(9) || version::text
	|| chr(9) || (extract(epoch FROM time) * 1000000)::bigint::text`

// endedLogCTE logs the plain tasks a statement completed (src's rows with
// logged true; queue, id and ended_at) in ended_log, one row a queue: no
// index holds them (ist), and retention finds them there. Every statement
// that completes a task appends it (the complete fast path and the
// compare-and-set), and an import of completed tasks.
const endedLogCTE = `, el AS (INSERT INTO {s}.ended_log (queue, ended_at, ids)
	SELECT queue, max(ended_at), array_agg(id) FROM %s WHERE logged GROUP BY queue)`

func endedLog(src string) string { return fmt.Sprintf(endedLogCTE, src) }

// trimHistory drops the oldest history rows of the tasks in upd beyond the
// cap. The tasks over the cap are collected into an array first (an
// InitPlan, usually empty), so the rows are found with the primary key: as
// a join, the planner could choose a hash join that reads all of
// task_history_rows on every claim.
const trimHistory = `, tr AS (DELETE FROM {s}.task_history_rows d
	WHERE d.task_id = ANY (ARRAY(SELECT id FROM upd WHERE history_count > $HL))
	AND d.seq <= (SELECT u.history_count - $HL FROM upd u WHERE u.id = d.task_id))`

func (s *Store) casSQL() string { return s.sql.cas }

func (s *Store) buildCasSQL() string {
	return s.q(`WITH u AS (SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[],
	$6::bigint[], $7::float8[], $8::text[], $9::timestamptz[], $10::timestamptz[], $11::timestamptz[],
	$12::timestamptz[], $13::int[], $14::text[], $15::timestamptz[], $16::bigint[], $17::int[], $18::bytea[],
	$19::text[], $20::int[], $21::bigint[], $22::text[])
	AS u(id, old_version, old_status, old_lease, status, priority, progress, labels, updated, run_at, ready_at,
	ended_at, pending_deps, owner, deadline, lease, attempts, result, errors, history_count, version, kind)),
upd AS (UPDATE {s}.tasks t SET status = u.status, priority = u.priority, progress = u.progress,
	labels = u.labels::jsonb, updated = u.updated, run_at = u.run_at, ready_at = u.ready_at,
	ended_at = u.ended_at, pending_deps = u.pending_deps, owner = u.owner, deadline = u.deadline,
	lease = u.lease, attempts = u.attempts, result = u.result, errors = u.errors::jsonb,
	history_count = u.history_count, version = u.version, assign_seq = 0, done_seq = 0
	FROM u WHERE t.id = u.id AND t.id = ANY ($1::text[]) AND t.version = u.old_version AND t.status = u.old_status AND t.lease = u.old_lease
	RETURNING t.id, t.queue, t.status, t.version, t.history_count, u.kind, t.updated AS time, t.ended_at,
		t.status = 'completed' AND t.ist IS NULL AND u.old_status <> 'completed' AS logged),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time, worker, lease, progress, error)
	SELECT x.task_id, x.seq, x.type, x.time, x.worker, x.lease, x.progress, x.error::jsonb
	FROM unnest($23::text[], $24::int[], $25::text[], $26::timestamptz[], $27::text[], $28::bigint[],
	$29::float8[], $30::text[]) AS x(task_id, seq, type, time, worker, lease, progress, error)
	WHERE x.task_id IN (SELECT id FROM upd))` + replaceHL(trimHistory, "$31") + s.eventsCTE("upd") + endedLog("upd") + `
SELECT id, (SELECT count(*) FROM nt) FROM upd`)
}

func replaceHL(sql, param string) string {
	out := []byte{}
	for i := 0; i < len(sql); i++ {
		if i+3 <= len(sql) && sql[i:i+3] == "$HL" {
			out = append(out, param...)
			i += 2
			continue
		}
		out = append(out, sql[i])
	}
	return string(out)
}

// releaseSQL releases the blocked dependents of tasks that just completed
// ($1 ids at $2 versions, at time $3 or the database's when NULL; a NULL version means "completed by this
// transaction", for the complete fast path that learns versions only from
// the write pipelined just before): one fewer pending dependency each, and
// those with none left become ready (or scheduled while run_at is ahead)
// with a TaskRelease entry. Dependents are locked in id order so concurrent
// releases cannot deadlock. It must be a statement of its own after the
// completion (not a CTE of it): a dependent submitted while the completion
// waited for its share lock is only visible to a later snapshot. The
// cheap GIN probe for any blocked dependent comes first, so the usual case
// (nothing waits on these tasks) costs one empty index lookup. (It is
// MATERIALIZED so the planner costs the whole probe: as an EXISTS it
// guessed a sequential scan would find a row at once.)
func (s *Store) releaseSQL() string { return s.sql.release }

func (s *Store) buildReleaseSQL() string {
	return s.q(`WITH n AS (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now),
cand AS MATERIALIZED (SELECT b.id FROM {s}.tasks b WHERE b.ist = 'blocked' AND b.depends_on && $1::text[]),
c AS (SELECT t.id FROM {s}.tasks t JOIN unnest($1::text[], $2::bigint[]) x(id, v)
	ON t.id = x.id AND (t.version = x.v OR (x.v IS NULL AND t.xmin = pg_current_xact_id()::xid))
	WHERE t.id = ANY ($1::text[]) AND t.status = 'completed' AND EXISTS (SELECT 1 FROM cand)),
ca AS (SELECT array_agg(id) AS ids FROM c),
d AS (SELECT b.id, (SELECT count(*) FROM unnest(b.depends_on) dep WHERE dep = ANY(ca.ids)
		AND NOT coalesce(b.dep_results ? dep, false))::int AS n,
	(SELECT jsonb_object_agg(dep.id, (SELECT ` + depResultSQL + ` FROM {s}.tasks t WHERE t.id = dep.id))
		FROM unnest(b.depends_on) dep(id) WHERE dep.id = ANY(ca.ids) AND NOT coalesce(b.dep_results ? dep.id, false)) AS res
	FROM {s}.tasks b, ca WHERE ca.ids IS NOT NULL AND b.id = ANY (ARRAY(SELECT cand.id FROM cand))
	AND b.ist = 'blocked' AND b.depends_on && ca.ids
	ORDER BY b.id FOR UPDATE OF b),
upd AS (UPDATE {s}.tasks b SET pending_deps = b.pending_deps - d.n,
	dep_results = coalesce(b.dep_results, '{}'::jsonb) || d.res,
	status = CASE WHEN b.pending_deps - d.n > 0 THEN 'blocked' WHEN b.run_at > n.now THEN 'scheduled' ELSE 'ready' END,
	ready_at = CASE WHEN b.pending_deps - d.n <= 0 THEN n.now ELSE b.ready_at END,
	history_count = b.history_count + CASE WHEN b.pending_deps - d.n <= 0 THEN 1 ELSE 0 END,
	version = b.version + CASE WHEN b.pending_deps - d.n <= 0 THEN 1 ELSE 0 END,
	updated = CASE WHEN b.pending_deps - d.n <= 0 THEN n.now ELSE b.updated END
	FROM d, n WHERE b.id = d.id AND b.id = ANY (ARRAY(SELECT d.id FROM d)) AND b.status = 'blocked' AND d.n > 0
	RETURNING b.id, b.queue, b.status, b.version, b.history_count,
	CASE WHEN b.status = 'blocked' THEN '' ELSE 'TaskRelease' END AS kind, b.updated AS time),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time)
	SELECT id, history_count, 'TaskRelease', time FROM upd WHERE kind <> '')` +
		replaceHL(trimHistory, "$4") + s.eventsCTE("upd") + `
SELECT id, status, (SELECT count(*) FROM nt) FROM upd`)
}

// cascadeSQL settles the blocked dependents of tasks that failed ($1 ids;
// where $2 holds a version the failure is checked against it, where it is
// NULL the id is taken as failed or deleted). A dependent whose
// on_dependency_failure is run records the failure (status and last error,
// "deleted" for a row gone) and counts it as ended, released when it was
// the last; the others are aborted with the error in $5 (JSON, decided by
// norn: norn.DependencyFailed or norn.DependencyDeleted) of their first
// failed dependency, and are returned so the caller can cascade further.
// nt is referenced in the WHERE, where it is one filter evaluated once:
// in the select list it ran only for an aborted row, so a cascade that
// only released dependents published nothing and woke no claimer.
// A failure already recorded (a dependency retried and failed again) is
// not counted twice.
func (s *Store) cascadeSQL() string { return s.sql.cascade }

func (s *Store) buildCascadeSQL() string {
	return s.q(`WITH f AS (SELECT x.id, x.err, coalesce(t.status, 'deleted') AS st, t.errors->-1 AS last
	FROM unnest($1::text[], $2::bigint[], $5::text[]) x(id, v, err)
	LEFT JOIN LATERAL (SELECT t.status, t.errors, t.version FROM {s}.tasks t WHERE t.id = x.id) t ON true
	WHERE x.v IS NULL OR (t.version = x.v AND t.status IN ('aborted', 'cancelled'))),
fa AS (SELECT array_agg(id) AS ids FROM f),
d AS (SELECT b.id, b.dep_run, (SELECT f.err::jsonb FROM unnest(b.depends_on) WITH ORDINALITY AS dep(id, n)
	JOIN f ON f.id = dep.id ORDER BY dep.n LIMIT 1) AS err,
	(SELECT count(*) FROM f WHERE f.id = ANY(b.depends_on) AND NOT coalesce(b.dep_results ? f.id, false))::int AS n,
	(SELECT jsonb_object_agg(f.id, jsonb_strip_nulls(jsonb_build_object('status', f.st, 'error', f.last)))
		FROM f WHERE f.id = ANY(b.depends_on) AND NOT coalesce(b.dep_results ? f.id, false)) AS res
	FROM {s}.tasks b, fa WHERE fa.ids IS NOT NULL AND b.ist = 'blocked' AND b.depends_on && fa.ids
	ORDER BY b.id FOR UPDATE OF b),
upd AS (UPDATE {s}.tasks b SET
	status = CASE WHEN NOT d.dep_run THEN 'aborted' WHEN b.pending_deps - d.n > 0 THEN 'blocked'
		WHEN b.run_at > $3 THEN 'scheduled' ELSE 'ready' END,
	ended_at = CASE WHEN d.dep_run THEN b.ended_at ELSE $3 END,
	ready_at = CASE WHEN d.dep_run AND b.pending_deps - d.n <= 0 THEN $3 ELSE b.ready_at END,
	pending_deps = CASE WHEN d.dep_run THEN b.pending_deps - d.n ELSE b.pending_deps END,
	dep_results = CASE WHEN d.dep_run THEN coalesce(b.dep_results, '{}'::jsonb) || d.res ELSE b.dep_results END,
	errors = CASE WHEN d.dep_run THEN b.errors ELSE coalesce(b.errors, '[]'::jsonb) || jsonb_build_array(d.err) END,
	updated = CASE WHEN d.dep_run AND b.pending_deps - d.n > 0 THEN b.updated ELSE $3 END,
	version = b.version + CASE WHEN d.dep_run AND b.pending_deps - d.n > 0 THEN 0 ELSE 1 END,
	history_count = b.history_count + CASE WHEN d.dep_run AND b.pending_deps - d.n > 0 THEN 0 ELSE 1 END
	FROM d WHERE b.id = d.id AND b.status = 'blocked' AND (NOT d.dep_run OR d.n > 0)
	RETURNING b.id, b.queue, b.status, b.version, b.history_count,
	CASE WHEN b.status = 'blocked' THEN '' WHEN d.dep_run THEN 'TaskRelease' ELSE 'TaskAbort' END::text AS kind, b.updated AS time,
	CASE WHEN d.dep_run THEN NULL ELSE d.err END AS err),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time, error)
	SELECT id, history_count, kind, time, err FROM upd WHERE kind <> '')` +
		replaceHL(trimHistory, "$4") + s.eventsCTE("upd") + `
SELECT id FROM upd WHERE (SELECT count(*) FROM nt) >= 0 AND kind = 'TaskAbort'`)
}

// applyResult says which changes took effect.
type applyResult struct {
	ok       map[string]bool // task id → the compare-and-set succeeded
	released []string        // dependents released to ready/scheduled
	aborted  []string        // dependents aborted by a failure cascade
}

// apply writes changes with compare-and-set, releases or aborts
// dependents of tasks that completed or failed, and publishes events — in
// one round trip when no failure cascade is possible. q is a connection
// (inTx false) or the caller's transaction (inTx true).
func (s *Store) apply(ctx context.Context, q querier, inTx bool, now time.Time, changes []*change) (applyResult, error) {
	res := applyResult{ok: map[string]bool{}}
	if len(changes) == 0 {
		return res, nil
	}
	a := s.newCasArgs(changes, now)
	// A failure cascade takes more than one statement: all in one transaction.
	ownTx := !inTx && len(a.failed) > 0
	rollback := func() {
		if ownTx {
			_, _ = q.Exec(context.Background(), "ROLLBACK")
		}
	}
	next, err := s.sendCas(ctx, q, ownTx, now, a, &res)
	if err != nil {
		rollback()
		return res, err
	}
	res.aborted = append(res.aborted, next...)
	if len(next) > 0 {
		more, err := s.cascade(ctx, q, now, next, abortedErrs(next))
		if err != nil {
			rollback()
			return res, err
		}
		res.aborted = append(res.aborted, more...)
	}
	if ownTx {
		if _, err := q.Exec(ctx, "COMMIT"); err != nil {
			return res, err
		}
	}
	return res, nil
}

// casArgs are the column arrays of casSQL (one element per change, and
// one per history entry written), and the tasks whose dependents the
// changes release (completed) or abort (failed).
type casArgs struct {
	ids, oldStatus, status, kinds     []string
	oldVersion, oldLease, prio, lease []int64
	version                           []int64
	progress                          []float64
	labels, owner, errs               []*string
	updated, runAt, readyAt           []time.Time
	ended, deadline                   []*time.Time
	pending, attempts, hcount         []int32
	result                            [][]byte

	hID, hType    []string
	hSeq          []int32
	hTime         []time.Time
	hWorker, hErr []*string
	hLease        []*int64
	hProg         []*float64

	completed, completedV, failed, failV []any
	failErrs                             []string
}

// newCasArgs turns changes into casArgs; it sets each change's new
// version, update time and history count.
func (s *Store) newCasArgs(changes []*change, now time.Time) *casArgs {
	n := len(changes)
	a := &casArgs{
		ids: make([]string, n), oldStatus: make([]string, n), status: make([]string, n), kinds: make([]string, n),
		oldVersion: make([]int64, n), oldLease: make([]int64, n), prio: make([]int64, n), lease: make([]int64, n),
		version: make([]int64, n), progress: make([]float64, n),
		labels: make([]*string, n), owner: make([]*string, n), errs: make([]*string, n),
		updated: make([]time.Time, n), runAt: make([]time.Time, n), readyAt: make([]time.Time, n),
		ended: make([]*time.Time, n), deadline: make([]*time.Time, n),
		pending: make([]int32, n), attempts: make([]int32, n), hcount: make([]int32, n), result: make([][]byte, n),
	}
	for i, c := range changes {
		o, t := c.old, c.cur
		s.addHistory(a, c)
		t.Version = o.Version + 1
		t.Updated = now
		a.ids[i], a.oldStatus[i], a.status[i], a.kinds[i] = t.ID, string(o.Status), string(t.Status), string(c.kind)
		a.oldVersion[i], a.oldLease[i], a.prio[i], a.lease[i] = int64(o.Version), int64(o.Lease), int64(t.Priority), int64(t.Lease)
		a.version[i] = int64(t.Version)
		a.progress[i] = t.Progress
		a.labels[i], a.owner[i], a.errs[i] = labelsJSON(t.Labels), strPtr(t.Owner), errorsJSON(t.Errors)
		a.updated[i], a.runAt[i], a.readyAt[i] = micro(t.Updated), micro(t.RunAt), micro(t.readyAt)
		a.ended[i], a.deadline[i] = timePtr(micro(t.endedAt)), timePtr(micro(t.Deadline))
		a.pending[i], a.attempts[i], a.hcount[i] = int32(t.pendingDeps), int32(t.Attempts), int32(t.historyCount)
		a.result[i] = t.Result
		if t.Status != o.Status {
			switch t.Status {
			case norn.StatusCompleted:
				a.completed, a.completedV = append(a.completed, t.ID), append(a.completedV, int64(t.Version))
			case norn.StatusAborted, norn.StatusCancelled:
				a.failed, a.failV = append(a.failed, t.ID), append(a.failV, int64(t.Version))
				a.failErrs = append(a.failErrs, errJSON(norn.DependencyFailed(t.ID, t.Status)))
			}
		}
	}
	return a
}

// addHistory adds the history rows change c writes to a. Entries kept in
// the row move to task_history_rows first (unless the cap dropped them
// already): the write clears them, and a later transition may change the
// owner and lease they are read from.
func (s *Store) addHistory(a *casArgs, c *change) {
	o, t := c.old, c.cur
	hist := c.hist
	var seqs []int
	keep := func(seq int) bool { return seq > 0 && seq > o.historyCount-s.cfg.HistoryLimit }
	if keep(o.assignSeq) || keep(o.doneSeq) {
		var pre []norn.HistoryEntry
		if keep(o.assignSeq) {
			pre = append(pre, norn.HistoryEntry{Type: norn.TaskAssignment, Time: o.claimedAt, Worker: o.Owner, Lease: o.Lease})
			seqs = append(seqs, o.assignSeq)
		}
		if keep(o.doneSeq) {
			pre = append(pre, norn.HistoryEntry{Type: norn.TaskComplete, Time: o.endedAt, Worker: o.Owner, Lease: o.Lease, Progress: 1})
			seqs = append(seqs, o.doneSeq)
		}
		hist = append(pre, hist...)
	}
	t.assignSeq, t.doneSeq = 0, 0
	for k, h := range hist {
		seq := 0
		if k < len(seqs) {
			seq = seqs[k]
		} else {
			t.historyCount++
			seq = t.historyCount
		}
		a.hID = append(a.hID, t.ID)
		a.hSeq = append(a.hSeq, int32(seq))
		a.hType = append(a.hType, string(h.Type))
		a.hTime = append(a.hTime, micro(h.Time))
		a.hWorker = append(a.hWorker, strPtr(h.Worker))
		var lease *int64
		if h.Lease != 0 {
			l := int64(h.Lease)
			lease = &l
		}
		a.hLease = append(a.hLease, lease)
		var prog *float64
		if h.Progress != 0 {
			p := h.Progress
			prog = &p
		}
		a.hProg = append(a.hProg, prog)
		var e *string
		if h.Error != nil {
			b, _ := json.Marshal(h.Error)
			j := string(b)
			e = &j
		}
		a.hErr = append(a.hErr, e)
	}
}

// sendCas sends the compare-and-set and the first release and cascade
// steps in one round trip (opening the transaction first with ownTx),
// fills res.ok and res.released, and returns the dependents the cascade
// aborted, whose own dependents are next.
func (s *Store) sendCas(ctx context.Context, q querier, ownTx bool, now time.Time, a *casArgs, res *applyResult) ([]string, error) {
	b := &pgx.Batch{}
	if ownTx {
		b.Queue("BEGIN")
	}
	var ok, next []string
	b.Queue(s.casSQL(), a.ids, a.oldVersion, a.oldStatus, a.oldLease, a.status, a.prio, a.progress, a.labels, a.updated,
		a.runAt, a.readyAt, a.ended, a.pending, a.owner, a.deadline, a.lease, a.attempts, a.result, a.errs, a.hcount,
		a.version, a.kinds, a.hID, a.hSeq, a.hType, a.hTime, a.hWorker, a.hLease, a.hProg, a.hErr, s.cfg.HistoryLimit).Query(idRows(&ok))
	if len(a.completed) > 0 {
		b.Queue(s.releaseSQL(), toStrings(a.completed), toInt64s(a.completedV), now, s.cfg.HistoryLimit).Query(releasedRows(&res.released))
	}
	if len(a.failed) > 0 {
		b.Queue(s.cascadeSQL(), toStrings(a.failed), toInt64s(a.failV), now, s.cfg.HistoryLimit, a.failErrs).Query(idRows(&next))
	}
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	for _, id := range ok {
		res.ok[id] = true
	}
	return next, nil
}

// cascade aborts, level by level, every blocked task depending on ids
// (tasks that failed or were deleted; errs[i] is the error ids[i]'s
// dependents record) and returns what it aborted. Each level is its own
// statement so it sees dependents committed while the previous level
// waited for their locks.
func (s *Store) cascade(ctx context.Context, q querier, now time.Time, ids, errs []string) ([]string, error) {
	var all []string
	for len(ids) > 0 {
		rows, err := q.Query(ctx, s.cascadeSQL(), ids, make([]*int64, len(ids)), now, s.cfg.HistoryLimit, errs)
		if err != nil {
			return all, err
		}
		next, err := pgx.CollectRows(rows, idRow)
		if err != nil {
			return all, err
		}
		all = append(all, next...)
		ids, errs = next, abortedErrs(next)
	}
	return all, nil
}

// abortedErrs is the dependency error of each of ids, tasks just aborted.
func abortedErrs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = errJSON(norn.DependencyFailed(id, norn.StatusAborted))
	}
	return out
}

func errJSON(e norn.ErrorInfo) string {
	b, _ := json.Marshal(e)
	return string(b)
}

// idRows collects the ids a statement returns, for a batch's named
// handle: into(out) runs as the statement's rows arrive.
func idRows(out *[]string) func(pgx.Rows) error {
	return func(rows pgx.Rows) (err error) {
		*out, err = pgx.CollectRows(rows, idRow)
		return err
	}
}

// releasedRows reads releaseSQL's rows into out: the dependents that are
// no longer blocked.
func releasedRows(out *[]string) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var id, st string
		_, err := pgx.ForEachRow(rows, []any{&id, &st, nil}, func() error {
			if st != string(norn.StatusBlocked) {
				*out = append(*out, id)
			}
			return nil
		})
		return err
	}
}

func toStrings(v []any) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = x.(string)
	}
	return out
}

func toInt64s(v []any) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = x.(int64)
	}
	return out
}

// readCore reads the state-change view of tasks by id (no locks unless
// lock is set: then FOR UPDATE, in id order so lockers cannot deadlock).
func (s *Store) readCore(ctx context.Context, q querier, ids []string, lock bool) (map[string]*rec, error) {
	sql := `SELECT ` + colsCore + ` FROM {s}.tasks t WHERE t.id = ANY($1)`
	if lock {
		sql += ` ORDER BY t.id FOR UPDATE`
	}
	return s.readDetached(ctx, q, s.q(sql), ids)
}

// readFull reads complete tasks (history included) by id.
func (s *Store) readFull(ctx context.Context, q querier, ids []string) (map[string]*rec, error) {
	return s.readSettled(ctx, q, s.q(`SELECT `+colsFull+` FROM {s}.tasks t WHERE t.id = ANY($1)`), ids)
}

// errConcurrent marks a compare-and-set that lost to a concurrent change;
// callers re-read and decide again.
var errConcurrent = errors.New("concurrent change")

func fieldErr(prefix string, err error) error {
	if prefix == "" {
		return err
	}
	return norn.WithFieldPrefix(err, prefix)
}

var _ = fmt.Sprintf
