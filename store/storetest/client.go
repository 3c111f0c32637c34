package storetest

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nornq/norn"
)

func exerciseSubmit(t *testing.T, setup setupFunc) {
	exerciseSubmitSubmit(t, setup)
	exerciseSubmitGetMany(t, setup)
}

func exerciseSubmitSubmit(t *testing.T, setup setupFunc) {
	t.Run("Submit", func(t *testing.T) {
		t.Parallel()
		exerciseSubmitStores(t, setup)
		exerciseSubmitDuplicatesAndRunAt(t, setup)
		exerciseSubmitOrderAndIDs(t, setup)
	})
}

func exerciseSubmitStores(t *testing.T, setup setupFunc) {
	t.Run("StoresAReadyTaskWithEveryDefault", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		now := b.now()
		tk := b.submitOne(norn.NewTask{Queue: "q", Spec: json.RawMessage(`{"b": [1, true], "a": "x"}`),
			Priority: 7, Labels: map[string]string{"tenant": "t1"}})
		if tk.Queue != "q" || tk.Priority != 7 || tk.Status != norn.StatusReady || tk.Progress != 0 {
			t.Fatalf("submitted task: queue %q priority %d status %s progress %v", tk.Queue, tk.Priority, tk.Status, tk.Progress)
		}
		jsonEq(t, "spec", tk.Spec, `{"a":"x","b":[1,true]}`)
		if len(tk.Labels) != 1 || tk.Labels["tenant"] != "t1" {
			t.Fatalf("labels %v", tk.Labels)
		}
		eqTime(t, "created", tk.Created, now)
		eqTime(t, "updated", tk.Updated, now)
		eqTime(t, "run_at of an immediate task", tk.RunAt, now)
		if !tk.Deadline.IsZero() || tk.Owner != "" || tk.Lease != 0 || tk.Attempts != 0 || tk.MaxAttempts != 0 ||
			tk.Retry != nil || tk.Timeout.D() != norn.DefaultTimeout || len(tk.DependsOn) != 0 ||
			len(tk.Result) != 0 || len(tk.Errors) != 0 || len(tk.History) != 0 || tk.HistoryDropped != 0 {
			t.Fatalf("new task has non-default fields: %s", canonTask(tk))
		}
		wantVersion(t, "new task", tk, 1)
		sameTask(t, "Get after Submit", tk, b.get(tk.ID))
	})

	t.Run("KeepsExplicitSettings", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		x := b.submitOne(norn.NewTask{ID: "custom:1", Queue: "q", MaxAttempts: ptr(3),
			Retry: &norn.RetryPolicy{MaxRetries: 2, Base: dur(time.Second), Max: dur(time.Minute)}, Timeout: dur(30 * time.Second)})
		if x.ID != "custom:1" || x.MaxAttempts != 3 || x.Timeout.D() != 30*time.Second || x.Retry == nil ||
			*x.Retry != (norn.RetryPolicy{MaxRetries: 2, Base: dur(time.Second), Max: dur(time.Minute)}) {
			t.Fatalf("explicit settings not kept: %s", canonTask(x))
		}
		if len(x.Spec) != 0 && canonJSON(x.Spec) != "" {
			t.Fatalf("task without spec has spec %s", x.Spec)
		}
	})

	t.Run("GeneratesUUIDv7IDsInSubmissionOrder", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		prev := b.submitOne(norn.NewTask{Queue: "q"}).ID
		if u, err := uuid.Parse(prev); err != nil || u.Version() != 7 {
			t.Fatalf("generated id %q is not a UUIDv7 (err %v)", prev, err)
		}
		for i := 0; i < 5; i++ {
			b.clock.Advance(time.Millisecond)
			id := b.submitOne(norn.NewTask{Queue: "q"}).ID
			if id <= prev {
				t.Fatalf("generated ids not increasing: %q after %q", id, prev)
			}
			prev = id
		}
	})

	t.Run("ReturnsABatchInRequestOrder", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		nts := batchOf("b5", "b1", "b3", "b2", "b4")
		for i, tk := range b.submit(nts...) {
			if tk.ID != nts[i].ID {
				t.Fatalf("Submit result %d is %q, want %q (results in request order)", i, tk.ID, nts[i].ID)
			}
			jsonEq(t, "spec of "+tk.ID, tk.Spec, `"`+tk.ID+`"`)
		}
		b.count(norn.Filter{}, 5)
	})

	t.Run("DuplicateIDReturnsTheExistingTaskAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		a := b.submitOne(norn.NewTask{ID: "dup", Queue: "q", Spec: json.RawMessage(`{"v":1}`), Priority: 1})
		b.clock.Advance(time.Second)
		res, err := s.Submit(b.ctx, norn.NewTask{ID: "dup", Queue: "q", Spec: json.RawMessage(`{"v":2}`), Priority: 9})
		if err != nil {
			t.Fatalf("Submit duplicate: %v", err)
		}
		if len(res) != 1 || !res[0].Duplicate {
			t.Fatalf("Submit duplicate: %+v, want one result flagged Duplicate", res)
		}
		sameTask(t, "duplicate submit returns the existing task", a, res[0].Task)
		sameTask(t, "duplicate submit changes nothing", a, b.get("dup"))
	})
}

