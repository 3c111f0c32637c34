package embedded

import (
	"runtime"
	"time"

	"encoding/binary"
	"encoding/json"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nornq/norn"
)

// txn collects one atomic change: the Pebble batch that makes it durable, the
// undo log that reverts the in-memory indexes if anything fails, the events
// to publish and the queues whose claimers to wake. Built and committed
// under s.mu; finished (sync wait, events) after s.mu is released.
type txn struct {
	s      *Store
	now    int64
	b      *pebble.Batch
	undo   []undoStep
	events []norn.Event
	wake   []*queue
	report norn.SweepReport
	buf    []byte
	kbuf   []byte // scratch for keys (Batch.Set copies them)
	hbuf   []byte // scratch for history records
	// after runs under s.mu once the batch is applied (reads of the
	// committed result).
	after    []func() error
	afterErr error
	// grows marks a transaction that adds data (a task, a log entry, a
	// schedule): refused when free space is below the reserve, unless
	// useReserve says it is one of the store's own duties.
	grows, useReserve bool
	// tokenIn is, after a claim a rate limit left short, how long until
	// its bucket has a token again (0: not short for that reason).
	tokenIn time.Duration
	// result is the result of the task being completed, for its
	// dependents to record (deps.go).
	result []byte
}

// readAfter returns a task that is filled with id's committed state once
// the transaction commits (the batch itself cannot be read).
func (tx *txn) readAfter(id string) *norn.Task {
	nt := new(norn.Task)
	tx.after = append(tx.after, func() error {
		t, err := tx.s.readTask(id, false)
		if err != nil {
			return err
		}
		*nt = *t
		return nil
	})
	return nt
}

// undoStep reverts one in-memory change: either t's state back to old, or
// fn. State changes, the common case, need no closure.
type undoStep struct {
	t   *task
	old state
	fn  func()
}

func (tx *txn) onUndo(fn func()) { tx.undo = append(tx.undo, undoStep{fn: fn}) }

// key returns a task key in scratch space, valid until the next call.
func (tx *txn) key(id string, suf byte) []byte {
	k := append(tx.kbuf[:0], pfxTask)
	k = append(k, id...)
	k = append(k, 0, suf)
	tx.kbuf = k
	return k
}

func (tx *txn) seqKey(id string, suf byte, seq uint64) []byte {
	k := binary.BigEndian.AppendUint64(tx.key(id, suf), seq)
	tx.kbuf = k
	return k
}

func (s *Store) begin(sizeHint int) *txn {
	tx := txnPool.Get().(*txn)
	tx.s, tx.now = s, s.now()
	if sizeHint > 0 {
		// Large batches grow by doubling; sizing them up front saves the copies.
		tx.b = s.db.NewBatchWithSize(sizeHint)
	} else {
		tx.b = s.db.NewBatch()
	}
	return tx
}

// savepoint and rollbackTo let one op of a batch fail alone.
func (tx *txn) savepoint() (int, int) { return len(tx.undo), len(tx.events) }

func (tx *txn) rollbackTo(u, e int) {
	for i := len(tx.undo) - 1; i >= u; i-- {
		st := &tx.undo[i]
		if st.fn != nil {
			st.fn()
			continue
		}
		cur := st.t.st
		st.t.st = st.old
		tx.s.index(st.t, cur, true)
	}
	tx.undo = tx.undo[:u]
	tx.events = tx.events[:e]
}

// abort reverts every in-memory change and discards the batch.
func (tx *txn) abort() {
	tx.rollbackTo(0, 0)
	tx.b.Close()
	tx.b = nil
}

// commit applies the batch to Pebble (visible at once; in strict mode the
// WAL sync is requested but awaited only in finish, outside s.mu, so that
// concurrent writers share syncs). On failure everything is reverted.
func (tx *txn) commit() error {
	s := tx.s
	if tx.b.Empty() {
		tx.b.Close()
		tx.b = nil
		tx.undo = tx.undo[:0]
		tx.wakeQueues()
		tx.runAfter()
		return nil
	}
	if s.disk.full.Load() {
		tx.abort()
		return errDiskFull()
	}
	if tx.grows && !tx.useReserve {
		if low, avail := s.space.low(); low {
			tx.abort()
			return s.space.refusal(avail)
		}
	}
	s.space.wrote(tx.b.Len())
	var err error
	if s.opts.Durability == Strict {
		err = s.db.ApplyNoSyncWait(tx.b, pebble.Sync)
	} else {
		err = s.db.Apply(tx.b, pebble.NoSync)
	}
	if err != nil {
		tx.abort()
		s.fail(err)
		return writeErr(err)
	}
	tx.undo = tx.undo[:0]
	tx.wakeQueues()
	tx.runAfter()
	return nil
}

