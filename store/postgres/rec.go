package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/nornq/norn"
)

// rec is a task as stored: the public Task plus the bookkeeping columns.
type rec struct {
	norn.Task
	readyAt      time.Time
	endedAt      time.Time
	pendingDeps  int
	historyCount int
	logSeq       uint64
	// assignSeq and doneSeq are the sequence numbers of the assignment and
	// completion entries kept in the row (0: none); claimedAt is the
	// assignment's time.
	assignSeq, doneSeq int
	claimedAt          time.Time
	// seqNo is a new sequence member's number in its sequence.
	seqNo int64
	// fairKey is a new task's fair key when its queue has fair_by.
	fairKey *string
	// batch is a new task's ready row (batches.go); 0: none.
	batch int64
}

// Column lists for reading tasks. All three have the same shape so one scan
// function reads them; the lighter ones put NULL where data is not needed.
const (
	colsBase = `t.id, t.queue, t.priority, t.status, t.progress, t.labels, t.created, t.updated, t.run_at,
t.ready_at, t.ended_at, t.depends_on, t.pending_deps, t.owner, t.deadline, t.lease, t.attempts,
t.max_attempts, t.retry, t.timeout_ns, t.history_count, t.log_seq, t.version, t.assign_seq, t.done_seq, t.claimed_at,
t.concurrency_key, t.max_runtime_ns, t.unique_key, t.traceparent, t.tracestate, t.expires_at, t.batch, t.dep_run, t.sequence_key`
	// historyAgg is the task's history: its task_history_rows plus the
	// assignment and completion entries kept in the row, unless the history
	// cap ({hl}) has dropped them.
	historyAgg = `(SELECT jsonb_agg(x.e ORDER BY x.seq) FROM (
SELECT h.seq, jsonb_build_object('type', h.type, 'time', h.time, 'worker', h.worker,
	'lease', h.lease, 'progress', h.progress, 'error', h.error) AS e
FROM {s}.task_history_rows h WHERE h.task_id = t.id
UNION ALL SELECT t.assign_seq, jsonb_build_object('type', 'TaskAssignment', 'time', t.claimed_at, 'worker', t.owner,
	'lease', t.lease) WHERE t.assign_seq > greatest(t.history_count - {hl}, 0)
UNION ALL SELECT t.done_seq, jsonb_build_object('type', 'TaskComplete', 'time', t.ended_at, 'worker', t.owner,
	'lease', t.lease, 'progress', 1) WHERE t.done_seq > greatest(t.history_count - {hl}, 0)) x)`
	// colsFull: everything, history included.
	colsFull = colsBase + `, t.spec, t.result, t.errors, ` + historyAgg + `, t.dep_results, t.signal_wait, ` + signalsAgg
	// colsClaim: everything, for a task a claim just assigned (t is the new
	// row). Its history is read only if it had any before this claim: a
	// fresh task's history is just the assignment, which the caller adds,
	// so the common claim reads no history rows at all.
	colsClaim = colsBase + `, t.spec, t.result, t.errors, CASE WHEN t.history_count > 1 THEN ` + historyAgg + ` END, t.dep_results,
t.signal_wait, ` + signalsAgg
	// colsCore: what a state change needs (errors, to append to them;
	// dependency results, for a retry's count of what is still pending).
	colsCore = colsBase + `, NULL::bytea, NULL::bytea, t.errors, NULL::jsonb, t.dep_results, NULL::jsonb, NULL::jsonb`
	// colsSummary: the summary view.
	colsSummary = colsBase + `, NULL::bytea, NULL::bytea, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb, NULL::jsonb`
	// signalsAgg is the task's signals, read only for a task that has
	// some (signal_count), so a claim of ordinary tasks reads no more.
	signalsAgg = `CASE WHEN t.signal_count > 0 THEN (SELECT jsonb_agg(jsonb_build_object('seq', g.seq, 'name', g.name,
	'data', translate(encode(g.data, 'base64'), E'\n', ''), 'time', g.time) ORDER BY g.seq)
	FROM {s}.signals g WHERE g.task_id = t.id) END`
)

// recReader reads task rows (any of the column lists) into recs. Its scan
// targets are reused from row to row: one reader per result set leaves
// one allocation per row for the rec and one each for the id, spec and
// result, where one scan struct and Scan's argument slice per row made
// about 2 KB of garbage per claimed task (BenchmarkCollectClaimed).
type recReader struct {
	id                            string
	queue, status, owner, ckey    internText
	uniqueKey, tparent, tstate    pgtype.Text
	batch, seqKey                 pgtype.Text
	depRun                        bool
	depResults, sigWait, sigs     scratchBytes
	progress                      float64
	priority                      int64
	labels, retry, errs, hist     scratchBytes
	created, updated, runAt       time.Time
	readyAt                       time.Time
	ended, deadline, claimed      pgtype.Timestamptz
	expires                       pgtype.Timestamptz
	deps                          []string
	pending, attempts             int32
	maxAttempts, hcnt             int32
	lease, timeoutNS              int64
	logSeq, version, maxRuntimeNS int64
	assignSeq, doneSeq            int32
	spec, result                  []byte
	dest                          []any
}

