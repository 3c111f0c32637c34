package norn

import (
	"fmt"
	"time"
)

// The decisions of a submission: what a NewTask becomes when it is first
// stored. Every store calls these, so a task submitted to the embedded
// store and one submitted to Postgres start in the same state; the stores
// only look up what exists and persist the outcome.

// Initial is the first stored state of a new task, as decided by
// NewTask.Initial. Fields not here start at their zero value (lease 0,
// attempts 0, progress 0) and Version at 1.
type Initial struct {
	Status Status
	// RunAt is when the task may first run (submission time unless delayed).
	RunAt       time.Time
	Timeout     Duration
	MaxRuntime  Duration
	MaxAttempts int
	// Retry is a copy the store may keep (nil: DefaultRetry applies).
	Retry *RetryPolicy
	// ExpiresAt is the task's expiry (zero: none).
	ExpiresAt time.Time
	// PendingDeps counts the dependencies that have not ended yet
	// (completed, or with OnDependencyFailure run ended at all); the task
	// is blocked until they have.
	PendingDeps int
	// EndedDeps are the dependencies that had ended already: the store
	// records their outcomes with the task (DependencyResult).
	EndedDeps []string
	// Error is set when a dependency had already failed: the task starts
	// aborted with this error and a TaskAbort history entry carrying it.
	Error *ErrorInfo
}

// Initial decides the first state of n, submitted at now to a queue with
// defaults qd. dep reports the status of each dependency, which must exist
// (stored, or inserted earlier in the same batch: see OrderBatch). Fields
// of n left zero take the queue's defaults, and the queue's zero timeout
// DefaultTimeout. The max runtime is fixed here, at submission: changing
// the queue's default later does not change tasks already submitted.
func (n *NewTask) Initial(now time.Time, qd *QueueDefaults, dep func(id string) Status) Initial {
	in := Initial{Timeout: n.Timeout, MaxRuntime: n.MaxRuntime, MaxAttempts: qd.MaxAttempts}
	if in.MaxRuntime <= 0 {
		in.MaxRuntime = qd.MaxRuntime
	}
	if in.Timeout <= 0 {
		in.Timeout = qd.Timeout
	}
	if in.Timeout <= 0 {
		in.Timeout = Duration(DefaultTimeout)
	}
	if n.MaxAttempts != nil {
		in.MaxAttempts = *n.MaxAttempts
	}
	if r := n.Retry; r != nil || qd.Retry != nil {
		if r == nil {
			r = qd.Retry
		}
		c := *r
		in.Retry = &c
	}
	in.RunAt = n.firstRun(now)
	in.ExpiresAt = n.expiry(now)
	if in.ExpiresAt.IsZero() && qd.ExpireIn > 0 {
		in.ExpiresAt = in.RunAt.Add(qd.ExpireIn.D()).UTC()
	}
	for _, d := range n.DependsOn {
		st := dep(d)
		switch met, fails := dependencyEnded(st, n.RunsOnFailure()); {
		case fails:
			e := DependencyFailed(d, st)
			in.Status, in.PendingDeps, in.Error, in.EndedDeps = StatusAborted, 0, &e, nil
			return in
		case met:
			in.EndedDeps = append(in.EndedDeps, d)
		default:
			in.PendingDeps++
		}
	}
	in.Status = InitialStatus(in.RunAt, now, in.PendingDeps > 0)
	return in
}

// DependencyFailed is the error recorded by a task aborted because its
// dependency id ended as fate (aborted or cancelled); DependencyDeleted
// when the dependency was deleted while the task waited.
func DependencyFailed(id string, fate Status) ErrorInfo {
	return ErrorInfo{Code: CodeDependencyFailed, Description: "dependency " + id + " is " + string(fate)}
}

// DependencyDeleted is the error recorded by a task aborted because its
// dependency id was deleted while the task waited for it.
func DependencyDeleted(id string) ErrorInfo {
	return ErrorInfo{Code: CodeDependencyFailed, Description: "dependency " + id + " was deleted"}
}

// OrderBatch checks the dependencies of a validated batch and returns the
// order in which to insert its new tasks: each after the new tasks of the
// batch it depends on. ids are the batch's ids (generated where the caller
// gave none); dup[i] marks tasks whose id exists already (returned as
// duplicates, not inserted; nil when none is); stored reports whether an id
// exists in the store. A dependency must be a new task of the batch or a
// stored task; a cycle among new tasks is refused. Errors name the field
// under prefix ("tasks[2].depends_on[0]").
func OrderBatch(prefix string, tasks []NewTask, ids []string, dup []bool, stored func(id string) bool) ([]int, error) {
	isDup := func(i int) bool { return dup != nil && dup[i] }
	hasDeps := false
	for i := range tasks {
		if len(tasks[i].DependsOn) > 0 {
			hasDeps = true
			break
		}
	}
	order := make([]int, 0, len(tasks))
	if !hasDeps {
		for i := range tasks {
			if !isDup(i) {
				order = append(order, i)
			}
		}
		return order, nil
	}
	inBatch := make(map[string]int, len(tasks))
	for i, id := range ids {
		if !isDup(i) {
			inBatch[id] = i
		}
	}
	// Kahn's algorithm over the edges between new tasks; what is left
	// unordered lies on or behind a cycle.
	indeg := make([]int, len(tasks))
	children := map[int][]int{}
	for i := range tasks {
		if isDup(i) {
			continue
		}
		for j, d := range tasks[i].DependsOn {
			if k, ok := inBatch[d]; ok {
				indeg[i]++
				children[k] = append(children[k], i)
				continue
			}
			if !stored(d) {
				return nil, Invalid(fmt.Sprintf("%s[%d].depends_on[%d]", prefix, i, j), "dependency %q does not exist", d)
			}
		}
	}
	for i := range tasks {
		if !isDup(i) && indeg[i] == 0 {
			order = append(order, i)
		}
	}
	for n := 0; n < len(order); n++ {
		for _, c := range children[order[n]] {
			if indeg[c]--; indeg[c] == 0 {
				order = append(order, c)
			}
		}
	}
	for i := range tasks {
		if isDup(i) || indeg[i] == 0 {
			continue
		}
		for j, d := range tasks[i].DependsOn {
			if k, ok := inBatch[d]; ok && indeg[k] > 0 {
				return nil, Invalid(fmt.Sprintf("%s[%d].depends_on[%d]", prefix, i, j), "dependency cycle through %q", d)
			}
		}
	}
	return order, nil
}

// Validate checks a worker registration: a name of at most 256 bytes and
// at most 1000 valid queue names.
func (w *WorkerInfo) Validate() error {
	if len(w.Name) > MaxWorkerNameLength {
		return Invalid("name", "is longer than %d bytes", MaxWorkerNameLength)
	}
	if len(w.Queues) > MaxWorkerQueues {
		return Invalid("queues", "has more than %d queues", MaxWorkerQueues)
	}
	for i, q := range w.Queues {
		if err := ValidateQueue(fmt.Sprintf("queues[%d]", i), q); err != nil {
			return err
		}
	}
	return nil
}
