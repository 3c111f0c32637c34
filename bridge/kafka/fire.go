package kafka

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nornq/norn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Firing runs in three steps so that neither the store's latency nor its
// jitter shows in when a message comes out:
//
//  1. fireLoop claims messages ClaimAhead before their firing time (their
//     run_at is deadline − advance − ClaimAhead) under a lease of the hold time;
//  2. the dispatcher holds them in memory and publishes each at its firing
//     time, deadline − the timing advance (measured publish latency, or the
//     configured fixed value);
//  3. once every message of a claimed batch is acknowledged or failed, the
//     batch is finished: acknowledged messages are completed and deleted.
//
// A node that dies holding messages leaves them leased; they are taken
// over after the hold time, as before.

// batch is one claim's worth of messages on their way out.
type batch struct {
	ctx    context.Context // bounded by the hold time from the claim
	cancel context.CancelFunc
	tasks  []*norn.Task
	msgs   []*message

	mu      sync.Mutex
	pending int
	errs    []error
}

// held is one claimed message waiting for its firing time.
type held struct {
	at time.Time
	b  *batch
	i  int
}

type heldHeap []held

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h heldHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)        { *h = append(*h, x.(held)) }
func (h *heldHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// dispatcher publishes held messages at their firing times and finishes
// their batches. inFlight counts messages claimed and not yet finished; it
// bounds how much a node holds.
type dispatcher struct {
	b      *Bridge
	worker string

	mu       sync.Mutex
	heap     heldHeap
	inFlight int
	wake     chan struct{} // an earlier message arrived
	freed    chan struct{} // capacity was released
	batches  sync.WaitGroup
	finishes chan struct{} // bounds concurrent finishing to FireConcurrency
}

func (b *Bridge) fireLoop(ctx context.Context, worker string) {
	d := &dispatcher{b: b, worker: worker, wake: make(chan struct{}, 1), freed: make(chan struct{}, 1),
		finishes: make(chan struct{}, b.cfg.FireConcurrency)}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); d.run(stop) }()
	d.claimLoop(ctx)
	// Graceful stop: what is held is published at its time (at most
	// ClaimAhead away) rather than left to be taken over and published twice.
	close(stop)
	<-done
	d.batches.Wait()
}

// capacity is how many messages a node holds at most.
func (b *Bridge) capacity() int { return b.cfg.ClaimBatch * b.cfg.FireConcurrency }

func (d *dispatcher) claimLoop(ctx context.Context) {
	b := d.b
	bo := b.backoff()
	for {
		d.mu.Lock()
		room := b.capacity() - d.inFlight
		d.mu.Unlock()
		if room <= 0 {
			select {
			case <-d.freed:
				continue
			case <-ctx.Done():
				return
			}
		}
		tasks, err := b.store.Claim(ctx, norn.ClaimRequest{
			Worker: d.worker, Queues: []string{b.cfg.Queue}, N: min(room, b.cfg.ClaimBatch),
			Timeout: norn.Duration(b.cfg.HoldTime), Wait: norn.Duration(b.jitter(b.cfg.PollInterval)),
		})
		if ctx.Err() != nil && len(tasks) == 0 {
			return
		}
		if err != nil {
			b.log.Warn("claiming due messages failed; retrying", "err", err)
			if !bo.wait(ctx) {
				return
			}
			continue
		}
		bo.reset()
		if len(tasks) > 0 {
			d.hold(ctx, tasks)
		}
	}
}