// internText reads a text column and keeps the string while the rows
// repeat it: a claim's rows share their queue, owner and status, so they
// share one string each instead of allocating one per row.
type internText struct {
	s     string
	valid bool
}

func (t *internText) ScanBytes(v []byte) error {
	t.valid = v != nil
	if string(v) != t.s {
		t.s = string(v)
	}
	return nil
}

// scratchBytes reads a column that is decoded at once (json) into a
// buffer reused from row to row; NULL reads as empty, as no value.
type scratchBytes struct{ b []byte }

func (b *scratchBytes) ScanBytes(v []byte) error {
	b.b = append(b.b[:0], v...)
	return nil
}

func newRecReader() *recReader {
	d := &recReader{}
	d.dest = []any{&d.id, &d.queue, &d.priority, &d.status, &d.progress, &d.labels, &d.created, &d.updated, &d.runAt,
		&d.readyAt, &d.ended, &d.deps, &d.pending, &d.owner, &d.deadline, &d.lease, &d.attempts,
		&d.maxAttempts, &d.retry, &d.timeoutNS, &d.hcnt, &d.logSeq, &d.version, &d.assignSeq, &d.doneSeq, &d.claimed, &d.ckey, &d.maxRuntimeNS,
		&d.uniqueKey, &d.tparent, &d.tstate, &d.expires, &d.batch, &d.depRun, &d.seqKey, &d.spec, &d.result, &d.errs, &d.hist, &d.depResults, &d.sigWait, &d.sigs}
	return d
}

// read reads one row of any of the column lists.
func (d *recReader) read(row pgx.Row) (*rec, error) {
	// Scan sets every target; the slices are cleared anyway so a row can
	// never share its backing array with the one before it.
	d.deps, d.spec, d.result = nil, nil, nil
	if err := row.Scan(d.dest...); err != nil {
		return nil, err
	}
	r := &rec{Task: norn.Task{ID: d.id, Queue: d.queue.s, Priority: uint32(d.priority), Status: norn.Status(d.status.s),
		Progress: d.progress, Created: d.created.UTC(), Updated: d.updated.UTC(), RunAt: d.runAt.UTC(),
		Lease: uint64(d.lease), Attempts: int(d.attempts), MaxAttempts: int(d.maxAttempts),
		Timeout: norn.Duration(d.timeoutNS), MaxRuntime: norn.Duration(d.maxRuntimeNS), Version: uint64(d.version),
		Spec: d.spec, Result: d.result},
		readyAt: d.readyAt.UTC(), pendingDeps: int(d.pending), historyCount: int(d.hcnt), logSeq: uint64(d.logSeq),
		assignSeq: int(d.assignSeq), doneSeq: int(d.doneSeq)}
	if d.ended.Valid {
		r.endedAt = d.ended.Time.UTC()
	}
	if d.deadline.Valid {
		r.Deadline = d.deadline.Time.UTC()
	}
	if d.expires.Valid {
		r.ExpiresAt = d.expires.Time.UTC()
	}
	if d.claimed.Valid {
		// Every claim writes claimed_at: it is also when the current (or
		// last) attempt started.
		r.claimedAt = d.claimed.Time.UTC()
		r.Started = r.claimedAt
	}
	if d.owner.valid {
		r.Owner = d.owner.s
	}
	if d.ckey.valid {
		r.ConcurrencyKey = d.ckey.s
	}
	r.UniqueKey, r.Traceparent, r.Tracestate, r.Batch = d.uniqueKey.String, d.tparent.String, d.tstate.String, d.batch.String
	r.SequenceKey = d.seqKey.String
	if len(d.deps) > 0 {
		r.DependsOn = d.deps
	}
	if d.depRun {
		r.OnDependencyFailure = norn.DependencyRun
	}
	if len(d.depResults.b) > 0 {
		var err error
		if r.DependencyResults, err = decodeDepResults(r.DependsOn, d.depResults.b); err != nil {
			return nil, fmt.Errorf("task %q dependency results: %w", r.ID, err)
		}
	}
	if err := d.readSignals(r); err != nil {
		return nil, err
	}
	if len(d.labels.b) > 0 {
		if err := json.Unmarshal(d.labels.b, &r.Labels); err != nil {
			return nil, fmt.Errorf("task %q labels: %w", r.ID, err)
		}
	}
	if len(d.retry.b) > 0 {
		r.Retry = new(norn.RetryPolicy)
		if err := json.Unmarshal(d.retry.b, r.Retry); err != nil {
			return nil, fmt.Errorf("task %q retry: %w", r.ID, err)
		}
	}
	if len(d.errs.b) > 0 {
		if err := json.Unmarshal(d.errs.b, &r.Errors); err != nil {
			return nil, fmt.Errorf("task %q errors: %w", r.ID, err)
		}
	}
	if len(d.hist.b) > 0 {
		if err := json.Unmarshal(d.hist.b, &r.History); err != nil {
			return nil, fmt.Errorf("task %q history: %w", r.ID, err)
		}
		for i := range r.History {
			r.History[i].Time = r.History[i].Time.UTC()
		}
		r.HistoryDropped = r.historyCount - len(r.History)
	}
	return r, nil
}

