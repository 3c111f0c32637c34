package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nornq/norn"
)

func testSubmitDefaults(t *testing.T, f Factory) {
	e := newEnv(t, f)
	now := e.now()
	tk := e.submitOne(norn.NewTask{Queue: "q", Spec: json.RawMessage(`{"b": [1, true], "a": "x"}`),
		Priority: 7, Labels: map[string]string{"tenant": "t1"}})
	u, err := uuid.Parse(tk.ID)
	if err != nil || u.Version() != 7 {
		t.Fatalf("generated id %q is not a UUIDv7 (err %v)", tk.ID, err)
	}
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
	sameTask(t, "Get after Submit", tk, e.get(tk.ID))

	// Explicit settings are kept as given.
	x := e.submitOne(norn.NewTask{ID: "custom:1", Queue: "q", MaxAttempts: ptr(3),
		Retry: &norn.RetryPolicy{MaxRetries: 2, Base: dur(time.Second), Max: dur(time.Minute)}, Timeout: dur(30 * time.Second)})
	if x.ID != "custom:1" || x.MaxAttempts != 3 || x.Timeout.D() != 30*time.Second || x.Retry == nil ||
		*x.Retry != (norn.RetryPolicy{MaxRetries: 2, Base: dur(time.Second), Max: dur(time.Minute)}) {
		t.Fatalf("explicit settings not kept: %s", canonTask(x))
	}
	if len(x.Spec) != 0 && canonJSON(x.Spec) != "" {
		t.Fatalf("task without spec has spec %s", x.Spec)
	}

	// Generated ids are k-ordered: later submissions sort later.
	prev := tk.ID
	for i := 0; i < 5; i++ {
		e.clock.Advance(time.Millisecond)
		id := e.submitOne(norn.NewTask{Queue: "q"}).ID
		if id <= prev {
			t.Fatalf("generated ids not increasing: %q after %q", id, prev)
		}
		prev = id
	}

	_, err = e.s.Get(e.ctx, "no-such-task")
	wantErr(t, "Get unknown id", err, norn.ErrNotFound)
}

func testSubmitBatchAndGetMany(t *testing.T, f Factory) {
	e := newEnv(t, f)
	var nts []norn.NewTask
	for _, id := range []string{"b5", "b1", "b3", "b2", "b4"} {
		nts = append(nts, norn.NewTask{ID: id, Queue: "q", Spec: json.RawMessage(`"` + id + `"`)})
	}
	got := e.submit(nts...)
	for i, tk := range got {
		if tk.ID != nts[i].ID {
			t.Fatalf("Submit result %d is %q, want %q (results in request order)", i, tk.ID, nts[i].ID)
		}
		jsonEq(t, "spec of "+tk.ID, tk.Spec, `"`+tk.ID+`"`)
	}
	found, missing, err := e.s.GetMany(e.ctx, []string{"b3", "nope", "b1", "nope2", "b5"})
	if err != nil {
		t.Fatalf("GetMany: %v", err)
	}
	eqStrings(t, "GetMany found", ids(found), []string{"b3", "b1", "b5"})
	eqStrings(t, "GetMany missing", missing, []string{"nope", "nope2"})
	sameTask(t, "GetMany b1", got[1], found[1])
	n, err := e.s.Count(e.ctx, norn.Filter{})
	if err != nil || n != 5 {
		t.Fatalf("Count = %d, %v; want 5", n, err)
	}
}

