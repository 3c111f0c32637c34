package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Submit stores tasks atomically with one multi-row INSERT. Batches with
// dependencies run in a transaction that share-locks the dependencies, so a
// dependency cannot complete or fail unseen while its dependent is inserted.
func (s *Store) Submit(ctx context.Context, tasks ...norn.NewTask) ([]norn.Submitted, error) {
	if err := norn.ValidateBatch("tasks", tasks); err != nil {
		return nil, err
	}
	var out []norn.Submitted
	run := func(q querier) error {
		var err error
		out, err = s.submitIn(ctx, q, "tasks", tasks)
		return err
	}
	var err error
	if hasDeps(tasks) {
		err = s.withTx(ctx, func(tx pgx.Tx) error { return run(tx) })
	} else {
		err = s.withConn(ctx, func(conn *pgx.Conn) error { return run(conn) })
	}
	if err != nil {
		return nil, err
	}
	s.wakeForSubmitted(out)
	return out, nil
}

// SubmitTx submits tasks inside the caller's transaction: they exist if and
// only if tx commits (River's InsertTx). tx must be on the store's database;
// the tasks become claimable, and claimers are notified, at commit.
func (s *Store) SubmitTx(ctx context.Context, tx pgx.Tx, tasks ...norn.NewTask) ([]norn.Submitted, error) {
	if s.closed.Load() {
		return nil, norn.ErrClosed
	}
	if err := norn.ValidateBatch("tasks", tasks); err != nil {
		return nil, err
	}
	out, err := s.submitIn(ctx, tx, "tasks", tasks)
	return out, mapErr(err)
}

func hasDeps(tasks []norn.NewTask) bool {
	for _, t := range tasks {
		if len(t.DependsOn) > 0 {
			return true
		}
	}
	return false
}

func (s *Store) wakeForSubmitted(out []norn.Submitted) {
	for _, r := range out {
		if !r.Duplicate && r.Task.Status == norn.StatusReady {
			s.wake.fire()
			break
		}
	}
	for _, r := range out {
		if !r.Duplicate && r.Task.Status == norn.StatusScheduled {
			s.sweepWake.fire()
			break
		}
	}
}

// insertSQL inserts a batch; with onConflict, ids that exist already are
// skipped (and reported as duplicates by the caller), otherwise the plain
// INSERT spares the speculative insertion every row pays for ON CONFLICT.
func (s *Store) insertSQL(onConflict bool) string {
	if onConflict {
		return s.sql.insertConflict
	}
	return s.sql.insert
}

func (s *Store) buildInsertSQL(onConflict bool) string {
	conflict := ""
	if onConflict {
		conflict = "ON CONFLICT (id) DO NOTHING"
	}
	return s.q(`WITH ins AS (INSERT INTO {s}.tasks (id, queue, spec, priority, status, labels, created, updated, run_at,
	ready_at, ended_at, depends_on, pending_deps, max_attempts, retry, timeout_ns, errors, history_count, version,
	concurrency_key, max_runtime_ns)
SELECT u.id, u.queue, u.spec, u.priority, u.status, u.labels::jsonb, $16, $16, u.run_at, $16, u.ended_at,
	string_to_array(u.deps, ','), u.pending, u.max_attempts, u.retry::jsonb, u.timeout_ns, u.errors::jsonb, u.hcount, 1,
	u.ckey, u.max_runtime_ns
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::text[], $6::text[], $7::timestamptz[],
	$8::timestamptz[], $9::text[], $10::int[], $11::int[], $12::text[], $13::bigint[], $14::text[], $15::int[],
	$19::text[], $20::bigint[])
	AS u(id, queue, spec, priority, status, labels, run_at, ended_at, deps, pending, max_attempts, retry,
	timeout_ns, errors, hcount, ckey, max_runtime_ns)
` + conflict + `
RETURNING id, queue, status, version, 'TaskSubmit'::text AS kind, created AS time),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time, error)
	SELECT x.id, 1, 'TaskAbort', $16, x.err::jsonb FROM unnest($17::text[], $18::text[]) AS x(id, err)
	WHERE x.id IN (SELECT id FROM ins))` + s.eventsCTE("ins") + `
SELECT ins.id FROM ins WHERE (SELECT count(*) FROM nt) >= 0`)
}

// stored is what a submit needs to know of an id that exists already.
type stored struct {
	status norn.Status
	queue  string
}

type queueDefaults struct {
	norn.QueueDefaults
	name   string
	paused bool
}

