package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func exerciseRetry(t *testing.T, setup setupFunc) {
	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		exerciseRetryStatuses(t, setup)
		exerciseRetryLeasesAndDependencies(t, setup)
		exerciseRetryDependents(t, setup)
		exerciseRetryMatchingAndUniqueKeys(t, setup)
		exerciseRetryHeldKeysAndBatches(t, setup)
	})
}

func exerciseRetryStatuses(t *testing.T, setup setupFunc) {
	t.Run("RetriesAnAbortedTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		retryAborted(b, norn.NewTask{ID: "x", Queue: "q", MaxAttempts: ptr(3)})
		b.clock.Advance(time.Minute)
		got := retryRetry(b, "x", norn.RetryOptions{})
		g := b.status("x", norn.StatusReady)
		sameTask(t, "Retry result", g, got)
		if g.Attempts != 0 || g.Lease != 1 || g.Progress != 0 || !g.Deadline.IsZero() || g.Owner != "w1" || !g.RunAt.Equal(b.now()) {
			t.Fatalf("retried task: %s", canonTask(g))
		}
		lastError(t, g, "boom")
		lastHistory(t, g, norn.TaskRedrive, b.now())
		eqStrings(t, "history", typesOf(g), []string{"TaskAssignment", "TaskAbort", "TaskRedrive"})
		c := b.claimID("w2", "x", "q")
		if c.Attempts != 1 {
			t.Fatalf("claim after retry: attempts %d, want 1 (restarted from 0)", c.Attempts)
		}
	})

	t.Run("RetriesACancelledTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "x", Queue: "q", Delay: dur(time.Hour)})
		b.cancel("x")
		got := retryRetry(b, "x", norn.RetryOptions{})
		if got.Status != norn.StatusReady || !got.RunAt.Equal(b.now()) {
			t.Fatalf("retried cancelled task: %s", canonTask(got))
		}
		eqStrings(t, "history", typesOf(got), []string{"TaskCancel", "TaskRedrive"})
		b.claimID("w1", "x", "q")
	})

	t.Run("RunAtSchedulesIt", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		retryAborted(b, norn.NewTask{ID: "x", Queue: "q"})
		retryRetry(b, "x", norn.RetryOptions{RunAt: b.now().Add(time.Hour)})
		g := b.status("x", norn.StatusScheduled)
		eqTime(t, "run_at", g.RunAt, b.now().Add(time.Hour))
		b.advance(59 * time.Minute)
		b.claimNone("q")
		b.advance(time.Minute)
		b.claimID("w2", "x", "q")
	})

	t.Run("PastRunAtMakesItReady", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		retryAborted(b, norn.NewTask{ID: "x", Queue: "q"})
		retryRetry(b, "x", norn.RetryOptions{RunAt: b.now().Add(-time.Hour)})
		b.status("x", norn.StatusReady)
	})

	t.Run("RefusesACompletedTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "x", Queue: "q"})
		b.complete(c, `{"ok":true}`)
		before := b.snapshot()
		_, err := b.s.Retry(b.ctx, "x", norn.RetryOptions{})
		wantErr(t, "Retry(completed)", err, norn.ErrConflict)
		if !strings.Contains(err.Error(), "completed") {
			t.Fatalf("Retry(completed) error %q does not name the status", err)
		}
		b.unchanged("refused retry", before)
	})

	t.Run("RefusesAPendingTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "r", Queue: "q"}, norn.NewTask{ID: "s", Queue: "q", Delay: dur(time.Hour)})
		b.claimed("w1", norn.NewTask{ID: "run", Queue: "p"})
		before := b.snapshot()
		for id, st := range map[string]string{"r": "ready", "s": "scheduled", "run": "running"} {
			_, err := b.s.Retry(b.ctx, id, norn.RetryOptions{})
			wantErr(t, "Retry("+st+")", err, norn.ErrConflict)
			if !strings.Contains(err.Error(), st) {
				t.Fatalf("Retry(%s) error %q does not name the status", st, err)
			}
		}
		b.unchanged("refused retries", before)
	})

	t.Run("UnknownTaskIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.Retry(b.ctx, "nope", norn.RetryOptions{})
		wantErr(t, "Retry(nope)", err, norn.ErrNotFound)
	})
}

