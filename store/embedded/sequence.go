package embedded

import (
	"cmp"
	"context"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/nornq/norn"
)

// Sequences (norn.SequenceInfo): s.seqs holds, per queue and key, the head
// and the members waiting for their turn, in submit order. A member's
// sequence key and its number (its place in submit order) are in its
// immutable record (optSequence, optSequenceNo); the head, the halted flag
// and the next number are in the sequence's record under pfxSequence,
// written whenever they change. Every status change of a member passes
// through tx.set, which calls seqStatusChanged: that is where a head that
// ends hands over, so no path that ends a task (complete, fail, cancel,
// timeout, expiry, a dependency cascade) needs to know about sequences.

const pfxSequence = 'o'

type seqRef struct{ queue, key string }

// seqMem is a sequence in memory.
type seqMem struct {
	head   *task
	halted bool
	// waiting members in submit order; waiting[first:] are live entries
	// (entries of members that left are skipped when met).
	waiting []*task
	next    uint64 // the number the next member gets
}

func seqRecKey(r seqRef) []byte {
	k := append([]byte{pfxSequence}, r.queue...)
	k = append(k, 0)
	return append(k, r.key...)
}

// record encodes the persisted part of a sequence.
func (m *seqMem) record() []byte {
	var b []byte
	head := ""
	if m.head != nil {
		head = m.head.id
	}
	b = binary.AppendUvarint(b, uint64(len(head)))
	b = append(b, head...)
	halted := byte(0)
	if m.halted {
		halted = 1
	}
	b = append(b, halted)
	return binary.AppendUvarint(b, m.next)
}

func decodeSeqRecord(v []byte) (head string, halted bool, next uint64, err error) {
	d := dec{b: v}
	head = d.s()
	if d.err == nil && len(d.b) > 0 {
		halted = d.b[0] == 1
		d.b = d.b[1:]
	}
	next = d.u()
	return head, halted, next, d.err
}

// seqChanging lets the undo log restore m as it is now, before a change.
func (tx *txn) seqChanging(r seqRef, m *seqMem) {
	old := *m
	old.waiting = slices.Clone(m.waiting)
	tx.onUndo(func() { *m = old })
}

// saveSeq writes m's record into the transaction's batch.
func (tx *txn) saveSeq(r seqRef, m *seqMem) {
	tx.b.Set(seqRecKey(r), m.record(), nil)
}

// joinSequence places t, being inserted with its decided state *st, in its
// sequence: the head when the sequence has none, otherwise a blocked
// member waiting for its turn. It returns t's number.
func (tx *txn) joinSequence(t *task, key string, st *state) uint64 {
	s := tx.s
	r := seqRef{t.q.name, key}
	m := s.seqs[r]
	if m == nil {
		m = &seqMem{}
		s.seqs[r] = m
		tx.onUndo(func() { delete(s.seqs, r) })
	} else {
		tx.seqChanging(r, m)
	}
	no := m.next
	m.next++
	if m.head == nil {
		m.head = t
	} else {
		st.status, st.readyAt = stBlocked, 0
		m.waiting = append(m.waiting, t)
	}
	s.seqOf[t] = key
	tx.onUndo(func() { delete(s.seqOf, t) })
	tx.saveSeq(r, m)
	return no
}

// seqStatusChanged is tx.set's hook for a member of a sequence whose
// status changed from old to new.
func (tx *txn) seqStatusChanged(t *task, old, new uint8) {
	r := seqRef{t.q.name, tx.s.seqOf[t]}
	m := tx.s.seqs[r]
	if m == nil {
		return
	}
	ended, back := terminal(new) && !terminal(old), terminal(old) && !terminal(new)
	switch {
	case m.head == t && ended:
		tx.seqChanging(r, m)
		if norn.SequenceMovesOn(statusOf(new), t.q.defaults.SequenceOnFailure) {
			tx.promote(r, m)
		} else {
			m.halted = true
		}
		tx.saveSeq(r, m)
	case m.head == t && back:
		// A halted head retried: the sequence goes on with it.
		tx.seqChanging(r, m)
		m.halted = false
		tx.saveSeq(r, m)
	case m.head == nil && back:
		// A member retried while the sequence has no head becomes it
		// (norn.CheckSequenceRetry refused the other cases).
		tx.seqChanging(r, m)
		m.head = t
		tx.saveSeq(r, m)
	case m.head != t && ended:
		tx.leaveWaiting(r, m, t)
	}
}

// leaveWaiting drops t, a waiting member that ended or is removed.
func (tx *txn) leaveWaiting(r seqRef, m *seqMem, t *task) {
	i := slices.Index(m.waiting, t)
	if i < 0 {
		return
	}
	tx.seqChanging(r, m)
	m.waiting = slices.Delete(m.waiting, i, i+1)
}

