package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/nornq/norn"
)

// Batches (norn.Batch): the record under pfxBatch is the batch as JSON;
// membership is in each member's immutable record (optBatch) and, in
// memory, in s.members. Each batch counts its pending members, adjusted
// by every status change of a member (tx.set), so noticing that a sealed
// batch has none left costs nothing per member; the batch is then marked
// due, and the monitor fires its callbacks in a transaction of its own,
// the way it fires schedules.

const pfxBatch = 'b'

func batchKey(id string) []byte { return append([]byte{pfxBatch}, id...) }

// batchMem is a batch in memory: the stored record and its pending
// members.
type batchMem struct {
	b       *norn.Batch
	pending int
}

// joinBatch records that t, just inserted, is a member of batch id.
// Callers hold s.mu.
func (tx *txn) joinBatch(t *task, id string) {
	s := tx.s
	s.addMember(t, id)
	tx.onUndo(func() { s.dropMember(t) })
	if bm := s.batches[id]; bm != nil && !terminal(t.st.status) {
		bm.pending++
		tx.onUndo(func() { bm.pending-- })
	}
}

func (s *Store) addMember(t *task, id string) {
	t.inBatch = true
	s.batchOf[t] = id
	m := s.members[id]
	if m == nil {
		m = map[*task]struct{}{}
		s.members[id] = m
	}
	m[t] = struct{}{}
}

func (s *Store) dropMember(t *task) {
	id := s.batchOf[t]
	delete(s.batchOf, t)
	t.inBatch = false
	if m := s.members[id]; m != nil {
		delete(m, t)
		if len(m) == 0 {
			delete(s.members, id)
		}
	}
}

// leaveBatch forgets t, being removed, as a member; a pending member
// leaving counts as one fewer pending.
func (tx *txn) leaveBatch(t *task) {
	s := tx.s
	id := s.batchOf[t]
	s.dropMember(t)
	tx.onUndo(func() { s.addMember(t, id) })
	if !terminal(t.st.status) {
		tx.memberMoved(id, 1, 0)
	}
}

// batchStatusChanged is tx.set's hook for a member whose status changed
// from old to new.
func (tx *txn) batchStatusChanged(t *task, old, new uint8) {
	was, is := terminal(old), terminal(new)
	if was == is && new != stCompleted {
		return
	}
	d := 0
	switch {
	case was && !is:
		d = -1 // redriven: pending again
	case !was && is:
		d = 1
	}
	tx.memberMoved(tx.s.batchOf[t], d, new)
}

// memberMoved counts ended (d 1) or redriven (d -1) members of batch id
// and marks the batch due when its callbacks may fire.
func (tx *txn) memberMoved(id string, d int, now uint8) {
	s := tx.s
	bm := s.batches[id]
	if bm == nil {
		return
	}
	if d != 0 {
		bm.pending -= d
		tx.onUndo(func() { bm.pending += d })
	}
	switch {
	case bm.pending != 0 || bm.b.State == norn.BatchOpen:
	case bm.b.State == norn.BatchSealed,
		now == stCompleted && bm.b.OnSuccess != nil && bm.b.SuccessTask == "":
		// Marking a batch due that turns out not to be is harmless: the
		// monitor decides again under s.mu.
		s.batchDue[id] = true
		s.kickMonitor()
	}
}

// batchCounts counts batch id's members by status. Callers hold s.mu.
func (s *Store) batchCounts(id string) map[norn.Status]int {
	c := map[norn.Status]int{}
	for t := range s.members[id] {
		c[statusOf(t.st.status)]++
	}
	return c
}

// view renders bm with its members' counts. Callers hold s.mu.
func (s *Store) batchView(bm *batchMem) *norn.Batch {
	b := norn.CloneBatch(bm.b)
	c := s.batchCounts(b.ID)
	b.Total = 0
	for _, n := range c {
		b.Total += n
	}
	b.Counts = norn.BatchStatuses(c)
	return b
}

// putBatch persists b (the in-memory record is replaced, undone on abort).
func (tx *txn) putBatch(bm *batchMem, b *norn.Batch) error {
	stored := norn.CloneBatch(b)
	stored.Counts, stored.Total = nil, 0
	doc, err := json.Marshal(stored)
	if err != nil {
		return err
	}
	old := bm.b
	bm.b = stored
	tx.onUndo(func() { bm.b = old })
	return tx.b.Set(batchKey(b.ID), doc, nil)
}

