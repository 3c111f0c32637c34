package embedded

import (
	"encoding/json"

	"github.com/nornq/norn"
)

// Dependents: s.dependents lists, for each task, the blocked tasks still
// waiting for it; each task's depsLeft counts what it still waits for.
// When a dependency ends, each waiting dependent records the outcome
// (norn.DependencyResult, under sufDepResult) and counts it, or, when the
// dependency failed and the dependent's on_dependency_failure is abort,
// is aborted in turn. A dependent is listed once per dependency and the
// list is emptied when the dependency ends, so an ending counts once.

// recordDep writes r, the outcome of one of d's dependencies, with d.
func (tx *txn) recordDep(d *task, r norn.DependencyResult) {
	j, _ := json.Marshal(r)
	tx.b.Set(depResultKey(d.id, r.ID), j, nil)
}

// countDep counts one ended dependency of d, releasing d when it was the
// last.
func (tx *txn) countDep(d *task) {
	d.depsLeft--
	tx.onUndo(func() { d.depsLeft++ })
	if d.depsLeft > 0 {
		return
	}
	ns := tx.touch(d)
	if ns.runAt > tx.now {
		ns.status = stScheduled
	} else {
		ns.status = stReady
		ns.readyAt = tx.now
	}
	tx.history(d, &ns, norn.HistoryEntry{Type: norn.TaskRelease})
	tx.set(d, ns)
	tx.event(norn.EventKind(norn.TaskRelease), d)
	tx.report.Released++
}

// releaseDependents counts t's completion (result tx.result) in every
// dependent; those with no dependency left become ready (or scheduled
// when run_at is in the future).
func (tx *txn) releaseDependents(t *task) {
	deps := tx.s.getDependents(t)
	if len(deps) == 0 {
		return
	}
	tx.s.setDependents(t, nil)
	tx.onUndo(func() { tx.s.setDependents(t, deps) })
	for _, d := range deps {
		if d.deleted || d.st.status != stBlocked {
			continue
		}
		tx.recordDep(d, norn.DependencyResult{ID: t.id, Status: string(norn.StatusCompleted), Result: tx.result})
		tx.countDep(d)
	}
}

// failDependents settles the tasks waiting for t, which failed with e (nil
// for a cancel or a deletion): those that run on a dependency's failure
// record it and count it as ended; the others are aborted, and so,
// transitively, are the tasks waiting for them.
func (tx *txn) failDependents(t *task, e *norn.ErrorInfo) {
	type ended struct {
		t   *task
		err *norn.ErrorInfo
	}
	work := []ended{{t, e}}
	for len(work) > 0 {
		cur := work[len(work)-1]
		work = work[:len(work)-1]
		deps := tx.s.getDependents(cur.t)
		if len(deps) == 0 {
			continue
		}
		tx.s.setDependents(cur.t, nil)
		tx.onUndo(func() { tx.s.setDependents(cur.t, deps) })
		for _, d := range deps {
			if d.deleted || terminal(d.st.status) {
				continue
			}
			if _, run := tx.s.runOnFail[d]; run {
				tx.recordDep(d, failedDep(cur.t, cur.err))
				if d.st.status == stBlocked {
					tx.countDep(d)
				}
				continue
			}
			ee := norn.DependencyFailed(cur.t.id, statusOf(cur.t.st.status))
			if cur.t.deleted {
				ee = norn.DependencyDeleted(cur.t.id)
			}
			tx.abortDependent(d, ee)
			work = append(work, ended{d, &ee})
		}
	}
}

// failedDep is the record of t, a dependency that failed with e.
func failedDep(t *task, e *norn.ErrorInfo) norn.DependencyResult {
	var errs []norn.ErrorInfo
	if e != nil {
		errs = []norn.ErrorInfo{*e}
	}
	st := statusOf(t.st.status)
	if t.deleted {
		st = ""
	}
	return norn.NewDependencyResult(t.id, st, nil, errs)
}

// abortDependent aborts d because a dependency failed (error e).
func (tx *txn) abortDependent(d *task, e norn.ErrorInfo) {
	ns := tx.touch(d)
	ns.status = stAborted
	ns.deadline = 0
	ns.endedAt = tx.now
	tx.recordError(d, &ns, e)
	tx.history(d, &ns, norn.HistoryEntry{Type: norn.TaskAbort, Error: &e})
	tx.set(d, ns)
	tx.event(norn.EventKind(norn.TaskAbort), d)
	tx.report.Aborted++
}

// recordEndedDeps records, at submit, the outcomes of t's dependencies
// that had ended already (ids), read from disk.
func (tx *txn) recordEndedDeps(t *task, ids []string) ([]norn.DependencyResult, error) {
	var out []norn.DependencyResult
	for _, id := range ids {
		r := norn.DependencyResult{ID: id}
		dt, err := tx.s.readTask(id, false)
		switch {
		case err == nil:
			r = norn.NewDependencyResult(id, dt.Status, dt.Result, dt.Errors)
		case norn.CodeOf(err) == norn.CodeNotFound:
			// Ended in this same submit (not on disk yet): its status
			// is all there is.
			r = norn.NewDependencyResult(id, statusOf(tx.s.tasks.get(id).st.status), nil, nil)
		default:
			return nil, err
		}
		tx.recordDep(t, r)
		out = append(out, r)
	}
	return out, nil
}
