package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
)

var workerID = regexp.MustCompile(`^worker-[0-9]+$`)

func testRegisterWorkers(t *testing.T, f Factory) {
	e := newEnv(t, f)
	t0 := e.now()
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 4; i++ {
				id, err := e.s.RegisterWorker(e.ctx, norn.WorkerInfo{Name: fmt.Sprintf("g%d", g)})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if seen[id] {
					errs <- fmt.Errorf("RegisterWorker returned %q twice", id)
				}
				seen[id] = true
				mu.Unlock()
				if !workerID.MatchString(id) {
					errs <- fmt.Errorf("worker id %q does not look like worker-<n>", id)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != 32 {
		t.Fatalf("%d unique worker ids, want 32", len(seen))
	}
	w, err := e.s.RegisterWorker(e.ctx, norn.WorkerInfo{Name: "host-1", Queues: []string{"q"}})
	if err != nil || seen[w] {
		t.Fatalf("RegisterWorker: %q, %v", w, err)
	}
	ws, err := e.s.Workers(e.ctx)
	if err != nil {
		t.Fatalf("Workers: %v", err)
	}
	if len(ws) != 33 {
		t.Fatalf("Workers lists %d, want 33", len(ws))
	}
	info := findWorker(t, ws, w)
	if info.Name != "host-1" || len(info.Queues) != 1 || info.Queues[0] != "q" {
		t.Fatalf("worker info %+v", info)
	}
	eqTime(t, "registered", info.Registered, t0)

	// A claim refreshes LastSeen; only that worker is active an hour later.
	e.clock.Advance(time.Hour)
	e.submitOne(norn.NewTask{Queue: "q"})
	e.claim(w, "q")
	ws, err = e.s.Workers(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	info = findWorker(t, ws, w)
	if d := e.now().Sub(info.LastSeen); d < 0 || d > 10*time.Second {
		t.Fatalf("last_seen %v after a claim at %v", info.LastSeen.UTC(), e.now().UTC())
	}
	st, err := e.s.Stats(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Workers != 33 || st.ActiveWorkers != 1 {
		t.Fatalf("Stats workers %d active %d, want 33 and 1", st.Workers, st.ActiveWorkers)
	}
}

func findWorker(t *testing.T, ws []norn.WorkerInfo, id string) norn.WorkerInfo {
	t.Helper()
	for _, w := range ws {
		if w.ID == id {
			return w
		}
	}
	t.Fatalf("worker %q not listed", id)
	return norn.WorkerInfo{}
}

func testClaimFields(t *testing.T, f Factory) {
	e := newEnv(t, f)
	tk := e.submitOne(norn.NewTask{ID: "a", Queue: "q", Timeout: dur(30 * time.Second)})
	e.clock.Advance(time.Second)
	now := e.now()
	c := e.claim("w1", "q")
	if c.ID != "a" || c.Owner != "w1" || c.Lease != 1 || c.Attempts != 1 || c.Progress != 0 {
		t.Fatalf("claimed task: %s", canonTask(c))
	}
	eqTime(t, "deadline", c.Deadline, now.Add(30*time.Second))
	eqTime(t, "updated", c.Updated, now)
	wantVersion(t, "claimed", c, tk.Version+1)
	h := lastHistory(t, c, norn.TaskAssignment, now)
	if h.Worker != "w1" || h.Lease != 1 {
		t.Fatalf("TaskAssignment entry %+v, want worker w1 lease 1", h)
	}
	sameTask(t, "Get after Claim", c, e.get("a"))

	// The request's timeout overrides the task's.
	e.submitOne(norn.NewTask{ID: "b", Queue: "q"})
	ts := e.claimReq(norn.ClaimRequest{Worker: "w1", Queues: []string{"q"}, Timeout: dur(2 * time.Minute)})
	if len(ts) != 1 {
		t.Fatalf("claimed %d", len(ts))
	}
	eqTime(t, "deadline with lease override", ts[0].Deadline, now.Add(2*time.Minute))
	e.claimNone("q")
	e.claimNone("never-used")
}

func testClaimQueuesAndN(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "a", Queue: "q1", Priority: 1}, norn.NewTask{ID: "b", Queue: "q1", Priority: 5},
		norn.NewTask{ID: "c", Queue: "q1", Priority: 1}, norn.NewTask{ID: "x", Queue: "q2"}, norn.NewTask{ID: "y", Queue: "q2"},
		norn.NewTask{ID: "z", Queue: "q3", Priority: 99})
	eqStrings(t, "claim q2,q1 n=1", ids(e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q2", "q1"}})), []string{"x"})
	eqStrings(t, "claim q2,q1 n=4", ids(e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q2", "q1"}, N: 4})), []string{"y", "b", "a", "c"})
	eqStrings(t, "claim q1,q2 when empty", ids(e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q1", "q2"}, N: 4})), []string{})
	var nts []norn.NewTask
	for i := 0; i < 5; i++ {
		nts = append(nts, norn.NewTask{ID: fmt.Sprintf("n%d", i), Queue: "q4"})
	}
	e.submit(nts...)
	eqStrings(t, "claim n=3 of 5", ids(e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q4"}, N: 3})), []string{"n0", "n1", "n2"})
	eqStrings(t, "claim n=3 of 2 left", ids(e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q4"}, N: 3})), []string{"n3", "n4"})
	e.status("z", norn.StatusReady)
}

type claimResult struct {
	ts  []*norn.Task
	err error
}

func testClaimWait(t *testing.T, f Factory) {
	e := newEnv(t, f)
	// Nothing arrives: the claim returns empty once Wait has passed.
	start := time.Now()
	ts := e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"lp"}, Wait: dur(300 * time.Millisecond)})
	if len(ts) != 0 {
		t.Fatalf("long poll on an empty queue returned %d tasks", len(ts))
	}
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("long poll of 300ms returned after %v", el)
	}

	waitFor := func(what string, trigger func()) []*norn.Task {
		t.Helper()
		ch := make(chan claimResult, 1)
		go func() {
			ts, err := e.s.Claim(e.ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"lp"}, Wait: dur(time.Minute)})
			ch <- claimResult{ts, err}
		}()
		// Give the claim time to start waiting. The assertions hold either
		// way; the pause only makes the wake-up path the one exercised.
		time.Sleep(50 * time.Millisecond)
		trigger()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("%s: Claim: %v", what, r.err)
			}
			return r.ts
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: a waiting Claim was not woken", what)
		}
		return nil
	}
	got := waitFor("submit", func() { e.submitOne(norn.NewTask{ID: "woke", Queue: "lp"}) })
	eqStrings(t, "claim woken by submit", ids(got), []string{"woke"})
	e.complete(got[0], "")

	e.submitOne(norn.NewTask{ID: "later", Queue: "lp", Delay: dur(time.Minute)})
	got = waitFor("delay elapsing", func() { e.advance(2 * time.Minute) })
	eqStrings(t, "claim woken by a delay elapsing", ids(got), []string{"later"})
	e.complete(got[0], "")

	// A cancelled context ends the wait early.
	ctx, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	ts, _ = e.s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"lp"}, Wait: dur(time.Minute)})
	if len(ts) != 0 {
		t.Fatalf("claim with cancelled context returned %d tasks", len(ts))
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("claim ignored its context for %v", el)
	}
}

func testClaimPaused(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "p1", Queue: "paused", Priority: 9}, norn.NewTask{ID: "r1", Queue: "run"})
	qi, err := e.s.UpdateQueue(e.ctx, "paused", norn.QueueUpdate{Paused: ptr(true)})
	if err != nil || !qi.Paused || qi.Name != "paused" {
		t.Fatalf("pause: %+v, %v", qi, err)
	}
	e.claimNone("paused")
	if c := e.claim("w", "paused", "run"); c.ID != "r1" {
		t.Fatalf("claimed %q, want r1 (paused queue skipped)", c.ID)
	}
	// Everything else still works on a paused queue.
	e.submitOne(norn.NewTask{ID: "p2", Queue: "paused"})
	if _, err := e.s.Update(e.ctx, "p2", norn.Update{Priority: ptr(uint32(1))}); err != nil {
		t.Fatalf("Update in paused queue: %v", err)
	}
	qi, err = e.s.Queue(e.ctx, "paused")
	if err != nil || !qi.Paused || qi.Counts[norn.StatusReady] != 2 {
		t.Fatalf("Queue(paused): %+v, %v", qi, err)
	}
	e.claimNone("paused")
	qi, err = e.s.UpdateQueue(e.ctx, "paused", norn.QueueUpdate{Paused: ptr(false)})
	if err != nil || qi.Paused {
		t.Fatalf("resume: %+v, %v", qi, err)
	}
	eqStrings(t, "claim after resume", ids(e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"paused"}, N: 5})), []string{"p1", "p2"})
}