func testSubmitIdempotent(t *testing.T, f Factory) {
	e := newEnv(t, f)
	a := e.submitOne(norn.NewTask{ID: "dup", Queue: "q", Spec: json.RawMessage(`{"v":1}`), Priority: 1})
	e.clock.Advance(time.Second)
	res, err := e.s.Submit(e.ctx, norn.NewTask{ID: "dup", Queue: "other", Spec: json.RawMessage(`{"v":2}`), Priority: 9})
	if err != nil {
		t.Fatalf("Submit duplicate: %v", err)
	}
	if len(res) != 1 || !res[0].Duplicate {
		t.Fatalf("Submit duplicate: %+v, want one result flagged Duplicate", res)
	}
	sameTask(t, "duplicate submit returns the existing task", a, res[0].Task)
	sameTask(t, "duplicate submit changes nothing", a, e.get("dup"))

	// A batch mixing duplicates and new tasks stores only the new ones.
	res, err = e.s.Submit(e.ctx, norn.NewTask{ID: "fresh", Queue: "q"}, norn.NewTask{ID: "dup", Queue: "q", Priority: 5},
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
	sameTask(t, "duplicate in batch changes nothing", a, e.get("dup"))
	e.get("fresh")
	e.get("fresh2")

	// The existing task is returned in its current state.
	c := e.claim("w1", "q")
	if c.ID != "dup" {
		t.Fatalf("claimed %q, want dup (priority 1)", c.ID)
	}
	res, err = e.s.Submit(e.ctx, norn.NewTask{ID: "dup", Queue: "q"})
	if err != nil || len(res) != 1 || !res[0].Duplicate {
		t.Fatalf("Submit duplicate of running task: %+v, %v", res, err)
	}
	sameTask(t, "duplicate of running task", c, res[0].Task)
	n, err := e.s.Count(e.ctx, norn.Filter{})
	if err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3", n, err)
	}
}

func testSubmitDelays(t *testing.T, f Factory) {
	e := newEnv(t, f)
	t0 := e.now()
	d := e.submitOne(norn.NewTask{ID: "delay", Queue: "q", Delay: dur(90 * time.Second)})
	if d.Status != norn.StatusScheduled {
		t.Fatalf("delayed task status %s, want scheduled", d.Status)
	}
	eqTime(t, "run_at of Delay 90s", d.RunAt, t0.Add(90*time.Second))
	r := e.submitOne(norn.NewTask{ID: "runat", Queue: "q", RunAt: t0.Add(time.Hour)})
	if r.Status != norn.StatusScheduled {
		t.Fatalf("run_at task status %s, want scheduled", r.Status)
	}
	eqTime(t, "run_at", r.RunAt, t0.Add(time.Hour))
	p := e.submitOne(norn.NewTask{ID: "past", Queue: "q", RunAt: t0.Add(-time.Hour)})
	if p.Status != norn.StatusReady {
		t.Fatalf("task with past run_at: status %s, want ready", p.Status)
	}

	e.advance(89 * time.Second)
	e.status("delay", norn.StatusScheduled)
	e.advance(2 * time.Second)
	d2 := e.status("delay", norn.StatusReady)
	lastHistory(t, d2, norn.TaskRelease, time.Time{})
	wantVersion(t, "released", d2, d.Version+1)
	// "past" became ready first, so it is claimed first at equal priority.
	for _, want := range []string{"past", "delay"} {
		c := e.claim("w", "q")
		if c.ID != want {
			t.Fatalf("claimed %q, want %s", c.ID, want)
		}
		e.complete(c, "")
	}
	e.claimNone("q")
	e.status("runat", norn.StatusScheduled)
	e.advance(time.Hour)
	e.status("runat", norn.StatusReady)
	if c := e.claim("w", "q"); c.ID != "runat" {
		t.Fatalf("claimed %q, want runat", c.ID)
	}
}

