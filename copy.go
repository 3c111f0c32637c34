package norn

import (
	"context"
	"fmt"
)

// Moving a store's contents to another (norn copy): the source is read
// through the Store interface; the destination takes tasks as they are
// through TaskImporter.

// TaskRecord is a task as it is stored, to be written elsewhere as it is:
// status, lease, attempts, history, errors, result and version included,
// with its update log.
type TaskRecord struct {
	Task *Task      `json:"task"`
	Log  []LogEntry `json:"log,omitempty"`
}

// TaskImporter is implemented by the stores that can take tasks as they
// are (both built-in stores). Imports are idempotent per task, so a copy
// interrupted and run again adds no duplicate: a task whose id exists with
// the same version is skipped, one with another version is ErrConflict
// naming it.
type TaskImporter interface {
	// ImportTasks writes recs and returns how many it wrote (skipped ones
	// not counted). Nothing is published and no claim wakes: the copy's
	// destination is not serving yet.
	ImportTasks(ctx context.Context, recs []TaskRecord) (int, error)
	// ImportBatches writes batches as they are (state, times, callbacks'
	// ids); a batch whose id exists is skipped. It returns how many it
	// wrote. Their members are the imported tasks that name them.
	ImportBatches(ctx context.Context, bs []*Batch) (int, error)
	// FinishImport settles what depends on every task being there: the
	// dependency counts of blocked tasks whose dependencies came later.
	FinishImport(ctx context.Context) error
}

// Validate refuses a record no store could hold, naming it as recs[i].
func (r TaskRecord) Validate(i int) error {
	f := fmt.Sprintf("recs[%d].task", i)
	if r.Task == nil {
		return Invalid(f, "a record needs its task")
	}
	if err := ValidateID(f+".id", r.Task.ID); err != nil {
		return err
	}
	if err := ValidateQueue(f+".queue", r.Task.Queue); err != nil {
		return err
	}
	if !r.Task.Status.Valid() {
		return Invalid(f+".status", "unknown status %q", r.Task.Status)
	}
	return nil
}

// ImportConflict is the error of an import that finds task id stored at
// another version than the record's: the destination holds other data.
func ImportConflict(id string, stored, record uint64) error {
	return Errorf(CodeConflict, "task %q is stored already at version %d, not %d: the destination holds other data", id, stored, record)
}
