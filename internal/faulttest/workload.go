package faulttest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
)

// queue is the one queue the workload uses.
const queue = "fq"

// maxBacklog bounds how many acknowledged tasks may wait uncompleted
// before producers pause.
const maxBacklog = 2000

// Workload drives producers and workers against a set of nodes and records
// what every client was told: the client side of the history the checker
// compares with the store's.
type Workload struct {
	Nodes []*client.Client
	// Lease is every task's timeout (the lease length granted at claim).
	Lease time.Duration
	// CallTimeout bounds every HTTP call: a stopped node answers nothing.
	CallTimeout time.Duration
	// MayLose says the database may lose acknowledged writes (a failover
	// to an asynchronous standby): a completion answered not_found is then
	// the mark of a lost submit, not a finding.
	MayLose bool

	mu        sync.Mutex
	attempted map[string]bool     // ids some producer sent
	acked     map[string]bool     // ids whose submit was acknowledged
	claims    map[string][]uint64 // leases workers were given, per task
	completed map[string][]uint64 // leases whose completion was acknowledged, per task
	ranAgain  map[string][]uint64 // leases handed out after a completion was acknowledged, per task
	errs      []string            // answers no fault explains (capped)
	causes    map[string]int      // 503 answers by cause

	Ops struct {
		Submits, SubmitErrs           atomic.Int64 // acknowledged submit calls, failed ones
		Claims, ClaimErrs             atomic.Int64
		Completes, CompleteErrs       atomic.Int64 // acknowledged completions, failed calls
		LeaseLost, RetriedLeaseLost   atomic.Int64 // first-try lease_lost, lease_lost on a retry (outcome unknown)
		Unavailable, Timeouts, Resets atomic.Int64 // 503s, calls that timed out, other transport errors
		Gone                          atomic.Int64 // completions answered not_found (MayLose)
	}
	lastAck atomic.Int64 // unix nanos of the last acknowledged completion
	gapMu   sync.Mutex
	maxGap  time.Duration // longest time without an acknowledged completion
	gapAt   time.Time
}

// NewWorkload returns a workload over nodes.
func NewWorkload(nodes []*client.Client, lease time.Duration) *Workload {
	return &Workload{
		Nodes: nodes, Lease: lease, CallTimeout: 3 * time.Second,
		attempted: map[string]bool{}, acked: map[string]bool{},
		claims: map[string][]uint64{}, completed: map[string][]uint64{}, ranAgain: map[string][]uint64{},
		causes: map[string]int{},
	}
}

func (w *Workload) unexplained(format string, args ...any) {
	w.mu.Lock()
	if len(w.errs) < 50 {
		w.errs = append(w.errs, fmt.Sprintf(format, args...))
	}
	w.mu.Unlock()
}

// classify counts a failed call and reports whether a fault explains it:
// unavailability, timeouts and broken connections do; anything else is a
// finding.
func (w *Workload) classify(err error) bool {
	var ne *norn.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		w.Ops.Timeouts.Add(1)
	case errors.As(err, &ne) && ne.Code == norn.CodeUnavailable:
		if ne.Err == nil {
			w.Ops.Unavailable.Add(1) // the node answered 503
			c := ne.Cause
			if c == "" { // say what it was instead
				c = "no cause: " + ne.Message
			}
			w.mu.Lock()
			w.causes[c]++
			w.mu.Unlock()
		} else {
			w.Ops.Resets.Add(1) // the client could not reach it
		}
	case errors.As(err, &ne):
		return false
	default:
		w.Ops.Resets.Add(1)
	}
	return true
}