func exerciseSubmitDuplicatesAndRunAt(t *testing.T, setup setupFunc) {
	t.Run("BatchWithADuplicateStoresOnlyTheNewTasks", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		a := b.submitOne(norn.NewTask{ID: "dup", Queue: "q", Priority: 1})
		b.clock.Advance(time.Second)
		res, err := s.Submit(b.ctx, norn.NewTask{ID: "fresh", Queue: "q"}, norn.NewTask{ID: "dup", Queue: "q", Priority: 5},
			norn.NewTask{ID: "fresh2", Queue: "q"})
		if err != nil {
			t.Fatalf("Submit mixed batch: %v", err)
		}
		if len(res) != 3 || res[0].Duplicate || !res[1].Duplicate || res[2].Duplicate {
			t.Fatalf("mixed batch duplicate flags wrong: %+v", res)
		}
		if res[0].Task.ID != "fresh" || res[2].Task.ID != "fresh2" {
			t.Fatalf("mixed batch results out of order: %q %q", res[0].Task.ID, res[2].Task.ID)
		}
		sameTask(t, "duplicate in batch", a, res[1].Task)
		sameTask(t, "duplicate in batch changes nothing", a, b.get("dup"))
		b.get("fresh")
		b.get("fresh2")
		b.count(norn.Filter{}, 3)
	})

	t.Run("DuplicateOfARunningTaskReturnsItsCurrentState", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "dup", Queue: "q", Priority: 1}, norn.NewTask{ID: "other", Queue: "q"})
		c := b.claimID("w1", "dup", "q")
		res, err := s.Submit(b.ctx, norn.NewTask{ID: "dup", Queue: "q"})
		if err != nil || len(res) != 1 || !res[0].Duplicate {
			t.Fatalf("Submit duplicate of running task: %+v, %v", res, err)
		}
		sameTask(t, "duplicate of running task", c, res[0].Task)
		b.count(norn.Filter{}, 2)
	})

	t.Run("DelayKeepsATaskScheduledUntilDue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		t0 := b.now()
		d := b.submitOne(norn.NewTask{ID: "delay", Queue: "q", Delay: dur(90 * time.Second)})
		if d.Status != norn.StatusScheduled {
			t.Fatalf("delayed task status %s, want scheduled", d.Status)
		}
		eqTime(t, "run_at of Delay 90s", d.RunAt, t0.Add(90*time.Second))
		b.advance(89 * time.Second)
		b.status("delay", norn.StatusScheduled)
		b.claimNone("q")
		b.advance(2 * time.Second)
		d2 := b.status("delay", norn.StatusReady)
		lastHistory(t, d2, norn.TaskRelease, time.Time{})
		wantVersion(t, "released", d2, d.Version+1)
		b.claimID("w", "delay", "q")
	})

	t.Run("FutureRunAtKeepsATaskScheduledUntilDue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		t0 := b.now()
		r := b.submitOne(norn.NewTask{ID: "runat", Queue: "q", RunAt: t0.Add(time.Hour)})
		if r.Status != norn.StatusScheduled {
			t.Fatalf("run_at task status %s, want scheduled", r.Status)
		}
		eqTime(t, "run_at", r.RunAt, t0.Add(time.Hour))
		b.advance(91 * time.Second)
		b.status("runat", norn.StatusScheduled)
		b.claimNone("q")
		b.advance(time.Hour)
		b.status("runat", norn.StatusReady)
		b.claimID("w", "runat", "q")
	})

	t.Run("PastRunAtMakesATaskReady", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		p := b.submitOne(norn.NewTask{ID: "past", Queue: "q", RunAt: b.now().Add(-time.Hour)})
		if p.Status != norn.StatusReady {
			t.Fatalf("task with past run_at: status %s, want ready", p.Status)
		}
	})
}

