package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Retry runs again an aborted or cancelled task; see norn.ClientAPI. The
// task, its dependents and the dependencies their decision reads are
// locked for the transaction, so a dependency completing meanwhile
// releases them after the commit instead of being missed.
func (s *Store) Retry(ctx context.Context, id string, o norn.RetryOptions) (*norn.Task, error) {
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	var wakeReady, wakeSched bool
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		wakeReady, wakeSched = false, false
		recs, err := s.readCore(ctx, tx, []string{id}, true)
		if err != nil {
			return err
		}
		r := recs[id]
		if r == nil {
			return norn.NotFound(id)
		}
		if err := norn.CheckRetry(id, r.Status); err != nil {
			return err
		}
		taken := map[takenRef]bool{}
		if r.UniqueKey != "" {
			h, err := s.keyHolders(ctx, tx, &r.Task)
			if err != nil {
				return err
			}
			if err := norn.CheckRetryUnique(&r.Task, h); err != nil {
				return err
			}
			taken[takenRef{UniqueRef: norn.UniqueRef{Queue: r.Queue, Key: r.UniqueKey}}] = true
		}
		if err := s.checkSequenceRetry(ctx, tx, &r.Task); err != nil {
			return err
		}
		taken[takenRef{true, norn.UniqueRef{Queue: r.Queue, Key: r.SequenceKey}}] = true
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		now = micro(now)
		st, err := s.statuses(ctx, tx, r.DependsOn)
		if err != nil {
			return err
		}
		d, err := norn.DecideRetry(&r.Task, now, o, func(id string) norn.Status { return st[id] })
		if err != nil {
			return err
		}
		changes := []*change{redriveChange(r, d, now)}
		if o.WithDependents {
			more, err := s.redriveDependents(ctx, tx, r.ID, d.Status, now, taken)
			if err != nil {
				return err
			}
			changes = append(changes, more...)
		}
		if err := s.applyRedrives(ctx, tx, now, changes); err != nil {
			return err
		}
		for _, c := range changes {
			wakeReady = wakeReady || c.cur.Status == norn.StatusReady
			wakeSched = wakeSched || c.cur.Status == norn.StatusScheduled
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.wakeAfter(wakeReady, wakeSched)
	return s.Get(ctx, id)
}

// RetryMatching retries the aborted and cancelled tasks matching f, one
// transaction per batch in id order (keyset), so memory stays constant.
func (s *Store) RetryMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := norn.CheckRetryFilter(&f); err != nil {
		return 0, err
	}
	g, ok := norn.RetryFilter(f)
	if !ok {
		return 0, nil
	}
	var total int64
	after := ""
	for {
		var n, seen int
		var last string
		var wakeReady, wakeSched bool
		err := s.withTx(ctx, func(tx pgx.Tx) error {
			n, seen, wakeReady, wakeSched = 0, 0, false, false
			cond, args := where(g, nil)
			args = append(args, after, norn.RetryBatch)
			rows, err := tx.Query(ctx, s.q(fmt.Sprintf(`SELECT %s FROM {s}.tasks t WHERE %s AND t.id > $%d
ORDER BY t.id LIMIT $%d FOR UPDATE`, colsCore, cond, len(args)-1, len(args))), args...)
			if err != nil {
				return err
			}
			recs, err := collectRecs(rows)
			if err != nil {
				return err
			}
			if seen = len(recs); seen == 0 {
				return nil
			}
			last = recs[seen-1].ID
			now, err := s.dbNow(ctx, tx)
			if err != nil {
				return err
			}
			now = micro(now)
			var deps []string
			for _, r := range recs {
				deps = append(deps, r.DependsOn...)
			}
			st, err := s.statuses(ctx, tx, deps)
			if err != nil {
				return err
			}
			// Decided in id order: a dependency retried earlier in the
			// batch counts as pending for the tasks after it.
			var changes []*change
			taken := map[takenRef]bool{}
			for _, r := range recs {
				if !norn.Retryable(r.Status) {
					continue
				}
				// Two matches sharing a key bring back one.
				if ok, err := s.mayRetryUnique(ctx, tx, &r.Task, taken); err != nil {
					return err
				} else if !ok {
					continue
				}
				d, err := norn.DecideRetry(&r.Task, now, norn.RetryOptions{}, func(id string) norn.Status { return st[id] })
				if err != nil {
					continue
				}
				st[r.ID] = d.Status
				changes = append(changes, redriveChange(r, d, now))
				wakeReady = wakeReady || d.Status == norn.StatusReady
				wakeSched = wakeSched || d.Status == norn.StatusScheduled
			}
			n = len(changes)
			return s.applyRedrives(ctx, tx, now, changes)
		})
		if err != nil {
			return total, err
		}
		total += int64(n)
		s.wakeAfter(wakeReady, wakeSched)
		if seen < norn.RetryBatch {
			return total, nil
		}
		after = last
	}
}