func testCancel(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "ready", Queue: "q", Priority: 1},
		norn.NewTask{ID: "sched", Queue: "q", Delay: dur(time.Minute)},
		norn.NewTask{ID: "dep", Queue: "q"},
		norn.NewTask{ID: "blocked", Queue: "q", DependsOn: []string{"dep"}},
		norn.NewTask{ID: "done", Queue: "q2"},
		norn.NewTask{ID: "failed", Queue: "q3"})
	e.complete(e.claim("w", "q2"), "")
	if err := e.s.Abort(e.ctx, ref(e.claim("w", "q3")), norn.ErrorInfo{Code: "bad"}); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	e.clock.Advance(time.Second)
	now := e.now()
	for _, id := range []string{"ready", "sched", "blocked"} {
		before := e.get(id)
		c, err := e.s.Cancel(e.ctx, id)
		if err != nil {
			t.Fatalf("Cancel(%s): %v", id, err)
		}
		if c.Status != norn.StatusCancelled {
			t.Fatalf("Cancel(%s): status %s", id, c.Status)
		}
		lastHistory(t, c, norn.TaskCancel, now)
		wantVersion(t, "cancelled "+id, c, before.Version+1)
		eqTime(t, "updated of cancelled "+id, c.Updated, now)
		sameTask(t, "Get after Cancel", c, e.get(id))
		// Cancelling again is a no-op returning the task.
		again, err := e.s.Cancel(e.ctx, id)
		if err != nil {
			t.Fatalf("second Cancel(%s): %v", id, err)
		}
		sameTask(t, "second Cancel", c, again)
		sameTask(t, "second Cancel changes nothing", c, e.get(id))
	}
	for _, id := range []string{"done", "failed"} {
		before := e.get(id)
		_, err := e.s.Cancel(e.ctx, id)
		wantErr(t, "Cancel "+id, err, norn.ErrConflict)
		sameTask(t, "failed Cancel changes nothing", before, e.get(id))
	}
	_, err := e.s.Cancel(e.ctx, "nope")
	wantErr(t, "Cancel unknown", err, norn.ErrNotFound)

	// Cancelled tasks never run, even once their delay passes or their
	// dependency completes.
	if c := e.claim("w", "q"); c.ID != "dep" {
		t.Fatalf("claimed %q, want dep (the only live task)", c.ID)
	}
	e.complete(e.get("dep"), "")
	e.advance(2 * time.Minute)
	e.claimNone("q")
	for _, id := range []string{"ready", "sched", "blocked"} {
		e.status(id, norn.StatusCancelled)
	}
}

func testCancelRunning(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "r", Queue: "q"})
	c := e.claim("w1", "q")
	if _, err := e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Progress: ptr(0.5)}); err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	before := e.get("r")
	e.clock.Advance(time.Second)
	x, err := e.s.Cancel(e.ctx, "r")
	if err != nil {
		t.Fatalf("Cancel running: %v", err)
	}
	if x.Status != norn.StatusCancelled {
		t.Fatalf("Cancel running: status %s", x.Status)
	}
	lastHistory(t, x, norn.TaskCancel, e.now())
	wantVersion(t, "cancel running", x, before.Version+1)
	x = e.get("r")

	// The owner learns on its next call, whatever it is, and nothing changes.
	r := ref(c)
	_, err = e.s.Heartbeat(e.ctx, r, norn.Heartbeat{})
	wantErr(t, "Heartbeat after cancel", err, norn.ErrCancelled)
	_, err = e.s.AppendLog(e.ctx, r, norn.LogAppend{Data: json.RawMessage(`1`)})
	wantErr(t, "AppendLog after cancel", err, norn.ErrCancelled)
	wantErr(t, "Complete after cancel", e.s.Complete(e.ctx, r, json.RawMessage(`"done"`)), norn.ErrCancelled)
	wantErr(t, "Fail after cancel", e.s.Fail(e.ctx, r, norn.ErrorInfo{Code: "x"}), norn.ErrCancelled)
	wantErr(t, "Abort after cancel", e.s.Abort(e.ctx, r, norn.ErrorInfo{Code: "x"}), norn.ErrCancelled)
	wantErr(t, "Yield after cancel", e.s.Yield(e.ctx, r), norn.ErrCancelled)
	res, err := e.s.LeaseBatch(e.ctx, []norn.LeaseOp{{Op: norn.OpComplete, LeaseRef: r}})
	if err != nil || len(res) != 1 || res[0].Err == nil || res[0].Err.Code != norn.CodeCancelled {
		t.Fatalf("LeaseBatch complete after cancel: %+v, %v; want one cancelled result", res, err)
	}
	sameTask(t, "worker calls after cancel change nothing", x, e.get("r"))
	logs, err := e.s.ReadLog(e.ctx, "r", 0, 0)
	if err != nil || len(logs) != 0 {
		t.Fatalf("ReadLog after refused append: %v, %v", logs, err)
	}
	// The old deadline passing does not revive it.
	e.advance(time.Minute)
	sameTask(t, "cancelled task after its deadline", x, e.get("r"))
	e.claimNone("q")
}

