package embedded

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nornq/norn"
)

// Signals (norn.Signal) are records of their task: one per signal under
// sufSignal by sequence number, and the task's last wait (norn.SignalWait)
// under sufSignalWait. Neither is in memory: a signal or a wait reads
// them from disk, under s.mu, so a signal and a wait for it are decided
// one after the other.

// Signal appends a signal to a task; see norn.Signaler.
func (s *Store) Signal(ctx context.Context, id string, ns norn.NewSignal) (*norn.Signal, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	if err := ns.Validate(); err != nil {
		return nil, err
	}
	var out *norn.Signal
	err := s.run(func(tx *txn) error {
		t := s.tasks.get(id)
		if t == nil {
			return norn.NotFound(id)
		}
		sigs, err := s.readSignals(id, 0)
		if err != nil {
			return err
		}
		if err := norn.CheckSignal(id, statusOf(t.st.status), uint64(len(sigs))); err != nil {
			return err
		}
		out = &norn.Signal{Seq: uint64(len(sigs)) + 1, Name: ns.Name, Data: cloneBytes(ns.Data), Time: fromNanos(tx.now)}
		j, _ := json.Marshal(out)
		tx.grows = true
		tx.b.Set(tx.seqKey(id, sufSignal, out.Seq), j, nil)
		w, err := s.readSignalWait(id)
		if err != nil || w == nil || w.Name != ns.Name || w.Received {
			return err
		}
		w.Received = true
		tx.putSignalWait(id, w)
		if t.st.status == stScheduled {
			tx.wakeForSignal(t)
		}
		return nil
	})
	return out, err
}

// wakeForSignal makes t, scheduled until its wait's signal, ready.
func (tx *txn) wakeForSignal(t *task) {
	ns := tx.touch(t)
	ns.status, ns.runAt, ns.readyAt = stReady, tx.now, tx.now
	tx.history(t, &ns, norn.HistoryEntry{Type: norn.TaskRelease})
	tx.set(t, ns)
	tx.event(norn.EventKind(norn.TaskRelease), t)
}

func (tx *txn) putSignalWait(id string, w *norn.SignalWait) {
	j, _ := json.Marshal(w)
	tx.b.Set(tx.key(id, sufSignalWait), j, nil)
}

// Signals returns a task's signals after a sequence number.
func (s *Store) Signals(ctx context.Context, id string, after uint64) ([]norn.Signal, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	exists := s.tasks.get(id) != nil
	s.mu.Unlock()
	if !exists {
		return nil, norn.NotFound(id)
	}
	return s.readSignals(id, after)
}

// readSignals reads task id's signals with Seq > after.
func (s *Store) readSignals(id string, after uint64) ([]norn.Signal, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: taskSeqKey(id, sufSignal, after+1), UpperBound: taskKey(id, sufSignal+1)})
	if err != nil {
		return nil, norn.Unavailable(err)
	}
	defer it.Close()
	out := []norn.Signal{}
	for ok := it.First(); ok; ok = it.Next() {
		var sg norn.Signal
		if err := json.Unmarshal(it.Value(), &sg); err != nil {
			return nil, fmt.Errorf("embedded: task %q signal %d: %w", id, binary.BigEndian.Uint64(it.Key()[len(it.Key())-8:]), errCorrupt)
		}
		out = append(out, sg)
	}
	return out, it.Error()
}

// readSignalWait reads task id's last wait, nil when it has none.
func (s *Store) readSignalWait(id string) (*norn.SignalWait, error) {
	v, closer, err := s.db.Get(taskKey(id, sufSignalWait))
	if err == pebble.ErrNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, norn.Unavailable(err)
	}
	defer closer.Close()
	w := new(norn.SignalWait)
	if err := json.Unmarshal(v, w); err != nil {
		return nil, fmt.Errorf("embedded: task %q signal wait: %w", id, errCorrupt)
	}
	return w, nil
}

// snoozeUntilSignal is a snooze until a signal: ready at once when one of
// that name was received already, else scheduled until the wait's
// timeout; the wait is recorded either way.
func (tx *txn) snoozeUntilSignal(t *task, op *norn.LeaseOp) error {
	sigs, err := tx.s.readSignals(t.id, 0)
	if err != nil {
		return err
	}
	received := false
	for _, sg := range sigs {
		received = received || sg.Name == op.Snooze.UntilSignal
	}
	o, w := norn.AfterSignalWait(fromNanos(tx.now), op.Snooze, received)
	tx.putSignalWait(t.id, &w)
	tx.giveBack(t, o, op.LeaseRef)
	return nil
}