// redriveChange is the write of norn's decision d for r.
func redriveChange(r *rec, d norn.Redrive, now time.Time) *change {
	c := r.clone()
	c.Status, c.RunAt, c.pendingDeps = d.Status, micro(d.RunAt), d.PendingDeps
	c.Deadline, c.endedAt, c.Progress, c.Attempts = time.Time{}, time.Time{}, 0, 0
	if d.Status == norn.StatusReady {
		c.readyAt = now
	}
	return &change{old: r, cur: c, kind: norn.EventKind(norn.TaskRedrive),
		hist: []norn.HistoryEntry{{Type: norn.TaskRedrive, Time: now}}}
}

// applyRedrives writes the changes; every row is locked, so each
// compare-and-set must hold.
func (s *Store) applyRedrives(ctx context.Context, tx pgx.Tx, now time.Time, changes []*change) error {
	ar, err := s.apply(ctx, tx, true, now, changes)
	if err != nil {
		return err
	}
	for _, c := range changes {
		if !ar.ok[c.cur.ID] {
			return fmt.Errorf("task %q: %w", c.cur.ID, errConcurrent)
		}
	}
	return nil
}

// takenRef is a unique key (seq false) or a sequence (seq true) that a
// task brought back earlier in a retry's transaction took.
type takenRef struct {
	seq bool
	norn.UniqueRef
}

// mayRetryUnique reports whether t may come back as far as its unique key
// and its sequence go: no other task of its queue holds the key live, its
// sequence has no other live head (norn.CheckSequenceRetry), and no task
// brought back earlier in this transaction took either (taken, which it
// then marks). The key's advisory lock is taken first, as submits take
// it, so no submit of the key slips in before the commit; the partial
// unique index on live holders stays the last guard. The sequence's row
// is locked, as submits lock it.
func (s *Store) mayRetryUnique(ctx context.Context, tx pgx.Tx, t *norn.Task, taken map[takenRef]bool) (bool, error) {
	if t.SequenceKey != "" {
		ref := takenRef{true, norn.UniqueRef{Queue: t.Queue, Key: t.SequenceKey}}
		if taken[ref] {
			return false, nil
		}
		if err := s.checkSequenceRetry(ctx, tx, t); err != nil {
			return false, ignoreConflict(err)
		}
		taken[ref] = true
	}
	if t.UniqueKey == "" {
		return true, nil
	}
	ref := takenRef{UniqueRef: norn.UniqueRef{Queue: t.Queue, Key: t.UniqueKey}}
	if taken[ref] {
		return false, nil
	}
	h, err := s.keyHolders(ctx, tx, t)
	if err != nil {
		return false, err
	}
	if norn.CheckRetryUnique(t, h) != nil {
		return false, nil
	}
	taken[ref] = true
	return true, nil
}

// ignoreConflict is nil for a norn conflict, which a retry of many tasks
// skips, and err for anything else.
func ignoreConflict(err error) error {
	var ne *norn.Error
	if errors.As(err, &ne) && ne.Code == norn.CodeConflict {
		return nil
	}
	return err
}

