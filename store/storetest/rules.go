package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// The cases below check rules decided once in package norn that the stores
// once applied each in their own way (norn.Outcome.KeepsOwner,
// norn.CancelEntry, norn.Update.Check, norn.MoveRunAt,
// norn.Requirement.Check, norn.LogAppend.Validate and CheckSeq). Each operation's group calls its function, so
// the cases sit beside the others of that operation.

// failRules: a failed attempt that will be retried leaves no owner, like a
// timeout or a yield (norn.Outcome.KeepsOwner).
func failRules(t *testing.T, setup setupFunc) {
	for _, c := range []struct {
		name   string
		retry  norn.RetryPolicy
		status norn.Status
	}{
		{"RetryLaterLeavesNoOwner", norn.RetryPolicy{MaxRetries: 2, Base: dur(time.Minute)}, norn.StatusScheduled},
		{"RetryAtOnceLeavesNoOwner", norn.RetryPolicy{MaxRetries: 2}, norn.StatusReady},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.fail(b.claimed("w1", norn.NewTask{ID: "f", Queue: "q", Retry: &c.retry}), "boom")
			g := b.status("f", c.status)
			if g.Owner != "" || g.Progress != 0 || g.Attempts != 1 || g.Lease != 1 {
				t.Fatalf("task to retry: %s", canonTask(g))
			}
			if h := lastHistory(t, g, norn.TaskRetry, b.now()); h.Worker != "w1" || h.Lease != 1 {
				t.Fatalf("TaskRetry entry %+v, want worker w1 and lease 1", h)
			}
		})
	}

	t.Run("FailureThatAbortsKeepsTheLastOwner", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.fail(b.claimed("w1", norn.NewTask{ID: "f", Queue: "q", Retry: noRetry}), "boom")
		if g := b.status("f", norn.StatusAborted); g.Owner != "w1" {
			t.Fatalf("aborted task: owner %q, want w1", g.Owner)
		}
	})
}

// cancelRules: the TaskCancel entry names the worker and lease of the
// attempt it ends, and only then (norn.CancelEntry).
func cancelRules(t *testing.T, setup setupFunc) {
	t.Run("EntryOfARunningTaskNamesItsWorkerAndLease", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.claimed("w1", norn.NewTask{ID: "r", Queue: "q"})
		h := lastHistory(t, b.cancel("r"), norn.TaskCancel, b.now())
		if h.Worker != "w1" || h.Lease != 1 {
			t.Fatalf("TaskCancel entry %+v, want worker w1 and lease 1", h)
		}
	})

	t.Run("EntryOfAWaitingTaskNamesNoWorker", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		// Claimed and timed out: the task has a lease number but no attempt
		// running when it is cancelled.
		b.claimed("w1", norn.NewTask{ID: "r", Queue: "q", Timeout: dur(10 * time.Second)})
		b.advance(11 * time.Second)
		b.status("r", norn.StatusReady)
		h := lastHistory(t, b.cancel("r"), norn.TaskCancel, b.now())
		if h.Worker != "" || h.Lease != 0 {
			t.Fatalf("TaskCancel entry %+v, want no worker and no lease", h)
		}
	})
}

// updateRules: a stale if_version is a conflict naming the field
// (norn.Update.Check), and a past run_at is kept as given, as at submit
// (norn.MoveRunAt).
func updateRules(t *testing.T, setup setupFunc) {
	t.Run("StaleIfVersionNamesTheField", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		a := b.submitOne(norn.NewTask{ID: "a", Queue: "q"})
		_, err := s.Update(b.ctx, "a", norn.Update{Priority: ptr(uint32(9)), IfVersion: a.Version + 1})
		wantField(t, "Update with a stale if_version", err, norn.ErrConflict, "if_version")
	})

	t.Run("PastRunAtIsKeptAsGiven", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		t0 := updateDelayed(b)
		past := t0.Add(-time.Hour).Truncate(time.Second)
		u := b.update("s", norn.Update{RunAt: &past})
		if u.Status != norn.StatusReady {
			t.Fatalf("status %s, want ready", u.Status)
		}
		eqTime(t, "run_at moved to the past", u.RunAt, past)
		eqTime(t, "run_at read back", b.get("s").RunAt, past)
	})

	t.Run("ZeroRunAtIsNow", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		updateDelayed(b)
		b.clock.Advance(time.Second)
		u := b.update("s", norn.Update{RunAt: &time.Time{}})
		eqTime(t, "run_at moved to zero", u.RunAt, b.now())
	})
}

// transactRules: a requirement naming a missing task does not hold, a
// conflict like one at another version (norn.Requirement.Check).
func transactRules(t *testing.T, setup setupFunc) {
	t.Run("RequirementsHoldBeforeItsOwnSubmits", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.Transact(b.ctx, norn.Txn{Submit: []norn.NewTask{{ID: "n", Queue: "q"}}, Require: []norn.Requirement{{ID: "n"}}})
		wantField(t, "a requirement of a task the transaction submits", err, norn.ErrConflict, "require[0].id")
		b.gone("n")
	})
	t.Run("RequirementOfAMissingTaskIsAConflictNamingItsID", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "a", Queue: "q"})
		_, err := s.Transact(b.ctx, norn.Txn{
			Require: []norn.Requirement{{ID: "a"}, {ID: "nope"}},
			Cancel:  []string{"a"},
		})
		wantField(t, "Transact requiring a missing task", err, norn.ErrConflict, "require[1].id")
		b.status("a", norn.StatusReady)
	})
}

// logRules: an append needs data, and one naming a sequence number that is
// not next is a conflict naming "seq" (norn.LogAppend.Validate, CheckSeq).
func logRules(t *testing.T, setup setupFunc) {
	t.Run("RefusesAnEntryWithoutData", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := logLogged(b)
		_, err := s.AppendLog(b.ctx, ref(c), norn.LogAppend{})
		wantField(t, "AppendLog without data", err, norn.ErrInvalidArgument, "data")
		b.logLen("l", 3)
	})

	t.Run("SeqThatIsNotNextNamesTheField", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := logLogged(b)
		_, err := s.AppendLog(b.ctx, ref(c), norn.LogAppend{Seq: 9, Data: json.RawMessage(`1`)})
		wantField(t, "AppendLog with seq 9 when 4 is next", err, norn.ErrConflict, "seq")
	})
}