func exerciseRetryLeasesAndDependencies(t *testing.T, setup setupFunc) {
	t.Run("LeaseKeepsIncreasing", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c1 := retryAborted(b, norn.NewTask{ID: "x", Queue: "q"})
		retryRetry(b, "x", norn.RetryOptions{})
		c2 := b.claimID("w1", "x", "q")
		if c2.Lease != c1.Lease+1 {
			t.Fatalf("lease after retry %d, want %d", c2.Lease, c1.Lease+1)
		}
		// The first attempt's lease stays dead: its owner is fenced out.
		_, err := s.Heartbeat(b.ctx, ref(c1), norn.Heartbeat{})
		wantErr(t, "Heartbeat(old lease)", err, norn.ErrLeaseLost)
		err = s.Complete(b.ctx, ref(c1), nil)
		wantErr(t, "Complete(old lease)", err, norn.ErrLeaseLost)
		b.complete(c2, "")
	})

	t.Run("RetriedTaskNotPurgedByRetention", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{Retention: &norn.Retention{Aborted: dur(time.Hour)}})
		b.must(err, "UpdateQueue")
		retryAborted(b, norn.NewTask{ID: "x", Queue: "q"})
		b.advance(50 * time.Minute)
		retryRetry(b, "x", norn.RetryOptions{RunAt: b.now().Add(3 * time.Hour)})
		b.advance(2 * time.Hour)
		b.status("x", norn.StatusScheduled)
		// Aborted again, retention counts from this end.
		b.advance(time.Hour)
		c := b.claimID("w1", "x", "q")
		b.abort(c, "boom")
		b.advance(59 * time.Minute)
		b.status("x", norn.StatusAborted)
		b.advance(2 * time.Minute)
		b.gone("x")
	})

	t.Run("DependencyFailedIsAConflict", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}})
		b.cancel("a")
		b.status("b", norn.StatusAborted)
		before := b.snapshot()
		_, err := b.s.Retry(b.ctx, "b", norn.RetryOptions{})
		wantErr(t, "Retry(dependent of a cancelled task)", err, norn.ErrConflict)
		if !strings.Contains(err.Error(), `"a"`) {
			t.Fatalf("error %q does not name the failed dependency", err)
		}
		b.unchanged("refused retry", before)
	})

	t.Run("CancelledWhileBlockedWaitsAgain", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "c", Queue: "q"},
			norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a", "c"}})
		b.cancel("b")
		got := retryRetry(b, "b", norn.RetryOptions{})
		if got.Status != norn.StatusBlocked {
			t.Fatalf("retried blocked-then-cancelled task: %s, want blocked", got.Status)
		}
		// Each completion counts once: b waits for both.
		b.complete(b.claimID("w1", "a", "q"), "")
		b.status("b", norn.StatusBlocked)
		b.complete(b.claimID("w1", "c", "q"), "")
		b.status("b", norn.StatusReady)
	})

	t.Run("WithoutDependentsLeavesThemAborted", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}})
		b.abort(b.claimID("w1", "a", "q"), "boom")
		retryRetry(b, "a", norn.RetryOptions{})
		b.status("b", norn.StatusAborted)
	})
}

