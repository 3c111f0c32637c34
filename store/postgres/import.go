package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Import (norn.TaskImporter): tasks written as they are, for norn copy.
// Every task becomes an ordinary row (never in a ready row), its whole
// history in task_history_rows and its log in task_log; nothing is
// published. A task running in the source keeps its lease (owner, lease,
// deadline): the monitor times it out at its deadline unless its worker
// finishes it here first.

var importColumns = []string{"id", "queue", "spec", "priority", "status", "progress", "labels", "created", "updated",
	"run_at", "ready_at", "ended_at", "depends_on", "owner", "deadline", "lease", "attempts", "max_attempts", "retry",
	"timeout_ns", "result", "errors", "history_count", "log_seq", "version", "claimed_at", "concurrency_key",
	"max_runtime_ns", "unique_key", "traceparent", "tracestate", "fair_key", "running_key", "expires_at", "batch", "dep_run", "dep_results", "signal_count", "signal_wait",
	"sequence_key", "sequence_no"}

// ImportTasks writes recs in one transaction; see norn.TaskImporter.
func (s *Store) ImportTasks(ctx context.Context, recs []norn.TaskRecord) (int, error) {
	ids := make([]string, 0, len(recs))
	queues := map[string]bool{}
	for i, r := range recs {
		if err := r.Validate(i); err != nil {
			return 0, err
		}
		ids = append(ids, r.Task.ID)
		queues[r.Task.Queue] = true
	}
	n := 0
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		n = 0
		skip, err := importExisting(ctx, tx, s, recs, ids)
		if err != nil {
			return err
		}
		flows, err := s.importFlows(ctx, tx, queues)
		if err != nil {
			return err
		}
		var rows, hist, logs, sigs [][]any
		for _, r := range recs {
			if skip[r.Task.ID] {
				continue
			}
			rows = append(rows, importRow(r, flows[r.Task.Queue]))
			hist = append(hist, importHistory(r.Task)...)
			for _, l := range r.Log {
				logs = append(logs, []any{r.Task.ID, int64(l.Seq), int64(l.Lease), l.Time, []byte(l.Data)})
			}
			for _, g := range r.Task.Signals {
				sigs = append(sigs, []any{r.Task.ID, int32(g.Seq), g.Name, nilBytes(g.Data), g.Time})
			}
		}
		n = len(rows)
		for _, c := range []struct {
			table string
			cols  []string
			rows  [][]any
		}{
			{"tasks", importColumns, rows},
			{"task_history_rows", []string{"task_id", "seq", "type", "time", "worker", "lease", "progress", "error"}, hist},
			{"task_log", []string{"task_id", "seq", "lease", "time", "data"}, logs},
			{"signals", []string{"task_id", "seq", "name", "data", "time"}, sigs},
		} {
			if len(c.rows) == 0 {
				continue
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{s.cfg.Schema, c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
				return err
			}
		}
		// The plain completed tasks among them, where retention finds
		// them (endedLogCTE).
		_, err = tx.Exec(ctx, s.q(`INSERT INTO {s}.ended_log (queue, ended_at, ids)
SELECT queue, max(ended_at), array_agg(id) FROM {s}.tasks WHERE id = ANY($1) AND status = 'completed' AND ist IS NULL
GROUP BY queue, date_trunc('minute', ended_at)`), ids)
		return err
	})
	return n, err
}

// importExisting returns the ids of recs stored already with the same
// version (a resumed copy skips them); another version is a conflict.
func importExisting(ctx context.Context, tx pgx.Tx, s *Store, recs []norn.TaskRecord, ids []string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, s.q(`SELECT id, version FROM {s}.tasks WHERE id = ANY($1)`), ids)
	if err != nil {
		return nil, err
	}
	have := map[string]uint64{}
	var id string
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error { have[id] = uint64(v); return nil }); err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	for _, r := range recs {
		got, ok := have[r.Task.ID]
		if !ok {
			continue
		}
		if got != r.Task.Version {
			return nil, norn.ImportConflict(r.Task.ID, got, r.Task.Version)
		}
		skip[r.Task.ID] = true
	}
	return skip, nil
}

// importFlows reads the flow settings of queues, for fair keys.
func (s *Store) importFlows(ctx context.Context, tx pgx.Tx, queues map[string]bool) (map[string]norn.QueueFlow, error) {
	names := make([]string, 0, len(queues))
	for q := range queues {
		names = append(names, q)
	}
	rows, err := tx.Query(ctx, s.q(`SELECT `+queueCols+` FROM {s}.queues WHERE name = ANY($1)`), names)
	if err != nil {
		return nil, err
	}
	ds, err := pgx.CollectRows(rows, queueRow)
	if err != nil {
		return nil, err
	}
	out := map[string]norn.QueueFlow{}
	for _, d := range ds {
		out[d.name] = d.flow
	}
	return out, nil
}

