package kafka

import (
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornq/norn"
)

// memStore is a small in-memory norn.Store with just the calls the bridge
// makes, following the contract's semantics (leases, attempts, versions,
// timeouts). It lets the bridge's tests inject store outages; the
// embedded store is exercised by the same tests through newStore.
type memStore struct {
	norn.Store // nil: any call the bridge does not make panics

	mu      sync.Mutex
	tasks   map[string]*norn.Task
	workers int
	// down makes every call fail with unavailable while set.
	down atomic.Bool
}

func newMemStore() *memStore { return &memStore{tasks: map[string]*norn.Task{}} }

func (s *memStore) Close() error { return nil }

func (s *memStore) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.down.Load() {
		return norn.Unavailable(context.DeadlineExceeded)
	}
	return nil
}

func (s *memStore) RegisterWorker(ctx context.Context, _ norn.WorkerInfo) (string, error) {
	if err := s.check(ctx); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers++
	return "worker-" + strconv.Itoa(s.workers), nil
}

func (s *memStore) Submit(ctx context.Context, tasks ...norn.NewTask) ([]norn.Submitted, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	if err := norn.ValidateBatch("tasks", tasks); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]norn.Submitted, len(tasks))
	for i, n := range tasks {
		if t, ok := s.tasks[n.ID]; ok {
			out[i] = norn.Submitted{Task: t.Clone(), Duplicate: true}
			continue
		}
		t := &norn.Task{ID: n.ID, Queue: n.Queue, Spec: n.Spec, RunAt: n.RunAt, Created: now, Updated: now,
			Timeout: n.Timeout, Status: norn.InitialStatus(n.RunAt, now, false), Version: 1}
		s.tasks[n.ID] = t
		out[i] = norn.Submitted{Task: t.Clone()}
	}
	return out, nil
}

func (s *memStore) Get(ctx context.Context, id string) (*norn.Task, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		return nil, norn.NotFound(id)
	}
	return t.Clone(), nil
}

func (s *memStore) GetMany(ctx context.Context, ids []string) ([]*norn.Task, []string, error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var found []*norn.Task
	var missing []string
	for _, id := range ids {
		if t, ok := s.tasks[id]; ok {
			found = append(found, t.Clone())
		} else {
			missing = append(missing, id)
		}
	}
	return found, missing, nil
}

// sweepLocked releases due delays and times out expired leases.
func (s *memStore) sweepLocked(now time.Time) (rep norn.SweepReport) {
	for _, t := range s.tasks {
		switch {
		case t.Status == norn.StatusScheduled && !t.RunAt.After(now):
			t.Status, t.Version = norn.StatusReady, t.Version+1
			rep.Released++
		case t.Status == norn.StatusRunning && t.Deadline.Before(now):
			t.Status, t.Owner, t.RunAt, t.Version = norn.StatusReady, "", now, t.Version+1
			rep.TimedOut++
		}
	}
	return rep
}

func (s *memStore) Sweep(ctx context.Context) (norn.SweepReport, error) {
	if err := s.check(ctx); err != nil {
		return norn.SweepReport{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweepLocked(time.Now()), nil
}

func (s *memStore) Claim(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	until := time.Now().Add(req.Wait.D())
	for {
		if err := s.check(ctx); err != nil {
			return nil, err
		}
		s.mu.Lock()
		now := time.Now()
		s.sweepLocked(now)
		var ready []*norn.Task
		for _, t := range s.tasks {
			if t.Status == norn.StatusReady && t.Queue == req.Queues[0] {
				ready = append(ready, t)
			}
		}
		sort.Slice(ready, func(i, j int) bool { return ready[i].RunAt.Before(ready[j].RunAt) })
		if len(ready) > req.N {
			ready = ready[:req.N]
		}
		out := make([]*norn.Task, len(ready))
		for i, t := range ready {
			t.Status, t.Owner, t.Lease, t.Attempts = norn.StatusRunning, req.Worker, t.Lease+1, t.Attempts+1
			t.Deadline, t.Version = now.Add(req.Timeout.D()), t.Version+1
			out[i] = t.Clone()
		}
		s.mu.Unlock()
		if len(out) > 0 || !time.Now().Before(until) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (s *memStore) leaseOp(ref norn.LeaseRef, status norn.Status) *norn.Error {
	t, ok := s.tasks[ref.TaskID]
	if !ok {
		return norn.NotFound(ref.TaskID)
	}
	if t.Status != norn.StatusRunning || t.Lease != ref.Lease || t.Owner != ref.Worker {
		return norn.LeaseLost(ref.TaskID, ref.Lease)
	}
	t.Status, t.Version = status, t.Version+1
	return nil
}

func (s *memStore) LeaseBatch(ctx context.Context, ops []norn.LeaseOp) ([]norn.LeaseOpResult, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]norn.LeaseOpResult, len(ops))
	for i, op := range ops {
		out[i].Err = s.leaseOp(op.LeaseRef, norn.StatusCompleted)
	}
	return out, nil
}

func (s *memStore) Abort(ctx context.Context, ref norn.LeaseRef, _ norn.ErrorInfo) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.leaseOp(ref, norn.StatusAborted); e != nil {
		return e
	}
	return nil
}

func (s *memStore) Complete(ctx context.Context, ref norn.LeaseRef, _ json.RawMessage) error {
	res, err := s.LeaseBatch(ctx, []norn.LeaseOp{{Op: norn.OpComplete, LeaseRef: ref}})
	if err != nil {
		return err
	}
	if res[0].Err != nil {
		return res[0].Err
	}
	return nil
}

func (s *memStore) Transact(ctx context.Context, tx norn.Txn) (*norn.TxnResult, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range tx.Require {
		t, ok := s.tasks[r.ID]
		if !ok || (r.Version > 0 && t.Version != r.Version) {
			return nil, norn.Errorf(norn.CodeConflict, "requirement on %q failed", r.ID)
		}
	}
	res := &norn.TxnResult{}
	for _, id := range tx.Delete {
		if _, ok := s.tasks[id]; ok {
			delete(s.tasks, id)
			res.Deleted++
		}
	}
	return res, nil
}

func (s *memStore) Count(ctx context.Context, f norn.Filter) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, t := range s.tasks {
		if f.Match(t) {
			n++
		}
	}
	return n, nil
}

func (s *memStore) DeleteMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id, t := range s.tasks {
		if f.Match(t) {
			delete(s.tasks, id)
			n++
		}
	}
	return n, nil
}
