package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func exerciseDependencies(t *testing.T, setup setupFunc) {
	t.Run("Dependencies", func(t *testing.T) {
		t.Parallel()
		exerciseDependenciesRelease(t, setup)
		exerciseDependenciesFailure(t, setup)
		exerciseDependenciesErrorsAndDelays(t, setup)
	})
}

func exerciseDependenciesRelease(t *testing.T, setup setupFunc) {
	t.Run("ChainReleasesOneTaskAtATime", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		// Forward references within a batch are allowed.
		got := b.submit(norn.NewTask{ID: "c", Queue: "q", DependsOn: []string{"b"}},
			norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}},
			norn.NewTask{ID: "a", Queue: "q"})
		if got[0].Status != norn.StatusBlocked || got[1].Status != norn.StatusBlocked || got[2].Status != norn.StatusReady {
			t.Fatalf("chain statuses %s %s %s, want blocked blocked ready", got[0].Status, got[1].Status, got[2].Status)
		}
		eqStrings(t, "depends_on of b", got[1].DependsOn, []string{"a"})
		ts := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
		eqStrings(t, "claimable in a chain", ids(ts), []string{"a"})
		b.clock.Advance(time.Second)
		b0 := b.get("b")
		b.complete(ts[0], "")
		b.sweep()
		bt := b.status("b", norn.StatusReady)
		lastHistory(t, bt, norn.TaskRelease, b.now())
		wantVersion(t, "released b", bt, b0.Version+1)
		b.status("c", norn.StatusBlocked)
		bc := b.claimID("w", "b", "q")
		b.claimNone("q")
		b.complete(bc, "")
		b.sweep()
		lastHistory(t, b.status("c", norn.StatusReady), norn.TaskRelease, time.Time{})
		b.claimID("w", "c", "q")
	})

	t.Run("DiamondWaitsForEveryDependency", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"},
			norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}},
			norn.NewTask{ID: "c", Queue: "q", DependsOn: []string{"a"}},
			norn.NewTask{ID: "d", Queue: "q", DependsOn: []string{"b", "c"}},
			norn.NewTask{ID: "x", Queue: "other", DependsOn: []string{"a"}})
		b.complete(b.claim("w", "q"), "")
		b.sweep()
		b.status("b", norn.StatusReady)
		b.status("c", norn.StatusReady)
		b.status("x", norn.StatusReady)
		b.status("d", norn.StatusBlocked)
		ts := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
		eqStrings(t, "claimable after a", ids(ts), []string{"b", "c"})
		b.complete(ts[0], "")
		b.sweep()
		b.status("d", norn.StatusBlocked)
		b.claimNone("q")
		b.complete(ts[1], "")
		b.sweep()
		lastHistory(t, b.status("d", norn.StatusReady), norn.TaskRelease, time.Time{})
	})

	t.Run("RefusesAMissingDependency", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "x", Queue: "q"})
		before := b.snapshot()
		_, err := s.Submit(b.ctx, norn.NewTask{ID: "n1", Queue: "q"}, norn.NewTask{ID: "n2", Queue: "q", DependsOn: []string{"x", "nope"}})
		wantField(t, "missing dependency", err, norn.ErrInvalidArgument, "tasks[1].depends_on[1]")
		b.unchanged("missing dependency", before)
	})

	t.Run("RefusesASelfDependency", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "x", Queue: "q"})
		before := b.snapshot()
		_, err := s.Submit(b.ctx, norn.NewTask{ID: "n1", Queue: "q", DependsOn: []string{"n1"}})
		wantField(t, "self dependency", err, norn.ErrInvalidArgument, "tasks[0].depends_on[0]")
		b.unchanged("self dependency", before)
	})
}