func exerciseSubmitOrderAndIDs(t *testing.T, setup setupFunc) {
	t.Run("DelayedTaskIsClaimedAfterOnesReadyBeforeIt", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		t0 := b.now()
		b.submit(norn.NewTask{ID: "delay", Queue: "q", Delay: dur(90 * time.Second)},
			norn.NewTask{ID: "past", Queue: "q", RunAt: t0.Add(-time.Hour)})
		b.advance(91 * time.Second)
		// "past" became ready first, so it is claimed first at equal priority.
		for _, want := range []string{"past", "delay"} {
			b.complete(b.claimID("w", want, "q"), "")
		}
		b.claimNone("q")
	})

	t.Run("NoTasksSucceedsWithNoResults", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		res, err := s.Submit(b.ctx)
		if err != nil {
			t.Fatalf("Submit(): %v, want success", err)
		}
		if len(res) != 0 {
			t.Fatalf("Submit(): %d results, want none", len(res))
		}
		tx, err := s.Transact(b.ctx, norn.Txn{Submit: []norn.NewTask{}})
		if err != nil || len(tx.Submitted) != 0 {
			t.Fatalf("Transact with an empty submit: %+v, %v; want nothing submitted", tx, err)
		}
		if n, err := s.Count(b.ctx, norn.Filter{}); err != nil || n != 0 {
			t.Fatalf("Count = %d, %v; want 0", n, err)
		}
	})

	t.Run("IDTakenInAnotherQueueIsAConflictThatRevealsNothing", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		secret := b.submitOne(norn.NewTask{ID: "invoice-42", Queue: "qb", Spec: json.RawMessage(`{"card":"4111"}`),
			Labels: map[string]string{"tenant": "bee"}})
		before := b.snapshot()
		reveals := func(what string, err error) {
			t.Helper()
			var ne *norn.Error
			if !errors.As(err, &ne) {
				t.Fatalf("%s: %v, want a *norn.Error", what, err)
			}
			for _, s := range []string{"qb", "4111", "bee"} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("%s: error %q reveals %q of the other queue's task", what, err, s)
				}
			}
		}
		_, err := s.Submit(b.ctx, norn.NewTask{ID: "invoice-42", Queue: "qa", Spec: json.RawMessage(`{}`)})
		wantField(t, "Submit into qa", err, norn.ErrConflict, "tasks[0].id")
		reveals("Submit into qa", err)
		// In a batch the collision refuses the whole batch.
		_, err = s.Submit(b.ctx, norn.NewTask{ID: "new-one", Queue: "qa"}, norn.NewTask{ID: "invoice-42", Queue: "qa"})
		wantField(t, "batch into qa", err, norn.ErrConflict, "tasks[1].id")
		reveals("batch into qa", err)
		_, err = s.Transact(b.ctx, norn.Txn{Submit: []norn.NewTask{{ID: "invoice-42", Queue: "qa"}}})
		wantField(t, "transaction into qa", err, norn.ErrConflict, "submit[0].id")
		reveals("transaction into qa", err)
		b.unchanged("submits colliding with another queue's id", before)
		// The same queue still gets the existing task back as a duplicate.
		res, err := s.Submit(b.ctx, norn.NewTask{ID: "invoice-42", Queue: "qb"})
		if err != nil || len(res) != 1 || !res[0].Duplicate {
			t.Fatalf("Submit into qb: %+v, %v; want the duplicate", res, err)
		}
		sameTask(t, "duplicate in the same queue", secret, res[0].Task)
	})
}

func exerciseSubmitGetMany(t *testing.T, setup setupFunc) {
	t.Run("GetMany", func(t *testing.T) {
		t.Parallel()

		t.Run("ReturnsFoundTasksInRequestOrderAndMissingIDs", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			got := b.submit(batchOf("b5", "b1", "b3", "b2", "b4")...)
			found, missing, err := s.GetMany(b.ctx, []string{"b3", "nope", "b1", "nope2", "b5"})
			if err != nil {
				t.Fatalf("GetMany: %v", err)
			}
			eqStrings(t, "GetMany found", ids(found), []string{"b3", "b1", "b5"})
			eqStrings(t, "GetMany missing", missing, []string{"nope", "nope2"})
			sameTask(t, "GetMany b1", got[1], found[1])
		})

		t.Run("AnswersARepeatedIDOnce", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(batchOf("r1", "r2")...)
			found, missing, err := s.GetMany(b.ctx, []string{"r2", "x", "r1", "r2", "x"})
			if err != nil {
				t.Fatalf("GetMany: %v", err)
			}
			eqStrings(t, "GetMany found", ids(found), []string{"r2", "r1"})
			eqStrings(t, "GetMany missing", missing, []string{"x"})
		})

		t.Run("RefusesMoreThanMaxBatchIDs", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			_, _, err := s.GetMany(b.ctx, slices.Repeat([]string{"a"}, norn.MaxBatch+1))
			wantErr(t, "GetMany of too many ids", err, norn.ErrTooLarge)
		})
	})
}

// batchOf returns new tasks in queue q with the given ids, each with its id
// as its spec.
func batchOf(ids ...string) []norn.NewTask {
	var nts []norn.NewTask
	for _, id := range ids {
		nts = append(nts, norn.NewTask{ID: id, Queue: "q", Spec: json.RawMessage(`"` + id + `"`)})
	}
	return nts
}

func exerciseCancel(t *testing.T, setup setupFunc) {
	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		exerciseCancelWaiting(t, setup)
		exerciseCancelRunning(t, setup)
		cancelRules(t, setup)
	})
}

