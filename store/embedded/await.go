package embedded

import (
	"context"
	"fmt"

	"github.com/nornq/norn"
)

// Await submits children and makes the task wait for them; see
// norn.Awaiter. The children join the task's dependencies, which live in
// its immutable record: that record is written again with them (its
// initial labels and state stay as they were, superseded as always by the
// later records), so a reopen rebuilds the wait like any other.
func (s *Store) Await(ctx context.Context, ref norn.LeaseRef, req norn.AwaitRequest) (*norn.AwaitResult, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := ref.Validate(); err != nil {
		return nil, err
	}
	var out norn.AwaitResult
	err := s.run(func(tx *txn) error {
		t, err := tx.leased(ref)
		if err != nil {
			return err
		}
		im, err := s.immutableOf(t)
		if err != nil {
			return err
		}
		if err := req.Validate(len(im.deps)); err != nil {
			return err
		}
		if out.Children, err = tx.submit("tasks", norn.ChildTasks(t.id, req.Tasks)); err != nil {
			return err
		}
		ids := make([]string, len(out.Children))
		for i, c := range out.Children {
			ids[i] = c.Task.ID
		}
		a := norn.AfterAwait(&norn.Task{DependsOn: im.deps}, ids, req.OnChildFailure, tx.depStatus)
		tx.rewriteDeps(t, &im, a)
		if err := tx.awaitState(t, ref, a); err != nil {
			return err
		}
		out.Task = tx.readAfter(t.id)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// immutableOf reads t's immutable record whole.
func (s *Store) immutableOf(t *task) (immutable, error) {
	v, closer, err := s.db.Get(taskKey(t.id, sufImmutable))
	if err != nil {
		return immutable{}, norn.Unavailable(err)
	}
	defer closer.Close()
	im, err := decodeImmutable(v, true, true)
	if err != nil {
		return im, fmt.Errorf("embedded: task %q: %w", t.id, err)
	}
	return im, nil
}

// rewriteDeps writes t's immutable record with a's dependencies and
// policy, and indexes them.
func (tx *txn) rewriteDeps(t *task, im *immutable, a norn.Awaited) {
	s := tx.s
	im.deps, im.depRun = a.DependsOn, a.Run
	tx.buf = im.encode(tx.buf[:0])
	tx.b.Set(tx.key(t.id, sufImmutable), tx.buf, nil)
	old := s.unindexDeps(t)
	s.indexDeps(t, a.DependsOn)
	tx.onUndo(func() {
		s.unindexDeps(t)
		s.indexDeps(t, old)
	})
	_, was := s.runOnFail[t]
	switch {
	case a.Run && !was:
		s.runOnFail[t] = struct{}{}
		tx.onUndo(func() { delete(s.runOnFail, t) })
	case !a.Run && was:
		delete(s.runOnFail, t)
		tx.onUndo(func() { s.runOnFail[t] = struct{}{} })
	}
}

// awaitState ends t's lease as AfterAwait decided: the attempt given back,
// the owner and lease number kept (the next claim increments it), and t
// waiting for its pending children, ready, or aborted.
func (tx *txn) awaitState(t *task, ref norn.LeaseRef, a norn.Awaited) error {
	s := tx.s
	ns := tx.touch(t)
	ns.deadline, ns.progress = 0, 0
	if ns.attempts > 0 {
		ns.attempts--
	}
	h := norn.HistoryEntry{Type: norn.TaskAwait, Worker: ref.Worker, Lease: ref.Lease}
	switch a.Status {
	case norn.StatusAborted:
		ns.status, ns.endedAt = stAborted, tx.now
		tx.recordError(t, &ns, *a.Error)
		h = norn.HistoryEntry{Type: norn.TaskAbort, Worker: ref.Worker, Lease: ref.Lease, Error: a.Error}
	case norn.StatusBlocked:
		ns.status = stBlocked
		old := t.depsLeft
		t.depsLeft = int32(a.PendingDeps)
		tx.onUndo(func() { t.depsLeft = old })
		for _, id := range a.DependsOn {
			dt := s.tasks.get(id)
			if dt == nil || terminal(dt.st.status) {
				continue
			}
			prev := s.getDependents(dt)
			s.setDependents(dt, append(prev[:len(prev):len(prev)], t))
			tx.onUndo(func() { s.setDependents(dt, prev) })
		}
	default:
		ns.status, ns.readyAt, ns.runAt = stReady, tx.now, tx.now
	}
	if _, err := tx.recordEndedDeps(t, a.EndedDeps); err != nil {
		return err
	}
	tx.history(t, &ns, h)
	tx.set(t, ns)
	tx.event(norn.EventKind(h.Type), t)
	if a.Status == norn.StatusAborted {
		tx.failDependents(t, a.Error)
	}
	return nil
}