func exerciseDependenciesFailure(t *testing.T, setup setupFunc) {
	for _, tc := range []struct {
		name  string
		batch []norn.NewTask
	}{
		{"RefusesATwoTaskCycle", []norn.NewTask{{ID: "p", Queue: "q", DependsOn: []string{"r"}}, {ID: "r", Queue: "q", DependsOn: []string{"p"}}}},
		{"RefusesAThreeTaskCycle", []norn.NewTask{{ID: "p", Queue: "q", DependsOn: []string{"x", "r"}}, {ID: "r", Queue: "q", DependsOn: []string{"s"}},
			{ID: "s", Queue: "q", DependsOn: []string{"p"}}, {ID: "ok", Queue: "q"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submitOne(norn.NewTask{ID: "x", Queue: "q"})
			before := b.snapshot()
			_, err := s.Submit(b.ctx, tc.batch...)
			wantErr(t, tc.name, err, norn.ErrInvalidArgument)
			if fe := fieldOf(err); !strings.HasPrefix(fe, "tasks[") || !strings.Contains(fe, "depends_on") {
				t.Fatalf("%s: error field %q, want tasks[i].depends_on[j]", tc.name, fe)
			}
			b.unchanged(tc.name, before)
		})
	}

	t.Run("CompletedDependencyIsAlreadyMet", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "c", Queue: "q2"})
		b.complete(b.claim("w", "q"), "")
		bt := b.submitOne(norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}})
		if bt.Status != norn.StatusReady {
			t.Fatalf("task depending on a completed task: %s, want ready", bt.Status)
		}
		eqStrings(t, "depends_on", bt.DependsOn, []string{"a"})
		b2 := b.submitOne(norn.NewTask{ID: "b2", Queue: "q", DependsOn: []string{"a", "c"}})
		if b2.Status != norn.StatusBlocked {
			t.Fatalf("task depending on a completed and a ready task: %s, want blocked", b2.Status)
		}
		b.claimID("w", "b", "q")
		b.complete(b.claim("w", "q2"), "")
		b.sweep()
		b.status("b2", norn.StatusReady)
	})

	t.Run("FailureCascadesTransitively", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		depsFailing(b)
		for _, id := range []string{"a2", "a3", "a4", "c2", "c3", "d2", "f2"} {
			tk := b.status(id, norn.StatusAborted)
			lastError(t, tk, norn.CodeDependencyFailed)
			h := lastHistory(t, tk, norn.TaskAbort, time.Time{})
			if h.Error == nil || h.Error.Code != norn.CodeDependencyFailed {
				t.Fatalf("task %q: TaskAbort entry error %+v, want code %s", id, h.Error, norn.CodeDependencyFailed)
			}
		}
		b.status("ok", norn.StatusReady)
		b.claimID("w", "ok", "q")
		b.claimNone("q")
	})

	t.Run("NewTaskOnAFailedDependencyFailsAtOnce", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		depsFailing(b)
		for _, dep := range []string{"a1", "c1"} {
			tk := b.submitOne(norn.NewTask{Queue: "q", DependsOn: []string{dep}})
			if tk.Status != norn.StatusAborted {
				t.Fatalf("task depending on %s (failed): %s, want aborted", dep, tk.Status)
			}
			lastError(t, tk, norn.CodeDependencyFailed)
		}
	})
}