func exerciseCancelWaiting(t *testing.T, setup setupFunc) {
	for _, id := range []string{"ready", "scheduled", "blocked"} {
		t.Run("CancelsA"+title(id)+"Task", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			cancelPending(b)
			before := b.get(id)
			c, err := s.Cancel(b.ctx, id)
			if err != nil {
				t.Fatalf("Cancel(%s): %v", id, err)
			}
			if c.Status != norn.StatusCancelled {
				t.Fatalf("Cancel(%s): status %s", id, c.Status)
			}
			lastHistory(t, c, norn.TaskCancel, b.now())
			wantVersion(t, "cancelled "+id, c, before.Version+1)
			eqTime(t, "updated of cancelled "+id, c.Updated, b.now())
			sameTask(t, "Get after Cancel", c, b.get(id))
		})

		t.Run("CancellingA"+title(id)+"TaskAgainIsANoOp", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			cancelPending(b)
			c, err := s.Cancel(b.ctx, id)
			if err != nil {
				t.Fatalf("Cancel(%s): %v", id, err)
			}
			b.clock.Advance(time.Second)
			again, err := s.Cancel(b.ctx, id)
			if err != nil {
				t.Fatalf("second Cancel(%s): %v", id, err)
			}
			sameTask(t, "second Cancel", c, again)
			sameTask(t, "second Cancel changes nothing", c, b.get(id))
		})
	}

	t.Run("RefusesACompletedOrAbortedTask", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "completed", Queue: "q2"}, norn.NewTask{ID: "aborted", Queue: "q3"})
		b.complete(b.claim("w", "q2"), "")
		b.abort(b.claim("w", "q3"), "bad")
		for _, id := range []string{"completed", "aborted"} {
			before := b.get(id)
			_, err := s.Cancel(b.ctx, id)
			wantErr(t, "Cancel "+id, err, norn.ErrConflict)
			sameTask(t, "failed Cancel changes nothing", before, b.get(id))
		}
	})

	t.Run("CancelledTaskNeverRunsWhenItsDelayOrDependencyIsDone", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		cancelPending(b)
		for _, id := range []string{"ready", "scheduled", "blocked"} {
			if _, err := s.Cancel(b.ctx, id); err != nil {
				t.Fatalf("Cancel(%s): %v", id, err)
			}
		}
		b.complete(b.claim("w", "qd"), "")
		b.advance(2 * time.Minute)
		b.claimNone("q")
		for _, id := range []string{"ready", "scheduled", "blocked"} {
			b.status(id, norn.StatusCancelled)
		}
	})

	t.Run("CancelsARunningTask", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		cancelRunning(b)
		before := b.get("r")
		x, err := s.Cancel(b.ctx, "r")
		if err != nil {
			t.Fatalf("Cancel running: %v", err)
		}
		if x.Status != norn.StatusCancelled {
			t.Fatalf("Cancel running: status %s", x.Status)
		}
		lastHistory(t, x, norn.TaskCancel, b.now())
		wantVersion(t, "cancel running", x, before.Version+1)
	})
}

func exerciseCancelRunning(t *testing.T, setup setupFunc) {
	t.Run("OwnerOfACancelledTaskGetsCancelledOnEveryCall", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		r := ref(cancelRunning(b))
		if _, err := s.Cancel(b.ctx, "r"); err != nil {
			t.Fatalf("Cancel running: %v", err)
		}
		x := b.get("r")
		_, err := s.Heartbeat(b.ctx, r, norn.Heartbeat{})
		wantErr(t, "Heartbeat after cancel", err, norn.ErrCancelled)
		_, err = s.AppendLog(b.ctx, r, norn.LogAppend{Data: json.RawMessage(`1`)})
		wantErr(t, "AppendLog after cancel", err, norn.ErrCancelled)
		wantErr(t, "Complete after cancel", s.Complete(b.ctx, r, json.RawMessage(`"done"`)), norn.ErrCancelled)
		wantErr(t, "Fail after cancel", s.Fail(b.ctx, r, norn.ErrorInfo{Code: "x"}), norn.ErrCancelled)
		wantErr(t, "Abort after cancel", s.Abort(b.ctx, r, norn.ErrorInfo{Code: "x"}), norn.ErrCancelled)
		wantErr(t, "Yield after cancel", s.Yield(b.ctx, r), norn.ErrCancelled)
		res, err := s.LeaseBatch(b.ctx, []norn.LeaseOp{{Op: norn.OpComplete, LeaseRef: r}})
		if err != nil || len(res) != 1 || res[0].Err == nil || res[0].Err.Code != norn.CodeCancelled {
			t.Fatalf("LeaseBatch complete after cancel: %+v, %v; want one cancelled result", res, err)
		}
		sameTask(t, "worker calls after cancel change nothing", x, b.get("r"))
		b.logLen("r", 0)
	})

	t.Run("CancelledRunningTaskStaysCancelledPastItsDeadline", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		cancelRunning(b)
		if _, err := s.Cancel(b.ctx, "r"); err != nil {
			t.Fatalf("Cancel running: %v", err)
		}
		b.settled("r", time.Minute, "q")
	})
}

// running claims a task that has reported progress.
func cancelRunning(b *testBundle) *norn.Task {
	c := b.claimed("w1", norn.NewTask{ID: "r", Queue: "q"})
	b.heartbeat(c, norn.Heartbeat{Progress: ptr(0.5)})
	b.clock.Advance(time.Second)
	return c
}

// pending submits one task in each status Cancel accepts, plus the
// dependency that keeps "blocked" blocked.
func cancelPending(b *testBundle) {
	b.submit(norn.NewTask{ID: "ready", Queue: "q", Priority: 1},
		norn.NewTask{ID: "scheduled", Queue: "q", Delay: dur(time.Minute)},
		norn.NewTask{ID: "dep", Queue: "qd"},
		norn.NewTask{ID: "blocked", Queue: "q", DependsOn: []string{"dep"}})
	b.clock.Advance(time.Second)
}

func exerciseUpdate(t *testing.T, setup setupFunc) {
	t.Run("Update", func(t *testing.T) {
		t.Parallel()
		exerciseUpdateFields(t, setup)
		exerciseUpdateStatusAndRunAt(t, setup)
		updateRules(t, setup)
	})
}

