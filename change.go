package norn

import (
	"fmt"
	"time"
)

// The decisions below are what a client's change to an existing task does
// (Update, Cancel, a transaction's requirements), made here so that every
// store answers the same call with the same state and the same error.

// Check decides whether a transaction's requirement holds for the task it
// names: exists says whether that task exists, version is its version. A
// requirement that does not hold is a conflict naming "id" (no such task)
// or "version"; the caller prefixes the requirement's position.
func (r Requirement) Check(exists bool, version uint64) error {
	if !exists {
		e := Errorf(CodeConflict, "required task %q does not exist", r.ID)
		e.Field = "id"
		return e
	}
	if r.Version != 0 && version != r.Version {
		e := Errorf(CodeConflict, "required task %q is at version %d, not %d", r.ID, version, r.Version)
		e.Field = "version"
		return e
	}
	return nil
}

// CheckCancel decides what Cancel does to task id in status s: nothing
// when it is already cancelled (already is true, the call succeeds), a
// conflict when it completed or aborted, and otherwise the store cancels it.
func CheckCancel(id string, s Status) (already bool, err error) {
	switch s {
	case StatusCancelled:
		return true, nil
	case StatusCompleted, StatusAborted:
		return false, Errorf(CodeConflict, "task %q is %s and cannot be cancelled", id, s)
	}
	return false, nil
}

// CancelEntry is the history entry a cancel records for a task in status
// s: it names the worker and lease of a running task, whose attempt the
// cancel ends, and no worker for a task that was waiting (its owner and
// lease, if any, belong to an attempt that had already ended).
func CancelEntry(s Status, owner string, lease uint64) HistoryEntry {
	if s != StatusRunning {
		return HistoryEntry{Type: TaskCancel}
	}
	return HistoryEntry{Type: TaskCancel, Worker: owner, Lease: lease}
}

// Check decides whether u may change task id, at version and in status s:
// a conflict naming "if_version" when u expects another version, and one
// naming the status when the task is running or has ended.
func (u *Update) Check(id string, version uint64, s Status) error {
	if u.IfVersion != 0 && u.IfVersion != version {
		e := Errorf(CodeConflict, "task %q is at version %d, not %d", id, version, u.IfVersion)
		e.Field = "if_version"
		return e
	}
	switch s {
	case StatusScheduled, StatusBlocked, StatusReady:
		return nil
	}
	return Errorf(CodeConflict, "task %q is %s; only scheduled, blocked or ready tasks can be updated", id, s)
}

// MoveRunAt decides the status and run_at of a waiting task in status s
// when an update moves its run_at to at. A zero at means now. A time not
// after now keeps its value, as a submitted past run_at does, and makes a
// scheduled task ready; a later time makes a ready task scheduled until
// then. A blocked task stays blocked: its dependencies decide when it runs.
func MoveRunAt(s Status, at, now time.Time) (Status, time.Time) {
	if at.IsZero() {
		at = now
	}
	switch {
	case s == StatusScheduled && !at.After(now):
		s = StatusReady
	case s == StatusReady && at.After(now):
		s = StatusScheduled
	}
	return s, at
}

// Validate checks a transaction before a store takes any lock: every
// submitted task, every id, every update and requirement, and the number of
// operations, which both stores cap at MaxBatch.
func (t *Txn) Validate() error {
	if err := ValidateBatch("submit", t.Submit); err != nil {
		return err
	}
	for i := range t.Update {
		f := fmt.Sprintf("update[%d]", i)
		if err := ValidateID(f+".id", t.Update[i].ID); err != nil {
			return err
		}
		if err := t.Update[i].Update.Validate(); err != nil {
			return WithFieldPrefix(err, f)
		}
	}
	for _, ids := range []struct {
		field string
		ids   []string
	}{{"cancel", t.Cancel}, {"delete", t.Delete}} {
		for i, id := range ids.ids {
			if err := ValidateID(fmt.Sprintf("%s[%d]", ids.field, i), id); err != nil {
				return err
			}
		}
	}
	for i, r := range t.Require {
		if err := ValidateID(fmt.Sprintf("require[%d].id", i), r.ID); err != nil {
			return err
		}
		if err := r.ValidateRange(fmt.Sprintf("require[%d]", i)); err != nil {
			return err
		}
	}
	if n := t.Ops(); n > MaxBatch {
		return TooLarge("txn", "transaction has %d operations, more than the limit of %d", n, MaxBatch)
	}
	return nil
}

// Ops is how many operations the transaction holds.
func (t *Txn) Ops() int {
	return len(t.Submit) + len(t.Update) + len(t.Cancel) + len(t.Delete) + len(t.Require)
}
