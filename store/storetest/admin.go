package storetest

import (
	"context"
	"fmt"
	"slices"
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

func (b *testBundle) updateQueue(name string, u norn.QueueUpdate) norn.QueueInfo {
	b.t.Helper()
	qi, err := b.s.UpdateQueue(b.ctx, name, u)
	b.must(err, "UpdateQueue(%q, %+v)", name, u)
	return qi
}

func exerciseQueues(t *testing.T, setup setupFunc) {
	exerciseQueuesQueues(t, setup)
	exerciseQueuesUpdateQueue(t, setup)
	exerciseQueuesRetention(t, setup)
	exerciseQueuesStats(t, setup)
}

func exerciseQueuesQueues(t *testing.T, setup setupFunc) {
	t.Run("Queues", func(t *testing.T) {
		t.Parallel()

		t.Run("ListsQueuesInUseOrConfiguredWithTheirCounts", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(norn.NewTask{Queue: "qa"}, norn.NewTask{Queue: "qa"}, norn.NewTask{Queue: "qb"})
			b.claim("w", "qb")
			b.updateQueue("qc", norn.QueueUpdate{Paused: ptr(true)})
			qs, err := s.Queues(b.ctx)
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
		})

		t.Run("UnusedQueueHasTheDefaults", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			fresh, err := s.Queue(b.ctx, "fresh")
			if err != nil || fresh.Name != "fresh" || fresh.Paused {
				t.Fatalf("Queue(fresh): %+v, %v", fresh, err)
			}
			sameDefaults(t, "unused queue", fresh.Defaults, norn.DefaultQueueDefaults())
		})

		t.Run("RefusesABadName", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			_, err := s.Queue(b.ctx, "bad name")
			wantErr(t, "Queue with a bad name", err, norn.ErrInvalidArgument)
		})
	})
}

func exerciseQueuesUpdateQueue(t *testing.T, setup setupFunc) {
	t.Run("UpdateQueue", func(t *testing.T) {
		t.Parallel()

		t.Run("SetsDefaultsThatSubmitCopies", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			qi, want := queuesConfigured(b)
			sameDefaults(t, "UpdateQueue result", qi.Defaults, want)
			a := b.submitOne(norn.NewTask{ID: "a", Queue: "dq"})
			if a.Timeout.D() != 30*time.Second || a.Retry == nil || *a.Retry != queuesPol || a.MaxAttempts != 3 {
				t.Fatalf("queue defaults not applied at submit: %s", canonTask(a))
			}
		})

		t.Run("TaskSettingsOverrideTheDefaults", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			queuesConfigured(b)
			own := norn.RetryPolicy{MaxRetries: 1}
			tk := b.submitOne(norn.NewTask{ID: "b", Queue: "dq", Timeout: dur(5 * time.Second), Retry: &own, MaxAttempts: ptr(0)})
			if tk.Timeout.D() != 5*time.Second || tk.Retry == nil || *tk.Retry != own || tk.MaxAttempts != 0 {
				t.Fatalf("task's own settings overridden by queue defaults: %s", canonTask(tk))
			}
		})

		t.Run("PartialUpdateKeepsTheOtherDefaults", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			_, want := queuesConfigured(b)
			qi := b.updateQueue("dq", norn.QueueUpdate{Timeout: ptr(dur(time.Minute))})
			want.Timeout = dur(time.Minute)
			sameDefaults(t, "after partial update", qi.Defaults, want)
			got, err := s.Queue(b.ctx, "dq")
			if err != nil {
				t.Fatal(err)
			}
			sameDefaults(t, "Queue after update", got.Defaults, want)
		})

		t.Run("TasksKeepTheDefaultsCopiedAtSubmit", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			queuesConfigured(b)
			b.submitOne(norn.NewTask{ID: "a", Queue: "dq"})
			b.updateQueue("dq", norn.QueueUpdate{Timeout: ptr(dur(time.Minute))})
			c := b.claimID("w", "a", "dq")
			eqTime(t, "deadline from the default copied at submit", c.Deadline, b.now().Add(30*time.Second))
			if g := b.submitOne(norn.NewTask{Queue: "dq"}); g.Timeout.D() != time.Minute {
				t.Fatalf("new default timeout not applied: %v", g.Timeout)
			}
		})
	})
}