func exerciseUpdateFields(t *testing.T, setup setupFunc) {
	t.Run("ChangesPriorityAndKeepsTheRest", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		a := b.submitOne(norn.NewTask{ID: "a", Queue: "q", Priority: 1, Labels: map[string]string{"x": "1"}})
		b.clock.Advance(time.Second)
		u, err := s.Update(b.ctx, "a", norn.Update{Priority: ptr(uint32(5))})
		if err != nil {
			t.Fatalf("Update priority: %v", err)
		}
		if u.Priority != 5 || u.Labels["x"] != "1" || len(u.Labels) != 1 || u.Status != norn.StatusReady {
			t.Fatalf("Update priority: %s", canonTask(u))
		}
		wantVersion(t, "update", u, a.Version+1)
		eqTime(t, "updated after Update", u.Updated, b.now())
		sameTask(t, "Get after Update", u, b.get("a"))
	})

	t.Run("LabelsReplaceTheOldOnes", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "a", Queue: "q", Labels: map[string]string{"x": "1"}})
		u, err := s.Update(b.ctx, "a", norn.Update{Labels: map[string]string{"y": "2"}})
		if err != nil || len(u.Labels) != 1 || u.Labels["y"] != "2" {
			t.Fatalf("Update labels replaces them: %v, %v", u.Labels, err)
		}
	})

	t.Run("EmptyLabelsClearThem", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "a", Queue: "q", Labels: map[string]string{"x": "1"}})
		u, err := s.Update(b.ctx, "a", norn.Update{Labels: map[string]string{}})
		if err != nil || len(u.Labels) != 0 {
			t.Fatalf("Update with empty labels clears them: %v, %v", u.Labels, err)
		}
	})

	t.Run("RefusesAStaleIfVersion", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "a", Queue: "q"})
		b.update("a", norn.Update{Priority: ptr(uint32(5))})
		before := b.get("a")
		_, err := s.Update(b.ctx, "a", norn.Update{Priority: ptr(uint32(9)), IfVersion: before.Version - 1})
		wantErr(t, "Update with stale if_version", err, norn.ErrConflict)
		sameTask(t, "failed Update changes nothing", before, b.get("a"))
	})

	t.Run("AppliesAtTheCurrentIfVersion", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		before := b.submitOne(norn.NewTask{ID: "a", Queue: "q"})
		u, err := s.Update(b.ctx, "a", norn.Update{Priority: ptr(uint32(9)), IfVersion: before.Version})
		if err != nil || u.Priority != 9 {
			t.Fatalf("Update with current if_version: %v", err)
		}
	})

	t.Run("UpdatesABlockedTask", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "b", Queue: "q"}, norn.NewTask{ID: "blocked", Queue: "q", DependsOn: []string{"b"}})
		bl, err := s.Update(b.ctx, "blocked", norn.Update{Priority: ptr(uint32(7))})
		if err != nil || bl.Priority != 7 || bl.Status != norn.StatusBlocked {
			t.Fatalf("Update blocked task: %v", err)
		}
	})

	t.Run("NewPriorityDecidesTheClaimOrder", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "b", Queue: "q", Priority: 3}, norn.NewTask{ID: "a", Queue: "q", Priority: 1})
		b.update("a", norn.Update{Priority: ptr(uint32(9))})
		b.claimID("w", "a", "q")
	})
}

func exerciseUpdateStatusAndRunAt(t *testing.T, setup setupFunc) {
	for _, tc := range []struct {
		name    string
		arrange func(b *testBundle)
	}{
		{"Running", func(b *testBundle) { b.claim("w", "q") }},
		{"Completed", func(b *testBundle) { b.complete(b.claim("w", "q"), "") }},
		{"Cancelled", func(b *testBundle) { b.cancel("a") }},
	} {
		name, arrange := tc.name, tc.arrange
		t.Run("RefusesA"+name+"Task", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submitOne(norn.NewTask{ID: "a", Queue: "q"})
			arrange(b)
			before := b.get("a")
			_, err := s.Update(b.ctx, "a", norn.Update{Priority: ptr(uint32(1))})
			wantErr(t, "Update "+name+" task", err, norn.ErrConflict)
			sameTask(t, "refused Update changes nothing", before, b.get("a"))
		})
	}

	for _, tc := range []struct {
		name  string
		runAt func(t0 time.Time) time.Time
	}{
		{"PastRunAtMakesAScheduledTaskReady", func(t0 time.Time) time.Time { return t0.Add(-time.Second) }},
		{"ZeroRunAtMakesAScheduledTaskReady", func(time.Time) time.Time { return time.Time{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			t0 := updateDelayed(b)
			b.moveRunAt("s", tc.runAt(t0), norn.StatusReady)
			b.complete(b.claimID("w", "s", "q"), "")
		})
	}

	t.Run("LaterRunAtPostponesAScheduledTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		t0 := updateDelayed(b)
		b.moveRunAt("s", t0.Add(2*time.Hour), norn.StatusScheduled)
		b.advance(61 * time.Minute) // past the original run_at
		b.status("s", norn.StatusScheduled)
		b.claimNone("q")
		b.advance(time.Hour)
		b.status("s", norn.StatusReady)
	})

	t.Run("FutureRunAtMakesAReadyTaskScheduled", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		t0 := updateDelayed(b)
		b.moveRunAt("r", t0.Add(30*time.Minute), norn.StatusScheduled)
		b.claimNone("r")
		b.advance(31 * time.Minute)
		lastHistory(t, b.status("r", norn.StatusReady), norn.TaskRelease, time.Time{})
	})
}