// promote makes the first waiting member the head (released: ready, or
// scheduled while its run_at is ahead), or leaves the sequence without
// one when nobody waits.
func (tx *txn) promote(r seqRef, m *seqMem) {
	m.head, m.halted = nil, false
	for len(m.waiting) > 0 {
		next := m.waiting[0]
		m.waiting = m.waiting[1:]
		if next.deleted || next.st.status != stBlocked {
			continue
		}
		m.head = next
		ns := tx.touch(next)
		ns.status = statusCode(norn.SequenceTurn(fromNanos(ns.runAt), fromNanos(tx.now)))
		if ns.status == stReady {
			ns.readyAt = tx.now
		}
		tx.history(next, &ns, norn.HistoryEntry{Type: norn.TaskRelease})
		tx.set(next, ns)
		tx.event(norn.EventKind(norn.TaskRelease), next)
		tx.report.Released++
		return
	}
}

// leaveSequence is removeTask's hook for a member: a head removed hands
// over, a waiting member leaves the line.
func (tx *txn) leaveSequence(t *task) {
	s := tx.s
	key := s.seqOf[t]
	delete(s.seqOf, t)
	tx.onUndo(func() { s.seqOf[t] = key })
	r := seqRef{t.q.name, key}
	m := s.seqs[r]
	if m == nil {
		return
	}
	if m.head != t {
		tx.leaveWaiting(r, m, t)
		return
	}
	tx.seqChanging(r, m)
	tx.promote(r, m)
	tx.saveSeq(r, m)
}

// Sequence reads a sequence's state; see norn.Sequencer.
func (s *Store) Sequence(ctx context.Context, queue, key string) (norn.SequenceInfo, error) {
	if err := norn.ValidateQueue("queue", queue); err != nil {
		return norn.SequenceInfo{}, err
	}
	if err := norn.ValidateSequenceKey("key", key); err != nil {
		return norn.SequenceInfo{}, err
	}
	if err := s.enter(); err != nil {
		return norn.SequenceInfo{}, err
	}
	defer s.exit()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seqInfo(queue, key), nil
}

// seqInfo is a sequence's state. Callers hold s.mu.
func (s *Store) seqInfo(queue, key string) norn.SequenceInfo {
	info := norn.SequenceInfo{Queue: queue, Key: key}
	m := s.seqs[seqRef{queue, key}]
	if m == nil {
		return info
	}
	if m.head != nil {
		info.Head, info.HeadStatus = m.head.id, statusOf(m.head.st.status)
	}
	info.Halted = m.halted
	for _, t := range m.waiting {
		if !t.deleted && t.st.status == stBlocked {
			info.Waiting++
		}
	}
	return info
}

// loadSequences rebuilds s.seqs at open from the sequence records and the
// members loadTasks found, each with its number.
func (s *Store) loadSequences(members []seqMember) error {
	err := s.scanKind(pfxSequence, func(k, v []byte) error {
		i := slices.Index(k, 0)
		if i < 0 {
			return errCorrupt
		}
		head, halted, next, err := decodeSeqRecord(v)
		if err != nil {
			return err
		}
		m := &seqMem{halted: halted, next: next}
		if head != "" {
			m.head = s.tasks.get(head)
		}
		s.seqs[seqRef{string(k[:i]), string(k[i+1:])}] = m
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(members, func(a, b seqMember) int {
		if c := cmp.Compare(a.no, b.no); c != 0 {
			return c
		}
		return strings.Compare(a.t.id, b.t.id) // imported members created together
	})
	for _, sm := range members {
		s.seqOf[sm.t] = sm.key
		sm.t.inSeq = true
		r := seqRef{sm.t.q.name, sm.key}
		m := s.seqs[r]
		if m == nil {
			// Imported members (norn copy) come without their sequence's
			// record: it is rebuilt from them, with the live member that
			// is not waiting as the head.
			m = &seqMem{}
			s.seqs[r] = m
		}
		m.next = max(m.next, sm.no+1)
		switch st := sm.t.st.status; {
		case m.head == sm.t:
		case st == stBlocked:
			m.waiting = append(m.waiting, sm.t)
		case m.head == nil && !terminal(st):
			m.head = sm.t
		}
	}
	return nil
}

// seqMember is a member found by loadTasks.
type seqMember struct {
	t   *task
	key string
	no  uint64
}

// checkSequenceRetry refuses to bring back t (nt its task) beside the
// live head of its sequence (norn.CheckSequenceRetry).
func (s *Store) checkSequenceRetry(t *task, nt *norn.Task) error {
	if !t.inSeq {
		return nil
	}
	nt.SequenceKey = s.seqOf[t]
	var info norn.SequenceInfo
	if m := s.seqs[seqRef{t.q.name, nt.SequenceKey}]; m != nil && m.head != nil {
		info.Head = m.head.id
	}
	return norn.CheckSequenceRetry(nt, info)
}

// Sequences lists a queue's sequences with a head; see norn.Sequencer.
func (s *Store) Sequences(ctx context.Context, queue string, q norn.SequenceQuery) ([]norn.SequenceInfo, error) {
	if err := norn.ValidateQueue("queue", queue); err != nil {
		return nil, err
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for r, m := range s.seqs {
		if r.queue == queue && m.head != nil && (!q.Halted || m.halted) && r.key > q.After {
			keys = append(keys, r.key)
		}
	}
	slices.Sort(keys)
	keys = keys[:min(len(keys), q.Limit)]
	out := make([]norn.SequenceInfo, len(keys))
	for i, k := range keys {
		out[i] = s.seqInfo(queue, k)
	}
	return out, nil
}
