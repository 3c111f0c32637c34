package embedded

import (
	"context"
	"slices"

	"github.com/nornq/norn"
)

// Retry runs again an aborted or cancelled task; see norn.ClientAPI.
func (s *Store) Retry(ctx context.Context, id string, o norn.RetryOptions) (*norn.Task, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out *norn.Task
	err := s.run(func(tx *txn) error {
		t := s.tasks.get(id)
		if t == nil {
			return norn.NotFound(id)
		}
		// Refuse before reading the disk: the status is in memory.
		if err := norn.CheckRetry(id, statusOf(t.st.status)); err != nil {
			return err
		}
		// A task that runs on a dependency's failure needs its recorded
		// outcomes (norn.DecideRetry), which the summary leaves out.
		_, run := s.runOnFail[t]
		nt, err := s.readTask(id, !run)
		if err != nil {
			return err
		}
		if err := norn.CheckRetryUnique(nt, s.holdersOf(nt)); err != nil {
			return err
		}
		if err := s.checkSequenceRetry(t, nt); err != nil {
			return err
		}
		r, err := norn.DecideRetry(nt, fromNanos(tx.now), o, tx.depStatus)
		if err != nil {
			return err
		}
		tx.redrive(t, r, nt)
		if o.WithDependents {
			if err := tx.redriveDependents(t); err != nil {
				return err
			}
		}
		out = tx.readAfter(id)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RetryMatching retries the aborted and cancelled tasks matching f, one
// page of ids at a time (by id, so memory stays constant).
func (s *Store) RetryMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := norn.CheckRetryFilter(&f); err != nil {
		return 0, err
	}
	g, ok := norn.RetryFilter(f)
	if !ok {
		return 0, nil
	}
	return s.eachMatch(ctx, g, func(tx *txn, pt *norn.Task, t *task) bool {
		pt.Status = statusOf(t.st.status)
		pt.UniqueKey = s.uniqueOf[t]
		// The index reflects the retries made so far in this batch, so two
		// matches sharing a key bring back one; one whose dependencies
		// failed is skipped.
		if norn.CheckRetryUnique(pt, s.holdersOf(pt)) != nil || s.checkSequenceRetry(t, pt) != nil {
			return false
		}
		if _, run := s.runOnFail[t]; run {
			full, err := s.readTask(pt.ID, false)
			if err != nil {
				return false
			}
			pt.DependencyResults = full.DependencyResults
		}
		r, err := norn.DecideRetry(pt, fromNanos(tx.now), norn.RetryOptions{}, tx.depStatus)
		if err != nil {
			return false
		}
		tx.redrive(t, r, pt)
		return true
	})
}

// CancelMatching cancels the pending tasks matching f, one page of ids at
// a time (by id, so memory stays constant).
func (s *Store) CancelMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := norn.CheckCancelFilter(&f); err != nil {
		return 0, err
	}
	g, ok := norn.CancelFilter(f)
	if !ok {
		return 0, nil
	}
	return s.eachMatch(ctx, g, func(tx *txn, _ *norn.Task, t *task) bool {
		tx.finishTask(t, stCancelled, norn.CancelEntry(statusOf(t.st.status), t.st.owner, t.st.lease), nil)
		return true
	})
}

// eachMatch calls apply for every task matching g, a page of
// norn.RetryBatch ids per transaction (constant memory), and counts those
// it applied to. A task changed since its page was read is judged as it is
// now: one that no longer matches g is skipped.
func (s *Store) eachMatch(ctx context.Context, g norn.Filter, apply func(tx *txn, pt *norn.Task, t *task) bool) (int64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	q := norn.Query{Filter: g, Summary: true}
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		p, err := s.page(ctx, q, norn.RetryBatch)
		if err != nil {
			return n, err
		}
		err = s.run(func(tx *txn) error {
			for _, pt := range p.Tasks {
				if t := s.tasks.get(pt.ID); t != nil && matchMem(&g, t) && apply(tx, pt, t) {
					n++
				}
			}
			return nil
		})
		if err != nil || p.NextCursor == "" {
			return n, err
		}
		q.Cursor = p.NextCursor
	}
}