// submitIn is the body of Submit, SubmitTx and the submits of Transact. The
// batch must already be validated; prefix names it in errors ("tasks").
func (s *Store) submitIn(ctx context.Context, q querier, prefix string, in []norn.NewTask) ([]norn.Submitted, error) {
	if len(in) == 0 {
		return []norn.Submitted{}, nil
	}
	tasks := make([]norn.NewTask, len(in))
	copy(tasks, in)
	batch := make(map[string]int, len(tasks))
	queues := map[string]bool{}
	// Ids the caller chose may exist already; generated ones (UUIDv7)
	// cannot, so they need neither a lookup nor ON CONFLICT.
	lookup := make([]string, 0, len(tasks))
	for i := range tasks {
		if tasks[i].ID == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, err
			}
			tasks[i].ID = u.String()
		} else {
			lookup = append(lookup, tasks[i].ID)
		}
		batch[tasks[i].ID] = i
		queues[tasks[i].Queue] = true
	}
	clientIDs := len(lookup) > 0
	for i := range tasks {
		for _, d := range tasks[i].DependsOn {
			if _, ok := batch[d]; !ok {
				lookup = append(lookup, d)
			}
		}
	}
	qnames := make([]string, 0, len(queues))
	for q := range queues {
		qnames = append(qnames, q)
	}

	// One round trip: the time, the existing ids (share-locked when the
	// batch has dependencies: the caller runs it in a transaction) and the
	// queue defaults.
	b := &pgx.Batch{}
	b.Queue(s.q("SELECT clock_timestamp(), EXISTS (SELECT 1 FROM {s}.event_subscribers WHERE until > clock_timestamp())"))
	lock := ""
	if hasDeps(tasks) {
		lock = " ORDER BY id FOR SHARE"
	}
	if len(lookup) > 0 {
		b.Queue(s.q(`SELECT id, status, queue FROM {s}.tasks WHERE id = ANY($1)`+lock), lookup)
	}
	b.Queue(s.q(`SELECT `+queueCols+` FROM {s}.queues WHERE name = ANY($1)`), qnames)
	br := q.SendBatch(ctx, b)
	var now time.Time
	var eventsOn bool
	existing := map[string]stored{}
	defaults := map[string]queueDefaults{}
	err := func() error {
		defer br.Close()
		if err := br.QueryRow().Scan(&now, &eventsOn); err != nil {
			return err
		}
		if len(lookup) > 0 {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			var id, st, queue string
			if _, err := pgx.ForEachRow(rows, []any{&id, &st, &queue}, func() error {
				existing[id] = stored{status: norn.Status(st), queue: queue}
				return nil
			}); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		qds, err := pgx.CollectRows(rows, queueRow)
		if err != nil {
			return err
		}
		for _, d := range qds {
			defaults[d.name] = d
		}
		return br.Close()
	}()
	if err != nil {
		return nil, err
	}
	if c := s.clockNow(); c != nil {
		now = *c
	}
	now = micro(now)

	// Ids that exist are duplicates (in the same queue) or conflicts; the
	// rest are new, inserted in the order norn decides.
	batchIDs := make([]string, len(tasks))
	var dup []bool
	for i := range tasks {
		batchIDs[i] = tasks[i].ID
		if e, ok := existing[batchIDs[i]]; ok {
			if e.queue != tasks[i].Queue {
				return nil, norn.IDTaken(fmt.Sprintf("%s[%d].id", prefix, i), batchIDs[i])
			}
			if dup == nil {
				dup = make([]bool, len(tasks))
			}
			dup[i] = true
		}
	}
	order, err := norn.OrderBatch(prefix, tasks, batchIDs, dup, func(id string) bool { _, ok := existing[id]; return ok })
	if err != nil {
		return nil, err
	}
	recs := make([]*rec, len(tasks))
	// Statuses of the dependencies: stored ones, then new tasks as decided.
	depStatus := make(map[string]norn.Status, len(existing))
	for id, e := range existing {
		depStatus[id] = e.status
	}
	for _, i := range order {
		nt := &tasks[i]
		qd, ok := defaults[nt.Queue]
		if !ok {
			qd = queueDefaults{QueueDefaults: norn.DefaultQueueDefaults()}
		}
		in := nt.Initial(now, &qd.QueueDefaults, func(id string) norn.Status { return depStatus[id] })
		r := &rec{}
		r.ID, r.Queue, r.Priority, r.Status = nt.ID, nt.Queue, nt.Priority, in.Status
		if len(nt.Spec) > 0 {
			r.Spec = append(json.RawMessage(nil), nt.Spec...)
		}
		if len(nt.Labels) > 0 {
			r.Labels = nt.Labels
		}
		r.ConcurrencyKey = nt.ConcurrencyKey
		r.Created, r.Updated, r.readyAt = now, now, now
		r.RunAt = micro(in.RunAt)
		if len(nt.DependsOn) > 0 {
			r.DependsOn = append([]string(nil), nt.DependsOn...)
		}
		r.Timeout, r.MaxAttempts, r.Retry, r.pendingDeps = in.Timeout, in.MaxAttempts, in.Retry, in.PendingDeps
		r.MaxRuntime = in.MaxRuntime
		r.Version = 1
		if in.Error != nil {
			r.endedAt = now
			r.Errors = []norn.ErrorInfo{*in.Error}
			r.History = []norn.HistoryEntry{{Type: norn.TaskAbort, Time: now, Error: in.Error}}
			r.historyCount = 1
		}
		depStatus[nt.ID] = in.Status
		recs[i] = r
	}

	var (
		n                                      = 0
		ids, qs, status, labels, deps, retries []string
		labelsP, depsP, retryP, errsP, ckeyP   []*string
		specs                                  [][]byte
		prio, timeouts, maxRuntimes            []int64
		runAt                                  []time.Time
		ended                                  []*time.Time
		pending, maxAtt, hcount                []int32
		abortIDs, abortErrs                    []string
	)
	_ = labels
	_ = deps
	_ = retries
	for _, r := range recs {
		if r == nil {
			continue
		}
		n++
		ids = append(ids, r.ID)
		qs = append(qs, r.Queue)
		specs = append(specs, r.Spec)
		prio = append(prio, int64(r.Priority))
		status = append(status, string(r.Status))
		labelsP = append(labelsP, labelsJSON(r.Labels))
		ckeyP = append(ckeyP, strPtr(r.ConcurrencyKey))
		runAt = append(runAt, r.RunAt)
		ended = append(ended, timePtr(r.endedAt))
		if len(r.DependsOn) > 0 {
			d := strings.Join(r.DependsOn, ",")
			depsP = append(depsP, &d)
		} else {
			depsP = append(depsP, nil)
		}
		pending = append(pending, int32(r.pendingDeps))
		maxAtt = append(maxAtt, int32(r.MaxAttempts))
		retryP = append(retryP, retryJSON(r.Retry))
		timeouts = append(timeouts, int64(r.Timeout))
		maxRuntimes = append(maxRuntimes, int64(r.MaxRuntime))
		errsP = append(errsP, errorsJSON(r.Errors))
		hcount = append(hcount, int32(r.historyCount))
		if r.Status == norn.StatusAborted {
			b, _ := json.Marshal(r.Errors[0])
			abortIDs, abortErrs = append(abortIDs, r.ID), append(abortErrs, string(b))
		}
	}
	inserted := map[string]bool{}
	if n > 0 && !clientIDs && !hasDeps(tasks) {
		if err := s.copyIn(ctx, q, recs, now, eventsOn); err != nil {
			return nil, err
		}
		out := make([]norn.Submitted, len(tasks))
		for i, r := range recs {
			out[i] = norn.Submitted{Task: r.task()}
		}
		return out, nil
	}
	if n > 0 {
		rows, err := q.Query(ctx, s.insertSQL(clientIDs), ids, qs, specs, prio, status, labelsP, runAt, ended, depsP,
			pending, maxAtt, retryP, timeouts, errsP, hcount, now, abortIDs, abortErrs, ckeyP, maxRuntimes)
		if err != nil {
			return nil, err
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		for _, id := range got {
			inserted[id] = true
		}
	}
	// Duplicates (existing before, or inserted concurrently) are returned
	// as they are now.
	var dupIDs []string
	for i := range tasks {
		if !inserted[tasks[i].ID] {
			dupIDs = append(dupIDs, tasks[i].ID)
		}
	}
	var dups map[string]*rec
	if len(dupIDs) > 0 {
		if dups, err = s.readFull(ctx, q, dupIDs); err != nil {
			return nil, err
		}
	}
	out := make([]norn.Submitted, len(tasks))
	for i := range tasks {
		id := tasks[i].ID
		if inserted[id] {
			out[i] = norn.Submitted{Task: recs[i].task()}
			continue
		}
		d := dups[id]
		if d == nil {
			// Inserted concurrently and deleted again before we looked.
			return nil, norn.Errorf(norn.CodeConflict, "task %q changed concurrently; submit again", id)
		}
		if d.Queue != tasks[i].Queue {
			// Inserted concurrently into another queue.
			return nil, norn.IDTaken(fmt.Sprintf("%s[%d].id", prefix, i), id)
		}
		out[i] = norn.Submitted{Task: d.task(), Duplicate: true}
	}
	return out, nil
}

// queueRow reads one row of queueCols (pgx.CollectRows, or a single row).
func queueRow(row pgx.CollectableRow) (queueDefaults, error) { return scanQueue(row) }

func scanQueue(row pgx.Row) (queueDefaults, error) {
	var (
		d                      queueDefaults
		timeout, rc, ra, rcanc int64
		maxRuntime             int64
		retry                  []byte
		maxAtt                 int32
	)
	if err := row.Scan(&d.name, &d.paused, &timeout, &retry, &maxAtt, &rc, &ra, &rcanc, &maxRuntime); err != nil {
		return d, err
	}
	d.Timeout, d.MaxRuntime = norn.Duration(timeout), norn.Duration(maxRuntime)
	d.MaxAttempts = int(maxAtt)
	d.Retention = norn.Retention{Completed: norn.Duration(rc), Aborted: norn.Duration(ra), Cancelled: norn.Duration(rcanc)}
	if len(retry) > 0 {
		d.Retry = new(norn.RetryPolicy)
		if err := json.Unmarshal(retry, d.Retry); err != nil {
			return d, err
		}
	}
	return d, nil
}
