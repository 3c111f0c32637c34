package postgres

import (
	"context"
	"fmt"

	"github.com/nornq/norn"
)

// Debounce (norn.NewTask.Replace): a batch with on_duplicate replace
// locks the live holders of its keys (readReplaced) before norn decides;
// a successor is inserted as a dependent of its holder after the holder
// gave up the key, and an in-place replace is a compare-and-set write of
// the locked holder, as an update is, plus its new spec.

// replaces reports whether some task of the batch replaces duplicates.
func (p *submitPlan) replaces() bool {
	for i := range p.tasks {
		if p.tasks[i].OnDuplicate == norn.DuplicateReplace {
			return true
		}
	}
	return false
}

// readReplaced locks and reads the live holders of the keys of the
// batch's replacing tasks. The keys' advisory locks are held already
// (readForSubmit), so no submit changes them meanwhile; the row lock
// keeps claims (which skip locked rows) and other writers off.
func (s *Store) readReplaced(ctx context.Context, q querier, p *submitPlan) error {
	var ids []string
	for i := range p.tasks {
		n := &p.tasks[i]
		if n.OnDuplicate != norn.DuplicateReplace {
			continue
		}
		for _, h := range p.holders[norn.UniqueRef{Queue: n.Queue, Key: n.UniqueKey}] {
			if !h.Status.Terminal() {
				ids = append(ids, h.ID)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	recs, err := s.readCore(ctx, q, ids, true)
	if err != nil {
		return err
	}
	p.held = recs
	return nil
}

// planReplaces applies norn's decision to each replacing duplicate of
// p.uniq: an in-place replace stays a duplicate and is remembered for
// writeReplaced; a successor leaves p.uniq and becomes a dependent of its
// holder, which gives up the key (p.giveUp).
func (p *submitPlan) planReplaces() {
	for i, of := range p.uniq {
		n := &p.tasks[i]
		h := p.held[of]
		if n.OnDuplicate != norn.DuplicateReplace || h == nil {
			continue // an earlier task of the batch holds the key
		}
		switch rep := n.Replace(&h.Task, p.now); rep.Kind {
		case norn.ReplaceInPlace:
			if p.replaced == nil {
				p.replaced = map[int]*rec{}
			}
			p.replaced[i] = h
		case norn.ReplaceSuccessor:
			p.tasks[i] = n.Successor(of)
			p.existing[of] = stored{status: h.Status, queue: h.Queue}
			p.giveUp = append(p.giveUp, of)
			p.deps = true
			delete(p.uniq, i)
		}
	}
}

// giveUpKeys takes the unique key from holders whose successors are about
// to be inserted with it (the partial unique index allows one live holder).
func (s *Store) giveUpKeys(ctx context.Context, q querier, p *submitPlan) error {
	if len(p.giveUp) == 0 {
		return nil
	}
	_, err := q.Exec(ctx, s.q(`UPDATE {s}.tasks SET unique_key = NULL WHERE id = ANY($1)`), p.giveUp)
	return err
}

// writeReplaced replaces the holders of p.replaced in place: priority,
// labels and run time as an update writes them, with a TaskReplace entry,
// then the spec.
func (s *Store) writeReplaced(ctx context.Context, q querier, p *submitPlan) error {
	if len(p.replaced) == 0 {
		return nil
	}
	var changes []*change
	var ids []string
	var specs [][]byte
	for i, h := range p.replaced {
		n := &p.tasks[i]
		rep := n.Replace(&h.Task, p.now)
		c := h.clone()
		was := c.Status
		c.Priority, c.Labels, c.Status, c.RunAt = n.Priority, n.Labels, rep.Status, micro(rep.RunAt)
		if len(c.Labels) == 0 {
			c.Labels = nil
		}
		if was != norn.StatusReady && c.Status == norn.StatusReady {
			c.readyAt = p.now
		}
		changes = append(changes, &change{old: h, cur: c, kind: norn.EventUpdated,
			hist: []norn.HistoryEntry{{Type: norn.TaskReplace, Time: p.now}}})
		ids, specs = append(ids, h.ID), append(specs, []byte(n.Spec))
	}
	res, err := s.apply(ctx, q, true, p.now, changes)
	if err != nil {
		return err
	}
	for _, c := range changes {
		if !res.ok[c.cur.ID] {
			return fmt.Errorf("task %q: %w", c.cur.ID, errConcurrent)
		}
	}
	_, err = q.Exec(ctx, s.q(`UPDATE {s}.tasks t SET spec = x.spec FROM unnest($1::text[], $2::bytea[]) x(id, spec) WHERE t.id = x.id`), ids, specs)
	return err
}

// markReplaced sets Replaced on the answers of in-place replaces.
func (p *submitPlan) markReplaced(out []norn.Submitted) {
	for i := range p.replaced {
		out[i].Replaced = true
	}
}