// delayed submits a task due an hour from now and returns that time
// less an hour.
func updateDelayed(b *testBundle) time.Time {
	t0 := b.now()
	b.submit(norn.NewTask{ID: "s", Queue: "q", Delay: dur(time.Hour)}, norn.NewTask{ID: "r", Queue: "r"})
	return t0
}

func exerciseDelete(t *testing.T, setup setupFunc) {
	exerciseDeleteDelete(t, setup)
	exerciseDeleteDeleteMatching(t, setup)
}

func exerciseDeleteDelete(t *testing.T, setup setupFunc) {
	t.Run("Delete", func(t *testing.T) {
		t.Parallel()

		t.Run("RemovesACompletedTaskAndItsLog", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			a := b.claimed("w", norn.NewTask{ID: "a", Queue: "q"})
			b.appendLog(a, `{"step":1}`)
			b.complete(a, `1`)
			if err := s.Delete(b.ctx, "a"); err != nil {
				t.Fatalf("Delete completed: %v", err)
			}
			b.gone("a")
			_, err := s.ReadLog(b.ctx, "a", 0, 0)
			wantErr(t, "ReadLog of deleted task", err, norn.ErrNotFound)
			wantErr(t, "Delete again", s.Delete(b.ctx, "a"), norn.ErrNotFound)
		})

		t.Run("RemovesARunningTaskWhoseOwnerThenFindsItGone", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"})
			a := b.claim("w", "q")
			if err := s.Delete(b.ctx, a.ID); err != nil {
				t.Fatalf("Delete running: %v", err)
			}
			b.gone(a.ID)
			_, err := s.Heartbeat(b.ctx, ref(a), norn.Heartbeat{})
			wantErr(t, "Heartbeat of deleted task", err, norn.ErrNotFound)
			wantErr(t, "Complete of deleted task", s.Complete(b.ctx, ref(a), nil), norn.ErrNotFound)
			b.count(norn.Filter{}, 1)
		})

		t.Run("DeletedReadyTaskIsNotClaimable", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.submitOne(norn.NewTask{ID: "c", Queue: "q"})
			b.delete("c")
			b.claimNone("q")
		})

		t.Run("IDCanBeReusedAfterDelete", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.complete(b.claimed("w", norn.NewTask{ID: "a", Queue: "q"}), "")
			b.delete("a")
			if tk := b.submitOne(norn.NewTask{ID: "a", Queue: "q"}); tk.Status != norn.StatusReady {
				t.Fatalf("resubmitted id after delete: %s", tk.Status)
			}
		})
	})
}

func exerciseDeleteDeleteMatching(t *testing.T, setup setupFunc) {
	t.Run("DeleteMatching", func(t *testing.T) {
		t.Parallel()

		t.Run("RefusesAnEmptyFilter", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			delLabelled(b)
			before := b.snapshot()
			_, err := s.DeleteMatching(b.ctx, norn.Filter{})
			wantErr(t, "DeleteMatching with empty filter", err, norn.ErrInvalidArgument)
			b.unchanged("refused DeleteMatching", before)
		})

		t.Run("RemovesOnlyMatchingQueueAndStatus", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			delLabelled(b)
			n, err := s.DeleteMatching(b.ctx, norn.Filter{Queues: []string{"qa"}, Statuses: []norn.Status{norn.StatusReady}})
			if err != nil || n != 2 {
				t.Fatalf("DeleteMatching qa ready = %d, %v; want 2", n, err)
			}
			b.gone("a2")
			b.gone("a3")
			b.status("a1", norn.StatusCompleted)
			b.count(norn.Filter{}, 3)
		})

		t.Run("RemovesByLabelAndThenNothing", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			delLabelled(b)
			n, err := s.DeleteMatching(b.ctx, norn.Filter{Labels: map[string]string{"k": "v"}})
			if err != nil || n != 2 {
				t.Fatalf("DeleteMatching by label = %d, %v; want 2", n, err)
			}
			b.gone("a1")
			b.gone("b1")
			n, err = s.DeleteMatching(b.ctx, norn.Filter{Labels: map[string]string{"k": "v"}})
			if err != nil || n != 0 {
				t.Fatalf("repeated DeleteMatching = %d, %v; want 0", n, err)
			}
			snap := b.snapshot()
			if len(snap) != 3 || snap["a2"] == "" || snap["a3"] == "" || snap["b2"] == "" {
				t.Fatalf("after DeleteMatching: %v, want a2, a3 and b2", snap)
			}
		})
	})
}

