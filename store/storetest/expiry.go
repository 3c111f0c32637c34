package storetest

import (
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseExpiry: a task with an expiry that has not started by then ends
// aborted with CodeExpired; a running attempt finishes; no retry is
// scheduled past the deadline.
func exerciseExpiry(t *testing.T, setup setupFunc) {
	t.Run("Expiry", func(t *testing.T) {
		t.Parallel()
		t.Run("AbortsAWaitingTaskAtItsExpiry", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.submit(
				norn.NewTask{ID: "ready", Queue: "q", ExpireIn: dur(time.Minute)},
				norn.NewTask{ID: "at", Queue: "q", ExpiresAt: b.now().Add(90 * time.Second)},
				norn.NewTask{ID: "later", Queue: "q", Delay: dur(time.Hour), ExpireIn: dur(time.Minute)},
				norn.NewTask{ID: "blocked", Queue: "q", DependsOn: []string{"later"}, ExpireIn: dur(2 * time.Minute)},
				norn.NewTask{ID: "child", Queue: "q", DependsOn: []string{"ready"}},
			)
			if g := b.get("ready"); !g.ExpiresAt.Equal(b.now().Add(time.Minute)) {
				t.Fatalf("expires_at %v, want a minute from now", g.ExpiresAt)
			}
			// expire_in counts from when the task may first run.
			if g := b.get("later"); !g.ExpiresAt.Equal(b.now().Add(time.Hour + time.Minute)) {
				t.Fatalf("a delayed task's expires_at %v, want its run_at plus a minute", g.ExpiresAt)
			}
			b.advance(time.Minute - time.Millisecond)
			b.status("ready", norn.StatusReady)
			b.advance(time.Millisecond)
			expiredTask(t, b, "ready")
			// Its dependents follow as for any abort.
			lastError(t, b.status("child", norn.StatusAborted), norn.CodeDependencyFailed)
			b.advance(30 * time.Second)
			expiredTask(t, b, "at")
			b.advance(30 * time.Second)
			expiredTask(t, b, "blocked")
			b.status("later", norn.StatusScheduled)
			// Retried, it would expire again at once: refused.
			_, err := b.s.Retry(b.ctx, "ready", norn.RetryOptions{})
			wantErr(t, "Retry of an expired task", err, norn.ErrConflict)
			b.status("ready", norn.StatusAborted)
		})

		t.Run("AQueueDefaultAppliesToTasksWithoutOne", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			ten := dur(10 * time.Minute)
			q, err := s.UpdateQueue(b.ctx, "dq", norn.QueueUpdate{ExpireIn: &ten})
			b.must(err, "UpdateQueue")
			if q.Defaults.ExpireIn != ten {
				t.Fatalf("queue defaults %+v, want expire_in 10m", q.Defaults)
			}
			b.submit(
				norn.NewTask{ID: "default", Queue: "dq"},
				norn.NewTask{ID: "delayed", Queue: "dq", Delay: dur(time.Hour)},
				norn.NewTask{ID: "own", Queue: "dq", ExpireIn: dur(time.Minute)},
			)
			for id, want := range map[string]time.Time{
				"default": b.now().Add(10 * time.Minute),
				"delayed": b.now().Add(70 * time.Minute),
				"own":     b.now().Add(time.Minute),
			} {
				if g := b.get(id); !g.ExpiresAt.Equal(want) {
					t.Errorf("%s: expires_at %v, want %v", id, g.ExpiresAt, want)
				}
			}
			zero := dur(0)
			_, err = s.UpdateQueue(b.ctx, "dq", norn.QueueUpdate{ExpireIn: &zero})
			b.must(err, "UpdateQueue")
			b.submit(norn.NewTask{ID: "after", Queue: "dq"})
			if g := b.get("after"); !g.ExpiresAt.IsZero() {
				t.Fatalf("expires_at %v after the default was removed", g.ExpiresAt)
			}
		})

		expiryAtWork(t, setup)
	})
}