// holdersOf returns the tasks holding t's unique key (none without one).
func (s *Store) holdersOf(t *norn.Task) []norn.UniqueHolder {
	if t.UniqueKey == "" {
		return nil
	}
	return s.uniqueHolders(norn.UniqueRef{Queue: t.Queue, Key: t.UniqueKey})
}

// depStatus is the status of a task as of this transaction ("" when it
// does not exist).
func (tx *txn) depStatus(id string) norn.Status {
	if d := tx.s.tasks.get(id); d != nil {
		return statusOf(d.st.status)
	}
	return ""
}

// redrive persists norn's decision r for t, an aborted or cancelled task
// whose dependencies are deps.
func (tx *txn) redrive(t *task, r norn.Redrive, nt *norn.Task) {
	s := tx.s
	ns := tx.touch(t)
	ns.status = statusCode(r.Status)
	ns.runAt = nanos(r.RunAt)
	ns.deadline, ns.endedAt, ns.progress, ns.attempts = 0, 0, 0, 0
	if r.Status == norn.StatusReady {
		ns.readyAt = tx.now
	}
	if r.Status == norn.StatusBlocked {
		old := t.depsLeft
		t.depsLeft = int32(r.PendingDeps)
		tx.onUndo(func() { t.depsLeft = old })
		recorded := map[string]bool{}
		for _, dr := range nt.DependencyResults {
			recorded[dr.ID] = true
		}
		for _, id := range nt.DependsOn {
			// Ended ones, and ones ended once and recorded, are not
			// waited for (norn.DecideRetry did not count them).
			dt := s.tasks.get(id)
			if dt == nil || terminal(dt.st.status) || recorded[id] {
				continue
			}
			// A task that ended while blocked may still be listed (only
			// the failed dependency's list is cleared).
			prev := s.getDependents(dt)
			if slices.Contains(prev, t) {
				continue
			}
			s.setDependents(dt, append(slices.Clip(prev), t))
			tx.onUndo(func() { s.setDependents(dt, prev) })
		}
	}
	tx.history(t, &ns, norn.HistoryEntry{Type: norn.TaskRedrive})
	tx.set(t, ns)
	tx.event(norn.EventKind(norn.TaskRedrive), t)
}

// redriveDependents brings back the tasks aborted because root failed,
// transitively, as norn.PlanDependentRetries decides. The depends_on index
// finds the candidates; only aborted ones are read from disk (their
// latest error says which dependency aborted them).
func (tx *txn) redriveDependents(root *task) error {
	s := tx.s
	r := s.newReader()
	defer r.close()
	var found []*norn.Task
	seen := map[string]bool{root.id: true}
	level := []string{root.id}
	for len(level) > 0 {
		var next []string
		for _, cause := range level {
			for _, t := range s.byDep[cause] {
				if seen[t.id] || t.deleted || t.st.status != stAborted {
					continue
				}
				nt, err := r.task(t.id, false, nil)
				if err != nil {
					return err
				}
				if nt == nil || !norn.AbortedBecauseOf(nt.Status, norn.LastError(nt), cause) {
					continue
				}
				seen[t.id] = true
				found = append(found, nt)
				next = append(next, t.id)
			}
		}
		slices.Sort(next)
		level = next
	}
	// A dependent whose unique key another live task holds (or one
	// brought back before it here) stays aborted, and so do the tasks
	// waiting on it: the plan sees it as failed.
	taken := map[norn.UniqueRef]bool{}
	found = slices.DeleteFunc(found, func(nt *norn.Task) bool {
		if nt.UniqueKey == "" {
			return false
		}
		ref := norn.UniqueRef{Queue: nt.Queue, Key: nt.UniqueKey}
		if taken[ref] || norn.CheckRetryUnique(nt, s.holdersOf(nt)) != nil {
			return true
		}
		taken[ref] = true
		return false
	})
	plan := norn.PlanDependentRetries(found, fromNanos(tx.now), tx.depStatus)
	for _, nt := range found {
		if d, ok := plan[nt.ID]; ok {
			tx.redrive(s.tasks.get(nt.ID), d, nt)
		}
	}
	return nil
}
