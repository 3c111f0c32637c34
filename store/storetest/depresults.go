package storetest

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nornq/norn"
)

// exerciseDependencyResults: a dependent records each dependency's outcome
// as it ends and its claim carries them; with on_dependency_failure run a
// failed dependency counts as ended instead of aborting it.
func exerciseDependencyResults(t *testing.T, setup setupFunc) {
	t.Run("DependencyResults", func(t *testing.T) {
		t.Parallel()
		depResultsCompleted(t, setup)
		depResultsRun(t, setup)
	})
}

// results renders a task's dependency results as "id:status[:result|:error code]".
func results(tk *norn.Task) string {
	var out []string
	for _, r := range tk.DependencyResults {
		s := r.ID + ":" + r.Status
		if r.Result != nil {
			s += ":" + canonJSON(r.Result)
		}
		if r.Error != nil {
			s += ":" + r.Error.Code
		}
		out = append(out, s)
	}
	return fmt.Sprint(out)
}

func wantResults(t *testing.T, what string, tk *norn.Task, want string) {
	t.Helper()
	if got := results(tk); got != want {
		t.Fatalf("%s: dependency results %s, want %s", what, got, want)
	}
}

func depResultsCompleted(t *testing.T, setup setupFunc) {
	t.Run("ClaimCarriesTheResultsInDependsOnOrder", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
			norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"b", "a"}})
		b.complete(b.claimID("w", "a", "q"), `{"x":1}`)
		wantResults(t, "c after a", b.status("c", norn.StatusBlocked), `[a:completed:{"x":1}]`)
		b.complete(b.claimID("w", "b", "q"), "")
		c := b.claimID("w", "c", "q2")
		wantResults(t, "claim of c", c, `[b:completed a:completed:{"x":1}]`)
		page, err := b.s.List(b.ctx, norn.Query{Filter: norn.Filter{Queues: []string{"q2"}}, Summary: true})
		b.must(err, "List")
		if len(page.Tasks) != 1 || page.Tasks[0].DependencyResults != nil {
			t.Fatalf("summary view: %+v, want no dependency results", page.Tasks)
		}
	})

	t.Run("KeptAfterTheDependencyIsGone", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
			norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"a", "b"}})
		b.complete(b.claimID("w", "a", "q"), `"done"`)
		b.delete("a") // as retention would purge it
		b.complete(b.claimID("w", "b", "q"), `[1,2]`)
		wantResults(t, "claim of c", b.claimID("w", "c", "q2"), `[a:completed:"done" b:completed:[1,2]]`)
	})

	t.Run("RecordsDependenciesEndedBeforeTheSubmit", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "p", Queue: "q"})
		b.complete(b.claimID("w", "a", "q"), `{"v":true}`)
		got := b.submitOne(norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"a", "p"}})
		wantResults(t, "submitted c", got, `[a:completed:{"v":true}]`)
		wantResults(t, "stored c", b.get("c"), `[a:completed:{"v":true}]`)
	})

	t.Run("RefusesAnUnknownPolicy", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		_, err := b.s.Submit(b.ctx, norn.NewTask{Queue: "q", OnDependencyFailure: "maybe"})
		wantField(t, "on_dependency_failure maybe", err, norn.ErrInvalidArgument, "tasks[0].on_dependency_failure")
	})
}

func depResultsRun(t *testing.T, setup setupFunc) {
	t.Run("RunPolicyRunsOnceEveryDependencyEnded", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
			norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"a", "b"}, OnDependencyFailure: norn.DependencyRun},
			norn.NewTask{ID: "d", Queue: "q2", DependsOn: []string{"a"}, OnDependencyFailure: norn.DependencyAbort})
		if g := b.get("c"); g.OnDependencyFailure != norn.DependencyRun {
			t.Fatalf("c's on_dependency_failure %q", g.OnDependencyFailure)
		}
		b.abort(b.claimID("w", "a", "q"), "boom")
		lastError(t, b.status("d", norn.StatusAborted), norn.CodeDependencyFailed)
		wantResults(t, "c after a failed", b.status("c", norn.StatusBlocked), `[a:aborted:boom]`)
		b.complete(b.claimID("w", "b", "q"), `{"b":2}`)
		wantResults(t, "claim of c", b.claimID("w", "c", "q2"), `[a:aborted:boom b:completed:{"b":2}]`)
	})

	t.Run("RunPolicyCountsCancelsAndDeletesAsEnded", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
			norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"a", "b"}, OnDependencyFailure: norn.DependencyRun})
		b.cancel("a")
		b.status("c", norn.StatusBlocked)
		b.delete("b")
		wantResults(t, "c", b.status("c", norn.StatusReady), `[a:cancelled b:deleted]`)
	})

	t.Run("RunPolicyAtSubmitCountsFailedDependencies", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"})
		b.abort(b.claimID("w", "a", "q"), "bad")
		b.complete(b.claimID("w", "b", "q"), `1`)
		got := b.submitOne(norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"a", "b"}, OnDependencyFailure: norn.DependencyRun})
		if got.Status != norn.StatusReady {
			t.Fatalf("c submitted %s, want ready", got.Status)
		}
		wantResults(t, "c", b.get("c"), `[a:aborted:bad b:completed:1]`)
	})

	t.Run("RunPolicyFollowsACascade", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"},
			norn.NewTask{ID: "b", Queue: "q2", DependsOn: []string{"a"}},
			norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"b"}, OnDependencyFailure: norn.DependencyRun})
		b.fail(b.claimID("w", "a", "q"), "x")
		b.status("a", norn.StatusScheduled) // retried by default: still pending
		b.cancel("a")
		b.status("b", norn.StatusAborted)
		wantResults(t, "c", b.status("c", norn.StatusReady), `[b:aborted:dependency_failed]`)
	})

	t.Run("ARetriedDependencyIsNotCountedTwice", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "x", Queue: "q"},
			norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"a", "x"}, OnDependencyFailure: norn.DependencyRun})
		b.abort(b.claimID("w", "a", "q"), "first")
		_, err := b.s.Retry(b.ctx, "a", norn.RetryOptions{})
		b.must(err, "Retry a")
		b.complete(b.claimID("w", "a", "q"), `"second"`)
		// c counted a once, when it first ended: still waiting for x.
		wantResults(t, "c", b.status("c", norn.StatusBlocked), `[a:aborted:first]`)
		b.complete(b.claimID("w", "x", "q"), "")
		b.status("c", norn.StatusReady)
	})

	t.Run("ARunTaskRetriedAfterItsDependencyFailedRunsAgain", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"},
			norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"a"}, OnDependencyFailure: norn.DependencyRun},
			norn.NewTask{ID: "d", Queue: "q2", DependsOn: []string{"a"}})
		b.abort(b.claimID("w", "a", "q"), "gone")
		b.abort(b.claimID("w", "c", "q2"), "mine")
		got, err := b.s.Retry(b.ctx, "c", norn.RetryOptions{})
		b.must(err, "Retry c")
		if got.Status != norn.StatusReady {
			t.Fatalf("c retried: %s, want ready", got.Status)
		}
		_, err = b.s.Retry(b.ctx, "d", norn.RetryOptions{})
		wantErr(t, "Retry d (abort policy, dependency failed)", err, norn.ErrConflict)
		raw, _ := json.Marshal(b.get("c").DependencyResults)
		if string(raw) != `[{"id":"a","status":"aborted","error":{"code":"gone"}}]` {
			t.Fatalf("c's dependency results %s", raw)
		}
	})
}
