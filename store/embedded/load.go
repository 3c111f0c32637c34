package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nornq/norn"
)

// load rebuilds every in-memory index from disk: queue settings, the worker
// sequence, then one pass over the tasks reading only their immutable and
// state records (the spec bytes are skipped, not copied).
func (s *Store) load(ctx context.Context) error {
	if err := s.loadSettings(); err != nil {
		return err
	}
	waiting, members, err := s.loadTasks(ctx)
	if err != nil {
		return err
	}
	s.orderIndexes()
	s.countBatches()
	if err := s.loadSequences(members); err != nil {
		return err
	}
	return s.countDependencies(waiting)
}

// loadSettings reads queues, key settings, rate buckets (the queues' and
// the keys'), workers and
// schedules.
func (s *Store) loadSettings() error {
	if err := s.loadQueues(); err != nil {
		return err
	}
	if err := s.loadKeySettings(); err != nil {
		return err
	}
	if err := s.loadBuckets(); err != nil {
		return err
	}
	if err := s.loadKeyBuckets(); err != nil {
		return err
	}
	if err := s.loadWorkers(); err != nil {
		return err
	}
	if err := s.loadSchedules(); err != nil {
		return err
	}
	return s.loadBatches()
}

// blocked is a blocked task found at open, with its dependencies.
type blocked struct {
	t    *task
	deps []string
}

// loadTasks reads every task's immutable and state records into the
// indexes (ready tasks collected unordered, timers unordered), and returns
// the blocked ones.
func (s *Store) loadTasks(ctx context.Context) ([]blocked, []seqMember, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{pfxTask}, UpperBound: []byte{pfxTask + 1}})
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	var waiting []blocked
	var members []seqMember
	n := 0
	for ok := it.First(); ok; {
		id, suf, valid := splitTaskKey(it.Key())
		if !valid || suf[0] != sufImmutable {
			return nil, nil, fmt.Errorf("task %q: records without an immutable record: %w", id, errCorrupt)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, nil, err
		}
		im, err := decodeImmutable(v, false, false)
		if err != nil {
			return nil, nil, fmt.Errorf("task %q: %w", id, err)
		}
		if s.queue(im.queue).flow.GroupsByLabel() {
			// Read again below for the label, after the iterator moved on:
			// a value is valid only until then.
			v = append([]byte(nil), v...)
		}
		st := im.st
		lo := taskPrefix(id)
		for ok = it.Next(); ok && bytes.HasPrefix(it.Key(), lo) && it.Key()[len(lo)] <= sufState; ok = it.Next() {
			if it.Key()[len(lo)] != sufState {
				continue
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return nil, nil, err
			}
			if st, err = decodeState(v); err != nil {
				return nil, nil, fmt.Errorf("task %q: %w", id, err)
			}
		}
		t := &task{id: id, q: s.queue(im.queue), st: st, created: im.created, maxAttempts: int32(im.maxAttempts),
			timeout: im.timeout, maxRuntime: im.maxRuntime, retry: im.retry, expires: im.expires, heapIdx: -1, timerIdx: -1}
		s.tasks.put(t)
		if im.uniqueKey != "" {
			s.addUnique(t, im.uniqueKey)
		}
		s.indexDeps(t, im.deps)
		if im.batch != "" {
			s.addMember(t, im.batch)
		}
		if im.depRun {
			s.runOnFail[t] = struct{}{}
		}
		t.g = t.q.group(im.key)
		if t.q.flow.GroupsByLabel() {
			if t.g, err = t.q.labelGroup(v); err != nil {
				return nil, nil, fmt.Errorf("task %q: %w", id, err)
			}
		}
		t.g.tasks++
		t.q.counts[st.status]++
		switch st.status {
		case stReady:
			// Collected here, put in order below.
			t.g.ready.run = append(t.g.ready.run, newReadyEnt(t))
		case stRunning:
			t.g.running++
		}
		if at := timerFor(t); at != 0 {
			t.timerAt = at
			h := &s.timers
			if st.status == stRunning {
				h, t.inLeases = &s.leases, true
			}
			t.timerIdx = int32(len(*h))
			*h = append(*h, timerEnt{at: at, t: t})
		}
		if im.seqKey != "" {
			members = append(members, seqMember{t, im.seqKey, im.seqNo})
		}
		// A member waiting for its turn is blocked by its sequence, not by
		// dependencies (it has none; a head awaiting children has some).
		if st.status == stBlocked && (im.seqKey == "" || len(im.deps) > 0) {
			waiting = append(waiting, blocked{t, im.deps})
		}
		if n++; n%65536 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
		}
		// Skip the rest of this task (errors, logs, history, result).
		ok = skipTask(it, id, lo)
	}
	if err := it.Error(); err != nil {
		return nil, nil, err
	}
	return waiting, members, nil
}

