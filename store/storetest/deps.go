package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func testDependencyChain(t *testing.T, f Factory) {
	e := newEnv(t, f)
	// Forward references within a batch are allowed.
	got := e.submit(norn.NewTask{ID: "c", Queue: "q", DependsOn: []string{"b"}},
		norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}},
		norn.NewTask{ID: "a", Queue: "q"})
	if got[0].Status != norn.StatusBlocked || got[1].Status != norn.StatusBlocked || got[2].Status != norn.StatusReady {
		t.Fatalf("chain statuses %s %s %s, want blocked blocked ready", got[0].Status, got[1].Status, got[2].Status)
	}
	eqStrings(t, "depends_on of b", got[1].DependsOn, []string{"a"})
	ts := e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
	eqStrings(t, "claimable in a chain", ids(ts), []string{"a"})
	e.clock.Advance(time.Second)
	b0 := e.get("b")
	e.complete(ts[0], "")
	e.sweep()
	b := e.status("b", norn.StatusReady)
	lastHistory(t, b, norn.TaskRelease, e.now())
	wantVersion(t, "released b", b, b0.Version+1)
	e.status("c", norn.StatusBlocked)
	bc := e.claim("w", "q")
	if bc.ID != "b" {
		t.Fatalf("claimed %q, want b", bc.ID)
	}
	e.claimNone("q")
	e.complete(bc, "")
	e.sweep()
	lastHistory(t, e.status("c", norn.StatusReady), norn.TaskRelease, time.Time{})
	if c := e.claim("w", "q"); c.ID != "c" {
		t.Fatalf("claimed %q, want c", c.ID)
	}
}

func testDependencyDiamond(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "a", Queue: "q"},
		norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}},
		norn.NewTask{ID: "c", Queue: "q", DependsOn: []string{"a"}},
		norn.NewTask{ID: "d", Queue: "q", DependsOn: []string{"b", "c"}},
		norn.NewTask{ID: "x", Queue: "other", DependsOn: []string{"a"}})
	e.complete(e.claim("w", "q"), "")
	e.sweep()
	e.status("b", norn.StatusReady)
	e.status("c", norn.StatusReady)
	e.status("x", norn.StatusReady)
	e.status("d", norn.StatusBlocked)
	ts := e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
	eqStrings(t, "claimable after a", ids(ts), []string{"b", "c"})
	e.complete(ts[0], "")
	e.sweep()
	e.status("d", norn.StatusBlocked)
	e.claimNone("q")
	e.complete(ts[1], "")
	e.sweep()
	lastHistory(t, e.status("d", norn.StatusReady), norn.TaskRelease, time.Time{})
}

func testDependencyRejected(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "x", Queue: "q"})
	before := e.snapshot()
	_, err := e.s.Submit(e.ctx, norn.NewTask{ID: "n1", Queue: "q"}, norn.NewTask{ID: "n2", Queue: "q", DependsOn: []string{"x", "nope"}})
	wantField(t, "missing dependency", err, norn.ErrInvalidArgument, "tasks[1].depends_on[1]")
	e.unchanged("missing dependency", before)
	_, err = e.s.Submit(e.ctx, norn.NewTask{ID: "n1", Queue: "q", DependsOn: []string{"n1"}})
	wantField(t, "self dependency", err, norn.ErrInvalidArgument, "tasks[0].depends_on[0]")
	e.unchanged("self dependency", before)
	for name, batch := range map[string][]norn.NewTask{
		"2-cycle": {{ID: "p", Queue: "q", DependsOn: []string{"r"}}, {ID: "r", Queue: "q", DependsOn: []string{"p"}}},
		"3-cycle": {{ID: "p", Queue: "q", DependsOn: []string{"x", "r"}}, {ID: "r", Queue: "q", DependsOn: []string{"s"}},
			{ID: "s", Queue: "q", DependsOn: []string{"p"}}, {ID: "ok", Queue: "q"}},
	} {
		_, err := e.s.Submit(e.ctx, batch...)
		wantErr(t, name, err, norn.ErrInvalidArgument)
		if fe := fieldOf(err); !strings.HasPrefix(fe, "tasks[") || !strings.Contains(fe, "depends_on") {
			t.Fatalf("%s: error field %q, want tasks[i].depends_on[j]", name, fe)
		}
		e.unchanged(name, before)
	}
}

func fieldOf(err error) string {
	var ne *norn.Error
	if errors.As(err, &ne) {
		return ne.Field
	}
	return ""
}

