package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/nornq/norn"
)

// lastSeenGranularity coarsens worker LastSeen writes: a claim or heartbeat
// persists it only when the stored value is older than this.
const lastSeenGranularity = 5 * time.Second

// RegisterWorker stores a worker under a random id (norn.NewWorkerID);
// the durable sequence only orders the records.
func (s *Store) RegisterWorker(ctx context.Context, info norn.WorkerInfo) (string, error) {
	if err := s.enter(); err != nil {
		return "", err
	}
	defer s.exit()
	if err := info.Validate(); err != nil {
		return "", err
	}
	var id string
	err := s.run(func(tx *txn) error {
		s.workerSeq++
		n := s.workerSeq
		tx.onUndo(func() { s.workerSeq-- })
		info.ID = s.newWorkerID()
		info.Registered = fromNanos(tx.now)
		info.LastSeen = info.Registered
		info.Queues = append([]string(nil), info.Queues...)
		rec := &workerRec{n: n, info: info, persisted: tx.now}
		s.workers[info.ID] = rec
		tx.onUndo(func() { delete(s.workers, info.ID) })
		tx.b.Set(workerKey(n), workerJSON(info), nil)
		id = info.ID
		return nil
	})
	return id, err
}

// seen refreshes a registered worker's LastSeen, persisting it coarsely.
func (tx *txn) seen(worker string) {
	w := tx.s.workers[worker]
	if w == nil {
		return
	}
	w.info.LastSeen = fromNanos(tx.now)
	if tx.now-w.persisted >= int64(lastSeenGranularity) {
		w.persisted = tx.now
		tx.b.Set(workerKey(w.n), workerJSON(w.info), nil)
	}
}

// Claim leases up to N ready tasks; see norn.WorkerAPI.
func (s *Store) Claim(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var deadline <-chan time.Time
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var claimed []*task
		var sc *claimScratch
		var w *waiter
		var r *reader
		var tokenIn, gatherIn time.Duration
		// Weighted queues: a fresh order for every attempt.
		attempt := req
		attempt.Queues = req.ClaimOrder(rand.Float64)
		var out []*norn.Task
		var readErr error
		err := s.runOverlap(0, func(tx *txn) error {
			if req.GroupBy != "" {
				attempt.Queues = norn.DistinctQueues(attempt.Queues)
				var err error
				if claimed, gatherIn, err = tx.claimGroup(&attempt); err != nil {
					return err
				}
			} else if take, in := tx.gathered(&req); take {
				claimed = tx.claim(&attempt)
			} else {
				gatherIn = in
			}
			tokenIn = tx.tokenIn
			if len(claimed) > 0 {
				var err error
				r, sc, err = tx.claimedView(claimed, req.Worker)
				return err
			} else if req.Wait > 0 {
				w = tx.wait(req.Queues)
			}
			return nil
		}, func() {
			// Read while the claim's WAL sync is in flight (the view
			// does not depend on it): a claimer's reading no longer
			// waits for its sync, and only the acknowledgement does.
			if len(claimed) > 0 {
				out, readErr = r.tasksForward(sc.ids, sc.as, sc.order)
			}
		})
		if r != nil {
			r.close()
		}
		if sc != nil {
			sc.release()
		}
		if err != nil {
			return nil, err
		}
		if len(claimed) > 0 {
			return out, readErr
		}
		if w == nil {
			return []*norn.Task{}, nil
		}
		if deadline == nil {
			tm := time.NewTimer(req.Wait.D())
			defer tm.Stop()
			deadline = tm.C
		}
		var timedOut bool
		select {
		case <-w.ch:
		case <-tokenWait(tokenIn): // a rate limit held tasks back: look again when a token comes
		case <-tokenWait(gatherIn): // a batch claim's linger ends
		case <-deadline:
			timedOut = true
		case <-ctx.Done():
		case <-s.done:
		}
		s.mu.Lock()
		for _, name := range req.Queues {
			delete(s.queues[name].waiters, w)
		}
		s.mu.Unlock()
		if s.closed.Load() {
			return nil, norn.ErrClosed
		}
		if timedOut {
			// One last try, without waiting.
			req.Wait = 0
		}
	}
}