func testHeartbeat(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "h", Queue: "q", Timeout: dur(10 * time.Second)})
	c := e.claim("w", "q")
	e.clock.Advance(4 * time.Second)
	dl, err := e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Progress: ptr(0.25)})
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	eqTime(t, "heartbeat deadline", dl, e.now().Add(10*time.Second))
	g := e.get("h")
	eqTime(t, "task deadline after heartbeat", g.Deadline, dl)
	if g.Progress != 0.25 || g.Status != norn.StatusRunning || g.Owner != "w" || g.Lease != 1 || g.Attempts != 1 {
		t.Fatalf("after heartbeat: %s", canonTask(g))
	}
	if len(g.History) != len(c.History) {
		t.Fatalf("heartbeat recorded history: %v", historyTypes(g))
	}
	// No progress leaves progress alone; Extend overrides the extension.
	dl, err = e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Extend: dur(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	eqTime(t, "deadline with extend", dl, e.now().Add(time.Minute))
	if g := e.get("h"); g.Progress != 0.25 {
		t.Fatalf("progress %v after heartbeat without progress, want 0.25", g.Progress)
	}
	_, err = e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Progress: ptr(1.5)})
	wantField(t, "Heartbeat progress 1.5", err, norn.ErrInvalidArgument, "progress")
	// Past the original deadline, the extended lease holds.
	e.advance(50 * time.Second)
	e.status("h", norn.StatusRunning)
	e.advance(11 * time.Second)
	tk := e.status("h", norn.StatusReady)
	lastHistory(t, tk, norn.TaskTimeout, time.Time{})
}