func exerciseRetryDependents(t *testing.T, setup setupFunc) {
	t.Run("WithDependentsBringsBackBlockedDependents", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		// b and d wait for a; c waits for b; d also waits for e (still
		// pending); f waits for a and for g, which fails on its own; h
		// waits for f. Other waits for an unrelated task that failed.
		b.submit(
			norn.NewTask{ID: "a", Queue: "q", Priority: 9},
			norn.NewTask{ID: "e", Queue: "q", Delay: dur(2 * time.Hour)},
			norn.NewTask{ID: "g", Queue: "p", Delay: dur(time.Hour)},
			norn.NewTask{ID: "o", Queue: "p", Delay: dur(time.Hour)},
			norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}},
			norn.NewTask{ID: "c", Queue: "other", DependsOn: []string{"b"}},
			norn.NewTask{ID: "d", Queue: "q", DependsOn: []string{"e", "a"}},
			norn.NewTask{ID: "f", Queue: "q", DependsOn: []string{"g", "a"}},
			norn.NewTask{ID: "h", Queue: "q", DependsOn: []string{"f"}},
			norn.NewTask{ID: "other", Queue: "q", DependsOn: []string{"o"}},
		)
		b.cancel("g")
		b.cancel("o")
		b.status("f", norn.StatusAborted)
		b.status("h", norn.StatusAborted)
		b.abort(b.claimID("w1", "a", "q"), "boom")
		for _, id := range []string{"b", "c", "d"} {
			b.status(id, norn.StatusAborted)
		}
		b.clock.Advance(time.Minute)
		retryRetry(b, "a", norn.RetryOptions{WithDependents: true})
		b.status("a", norn.StatusReady)
		for _, id := range []string{"b", "c", "d"} {
			g := b.status(id, norn.StatusBlocked)
			lastHistory(t, g, norn.TaskRedrive, b.now())
			lastError(t, g, norn.CodeDependencyFailed)
		}
		for _, id := range []string{"f", "h", "other"} {
			b.status(id, norn.StatusAborted)
		}
		// The dependency counters are back: a's completion releases b
		// only; d waits for e too; c for b.
		b.complete(b.claimID("w1", "a", "q"), "")
		b.status("b", norn.StatusReady)
		b.status("c", norn.StatusBlocked)
		b.status("d", norn.StatusBlocked)
		b.complete(b.claimID("w1", "b", "q"), "")
		b.status("c", norn.StatusReady)
		b.advance(2 * time.Hour)
		b.complete(b.claimID("w1", "e", "q"), "")
		b.status("d", norn.StatusReady)
	})

	t.Run("WithDependentsBringsBackSubmittedAfterTheFailure", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"})
		b.cancel("a")
		// Submitted depending on a task that had already failed: aborted at once.
		b.submit(norn.NewTask{ID: "late", Queue: "q", DependsOn: []string{"a"}})
		b.status("late", norn.StatusAborted)
		retryRetry(b, "a", norn.RetryOptions{WithDependents: true})
		b.status("late", norn.StatusBlocked)
		b.complete(b.claimID("w1", "a", "q"), "")
		b.status("late", norn.StatusReady)
	})

	t.Run("RetryMatchingNeedsAFilter", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "x", Queue: "q"})
		b.cancel("x")
		before := b.snapshot()
		_, err := s.RetryMatching(b.ctx, norn.Filter{})
		wantField(t, "RetryMatching(empty)", err, norn.ErrInvalidArgument, "filter")
		b.unchanged("refused retry", before)
	})
}

func exerciseRetryMatchingAndUniqueKeys(t *testing.T, setup setupFunc) {
	t.Run("RetryMatchingSkipsOthers", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(
			norn.NewTask{ID: "ready", Queue: "q"},
			norn.NewTask{ID: "cancelled", Queue: "q"},
			norn.NewTask{ID: "elsewhere", Queue: "p"},
		)
		b.cancel("cancelled")
		b.cancel("elsewhere")
		retryAborted(b, norn.NewTask{ID: "aborted", Queue: "q", Priority: 5})
		b.complete(b.claimed("w1", norn.NewTask{ID: "done", Queue: "q", Priority: 5}), "")
		n, err := s.RetryMatching(b.ctx, norn.Filter{Queues: []string{"q"}})
		b.must(err, "RetryMatching")
		if n != 2 {
			t.Fatalf("RetryMatching retried %d, want 2", n)
		}
		for _, id := range []string{"ready", "cancelled", "aborted"} {
			b.status(id, norn.StatusReady)
		}
		b.status("done", norn.StatusCompleted)
		b.status("elsewhere", norn.StatusCancelled)
		lastHistory(t, b.get("aborted"), norn.TaskRedrive, b.now())
		// Statuses that cannot be retried match nothing.
		n, err = s.RetryMatching(b.ctx, norn.Filter{Statuses: []norn.Status{norn.StatusCompleted}})
		if err != nil || n != 0 {
			t.Fatalf("RetryMatching(completed) = %d, %v; want 0", n, err)
		}
		b.status("done", norn.StatusCompleted)
	})

	t.Run("UniqueKeyHeldByAnotherLiveTaskIsAConflict", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "old", Queue: "q", UniqueKey: "k"})
		b.cancel("old")
		// The key is free once old ended, so new takes it.
		b.submit(norn.NewTask{ID: "new", Queue: "q", UniqueKey: "k"})
		before := b.snapshot()
		_, err := b.s.Retry(b.ctx, "old", norn.RetryOptions{})
		wantErr(t, "Retry(old) while new holds its key", err, norn.ErrConflict)
		if !strings.Contains(err.Error(), `"new"`) {
			t.Fatalf("Retry error %q does not name the holder", err)
		}
		b.unchanged("refused retry", before)
		// Once the holder ended, the retry goes through.
		b.cancel("new")
		retryRetry(b, "old", norn.RetryOptions{})
		b.status("old", norn.StatusReady)
	})

	t.Run("UniqueKeyOfAnotherQueueDoesNotMatter", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "x", Queue: "q", UniqueKey: "k"})
		b.cancel("x")
		b.submit(norn.NewTask{ID: "y", Queue: "p", UniqueKey: "k"})
		retryRetry(b, "x", norn.RetryOptions{})
		b.status("x", norn.StatusReady)
	})

	t.Run("RetryMatchingBringsBackOneHolderPerKey", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "k1", Queue: "q", UniqueKey: "k"})
		b.cancel("k1")
		b.submit(norn.NewTask{ID: "k2", Queue: "q", UniqueKey: "k"})
		b.cancel("k2")
		b.submit(norn.NewTask{ID: "plain", Queue: "q"})
		b.cancel("plain")
		n, err := s.RetryMatching(b.ctx, norn.Filter{Queues: []string{"q"}})
		b.must(err, "RetryMatching")
		if n != 2 {
			t.Fatalf("RetryMatching retried %d, want 2 (one holder of k and plain)", n)
		}
		live := 0
		for _, id := range []string{"k1", "k2"} {
			if !b.get(id).Status.Terminal() {
				live++
			}
		}
		if live != 1 {
			t.Fatalf("%d live holders of key k after RetryMatching, want 1", live)
		}
		b.status("plain", norn.StatusReady)
	})
}