// claimedView returns a view of the database before this claim's batch is
// applied (s.mu keeps every other write out until then), and what the claim
// changed (claimedAs): the tasks are decoded from both after s.mu is
// released, as they were plus the claim.
func (tx *txn) claimedView(claimed []*task, worker string) (*reader, *claimScratch, error) {
	r, err := tx.s.openReader()
	if err != nil {
		return nil, nil, err
	}
	sc := getClaimScratch(len(claimed))
	for i, t := range claimed {
		sc.ids[i] = t.id
		sc.as[i] = claimedAs{st: t.st, hist: norn.HistoryEntry{Type: norn.TaskAssignment,
			Time: fromNanos(tx.now), Worker: worker, Lease: t.st.lease}}
	}
	return r, sc, nil
}

// wait registers a long-polling claimer on queues; it is woken when one of
// them gets a ready task (and unregistered if the transaction fails).
func (tx *txn) wait(queues []string) *waiter {
	w := &waiter{ch: make(chan struct{})}
	for _, name := range queues {
		q := tx.s.queue(name)
		q.waiters[w] = struct{}{}
	}
	tx.onUndo(func() {
		for _, name := range queues {
			delete(tx.s.queues[name].waiters, w)
		}
	})
	return w
}

// claim pops up to req.N tasks from the first non-paused queues that have
// any, leasing each.
func (tx *txn) claim(req *norn.ClaimRequest) []*task {
	s := tx.s
	var out []*task
	for _, name := range req.Queues {
		q := s.queues[name]
		if q == nil || q.paused {
			continue
		}
		// q.top holds only keys below their limit; max_running is checked
		// per task because every claim raises the queue's running count.
		p := tx.plan(q, req.N-len(out))
		n0 := len(out)
		for len(out) < req.N && q.claimable() && (p.tokens < 0 || len(out)-n0 < p.tokens) {
			if t := tx.take(q.top[0].ready.first().t, req); t != nil {
				if out == nil {
					// Sized once (growing to a claim of 1,000 copied it ten
					// times under s.mu), not before a task is taken: an
					// empty queue's long polls claim nothing.
					out = make([]*task, 0, req.N)
				}
				out = append(out, t)
			}
		}
		tx.claimed(q, p, len(out)-n0)
		if len(out) == req.N {
			break
		}
	}
	// Also when nothing was claimed: a worker long-polling an empty queue
	// is alive and must stay among the active workers.
	tx.seen(req.Worker)
	return out
}

// take leases t, a ready task, to req.Worker, or returns nil when t has
// expired (expiring it: never handed out, even before the monitor came
// by).
func (tx *txn) take(t *task, req *norn.ClaimRequest) *task {
	if t.expires != 0 && t.expires <= tx.now {
		// Expired before the monitor came by: never handed out.
		tx.expire(t)
		return nil
	}
	if !tx.takeKeyToken(t.g) {
		return nil // the key has no token: the group left the top heap
	}
	tx.chargeFair(t.g)
	ns := tx.touch(t)
	ns.status = stRunning
	ns.lease++
	ns.attempts++
	ns.owner = req.Worker
	lease := t.timeout
	if req.Timeout > 0 {
		lease = int64(req.Timeout)
	}
	ns.started = tx.now
	ns.deadline = nanos(norn.ClaimDeadline(fromNanos(tx.now), time.Duration(lease), norn.Duration(t.maxRuntime)))
	ns.progress = 0
	h := norn.HistoryEntry{Type: norn.TaskAssignment, Worker: req.Worker, Lease: ns.lease}
	seq, implied := tx.nextHistory(&ns, &h)
	tx.set(t, ns) // removes it from the ready queue
	tx.appendHistory(t, seq, implied, h)
	tx.event(norn.EventKind(norn.TaskAssignment), t)
	tx.s.tasks.noteClaimed(t)
	return t
}