// collectRecs reads every task row of rows with one reader.
func collectRecs(rows pgx.Rows) ([]*rec, error) {
	d := newRecReader()
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*rec, error) { return d.read(row) })
}

// recsByID reads every task row of rows, keyed by id.
func recsByID(rows pgx.Rows) (map[string]*rec, error) {
	list, err := collectRecs(rows)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*rec, len(list))
	for _, r := range list {
		out[r.ID] = r
	}
	return out, nil
}

// idRow reads the task id in the first column of a row, ignoring the rest
// (the writing statements return the id and the notification count).
func idRow(row pgx.CollectableRow) (string, error) {
	var id string
	dest := make([]any, len(row.FieldDescriptions()))
	dest[0] = &id
	return id, row.Scan(dest...)
}

// task returns the public view.
func (r *rec) task() *norn.Task {
	t := r.Task.Clone()
	return t
}

// clone copies the record so a change can be computed beside the original.
func (r *rec) clone() *rec {
	c := *r
	c.Task = *r.Task.Clone()
	return &c
}

// labelsJSON encodes labels for a jsonb column (NULL when none).
func labelsJSON(l map[string]string) *string {
	if len(l) == 0 {
		return nil
	}
	b, _ := json.Marshal(l)
	s := string(b)
	return &s
}

func errorsJSON(e []norn.ErrorInfo) *string {
	if len(e) == 0 {
		return nil
	}
	b, _ := json.Marshal(e)
	s := string(b)
	return &s
}

func retryJSON(r *norn.RetryPolicy) *string {
	if r == nil {
		return nil
	}
	b, _ := json.Marshal(r)
	s := string(b)
	return &s
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// statements holds the quoted schema the SQL is written against and the
// hot statements, built once per store instead of on every call.
type statements struct {
	schema                                           string
	claimIDs, complete, cas, release, cascade, delay string
	leaseClaim                                       string
	insert, insertConflict                           string
}

func newStatements(schema string) *statements { return &statements{schema: schema} }

// build fills in the hot statements (they need the store's configuration).
func (st *statements) build(s *Store) {
	st.complete, st.delay = s.buildCompleteSQL(), s.buildDelaySQL()
	st.leaseClaim = s.buildLeaseClaimSQL(plainLeaseGate)
	// By primary key, one lookup per id. The status is compared with
	// n.ready, a join column, not the literal: with the literal the
	// planner can prove that the partial claim index applies and walked it
	// from its head, testing every ready task against the whole id array
	// (TestHotPlansAfterChurn caught it doing so after churn); this way
	// tasks_pkey with the id = ANY condition is the only index left.
	// The exclusive flow path's claim by ids (it records running_key:
	// buildAssignKeyedSQL).
	st.claimIDs = s.buildAssignKeyedSQL(`c AS (SELECT t.id FROM {s}.tasks t, n
	WHERE t.id = ANY ($1::text[]) AND t.status = n.ready AND t.ready_batch IS NULL LIMIT $2 FOR UPDATE OF t SKIP LOCKED)`) + claimOrder
	st.cas, st.release, st.cascade = s.buildCasSQL(), s.buildReleaseSQL(), s.buildCascadeSQL()
	st.insert, st.insertConflict = s.buildInsertSQL(false), s.buildInsertSQL(true)
}

// q substitutes the schema and the history cap into a statement.
func (s *Store) q(sql string) string {
	return strings.ReplaceAll(strings.ReplaceAll(sql, "{s}", s.sql.schema), "{hl}", strconv.Itoa(s.cfg.HistoryLimit))
}
