package embedded

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"
	"github.com/nornq/norn"
)

// Submit stores tasks atomically; see norn.ClientAPI.
func (s *Store) Submit(ctx context.Context, tasks ...norn.NewTask) ([]norn.Submitted, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := norn.ValidateBatch("tasks", tasks); err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return []norn.Submitted{}, nil
	}
	tasks = norn.WithTrace(ctx, tasks)
	var out []norn.Submitted
	err := s.runSized(batchSizeHint(tasks), func(tx *txn) error {
		var err error
		out, err = tx.submit("tasks", tasks)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// batchSizeHint estimates the batch bytes a submit writes.
func batchSizeHint(tasks []norn.NewTask) int {
	n := 0
	for i := range tasks {
		n += 160 + len(tasks[i].ConcurrencyKey) + len(tasks[i].ID) + len(tasks[i].Queue) + len(tasks[i].Spec) + 40*len(tasks[i].Labels) + 40*len(tasks[i].DependsOn)
	}
	return n
}

// submit inserts a validated batch. Field names in errors start with prefix.
func (tx *txn) submit(prefix string, tasks []norn.NewTask) ([]norn.Submitted, error) {
	s := tx.s
	if err := norn.CheckExpiries(prefix, tasks, fromNanos(tx.now)); err != nil {
		return nil, err
	}
	ids := make([]string, len(tasks))
	out := make([]norn.Submitted, len(tasks))
	// Existing ids are duplicates: returned as they are, never changed.
	// Generated ids are fresh UUIDv7s (time-ordered and monotonic within
	// the process), so only the caller's ids need the lookup.
	var dup []bool
	for i := range tasks {
		id := tasks[i].ID
		if id == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("embedded: generate id: %w", err)
			}
			id = u.String()
		} else if t := s.tasks.get(id); t != nil {
			if t.q.name != tasks[i].Queue {
				return nil, norn.IDTaken(fmt.Sprintf("%s[%d].id", prefix, i), id)
			}
			if dup == nil {
				dup = make([]bool, len(tasks))
			}
			dup[i] = true
			out[i] = norn.Submitted{Duplicate: true}
		}
		ids[i] = id
	}
	// A task whose unique key is held is a duplicate of the holder, found
	// and decided under s.mu like the insert that follows.
	uniq := norn.PlanUnique(tasks, ids, dup, fromNanos(tx.now), s.uniqueHolders)
	tasks, replaced, err := tx.planReplaces(tasks, uniq)
	if err != nil {
		return nil, err
	}
	if len(uniq) > 0 && dup == nil {
		dup = make([]bool, len(tasks))
	}
	for i := range uniq {
		dup[i] = true
		out[i] = norn.Submitted{Duplicate: true}
	}
	order, err := norn.OrderBatch(prefix, tasks, ids, dup, func(id string) bool { return s.tasks.get(id) != nil })
	if err != nil {
		return nil, err
	}
	if err := s.checkJoins(prefix, tasks, dup); err != nil {
		return nil, err
	}
	var inBatch map[string]int
	for _, i := range order {
		if out[i].Task, err = tx.insert(ids[i], &tasks[i]); err != nil {
			return nil, err
		}
		if len(uniq) > 0 && tasks[i].UniqueKey != "" {
			if inBatch == nil {
				inBatch = map[string]int{}
			}
			inBatch[ids[i]] = i
		}
	}
	for i, r := range replaced {
		if err := tx.replaceInPlace(r.holder, &tasks[i], r.rep); err != nil {
			return nil, err
		}
		out[i] = norn.Submitted{Task: tx.readAfter(r.holder.id), Duplicate: true, Replaced: true}
	}
	for i := range ids {
		if dup == nil || !dup[i] || replaced[i] != nil {
			continue
		}
		id, byKey := uniq[i]
		if !byKey {
			id = ids[i]
		} else if j, ok := inBatch[id]; ok {
			out[i].Task = out[j].Task.Clone()
			continue
		}
		t, err := s.readTask(id, false)
		if err != nil {
			return nil, err
		}
		out[i].Task = t
	}
	return out, nil
}