// leased returns the task ref names if ref holds its current lease. Every
// caller has validated ref (leaseOp, applyLeaseOp's callers, Await,
// AppendLog), outside s.mu where it can.
func (tx *txn) leased(ref norn.LeaseRef) (*task, error) {
	t := tx.s.tasks.getClaimed(ref.TaskID)
	if t == nil {
		return nil, norn.NotFound(ref.TaskID)
	}
	if t.st.status == stCancelled {
		return nil, norn.Cancelled(ref.TaskID)
	}
	if t.st.status != stRunning || t.st.lease != ref.Lease || t.st.owner != ref.Worker {
		return nil, norn.LeaseLost(ref.TaskID, ref.Lease)
	}
	return t, nil
}

// finishing returns the task when op's lease is live. Otherwise it returns
// nil and: no error when op repeats the call that ended that lease
// (norn.IsRepeat: the caller then does nothing), or the lease error.
func (tx *txn) finishing(op *norn.LeaseOp) (*task, error) {
	t, err := tx.leased(op.LeaseRef)
	if err == nil || !errors.Is(err, norn.ErrLeaseLost) {
		return t, err
	}
	cur := tx.s.tasks.get(op.TaskID)
	if cur.st.lease != op.Lease {
		return nil, err
	}
	last, lerr := tx.s.lastLeased(cur.id)
	if lerr != nil {
		return nil, lerr
	}
	if norn.IsRepeat(op, cur.st.lease, last) {
		return nil, nil
	}
	return nil, err
}

// Heartbeat extends the lease and optionally records progress.
func (s *Store) Heartbeat(ctx context.Context, ref norn.LeaseRef, hb norn.Heartbeat) (time.Time, error) {
	return s.single(&norn.LeaseOp{Op: norn.OpHeartbeat, LeaseRef: ref, Heartbeat: hb})
}

// single applies one lease operation in its own transaction.
func (s *Store) single(op *norn.LeaseOp) (time.Time, error) {
	if err := s.enter(); err != nil {
		return time.Time{}, err
	}
	defer s.exit()
	// Checked before s.mu is taken: the check needs no state, and every
	// worker's call waits for the lock.
	if err := op.Validate(); err != nil {
		return time.Time{}, err
	}
	var dl time.Time
	err := s.run(func(tx *txn) error {
		var err error
		dl, err = tx.applyLeaseOp(op)
		return err
	})
	return dl, err
}

// leaseOp checks a lease operation the way every store does
// (norn.LeaseOp.Validate) and applies it.
func (tx *txn) leaseOp(op *norn.LeaseOp) (deadline time.Time, err error) {
	if err := op.Validate(); err != nil {
		return time.Time{}, err
	}
	return tx.applyLeaseOp(op)
}

// applyLeaseOp applies op, which the caller has validated; the single
// calls and LeaseBatch come here. A failed op writes nothing: every op
// checks before it writes.
func (tx *txn) applyLeaseOp(op *norn.LeaseOp) (deadline time.Time, err error) {
	switch op.Op {
	case norn.OpHeartbeat:
		return tx.heartbeat(op.LeaseRef, op.Heartbeat)
	case norn.OpComplete:
		return time.Time{}, tx.complete(op)
	case norn.OpFail:
		return time.Time{}, tx.fail(op)
	case norn.OpAbort:
		return time.Time{}, tx.abortTask(op)
	case norn.OpYield:
		return time.Time{}, tx.yield(op)
	case norn.OpSnooze:
		return time.Time{}, tx.snooze(op)
	}
	return time.Time{}, norn.Invalid("op", "unknown operation %q", op.Op)
}

func (tx *txn) heartbeat(ref norn.LeaseRef, hb norn.Heartbeat) (time.Time, error) {
	t, err := tx.leased(ref)
	if err != nil {
		return time.Time{}, err
	}
	dl, ok := norn.HeartbeatDeadline(fromNanos(tx.now), fromNanos(t.st.updated), fromNanos(t.st.deadline),
		time.Duration(t.timeout), hb.Extend.D(), norn.RuntimeLimit(fromNanos(t.st.started), norn.Duration(t.maxRuntime)))
	if !ok {
		return time.Time{}, norn.RuntimeLeaseLost(ref.TaskID, ref.Lease)
	}
	ns := tx.touch(t)
	ns.deadline = nanos(dl)
	if hb.Progress != nil {
		ns.progress = *hb.Progress
	}
	tx.set(t, ns)
	tx.seen(ref.Worker)
	if hb.Progress != nil {
		tx.event(norn.EventProgress, t)
	}
	return fromNanos(ns.deadline), nil
}

