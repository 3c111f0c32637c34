package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nornq/norn"
)

// exerciseDecisions holds the cases where the stores once decided differently
// (each made a decision of its own that now lives in package norn) and the
// rules about ids and input every store applies alike.
func exerciseDecisions(t *testing.T, setup setupFunc) {
	t.Run("Decisions", func(t *testing.T) {
		t.Parallel()
		exerciseDecisionsCases(t, func(t *testing.T) *testBundle {
			t.Parallel()
			_, b := setup(t)
			return b
		})
	})
}

func exerciseDecisionsCases(t *testing.T, fresh func(*testing.T) *testBundle) {
	t.Run("SubmitOfNoTasksSucceedsWithNoResults", func(t *testing.T) {
		e := fresh(t)
		res, err := e.s.Submit(e.ctx)
		if err != nil {
			t.Fatalf("Submit(): %v, want success", err)
		}
		if len(res) != 0 {
			t.Fatalf("Submit(): %d results, want none", len(res))
		}
		tx, err := e.s.Transact(e.ctx, norn.Txn{Submit: []norn.NewTask{}})
		if err != nil || len(tx.Submitted) != 0 {
			t.Fatalf("Transact with an empty submit: %+v, %v; want nothing submitted", tx, err)
		}
		if n, err := e.s.Count(e.ctx, norn.Filter{}); err != nil || n != 0 {
			t.Fatalf("Count = %d, %v; want 0", n, err)
		}
	})

	t.Run("RegisterWorkerRejectsInvalidQueueNames", func(t *testing.T) {
		e := fresh(t)
		_, err := e.s.RegisterWorker(e.ctx, norn.WorkerInfo{Name: "w", Queues: []string{"ok", "no spaces"}})
		wantField(t, "RegisterWorker with a bad queue", err, norn.ErrInvalidArgument, "queues[1]")
		_, err = e.s.RegisterWorker(e.ctx, norn.WorkerInfo{Name: strings.Repeat("n", norn.MaxWorkerNameLength+1)})
		wantField(t, "RegisterWorker with a long name", err, norn.ErrInvalidArgument, "name")
		ws, err := e.s.Workers(e.ctx)
		if err != nil || len(ws) != 0 {
			t.Fatalf("Workers after refused registrations: %+v, %v; want none", ws, err)
		}
	})

	t.Run("DependencyFailedNamesTheDependencyAndItsFate", func(t *testing.T) {
		e := fresh(t)
		e.submit(
			norn.NewTask{ID: "ab", Queue: "qa"}, norn.NewTask{ID: "ca", Queue: "q"}, norn.NewTask{ID: "de", Queue: "q"},
			norn.NewTask{ID: "on-ab", Queue: "q", DependsOn: []string{"ab"}},
			norn.NewTask{ID: "on-ca", Queue: "q", DependsOn: []string{"ca"}},
			norn.NewTask{ID: "on-de", Queue: "q", DependsOn: []string{"de"}},
			norn.NewTask{ID: "on-on-ab", Queue: "q", DependsOn: []string{"on-ab"}},
		)
		if err := e.s.Abort(e.ctx, ref(e.claim("w", "qa")), norn.ErrorInfo{Code: "boom"}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Cancel(e.ctx, "ca"); err != nil {
			t.Fatal(err)
		}
		if err := e.s.Delete(e.ctx, "de"); err != nil {
			t.Fatal(err)
		}
		e.sweep()
		want := map[string]norn.ErrorInfo{
			"on-ab":    norn.DependencyFailed("ab", norn.StatusAborted),
			"on-ca":    norn.DependencyFailed("ca", norn.StatusCancelled),
			"on-de":    norn.DependencyDeleted("de"),
			"on-on-ab": norn.DependencyFailed("on-ab", norn.StatusAborted),
		}
		// Depending on a task that has already failed aborts at submit.
		late := e.submit(norn.NewTask{ID: "late-ab", Queue: "q", DependsOn: []string{"ab"}},
			norn.NewTask{ID: "late-ca", Queue: "q", DependsOn: []string{"ca"}})
		for _, tk := range late {
			if tk.Status != norn.StatusAborted {
				t.Fatalf("%s: status %s at submit, want aborted", tk.ID, tk.Status)
			}
		}
		want["late-ab"] = norn.DependencyFailed("ab", norn.StatusAborted)
		want["late-ca"] = norn.DependencyFailed("ca", norn.StatusCancelled)
		for id, w := range want {
			tk := e.status(id, norn.StatusAborted)
			if len(tk.Errors) != 1 || tk.Errors[0].Code != w.Code || tk.Errors[0].Description != w.Description {
				t.Errorf("%s: errors %+v, want [%+v]", id, tk.Errors, w)
			}
			h := lastHistory(t, tk, norn.TaskAbort, tk.Updated)
			if h.Error == nil || h.Error.Code != w.Code || h.Error.Description != w.Description {
				t.Errorf("%s: TaskAbort entry error %+v, want %+v", id, h.Error, w)
			}
		}
	})

	t.Run("SubmitOfAnIDTakenInAnotherQueueIsAConflictThatRevealsNothing", func(t *testing.T) {
		e := fresh(t)
		secret := e.submitOne(norn.NewTask{ID: "invoice-42", Queue: "qb", Spec: json.RawMessage(`{"card":"4111"}`),
			Labels: map[string]string{"tenant": "bee"}})
		before := e.snapshot()
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
		_, err := e.s.Submit(e.ctx, norn.NewTask{ID: "invoice-42", Queue: "qa", Spec: json.RawMessage(`{}`)})
		wantField(t, "Submit into qa", err, norn.ErrConflict, "tasks[0].id")
		reveals("Submit into qa", err)
		// In a batch the collision refuses the whole batch.
		_, err = e.s.Submit(e.ctx, norn.NewTask{ID: "new-one", Queue: "qa"}, norn.NewTask{ID: "invoice-42", Queue: "qa"})
		wantField(t, "batch into qa", err, norn.ErrConflict, "tasks[1].id")
		reveals("batch into qa", err)
		_, err = e.s.Transact(e.ctx, norn.Txn{Submit: []norn.NewTask{{ID: "invoice-42", Queue: "qa"}}})
		wantField(t, "transaction into qa", err, norn.ErrConflict, "submit[0].id")
		reveals("transaction into qa", err)
		e.unchanged("submits colliding with another queue's id", before)
		// The same queue still gets the existing task back as a duplicate.
		res, err := e.s.Submit(e.ctx, norn.NewTask{ID: "invoice-42", Queue: "qb"})
		if err != nil || len(res) != 1 || !res[0].Duplicate {
			t.Fatalf("Submit into qb: %+v, %v; want the duplicate", res, err)
		}
		sameTask(t, "duplicate in the same queue", secret, res[0].Task)
	})

	t.Run("InvalidUTF8IsRejectedNamingTheField", func(t *testing.T) {
		e := fresh(t)
		bad := json.RawMessage("{\"name\":\"\xff\xfe\"}")
		if !json.Valid(bad) {
			t.Fatal("test input must be valid JSON apart from its UTF-8")
		}
		_, err := e.s.Submit(e.ctx, norn.NewTask{Queue: "q"}, norn.NewTask{Queue: "q", Spec: bad})
		wantField(t, "Submit with a non-UTF-8 spec", err, norn.ErrInvalidArgument, "tasks[1].spec")
		_, err = e.s.Transact(e.ctx, norn.Txn{Submit: []norn.NewTask{{Queue: "q", Spec: bad}}})
		wantField(t, "Transact with a non-UTF-8 spec", err, norn.ErrInvalidArgument, "submit[0].spec")
		if n, err := e.s.Count(e.ctx, norn.Filter{}); err != nil || n != 0 {
			t.Fatalf("Count = %d, %v; want 0 (nothing stored)", n, err)
		}
		tk := e.submitOne(norn.NewTask{Queue: "q"})
		c := e.claim("w", "q")
		_, err = e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Data: bad})
		wantField(t, "AppendLog with non-UTF-8 data", err, norn.ErrInvalidArgument, "data")
		wantField(t, "Complete with a non-UTF-8 result", e.s.Complete(e.ctx, ref(c), bad), norn.ErrInvalidArgument, "result")
		if got := e.status(tk.ID, norn.StatusRunning); bytes.Contains(got.Result, []byte{0xff}) {
			t.Fatalf("result stored: %q", got.Result)
		}
	})
}