func testLog(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "l", Queue: "q", Timeout: dur(10 * time.Second)})
	c := e.claim("w1", "q")
	now := e.now()
	for i := 1; i <= 2; i++ {
		le, err := e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Data: json.RawMessage(fmt.Sprintf(`{"step": %d}`, i))})
		if err != nil {
			t.Fatalf("AppendLog %d: %v", i, err)
		}
		if le.Seq != uint64(i) || le.Lease != 1 || !le.Time.Equal(now) {
			t.Fatalf("AppendLog %d: %+v, want seq %d lease 1 at %v", i, le, i, now)
		}
		jsonEq(t, "appended data", le.Data, fmt.Sprintf(`{"step":%d}`, i))
	}
	le, err := e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Seq: 3, Data: json.RawMessage(`{"step":3}`)})
	if err != nil || le.Seq != 3 {
		t.Fatalf("AppendLog with explicit next seq: %+v, %v", le, err)
	}
	for _, seq := range []uint64{3, 5, 1} {
		_, err = e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Seq: seq, Data: json.RawMessage(`"x"`)})
		wantErr(t, fmt.Sprintf("AppendLog with seq %d when 4 is next", seq), err, norn.ErrConflict)
	}
	logs, err := e.s.ReadLog(e.ctx, "l", 0, 0)
	if err != nil || len(logs) != 3 {
		t.Fatalf("ReadLog: %d entries, %v; want 3", len(logs), err)
	}
	for i, l := range logs {
		if l.Seq != uint64(i+1) {
			t.Fatalf("ReadLog entry %d has seq %d", i, l.Seq)
		}
		jsonEq(t, "read log data", l.Data, fmt.Sprintf(`{"step":%d}`, i+1))
	}
	logs, err = e.s.ReadLog(e.ctx, "l", 1, 1)
	if err != nil || len(logs) != 1 || logs[0].Seq != 2 {
		t.Fatalf("ReadLog after 1 limit 1: %+v, %v; want seq 2", logs, err)
	}
	logs, err = e.s.ReadLog(e.ctx, "l", 3, 0)
	if err != nil || len(logs) != 0 {
		t.Fatalf("ReadLog after the last: %+v, %v", logs, err)
	}

	// The next claimant reads it and continues the numbering.
	e.advance(11 * time.Second)
	c2 := e.claim("w2", "q")
	logs, err = e.s.ReadLog(e.ctx, "l", 0, 0)
	if err != nil || len(logs) != 3 || logs[2].Lease != 1 {
		t.Fatalf("ReadLog by the next claimant: %+v, %v", logs, err)
	}
	_, err = e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Data: json.RawMessage(`"stale"`)})
	wantErr(t, "AppendLog with the old lease", err, norn.ErrLeaseLost)
	le, err = e.s.AppendLog(e.ctx, ref(c2), norn.LogAppend{Data: json.RawMessage(`{"step":4}`)})
	if err != nil || le.Seq != 4 || le.Lease != 2 {
		t.Fatalf("AppendLog under the new lease: %+v, %v; want seq 4 lease 2", le, err)
	}
	e.complete(c2, "")
	logs, err = e.s.ReadLog(e.ctx, "l", 0, 0)
	if err != nil || len(logs) != 4 {
		t.Fatalf("ReadLog after completion: %d entries, %v", len(logs), err)
	}
	_, err = e.s.AppendLog(e.ctx, ref(c2), norn.LogAppend{Data: json.RawMessage(`5`)})
	wantErrOneOf(t, "AppendLog after completion", err, norn.ErrLeaseLost, norn.ErrConflict)
	_, err = e.s.ReadLog(e.ctx, "nope", 0, 0)
	wantErr(t, "ReadLog unknown", err, norn.ErrNotFound)
}