// delLabelled submits tasks in two queues, some labelled k=v, and
// completes a1.
func delLabelled(b *testBundle) {
	b.submit(norn.NewTask{ID: "a1", Queue: "qa", Labels: map[string]string{"k": "v"}},
		norn.NewTask{ID: "a2", Queue: "qa"},
		norn.NewTask{ID: "a3", Queue: "qa"},
		norn.NewTask{ID: "b1", Queue: "qb", Labels: map[string]string{"k": "v"}},
		norn.NewTask{ID: "b2", Queue: "qb"})
	b.complete(b.claim("w", "qa"), "")
}

// moveRunAt updates a task's run_at and asserts the status it then has and,
// if scheduled, that it is due at exactly that time.
func (b *testBundle) moveRunAt(id string, at time.Time, want norn.Status) {
	b.t.Helper()
	u := b.update(id, norn.Update{RunAt: &at})
	if u.Status != want {
		b.t.Fatalf("Update(%q) run_at to %v: status %s, want %s", id, at, u.Status, want)
	}
	if want == norn.StatusScheduled {
		eqTime(b.t, "run_at of "+id, u.RunAt, at)
	}
}

// exerciseUnknownTask checks that every call naming a task by id answers
// not_found when there is no such task (the lease-holder calls are checked
// under Fencing).
func exerciseUnknownTask(t *testing.T, setup setupFunc) {
	t.Run("UnknownTask", func(t *testing.T) {
		t.Parallel()

		for _, tc := range []struct {
			name string
			call func(s norn.Store, b *testBundle) error
		}{
			{"GetIsNotFound", func(s norn.Store, b *testBundle) error { _, err := s.Get(b.ctx, "nope"); return err }},
			{"CancelIsNotFound", func(s norn.Store, b *testBundle) error { _, err := s.Cancel(b.ctx, "nope"); return err }},
			{"UpdateIsNotFound", func(s norn.Store, b *testBundle) error {
				_, err := s.Update(b.ctx, "nope", norn.Update{Priority: ptr(uint32(1))})
				return err
			}},
			{"DeleteIsNotFound", func(s norn.Store, b *testBundle) error { return s.Delete(b.ctx, "nope") }},
			{"ReadLogIsNotFound", func(s norn.Store, b *testBundle) error { _, err := s.ReadLog(b.ctx, "nope", 0, 0); return err }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				s, b := setup(t)
				b.submitOne(norn.NewTask{ID: "other", Queue: "q"})
				before := b.snapshot()
				wantErr(t, tc.name, tc.call(s, b), norn.ErrNotFound)
				b.unchanged(tc.name, before)
			})
		}
	})
}

func exerciseTransact(t *testing.T, setup setupFunc) {
	t.Run("Transact", func(t *testing.T) {
		t.Parallel()
		exerciseTransactApplies(t, setup)
		exerciseTransactRollsBack(t, setup)
		transactRules(t, setup)
	})
}

func exerciseTransactApplies(t *testing.T, setup setupFunc) {
	t.Run("AppliesEveryKindOfOperationAndRequirement", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
			norn.NewTask{ID: "c", Queue: "q"}, norn.NewTask{ID: "d", Queue: "q"})
		a, c := b.get("a"), b.get("c")
		b.clock.Advance(time.Second)
		res, err := s.Transact(b.ctx, norn.Txn{
			Submit: []norn.NewTask{{ID: "n1", Queue: "q", Delay: dur(time.Hour)}, {ID: "a", Queue: "q"}},
			Update: []norn.TxnUpdate{
				{ID: "a", Update: norn.Update{Priority: ptr(uint32(9)), IfVersion: a.Version}},
				{ID: "n1", Update: norn.Update{Labels: map[string]string{"from": "txn"}}},
			},
			Cancel:  []string{"b"},
			Delete:  []string{"d"},
			Require: []norn.Requirement{{ID: "c", Version: c.Version}, {ID: "a"}},
		})
		if err != nil {
			t.Fatalf("Transact: %v", err)
		}
		if len(res.Submitted) != 2 || res.Submitted[0].Task.ID != "n1" || res.Submitted[0].Duplicate ||
			res.Submitted[1].Task.ID != "a" || !res.Submitted[1].Duplicate {
			t.Fatalf("Transact submitted: %+v", res.Submitted)
		}
		if len(res.Updated) != 2 || res.Updated[0].Priority != 9 || res.Updated[1].Labels["from"] != "txn" {
			t.Fatalf("Transact updated: %+v", res.Updated)
		}
		if len(res.Cancelled) != 1 || res.Cancelled[0].ID != "b" || res.Cancelled[0].Status != norn.StatusCancelled {
			t.Fatalf("Transact cancelled: %+v", res.Cancelled)
		}
		if res.Deleted != 1 {
			t.Fatalf("Transact deleted %d, want 1", res.Deleted)
		}
		if g := b.get("a"); g.Priority != 9 {
			t.Fatalf("a priority %d after transaction", g.Priority)
		}
		n1 := b.status("n1", norn.StatusScheduled)
		if n1.Labels["from"] != "txn" {
			t.Fatalf("n1 labels %v", n1.Labels)
		}
		lastHistory(t, b.status("b", norn.StatusCancelled), norn.TaskCancel, b.now())
		b.gone("d")
		sameTask(t, "required task untouched", c, b.get("c"))
	})

	t.Run("SucceedsWithOnlyARequirement", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "c", Queue: "q"})
		if _, err := s.Transact(b.ctx, norn.Txn{Require: []norn.Requirement{{ID: "c"}}}); err != nil {
			t.Fatalf("Transact with only a requirement: %v", err)
		}
	})
}