// hold decodes a claimed batch and queues its messages for their firing times.
func (d *dispatcher) hold(ctx context.Context, tasks []*norn.Task) {
	b := d.b
	if h := b.hooks.beforePublish; h != nil && !h(tasks) {
		return
	}
	// Not cut short by ctx: once messages are claimed, a graceful stop
	// finishes them (bounded by the hold time).
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.HoldTime)
	bt := &batch{ctx: bctx, cancel: cancel}
	for _, t := range tasks {
		m, err := decodeSpec(t.Spec)
		if err != nil {
			// Something else submitted to the bridge's queue: it can never
			// be published, so abort it rather than let it be taken over forever.
			b.log.Error("aborting a task of the bridge queue that is not a bridge message", "id", t.ID, "err", err)
			if err := b.store.Abort(bctx, norn.LeaseRef{TaskID: t.ID, Worker: d.worker, Lease: t.Lease},
				norn.ErrorInfo{Code: "bad_message", Description: err.Error()}); err != nil {
				b.log.Warn("aborting a bad message failed", "id", t.ID, "err", err)
			}
			continue
		}
		if t.Attempts > 1 {
			b.m.takenOver.Inc()
			b.log.Warn("taking over a message whose hold expired (suspected failure of its node)",
				"id", m.ID, "previous_owner", t.Owner, "attempt", t.Attempts)
		}
		bt.tasks = append(bt.tasks, t)
		bt.msgs = append(bt.msgs, m)
	}
	if len(bt.msgs) == 0 {
		cancel()
		return
	}
	bt.pending = len(bt.msgs)
	bt.errs = make([]error, len(bt.msgs))
	d.batches.Add(1)
	adv := b.advance()
	d.mu.Lock()
	d.inFlight += len(bt.msgs)
	earliest := len(d.heap) == 0
	for i, m := range bt.msgs {
		at := m.Deadline.Add(-adv)
		if !earliest && at.Before(d.heap[0].at) {
			earliest = true
		}
		heap.Push(&d.heap, held{at: at, b: bt, i: i})
	}
	d.mu.Unlock()
	if earliest {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// run publishes held messages when their time comes, until stop is closed
// and nothing is held.
func (d *dispatcher) run(stop <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stopping := false
	var due []held
	for {
		d.mu.Lock()
		now := time.Now()
		due = due[:0]
		for len(d.heap) > 0 && !d.heap[0].at.After(now) {
			due = append(due, heap.Pop(&d.heap).(held))
		}
		next := time.Hour
		if len(d.heap) > 0 {
			next = d.heap[0].at.Sub(now)
		}
		empty := len(d.heap) == 0
		d.mu.Unlock()
		for _, h := range due {
			d.publish(h)
		}
		if stopping && empty {
			return
		}
		timer.Reset(next)
		select {
		case <-timer.C:
		case <-d.wake:
		case <-stop:
			// Keep publishing what is held at its time, then return.
			stopping, stop = true, nil
		}
	}
}

// publish sends one held message; its batch finishes with the last ack.
func (d *dispatcher) publish(h held) {
	b := d.b
	m := h.b.msgs[h.i]
	sent := time.Now()
	b.cl.Produce(h.b.ctx, m.record(b.cfg.OutTopic), func(_ *kgo.Record, err error) {
		now := time.Now()
		if err != nil {
			b.m.publishErrors.Inc()
		} else {
			b.lat.observe(now.Sub(sent))
			b.m.fired.Inc()
			b.m.lateness.Observe(now.Sub(m.Deadline).Seconds())
		}
		bt := h.b
		bt.mu.Lock()
		bt.errs[h.i] = err
		bt.pending--
		last := bt.pending == 0
		bt.mu.Unlock()
		if last {
			// Never block franz-go's callback goroutine on the store.
			go d.finish(bt)
		}
	})
}

// finish forgets a batch's acknowledged messages and releases its capacity.
func (d *dispatcher) finish(bt *batch) {
	defer d.batches.Done()
	defer bt.cancel()
	d.finishes <- struct{}{}
	defer func() { <-d.finishes }()
	defer func() {
		d.mu.Lock()
		d.inFlight -= len(bt.msgs)
		d.mu.Unlock()
		select {
		case d.freed <- struct{}{}:
		default:
		}
	}()
	b := d.b
	var acked []*norn.Task
	for i, err := range bt.errs {
		if err == nil {
			acked = append(acked, bt.tasks[i])
		}
	}
	if n := len(bt.tasks) - len(acked); n > 0 {
		// The hold expires and the message is claimed again: Kafka being
		// down thus backs off by the hold time instead of spinning.
		b.log.Warn("publishing due messages failed; they will be retried after the hold time", "count", n, "err", firstErr(bt.errs))
	}
	if len(acked) == 0 {
		return
	}
	if h := b.hooks.beforeComplete; h != nil && !h(acked) {
		return
	}
	b.forget(bt.ctx, d.worker, acked)
}

// forget completes and then deletes acknowledged messages, so the id may be
// scheduled again. Completion is fenced by the lease (a node whose hold
// expired cannot complete); deletion by the version the completion wrote.
func (b *Bridge) forget(ctx context.Context, worker string, tasks []*norn.Task) {
	ops := make([]norn.LeaseOp, len(tasks))
	for i, t := range tasks {
		ops[i] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: t.ID, Worker: worker, Lease: t.Lease}}
	}
	res, err := b.store.LeaseBatch(ctx, ops)
	if err != nil {
		b.log.Warn("completing fired messages failed; they will be fired again after the hold time", "count", len(tasks), "err", err)
		return
	}
	var done []*norn.Task
	for i, r := range res {
		if r.Err != nil {
			// Chronos: another node took the message over (our hold
			// expired) and fired it too; nothing more to do.
			b.log.Warn("fired message was taken over by another node", "id", tasks[i].ID, "err", r.Err)
			continue
		}
		done = append(done, tasks[i])
	}
	if len(done) == 0 {
		return
	}
	txn := norn.Txn{}
	for _, t := range done {
		txn.Delete = append(txn.Delete, t.ID)
		txn.Require = append(txn.Require, norn.Requirement{ID: t.ID, Version: t.Version + 1})
	}
	if _, err := b.store.Transact(ctx, txn); err == nil {
		return
	}
	// Fall back to one at a time with the versions actually stored.
	for _, t := range done {
		cur, err := b.store.Get(ctx, t.ID)
		if err != nil {
			if !errors.Is(err, norn.ErrNotFound) {
				b.log.Warn("deleting a fired message failed; it is replaced when its id comes again", "id", t.ID, "err", err)
			}
			continue
		}
		// Claimed from our queue under our lease: ours, whatever its id
		// (tasks stored before the id prefix are fired too).
		if cur.Queue != b.cfg.Queue || cur.Status != norn.StatusCompleted || cur.Lease != t.Lease {
			continue
		}
		if _, err := b.store.Transact(ctx, norn.Txn{Delete: []string{cur.ID},
			Require: []norn.Requirement{{ID: cur.ID, Version: cur.Version}}}); err != nil && !errors.Is(err, norn.ErrConflict) && !errors.Is(err, norn.ErrNotFound) {
			b.log.Warn("deleting a fired message failed; it is replaced when its id comes again", "id", t.ID, "err", err)
		}
	}
}
