package storetest

import (
	"testing"

	"github.com/nornq/norn"
)

// exerciseAwait: a running task submits children and waits for them,
// its attempt given back; once they ended it runs again with their
// results.
func exerciseAwait(t *testing.T, setup setupFunc) {
	t.Run("Await", func(t *testing.T) {
		t.Parallel()
		awaitRuns(t, setup)
		awaitRefusals(t, setup)
	})
}

func (b *testBundle) await(tk *norn.Task, req norn.AwaitRequest) *norn.AwaitResult {
	b.t.Helper()
	out, err := b.s.Await(b.ctx, ref(tk), req)
	b.must(err, "Await(%s)", tk.ID)
	return out
}

func awaitRuns(t *testing.T, setup setupFunc) {
	t.Run("ChildrenRunThenTheParentWithTheirResults", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		p := b.claimed("w", norn.NewTask{ID: "p", Queue: "q"})
		out := b.await(p, norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "c1", Queue: "kids"}, {ID: "c2", Queue: "kids", Spec: []byte(`{"n":2}`)}}})
		if out.Task.Status != norn.StatusBlocked || out.Task.Attempts != 0 || len(out.Children) != 2 || out.Children[1].Task.ID != "c2" {
			t.Fatalf("await answered %+v", out)
		}
		eqStrings(t, "depends_on", out.Task.DependsOn, []string{"c1", "c2"})
		if g := b.get("c2"); g.Labels[norn.LabelParent] != "p" {
			t.Fatalf("child labels %v, want %s=p", g.Labels, norn.LabelParent)
		}
		lastHistory(t, b.get("p"), norn.TaskAwait, b.now())
		err := b.s.Complete(b.ctx, ref(p), nil)
		wantErr(t, "Complete with the lease the await ended", err, norn.ErrLeaseLost)
		b.complete(b.claimID("w", "c1", "kids"), `"one"`)
		b.status("p", norn.StatusBlocked)
		b.complete(b.claimID("w", "c2", "kids"), `"two"`)
		again := b.claimID("w", "p", "q")
		if again.Attempts != 1 || again.Lease != p.Lease+1 {
			t.Fatalf("parent claimed again: attempts %d lease %d, want 1 and %d", again.Attempts, again.Lease, p.Lease+1)
		}
		wantResults(t, "parent's claim", again, `[c1:completed:"one" c2:completed:"two"]`)
	})

	t.Run("AbortsTheParentWhenAChildFails", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		p := b.claimed("w", norn.NewTask{ID: "p", Queue: "q"})
		b.await(p, norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "c1", Queue: "kids"}, {ID: "c2", Queue: "kids"}}})
		b.abort(b.claimID("w", "c1", "kids"), "bad")
		lastError(t, b.status("p", norn.StatusAborted), norn.CodeDependencyFailed)
	})

	t.Run("ContinueRunsTheParentAfterAFailedChild", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		p := b.claimed("w", norn.NewTask{ID: "p", Queue: "q"})
		b.await(p, norn.AwaitRequest{OnChildFailure: norn.ChildFailureContinue,
			Tasks: []norn.NewTask{{ID: "c1", Queue: "kids"}, {ID: "c2", Queue: "kids"}}})
		b.abort(b.claimID("w", "c1", "kids"), "bad")
		b.complete(b.claimID("w", "c2", "kids"), `2`)
		wantResults(t, "parent", b.claimID("w", "p", "q"), `[c1:aborted:bad c2:completed:2]`)
	})

	t.Run("AwaitsAgainFromALaterAttempt", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "dep", Queue: "q"})
		b.complete(b.claimID("w", "dep", "q"), `0`)
		b.submit(norn.NewTask{ID: "p", Queue: "q", DependsOn: []string{"dep"}})
		p := b.claimID("w", "p", "q")
		b.await(p, norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "a", Queue: "kids"}}})
		b.complete(b.claimID("w", "a", "kids"), `1`)
		p = b.claimID("w", "p", "q")
		b.await(p, norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "b", Queue: "kids"}}})
		b.complete(b.claimID("w", "b", "kids"), `2`)
		p = b.claimID("w", "p", "q")
		eqStrings(t, "depends_on", p.DependsOn, []string{"dep", "a", "b"})
		wantResults(t, "third claim", p, `[dep:completed:0 a:completed:1 b:completed:2]`)
		b.complete(p, "")
	})

	t.Run("ChildrenEndedAlreadyDoNotWait", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "x", Queue: "kids"})
		b.complete(b.claimID("w", "x", "kids"), `"x"`)
		p := b.claimed("w", norn.NewTask{ID: "p", Queue: "q"})
		out := b.await(p, norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "x", Queue: "kids"}}})
		if !out.Children[0].Duplicate || out.Task.Status != norn.StatusReady {
			t.Fatalf("await of an ended child: %+v", out)
		}
		wantResults(t, "parent", b.claimID("w", "p", "q"), `[x:completed:"x"]`)
	})
}

func awaitRefusals(t *testing.T, setup setupFunc) {
	t.Run("RefusesWithoutALiveLeaseAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		p := b.claimed("w", norn.NewTask{ID: "p", Queue: "q"})
		stale := ref(p)
		stale.Lease++
		_, err := b.s.Await(b.ctx, stale, norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "c", Queue: "kids"}}})
		wantErr(t, "Await with a wrong lease", err, norn.ErrLeaseLost)
		b.gone("c")
		b.status("p", norn.StatusRunning)
		_, err = b.s.Await(b.ctx, norn.LeaseRef{TaskID: "none", Worker: p.Owner, Lease: 1}, norn.AwaitRequest{Tasks: []norn.NewTask{{Queue: "kids"}}})
		wantErr(t, "Await of a missing task", err, norn.ErrNotFound)
	})

	t.Run("RefusesInvalidRequestsAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		p := b.claimed("w", norn.NewTask{ID: "p", Queue: "q"})
		for _, c := range []struct {
			name  string
			req   norn.AwaitRequest
			field string
		}{
			{"no children", norn.AwaitRequest{}, "tasks"},
			{"bad child", norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "c", Queue: "kids"}, {Queue: ""}}}, "tasks[1].queue"},
			{"bad policy", norn.AwaitRequest{OnChildFailure: "ignore", Tasks: []norn.NewTask{{Queue: "kids"}}}, "on_child_failure"},
			{"unknown dependency", norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "c", Queue: "kids", DependsOn: []string{"nope"}}}}, "tasks[0].depends_on[0]"},
			{"Norn's label", norn.AwaitRequest{Tasks: []norn.NewTask{{Queue: "kids", Labels: map[string]string{norn.LabelParent: "x"}}}}, "tasks[0].labels"},
		} {
			_, err := b.s.Await(b.ctx, ref(p), c.req)
			wantField(t, c.name, err, norn.ErrInvalidArgument, c.field)
		}
		b.gone("c")
		b.count(norn.Filter{Queues: []string{"kids"}}, 0)
		b.status("p", norn.StatusRunning)
		b.complete(p, "")
	})
}
