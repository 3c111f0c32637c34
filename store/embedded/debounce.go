package embedded

import (
	"fmt"
	"maps"
	"slices"

	"github.com/nornq/norn"
)

// Debounce (norn.NewTask.Replace): a submission with on_duplicate replace
// replaces its key's holder in place, or becomes the successor of one
// that has started.

// replacement is an in-place replace planned by planReplaces.
type replacement struct {
	holder *task
	rep    norn.Replacement
}

// planReplaces decides the replacing duplicates of uniq (index → holder
// id). A successor is taken out of uniq and returned in tasks (a copy
// when one changes) as the task it becomes, after its holder gave it the
// key; in-place replaces are returned by index, for after the inserts.
func (tx *txn) planReplaces(tasks []norn.NewTask, uniq map[int]string) ([]norn.NewTask, map[int]*replacement, error) {
	var replaced map[int]*replacement
	copied := false
	for _, i := range slices.Sorted(maps.Keys(uniq)) {
		n := &tasks[i]
		h := tx.s.tasks.get(uniq[i])
		if n.OnDuplicate != norn.DuplicateReplace || h == nil {
			continue // a new task of this batch holds the key: a plain duplicate
		}
		held := &norn.Task{Status: statusOf(h.st.status), Attempts: int(h.st.attempts), Created: fromNanos(h.created)}
		switch rep := n.Replace(held, fromNanos(tx.now)); rep.Kind {
		case norn.ReplaceInPlace:
			if replaced == nil {
				replaced = map[int]*replacement{}
			}
			replaced[i] = &replacement{h, rep}
		case norn.ReplaceSuccessor:
			if err := tx.giveUpKey(h); err != nil {
				return nil, nil, err
			}
			if !copied {
				tasks, copied = slices.Clone(tasks), true
			}
			tasks[i] = tasks[i].Successor(h.id)
			delete(uniq, i)
		}
	}
	return tasks, replaced, nil
}

// giveUpKey takes h's unique key away (its successor is about to take it):
// from the index and from its stored record.
func (tx *txn) giveUpKey(h *task) error {
	s := tx.s
	key, ok := s.uniqueOf[h]
	if !ok {
		return nil
	}
	s.dropUnique(h)
	tx.onUndo(func() { s.addUnique(h, key) })
	return tx.rewriteImmutable(h, func(im *immutable) { im.uniqueKey = "" })
}

// rewriteImmutable changes t's immutable record: the few things a task
// keeps there that a later change may replace (its spec, its unique key).
func (tx *txn) rewriteImmutable(t *task, change func(*immutable)) error {
	v, closer, err := tx.s.db.Get(taskKey(t.id, sufImmutable))
	if err != nil {
		return fmt.Errorf("embedded: task %q: %w", t.id, err)
	}
	im, err := decodeImmutable(v, true, true)
	closer.Close()
	if err != nil {
		return fmt.Errorf("embedded: task %q: %w", t.id, err)
	}
	change(&im)
	tx.b.Set(taskKey(t.id, sufImmutable), im.encode(nil), nil)
	return nil
}

// replaceInPlace gives h, a holder that has not started, n's spec, labels
// and priority, and the status and run_at decided in rep.
func (tx *txn) replaceInPlace(h *task, n *norn.NewTask, rep norn.Replacement) error {
	ns := tx.touch(h)
	ns.priority = n.Priority
	ns.runAt = nanos(rep.RunAt)
	switch st := statusCode(rep.Status); {
	case st == stReady && ns.status != stReady:
		ns.status, ns.readyAt = st, tx.now
	case st == stScheduled && ns.status == stReady:
		ns.status, ns.readyAt = st, 0
	}
	tx.b.Set(taskKey(h.id, sufLabels), encodeLabels(n.Labels), nil)
	if err := tx.rewriteImmutable(h, func(im *immutable) { im.spec = n.Spec }); err != nil {
		return err
	}
	tx.history(h, &ns, norn.HistoryEntry{Type: norn.TaskReplace})
	tx.set(h, ns)
	tx.event(norn.EventUpdated, h)
	return nil
}
