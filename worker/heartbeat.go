package worker

import (
	"context"
	"time"

	"github.com/nornq/norn"
)

// heartbeats keeps every running task's lease alive. One goroutine serves
// all tasks: whatever is due (or nearly due) goes out in one LeaseBatch, so
// a worker running many tasks makes one call per interval, not one per task.
// A task whose lease surely expired locally (no successful heartbeat for a
// whole lease length) is treated as lost: another worker may own it now.
func (w *Worker) heartbeats(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		now := time.Now()
		next := now.Add(time.Hour)
		var due []*run
		var expired []*run
		w.mu.Lock()
		for r := range w.runs {
			if r.state != stRunning && r.state != stFinishing {
				continue
			}
			expiry := r.lastOK.Add(r.leaseLen)
			if !now.Before(expiry) {
				expired = append(expired, r)
				continue
			}
			if r.inflight {
				continue
			}
			// Coalesce: anything due within a tenth of its interval goes
			// out now, so tasks claimed together stay in one batch.
			if !r.nextBeat.After(now.Add(r.interval / 10)) {
				r.inflight = true
				due = append(due, r)
				continue
			}
			next = minTime(next, r.nextBeat, expiry)
		}
		w.mu.Unlock()
		for _, r := range expired {
			w.lose(r, norn.LeaseLost(r.ref.TaskID, r.ref.Lease))
		}
		if len(due) > 0 {
			w.beat(ctx, due)
			continue
		}
		timer.Reset(time.Until(next))
		select {
		case <-timer.C:
		case <-w.hbKick:
		case <-ctx.Done():
		}
	}
}

// beat sends one heartbeat for each run in due.
func (w *Worker) beat(ctx context.Context, due []*run) {
	ops := make([]norn.LeaseOp, len(due))
	sent := time.Now()
	expiry := sent.Add(time.Hour)
	w.mu.Lock()
	for i, r := range due {
		ops[i] = norn.LeaseOp{Op: norn.OpHeartbeat, LeaseRef: r.ref,
			Heartbeat: norn.Heartbeat{Progress: r.progress, Extend: w.extend()}}
		if r.progress != nil {
			r.progressSent = sent
		}
		r.progress = nil
		expiry = minTime(expiry, r.lastOK.Add(r.leaseLen))
	}
	w.mu.Unlock()
	// A heartbeat answered after the earliest lease surely expired is
	// worthless; stop waiting then and let the next round decide.
	cctx, cancel := context.WithTimeout(ctx, max(expiry.Sub(sent), 100*time.Millisecond))
	res, err := w.api.LeaseBatch(cctx, ops)
	cancel()
	var lost []*run
	var lostErr []error
	now := time.Now()
	w.mu.Lock()
	for i, r := range due {
		r.inflight = false
		e := err
		if e == nil {
			if i < len(res) && res[i].Err != nil {
				e = res[i].Err
			} else if i >= len(res) {
				e = norn.Errorf(norn.CodeInternal, "heartbeat batch returned %d results for %d operations", len(res), len(ops))
			}
		}
		switch {
		case e == nil:
			if sent.After(r.lastOK) {
				r.lastOK = sent
			}
			r.nextBeat = sent.Add(r.interval)
			if r.progress != nil {
				// Progress set while this heartbeat was out goes at its
				// own pace (SetProgress), not with the next regular one.
				r.nextBeat = minTime(r.nextBeat, r.progressSent.Add(ProgressEvery))
			}
		case gone(e):
			lost = append(lost, r)
			lostErr = append(lostErr, e)
		default:
			// Transient: keep the unsent progress and retry soon.
			if r.progress == nil {
				r.progress = ops[i].Progress
			}
			r.nextBeat = now.Add(min(r.interval, 500*time.Millisecond))
			w.log.Warn("heartbeat failed; retrying", "task", r.ref.TaskID, "err", e)
		}
	}
	w.mu.Unlock()
	w.watchSignals(ctx, due, err)
	for i, r := range lost {
		w.lose(r, lostErr[i])
	}
}

// watchSignals reads, after a heartbeat round that did not fail as a
// whole (err), the new signals of the runs in due whose handlers asked for
// them (Task.SignalC), and sends them on. It reads no more than the
// channel has room for, so a handler that stops reading holds the rest in
// the store, not in memory.
func (w *Worker) watchSignals(ctx context.Context, due []*run, err error) {
	sig, ok := w.api.(norn.Signaler)
	if !ok || err != nil {
		return
	}
	for _, r := range due {
		w.mu.Lock()
		ch, after, watching := r.sigs, r.sigAfter, r.sigs != nil && r.state == stRunning
		w.mu.Unlock()
		if !watching || len(ch) == cap(ch) {
			continue
		}
		got, err := sig.Signals(ctx, r.ref.TaskID, after)
		if err != nil {
			continue // the next heartbeat tries again
		}
	send:
		for _, s := range got {
			select {
			case ch <- s:
				after = s.Seq
			default:
				break send // full: the rest is read again next time
			}
		}
		w.mu.Lock()
		r.sigAfter = max(r.sigAfter, after)
		w.mu.Unlock()
	}
}

func minTime(a time.Time, bs ...time.Time) time.Time {
	for _, b := range bs {
		if b.Before(a) {
			a = b
		}
	}
	return a
}
