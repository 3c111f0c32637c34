package postgres

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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
	// fairKey is a new task's fair key when its queue has fair_by.
	fairKey *string
}

// Column lists for reading tasks. All three have the same shape so one scan
// function reads them; the lighter ones put NULL where data is not needed.
const (
	colsBase = `t.id, t.queue, t.priority, t.status, t.progress, t.labels, t.created, t.updated, t.run_at,
t.ready_at, t.ended_at, t.depends_on, t.pending_deps, t.owner, t.deadline, t.lease, t.attempts,
t.max_attempts, t.retry, t.timeout_ns, t.history_count, t.log_seq, t.version, t.assign_seq, t.done_seq, t.claimed_at,
t.concurrency_key, t.max_runtime_ns, t.unique_key, t.traceparent, t.tracestate`
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
	colsFull = colsBase + `, t.spec, t.result, t.errors, ` + historyAgg
	// colsClaim: everything, for a task a claim just assigned (t is the new
	// row). Its history is read only if it had any before this claim: a
	// fresh task's history is just the assignment, which the caller adds,
	// so the common claim reads no history rows at all.
	colsClaim = colsBase + `, t.spec, t.result, t.errors, CASE WHEN t.history_count > 1 THEN ` + historyAgg + ` END`
	// colsCore: what a state change needs (errors, to append to them).
	colsCore = colsBase + `, NULL::bytea, NULL::bytea, t.errors, NULL::jsonb`
	// colsSummary: the summary view.
	colsSummary = colsBase + `, NULL::bytea, NULL::bytea, NULL::jsonb, NULL::jsonb`
)

// recScan is a rec with the scan targets of the columns that need
// converting. scanRec allocates it whole: pgx.Row.Scan takes pointers, so
// every separate local scanned into escaped to the heap on its own: 27
// allocations per row, against 2 now (BenchmarkScanRec).
type recScan struct {
	rec
	priority          int64
	status            string
	labels, retry     []byte
	ended, deadline   *time.Time
	owner, uniqueKey  *string
	deps              []string
	pending, attempts int32
	maxAttempts, hcnt int32
	lease, timeoutNS  int64
	logSeq, version   int64
	spec, result      []byte
	errs, hist        []byte
	created, updated  time.Time
	runAt, readyAt    time.Time
	assignSeq, doneSq int32
	claimed           *time.Time
	ckey              *string
	maxRuntimeNS      int64
	tparent, tstate   *string
}

