package embedded

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/nornq/norn"
)

// queueRecord is the durable form of a queue's settings.
type queueRecord struct {
	Paused   bool               `json:"paused"`
	Defaults norn.QueueDefaults `json:"defaults"`
	Flow     norn.QueueFlow     `json:"flow,omitzero"`
}

// Queues lists every queue that has tasks or settings.
func (s *Store) Queues(ctx context.Context) ([]norn.QueueInfo, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	s.mu.Lock()
	out := []norn.QueueInfo{}
	for _, q := range s.queues {
		if q.configured || q.total() > 0 {
			out = append(out, q.withRate(q.info(), s.now()))
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Queue returns one queue; an unused queue reads as empty with defaults.
func (s *Store) Queue(ctx context.Context, name string) (norn.QueueInfo, error) {
	if err := s.enter(); err != nil {
		return norn.QueueInfo{}, err
	}
	defer s.exit()
	if err := norn.ValidateQueue("name", name); err != nil {
		return norn.QueueInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[name]; q != nil {
		return q.withRate(q.infoWithKeys(), s.now()), nil
	}
	return norn.QueueInfo{Name: name, Counts: norn.StatusCounts(), Defaults: norn.DefaultQueueDefaults()}, nil
}

// UpdateQueue pauses/resumes a queue and changes its defaults.
func (s *Store) UpdateQueue(ctx context.Context, name string, u norn.QueueUpdate) (norn.QueueInfo, error) {
	if err := s.enter(); err != nil {
		return norn.QueueInfo{}, err
	}
	defer s.exit()
	if err := norn.ValidateQueue("name", name); err != nil {
		return norn.QueueInfo{}, err
	}
	if err := u.Validate(); err != nil {
		return norn.QueueInfo{}, err
	}
	var out norn.QueueInfo
	err := s.run(func(tx *txn) error {
		_, existed := s.queues[name]
		q := s.queue(name)
		old := struct {
			paused, configured bool
			defaults           norn.QueueDefaults
			flow               norn.QueueFlow
		}{q.paused, q.configured, q.defaults, q.flow}
		tx.onUndo(func() {
			q.paused, q.configured, q.defaults = old.paused, old.configured, old.defaults
			if !existed {
				delete(s.queues, name)
			}
		})
		if u.Paused != nil {
			q.paused = *u.Paused
		}
		flow := q.flow
		u.ApplyFlow(&flow)
		if err := tx.setFlow(q, flow); err != nil {
			return err
		}
		tx.setRateLimit(q, old.flow.RateLimit)
		tx.setKeys(q, u.Keys)
		q.reviveAll()
		if err := u.CheckFlow(q.flow, q.keyLimits(), q.keyRates()); err != nil {
			return err
		}
		// Resumed, or limits raised: waiting claimers may find work now.
		if !q.paused && q.claimable() {
			tx.wake = append(tx.wake, q)
		}
		u.ApplyDefaults(&q.defaults)
		if u.Retention != nil {
			// Retention is measured with the current setting: re-arm the
			// expiry of the queue's terminal tasks.
			for t := range s.tasks.all() {
				if t.q == q && terminal(t.st.status) {
					s.setTimer(t, timerFor(t))
				}
			}
			tx.onUndo(func() {
				for t := range s.tasks.all() {
					if t.q == q && terminal(t.st.status) {
						s.setTimer(t, timerFor(t))
					}
				}
			})
		}
		q.configured = true
		j, _ := json.Marshal(queueRecord{Paused: q.paused, Defaults: q.defaults, Flow: q.flow})
		tx.b.Set(queueKey(name), j, nil)
		out = q.withRate(q.infoWithKeys(), tx.now)
		return nil
	})
	return out, err
}

// Workers lists registered workers.
func (s *Store) Workers(ctx context.Context) ([]norn.WorkerInfo, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	s.mu.Lock()
	recs := make([]*workerRec, 0, len(s.workers))
	for _, w := range s.workers {
		recs = append(recs, w)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].n < recs[j].n })
	out := make([]norn.WorkerInfo, len(recs))
	for i, w := range recs {
		out[i] = w.info
		out[i].Queues = append([]string(nil), w.info.Queues...)
	}
	s.mu.Unlock()
	return out, nil
}

// Stats returns counts by queue×status, totals and workers.
func (s *Store) Stats(ctx context.Context) (norn.Stats, error) {
	if err := s.enter(); err != nil {
		return norn.Stats{}, err
	}
	defer s.exit()
	st := norn.Stats{Counts: []norn.GroupCount{}, Totals: norn.StatusCounts()}
	now := s.clock.Now()
	s.mu.Lock()
	for _, q := range s.queues {
		for i, n := range q.counts {
			if n != 0 {
				st.Counts = append(st.Counts, norn.GroupCount{Queue: q.name, Status: norn.AllStatuses[i], Count: n})
				st.Totals[norn.AllStatuses[i]] += n
				st.Total += n
			}
		}
	}
	st.Workers = len(s.workers)
	for _, w := range s.workers {
		if now.Sub(w.info.LastSeen) <= norn.ActiveWorkerWindow {
			st.ActiveWorkers++
		}
	}
	s.mu.Unlock()
	norn.SortGroupCounts(st.Counts)
	return st, nil
}

// sweepChunk bounds how much one monitor transaction does, so claims and
// other writers are not held up by a large backlog of due timers.
const sweepChunk = 1000

// Sweep runs every monitor duty due at Clock.Now().
func (s *Store) Sweep(ctx context.Context) (norn.SweepReport, error) {
	if err := s.enter(); err != nil {
		return norn.SweepReport{}, err
	}
	defer s.exit()
	return s.sweep(ctx)
}

func (s *Store) sweep(ctx context.Context) (norn.SweepReport, error) {
	var rep norn.SweepReport
	for {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		more := false
		var part norn.SweepReport
		err := s.run(func(tx *txn) error {
			tx.pruneKeyBuckets()
			for n := 0; ; n++ {
				t := s.firstTimer()
				if t == nil || t.timerAt > tx.now {
					break
				}
				if n == sweepChunk {
					more = true
					break
				}
				tx.due(t)
			}
			part = tx.report
			return nil
		})
		if err != nil {
			return rep, err
		}
		rep.TimedOut += part.TimedOut
		rep.Released += part.Released
		rep.Aborted += part.Aborted
		rep.Purged += part.Purged
		rep.Expired += part.Expired
		if !more {
			n, err := s.fireSchedules(ctx)
			rep.Fired += n
			if err != nil {
				return rep, err
			}
			n, err = s.fireBatches(ctx)
			rep.Callbacks += n
			return rep, err
		}
	}
}

// due performs the duty of a task whose timer has fired; every branch
// moves the task's timer (or removes it), so sweeping always progresses.
func (tx *txn) due(t *task) {
	if t.st.status != stRunning && !terminal(t.st.status) && norn.Expired(fromNanos(t.expires), fromNanos(tx.now)) {
		tx.expire(t)
		return
	}
	switch t.st.status {
	case stScheduled:
		ns := tx.touch(t)
		ns.status = stReady
		ns.readyAt = tx.now
		tx.history(t, &ns, norn.HistoryEntry{Type: norn.TaskRelease})
		tx.set(t, ns)
		tx.event(norn.EventKind(norn.TaskRelease), t)
		tx.report.Released++
	case stRunning:
		view := &norn.Task{Attempts: int(t.st.attempts), MaxAttempts: int(t.maxAttempts), Deadline: fromNanos(t.st.deadline),
			Started: fromNanos(t.st.started), MaxRuntime: norn.Duration(t.maxRuntime), ExpiresAt: fromNanos(t.expires)}
		o := norn.AfterTimeout(view, fromNanos(tx.now))
		h := norn.HistoryEntry{Type: o.History, Worker: t.st.owner, Lease: t.st.lease, Progress: t.st.progress}
		tx.report.CountTimeout(o)
		if o.Status == norn.StatusAborted {
			tx.finishTask(t, stAborted, h, &o.Error)
			return
		}
		tx.requeue(t, o, h)
	case stCompleted, stAborted, stCancelled:
		tx.removeTask(t)
		tx.report.Purged++
	default:
		tx.s.setTimer(t, 0)
	}
}

// expire aborts a task that is not running and reached its expiry, as
// norn.Expire decides; its dependents follow as for any abort.
func (tx *txn) expire(t *task) {
	o := norn.Expire(fromNanos(t.expires))
	tx.finishTaskAs(t, stAborted, norn.HistoryEntry{Type: o.History}, &o.Error, norn.EventExpired)
	tx.report.Expired++
}

// kickMonitor wakes the monitor to re-arm (called under s.mu).
func (s *Store) kickMonitor() {
	s.armedAt = -1 << 63 // until the monitor re-arms, don't kick again
	if s.monitor != nil {
		s.monitor.wake()
	}
}