func testUpdate(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "b", Queue: "q", Priority: 3},
		norn.NewTask{ID: "a", Queue: "q", Priority: 1, Labels: map[string]string{"x": "1"}},
		norn.NewTask{ID: "blocked", Queue: "q", DependsOn: []string{"b"}})
	e.clock.Advance(time.Second)
	a := e.get("a")
	u, err := e.s.Update(e.ctx, "a", norn.Update{Priority: ptr(uint32(5))})
	if err != nil {
		t.Fatalf("Update priority: %v", err)
	}
	if u.Priority != 5 || u.Labels["x"] != "1" || len(u.Labels) != 1 || u.Status != norn.StatusReady {
		t.Fatalf("Update priority: %s", canonTask(u))
	}
	wantVersion(t, "update", u, a.Version+1)
	eqTime(t, "updated after Update", u.Updated, e.now())
	sameTask(t, "Get after Update", u, e.get("a"))

	u, err = e.s.Update(e.ctx, "a", norn.Update{Labels: map[string]string{"y": "2"}})
	if err != nil || len(u.Labels) != 1 || u.Labels["y"] != "2" {
		t.Fatalf("Update labels replaces them: %v, %v", u.Labels, err)
	}
	u, err = e.s.Update(e.ctx, "a", norn.Update{Labels: map[string]string{}})
	if err != nil || len(u.Labels) != 0 {
		t.Fatalf("Update with empty labels clears them: %v, %v", u.Labels, err)
	}

	// Compare-and-set.
	before := e.get("a")
	_, err = e.s.Update(e.ctx, "a", norn.Update{Priority: ptr(uint32(9)), IfVersion: before.Version - 1})
	wantErr(t, "Update with stale if_version", err, norn.ErrConflict)
	sameTask(t, "failed Update changes nothing", before, e.get("a"))
	u, err = e.s.Update(e.ctx, "a", norn.Update{Priority: ptr(uint32(9)), IfVersion: before.Version})
	if err != nil || u.Priority != 9 {
		t.Fatalf("Update with current if_version: %v", err)
	}

	// A blocked task can be updated too.
	bl, err := e.s.Update(e.ctx, "blocked", norn.Update{Priority: ptr(uint32(7))})
	if err != nil || bl.Priority != 7 || bl.Status != norn.StatusBlocked {
		t.Fatalf("Update blocked task: %v", err)
	}

	// The new priority decides the claim order: a (9) before b (3).
	c := e.claim("w", "q")
	if c.ID != "a" {
		t.Fatalf("claimed %q, want a after raising its priority", c.ID)
	}
	before = e.get("a")
	_, err = e.s.Update(e.ctx, "a", norn.Update{Priority: ptr(uint32(1))})
	wantErr(t, "Update running task", err, norn.ErrConflict)
	sameTask(t, "Update of running task changes nothing", before, e.get("a"))
	e.complete(c, "")
	before = e.get("a")
	_, err = e.s.Update(e.ctx, "a", norn.Update{Priority: ptr(uint32(1))})
	wantErr(t, "Update completed task", err, norn.ErrConflict)
	sameTask(t, "Update of completed task changes nothing", before, e.get("a"))
	if _, err := e.s.Cancel(e.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.Update(e.ctx, "b", norn.Update{Priority: ptr(uint32(1))})
	wantErr(t, "Update cancelled task", err, norn.ErrConflict)
	_, err = e.s.Update(e.ctx, "nope", norn.Update{Priority: ptr(uint32(1))})
	wantErr(t, "Update unknown task", err, norn.ErrNotFound)
}