func (tx *txn) runAfter() {
	for _, f := range tx.after {
		if err := f(); err != nil && tx.afterErr == nil {
			tx.afterErr = err
		}
	}
}

func (tx *txn) wakeQueues() {
	for _, q := range tx.wake {
		if q.paused {
			continue
		}
		for w := range q.waiters {
			w.wake()
			delete(q.waiters, w)
		}
	}
}

// finish waits for durability (strict) and publishes events. Call it
// without s.mu held.
func (tx *txn) finish() error {
	s := tx.s
	var err error
	if tx.b != nil {
		if s.opts.Durability == Strict {
			if err = tx.b.SyncWait(); err != nil {
				// The change is visible but maybe not durable: refuse
				// further writes rather than build on it.
				s.mu.Lock()
				s.fail(err)
				s.mu.Unlock()
				err = writeErr(err)
			}
		} else {
			s.syncer.nudge()
		}
		tx.b.Close()
		tx.b = nil
	}
	if err == nil && len(tx.events) > 0 {
		s.publish(tx.events)
	}
	return err
}

// run executes fn as one transaction under s.mu: fn's error reverts
// everything; otherwise the batch is committed and, after s.mu is released,
// awaited.
func (s *Store) run(fn func(tx *txn) error) error {
	return s.runSized(0, fn)
}

// runSized is run with a hint of the batch size in bytes.
func (s *Store) runSized(sizeHint int, fn func(tx *txn) error) error {
	return s.runOverlap(sizeHint, fn, nil)
}

// runOverlap is runSized that, once the transaction has committed, calls
// overlap after s.mu is released and before the sync is awaited: work that
// does not need the change on disk (a claim reading its tasks back) then
// runs while the WAL syncs instead of after it. Nothing the caller returns
// may depend on overlap alone: when the sync fails, so does the call.
func (s *Store) runOverlap(sizeHint int, fn func(tx *txn) error, overlap func()) error {
	s.mu.Lock()
	if s.failed != nil {
		err := s.failedErr()
		s.mu.Unlock()
		return err
	}
	tx := s.begin(sizeHint)
	defer tx.release()
	if err := fn(tx); err != nil {
		tx.abort()
		s.mu.Unlock()
		return err
	}
	err := tx.commit()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if overlap != nil {
		if tx.b != nil && s.opts.Durability == Strict {
			// The commit woke Pebble's WAL flusher onto this goroutine's
			// P, where it would wait for the overlapping work to end (or
			// be preempted): let it start the write and sync first.
			runtime.Gosched()
		}
		overlap()
	}
	if err := tx.finish(); err != nil {
		return err
	}
	return tx.afterErr
}

// txnPool recycles transactions with their scratch buffers and undo log,
// which the hot paths would otherwise allocate on every call.
var txnPool = sync.Pool{New: func() any { return new(txn) }}

// release returns tx to the pool; tx must not be used afterwards.
func (tx *txn) release() {
	if cap(tx.undo) > 4096 || cap(tx.buf) > 64<<10 {
		return // don't keep what one huge transaction grew
	}
	// Drop references to tasks and closures so the pool pins nothing.
	clear(tx.undo[:cap(tx.undo)])
	clear(tx.events[:cap(tx.events)])
	clear(tx.wake[:cap(tx.wake)])
	clear(tx.after[:cap(tx.after)])
	*tx = txn{undo: tx.undo[:0], events: tx.events[:0], wake: tx.wake[:0], buf: tx.buf[:0],
		kbuf: tx.kbuf[:0], hbuf: tx.hbuf[:0], after: tx.after[:0]}
	txnPool.Put(tx)
}