func exerciseQueuesRetention(t *testing.T, setup setupFunc) {
	t.Run("Retention", func(t *testing.T) {
		t.Parallel()

		t.Run("PurgesEachOutcomeAfterItsQueuesRetention", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.updateQueue("r", norn.QueueUpdate{Retention: &norn.Retention{Completed: dur(queuesH), Aborted: dur(2 * queuesH), Cancelled: dur(3 * queuesH)}})
			b.submitOne(norn.NewTask{ID: "r-live", Queue: "r", Delay: dur(1000 * queuesH)})
			queuesFinished(b, "r", true)
			b.advance(59 * time.Minute)
			queuesPresent(b, "r-completed", "r-aborted", "r-cancelled", "r-live")
			b.advance(2 * time.Minute) // 1h01m
			b.gone("r-completed")
			_, err := s.ReadLog(b.ctx, "r-completed", 0, 0)
			wantErr(t, "ReadLog of a purged task", err, norn.ErrNotFound)
			queuesPresent(b, "r-aborted", "r-cancelled")
			b.advance(queuesH) // 2h01m
			b.gone("r-aborted")
			queuesPresent(b, "r-cancelled")
			b.advance(queuesH) // 3h01m
			b.gone("r-cancelled")
			b.advance(8 * 24 * queuesH)
			queuesPresent(b, "r-live")
			b.count(norn.Filter{}, 1)
		})

		t.Run("ZeroKeepsForever", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.updateQueue("keep", norn.QueueUpdate{Retention: &norn.Retention{}})
			queuesFinished(b, "keep", true)
			b.fail(b.claimed("w", norn.NewTask{ID: "keep-failed", Queue: "keep"}), "x")
			b.advance(8 * 24 * queuesH)
			queuesPresent(b, "keep-completed", "keep-aborted", "keep-cancelled", "keep-failed")
		})

		t.Run("DefaultKeepsCompletedADayAndAbortedAWeek", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			queuesFinished(b, "dflt", false)
			b.advance(23*queuesH + time.Minute)
			queuesPresent(b, "dflt-completed", "dflt-aborted")
			b.advance(2 * queuesH) // 25h01m
			b.gone("dflt-completed")
			queuesPresent(b, "dflt-aborted")
			b.advance(7 * 24 * queuesH) // past 7 days
			b.gone("dflt-aborted")
		})

		t.Run("SettingInForceAtSweepTimeAppliesFromCompletion", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.complete(b.claimed("w", norn.NewTask{ID: "late", Queue: "late"}), "")
			b.advance(2*queuesH + time.Minute)
			queuesPresent(b, "late")
			b.updateQueue("late", norn.QueueUpdate{Retention: &norn.Retention{Completed: dur(2 * queuesH), Aborted: dur(queuesH), Cancelled: dur(queuesH)}})
			b.advance(queuesH) // 3h01m
			b.gone("late")
		})
	})
}

func exerciseQueuesStats(t *testing.T, setup setupFunc) {
	t.Run("Stats", func(t *testing.T) {
		t.Parallel()

		t.Run("CountsByQueueAndStatusAsCountGroupedDoes", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(norn.NewTask{Queue: "qa"}, norn.NewTask{Queue: "qa"}, norn.NewTask{Queue: "qa"},
				norn.NewTask{Queue: "qb", Delay: dur(time.Hour)}, norn.NewTask{Queue: "qb", Delay: dur(time.Hour)})
			b.claim("w", "qa")
			b.complete(b.claim("w", "qa"), "")
			st, err := s.Stats(b.ctx)
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			groups, err := s.CountGrouped(b.ctx, norn.Filter{})
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
		})
	})
}

var queuesPol = norn.RetryPolicy{MaxRetries: 4, Base: dur(time.Second), Max: dur(time.Minute)}

// queuesConfigured gives queue dq a timeout, retry policy and max attempts,
// and returns the defaults it then has.
func queuesConfigured(b *testBundle) (norn.QueueInfo, norn.QueueDefaults) {
	qi := b.updateQueue("dq", norn.QueueUpdate{Timeout: ptr(dur(30 * time.Second)), Retry: &queuesPol, MaxAttempts: ptr(3)})
	return qi, norn.QueueDefaults{Timeout: dur(30 * time.Second), Retry: &queuesPol, MaxAttempts: 3, Retention: norn.DefaultRetention}
}