// insert creates one new task whose dependencies were checked and ordered
// (norn.OrderBatch): the state is norn's decision, this only indexes and
// persists it.
func (tx *txn) insert(id string, n *norn.NewTask) (*norn.Task, error) {
	s := tx.s
	q := s.queue(n.Queue)
	now := tx.now
	in := n.Initial(fromNanos(now), &q.defaults, func(d string) norn.Status { return statusOf(s.tasks.get(d).st.status) })
	t := &task{id: id, q: q, created: now, heapIdx: -1, timerIdx: -1,
		timeout: int64(in.Timeout), maxRuntime: int64(in.MaxRuntime), maxAttempts: int32(in.MaxAttempts), retry: in.Retry,
		expires: nanos(in.ExpiresAt), g: q.group(q.groupKey(n))}
	st := state{status: statusCode(in.Status), priority: n.Priority, updated: now, runAt: nanos(in.RunAt),
		version: 1, logNext: 1}
	switch in.Status {
	case norn.StatusReady:
		st.readyAt = now
	case norn.StatusAborted:
		st.endedAt = now
		tx.recordError(t, &st, *in.Error)
		tx.history(t, &st, norn.HistoryEntry{Type: norn.TaskAbort, Error: in.Error})
	case norn.StatusBlocked:
		t.depsLeft = int32(in.PendingDeps)
		for _, d := range n.DependsOn {
			if dt := s.tasks.get(d); !terminal(dt.st.status) {
				prev := s.getDependents(dt)
				s.setDependents(dt, append(prev, t))
				tx.onUndo(func() { s.setDependents(dt, prev) })
			}
		}
	}
	var seqNo uint64
	if n.SequenceKey != "" {
		t.inSeq = true
		seqNo = tx.joinSequence(t, n.SequenceKey, &st)
	}
	im := immutable{seqKey: n.SequenceKey, seqNo: seqNo, queue: q.name, created: now, maxAttempts: int64(t.maxAttempts), timeout: t.timeout,
		maxRuntime: t.maxRuntime, retry: t.retry, expires: t.expires, uniqueKey: n.UniqueKey, deps: n.DependsOn, spec: n.Spec, key: n.ConcurrencyKey,
		labels: n.Labels, st: st, traceparent: n.Traceparent, tracestate: n.Tracestate, batch: n.Batch, depRun: n.RunsOnFailure()}
	tx.buf = im.encode(tx.buf[:0])
	tx.b.Set(tx.key(id, sufImmutable), tx.buf, nil)
	t.st = st
	tx.addTask(t)
	if n.UniqueKey != "" {
		s.addUnique(t, n.UniqueKey)
		tx.onUndo(func() { s.dropUnique(t) })
	}
	if len(n.DependsOn) > 0 {
		s.indexDeps(t, n.DependsOn)
		tx.onUndo(func() { s.unindexDeps(t) })
	}
	if n.RunsOnFailure() {
		s.runOnFail[t] = struct{}{}
		tx.onUndo(func() { delete(s.runOnFail, t) })
	}
	var results []norn.DependencyResult
	if len(in.EndedDeps) > 0 {
		var err error
		if results, err = tx.recordEndedDeps(t, in.EndedDeps); err != nil {
			return nil, err
		}
	}
	if n.Batch != "" {
		tx.joinBatch(t, n.Batch)
	}
	tx.event(norn.EventSubmitted, t)
	nt := t.toTask()
	nt.UniqueKey = n.UniqueKey
	nt.Spec = cloneBytes(n.Spec)
	nt.ConcurrencyKey = n.ConcurrencyKey
	nt.Batch = n.Batch
	nt.SequenceKey = n.SequenceKey
	if n.RunsOnFailure() {
		nt.OnDependencyFailure = norn.DependencyRun
	}
	nt.DependencyResults = norn.SortDependencyResults(n.DependsOn, results)
	nt.Traceparent, nt.Tracestate = n.Traceparent, n.Tracestate
	if len(n.Labels) > 0 {
		nt.Labels = maps.Clone(n.Labels)
	}
	if len(n.DependsOn) > 0 {
		nt.DependsOn = slices.Clone(n.DependsOn)
	}
	if in.Error != nil {
		nt.Errors = []norn.ErrorInfo{*in.Error}
		nt.History = []norn.HistoryEntry{{Type: norn.TaskAbort, Time: fromNanos(now), Error: in.Error}}
	}
	return nt, nil
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// Get returns one task.
func (s *Store) Get(ctx context.Context, id string) (*norn.Task, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	return s.readTask(id, false)
}

// GetMany returns the tasks that exist, in request order, and the missing ids.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]*norn.Task, []string, error) {
	if err := s.enter(); err != nil {
		return nil, nil, err
	}
	defer s.exit()
	ids, err := norn.GetManyIDs(ids)
	if err != nil {
		return nil, nil, err
	}
	r := s.newReader()
	defer r.close()
	var found []*norn.Task
	var missing []string
	for _, id := range ids {
		t, err := r.task(id, false, nil)
		if err != nil {
			return nil, nil, err
		}
		if t == nil {
			missing = append(missing, id)
		} else {
			found = append(found, t)
		}
	}
	return found, missing, nil
}

// Cancel cancels a pending task; see norn.ClientAPI.
func (s *Store) Cancel(ctx context.Context, id string) (*norn.Task, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	var out *norn.Task
	err := s.run(func(tx *txn) error {
		var err error
		out, err = tx.cancel(id)
		return err
	})
	return out, err
}