func testUpdateRunAt(t *testing.T, f Factory) {
	e := newEnv(t, f)
	t0 := e.now()
	e.submit(norn.NewTask{ID: "s1", Queue: "q", Delay: dur(time.Hour)},
		norn.NewTask{ID: "s2", Queue: "q", Delay: dur(time.Hour)},
		norn.NewTask{ID: "s3", Queue: "q", Delay: dur(time.Hour)},
		norn.NewTask{ID: "r1", Queue: "r"})
	// A past run_at makes a scheduled task ready now.
	u, err := e.s.Update(e.ctx, "s1", norn.Update{RunAt: ptr(t0.Add(-time.Second))})
	if err != nil || u.Status != norn.StatusReady {
		t.Fatalf("Update run_at to the past: %v, %v; want ready", err, u)
	}
	// So does a zero run_at.
	u, err = e.s.Update(e.ctx, "s2", norn.Update{RunAt: ptr(time.Time{})})
	if err != nil || u.Status != norn.StatusReady {
		t.Fatalf("Update run_at to zero: %v, %v; want ready", err, u)
	}
	got := e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
	eqStrings(t, "claimable after run_at moved back", ids(got), []string{"s1", "s2"})
	for _, c := range got {
		e.complete(c, "")
	}
	// A later run_at postpones a scheduled task.
	u, err = e.s.Update(e.ctx, "s3", norn.Update{RunAt: ptr(t0.Add(2 * time.Hour))})
	if err != nil || u.Status != norn.StatusScheduled {
		t.Fatalf("Update run_at later: %v, %v", err, u)
	}
	eqTime(t, "postponed run_at", u.RunAt, t0.Add(2*time.Hour))
	// A future run_at makes a ready task scheduled.
	u, err = e.s.Update(e.ctx, "r1", norn.Update{RunAt: ptr(t0.Add(30 * time.Minute))})
	if err != nil || u.Status != norn.StatusScheduled {
		t.Fatalf("Update ready task to a future run_at: %v, %v; want scheduled", err, u)
	}
	eqTime(t, "run_at", u.RunAt, t0.Add(30*time.Minute))
	e.claimNone("r")
	e.advance(31 * time.Minute)
	r1 := e.status("r1", norn.StatusReady)
	lastHistory(t, r1, norn.TaskRelease, time.Time{})
	e.advance(30 * time.Minute) // t0+61m: past the original run_at of s3
	e.status("s3", norn.StatusScheduled)
	e.claimNone("q")
	e.advance(time.Hour)
	e.status("s3", norn.StatusReady)
}