// scanRec reads one row of any of the column lists.
func scanRec(row pgx.Row) (*rec, error) {
	sc := new(recScan)
	r := &sc.rec
	err := row.Scan(&r.ID, &r.Queue, &sc.priority, &sc.status, &r.Progress, &sc.labels, &sc.created, &sc.updated, &sc.runAt,
		&sc.readyAt, &sc.ended, &sc.deps, &sc.pending, &sc.owner, &sc.deadline, &sc.lease, &sc.attempts,
		&sc.maxAttempts, &sc.retry, &sc.timeoutNS, &sc.hcnt, &sc.logSeq, &sc.version, &sc.assignSeq, &sc.doneSq, &sc.claimed, &sc.ckey, &sc.maxRuntimeNS,
		&sc.uniqueKey, &sc.tparent, &sc.tstate, &sc.spec, &sc.result, &sc.errs, &sc.hist)
	if err != nil {
		return nil, err
	}
	r.Priority = uint32(sc.priority)
	r.Status = norn.Status(sc.status)
	r.Created, r.Updated, r.RunAt, r.readyAt = sc.created.UTC(), sc.updated.UTC(), sc.runAt.UTC(), sc.readyAt.UTC()
	if sc.ended != nil {
		r.endedAt = sc.ended.UTC()
	}
	if sc.deadline != nil {
		r.Deadline = sc.deadline.UTC()
	}
	if sc.claimed != nil {
		// Every claim writes claimed_at: it is also when the current (or
		// last) attempt started.
		r.claimedAt = sc.claimed.UTC()
		r.Started = r.claimedAt
	}
	r.MaxRuntime = norn.Duration(sc.maxRuntimeNS)
	r.assignSeq, r.doneSeq = int(sc.assignSeq), int(sc.doneSq)
	if sc.owner != nil {
		r.Owner = *sc.owner
	}
	if sc.ckey != nil {
		r.ConcurrencyKey = *sc.ckey
	}
	if sc.uniqueKey != nil {
		r.UniqueKey = *sc.uniqueKey
	}
	if sc.tparent != nil {
		r.Traceparent = *sc.tparent
	}
	if sc.tstate != nil {
		r.Tracestate = *sc.tstate
	}
	if len(sc.deps) > 0 {
		r.DependsOn = sc.deps
	}
	r.pendingDeps, r.Attempts, r.MaxAttempts, r.historyCount = int(sc.pending), int(sc.attempts), int(sc.maxAttempts), int(sc.hcnt)
	r.Lease, r.Timeout, r.logSeq, r.Version = uint64(sc.lease), norn.Duration(sc.timeoutNS), uint64(sc.logSeq), uint64(sc.version)
	if len(sc.labels) > 0 {
		if err := json.Unmarshal(sc.labels, &r.Labels); err != nil {
			return nil, fmt.Errorf("task %q labels: %w", r.ID, err)
		}
	}
	if len(sc.retry) > 0 {
		r.Retry = new(norn.RetryPolicy)
		if err := json.Unmarshal(sc.retry, r.Retry); err != nil {
			return nil, fmt.Errorf("task %q retry: %w", r.ID, err)
		}
	}
	if sc.spec != nil {
		r.Spec = sc.spec
	}
	if sc.result != nil {
		r.Result = sc.result
	}
	if len(sc.errs) > 0 {
		if err := json.Unmarshal(sc.errs, &r.Errors); err != nil {
			return nil, fmt.Errorf("task %q errors: %w", r.ID, err)
		}
	}
	if len(sc.hist) > 0 {
		if err := json.Unmarshal(sc.hist, &r.History); err != nil {
			return nil, fmt.Errorf("task %q history: %w", r.ID, err)
		}
		for i := range r.History {
			r.History[i].Time = r.History[i].Time.UTC()
		}
		r.HistoryDropped = r.historyCount - len(r.History)
	}
	// The rec keeps sc alive: drop what was decoded and is not kept.
	sc.labels, sc.retry, sc.errs, sc.hist = nil, nil, nil, nil
	return r, nil
}

// recRow reads one task row (any of the column lists) for pgx.CollectRows.
func recRow(row pgx.CollectableRow) (*rec, error) { return scanRec(row) }

// recsByID reads every task row of rows, keyed by id.
func recsByID(rows pgx.Rows) (map[string]*rec, error) {
	list, err := pgx.CollectRows(rows, recRow)
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
	schema                                                             string
	claim, claimFrom, claimIDs, complete, cas, release, cascade, delay string
	insert, insertConflict                                             string
}

func newStatements(schema string) *statements { return &statements{schema: schema} }

// build fills in the hot statements (they need the store's configuration).
func (st *statements) build(s *Store) {
	st.claim, st.complete, st.delay = s.buildClaimSQL(), s.buildCompleteSQL(), s.buildDelaySQL()
	st.claimFrom = s.buildClaimFromSQL()
	// By primary key, one lookup per id. The status is compared with
	// n.ready, a join column, not the literal: with the literal the
	// planner can prove that the partial claim index applies and walked it
	// from its head, testing every ready task against the whole id array
	// (TestHotPlansAfterChurn caught it doing so after churn); this way
	// tasks_pkey with the id = ANY condition is the only index left.
	// The exclusive flow path's claim by ids (it records running_key:
	// buildAssignKeyedSQL).
	st.claimIDs = s.buildAssignKeyedSQL(`c AS (SELECT t.id FROM {s}.tasks t, n
	WHERE t.id = ANY ($1::text[]) AND t.status = n.ready LIMIT $2 FOR UPDATE OF t SKIP LOCKED)`) + claimOrder
	st.cas, st.release, st.cascade = s.buildCasSQL(), s.buildReleaseSQL(), s.buildCascadeSQL()
	st.insert, st.insertConflict = s.buildInsertSQL(false), s.buildInsertSQL(true)
}

// q substitutes the schema and the history cap into a statement.
func (s *Store) q(sql string) string {
	return strings.ReplaceAll(strings.ReplaceAll(sql, "{s}", s.sql.schema), "{hl}", strconv.Itoa(s.cfg.HistoryLimit))
}