// expiredTask asserts that task id ended aborted by its expiry.
func expiredTask(t *testing.T, b *testBundle, id string) *norn.Task {
	t.Helper()
	g := b.status(id, norn.StatusAborted)
	lastError(t, g, norn.CodeExpired)
	lastHistory(t, g, norn.TaskAbort, time.Time{})
	return g
}

// expiryAtWork: expiry meets claims, running attempts, retries, lease timeouts and bad input.
func expiryAtWork(t *testing.T, setup setupFunc) {
	t.Run("AClaimNeverHandsOutAnExpiredTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "old", Queue: "q", Priority: 9, ExpireIn: dur(time.Minute)}, norn.NewTask{ID: "fresh", Queue: "q"})
		b.clock.Advance(2 * time.Minute) // no sweep: the claim must see it
		ts := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 2})
		if len(ts) != 1 || ts[0].ID != "fresh" {
			t.Fatalf("claimed %v, want only the fresh task", ids(ts))
		}
		// The claim may leave it to the monitor (PostgreSQL) or
		// expire it itself (embedded); either way it ends expired.
		b.claimNone("q")
		b.sweep()
		expiredTask(t, b, "old")
	})

	t.Run("ARunningAttemptFinishes", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		c := b.claimed("w", norn.NewTask{ID: "r", Queue: "q", ExpireIn: dur(time.Minute), Timeout: dur(time.Hour)})
		b.advance(2 * time.Minute)
		b.status("r", norn.StatusRunning)
		b.complete(c, `"done"`)
		b.status("r", norn.StatusCompleted)
	})

	t.Run("NoRetryIsScheduledPastTheDeadline", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		pol := &norn.RetryPolicy{MaxRetries: 5, Base: dur(time.Hour)}
		b.fail(b.claimed("w", norn.NewTask{ID: "late", Queue: "q", ExpireIn: dur(30 * time.Minute), Retry: pol}), "boom")
		g := expiredTask(t, b, "late")
		if len(g.Errors) != 1 || g.Errors[0].Code != norn.CodeExpired {
			t.Fatalf("errors %+v: want one, expired (naming the last error)", g.Errors)
		}
		// A retry before the deadline is scheduled as usual.
		soon := &norn.RetryPolicy{MaxRetries: 5, Base: dur(time.Second)}
		b.fail(b.claimed("w", norn.NewTask{ID: "soon", Queue: "q", ExpireIn: dur(30 * time.Minute), Retry: soon}), "boom")
		b.status("soon", norn.StatusScheduled)
	})

	t.Run("ALeaseThatTimesOutPastTheDeadlineExpires", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.claimed("w", norn.NewTask{ID: "t", Queue: "q", ExpireIn: dur(time.Minute), Timeout: dur(5 * time.Minute)})
		b.advance(6 * time.Minute)
		expiredTask(t, b, "t")
	})

	t.Run("AnExpiryThatCannotBeMetIsRefused", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "keep", Queue: "q"})
		before := b.snapshot()
		for _, c := range []struct {
			name  string
			nt    norn.NewTask
			field string
		}{
			{"in the past", norn.NewTask{Queue: "q", ExpiresAt: b.now().Add(-time.Second)}, "tasks[1].expires_at"},
			{"before run_at", norn.NewTask{Queue: "q", RunAt: b.now().Add(time.Hour), ExpiresAt: b.now().Add(time.Minute)}, "tasks[1].expires_at"},
			{"before the delay ends", norn.NewTask{Queue: "q", Delay: dur(time.Hour), ExpiresAt: b.now().Add(time.Minute)}, "tasks[1].expires_at"},
			{"both forms", norn.NewTask{Queue: "q", ExpireIn: dur(time.Minute), ExpiresAt: b.now().Add(time.Hour)}, "tasks[1].expire_in"},
		} {
			_, err := s.Submit(b.ctx, norn.NewTask{ID: "fine", Queue: "q"}, c.nt)
			wantField(t, c.name, err, norn.ErrInvalidArgument, c.field)
		}
		b.unchanged("refused submits", before)
	})
}