func testDelete(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"}, norn.NewTask{ID: "c", Queue: "q"})
	a := e.claim("w", "q")
	if _, err := e.s.AppendLog(e.ctx, ref(a), norn.LogAppend{Data: json.RawMessage(`{"step":1}`)}); err != nil {
		t.Fatalf("AppendLog: %v", err)
	}
	e.complete(a, `1`)
	if err := e.s.Delete(e.ctx, "a"); err != nil {
		t.Fatalf("Delete completed: %v", err)
	}
	e.gone("a")
	_, err := e.s.ReadLog(e.ctx, "a", 0, 0)
	wantErr(t, "ReadLog of deleted task", err, norn.ErrNotFound)
	wantErr(t, "Delete again", e.s.Delete(e.ctx, "a"), norn.ErrNotFound)
	wantErr(t, "Delete unknown", e.s.Delete(e.ctx, "nope"), norn.ErrNotFound)

	// A running task can be deleted; its owner then finds it gone.
	b := e.claim("w", "q")
	if err := e.s.Delete(e.ctx, b.ID); err != nil {
		t.Fatalf("Delete running: %v", err)
	}
	e.gone(b.ID)
	_, err = e.s.Heartbeat(e.ctx, ref(b), norn.Heartbeat{})
	wantErr(t, "Heartbeat of deleted task", err, norn.ErrNotFound)
	wantErr(t, "Complete of deleted task", e.s.Complete(e.ctx, ref(b), nil), norn.ErrNotFound)

	n, err := e.s.Count(e.ctx, norn.Filter{})
	if err != nil || n != 1 {
		t.Fatalf("Count after deletes = %d, %v; want 1", n, err)
	}
	// A deleted ready task is not claimable, and its id can be reused.
	if err := e.s.Delete(e.ctx, "c"); err != nil {
		t.Fatal(err)
	}
	e.claimNone("q")
	if tk := e.submitOne(norn.NewTask{ID: "a", Queue: "q"}); tk.Status != norn.StatusReady {
		t.Fatalf("resubmitted id after delete: %s", tk.Status)
	}
}

func testDeleteMatching(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "a1", Queue: "qa", Labels: map[string]string{"k": "v"}},
		norn.NewTask{ID: "a2", Queue: "qa"},
		norn.NewTask{ID: "a3", Queue: "qa"},
		norn.NewTask{ID: "b1", Queue: "qb", Labels: map[string]string{"k": "v"}},
		norn.NewTask{ID: "b2", Queue: "qb"})
	e.complete(e.claim("w", "qa"), "")
	before := e.snapshot()
	_, err := e.s.DeleteMatching(e.ctx, norn.Filter{})
	wantErr(t, "DeleteMatching with empty filter", err, norn.ErrInvalidArgument)
	e.unchanged("refused DeleteMatching", before)

	n, err := e.s.DeleteMatching(e.ctx, norn.Filter{Queues: []string{"qa"}, Statuses: []norn.Status{norn.StatusReady}})
	if err != nil || n != 2 {
		t.Fatalf("DeleteMatching qa ready = %d, %v; want 2", n, err)
	}
	e.gone("a2")
	e.gone("a3")
	e.status("a1", norn.StatusCompleted)
	n, err = e.s.DeleteMatching(e.ctx, norn.Filter{Labels: map[string]string{"k": "v"}})
	if err != nil || n != 2 {
		t.Fatalf("DeleteMatching by label = %d, %v; want 2", n, err)
	}
	e.gone("a1")
	e.gone("b1")
	n, err = e.s.DeleteMatching(e.ctx, norn.Filter{Labels: map[string]string{"k": "v"}})
	if err != nil || n != 0 {
		t.Fatalf("repeated DeleteMatching = %d, %v; want 0", n, err)
	}
	snap := e.snapshot()
	if len(snap) != 1 || snap["b2"] == "" {
		t.Fatalf("after DeleteMatching: %v, want only b2", snap)
	}
}