func (tx *txn) cancel(id string) (*norn.Task, error) {
	t := tx.s.tasks.get(id)
	if t == nil {
		return nil, norn.NotFound(id)
	}
	status := statusOf(t.st.status)
	already, err := norn.CheckCancel(id, status)
	if err != nil {
		return nil, err
	}
	if !already {
		tx.finishTask(t, stCancelled, norn.CancelEntry(status, t.st.owner, t.st.lease), nil)
	}
	return tx.readAfter(id), nil
}

// Update changes priority, run_at or labels of a task not yet running.
func (s *Store) Update(ctx context.Context, id string, u norn.Update) (*norn.Task, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	var out *norn.Task
	err := s.run(func(tx *txn) error {
		var err error
		out, err = tx.update(id, u)
		return err
	})
	return out, err
}

func (tx *txn) update(id string, u norn.Update) (*norn.Task, error) {
	t := tx.s.tasks.get(id)
	if t == nil {
		return nil, norn.NotFound(id)
	}
	if err := u.Check(id, t.st.version, statusOf(t.st.status)); err != nil {
		return nil, err
	}
	ns := tx.touch(t)
	if u.Priority != nil {
		ns.priority = *u.Priority
	}
	if u.RunAt != nil {
		status, at := norn.MoveRunAt(statusOf(ns.status), *u.RunAt, fromNanos(tx.now))
		ns.runAt = nanos(at)
		switch {
		case status == norn.StatusReady && ns.status == stScheduled:
			ns.status = stReady
			ns.readyAt = tx.now
		case status == norn.StatusScheduled && ns.status == stReady:
			ns.status = stScheduled
			ns.readyAt = 0
		}
	}
	if u.Labels != nil {
		tx.b.Set(taskKey(id, sufLabels), encodeLabels(u.Labels), nil)
	}
	tx.set(t, ns)
	tx.event(norn.EventUpdated, t)
	return tx.readAfter(id), nil
}

// Delete removes a task in any status.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if err := norn.ValidateID("id", id); err != nil {
		return err
	}
	err := s.run(func(tx *txn) error { return tx.delete(id) })
	return err
}

func (tx *txn) delete(id string) error {
	t := tx.s.tasks.get(id)
	if t == nil {
		return norn.NotFound(id)
	}
	tx.removeTask(t)
	return nil
}

// DeleteMatching removes every task matching f, in chunks (not atomically).
func (s *Store) DeleteMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.exit()
	if err := f.ValidateDelete(); err != nil {
		return 0, err
	}
	ids, err := s.matchingIDs(ctx, f)
	if err != nil {
		return 0, err
	}
	var n int64
	const chunk = 1000
	for len(ids) > 0 {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		part := ids
		if len(part) > chunk {
			part = part[:chunk]
		}
		ids = ids[len(part):]
		err := s.run(func(tx *txn) error {
			for _, id := range part {
				// Tasks deleted meanwhile are skipped; a task whose
				// in-memory fields no longer match is left alone.
				if t := s.tasks.get(id); t != nil && matchMem(&f, t) {
					tx.removeTask(t)
					n++
				}
			}
			return nil
		})
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Transact applies tx all or nothing.
func (s *Store) Transact(ctx context.Context, t norn.Txn) (*norn.TxnResult, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if len(t.Submit) > 0 {
		t.Submit = norn.WithTrace(ctx, t.Submit)
	}
	res := &norn.TxnResult{Submitted: []norn.Submitted{}, Updated: []*norn.Task{}, Cancelled: []*norn.Task{}}
	err := s.run(func(tx *txn) error {
		for i, r := range t.Require {
			var version uint64
			cur := s.tasks.get(r.ID)
			if cur != nil {
				version = cur.st.version
			}
			if err := r.Check(cur != nil, version); err != nil {
				return withField(err, fmt.Sprintf("require[%d]", i))
			}
		}
		if len(t.Submit) > 0 {
			sub, err := tx.submit("submit", t.Submit)
			if err != nil {
				return err
			}
			res.Submitted = sub
		}
		for i, u := range t.Update {
			nt, err := tx.update(u.ID, u.Update)
			if err != nil {
				return withField(err, fmt.Sprintf("update[%d]", i))
			}
			res.Updated = append(res.Updated, nt)
		}
		for i, id := range t.Cancel {
			nt, err := tx.cancel(id)
			if err != nil {
				return withField(err, fmt.Sprintf("cancel[%d]", i))
			}
			res.Cancelled = append(res.Cancelled, nt)
		}
		for i, id := range t.Delete {
			if err := tx.delete(id); err != nil {
				return withField(err, fmt.Sprintf("delete[%d]", i))
			}
			res.Deleted++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

func withField(err error, prefix string) error {
	if e, ok := err.(*norn.Error); ok && e.Field == "" {
		c := *e
		c.Field = prefix
		return &c
	}
	return norn.WithFieldPrefix(err, prefix)
}