func testDependencyCompleted(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "c", Queue: "q2"})
	e.complete(e.claim("w", "q"), "")
	b := e.submitOne(norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}})
	if b.Status != norn.StatusReady {
		t.Fatalf("task depending on a completed task: %s, want ready", b.Status)
	}
	eqStrings(t, "depends_on", b.DependsOn, []string{"a"})
	b2 := e.submitOne(norn.NewTask{ID: "b2", Queue: "q", DependsOn: []string{"a", "c"}})
	if b2.Status != norn.StatusBlocked {
		t.Fatalf("task depending on a completed and a ready task: %s, want blocked", b2.Status)
	}
	if c := e.claim("w", "q"); c.ID != "b" {
		t.Fatalf("claimed %q, want b", c.ID)
	}
	e.complete(e.claim("w", "q2"), "")
	e.sweep()
	e.status("b2", norn.StatusReady)
}

func testDependencyCascade(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(
		norn.NewTask{ID: "a1", Queue: "qa"}, norn.NewTask{ID: "ok", Queue: "q"},
		norn.NewTask{ID: "a2", Queue: "q", DependsOn: []string{"a1"}},
		norn.NewTask{ID: "a3", Queue: "q", DependsOn: []string{"a2"}},
		norn.NewTask{ID: "a4", Queue: "q", DependsOn: []string{"ok", "a1"}},
		norn.NewTask{ID: "c1", Queue: "q", Delay: dur(time.Hour)},
		norn.NewTask{ID: "c2", Queue: "q", DependsOn: []string{"c1"}},
		norn.NewTask{ID: "c3", Queue: "q", DependsOn: []string{"c2"}},
		norn.NewTask{ID: "d1", Queue: "qd"},
		norn.NewTask{ID: "d2", Queue: "q", DependsOn: []string{"d1"}},
		norn.NewTask{ID: "f1", Queue: "qf"},
		norn.NewTask{ID: "f2", Queue: "q", DependsOn: []string{"f1"}},
	)
	if err := e.s.Abort(e.ctx, ref(e.claim("w", "qa")), norn.ErrorInfo{Code: "boom"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Cancel(e.ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Delete(e.ctx, "d1"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.Fail(e.ctx, ref(e.claim("w", "qf")), norn.ErrorInfo{Code: "boom"}); err != nil {
		t.Fatal(err)
	}
	e.status("f1", norn.StatusAborted)
	e.sweep()
	for _, id := range []string{"a2", "a3", "a4", "c2", "c3", "d2", "f2"} {
		tk := e.status(id, norn.StatusAborted)
		lastError(t, tk, norn.CodeDependencyFailed)
		h := lastHistory(t, tk, norn.TaskAbort, time.Time{})
		if h.Error == nil || h.Error.Code != norn.CodeDependencyFailed {
			t.Fatalf("task %q: TaskAbort entry error %+v, want code %s", id, h.Error, norn.CodeDependencyFailed)
		}
	}
	// Depending on a task that already failed fails at once.
	for _, dep := range []string{"a1", "c1"} {
		tk := e.submitOne(norn.NewTask{Queue: "q", DependsOn: []string{dep}})
		if tk.Status != norn.StatusAborted {
			t.Fatalf("task depending on %s (failed): %s, want aborted", dep, tk.Status)
		}
		lastError(t, tk, norn.CodeDependencyFailed)
	}
	e.status("ok", norn.StatusReady)
	if c := e.claim("w", "q"); c.ID != "ok" {
		t.Fatalf("claimed %q, want ok", c.ID)
	}
	e.claimNone("q")
}

func testDependencyDelay(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "a", Queue: "qa"},
		norn.NewTask{ID: "late", Queue: "q", DependsOn: []string{"a"}, Delay: dur(time.Hour)},
		norn.NewTask{ID: "soon", Queue: "q", DependsOn: []string{"a"}, Delay: dur(5 * time.Minute)})
	e.status("late", norn.StatusBlocked)
	e.advance(10 * time.Minute)
	e.status("soon", norn.StatusBlocked)
	e.complete(e.claim("w", "qa"), "")
	e.sweep()
	e.status("soon", norn.StatusReady)
	e.status("late", norn.StatusScheduled)
	if c := e.claim("w", "q"); c.ID != "soon" {
		t.Fatalf("claimed %q, want soon", c.ID)
	}
	e.claimNone("q")
	e.advance(49 * time.Minute)
	e.status("late", norn.StatusScheduled)
	e.advance(2 * time.Minute)
	lastHistory(t, e.status("late", norn.StatusReady), norn.TaskRelease, time.Time{})
}
