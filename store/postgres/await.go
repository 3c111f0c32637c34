package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Await submits children and makes the task wait for them; see
// norn.Awaiter. One transaction: the task is locked (after its lease row,
// if any, is detached), the children are submitted, then share-locked
// with any children that existed already, so none can end unseen before
// the task is written as their dependent; the task's row is then written
// as norn.AfterAwait decided.
func (s *Store) Await(ctx context.Context, ref norn.LeaseRef, req norn.AwaitRequest) (*norn.AwaitResult, error) {
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	var out norn.AwaitResult
	var a norn.Awaited
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		out = norn.AwaitResult{}
		b := &pgx.Batch{}
		s.queueDetach(b, []string{ref.TaskID})
		recs, err := s.readAfter(ctx, tx, b, s.q(`SELECT `+colsCore+` FROM {s}.tasks t WHERE t.id = ANY($1) FOR UPDATE`), []string{ref.TaskID})
		if err != nil {
			return err
		}
		r := recs[ref.TaskID]
		if err := checkLease(r, ref); err != nil {
			return err
		}
		if err := req.Validate(len(r.DependsOn)); err != nil {
			return err
		}
		if out.Children, err = s.submitIn(ctx, tx, "tasks", norn.ChildTasks(r.ID, req.Tasks)); err != nil {
			return err
		}
		ids := make([]string, len(out.Children))
		for i, c := range out.Children {
			ids[i] = c.Task.ID
		}
		ended, err := s.lockChildren(ctx, tx, ids)
		if err != nil {
			return err
		}
		a = norn.AfterAwait(&r.Task, ids, req.OnChildFailure, func(id string) norn.Status { return norn.Status(ended[id].Status) })
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		if err := s.writeAwait(ctx, tx, r, ref, a, ended, micro(now)); err != nil {
			return err
		}
		if a.Status == norn.StatusAborted {
			if _, err := s.cascade(ctx, tx, micro(now), []string{r.ID}, []string{errJSON(norn.DependencyFailed(r.ID, norn.StatusAborted))}); err != nil {
				return err
			}
		}
		got, err := s.readSettled(ctx, tx, s.q(`SELECT `+colsFull+` FROM {s}.tasks t WHERE t.id = ANY($1)`), []string{r.ID})
		if err != nil {
			return err
		}
		out.Task = got[r.ID].task()
		return nil
	})
	if err != nil {
		return nil, mapErr(err)
	}
	s.wakeForSubmitted(out.Children)
	if a.Status == norn.StatusReady {
		s.wake.fire()
	}
	return &out, nil
}

// lockChildren share-locks the children ids and reads their outcomes
// (a pending one's record says its status only).
func (s *Store) lockChildren(ctx context.Context, tx pgx.Tx, ids []string) (map[string]norn.DependencyResult, error) {
	rows, err := tx.Query(ctx, s.q(`SELECT id, status, result, errors->-1 FROM {s}.tasks WHERE id = ANY($1) ORDER BY id FOR SHARE`), ids)
	if err != nil {
		return nil, err
	}
	return scanOutcomes(rows)
}

// writeAwait writes r, whose owner awaits children, as a decided: the
// attempt given back, the owner and lease number kept, the children in
// depends_on, the ones that ended recorded, and a TaskAwait entry (a
// TaskAbort with the error when it aborts).
func (s *Store) writeAwait(ctx context.Context, tx pgx.Tx, r *rec, ref norn.LeaseRef, a norn.Awaited, ended map[string]norn.DependencyResult, now time.Time) error {
	var recs []norn.DependencyResult
	for _, id := range a.EndedDeps {
		recs = append(recs, ended[id])
	}
	kind, errs, hErr := string(norn.TaskAwait), (*string)(nil), (*string)(nil)
	if a.Error != nil {
		kind = string(norn.TaskAbort)
		j := errJSON(*a.Error)
		hErr = &j
		all, _ := json.Marshal(append(r.Errors, *a.Error))
		e := string(all)
		errs = &e
	}
	_, err := tx.Exec(ctx, s.q(`WITH upd AS (UPDATE {s}.tasks t SET status = $2, depends_on = $3, pending_deps = $4, dep_run = $5,
	dep_results = CASE WHEN $6::jsonb IS NULL THEN t.dep_results ELSE coalesce(t.dep_results, '{}'::jsonb) || $6::jsonb END,
	attempts = greatest(t.attempts - 1, 0), deadline = NULL, progress = 0, updated = $7, version = t.version + 1,
	history_count = t.history_count + 1,
	ready_at = CASE WHEN $2 = 'ready' THEN $7 ELSE t.ready_at END,
	run_at = CASE WHEN $2 = 'ready' THEN $7 ELSE t.run_at END,
	ended_at = CASE WHEN $2 = 'aborted' THEN $7 ELSE NULL END,
	errors = coalesce($8::jsonb, t.errors)
	WHERE t.id = $1
	RETURNING t.id, t.queue, t.status, t.version, t.history_count, $9::text AS kind, t.updated AS time),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time, worker, lease, error)
	SELECT id, history_count, kind, time, $10, $11, $12::jsonb FROM upd)`+s.eventsCTE("upd")+`
SELECT count(*) FROM upd, nt`),
		r.ID, string(a.Status), a.DependsOn, a.PendingDeps, a.Run, encodeDepResults(recs), now, errs, kind,
		ref.Worker, int64(ref.Lease), hErr)
	return err
}