func testComplete(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "c", Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 3}}, norn.NewTask{ID: "d", Queue: "q"})
	c := e.claim("w1", "q")
	if _, err := e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Progress: ptr(0.3)}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	before := e.get("c")
	e.complete(c, `{"n": 42}`)
	g := e.status("c", norn.StatusCompleted)
	jsonEq(t, "result", g.Result, `{"n":42}`)
	if g.Progress != 1 || g.Owner != "w1" || g.Lease != 1 || g.Attempts != 1 || len(g.Errors) != 0 {
		t.Fatalf("completed task: %s", canonTask(g))
	}
	lastHistory(t, g, norn.TaskComplete, e.now())
	eqTime(t, "updated", g.Updated, e.now())
	wantVersion(t, "completed", g, before.Version+1)
	// Completion is final: the lease is spent.
	err := e.s.Complete(e.ctx, ref(c), json.RawMessage(`2`))
	wantErrOneOf(t, "second Complete", err, norn.ErrLeaseLost, norn.ErrConflict)
	_, err = e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{})
	wantErrOneOf(t, "Heartbeat after Complete", err, norn.ErrLeaseLost, norn.ErrConflict)
	err = e.s.Fail(e.ctx, ref(c), norn.ErrorInfo{Code: "late"})
	wantErrOneOf(t, "Fail after Complete", err, norn.ErrLeaseLost, norn.ErrConflict)
	sameTask(t, "calls after completion change nothing", g, e.get("c"))
	e.advance(time.Minute)
	sameTask(t, "completed task is not timed out", g, e.get("c"))

	d := e.claim("w1", "q")
	e.complete(d, "")
	if g := e.status("d", norn.StatusCompleted); canonJSON(g.Result) != "" || g.Progress != 1 {
		t.Fatalf("completed without result: %s", canonTask(g))
	}
	e.claimNone("q")
}

func testFailBackoff(t *testing.T, f Factory) {
	e := newEnv(t, f)
	pol := norn.RetryPolicy{MaxRetries: 3, Base: dur(10 * time.Second), Max: dur(25 * time.Second)}
	e.submitOne(norn.NewTask{ID: "f", Queue: "q", Retry: &pol})
	wantWaits := []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second}
	for attempt := 1; attempt <= 4; attempt++ {
		c := e.claim("w", "q")
		if c.Attempts != attempt || c.Lease != uint64(attempt) {
			t.Fatalf("attempt %d: claimed with attempts %d lease %d", attempt, c.Attempts, c.Lease)
		}
		e.clock.Advance(time.Second)
		failedAt := e.now()
		if err := e.s.Fail(e.ctx, ref(c), norn.ErrorInfo{Code: "boom", Description: fmt.Sprint(attempt)}); err != nil {
			t.Fatalf("Fail attempt %d: %v", attempt, err)
		}
		g := e.get("f")
		if len(g.Errors) != attempt {
			t.Fatalf("after %d failures: %d errors recorded", attempt, len(g.Errors))
		}
		lastError(t, g, "boom")
		if g.Errors[attempt-1].Description != fmt.Sprint(attempt) {
			t.Fatalf("error %d description %q", attempt, g.Errors[attempt-1].Description)
		}
		if attempt == 4 {
			if g.Status != norn.StatusAborted {
				t.Fatalf("after retries used up: %s, want aborted", g.Status)
			}
			h := lastHistory(t, g, norn.TaskAbort, failedAt)
			if h.Error == nil || h.Error.Code != "boom" {
				t.Fatalf("TaskAbort entry error %+v", h.Error)
			}
			break
		}
		if g.Status != norn.StatusScheduled {
			t.Fatalf("after failure %d: %s, want scheduled", attempt, g.Status)
		}
		h := lastHistory(t, g, norn.TaskRetry, failedAt)
		if h.Error == nil || h.Error.Code != "boom" {
			t.Fatalf("TaskRetry entry error %+v", h.Error)
		}
		wait := wantWaits[attempt-1]
		eqTime(t, fmt.Sprintf("run_at after failure %d (backoff %v)", attempt, wait), g.RunAt, failedAt.Add(wait))
		e.advance(wait - time.Millisecond)
		e.status("f", norn.StatusScheduled)
		e.claimNone("q")
		e.advance(2 * time.Millisecond)
		lastHistory(t, e.status("f", norn.StatusReady), norn.TaskRelease, time.Time{})
	}
	e.advance(time.Hour)
	e.status("f", norn.StatusAborted)
	e.claimNone("q")
}