// AppendLog appends to the task's update log under a live lease.
func (s *Store) AppendLog(ctx context.Context, ref norn.LeaseRef, entry norn.LogAppend) (norn.LogEntry, error) {
	if err := s.enter(); err != nil {
		return norn.LogEntry{}, err
	}
	defer s.exit()
	if err := ref.Validate(); err != nil {
		return norn.LogEntry{}, err
	}
	if err := entry.Validate(); err != nil {
		return norn.LogEntry{}, err
	}
	if err := entry.ValidateRange(); err != nil {
		return norn.LogEntry{}, err
	}
	var out norn.LogEntry
	err := s.run(func(tx *txn) error {
		tx.grows = true
		if cur := s.tasks.get(ref.TaskID); cur != nil && entry.Seq != 0 && entry.Seq < cur.st.logNext {
			// A retried append whose first attempt took effect.
			prev, err := s.logEntry(ref.TaskID, entry.Seq)
			if err != nil {
				return err
			}
			if norn.IsLogRepeat(ref, entry, prev) {
				out = *prev
				return nil
			}
		}
		t, err := tx.leased(ref)
		if err != nil {
			return err
		}
		ns := t.st
		if ns.logNext == 0 {
			ns.logNext = 1
		}
		if err := entry.CheckSeq(ref.TaskID, ns.logNext); err != nil {
			return err
		}
		out = norn.LogEntry{Seq: ns.logNext, Lease: ref.Lease, Time: fromNanos(tx.now),
			Data: append(json.RawMessage(nil), entry.Data...)}
		tx.b.Set(taskSeqKey(t.id, sufLog, ns.logNext), encodeLog(out), nil)
		ns.logNext++
		tx.set(t, ns)
		return nil
	})
	return out, err
}

// Complete finishes the task successfully.
func (s *Store) Complete(ctx context.Context, ref norn.LeaseRef, result json.RawMessage) error {
	_, err := s.single(&norn.LeaseOp{Op: norn.OpComplete, LeaseRef: ref, Result: result})
	return err
}

func (tx *txn) complete(op *norn.LeaseOp) error {
	t, err := tx.finishing(op)
	if t == nil {
		return err
	}
	t2 := t.st
	t2.progress = 1
	old := t.st
	t.st = t2 // progress recorded through finishTask's touch
	// A state undo step (not a closure, which allocated on every complete).
	tx.undo = append(tx.undo, undoStep{t: t, old: old})
	tx.result = op.Result // what its dependents record
	tx.finishTask(t, stCompleted, norn.HistoryEntry{Type: norn.TaskComplete, Worker: op.Worker, Lease: op.Lease, Progress: 1}, nil)
	tx.result = nil
	if len(op.Result) > 0 {
		// After the state and history keys, which sort before it.
		tx.b.Set(tx.key(t.id, sufResult), op.Result, nil)
	}
	return nil
}

// Fail records an error and retries with backoff or aborts.
func (s *Store) Fail(ctx context.Context, ref norn.LeaseRef, e norn.ErrorInfo) error {
	_, err := s.single(&norn.LeaseOp{Op: norn.OpFail, LeaseRef: ref, Error: &e})
	return err
}

func (tx *txn) fail(op *norn.LeaseOp) error {
	t, err := tx.finishing(op)
	if t == nil {
		return err
	}
	view := &norn.Task{ID: op.TaskID, Attempts: int(t.st.attempts), MaxAttempts: int(t.maxAttempts), Retry: t.retry,
		ExpiresAt: fromNanos(t.expires)}
	o := norn.AfterFailure(view, fromNanos(tx.now), *op.Error)
	h := norn.HistoryEntry{Type: o.History, Worker: op.Worker, Lease: op.Lease, Progress: t.st.progress}
	if o.Status == norn.StatusAborted {
		tx.finishTask(t, stAborted, h, &o.Error)
		return nil
	}
	tx.requeue(t, o, h)
	return nil
}