func testTransaction(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
		norn.NewTask{ID: "c", Queue: "q"}, norn.NewTask{ID: "d", Queue: "q"})
	a, c := e.get("a"), e.get("c")
	e.clock.Advance(time.Second)
	res, err := e.s.Transact(e.ctx, norn.Txn{
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
	if g := e.get("a"); g.Priority != 9 {
		t.Fatalf("a priority %d after transaction", g.Priority)
	}
	n1 := e.status("n1", norn.StatusScheduled)
	if n1.Labels["from"] != "txn" {
		t.Fatalf("n1 labels %v", n1.Labels)
	}
	lastHistory(t, e.status("b", norn.StatusCancelled), norn.TaskCancel, e.now())
	e.gone("d")
	sameTask(t, "required task untouched", c, e.get("c"))

	// An empty transaction and one with only assertions succeed.
	if _, err := e.s.Transact(e.ctx, norn.Txn{Require: []norn.Requirement{{ID: "c"}}}); err != nil {
		t.Fatalf("Transact with only a requirement: %v", err)
	}
}

func testTransactionRollback(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"},
		norn.NewTask{ID: "c", Queue: "q"}, norn.NewTask{ID: "run", Queue: "r"}, norn.NewTask{ID: "done", Queue: "d"})
	e.claim("w", "r")
	e.complete(e.claim("w", "d"), "")
	a := e.get("a")
	e.clock.Advance(time.Second)
	before := e.snapshot()
	// Every transaction below has good operations plus one that fails.
	good := func(tx norn.Txn) norn.Txn {
		tx.Submit = append([]norn.NewTask{{ID: "n1", Queue: "q"}, {ID: "n2", Queue: "q", DependsOn: []string{"n1"}}}, tx.Submit...)
		tx.Update = append([]norn.TxnUpdate{{ID: "a", Update: norn.Update{Priority: ptr(uint32(4))}}}, tx.Update...)
		tx.Cancel = append([]string{"b"}, tx.Cancel...)
		tx.Delete = append([]string{"c"}, tx.Delete...)
		return tx
	}
	cases := []struct {
		name string
		tx   norn.Txn
		want []*norn.Error
	}{
		{"update of running task", good(norn.Txn{Update: []norn.TxnUpdate{{ID: "run", Update: norn.Update{Priority: ptr(uint32(1))}}}}), []*norn.Error{norn.ErrConflict}},
		{"update with stale if_version", good(norn.Txn{Update: []norn.TxnUpdate{{ID: "a", Update: norn.Update{Priority: ptr(uint32(1)), IfVersion: a.Version + 7}}}}), []*norn.Error{norn.ErrConflict}},
		{"update of missing task", good(norn.Txn{Update: []norn.TxnUpdate{{ID: "nope", Update: norn.Update{Priority: ptr(uint32(1))}}}}), []*norn.Error{norn.ErrNotFound}},
		{"cancel of completed task", good(norn.Txn{Cancel: []string{"done"}}), []*norn.Error{norn.ErrConflict}},
		{"cancel of missing task", good(norn.Txn{Cancel: []string{"nope"}}), []*norn.Error{norn.ErrNotFound}},
		{"delete of missing task", good(norn.Txn{Delete: []string{"nope"}}), []*norn.Error{norn.ErrNotFound}},
		{"invalid submit", good(norn.Txn{Submit: []norn.NewTask{{ID: "n3", Queue: "bad queue"}}}), []*norn.Error{norn.ErrInvalidArgument}},
		{"submit with missing dependency", good(norn.Txn{Submit: []norn.NewTask{{ID: "n3", Queue: "q", DependsOn: []string{"nope"}}}}), []*norn.Error{norn.ErrInvalidArgument}},
		{"require at wrong version", good(norn.Txn{Require: []norn.Requirement{{ID: "a", Version: a.Version + 1}}}), []*norn.Error{norn.ErrConflict}},
		{"require missing task", good(norn.Txn{Require: []norn.Requirement{{ID: "nope"}}}), []*norn.Error{norn.ErrConflict, norn.ErrNotFound}},
	}
	for _, tc := range cases {
		_, err := e.s.Transact(e.ctx, tc.tx)
		wantErrOneOf(t, "Transact with "+tc.name, err, tc.want...)
		e.unchanged("Transact with "+tc.name, before)
	}
	// The invalid submit names its place in the transaction.
	_, err := e.s.Transact(e.ctx, norn.Txn{Submit: []norn.NewTask{{ID: "ok", Queue: "q"}, {Queue: "bad queue"}}})
	wantField(t, "Transact invalid submit", err, norn.ErrInvalidArgument, "submit[1].queue")
	// Nothing leaked into claims either.
	c := e.claim("w", "q")
	if c.ID != "a" {
		t.Fatalf("claimed %q after rolled back transactions, want a", c.ID)
	}
}