func testFailMaxAttempts(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "m", Queue: "q", MaxAttempts: ptr(2), Retry: &norn.RetryPolicy{MaxRetries: 5}},
		norn.NewTask{ID: "n", Queue: "q2"})
	c := e.claim("w", "q")
	if err := e.s.Fail(e.ctx, ref(c), norn.ErrorInfo{Code: "e1"}); err != nil {
		t.Fatal(err)
	}
	g := e.status("m", norn.StatusReady) // zero backoff: ready at once
	lastHistory(t, g, norn.TaskRetry, e.now())
	if g.Attempts != 1 {
		t.Fatalf("attempts %d after one failure", g.Attempts)
	}
	c = e.claim("w", "q")
	if c.Attempts != 2 || c.Lease != 2 {
		t.Fatalf("second claim: attempts %d lease %d", c.Attempts, c.Lease)
	}
	if err := e.s.Fail(e.ctx, ref(c), norn.ErrorInfo{Code: "e2"}); err != nil {
		t.Fatal(err)
	}
	g = e.status("m", norn.StatusAborted)
	lastError(t, g, norn.CodeAttemptsExhausted)
	lastHistory(t, g, norn.TaskAbort, e.now())
	if len(g.Errors) != 2 || g.Errors[0].Code != "e1" {
		t.Fatalf("errors %+v", g.Errors)
	}
	// Without a retry policy a failure aborts with the worker's error.
	n := e.claim("w", "q2")
	if err := e.s.Fail(e.ctx, ref(n), norn.ErrorInfo{Code: "nope", Description: "d"}); err != nil {
		t.Fatal(err)
	}
	g = e.status("n", norn.StatusAborted)
	lastError(t, g, "nope")
	lastHistory(t, g, norn.TaskAbort, e.now())
}

func testAbort(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "a", Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 5, Base: dur(time.Second)}})
	c := e.claim("w", "q")
	e.clock.Advance(time.Second)
	before := e.get("a")
	if err := e.s.Abort(e.ctx, ref(c), norn.ErrorInfo{Code: "fatal", Description: "disk on fire", Args: map[string]any{"disk": "sda"}}); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	g := e.status("a", norn.StatusAborted)
	h := lastHistory(t, g, norn.TaskAbort, e.now())
	if h.Error == nil || h.Error.Code != "fatal" {
		t.Fatalf("TaskAbort entry error %+v", h.Error)
	}
	if len(g.Errors) != 1 || g.Errors[0].Code != "fatal" || g.Errors[0].Description != "disk on fire" || g.Errors[0].Args["disk"] != "sda" {
		t.Fatalf("errors %+v", g.Errors)
	}
	if g.Owner != "w" || g.Attempts != 1 {
		t.Fatalf("aborted task: owner %q attempts %d", g.Owner, g.Attempts)
	}
	wantVersion(t, "aborted", g, before.Version+1)
	e.advance(time.Hour)
	sameTask(t, "aborted task is never retried", g, e.get("a"))
	e.claimNone("q")
}

func testYield(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "y", Queue: "q"})
	c := e.claim("w1", "q")
	if _, err := e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Progress: ptr(0.5)}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	before := e.get("y")
	if err := e.s.Yield(e.ctx, ref(c)); err != nil {
		t.Fatalf("Yield: %v", err)
	}
	g := e.status("y", norn.StatusReady)
	if g.Owner != "" || g.Progress != 0 || g.Attempts != 0 || g.Lease != 1 || len(g.Errors) != 0 {
		t.Fatalf("yielded task: %s", canonTask(g))
	}
	lastHistory(t, g, norn.TaskYield, e.now())
	wantVersion(t, "yielded", g, before.Version+1)
	wantErr(t, "Yield again", e.s.Yield(e.ctx, ref(c)), norn.ErrLeaseLost)
	c2 := e.claim("w2", "q")
	if c2.Lease != 2 || c2.Attempts != 1 {
		t.Fatalf("claim after yield: lease %d attempts %d, want 2 and 1", c2.Lease, c2.Attempts)
	}
}

func testTimeout(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "t", Queue: "q", Timeout: dur(10 * time.Second)})
	c := e.claim("w1", "q")
	if _, err := e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Progress: ptr(0.5)}); err != nil {
		t.Fatal(err)
	}
	e.advance(9 * time.Second)
	e.status("t", norn.StatusRunning)
	before := e.get("t")
	e.advance(time.Second + time.Millisecond)
	g := e.status("t", norn.StatusReady)
	if g.Owner != "" || g.Progress != 0 || g.Attempts != 1 || g.Lease != 1 {
		t.Fatalf("timed out task: %s", canonTask(g))
	}
	h := lastHistory(t, g, norn.TaskTimeout, time.Time{})
	if h.Error == nil || h.Error.Code != norn.CodeTimeout {
		t.Fatalf("TaskTimeout entry error %+v", h.Error)
	}
	lastError(t, g, norn.CodeTimeout)
	wantVersion(t, "timed out", g, before.Version+1)
	c2 := e.claim("w2", "q")
	if c2.Lease != 2 || c2.Attempts != 2 {
		t.Fatalf("claim after timeout: lease %d attempts %d, want 2 and 2", c2.Lease, c2.Attempts)
	}
}