// set records a changed state for t: indexes follow at once, the state
// record goes into the batch, and the undo log can restore the old state.
func (tx *txn) set(t *task, ns state) {
	old := t.st
	var spell uint8
	if old.implied|ns.implied != 0 {
		spell = settleImplied(&old, &ns)
	}
	t.st = ns
	tx.s.index(t, old, true)
	tx.undo = append(tx.undo, undoStep{t: t, old: old})
	tx.buf = ns.encode(tx.buf[:0])
	tx.b.Set(tx.key(t.id, sufState), tx.buf, nil)
	if spell != 0 {
		tx.spellOut(t, &old, ns.histNext, spell)
	}
	if t.inBatch && ns.status != old.status {
		tx.batchStatusChanged(t, old.status, ns.status)
	}
	if t.inSeq && ns.status != old.status {
		tx.seqStatusChanged(t, old.status, ns.status)
	}
	if ns.status == stReady && old.status != stReady {
		tx.wake = append(tx.wake, t.q)
	} else if old.status == stRunning && ns.status != stRunning && t.q.flow.Limited() {
		// A running task left a limited queue: its key or the queue may
		// admit a waiting claimer's task again.
		tx.wake = append(tx.wake, t.q)
	}
}

// addTask inserts a new task into the indexes (its records are written by the caller).
func (tx *txn) addTask(t *task) {
	s := tx.s
	tx.grows = true
	s.tasks.put(t)
	s.index(t, state{}, false)
	tx.onUndo(func() {
		s.unindex(t)
		s.tasks.del(t)
	})
	if t.st.status == stReady {
		tx.wake = append(tx.wake, t.q)
	}
}

// removeTask deletes t and all its records. A task removed while pending
// fails its dependents.
func (tx *txn) removeTask(t *task) {
	s := tx.s
	wasPending := !terminal(t.st.status)
	if t.st.status == stRunning && t.q.flow.Limited() {
		tx.wake = append(tx.wake, t.q)
	}
	s.unindex(t)
	s.tasks.del(t)
	key, unique := s.uniqueOf[t]
	s.dropUnique(t)
	t.deleted = true
	if t.inBatch {
		tx.leaveBatch(t)
	}
	if t.inSeq {
		tx.leaveSequence(t)
	}
	deps := s.unindexDeps(t)
	tx.onUndo(func() {
		t.deleted = false
		s.tasks.put(t)
		s.index(t, t.st, false)
		if unique {
			s.addUnique(t, key)
		}
		s.indexDeps(t, deps)
	})
	tx.b.DeleteRange(taskPrefix(t.id), taskEnd(t.id), nil)
	if tx.s.hasSubs.Load() {
		// Deleting is a change: the event's version is one past the last
		// (norn.EventDeleted).
		tx.events = append(tx.events, norn.Event{Kind: norn.EventDeleted, TaskID: t.id, Queue: t.q.name,
			Status: statusOf(t.st.status), Version: t.st.version + 1, Time: fromNanos(tx.now)})
	}
	if _, ok := s.runOnFail[t]; ok {
		delete(s.runOnFail, t)
		tx.onUndo(func() { s.runOnFail[t] = struct{}{} })
	}
	if wasPending {
		tx.failDependents(t, nil)
	}
}

// history appends a history entry to t (whose new state ns is about to be
// set), dropping the oldest beyond the cap.
func (tx *txn) history(t *task, ns *state, h norn.HistoryEntry) {
	seq, implied := tx.nextHistory(ns, &h)
	tx.appendHistory(t, seq, implied, h)
}

// nextHistory reserves the next history sequence number in ns for h and
// reports whether ns's record stands for h (implied: no history key), so
// ns must already hold what h is read from (its owner, lease, and start
// or terminal time).
// With appendHistory after tx.set, the hot paths (claim, finishing a task)
// write a task's keys in key order (state 'c', then history 'h'): Pebble's
// memtable inserts a batch's keys with a cached skiplist position that
// only helps when each key lands just after the previous one, and a key
// before it (the state after its history entry) made every insert search
// from the top (docs/internals/embedded-performance.md).
func (tx *txn) nextHistory(ns *state, h *norn.HistoryEntry) (seq uint64, implied bool) {
	seq = ns.histNext
	ns.histNext++
	bit := impliedBy(ns, h, tx.now)
	switch {
	case bit == 0:
		// Implied entries must be the newest: set writes them out.
		ns.implied = 0
	case ns.implied&^(bit-1) != 0:
		// Only entries of an earlier bit can stay implied below it.
		ns.implied = bit
	default:
		ns.implied |= bit
	}
	return seq, bit != 0
}