// Produce submits batches of tasks with ids of its own ("p<i>-<n>"), each
// batch retried on the next node until acknowledged, until ctx ends.
func (w *Workload) Produce(ctx context.Context, i, batch int, pause time.Duration) {
	at := i % len(w.Nodes)
	for seq := 0; ctx.Err() == nil; {
		nts := make([]norn.NewTask, batch)
		ids := make([]string, batch)
		for j := range nts {
			ids[j] = fmt.Sprintf("p%d-%06d", i, seq)
			seq++
			nts[j] = norn.NewTask{ID: ids[j], Queue: queue, Spec: []byte(`{}`), Timeout: norn.Duration(w.Lease)}
			if seq%20 == 0 {
				// Some tasks start later, so the monitor always has work
				// (releasing them) even when no lease ever expires and the
				// monitor checks have something to judge.
				nts[j].Delay = norn.Duration(200 * time.Millisecond)
			}
		}
		w.mu.Lock()
		for _, id := range ids {
			w.attempted[id] = true
		}
		w.mu.Unlock()
		for ctx.Err() == nil {
			cctx, cancel := context.WithTimeout(ctx, w.CallTimeout)
			res, err := w.Nodes[at].Submit(cctx, nts...)
			cancel()
			if err == nil {
				w.Ops.Submits.Add(1)
				w.mu.Lock()
				for k, r := range res {
					if r.Task == nil || r.Task.ID != ids[k] {
						w.errs = append(w.errs, fmt.Sprintf("submit %s answered %+v", ids[k], r.Task))
						continue
					}
					w.acked[ids[k]] = true
				}
				w.mu.Unlock()
				break
			}
			w.Ops.SubmitErrs.Add(1)
			if ctx.Err() == nil && !w.classify(err) {
				w.unexplained("submit on node %d: %v", at, err)
			}
			at = (at + 1) % len(w.Nodes)
			time.Sleep(20 * time.Millisecond)
		}
		// Keep the backlog bounded, so the drain after the faults measures
		// recovery, not how far producers outran workers on a loaded machine.
		for ctx.Err() == nil && w.Ops.Submits.Load()*int64(batch)-w.Ops.Completes.Load() > maxBacklog {
			time.Sleep(50 * time.Millisecond)
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}

// Work claims up to n tasks at a time with a long poll, "executes" them
// (records the lease it was given) and completes them, alternately one call
// per task and one LeaseBatch for all, retrying a completion whose outcome
// it did not learn on the next node while the lease lasts. It stops when
// ctx ends.
func (w *Workload) Work(ctx context.Context, i, n int) {
	name := fmt.Sprintf("w%d", i)
	at := i % len(w.Nodes)
	for round := 0; ctx.Err() == nil; round++ {
		cctx, cancel := context.WithTimeout(ctx, w.CallTimeout)
		ts, err := w.Nodes[at].Claim(cctx, norn.ClaimRequest{Worker: name, Queues: []string{queue}, N: n, Wait: norn.Duration(500 * time.Millisecond)})
		cancel()
		if err != nil {
			w.Ops.ClaimErrs.Add(1)
			if ctx.Err() == nil && !w.classify(err) {
				w.unexplained("claim on node %d: %v", at, err)
			}
			at = (at + 1) % len(w.Nodes)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if len(ts) == 0 {
			continue
		}
		w.Ops.Claims.Add(1)
		claimed := time.Now()
		w.mu.Lock()
		for _, t := range ts {
			w.claims[t.ID] = append(w.claims[t.ID], t.Lease)
			if len(w.completed[t.ID]) > 0 {
				w.ranAgain[t.ID] = append(w.ranAgain[t.ID], t.Lease)
			}
		}
		w.mu.Unlock()
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // the work
		refs := make([]norn.LeaseRef, len(ts))
		for k, t := range ts {
			refs[k] = norn.LeaseRef{TaskID: t.ID, Worker: name, Lease: t.Lease}
		}
		if round%2 == 0 {
			for _, ref := range refs {
				at = w.complete(ctx, at, claimed, []norn.LeaseRef{ref}, false)
			}
		} else {
			at = w.complete(ctx, at, claimed, refs, true)
		}
	}
}

// complete finishes refs (one call each, or one LeaseBatch) and retries on
// the next node while the outcome is unknown and the lease may still run.
func (w *Workload) complete(ctx context.Context, at int, claimed time.Time, refs []norn.LeaseRef, batch bool) int {
	for try := 0; ; try++ {
		if ctx.Err() != nil || time.Since(claimed) > w.Lease+w.CallTimeout {
			return at // outcome unknown; the checker decides from the store
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.CallTimeout)
		var errsOut []*norn.Error
		var err error
		if batch {
			ops := make([]norn.LeaseOp, len(refs))
			for k, r := range refs {
				ops[k] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: r}
			}
			var res []norn.LeaseOpResult
			res, err = w.Nodes[at].LeaseBatch(cctx, ops)
			for _, r := range res {
				errsOut = append(errsOut, r.Err)
			}
		} else {
			err = w.Nodes[at].Complete(cctx, refs[0], nil)
			var ne *norn.Error
			if err == nil || (errors.As(err, &ne) && ne.Code == norn.CodeLeaseLost) {
				errsOut = []*norn.Error{ne}
				err = nil
			}
		}
		cancel()
		if err == nil {
			for k, e := range errsOut {
				switch {
				case e == nil:
					w.ack(refs[k])
				case e.Code == norn.CodeLeaseLost && try == 0:
					w.Ops.LeaseLost.Add(1)
				case e.Code == norn.CodeLeaseLost:
					w.Ops.RetriedLeaseLost.Add(1) // an earlier try may have taken effect
				case w.gone(e):
				default:
					w.Ops.CompleteErrs.Add(1)
					w.unexplained("complete %s lease %d: %v", refs[k].TaskID, refs[k].Lease, e)
				}
			}
			return at
		}
		w.Ops.CompleteErrs.Add(1)
		if w.gone(err) {
			return at
		}
		if !w.classify(err) {
			w.unexplained("complete on node %d: %v", at, err)
			return at
		}
		at = (at + 1) % len(w.Nodes)
		time.Sleep(20 * time.Millisecond)
	}
}

// gone reports (and counts) a task the store no longer has, when the
// database may lose acknowledged writes.
func (w *Workload) gone(err error) bool {
	if !w.MayLose || norn.CodeOf(err) != norn.CodeNotFound {
		return false
	}
	w.Ops.Gone.Add(1)
	return true
}

func (w *Workload) ack(ref norn.LeaseRef) {
	w.Ops.Completes.Add(1)
	now := time.Now()
	if prev := w.lastAck.Swap(now.UnixNano()); prev != 0 {
		w.noteGap(now.Sub(time.Unix(0, prev)), now)
	}
	w.mu.Lock()
	w.completed[ref.TaskID] = append(w.completed[ref.TaskID], ref.Lease)
	w.mu.Unlock()
}

func (w *Workload) noteGap(d time.Duration, at time.Time) {
	w.gapMu.Lock()
	if d > w.maxGap {
		w.maxGap, w.gapAt = d, at
	}
	w.gapMu.Unlock()
}

// MaxGap is the longest time without an acknowledged completion and when it ended.
func (w *Workload) MaxGap() (time.Duration, time.Time) {
	w.gapMu.Lock()
	defer w.gapMu.Unlock()
	return w.maxGap, w.gapAt
}

// Causes returns the 503 answers by cause, as "cause ×n" sorted by cause.
func (w *Workload) Causes() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.causes))
	for c, n := range w.causes {
		out = append(out, fmt.Sprintf("%s ×%d", c, n))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