func testTimeoutMaxAttempts(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "t", Queue: "q", MaxAttempts: ptr(2)}, norn.NewTask{ID: "y", Queue: "q2", MaxAttempts: ptr(1)})
	e.claim("w", "q")
	e.advance(11 * time.Second)
	e.status("t", norn.StatusReady)
	e.claim("w", "q")
	e.advance(11 * time.Second)
	g := e.status("t", norn.StatusAborted)
	lastError(t, g, norn.CodeAttemptsExhausted)
	lastHistory(t, g, norn.TaskAbort, time.Time{})
	if g.Attempts != 2 || len(g.Errors) != 2 || g.Errors[0].Code != norn.CodeTimeout {
		t.Fatalf("exhausted task: attempts %d errors %+v", g.Attempts, g.Errors)
	}
	e.claimNone("q")
	// A yielded claim does not use up an attempt.
	if err := e.s.Yield(e.ctx, ref(e.claim("w", "q2"))); err != nil {
		t.Fatal(err)
	}
	c := e.claim("w", "q2")
	if c.Attempts != 1 {
		t.Fatalf("attempts %d after a yield and a claim, want 1", c.Attempts)
	}
	e.advance(11 * time.Second)
	lastError(t, e.status("y", norn.StatusAborted), norn.CodeAttemptsExhausted)
}

func testHistoryCap(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "h", Queue: "q"})
	const cycles = 60
	for i := 0; i < cycles; i++ {
		if err := e.s.Yield(e.ctx, ref(e.claim("w", "q"))); err != nil {
			t.Fatal(err)
		}
	}
	g := e.get("h")
	if len(g.History) > norn.DefaultHistoryLimit || len(g.History)+g.HistoryDropped != 2*cycles {
		t.Fatalf("history of %d entries with %d dropped, want at most %d kept and %d in all",
			len(g.History), g.HistoryDropped, norn.DefaultHistoryLimit, 2*cycles)
	}
	n := len(g.History)
	if g.History[n-1].Type != norn.TaskYield || g.History[n-2].Type != norn.TaskAssignment || g.History[n-2].Lease != cycles {
		t.Fatalf("newest history entries %+v %+v, want the last assignment (lease %d) and yield", g.History[n-2], g.History[n-1], cycles)
	}
}

func testLeaseBatch(t *testing.T, f Factory) {
	e := newEnv(t, f)
	var nts []norn.NewTask
	for i := 0; i < 5; i++ {
		nts = append(nts, norn.NewTask{ID: fmt.Sprintf("b%d", i), Queue: "q"})
	}
	e.submit(nts...)
	ts := e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 5})
	if len(ts) != 5 {
		t.Fatalf("claimed %d", len(ts))
	}
	stale := ref(ts[0])
	stale.Lease = 7
	ops := []norn.LeaseOp{
		{Op: norn.OpHeartbeat, LeaseRef: ref(ts[0]), Heartbeat: norn.Heartbeat{Progress: ptr(0.5)}},
		{Op: norn.OpComplete, LeaseRef: ref(ts[1]), Result: json.RawMessage(`"ok"`)},
		{Op: norn.OpFail, LeaseRef: ref(ts[2]), Error: &norn.ErrorInfo{Code: "f"}},
		{Op: norn.OpAbort, LeaseRef: ref(ts[3]), Error: &norn.ErrorInfo{Code: "a"}},
		{Op: norn.OpYield, LeaseRef: ref(ts[4])},
		{Op: norn.OpHeartbeat, LeaseRef: stale},
		{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: "nope", Worker: "w", Lease: 1}},
	}
	res, err := e.s.LeaseBatch(e.ctx, ops)
	if err != nil {
		t.Fatalf("LeaseBatch: %v", err)
	}
	if len(res) != len(ops) {
		t.Fatalf("LeaseBatch: %d results for %d ops", len(res), len(ops))
	}
	for i := 0; i < 5; i++ {
		if res[i].Err != nil {
			t.Fatalf("LeaseBatch op %d (%s): %v", i, ops[i].Op, res[i].Err)
		}
	}
	eqTime(t, "batched heartbeat deadline", res[0].Deadline, e.now().Add(norn.DefaultTimeout))
	if res[5].Err == nil || res[5].Err.Code != norn.CodeLeaseLost {
		t.Fatalf("stale op result %+v, want lease_lost", res[5].Err)
	}
	if res[6].Err == nil || res[6].Err.Code != norn.CodeNotFound {
		t.Fatalf("unknown task op result %+v, want not_found", res[6].Err)
	}
	// An unknown op is refused, either alone or as a malformed batch.
	res, err = e.s.LeaseBatch(e.ctx, []norn.LeaseOp{{Op: "explode", LeaseRef: ref(ts[0])}})
	if err != nil {
		wantErr(t, "LeaseBatch with an unknown op", err, norn.ErrInvalidArgument)
	} else if len(res) != 1 || res[0].Err == nil || res[0].Err.Code != norn.CodeInvalidArgument {
		t.Fatalf("unknown op result %+v, want invalid_argument", res)
	}
	if g := e.status("b0", norn.StatusRunning); g.Progress != 0.5 {
		t.Fatalf("batched heartbeat progress %v", g.Progress)
	}
	jsonEq(t, "batched result", e.status("b1", norn.StatusCompleted).Result, `"ok"`)
	lastError(t, e.status("b2", norn.StatusAborted), "f")
	lastError(t, e.status("b3", norn.StatusAborted), "a")
	lastHistory(t, e.status("b4", norn.StatusReady), norn.TaskYield, e.now())
}

