package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func findQueue(t *testing.T, qs []norn.QueueInfo, name string) norn.QueueInfo {
	t.Helper()
	return find(t, "queue", qs, name, func(q norn.QueueInfo) string { return q.Name })
}

func sameDefaults(t *testing.T, what string, got, want norn.QueueDefaults) {
	t.Helper()
	gr, wr := got.Retry, want.Retry
	if (gr == nil) != (wr == nil) || (gr != nil && *gr != *wr) || got.Timeout != want.Timeout ||
		got.MaxAttempts != want.MaxAttempts || got.Retention != want.Retention {
		t.Fatalf("%s: defaults %+v (retry %+v), want %+v (retry %+v)", what, got, gr, want, wr)
	}
}

func testQueues(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{Queue: "qa"}, norn.NewTask{Queue: "qa"}, norn.NewTask{Queue: "qb"})
	e.claim("w", "qb")
	if _, err := e.s.UpdateQueue(e.ctx, "qc", norn.QueueUpdate{Paused: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	qs, err := e.s.Queues(e.ctx)
	if err != nil {
		t.Fatalf("Queues: %v", err)
	}
	if len(qs) != 3 {
		t.Fatalf("Queues lists %d queues, want qa, qb, qc: %+v", len(qs), qs)
	}
	qa := findQueue(t, qs, "qa")
	if qa.Counts[norn.StatusReady] != 2 || qa.Paused {
		t.Fatalf("qa: %+v", qa)
	}
	sameDefaults(t, "qa", qa.Defaults, norn.DefaultQueueDefaults())
	if qb := findQueue(t, qs, "qb"); qb.Counts[norn.StatusRunning] != 1 || qb.Counts[norn.StatusReady] != 0 {
		t.Fatalf("qb: %+v", qb)
	}
	qc := findQueue(t, qs, "qc")
	if !qc.Paused {
		t.Fatalf("qc not paused: %+v", qc)
	}
	for s, n := range qc.Counts {
		if n != 0 {
			t.Fatalf("qc has %d %s tasks", n, s)
		}
	}
	fresh, err := e.s.Queue(e.ctx, "fresh")
	if err != nil || fresh.Name != "fresh" || fresh.Paused {
		t.Fatalf("Queue(fresh): %+v, %v", fresh, err)
	}
	sameDefaults(t, "unused queue", fresh.Defaults, norn.DefaultQueueDefaults())
	_, err = e.s.Queue(e.ctx, "bad name")
	wantErr(t, "Queue with a bad name", err, norn.ErrInvalidArgument)
}

func testQueueDefaults(t *testing.T, f Factory) {
	e := newEnv(t, f)
	pol := norn.RetryPolicy{MaxRetries: 4, Base: dur(time.Second), Max: dur(time.Minute)}
	qi, err := e.s.UpdateQueue(e.ctx, "dq", norn.QueueUpdate{Timeout: ptr(dur(30 * time.Second)), Retry: &pol, MaxAttempts: ptr(3)})
	if err != nil {
		t.Fatalf("UpdateQueue: %v", err)
	}
	want := norn.QueueDefaults{Timeout: dur(30 * time.Second), Retry: &pol, MaxAttempts: 3, Retention: norn.DefaultRetention}
	sameDefaults(t, "UpdateQueue result", qi.Defaults, want)
	a := e.submitOne(norn.NewTask{ID: "a", Queue: "dq"})
	if a.Timeout.D() != 30*time.Second || a.Retry == nil || *a.Retry != pol || a.MaxAttempts != 3 {
		t.Fatalf("queue defaults not applied at submit: %s", canonTask(a))
	}
	own := norn.RetryPolicy{MaxRetries: 1}
	b := e.submitOne(norn.NewTask{ID: "b", Queue: "dq", Timeout: dur(5 * time.Second), Retry: &own, MaxAttempts: ptr(0)})
	if b.Timeout.D() != 5*time.Second || b.Retry == nil || *b.Retry != own || b.MaxAttempts != 0 {
		t.Fatalf("task's own settings overridden by queue defaults: %s", canonTask(b))
	}
	// A partial update keeps the other defaults; tasks keep what they got.
	qi, err = e.s.UpdateQueue(e.ctx, "dq", norn.QueueUpdate{Timeout: ptr(dur(time.Minute))})
	if err != nil {
		t.Fatal(err)
	}
	want.Timeout = dur(time.Minute)
	sameDefaults(t, "after partial update", qi.Defaults, want)
	got, err := e.s.Queue(e.ctx, "dq")
	if err != nil {
		t.Fatal(err)
	}
	sameDefaults(t, "Queue after update", got.Defaults, want)
	c := e.claim("w", "dq")
	if c.ID != "a" {
		t.Fatalf("claimed %q", c.ID)
	}
	eqTime(t, "deadline from the default copied at submit", c.Deadline, e.now().Add(30*time.Second))
	if g := e.submitOne(norn.NewTask{Queue: "dq"}); g.Timeout.D() != time.Minute {
		t.Fatalf("new default timeout not applied: %v", g.Timeout)
	}
}

func testRetention(t *testing.T, f Factory) {
	e := newEnv(t, f)
	h := time.Hour
	if _, err := e.s.UpdateQueue(e.ctx, "r", norn.QueueUpdate{Retention: &norn.Retention{Completed: dur(h), Aborted: dur(2 * h), Cancelled: dur(3 * h)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.UpdateQueue(e.ctx, "keep", norn.QueueUpdate{Retention: &norn.Retention{}}); err != nil {
		t.Fatal(err)
	}
	e.submit(norn.NewTask{ID: "r1-c", Queue: "r"}, norn.NewTask{ID: "r2-a", Queue: "r"}, norn.NewTask{ID: "r3-x", Queue: "r"},
		norn.NewTask{ID: "r4-live", Queue: "r", Delay: dur(1000 * h)},
		norn.NewTask{ID: "k1-c", Queue: "keep"}, norn.NewTask{ID: "k2-a", Queue: "keep"},
		norn.NewTask{ID: "d1-c", Queue: "dflt"}, norn.NewTask{ID: "d2-a", Queue: "dflt"},
		norn.NewTask{ID: "late", Queue: "late"})
	rc := e.claim("w", "r")
	if _, err := e.s.AppendLog(e.ctx, ref(rc), norn.LogAppend{Data: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	e.complete(rc, "")
	if err := e.s.Abort(e.ctx, ref(e.claim("w", "r")), norn.ErrorInfo{Code: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Cancel(e.ctx, "r3-x"); err != nil {
		t.Fatal(err)
	}
	e.complete(e.claim("w", "keep"), "")
	if err := e.s.Fail(e.ctx, ref(e.claim("w", "keep")), norn.ErrorInfo{Code: "x"}); err != nil {
		t.Fatal(err)
	}
	e.complete(e.claim("w", "dflt"), "")
	if err := e.s.Abort(e.ctx, ref(e.claim("w", "dflt")), norn.ErrorInfo{Code: "x"}); err != nil {
		t.Fatal(err)
	}
	e.complete(e.claim("w", "late"), "")
	present := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			e.get(id)
		}
	}
	e.advance(59 * time.Minute)
	present("r1-c", "r2-a", "r3-x", "r4-live", "k1-c", "k2-a", "d1-c", "d2-a", "late")
	e.advance(2 * time.Minute) // 1h01m
	e.gone("r1-c")
	_, err := e.s.ReadLog(e.ctx, "r1-c", 0, 0)
	wantErr(t, "ReadLog of a purged task", err, norn.ErrNotFound)
	present("r2-a", "r3-x")
	e.advance(h) // 2h01m
	e.gone("r2-a")
	present("r3-x")
	// Retention in force at sweep time applies, measured from completion.
	if _, err := e.s.UpdateQueue(e.ctx, "late", norn.QueueUpdate{Retention: &norn.Retention{Completed: dur(2 * h), Aborted: dur(h), Cancelled: dur(h)}}); err != nil {
		t.Fatal(err)
	}
	e.advance(h) // 3h01m
	e.gone("r3-x")
	e.gone("late")
	e.advance(20 * h) // 23h01m
	present("d1-c", "d2-a", "k1-c", "k2-a", "r4-live")
	e.advance(2 * h) // 25h01m
	e.gone("d1-c")
	present("d2-a")
	e.advance(7 * 24 * h) // past 7 days
	e.gone("d2-a")
	present("k1-c", "k2-a", "r4-live")
	n, err := e.s.Count(e.ctx, norn.Filter{})
	if err != nil || n != 3 {
		t.Fatalf("Count after purges = %d, %v; want 3", n, err)
	}
}

func testStats(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{Queue: "qa"}, norn.NewTask{Queue: "qa"}, norn.NewTask{Queue: "qa"},
		norn.NewTask{Queue: "qb", Delay: dur(time.Hour)}, norn.NewTask{Queue: "qb", Delay: dur(time.Hour)})
	e.claim("w", "qa")
	e.complete(e.claim("w", "qa"), "")
	st, err := e.s.Stats(e.ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	groups, err := e.s.CountGrouped(e.ctx, norn.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(st.Counts) != fmt.Sprint(groups) {
		t.Fatalf("Stats counts %v, CountGrouped %v", st.Counts, groups)
	}
	want := fmt.Sprint([]norn.GroupCount{{Queue: "qa", Status: norn.StatusReady, Count: 1}, {Queue: "qa", Status: norn.StatusRunning, Count: 1},
		{Queue: "qa", Status: norn.StatusCompleted, Count: 1}, {Queue: "qb", Status: norn.StatusScheduled, Count: 2}})
	if fmt.Sprint(groups) != want {
		t.Fatalf("CountGrouped %v, want %v", groups, want)
	}
	if st.Total != 5 || st.Totals[norn.StatusReady] != 1 || st.Totals[norn.StatusRunning] != 1 ||
		st.Totals[norn.StatusCompleted] != 1 || st.Totals[norn.StatusScheduled] != 2 || st.Totals[norn.StatusAborted] != 0 {
		t.Fatalf("Stats totals %v total %d", st.Totals, st.Total)
	}
}

// events reads a stream into a channel until ctx ends.
func events(t *testing.T, e *testBundle, f norn.EventFilter) <-chan norn.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	st, err := e.s.Subscribe(ctx, f)
	if err != nil {
		cancel()
		t.Fatalf("Subscribe: %v", err)
	}
	ch := make(chan norn.Event, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		for st.Next() {
			select {
			case ch <- st.Item():
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("event stream: Next still blocked 10s after its context was cancelled")
		}
		st.Close()
	})
	return ch
}

// nextEvent returns the next event that is not a lag marker.
func nextEvent(t *testing.T, what string, ch <-chan norn.Event) norn.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("%s: event stream ended", what)
			}
			if ev.Kind == norn.EventLagged {
				t.Fatalf("%s: subscriber lagged with only a handful of events", what)
			}
			return ev
		case <-timeout:
			t.Fatalf("%s: no event within 10s", what)
		}
	}
}

func wantEvent(t *testing.T, what string, ch <-chan norn.Event, kind norn.EventKind, id, queue string, status norn.Status) norn.Event {
	t.Helper()
	ev := nextEvent(t, what, ch)
	if ev.Kind != kind || ev.TaskID != id || ev.Queue != queue || ev.Status != status {
		t.Fatalf("%s: event %+v, want %s of %s in %s (%s)", what, ev, kind, id, queue, status)
	}
	return ev
}

func testSubscribe(t *testing.T, f Factory) {
	e := newEnv(t, f)
	all := events(t, e, norn.EventFilter{})
	byQueue := events(t, e, norn.EventFilter{Queues: []string{"q2"}})
	byTask := events(t, e, norn.EventFilter{TaskID: "x2"})
	x1 := e.submitOne(norn.NewTask{ID: "x1", Queue: "q1"})
	ev := wantEvent(t, "submit", all, norn.EventSubmitted, "x1", "q1", norn.StatusReady)
	if ev.Version != x1.Version || !ev.Time.Equal(e.now()) {
		t.Fatalf("submit event %+v, want version %d at %v", ev, x1.Version, e.now())
	}
	c := e.claim("w", "q1")
	ev = wantEvent(t, "claim", all, norn.EventKind(norn.TaskAssignment), "x1", "q1", norn.StatusRunning)
	if ev.Version != c.Version {
		t.Fatalf("claim event version %d, want %d", ev.Version, c.Version)
	}
	e.complete(c, "")
	wantEvent(t, "complete", all, norn.EventKind(norn.TaskComplete), "x1", "q1", norn.StatusCompleted)
	// Filtered subscribers saw none of that: their first event is for x2.
	e.submitOne(norn.NewTask{ID: "x2", Queue: "q2"})
	wantEvent(t, "queue filter", byQueue, norn.EventSubmitted, "x2", "q2", norn.StatusReady)
	wantEvent(t, "task filter", byTask, norn.EventSubmitted, "x2", "q2", norn.StatusReady)
	wantEvent(t, "unfiltered", all, norn.EventSubmitted, "x2", "q2", norn.StatusReady)
	e.submitOne(norn.NewTask{ID: "x3", Queue: "q2"})
	if _, err := e.s.Cancel(e.ctx, "x2"); err != nil {
		t.Fatal(err)
	}
	wantEvent(t, "queue filter", byQueue, norn.EventSubmitted, "x3", "q2", norn.StatusReady)
	wantEvent(t, "queue filter", byQueue, norn.EventKind(norn.TaskCancel), "x2", "q2", norn.StatusCancelled)
	wantEvent(t, "task filter skips x3", byTask, norn.EventKind(norn.TaskCancel), "x2", "q2", norn.StatusCancelled)
	// Monitor-driven changes are events too.
	e.submitOne(norn.NewTask{ID: "x4", Queue: "q2", Delay: dur(time.Minute)})
	wantEvent(t, "delayed submit", byQueue, norn.EventSubmitted, "x4", "q2", norn.StatusScheduled)
	e.advance(2 * time.Minute)
	wantEvent(t, "release", byQueue, norn.EventKind(norn.TaskRelease), "x4", "q2", norn.StatusReady)
	e.claim("w", "q2")
	wantEvent(t, "claim", byQueue, norn.EventKind(norn.TaskAssignment), "x3", "q2", norn.StatusRunning)
	e.advance(norn.DefaultTimeout + time.Second)
	wantEvent(t, "timeout", byQueue, norn.EventKind(norn.TaskTimeout), "x3", "q2", norn.StatusReady)
}