// orderIndexes puts the ready tasks and the timers loadTasks collected in
// order.
func (s *Store) orderIndexes() {
	for _, q := range s.queues {
		q.nokey.ready.load(q.nokey.ready.run)
		for _, g := range q.keys {
			g.ready.load(g.ready.run)
		}
		q.refixAll()
	}
	s.timers.init()
	s.leases.init()
}

// countDependencies sets the dependency counters of the blocked tasks, and
// finishes what a crash left half done: dependents of a failed task are
// aborted, tasks with every dependency met released.
func (s *Store) countDependencies(waiting []blocked) error {
	// Dependency counters: a dependency that is gone or completed is
	// satisfied; a failed one means the cascade must be finished now.
	var failed, free []*task
	for _, b := range waiting {
		bad := false
		for _, d := range b.deps {
			dt := s.tasks.get(d)
			switch {
			case dt == nil || dt.st.status == stCompleted:
			case dt.st.status == stAborted || dt.st.status == stCancelled:
				if _, run := s.runOnFail[b.t]; run {
					continue // ended: recorded with b.t when it did
				}
				bad = true
				s.setDependents(dt, append(s.getDependents(dt), b.t))
			default:
				b.t.depsLeft++
				s.setDependents(dt, append(s.getDependents(dt), b.t))
			}
		}
		if bad {
			failed = append(failed, b.t)
		} else if b.t.depsLeft == 0 {
			free = append(free, b.t)
		}
	}
	if len(failed) == 0 && len(free) == 0 {
		return nil
	}
	s.log.Warn("embedded: repairing dependency state found at open", "failed", len(failed), "released", len(free))
	return s.run(func(tx *txn) error {
		for t := range s.tasks.all() {
			if terminal(t.st.status) && t.st.status != stCompleted && t.hasDependents {
				tx.failDependents(t, nil)
			}
		}
		for _, t := range free {
			if t.st.status == stBlocked {
				t.depsLeft = 1
				fake := &task{}
				s.setDependents(fake, []*task{t})
				tx.releaseDependents(fake)
			}
		}
		return nil
	})
}

// scanKind calls fn with the key (after its kind byte) and the value of
// every record of one kind, in key order. The slices are valid during the
// call only.
func (s *Store) scanKind(kind byte, fn func(key, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{kind}, UpperBound: []byte{kind + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if err := fn(it.Key()[1:], v); err != nil {
			return err
		}
	}
	return it.Error()
}

func (s *Store) loadQueues() error {
	return s.scanKind(pfxQueue, func(key, v []byte) error {
		var rec queueRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("queue %q settings: %w", key, err)
		}
		q := s.queue(string(key))
		q.paused, q.defaults, q.configured, q.flow = rec.Paused, rec.Defaults, true, rec.Flow
		return nil
	})
}

func (s *Store) loadWorkers() error {
	return s.scanKind(pfxWorker, func(key, v []byte) error {
		if len(key) != 8 {
			return fmt.Errorf("worker key %q: %w", append([]byte{pfxWorker}, key...), errCorrupt)
		}
		n := binary.BigEndian.Uint64(key)
		info, err := parseWorker(v)
		if err != nil {
			return fmt.Errorf("worker %d: %w", n, err)
		}
		s.workers[info.ID] = &workerRec{n: n, info: info, persisted: nanos(info.LastSeen)}
		if n > s.workerSeq {
			s.workerSeq = n
		}
		return nil
	})
}

func (s *Store) loadSchedules() error {
	return s.scanKind(pfxSchedule, func(key, v []byte) error {
		sc := new(norn.Schedule)
		if err := json.Unmarshal(v, sc); err != nil {
			return fmt.Errorf("schedule %q: %w: %v", key, errCorrupt, err)
		}
		s.schedules[string(key)] = sc
		return nil
	})
}
