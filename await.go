package norn

import (
	"context"
	"fmt"
	"maps"
)

// Await: a running task spawns children and waits for them. Its owner
// submits the children and, in the same transaction, the task's lease
// ends without counting an attempt and the task waits (blocked) for the
// children as for dependencies: they join its depends_on, their outcomes
// are recorded with it (DependencyResult), and once every child ended it
// is ready again and its next claim carries their results. A task may
// await again from a later attempt (a fan-out in stages); each stage's
// children add to the same depends_on.

// LabelParent is the label Norn puts on each child of an await: the id of
// the task that awaits it.
const LabelParent = "norn.parent"

// On child failure values.
const (
	ChildFailureAbort    = "abort"
	ChildFailureContinue = "continue"
)

// AwaitRequest is what a task's owner sends to await children.
type AwaitRequest struct {
	Tasks []NewTask `json:"tasks"`
	// OnChildFailure: ChildFailureAbort (default, "") aborts the task with
	// dependency_failed when a child fails; ChildFailureContinue makes it
	// ready once every child ended, whatever the outcome.
	OnChildFailure string `json:"on_child_failure,omitempty"`
}

// AwaitResult is the answer to Await: the task as it now is and the
// children's submit results, in request order.
type AwaitResult struct {
	Task     *Task       `json:"task"`
	Children []Submitted `json:"children"`
}

// Awaiter is implemented by every store and the HTTP client.
type Awaiter interface {
	// Await submits the children and makes the task ref holds wait for
	// them, atomically (see AwaitRequest).
	Await(ctx context.Context, ref LeaseRef, req AwaitRequest) (*AwaitResult, error)
}

// Validate checks an await request for a task that lists deps
// dependencies already.
func (a *AwaitRequest) Validate(deps int) error {
	switch a.OnChildFailure {
	case "", ChildFailureAbort, ChildFailureContinue:
	default:
		return Invalid("on_child_failure", "must be %q (the default) or %q, got %q", ChildFailureAbort, ChildFailureContinue, truncate(a.OnChildFailure, 40))
	}
	if len(a.Tasks) == 0 {
		return Invalid("tasks", "an await needs at least one child task")
	}
	if deps+len(a.Tasks) > MaxDependencies {
		return Invalid("tasks", "the task would wait for %d tasks, more than the limit of %d", deps+len(a.Tasks), MaxDependencies)
	}
	for i := range a.Tasks {
		field := fmt.Sprintf("tasks[%d].labels", i)
		if _, ok := a.Tasks[i].Labels[LabelParent]; ok {
			return Invalid(field, "label %q is set by Norn on a child", LabelParent)
		}
		if len(a.Tasks[i].Labels) >= MaxLabels {
			return Invalid(field, "has %d labels; a child may have at most %d (Norn adds %s)", len(a.Tasks[i].Labels), MaxLabels-1, LabelParent)
		}
	}
	return ValidateBatch("tasks", a.Tasks)
}

// ChildTasks are the children of an await by parent as submitted: each
// labelled with its parent (LabelParent), so a child can be told from the
// dependencies the parent was submitted with.
func ChildTasks(parent string, tasks []NewTask) []NewTask {
	out := make([]NewTask, len(tasks))
	for i, t := range tasks {
		t.Labels = maps.Clone(t.Labels)
		if t.Labels == nil {
			t.Labels = map[string]string{}
		}
		t.Labels[LabelParent] = parent
		out[i] = t
	}
	return out
}

// Awaited is the state AfterAwait decides for a task whose children were
// just submitted.
type Awaited struct {
	// Status is blocked (children pending), ready (every child ended
	// already) or aborted (a child had failed and on_child_failure is
	// abort; Error says which).
	Status Status
	// DependsOn is the task's dependencies with the new children.
	DependsOn []string
	// PendingDeps counts the children still pending.
	PendingDeps int
	// EndedDeps are the children that had ended already (their outcomes
	// are recorded with the task).
	EndedDeps []string
	// Run is the task's new on_dependency_failure (true: run).
	Run   bool
	Error *ErrorInfo
}

// AfterAwait decides what awaiting children (ids, as submitted: an id may
// repeat or name a task that existed) does to a running task t; status
// reports each child's status now. The caller gives the attempt back, ends
// the lease keeping the owner and lease number, and records a TaskAwait
// entry (a TaskAbort with Error when aborted).
func AfterAwait(t *Task, ids []string, onChildFailure string, status func(id string) Status) Awaited {
	a := Awaited{Run: onChildFailure == ChildFailureContinue, DependsOn: append([]string(nil), t.DependsOn...)}
	seen := make(map[string]bool, len(t.DependsOn)+len(ids))
	for _, d := range t.DependsOn {
		seen[d] = true
	}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		a.DependsOn = append(a.DependsOn, id)
		st := status(id)
		switch met, fails := dependencyEnded(st, a.Run); {
		case fails && a.Error == nil:
			e := DependencyFailed(id, st)
			a.Error = &e
		case met:
			a.EndedDeps = append(a.EndedDeps, id)
		case !fails:
			a.PendingDeps++
		}
	}
	switch {
	case a.Error != nil:
		a.Status, a.PendingDeps, a.EndedDeps = StatusAborted, 0, nil
	case a.PendingDeps > 0:
		a.Status = StatusBlocked
	default:
		a.Status = StatusReady
	}
	return a
}