// leaseCalls runs every lease-checked worker call with r and asserts each
// fails with want.
func leaseCalls(t *testing.T, e *testBundle, what string, r norn.LeaseRef, want *norn.Error) {
	t.Helper()
	_, err := e.s.Heartbeat(e.ctx, r, norn.Heartbeat{Progress: ptr(0.9)})
	wantErr(t, what+": Heartbeat", err, want)
	_, err = e.s.AppendLog(e.ctx, r, norn.LogAppend{Data: json.RawMessage(`"x"`)})
	wantErr(t, what+": AppendLog", err, want)
	wantErr(t, what+": Complete", e.s.Complete(e.ctx, r, json.RawMessage(`1`)), want)
	wantErr(t, what+": Fail", e.s.Fail(e.ctx, r, norn.ErrorInfo{Code: "x"}), want)
	wantErr(t, what+": Abort", e.s.Abort(e.ctx, r, norn.ErrorInfo{Code: "x"}), want)
	wantErr(t, what+": Yield", e.s.Yield(e.ctx, r), want)
	var ops []norn.LeaseOp
	for _, k := range []norn.LeaseOpKind{norn.OpHeartbeat, norn.OpComplete, norn.OpFail, norn.OpAbort, norn.OpYield} {
		ops = append(ops, norn.LeaseOp{Op: k, LeaseRef: r, Error: &norn.ErrorInfo{Code: "x"}})
	}
	res, err := e.s.LeaseBatch(e.ctx, ops)
	if err != nil || len(res) != len(ops) {
		t.Fatalf("%s: LeaseBatch: %d results, %v", what, len(res), err)
	}
	for i, r := range res {
		if r.Err == nil || r.Err.Code != want.Code {
			t.Fatalf("%s: LeaseBatch %s: %v, want %s", what, ops[i].Op, r.Err, want.Code)
		}
	}
}

func testFencing(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "f", Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 3}})
	c := e.claim("w1", "q")
	if _, err := e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Progress: ptr(0.5)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Data: json.RawMessage(`"mine"`)}); err != nil {
		t.Fatal(err)
	}
	before := e.get("f")
	future := ref(c)
	future.Lease++
	leaseCalls(t, e, "future lease", future, norn.ErrLeaseLost)
	wrongWorker := ref(c)
	wrongWorker.Worker = "w2"
	leaseCalls(t, e, "wrong worker", wrongWorker, norn.ErrLeaseLost)
	sameTask(t, "refused calls change nothing", before, e.get("f"))
	logs, err := e.s.ReadLog(e.ctx, "f", 0, 0)
	if err != nil || len(logs) != 1 {
		t.Fatalf("log after refused appends: %+v, %v", logs, err)
	}
	leaseCalls(t, e, "unknown task", norn.LeaseRef{TaskID: "nope", Worker: "w1", Lease: 1}, norn.ErrNotFound)
	// The real owner is unaffected.
	if _, err := e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{}); err != nil {
		t.Fatalf("owner heartbeat after refused calls: %v", err)
	}
	e.complete(c, "")
}

func testFencingAfterReclaim(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submitOne(norn.NewTask{ID: "f", Queue: "q", Timeout: dur(10 * time.Second), Retry: &norn.RetryPolicy{MaxRetries: 3}})
	c1 := e.claim("w1", "q")
	e.advance(11 * time.Second)
	c2 := e.claim("w2", "q")
	if c2.Lease != 2 {
		t.Fatalf("reclaimed with lease %d, want 2", c2.Lease)
	}
	before := e.get("f")
	leaseCalls(t, e, "stale lease", ref(c1), norn.ErrLeaseLost)
	// The stale owner claiming under its own name but the old lease is refused too.
	old := ref(c2)
	old.Lease = 1
	leaseCalls(t, e, "new owner, old lease", old, norn.ErrLeaseLost)
	sameTask(t, "stale calls change nothing", before, e.get("f"))
	// Exactly one lease is live: the new one.
	if _, err := e.s.Heartbeat(e.ctx, ref(c2), norn.Heartbeat{Progress: ptr(0.1)}); err != nil {
		t.Fatalf("new owner heartbeat: %v", err)
	}
	if _, err := e.s.AppendLog(e.ctx, ref(c2), norn.LogAppend{Data: json.RawMessage(`1`)}); err != nil {
		t.Fatalf("new owner log: %v", err)
	}
	e.complete(c2, `"second"`)
	g := e.get("f")
	leaseCalls(t, e, "stale lease after completion", ref(c1), norn.ErrLeaseLost)
	sameTask(t, "stale calls after completion change nothing", g, e.get("f"))
	jsonEq(t, "result", g.Result, `"second"`)
}