const queuesH = time.Hour

// queuesFinished completes and aborts one task each in queue q, and cancels a
// third if withCancel.
func queuesFinished(b *testBundle, q string, withCancel bool) {
	b.submit(norn.NewTask{ID: q + "-completed", Queue: q, Priority: 1}, norn.NewTask{ID: q + "-aborted", Queue: q})
	c := b.claimID("w", q+"-completed", q)
	b.appendLog(c, `1`)
	b.complete(c, "")
	b.abort(b.claimID("w", q+"-aborted", q), "x")
	if withCancel {
		b.submitOne(norn.NewTask{ID: q + "-cancelled", Queue: q})
		b.cancel(q + "-cancelled")
	}
}

func queuesPresent(b *testBundle, ids ...string) {
	b.t.Helper()
	for _, id := range ids {
		b.get(id)
	}
}

// events reads a stream into a channel until ctx ends.
func (b *testBundle) events(f norn.EventFilter) <-chan norn.Event {
	t := b.t
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	st, err := b.s.Subscribe(ctx, f)
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

func exerciseSubscribe(t *testing.T, setup setupFunc) {
	t.Run("Subscribe", func(t *testing.T) {
		t.Parallel()
		exerciseSubscribeEvents(t, setup)
		exerciseSubscribeMonitorEvents(t, setup)
	})
}

func exerciseSubscribeEvents(t *testing.T, setup setupFunc) {
	t.Run("DeliversADependentReleasedByAFailureAndADelete", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		all := b.events(norn.EventFilter{Queues: []string{"d"}})
		b.submit(norn.NewTask{ID: "p", Queue: "q", MaxAttempts: ptr(1)},
			norn.NewTask{ID: "d", Queue: "d", DependsOn: []string{"p"}, OnDependencyFailure: norn.DependencyRun})
		wantEvent(t, "submit", all, norn.EventSubmitted, "d", "d", norn.StatusBlocked)
		b.fail(b.claim("w", "q"), "boom")
		// Released by the cascade of a failure, which aborts nothing.
		ev := wantEvent(t, "release", all, norn.EventKind(norn.TaskRelease), "d", "d", norn.StatusReady)
		b.delete("d")
		del := wantEvent(t, "delete", all, norn.EventDeleted, "d", "d", norn.StatusReady)
		if del.Version != ev.Version+1 {
			t.Fatalf("delete event version %d, want one past the task's last, %d", del.Version, ev.Version+1)
		}
	})
	t.Run("DeliversSubmitClaimAndCompleteInOrder", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		all := b.events(norn.EventFilter{})
		x1 := b.submitOne(norn.NewTask{ID: "x1", Queue: "q1"})
		ev := wantEvent(t, "submit", all, norn.EventSubmitted, "x1", "q1", norn.StatusReady)
		if ev.Version != x1.Version || !ev.Time.Equal(b.now()) {
			t.Fatalf("submit event %+v, want version %d at %v", ev, x1.Version, b.now())
		}
		c := b.claim("w", "q1")
		ev = wantEvent(t, "claim", all, norn.EventKind(norn.TaskAssignment), "x1", "q1", norn.StatusRunning)
		if ev.Version != c.Version {
			t.Fatalf("claim event version %d, want %d", ev.Version, c.Version)
		}
		b.complete(c, "")
		wantEvent(t, "complete", all, norn.EventKind(norn.TaskComplete), "x1", "q1", norn.StatusCompleted)
	})

	t.Run("QueueAndTaskFiltersSelectEvents", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		all := b.events(norn.EventFilter{})
		byQueue := b.events(norn.EventFilter{Queues: []string{"q2"}})
		byTask := b.events(norn.EventFilter{TaskID: "x2"})
		b.complete(b.claimed("w", norn.NewTask{ID: "x1", Queue: "q1"}), "")
		for _, kind := range []norn.EventKind{norn.EventSubmitted, norn.EventKind(norn.TaskAssignment), norn.EventKind(norn.TaskComplete)} {
			if ev := nextEvent(t, "unfiltered", all); ev.Kind != kind || ev.TaskID != "x1" {
				t.Fatalf("unfiltered: event %+v, want %s of x1", ev, kind)
			}
		}
		// Filtered subscribers saw none of that: their first event is for x2.
		b.submitOne(norn.NewTask{ID: "x2", Queue: "q2"})
		wantEvent(t, "queue filter", byQueue, norn.EventSubmitted, "x2", "q2", norn.StatusReady)
		wantEvent(t, "task filter", byTask, norn.EventSubmitted, "x2", "q2", norn.StatusReady)
		wantEvent(t, "unfiltered", all, norn.EventSubmitted, "x2", "q2", norn.StatusReady)
		b.submitOne(norn.NewTask{ID: "x3", Queue: "q2"})
		b.cancel("x2")
		wantEvent(t, "queue filter", byQueue, norn.EventSubmitted, "x3", "q2", norn.StatusReady)
		wantEvent(t, "queue filter", byQueue, norn.EventKind(norn.TaskCancel), "x2", "q2", norn.StatusCancelled)
		wantEvent(t, "task filter skips x3", byTask, norn.EventKind(norn.TaskCancel), "x2", "q2", norn.StatusCancelled)
	})

	t.Run("CountsSubscriptionCountsEveryTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		counts := b.events(norn.EventFilter{Queues: []string{"q1"}, Counts: true})
		b.submit(norn.NewTask{Queue: "q1"}, norn.NewTask{Queue: "q1"}, norn.NewTask{Queue: "q1"},
			norn.NewTask{Queue: "q1"}, norn.NewTask{Queue: "q1"}, norn.NewTask{Queue: "q2"})
		for _, tk := range b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q1"}, N: 5}) {
			b.complete(tk, "")
		}
		x := b.submitOne(norn.NewTask{ID: "x", Queue: "q1"})
		b.cancel(x.ID)
		// A store may deliver the counted kinds one per task or counted;
		// either way every task is counted once, and other kinds come
		// one per task.
		want := map[norn.EventKind]int{norn.EventSubmitted: 6, norn.EventKind(norn.TaskAssignment): 5,
			norn.EventKind(norn.TaskComplete): 5, norn.EventKind(norn.TaskCancel): 1}
		got := map[norn.EventKind]int{}
		for fmt.Sprint(got) != fmt.Sprint(want) {
			ev := nextEvent(t, "counts", counts)
			switch {
			case ev.Queue != "q1":
				t.Fatalf("event %+v of another queue", ev)
			case ev.Count < 0 || ev.Count > 0 && (ev.TaskID != "" || ev.Version != 0):
				t.Fatalf("malformed counted event %+v", ev)
			case ev.Count > 0 && !slices.Contains(norn.CountedKinds, ev.Kind):
				t.Fatalf("counted event %+v of a kind that is not counted", ev)
			case ev.Count == 0 && ev.TaskID == "":
				t.Fatalf("event %+v names no task and counts none", ev)
			}
			if ev.Kind == norn.EventKind(norn.TaskCancel) && ev.TaskID != "x" {
				t.Fatalf("cancel event %+v, want one for x", ev)
			}
			got[ev.Kind] += ev.Tasks()
			for k, n := range got {
				if n > want[k] {
					t.Fatalf("counted %d events of %s, want %d (all: %v)", n, k, want[k], got)
				}
			}
		}
	})
}

func exerciseSubscribeMonitorEvents(t *testing.T, setup setupFunc) {
	t.Run("DeliversMonitorDrivenChanges", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		byQueue := b.events(norn.EventFilter{Queues: []string{"q2"}})
		b.submitOne(norn.NewTask{ID: "x3", Queue: "q2"})
		wantEvent(t, "submit", byQueue, norn.EventSubmitted, "x3", "q2", norn.StatusReady)
		b.submitOne(norn.NewTask{ID: "x4", Queue: "q2", Delay: dur(time.Minute)})
		wantEvent(t, "delayed submit", byQueue, norn.EventSubmitted, "x4", "q2", norn.StatusScheduled)
		b.advance(2 * time.Minute)
		wantEvent(t, "release", byQueue, norn.EventKind(norn.TaskRelease), "x4", "q2", norn.StatusReady)
		b.claim("w", "q2")
		wantEvent(t, "claim", byQueue, norn.EventKind(norn.TaskAssignment), "x3", "q2", norn.StatusRunning)
		b.advance(norn.DefaultTimeout + time.Second)
		wantEvent(t, "timeout", byQueue, norn.EventKind(norn.TaskTimeout), "x3", "q2", norn.StatusReady)
	})
}
