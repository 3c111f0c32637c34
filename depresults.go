package norn

import (
	"encoding/json"
	"fmt"
)

// What a dependent learns of its dependencies: each dependency that ends
// is recorded with the dependent (DependencyResult), so the dependent's
// claim carries the results and errors it needs even after retention
// purged the dependency. A dependency is counted once per dependent: the
// stores count an ending only for a dependency not recorded yet, and a
// later ending of the same dependency (retried after it failed) replaces
// its record without counting again.

// OnDependencyFailure values.
const (
	DependencyAbort = "abort"
	DependencyRun   = "run"
)

// DependencyDeletedStatus is DependencyResult.Status for a dependency
// deleted while the dependent waited.
const DependencyDeletedStatus = "deleted"

// DependencyResult is the outcome of one ended dependency.
type DependencyResult struct {
	ID string `json:"id"`
	// Status is completed, aborted, cancelled or deleted.
	Status string `json:"status"`
	// Result is the dependency's result (completed ones).
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the dependency's last error (failed ones).
	Error *ErrorInfo `json:"error,omitempty"`
}

// ValidateOnDependencyFailure checks an on_dependency_failure value.
func ValidateOnDependencyFailure(field, v string) error {
	switch v {
	case "", DependencyAbort, DependencyRun:
		return nil
	}
	return Invalid(field, "must be %q (the default) or %q, got %q", DependencyAbort, DependencyRun, truncate(v, 40))
}

// RunsOnFailure reports whether n's dependents-side policy is
// DependencyRun.
func (n *NewTask) RunsOnFailure() bool { return n.OnDependencyFailure == DependencyRun }

// dependencyEnded reports whether a dependency in status st counts as met
// for a dependent whose policy is run (true) or abort (false), and
// whether it failed it (abort policy only).
func dependencyEnded(st Status, run bool) (met, fails bool) {
	switch st {
	case StatusCompleted:
		return true, false
	case StatusAborted, StatusCancelled, "":
		if run {
			return true, false
		}
		return false, true
	}
	return false, false
}

// SortDependencyResults orders rs as deps lists them (the order a task
// shows them in), dropping any whose id deps does not name.
func SortDependencyResults(deps []string, rs []DependencyResult) []DependencyResult {
	if len(rs) == 0 {
		return nil
	}
	by := make(map[string]DependencyResult, len(rs))
	for _, r := range rs {
		by[r.ID] = r
	}
	out := make([]DependencyResult, 0, len(rs))
	for _, d := range deps {
		if r, ok := by[d]; ok {
			out = append(out, r)
		}
	}
	return out
}

// NewDependencyResult is the record of dependency id ended in status st
// ("" for deleted) with its result and errors.
func NewDependencyResult(id string, st Status, result json.RawMessage, errs []ErrorInfo) DependencyResult {
	r := DependencyResult{ID: id, Status: string(st)}
	switch {
	case st == "":
		r.Status = DependencyDeletedStatus
	case st == StatusCompleted:
		r.Result = result
	case len(errs) > 0:
		e := errs[len(errs)-1]
		r.Error = &e
	}
	return r
}

// String is for messages.
func (r DependencyResult) String() string { return fmt.Sprintf("%s %s", r.ID, r.Status) }