// importRow is the tasks row of r, in importColumns order.
func importRow(r norn.TaskRecord, flow norn.QueueFlow) []any {
	t := r.Task
	var fair, running *string
	if flow.FairBy != "" {
		k := flow.FairKey(t.ConcurrencyKey, t.Labels)
		fair = &k
	}
	if t.Status == norn.StatusRunning && t.ConcurrencyKey != "" {
		running = &t.ConcurrencyKey // as a claim of the keyed paths writes it
	}
	var ended *time.Time
	if t.Status.Terminal() {
		ended = &t.Updated // the last change of an ended task is its end
	}
	var logSeq uint64
	if n := len(r.Log); n > 0 {
		logSeq = r.Log[n-1].Seq
	}
	return []any{t.ID, t.Queue, nilBytes(t.Spec), int64(t.Priority), string(t.Status), t.Progress, jsonOrNil(t.Labels, len(t.Labels) > 0),
		t.Created, t.Updated, t.RunAt, t.Updated, ended, nilStrings(t.DependsOn), strPtr(t.Owner), timePtr(t.Deadline),
		int64(t.Lease), int32(t.Attempts), int32(t.MaxAttempts), jsonOrNil(t.Retry, t.Retry != nil), int64(t.Timeout),
		nilBytes(t.Result), jsonOrNil(t.Errors, len(t.Errors) > 0), int32(len(t.History) + t.HistoryDropped), int64(logSeq),
		int64(t.Version), timePtr(t.Started), strPtr(t.ConcurrencyKey), int64(t.MaxRuntime), strPtr(t.UniqueKey),
		strPtr(t.Traceparent), strPtr(t.Tracestate), fair, running, timePtr(t.ExpiresAt), strPtr(t.Batch),
		t.OnDependencyFailure == norn.DependencyRun, encodeDepResults(t.DependencyResults),
		int32(len(t.Signals)), jsonOrNil(t.SignalWait, t.SignalWait != nil), strPtr(t.SequenceKey), importSeqNo(t)}
}

// importSeqNo numbers an imported sequence member by its creation time in
// microseconds, which keeps submit order (the source's numbers are not
// part of a task); FinishImport rebuilds the sequences' rows.
func importSeqNo(t *norn.Task) *int64 {
	if t.SequenceKey == "" {
		return nil
	}
	n := t.Created.UnixMicro()
	return &n
}

// importHistory is t's history as task_history_rows rows: the entries
// kept, numbered after the ones the source dropped.
func importHistory(t *norn.Task) [][]any {
	out := make([][]any, 0, len(t.History))
	for i, h := range t.History {
		var errJSON []byte
		if h.Error != nil {
			errJSON, _ = json.Marshal(h.Error)
		}
		out = append(out, []any{t.ID, int32(t.HistoryDropped + i + 1), string(h.Type), h.Time, strPtr(h.Worker),
			int64(h.Lease), h.Progress, errJSON})
	}
	return out
}

func nilBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func nilStrings(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// jsonOrNil is v as JSON when present, else NULL.
func jsonOrNil(v any, present bool) []byte {
	if !present {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}

// FinishImport counts the open dependencies of the imported blocked
// tasks (a dependency copied after its dependent could not be counted
// before), releases those with none left, and aborts those whose
// dependency failed, as a submit would have.
func (s *Store) FinishImport(ctx context.Context) error {
	return s.withTx(ctx, func(tx pgx.Tx) error {
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.q(`UPDATE {s}.tasks t SET pending_deps = (SELECT count(*) FROM unnest(t.depends_on) d(id)
	JOIN {s}.tasks x ON x.id = d.id WHERE x.status <> 'completed')
WHERE t.status = 'blocked'`))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.q(`UPDATE {s}.tasks SET status = CASE WHEN run_at > $1 THEN 'scheduled' ELSE 'ready' END,
	ready_at = $1, updated = $1, version = version + 1
WHERE status = 'blocked' AND pending_deps = 0 AND (sequence_key IS NULL OR depends_on IS NOT NULL)`), now)
		if err != nil {
			return err
		}
		// Sequences: rebuilt from their members, the live member that is
		// not waiting (a head awaiting children waits on dependencies) as
		// the head. Members are numbered again, the head first and then by
		// creation (ties by id), so every waiting member is numbered after
		// the head, as the hand-over expects.
		_, err = tx.Exec(ctx, s.q(`UPDATE {s}.tasks t SET sequence_no = r.n FROM (SELECT id, row_number() OVER (
	PARTITION BY queue, sequence_key ORDER BY status IN ('scheduled', 'ready', 'running') OR (status = 'blocked' AND depends_on IS NOT NULL) DESC,
	sequence_no, id) AS n FROM {s}.tasks WHERE sequence_key IS NOT NULL) r WHERE t.id = r.id AND t.sequence_no IS DISTINCT FROM r.n`))
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.q(`INSERT INTO {s}.sequences (queue, key, head, next_no)
SELECT queue, sequence_key, (array_agg(id ORDER BY sequence_no) FILTER (WHERE status IN ('scheduled', 'ready', 'running')
	OR (status = 'blocked' AND depends_on IS NOT NULL)))[1], max(sequence_no) + 1
FROM {s}.tasks WHERE sequence_key IS NOT NULL GROUP BY queue, sequence_key
ON CONFLICT (queue, key) DO NOTHING`))
		return err
	})
}

var _ norn.TaskImporter = (*Store)(nil)