// checkJoins refuses tasks naming a batch that does not exist or is
// sealed. Callers hold s.mu.
func (s *Store) checkJoins(prefix string, tasks []norn.NewTask, dup []bool) error {
	for i := range tasks {
		id := tasks[i].Batch
		if id == "" || (dup != nil && dup[i]) {
			continue
		}
		field := fmt.Sprintf("%s[%d].batch", prefix, i)
		bm := s.batches[id]
		if bm == nil {
			return norn.BatchNotFound(field, id)
		}
		if bm.b.State != norn.BatchOpen {
			return norn.BatchSealedError(field, id)
		}
	}
	return nil
}

// CreateBatch creates a batch; see norn.BatchAPI.
func (s *Store) CreateBatch(ctx context.Context, nb norn.NewBatch) (*norn.BatchCreated, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	tasks, err := nb.Prepare()
	if err != nil {
		return nil, err
	}
	var out norn.BatchCreated
	err = s.run(func(tx *txn) error {
		if err := norn.CheckNewBatch(nb.ID, s.batches[nb.ID] != nil, len(s.members[nb.ID])); err != nil {
			return err
		}
		now := fromNanos(tx.now)
		b := &norn.Batch{ID: nb.ID, State: norn.BatchOpen, Labels: nb.Labels, OnSuccess: nb.OnSuccess,
			OnComplete: nb.OnComplete, Created: now}
		bm := &batchMem{}
		s.batches[nb.ID] = bm
		tx.onUndo(func() { delete(s.batches, nb.ID) })
		if err := tx.putBatch(bm, b); err != nil {
			return err
		}
		if len(tasks) > 0 {
			res, err := tx.submit("tasks", tasks)
			if err != nil {
				return err
			}
			out.Tasks = res
		}
		if nb.Seal {
			if err := tx.seal(bm); err != nil {
				return err
			}
		}
		out.Batch = s.batchView(bm)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// seal closes bm to new members, marking it due when none is pending.
func (tx *txn) seal(bm *batchMem) error {
	if bm.b.State != norn.BatchOpen {
		return nil
	}
	b := norn.CloneBatch(bm.b)
	b.State = norn.BatchSealed
	b.Sealed = fromNanos(tx.now)
	if err := tx.putBatch(bm, b); err != nil {
		return err
	}
	if bm.pending == 0 {
		tx.s.batchDue[b.ID] = true
		tx.s.kickMonitor()
	}
	return nil
}

// GetBatch returns a batch with its members' counts.
func (s *Store) GetBatch(ctx context.Context, id string) (*norn.Batch, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateBatchID("id", id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	bm := s.batches[id]
	if bm == nil {
		return nil, norn.BatchNotFound("", id)
	}
	return s.batchView(bm), nil
}

// ListBatches lists batches in id order.
func (s *Store) ListBatches(ctx context.Context, q norn.BatchQuery) ([]*norn.Batch, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := q.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.batches))
	for id := range s.batches {
		if id > q.After {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := []*norn.Batch{}
	for _, id := range ids {
		if len(out) == q.PageLimit() {
			break
		}
		if bm := s.batches[id]; norn.MatchBatch(&q, bm.b) {
			out = append(out, s.batchView(bm))
		}
	}
	return out, nil
}

// SealBatch seals a batch.
func (s *Store) SealBatch(ctx context.Context, id string) (*norn.Batch, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateBatchID("id", id); err != nil {
		return nil, err
	}
	var out *norn.Batch
	err := s.run(func(tx *txn) error {
		bm := s.batches[id]
		if bm == nil {
			return norn.BatchNotFound("", id)
		}
		if err := tx.seal(bm); err != nil {
			return err
		}
		out = s.batchView(bm)
		return nil
	})
	return out, err
}

// DeleteBatch deletes a batch, and with members its members. The batch
// goes first, so deleting its pending members cannot fire it.
func (s *Store) DeleteBatch(ctx context.Context, id string, members bool) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	if err := norn.ValidateBatchID("id", id); err != nil {
		s.exit()
		return 0, err
	}
	err := s.run(func(tx *txn) error {
		bm := s.batches[id]
		if bm == nil {
			return norn.BatchNotFound("", id)
		}
		delete(s.batches, id)
		delete(s.batchDue, id)
		tx.onUndo(func() { s.batches[id] = bm })
		return tx.b.Delete(batchKey(id), nil)
	})
	s.exit()
	if err != nil || !members {
		return 0, err
	}
	n, err := s.DeleteMatching(ctx, norn.Filter{Batch: id})
	return int(n), err
}

// fireBatches fires the callbacks of every batch marked due, one
// transaction each, and returns how many callbacks it submitted.
func (s *Store) fireBatches(ctx context.Context) (int, error) {
	s.mu.Lock()
	due := make([]string, 0, len(s.batchDue))
	for id := range s.batchDue {
		due = append(due, id)
	}
	s.mu.Unlock()
	slices.Sort(due)
	total := 0
	for _, id := range due {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n := 0
		var done bool
		var kinds []string
		err := s.run(func(tx *txn) error {
			tx.useReserve = true // the store's own duty, like the monitor's
			delete(s.batchDue, id)
			bm := s.batches[id]
			if bm == nil || bm.pending != 0 {
				return nil
			}
			var err error
			done, kinds, err = tx.fireBatch(bm)
			n = len(kinds)
			return err
		})
		if err != nil {
			// A callback that can no longer be submitted (its queue's
			// settings changed since the batch was created) must not stop
			// the other batches or spin the monitor.
			s.log.Error("embedded: batch callback failed; the batch stays as it is", "batch", id, "err", err)
			continue
		}
		total += n
		if o := s.opts.Observer; o != nil && (done || n > 0) {
			o.BatchFired(id, done, kinds)
		}
	}
	return total, nil
}

// fireBatch submits the callbacks norn.BatchFiring decides for bm and
// answers whether the batch became done and the kinds it submitted.
func (tx *txn) fireBatch(bm *batchMem) (bool, []string, error) {
	counts := tx.s.batchCounts(bm.b.ID)
	complete, success := norn.BatchFiring(bm.b, counts)
	if !complete && !success {
		return false, nil, nil
	}
	b := norn.CloneBatch(bm.b)
	var completeID, successID string
	var kinds []string
	for _, c := range []struct {
		kind string
		on   bool
		id   *string
	}{{norn.CallbackComplete, complete, &completeID}, {norn.CallbackSuccess, success, &successID}} {
		nt, ok := norn.BatchCallback(b, c.kind, counts)
		if !c.on || !ok {
			continue
		}
		res, err := tx.submit("on_"+c.kind, []norn.NewTask{nt})
		if err != nil {
			return false, nil, err
		}
		*c.id = res[0].Task.ID
		if !res[0].Duplicate {
			kinds = append(kinds, c.kind)
		}
	}
	norn.FinishBatch(b, fromNanos(tx.now), counts, complete, completeID, successID)
	return complete, kinds, tx.putBatch(bm, b)
}

// loadBatches reads the batches; membership comes with the tasks
// (loadTasks), and countBatches then counts each batch's pending members.
func (s *Store) loadBatches() error {
	return s.scanKind(pfxBatch, func(key, v []byte) error {
		b := new(norn.Batch)
		if err := json.Unmarshal(v, b); err != nil {
			return fmt.Errorf("batch %q: %w: %v", key, errCorrupt, err)
		}
		s.batches[string(key)] = &batchMem{b: b}
		return nil
	})
}

// countBatches counts every batch's pending members after the tasks are
// loaded, and marks due the batches a crash left between their last member
// ending and their firing.
func (s *Store) countBatches() {
	for id, bm := range s.batches {
		for t := range s.members[id] {
			if !terminal(t.st.status) {
				bm.pending++
			}
		}
		if bm.pending == 0 && (bm.b.State == norn.BatchSealed || bm.b.State == norn.BatchDone && bm.b.OnSuccess != nil && bm.b.SuccessTask == "") {
			s.batchDue[id] = true
		}
	}
}

// ImportBatches writes batches as they are; see norn.TaskImporter. Their
// pending counts come with FinishImport, which reloads the store.
func (s *Store) ImportBatches(ctx context.Context, bs []*norn.Batch) (int, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	n := 0
	err := s.run(func(tx *txn) error {
		n = 0
		for _, b := range bs {
			if s.batches[b.ID] != nil {
				continue
			}
			bm := &batchMem{}
			s.batches[b.ID] = bm
			tx.onUndo(func() { delete(s.batches, b.ID) })
			if err := tx.putBatch(bm, b); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