func testReadyTimeOrdering(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "m", Queue: "q"}, norn.NewTask{ID: "n", Queue: "q"}, norn.NewTask{ID: "a", Queue: "q", Delay: dur(30 * time.Second)})
	m := e.claim("w", "q")
	if m.ID != "m" {
		t.Fatalf("claimed %q, want m", m.ID)
	}
	e.clock.Advance(time.Second)
	if err := e.s.Yield(e.ctx, ref(m)); err != nil {
		t.Fatal(err)
	}
	e.advance(30 * time.Second)
	e.submitOne(norn.NewTask{ID: "zz", Queue: "q", Priority: 1})
	// Priority first, then the time each became ready (n at t0, m after its
	// yield at t0+1s, a when its delay elapsed), whatever the ids say.
	eqStrings(t, "claim order", ids(e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})), []string{"zz", "n", "m", "a"})
}

func testOrdering10k(t *testing.T, f Factory) {
	e := newEnv(t, f)
	rng := rand.New(rand.NewPCG(1, 2))
	prios := []uint32{0, 1, 2, 50}
	type key struct {
		prio         uint32
		batch, index int
		id           string
	}
	var all []key
	for b := 0; b < 10; b++ {
		// Later batches get smaller ids, so FIFO cannot come from id order.
		var nts []norn.NewTask
		for i := 0; i < 1000; i++ {
			k := key{prio: prios[rng.IntN(len(prios))], batch: b, index: i, id: fmt.Sprintf("%c-%04d", 'z'-b, i)}
			all = append(all, k)
			nts = append(nts, norn.NewTask{ID: k.id, Queue: "q", Priority: k.prio})
		}
		e.submit(nts...)
		e.clock.Advance(time.Millisecond)
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].prio > all[b].prio })
	want := make([]string, len(all))
	for i, k := range all {
		want[i] = k.id
	}
	var got []string
	for {
		ts := e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: norn.MaxClaim})
		if len(ts) == 0 {
			break
		}
		got = append(got, ids(ts)...)
		if len(got) > len(want) {
			t.Fatalf("claimed more tasks (%d) than submitted", len(got))
		}
	}
	eqStrings(t, "claim order of 10k tasks", got, want)
}

func testConcurrentClaims(t *testing.T, f Factory) {
	e := newEnv(t, f)
	const n, workers = 1000, 32
	var nts []norn.NewTask
	for i := 0; i < n; i++ {
		nts = append(nts, norn.NewTask{Queue: "q", Priority: uint32(i % 3)})
	}
	e.submit(nts...)
	var mu sync.Mutex
	claimed := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := fmt.Sprintf("cw-%d", g)
			for {
				ts, err := e.s.Claim(e.ctx, norn.ClaimRequest{Worker: w, Queues: []string{"q"}, N: 1 + g%4})
				if err != nil {
					errs <- fmt.Errorf("%s: Claim: %w", w, err)
					return
				}
				if len(ts) == 0 {
					return
				}
				for _, tk := range ts {
					mu.Lock()
					prev, dup := claimed[tk.ID]
					claimed[tk.ID] = w
					mu.Unlock()
					if dup {
						errs <- fmt.Errorf("task %s claimed by %s and %s", tk.ID, prev, w)
						return
					}
					if tk.Lease != 1 || tk.Owner != w || tk.Attempts != 1 {
						errs <- fmt.Errorf("task %s claimed with lease %d owner %s attempts %d", tk.ID, tk.Lease, tk.Owner, tk.Attempts)
						return
					}
				}
				for _, tk := range ts {
					if err := e.s.Complete(e.ctx, ref(tk), nil); err != nil {
						errs <- fmt.Errorf("%s: Complete %s: %w", w, tk.ID, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var msgs []string
	for err := range errs {
		msgs = append(msgs, err.Error())
	}
	if len(msgs) > 0 {
		t.Fatalf("%d errors, first: %s", len(msgs), strings.Join(clip(msgs), "\n"))
	}
	if len(claimed) != n {
		t.Fatalf("%d distinct tasks claimed, want %d", len(claimed), n)
	}
	e.claimNone("q")
	cnt, err := e.s.Count(e.ctx, norn.Filter{Statuses: []norn.Status{norn.StatusCompleted}})
	if err != nil || cnt != n {
		t.Fatalf("completed count %d, %v; want %d", cnt, err, n)
	}
}