func exerciseRetryHeldKeysAndBatches(t *testing.T, setup setupFunc) {
	t.Run("WithDependentsLeavesADependentWhoseKeyIsHeld", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(
			norn.NewTask{ID: "a", Queue: "q"},
			norn.NewTask{ID: "b", Queue: "q", UniqueKey: "k", DependsOn: []string{"a"}},
			norn.NewTask{ID: "c", Queue: "q", DependsOn: []string{"b"}},
			norn.NewTask{ID: "d", Queue: "q", DependsOn: []string{"a"}},
		)
		b.abort(b.claimID("w1", "a", "q"), "boom")
		b.submit(norn.NewTask{ID: "holder", Queue: "q", UniqueKey: "k", Delay: dur(time.Hour)})
		retryRetry(b, "a", norn.RetryOptions{WithDependents: true})
		b.status("d", norn.StatusBlocked)
		// b stays aborted, and c, which waits for it, with it.
		b.status("b", norn.StatusAborted)
		b.status("c", norn.StatusAborted)
	})

	t.Run("RetryMatchingWorksInBatches", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		// More dependents than a batch, all aborted by one cancel; the
		// root sorts first, so its retry lets its dependents wait again.
		n := 2*norn.RetryBatch + 1
		nts := []norn.NewTask{{ID: "0root", Queue: "q"}}
		for i := range n {
			nts = append(nts, norn.NewTask{ID: fmt.Sprintf("t%05d", i), Queue: "q", DependsOn: []string{"0root"}})
		}
		b.submitMany(nts)
		b.cancel("0root")
		b.count(norn.Filter{Statuses: []norn.Status{norn.StatusAborted}}, int64(n))
		got, err := s.RetryMatching(b.ctx, norn.Filter{Queues: []string{"q"}})
		b.must(err, "RetryMatching")
		if got != int64(n+1) {
			t.Fatalf("RetryMatching retried %d, want %d", got, n+1)
		}
		b.count(norn.Filter{Statuses: []norn.Status{norn.StatusBlocked}}, int64(n))
		b.complete(b.claimID("w1", "0root", "q"), "")
		b.count(norn.Filter{Statuses: []norn.Status{norn.StatusReady}}, int64(n))
	})
}

// aborted claims a task (lease 1) and aborts it with code "boom".
func retryAborted(b *testBundle, nt norn.NewTask) *norn.Task {
	b.t.Helper()
	c := b.claimed("w1", nt)
	b.heartbeat(c, norn.Heartbeat{Progress: ptr(0.5)})
	b.abort(c, "boom")
	return c
}

func retryRetry(b *testBundle, id string, o norn.RetryOptions) *norn.Task {
	b.t.Helper()
	got, err := b.s.Retry(b.ctx, id, o)
	b.must(err, "Retry(%q)", id)
	return got
}

func typesOf(tk *norn.Task) []string {
	var out []string
	for _, h := range tk.History {
		out = append(out, string(h.Type))
	}
	return out
}
