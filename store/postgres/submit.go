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
	ready_at, ended_at, depends_on, pending_deps, max_attempts, retry, timeout_ns, errors, history_count, version)
SELECT u.id, u.queue, u.spec, u.priority, u.status, u.labels::jsonb, $16, $16, u.run_at, $16, u.ended_at,
	string_to_array(u.deps, ','), u.pending, u.max_attempts, u.retry::jsonb, u.timeout_ns, u.errors::jsonb, u.hcount, 1
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::text[], $6::text[], $7::timestamptz[],
	$8::timestamptz[], $9::text[], $10::int[], $11::int[], $12::text[], $13::bigint[], $14::text[], $15::int[])
	AS u(id, queue, spec, priority, status, labels, run_at, ended_at, deps, pending, max_attempts, retry,
	timeout_ns, errors, hcount)
` + conflict + `
RETURNING id, queue, status, version, 'TaskSubmit'::text AS kind, created AS time),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time, error)
	SELECT x.id, 1, 'TaskAbort', $16, x.err::jsonb FROM unnest($17::text[], $18::text[]) AS x(id, err)
	WHERE x.id IN (SELECT id FROM ins))` + s.eventsCTE("ins") + `
SELECT ins.id FROM ins WHERE (SELECT count(*) FROM nt) >= 0`)
}

type queueDefaults struct {
	norn.QueueDefaults
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
		b.Queue(s.q(`SELECT id, status FROM {s}.tasks WHERE id = ANY($1)`+lock), lookup)
	}
	b.Queue(s.q(`SELECT name, paused, timeout_ns, retry, max_attempts, retention_completed_ns, retention_aborted_ns,
	retention_cancelled_ns FROM {s}.queues WHERE name = ANY($1)`), qnames)
	br := q.SendBatch(ctx, b)
	var now time.Time
	var eventsOn bool
	existing := map[string]norn.Status{}
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
			for rows.Next() {
				var id, st string
				if err := rows.Scan(&id, &st); err != nil {
					rows.Close()
					return err
				}
				existing[id] = norn.Status(st)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		for rows.Next() {
			name, d, err := scanQueue(rows)
			if err != nil {
				rows.Close()
				return err
			}
			defaults[name] = d
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
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

	// New tasks, in batch order; dependencies inside the batch refer to new
	// tasks only when the id did not exist already.
	isNew := func(id string) bool {
		_, inBatch := batch[id]
		_, exists := existing[id]
		return inBatch && !exists
	}
	for i := range tasks {
		for j, d := range tasks[i].DependsOn {
			if !isNew(d) {
				if _, ok := existing[d]; !ok {
					return nil, norn.Invalid(fmt.Sprintf("%s[%d].depends_on[%d]", prefix, i, j), "dependency %q does not exist", d)
				}
			}
		}
	}
	order, err := topoOrder(tasks, isNew, prefix)
	if err != nil {
		return nil, err
	}
	recs := make([]*rec, len(tasks))
	failedDep := map[string]string{} // new task id → the dependency that failed
	for _, i := range order {
		nt := tasks[i]
		if !isNew(nt.ID) {
			continue
		}
		qd, ok := defaults[nt.Queue]
		if !ok {
			qd = queueDefaults{QueueDefaults: norn.DefaultQueueDefaults()}
		}
		r := &rec{}
		r.ID, r.Queue, r.Priority = nt.ID, nt.Queue, nt.Priority
		if len(nt.Spec) > 0 {
			r.Spec = append(json.RawMessage(nil), nt.Spec...)
		}
		if len(nt.Labels) > 0 {
			r.Labels = nt.Labels
		}
		r.Created, r.Updated, r.readyAt = now, now, now
		switch {
		case !nt.RunAt.IsZero():
			r.RunAt = micro(nt.RunAt)
		case nt.Delay > 0:
			r.RunAt = micro(now.Add(nt.Delay.D()))
		default:
			r.RunAt = now
		}
		if len(nt.DependsOn) > 0 {
			r.DependsOn = append([]string(nil), nt.DependsOn...)
		}
		r.Timeout = nt.Timeout
		if r.Timeout <= 0 {
			r.Timeout = qd.Timeout
		}
		if nt.MaxAttempts != nil {
			r.MaxAttempts = *nt.MaxAttempts
		} else {
			r.MaxAttempts = qd.MaxAttempts
		}
		if nt.Retry != nil {
			rp := *nt.Retry
			r.Retry = &rp
		} else if qd.Retry != nil {
			rp := *qd.Retry
			r.Retry = &rp
		}
		r.Version = 1
		for _, d := range nt.DependsOn {
			if isNew(d) {
				if _, failed := failedDep[d]; failed {
					failedDep[nt.ID] = d
				} else {
					r.pendingDeps++
				}
				continue
			}
			switch existing[d] {
			case norn.StatusCompleted:
			case norn.StatusAborted, norn.StatusCancelled:
				failedDep[nt.ID] = d
			default:
				r.pendingDeps++
			}
		}
		if d, failed := failedDep[nt.ID]; failed {
			e := norn.ErrorInfo{Code: norn.CodeDependencyFailed, Description: "dependency " + d + " was aborted, cancelled or deleted"}
			r.Status, r.endedAt, r.pendingDeps = norn.StatusAborted, now, 0
			r.Errors = []norn.ErrorInfo{e}
			r.History = []norn.HistoryEntry{{Type: norn.TaskAbort, Time: now, Error: &e}}
			r.historyCount = 1
		} else {
			r.Status = norn.InitialStatus(r.RunAt, now, r.pendingDeps > 0)
		}
		recs[i] = r
	}

	var (
		n                                      = 0
		ids, qs, status, labels, deps, retries []string
		labelsP, depsP, retryP, errsP          []*string
		specs                                  [][]byte
		prio, timeouts                         []int64
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
			pending, maxAtt, retryP, timeouts, errsP, hcount, now, abortIDs, abortErrs)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			inserted[id] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
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
		out[i] = norn.Submitted{Task: d.task(), Duplicate: true}
	}
	return out, nil
}

// topoOrder orders the batch so every new task comes after the new tasks
// it depends on, rejecting cycles with the field of an edge on the cycle.
func topoOrder(tasks []norn.NewTask, isNew func(string) bool, prefix string) ([]int, error) {
	index := make(map[string]int, len(tasks))
	for i := range tasks {
		index[tasks[i].ID] = i
	}
	state := make([]int8, len(tasks)) // 0 new, 1 visiting, 2 done
	order := make([]int, 0, len(tasks))
	type frame struct{ i, j int }
	for start := range tasks {
		if state[start] != 0 {
			continue
		}
		stack := []frame{{start, 0}}
		state[start] = 1
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			deps := tasks[top.i].DependsOn
			if top.j >= len(deps) {
				state[top.i] = 2
				order = append(order, top.i)
				stack = stack[:len(stack)-1]
				continue
			}
			d := deps[top.j]
			top.j++
			if !isNew(d) {
				continue
			}
			k := index[d]
			switch state[k] {
			case 1:
				return nil, norn.Invalid(fmt.Sprintf("%s[%d].depends_on[%d]", prefix, top.i, top.j-1),
					"dependency %q closes a cycle", d)
			case 0:
				state[k] = 1
				stack = append(stack, frame{k, 0})
			}
		}
	}
	return order, nil
}

func scanQueue(row pgx.Row) (string, queueDefaults, error) {
	var (
		name                   string
		d                      queueDefaults
		timeout, rc, ra, rcanc int64
		retry                  []byte
		maxAtt                 int32
	)
	if err := row.Scan(&name, &d.paused, &timeout, &retry, &maxAtt, &rc, &ra, &rcanc); err != nil {
		return "", d, err
	}
	d.Timeout = norn.Duration(timeout)
	d.MaxAttempts = int(maxAtt)
	d.Retention = norn.Retention{Completed: norn.Duration(rc), Aborted: norn.Duration(ra), Cancelled: norn.Duration(rcanc)}
	if len(retry) > 0 {
		d.Retry = new(norn.RetryPolicy)
		if err := json.Unmarshal(retry, d.Retry); err != nil {
			return "", d, err
		}
	}
	return name, d, nil
}