func exerciseTransactRollsBack(t *testing.T, setup setupFunc) {
	t.Run("RollsBackEveryOperationWhenOneFails", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
			norn.NewTask{ID: "c", Queue: "q"}, norn.NewTask{ID: "run", Queue: "r"}, norn.NewTask{ID: "done", Queue: "d"})
		b.claim("w", "r")
		b.complete(b.claim("w", "d"), "")
		a := b.get("a")
		b.clock.Advance(time.Second)
		before := b.snapshot()
		// Every transaction below has good operations plus one that fails.
		good := func(tx norn.Txn) norn.Txn {
			tx.Submit = append([]norn.NewTask{{ID: "n1", Queue: "q"}, {ID: "n2", Queue: "q", DependsOn: []string{"n1"}}}, tx.Submit...)
			tx.Update = append([]norn.TxnUpdate{{ID: "a", Update: norn.Update{Priority: ptr(uint32(4))}}}, tx.Update...)
			tx.Cancel = append([]string{"b"}, tx.Cancel...)
			tx.Delete = append([]string{"c"}, tx.Delete...)
			return tx
		}
		for _, tc := range []struct {
			name string
			tx   norn.Txn
			want []*norn.Error
		}{
			{"UpdateOfARunningTask", good(norn.Txn{Update: []norn.TxnUpdate{{ID: "run", Update: norn.Update{Priority: ptr(uint32(1))}}}}), []*norn.Error{norn.ErrConflict}},
			{"UpdateWithAStaleIfVersion", good(norn.Txn{Update: []norn.TxnUpdate{{ID: "a", Update: norn.Update{Priority: ptr(uint32(1)), IfVersion: a.Version + 7}}}}), []*norn.Error{norn.ErrConflict}},
			{"UpdateOfAMissingTask", good(norn.Txn{Update: []norn.TxnUpdate{{ID: "nope", Update: norn.Update{Priority: ptr(uint32(1))}}}}), []*norn.Error{norn.ErrNotFound}},
			{"CancelOfACompletedTask", good(norn.Txn{Cancel: []string{"done"}}), []*norn.Error{norn.ErrConflict}},
			{"CancelOfAMissingTask", good(norn.Txn{Cancel: []string{"nope"}}), []*norn.Error{norn.ErrNotFound}},
			{"DeleteOfAMissingTask", good(norn.Txn{Delete: []string{"nope"}}), []*norn.Error{norn.ErrNotFound}},
			{"InvalidSubmit", good(norn.Txn{Submit: []norn.NewTask{{ID: "n3", Queue: "bad queue"}}}), []*norn.Error{norn.ErrInvalidArgument}},
			{"SubmitWithAMissingDependency", good(norn.Txn{Submit: []norn.NewTask{{ID: "n3", Queue: "q", DependsOn: []string{"nope"}}}}), []*norn.Error{norn.ErrInvalidArgument}},
			{"RequirementAtAWrongVersion", good(norn.Txn{Require: []norn.Requirement{{ID: "a", Version: a.Version + 1}}}), []*norn.Error{norn.ErrConflict}},
			{"RequirementOfAMissingTask", good(norn.Txn{Require: []norn.Requirement{{ID: "nope"}}}), []*norn.Error{norn.ErrConflict}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b := b.with(t)
				_, err := s.Transact(b.ctx, tc.tx)
				wantErrOneOf(t, "Transact with "+tc.name, err, tc.want...)
				b.unchanged("Transact with "+tc.name, before)
			})
		}
		// Nothing leaked into claims either.
		b.claimID("w", "a", "q")
	})

	t.Run("InvalidSubmitNamesItsPlaceInTheTransaction", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		before := b.snapshot()
		_, err := s.Transact(b.ctx, norn.Txn{Submit: []norn.NewTask{{ID: "ok", Queue: "q"}, {Queue: "bad queue"}}})
		wantField(t, "Transact invalid submit", err, norn.ErrInvalidArgument, "submit[1].queue")
		b.unchanged("Transact invalid submit", before)
	})
}

func exerciseClose(t *testing.T, setup setupFunc) {
	t.Run("Close", func(t *testing.T) {
		t.Parallel()

		t.Run("OnlyAClosedStoreAnswersErrClosed", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submitOne(norn.NewTask{ID: "x", Queue: "q"})
			if _, err := s.Get(b.ctx, "missing"); errors.Is(err, norn.ErrClosed) {
				t.Fatalf("not found on an open store matches ErrClosed: %v", err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			_, err := s.Get(b.ctx, "x")
			if !errors.Is(err, norn.ErrClosed) || !errors.Is(err, norn.ErrUnavailable) {
				t.Fatalf("Get after Close: %v, want an error matching ErrClosed and ErrUnavailable", err)
			}
			_, err = s.Submit(b.ctx, norn.NewTask{Queue: "q"})
			wantErr(t, "Submit after Close", err, norn.ErrClosed)
		})
	})
}
