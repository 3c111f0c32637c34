package norn

import (
	"slices"
	"time"
)

// Debounce: a submission with a unique key and OnDuplicate DuplicateReplace
// replaces the task holding the key instead of being dropped. The
// decisions below are every store's.
//
//   - A holder that has not started (scheduled, blocked or ready, and never
//     claimed) is replaced in place: its spec, labels and priority become
//     the submission's, and its run_at the submission's (RunAt, or now plus
//     Delay, or now), capped at DebounceMax after the holder was first
//     submitted. Its id stays, its version goes up, its history records
//     TaskReplace, and the answer says Replaced.
//   - A holder that is running, or has run and waits for a retry, is not
//     touched: the submission becomes its successor, a new task that waits
//     for the holder to end (whatever the outcome) and takes the unique
//     key from it. A later replace finds the successor holding the key and,
//     as it has not started, replaces it in place: a holder has at most one
//     pending successor.
//   - A holder that ended (a duplicate only through UniqueFor) stays as it
//     is: the submission is a plain duplicate.

// OnDuplicate values (NewTask.OnDuplicate).
const (
	// DuplicateKeep (the default, "") answers the holder unchanged.
	DuplicateKeep = "keep"
	// DuplicateReplace replaces a holder that has not started, or queues
	// a successor to one that has.
	DuplicateReplace = "replace"
)

// TaskReplace: a submission with on_duplicate replace replaced the task's
// spec, labels, priority and run time.
const TaskReplace HistoryType = "TaskReplace"

// ReplaceKind says what a replacing submission does to the holder.
type ReplaceKind int

// ReplaceKinds.
const (
	// ReplaceNone: a plain duplicate (the holder ended, or the
	// submission does not replace).
	ReplaceNone ReplaceKind = iota
	// ReplaceInPlace: the holder takes the submission's spec, labels,
	// priority and run time.
	ReplaceInPlace
	// ReplaceSuccessor: the submission is inserted as the holder's
	// successor (NewTask.Successor).
	ReplaceSuccessor
)

// Replacement is the decision of NewTask.Replace.
type Replacement struct {
	Kind ReplaceKind
	// Status and RunAt are the holder's after an in-place replace.
	Status Status
	RunAt  time.Time
}

// Replace decides what n, a duplicate by unique key of holder h, does to
// h at now.
func (n *NewTask) Replace(h *Task, now time.Time) Replacement {
	if n.OnDuplicate != DuplicateReplace || h.Status.Terminal() {
		return Replacement{}
	}
	switch h.Status {
	case StatusScheduled, StatusBlocked, StatusReady:
		if h.Attempts == 0 {
			at := n.firstRun(now)
			if n.DebounceMax > 0 {
				if limit := h.Created.Add(n.DebounceMax.D()); at.After(limit) {
					at = limit
				}
			}
			st, at := MoveRunAt(h.Status, at, now)
			return Replacement{Kind: ReplaceInPlace, Status: st, RunAt: at.UTC()}
		}
	}
	return Replacement{Kind: ReplaceSuccessor}
}

// Successor is n as the successor of holder: it also waits for holder, and
// runs whatever holder's outcome.
func (n *NewTask) Successor(holder string) NewTask {
	c := *n
	c.DependsOn = append(slices.Clone(n.DependsOn), holder)
	c.OnDependencyFailure = DependencyRun
	return c
}

// validateDebounce checks on_duplicate and debounce_max.
func (n *NewTask) validateDebounce() error {
	switch n.OnDuplicate {
	case "", DuplicateKeep:
	case DuplicateReplace:
		if n.UniqueKey == "" {
			return Invalid("on_duplicate", "replace needs a unique_key")
		}
		if n.SequenceKey != "" {
			return Invalid("on_duplicate", "replace cannot be combined with sequence_key")
		}
	default:
		return Invalid("on_duplicate", "must be %q or %q, not %q", DuplicateKeep, DuplicateReplace, n.OnDuplicate)
	}
	if err := ValidateDuration("debounce_max", n.DebounceMax); err != nil {
		return err
	}
	if n.DebounceMax > 0 && n.OnDuplicate != DuplicateReplace {
		return Invalid("debounce_max", "needs on_duplicate replace")
	}
	return nil
}