// keyHolders locks t's unique key and returns its live holders.
func (s *Store) keyHolders(ctx context.Context, tx pgx.Tx, t *norn.Task) ([]norn.UniqueHolder, error) {
	ref := norn.UniqueRef{Queue: t.Queue, Key: t.UniqueKey}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", s.uniqueLockKey(ref)); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, s.q(`SELECT id, status FROM {s}.tasks WHERE queue = $1 AND unique_key = $2
	AND ist IN ('scheduled', 'blocked', 'ready', 'batched', 'running')`), ref.Queue, ref.Key)
	if err != nil {
		return nil, err
	}
	var out []norn.UniqueHolder
	var id, st string
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
		out = append(out, norn.UniqueHolder{ID: id, Status: norn.Status(st)})
		return nil
	})
	return out, err
}

func (s *Store) wakeAfter(ready, sched bool) {
	if ready {
		s.wake.fire()
	}
	if sched {
		s.sweepWake.fire()
	}
}

// statuses reads the status of tasks by id, locked in share mode (in id
// order) so none of them completes or fails unseen before the caller
// commits what it decided from them.
func (s *Store) statuses(ctx context.Context, q querier, ids []string) (map[string]norn.Status, error) {
	out := map[string]norn.Status{}
	if len(ids) == 0 {
		return out, nil
	}
	if _, err := q.Exec(ctx, s.q(detachLeasedSQL), ids); err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, s.q(`SELECT id, status FROM {s}.tasks WHERE id = ANY($1) ORDER BY id FOR SHARE`), ids)
	if err != nil {
		return nil, err
	}
	var id, st string
	_, err = pgx.ForEachRow(rows, []any{&id, &st}, func() error {
		out[id] = norn.Status(st)
		return nil
	})
	return out, err
}

// redriveDependents finds, level by level, the tasks aborted because root
// (now in rootStatus) failed, and returns the changes that bring back those
// norn.PlanDependentRetries lets come back.
func (s *Store) redriveDependents(ctx context.Context, tx pgx.Tx, root string, rootStatus norn.Status, now time.Time, taken map[takenRef]bool) ([]*change, error) {
	seen := map[string]bool{root: true}
	var found []*rec
	level := []string{root}
	for len(level) > 0 {
		rows, err := tx.Query(ctx, s.q(`SELECT `+colsCore+` FROM {s}.tasks t
WHERE t.depends_on && $1::text[] AND t.status = 'aborted' ORDER BY t.id FOR UPDATE`), level)
		if err != nil {
			return nil, err
		}
		recs, err := collectRecs(rows)
		if err != nil {
			return nil, err
		}
		var next []string
		for _, r := range recs {
			if seen[r.ID] {
				continue
			}
			last := norn.LastError(&r.Task)
			for _, cause := range level {
				if slices.Contains(r.DependsOn, cause) && norn.AbortedBecauseOf(r.Status, last, cause) {
					seen[r.ID] = true
					found = append(found, r)
					next = append(next, r.ID)
					break
				}
			}
		}
		level = next
	}
	// A dependent whose unique key another live task holds (or one
	// brought back before it here) stays aborted, and so do the tasks
	// waiting on it: the plan sees it as failed.
	kept := found[:0]
	for _, r := range found {
		ok, err := s.mayRetryUnique(ctx, tx, &r.Task, taken)
		if err != nil {
			return nil, err
		}
		if ok {
			kept = append(kept, r)
		} else {
			delete(seen, r.ID)
		}
	}
	found = kept
	if len(found) == 0 {
		return nil, nil
	}
	var outside []string
	tasks := make([]*norn.Task, len(found))
	for i, r := range found {
		tasks[i] = &r.Task
		for _, d := range r.DependsOn {
			if !seen[d] {
				outside = append(outside, d)
			}
		}
	}
	st, err := s.statuses(ctx, tx, outside)
	if err != nil {
		return nil, err
	}
	st[root] = rootStatus
	plan := norn.PlanDependentRetries(tasks, now, func(id string) norn.Status { return st[id] })
	var out []*change
	for _, r := range found {
		if d, ok := plan[r.ID]; ok {
			out = append(out, redriveChange(r, d, now))
		}
	}
	return out, nil
}

// CancelMatching cancels the pending tasks matching f, one transaction per
// batch in id order (keyset), so memory stays constant. Each batch is one
// Transact of cancels, so a bulk cancel does exactly what single ones do.
func (s *Store) CancelMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := norn.CheckCancelFilter(&f); err != nil {
		return 0, err
	}
	g, ok := norn.CancelFilter(f)
	if !ok {
		return 0, nil
	}
	var total int64
	after := ""
	for {
		var ids []string
		var w wakes
		err := s.withTx(ctx, func(tx pgx.Tx) error {
			// Claims not yet written to their rows count as running.
			if err := s.settleLeases(ctx, tx, ""); err != nil {
				return err
			}
			cond, args := where(g, nil)
			args = append(args, after, norn.RetryBatch)
			rows, err := tx.Query(ctx, s.q(fmt.Sprintf(`SELECT t.id FROM {s}.tasks t WHERE %s AND t.id > $%d
ORDER BY t.id LIMIT $%d FOR UPDATE`, cond, len(args)-1, len(args))), args...)
			if err != nil {
				return err
			}
			if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(ids) == 0 {
				return err
			}
			_, w, err = s.transactIn(ctx, tx, norn.Txn{Cancel: ids})
			return err
		})
		if err != nil {
			return total, err
		}
		total += int64(len(ids))
		w.fire(s)
		if len(ids) < norn.RetryBatch {
			return total, nil
		}
		after = ids[len(ids)-1]
	}
}