// appendHistory writes history entry seq of t (reserved by nextHistory)
// unless t's state record stands for it, dropping the oldest beyond the
// cap.
func (tx *txn) appendHistory(t *task, seq uint64, implied bool, h norn.HistoryEntry) {
	if lim := uint64(tx.s.opts.HistoryLimit); seq >= lim {
		tx.b.Delete(tx.seqKey(t.id, sufHistory, seq-lim), nil)
	}
	if implied {
		return
	}
	h.Time = fromNanos(tx.now)
	tx.hbuf = appendHistory(tx.hbuf[:0], h)
	tx.b.Set(tx.seqKey(t.id, sufHistory, seq), tx.hbuf, nil)
}

// settleImplied keeps in ns the implied entries of old that ns still
// stands for, unchanged and at the same sequence numbers, and returns the
// others, which the transition must write as history keys (spellOut). An
// implied entry ns carries over but no longer stands for as it was (a
// transition changed its owner, lease or time without appending history)
// is dropped from ns, with every other carried one, below the entries this
// transition appended.
func settleImplied(old, ns *state) (spell uint8) {
	var carried uint8
	for bit := uint8(impAssign); bit <= impComplete; bit <<= 1 {
		if ns.implied&bit != 0 && ns.impliedSeq(bit) < old.histNext {
			carried |= bit
		}
	}
	for bit := uint8(impAssign); bit <= impComplete; bit <<= 1 {
		if carried&bit != 0 && !sameImplied(bit, old, ns) {
			ns.implied &^= carried
			carried = 0
			break
		}
	}
	return old.implied &^ carried
}

// spellOut writes old's implied entries in bits as history keys, those
// still under the cap once the history reaches histNext.
func (tx *txn) spellOut(t *task, old *state, histNext uint64, bits uint8) {
	lim := uint64(tx.s.opts.HistoryLimit)
	for bit := uint8(impAssign); bit <= impComplete; bit <<= 1 {
		if bits&bit == 0 {
			continue
		}
		if seq := old.impliedSeq(bit); histNext-seq <= lim {
			tx.hbuf = appendHistory(tx.hbuf[:0], old.impliedEntry(bit))
			tx.b.Set(tx.seqKey(t.id, sufHistory, seq), tx.hbuf, nil)
		}
	}
}

// recordError appends e to t's errors.
func (tx *txn) recordError(t *task, ns *state, e norn.ErrorInfo) {
	j, _ := json.Marshal(e)
	tx.b.Set(tx.seqKey(t.id, sufError, uint64(ns.errN)), j, nil)
	ns.errN++
}

func (tx *txn) event(kind norn.EventKind, t *task) {
	if !tx.s.hasSubs.Load() {
		return
	}
	tx.events = append(tx.events, norn.Event{
		Kind: kind, TaskID: t.id, Queue: t.q.name, Status: statusOf(t.st.status),
		Version: t.st.version, Time: fromNanos(tx.now),
	})
}

// touch starts a new version of t's state.
func (tx *txn) touch(t *task) state {
	ns := t.st
	ns.version++
	ns.updated = tx.now
	return ns
}

// finishTask moves t to a terminal status with a history entry (and an
// error for aborts), then settles its dependents.
func (tx *txn) finishTask(t *task, status uint8, h norn.HistoryEntry, e *norn.ErrorInfo) {
	tx.finishTaskAs(t, status, h, e, norn.EventKind(h.Type))
}

// finishTaskAs is finishTask announcing the change as kind.
func (tx *txn) finishTaskAs(t *task, status uint8, h norn.HistoryEntry, e *norn.ErrorInfo, kind norn.EventKind) {
	ns := tx.touch(t)
	ns.status = status
	ns.deadline = 0
	ns.endedAt = tx.now
	if e != nil {
		h.Error = e
		tx.recordError(t, &ns, *e)
	}
	seq, implied := tx.nextHistory(&ns, &h)
	tx.set(t, ns)
	tx.appendHistory(t, seq, implied, h)
	tx.event(kind, t)
	if status == stCompleted {
		tx.releaseDependents(t)
	} else {
		tx.failDependents(t, e)
	}
}