func exerciseDependenciesErrorsAndDelays(t *testing.T, setup setupFunc) {
	t.Run("FailureNamesTheDependencyAndItsFate", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(
			norn.NewTask{ID: "ab", Queue: "qa"}, norn.NewTask{ID: "ca", Queue: "q"}, norn.NewTask{ID: "de", Queue: "q"},
			norn.NewTask{ID: "on-ab", Queue: "q", DependsOn: []string{"ab"}},
			norn.NewTask{ID: "on-ca", Queue: "q", DependsOn: []string{"ca"}},
			norn.NewTask{ID: "on-de", Queue: "q", DependsOn: []string{"de"}},
			norn.NewTask{ID: "on-on-ab", Queue: "q", DependsOn: []string{"on-ab"}},
		)
		b.abort(b.claim("w", "qa"), "boom")
		b.cancel("ca")
		b.delete("de")
		b.sweep()
		want := map[string]norn.ErrorInfo{
			"on-ab":    norn.DependencyFailed("ab", norn.StatusAborted),
			"on-ca":    norn.DependencyFailed("ca", norn.StatusCancelled),
			"on-de":    norn.DependencyDeleted("de"),
			"on-on-ab": norn.DependencyFailed("on-ab", norn.StatusAborted),
		}
		// Depending on a task that has already failed aborts at submit.
		late := b.submit(norn.NewTask{ID: "late-ab", Queue: "q", DependsOn: []string{"ab"}},
			norn.NewTask{ID: "late-ca", Queue: "q", DependsOn: []string{"ca"}})
		for _, tk := range late {
			if tk.Status != norn.StatusAborted {
				t.Fatalf("%s: status %s at submit, want aborted", tk.ID, tk.Status)
			}
		}
		want["late-ab"] = norn.DependencyFailed("ab", norn.StatusAborted)
		want["late-ca"] = norn.DependencyFailed("ca", norn.StatusCancelled)
		for id, w := range want {
			tk := b.status(id, norn.StatusAborted)
			if len(tk.Errors) != 1 || tk.Errors[0].Code != w.Code || tk.Errors[0].Description != w.Description {
				t.Errorf("%s: errors %+v, want [%+v]", id, tk.Errors, w)
			}
			h := lastHistory(t, tk, norn.TaskAbort, tk.Updated)
			if h.Error == nil || h.Error.Code != w.Code || h.Error.Description != w.Description {
				t.Errorf("%s: TaskAbort entry error %+v, want %+v", id, h.Error, w)
			}
		}
	})

	t.Run("DelayCountsFromSubmitNotFromRelease", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "qa"},
			norn.NewTask{ID: "late", Queue: "q", DependsOn: []string{"a"}, Delay: dur(time.Hour)},
			norn.NewTask{ID: "soon", Queue: "q", DependsOn: []string{"a"}, Delay: dur(5 * time.Minute)})
		b.status("late", norn.StatusBlocked)
		b.advance(10 * time.Minute)
		b.status("soon", norn.StatusBlocked)
		b.complete(b.claim("w", "qa"), "")
		b.sweep()
		b.status("soon", norn.StatusReady)
		b.status("late", norn.StatusScheduled)
		b.claimID("w", "soon", "q")
		b.claimNone("q")
		b.advance(49 * time.Minute)
		b.status("late", norn.StatusScheduled)
		b.advance(2 * time.Minute)
		lastHistory(t, b.status("late", norn.StatusReady), norn.TaskRelease, time.Time{})
	})
}

// failing holds a dependency chain under each way a dependency can
// fail: aborted (a1), cancelled while scheduled (c1), deleted (d1)
// and failed without retries (f1).
func depsFailing(b *testBundle) {
	b.submit(
		norn.NewTask{ID: "a1", Queue: "qa"}, norn.NewTask{ID: "ok", Queue: "q"},
		norn.NewTask{ID: "a2", Queue: "q", DependsOn: []string{"a1"}},
		norn.NewTask{ID: "a3", Queue: "q", DependsOn: []string{"a2"}},
		norn.NewTask{ID: "a4", Queue: "q", DependsOn: []string{"ok", "a1"}},
		norn.NewTask{ID: "c1", Queue: "q", Delay: dur(time.Hour)},
		norn.NewTask{ID: "c2", Queue: "q", DependsOn: []string{"c1"}},
		norn.NewTask{ID: "c3", Queue: "q", DependsOn: []string{"c2"}},
		norn.NewTask{ID: "d1", Queue: "qd"},
		norn.NewTask{ID: "d2", Queue: "q", DependsOn: []string{"d1"}},
		norn.NewTask{ID: "f1", Queue: "qf", Retry: noRetry},
		norn.NewTask{ID: "f2", Queue: "q", DependsOn: []string{"f1"}},
	)
	b.abort(b.claim("w", "qa"), "boom")
	b.cancel("c1")
	b.delete("d1")
	b.fail(b.claim("w", "qf"), "boom")
	b.status("f1", norn.StatusAborted)
	b.sweep()
}

func fieldOf(err error) string {
	var ne *norn.Error
	if errors.As(err, &ne) {
		return ne.Field
	}
	return ""
}