// requeue moves a running task back to ready or scheduled after a retry or
// a timeout.
func (tx *txn) requeue(t *task, o norn.Outcome, h norn.HistoryEntry) {
	ns := tx.leaveRunning(t, o)
	e := o.Error
	h.Error = &e
	tx.recordError(t, &ns, e)
	tx.history(t, &ns, h)
	tx.set(t, ns)
	tx.event(norn.EventKind(o.History), t)
}

// leaveRunning starts the state of a running task that an outcome sends
// back to the queue (retry, timeout, yield, snooze): no deadline or
// progress, the owner and attempt as the outcome says, and ready or
// scheduled as norn.Outcome.Requeue decides (PostgreSQL applies the same).
// The lease number stays, so the next claim still fences out the last
// worker.
func (tx *txn) leaveRunning(t *task, o norn.Outcome) state {
	ns := tx.touch(t)
	ns.deadline = 0
	ns.progress = 0
	if !o.KeepsOwner() {
		ns.owner = ""
	}
	if o.GivesAttemptBack() && ns.attempts > 0 {
		ns.attempts--
	}
	st, at := o.Requeue(fromNanos(tx.now))
	ns.runAt = nanos(at)
	if st == norn.StatusScheduled {
		ns.status = stScheduled
	} else {
		ns.status = stReady
		ns.readyAt = tx.now
	}
	return ns
}

// Abort finishes the task unsuccessfully for good.
func (s *Store) Abort(ctx context.Context, ref norn.LeaseRef, e norn.ErrorInfo) error {
	_, err := s.single(&norn.LeaseOp{Op: norn.OpAbort, LeaseRef: ref, Error: &e})
	return err
}

func (tx *txn) abortTask(op *norn.LeaseOp) error {
	t, err := tx.finishing(op)
	if t == nil {
		return err
	}
	e := *op.Error
	tx.finishTask(t, stAborted, norn.HistoryEntry{Type: norn.TaskAbort, Worker: op.Worker, Lease: op.Lease, Progress: t.st.progress}, &e)
	return nil
}

// Yield gives the task back: ready now, and the attempt does not count.
func (s *Store) Yield(ctx context.Context, ref norn.LeaseRef) error {
	_, err := s.single(&norn.LeaseOp{Op: norn.OpYield, LeaseRef: ref})
	return err
}

func (tx *txn) yield(op *norn.LeaseOp) error {
	t, err := tx.finishing(op)
	if t == nil {
		return err
	}
	tx.giveBack(t, norn.AfterYield(fromNanos(tx.now)), op.LeaseRef)
	return nil
}

// giveBack returns a running task to the queue at its worker's request
// (yield, snooze): no error is recorded and the attempt does not count.
func (tx *txn) giveBack(t *task, o norn.Outcome, ref norn.LeaseRef) {
	ns := tx.leaveRunning(t, o)
	tx.history(t, &ns, norn.HistoryEntry{Type: o.History, Worker: ref.Worker, Lease: ref.Lease, Progress: t.st.progress})
	tx.set(t, ns)
	tx.event(norn.EventKind(o.History), t)
}

// LeaseBatch applies many lease operations in one transaction; each op
// succeeds or fails on its own.
func (s *Store) LeaseBatch(ctx context.Context, ops []norn.LeaseOp) ([]norn.LeaseOpResult, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateBatchSize(ops); err != nil {
		return nil, err
	}
	res := make([]norn.LeaseOpResult, len(ops))
	// The ops are checked before s.mu is taken (the checks need no state),
	// so the lock every claimer and completer waits for covers only what
	// needs it.
	for i := range ops {
		if err := ops[i].ValidateInBatch(); err != nil {
			if _, ok := err.(*norn.Error); !ok {
				return nil, err
			}
			res[i].Err = norn.BatchOpError(i, err)
		}
	}
	err := s.run(func(tx *txn) error {
		for i := range ops {
			if res[i].Err != nil {
				continue // refused by its check
			}
			u, e := tx.savepoint()
			var err error
			if res[i].Deadline, err = tx.applyLeaseOp(&ops[i]); err != nil {
				tx.rollbackTo(u, e)
				if _, ok := err.(*norn.Error); !ok {
					return err
				}
				res[i].Err = norn.BatchOpError(i, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
