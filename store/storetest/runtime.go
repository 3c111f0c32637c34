package storetest

import (
	"testing"
	"time"

	"github.com/nornq/norn"
)

func exerciseMaxRuntime(t *testing.T, setup setupFunc) {
	t.Run("MaxRuntime", func(t *testing.T) {
		t.Parallel()
		exerciseMaxRuntimeLease(t, setup)
		exerciseMaxRuntimeAttempts(t, setup)
		exerciseMaxRuntimeInput(t, setup)
	})
}

func exerciseMaxRuntimeLease(t *testing.T, setup setupFunc) {
	t.Run("ClaimRecordsStartedAndCapsTheLease", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(norn.NewTask{ID: "r", Queue: "q", Timeout: dur(30 * time.Second), MaxRuntime: dur(10 * time.Second)})
		c := b.claim("w1", "q")
		eqTime(t, "claimed task's started", c.Started, b.now())
		eqTime(t, "claimed task's deadline", c.Deadline, b.now().Add(10*time.Second))
		if c.MaxRuntime.D() != 10*time.Second || c.Timeout.D() != 30*time.Second {
			t.Fatalf("claimed task: %s", canonTask(c))
		}
		g := b.get("r")
		eqTime(t, "stored started", g.Started, b.now())
		eqTime(t, "stored deadline", g.Deadline, b.now().Add(10*time.Second))
	})

	t.Run("ClaimTimeoutIsCapped", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(norn.NewTask{ID: "r", Queue: "q", MaxRuntime: dur(time.Minute)})
		ts := b.claimReq(norn.ClaimRequest{Worker: "w1", Queues: []string{"q"}, Timeout: dur(time.Hour)})
		if len(ts) != 1 {
			t.Fatalf("claimed %d tasks", len(ts))
		}
		eqTime(t, "deadline of a claim asking for an hour", ts[0].Deadline, b.now().Add(time.Minute))
	})

	t.Run("MaxRuntimeStopsAHeartbeatingTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "r", Queue: "q", Timeout: dur(10 * time.Second), MaxRuntime: dur(25 * time.Second)})
		limit := c.Started.Add(25 * time.Second)
		runtimeHeartbeatUntil(b, c, limit.Add(-5*time.Second), limit)
		// The last heartbeat, 5s before the limit, was granted only up to it.
		eqTime(t, "deadline near the limit", b.status("r", norn.StatusRunning).Deadline, limit)
		b.advance(5*time.Second + time.Millisecond)
		g := b.status("r", norn.StatusReady)
		h := lastHistory(t, g, norn.TaskTimeout, time.Time{})
		if h.Error == nil || h.Error.Code != norn.CodeMaxRuntime || h.Worker != "w1" || h.Lease != 1 {
			t.Fatalf("TaskTimeout entry %+v, want error max_runtime of worker w1 lease 1", h)
		}
		lastError(t, g, norn.CodeMaxRuntime)
		if g.Owner != "" || g.Attempts != 1 || g.Lease != 1 {
			t.Fatalf("stopped task: %s", canonTask(g))
		}
	})

	t.Run("HeartbeatCannotExtendPastMaxRuntime", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "r", Queue: "q", MaxRuntime: dur(time.Minute)})
		b.advance(5 * time.Second)
		dl := b.heartbeat(c, norn.Heartbeat{Extend: dur(time.Hour)})
		eqTime(t, "deadline of a heartbeat asking for an hour", dl, c.Started.Add(time.Minute))
		eqTime(t, "stored deadline", b.status("r", norn.StatusRunning).Deadline, c.Started.Add(time.Minute))
	})

	t.Run("HeartbeatAtTheLimitIsLeaseLost", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "r", Queue: "q", Timeout: dur(time.Hour), MaxRuntime: dur(time.Minute)})
		// No sweep: the heartbeat must be refused even before the
		// monitor has stopped the attempt.
		b.clock.Advance(time.Minute)
		_, err := s.Heartbeat(b.ctx, ref(c), norn.Heartbeat{})
		wantErr(t, "Heartbeat at the runtime limit", err, norn.ErrLeaseLost)
		res, err := s.LeaseBatch(b.ctx, []norn.LeaseOp{{Op: norn.OpHeartbeat, LeaseRef: ref(c)}})
		b.must(err, "LeaseBatch")
		if res[0].Err == nil || res[0].Err.Code != norn.CodeLeaseLost {
			t.Fatalf("heartbeat op at the runtime limit: %+v, want lease_lost", res[0])
		}
		b.advance(time.Millisecond)
		lastError(t, b.status("r", norn.StatusReady), norn.CodeMaxRuntime)
	})

	t.Run("LeaseEndingBeforeTheLimitIsAPlainTimeout", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.claimed("w1", norn.NewTask{ID: "r", Queue: "q", Timeout: dur(10 * time.Second), MaxRuntime: dur(time.Hour)})
		b.advance(2 * time.Hour)
		g := b.status("r", norn.StatusReady)
		lastError(t, g, norn.CodeTimeout)
	})
}

func exerciseMaxRuntimeAttempts(t *testing.T, setup setupFunc) {
	t.Run("NextAttemptGetsItsOwnRuntime", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.claimed("w1", norn.NewTask{ID: "r", Queue: "q", MaxRuntime: dur(5 * time.Second)})
		b.advance(5*time.Second + time.Millisecond)
		b.status("r", norn.StatusReady)
		b.advance(time.Minute)
		c := b.claim("w2", "q")
		if c.Lease != 2 || c.Attempts != 2 {
			t.Fatalf("second claim: %s", canonTask(c))
		}
		eqTime(t, "second attempt's started", c.Started, b.now())
		eqTime(t, "second attempt's deadline", c.Deadline, b.now().Add(5*time.Second))
	})

	t.Run("LastAllowedAttemptAborts", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "r", Queue: "q", Timeout: dur(10 * time.Second), MaxRuntime: dur(15 * time.Second), MaxAttempts: ptr(2)})
		runtimeHeartbeatUntil(b, c, c.Started.Add(10*time.Second), c.Started.Add(15*time.Second))
		b.advance(5*time.Second + time.Millisecond)
		b.status("r", norn.StatusReady)
		b.claim("w1", "q")
		b.advance(15*time.Second + time.Millisecond)
		g := b.status("r", norn.StatusAborted)
		lastHistory(t, g, norn.TaskAbort, time.Time{})
		lastError(t, g, norn.CodeAttemptsExhausted)
		if len(g.Errors) != 2 || g.Errors[0].Code != norn.CodeMaxRuntime || g.Attempts != 2 {
			t.Fatalf("aborted task: attempts %d errors %+v", g.Attempts, g.Errors)
		}
		b.claimNone("q")
	})

	t.Run("StartedIsKeptAfterTheAttempt", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "r", Queue: "q", MaxRuntime: dur(time.Minute)})
		b.advance(time.Second)
		b.complete(c, "")
		g := b.status("r", norn.StatusCompleted)
		eqTime(t, "started of the completed task", g.Started, c.Started)
		if g.MaxRuntime.D() != time.Minute {
			t.Fatalf("completed task lost its max_runtime: %s", canonTask(g))
		}
	})

	t.Run("NoLimitByDefault", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "r", Queue: "q", Timeout: dur(10 * time.Second)})
		if c.MaxRuntime != 0 {
			t.Fatalf("max_runtime %v without one set", c.MaxRuntime)
		}
		runtimeHeartbeatUntil(b, c, c.Started.Add(2*time.Minute), c.Started.Add(time.Hour))
		b.status("r", norn.StatusRunning)
	})

	t.Run("QueueDefaultMaxRuntimeApplies", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		qi := b.updateQueue("dq", norn.QueueUpdate{MaxRuntime: ptr(dur(20 * time.Second))})
		if qi.Defaults.MaxRuntime.D() != 20*time.Second {
			t.Fatalf("UpdateQueue result defaults %+v", qi.Defaults)
		}
		got, err := s.Queue(b.ctx, "dq")
		b.must(err, "Queue")
		if got.Defaults.MaxRuntime.D() != 20*time.Second || got.Defaults.Timeout.D() != norn.DefaultTimeout {
			t.Fatalf("Queue defaults %+v", got.Defaults)
		}
		a := b.submitOne(norn.NewTask{ID: "a", Queue: "dq"})
		own := b.submitOne(norn.NewTask{ID: "own", Queue: "dq", MaxRuntime: dur(time.Hour)})
		if a.MaxRuntime.D() != 20*time.Second || own.MaxRuntime.D() != time.Hour {
			t.Fatalf("max_runtime at submit: default %v, own %v", a.MaxRuntime, own.MaxRuntime)
		}
		// Fixed at submission: a later change of the default does not
		// reach tasks already submitted.
		b.updateQueue("dq", norn.QueueUpdate{MaxRuntime: ptr(dur(0))})
		c := b.claimID("w1", "a", "dq")
		runtimeHeartbeatUntil(b, c, c.Started.Add(15*time.Second), c.Started.Add(20*time.Second))
		b.advance(5*time.Second + time.Millisecond)
		lastError(t, b.status("a", norn.StatusReady), norn.CodeMaxRuntime)
		if n := b.submitOne(norn.NewTask{ID: "later", Queue: "dq"}); n.MaxRuntime != 0 {
			t.Fatalf("max_runtime %v after the default was removed", n.MaxRuntime)
		}
	})
}

func exerciseMaxRuntimeInput(t *testing.T, setup setupFunc) {
	t.Run("NegativeIsRefused", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "keep", Queue: "q"})
		before := b.snapshot()
		_, err := s.Submit(b.ctx, norn.NewTask{Queue: "q"}, norn.NewTask{Queue: "q", MaxRuntime: dur(-time.Second)})
		wantField(t, "Submit with a negative max_runtime", err, norn.ErrInvalidArgument, "tasks[1].max_runtime")
		_, err = s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{MaxRuntime: ptr(dur(-time.Second))})
		wantField(t, "UpdateQueue with a negative max_runtime", err, norn.ErrInvalidArgument, "max_runtime")
		b.unchanged("after refused max_runtime", before)
		qi, err := s.Queue(b.ctx, "q")
		b.must(err, "Queue")
		if qi.Defaults.MaxRuntime != 0 {
			t.Fatalf("refused update changed the queue: %+v", qi.Defaults)
		}
	})
}

// heartbeatUntil heartbeats c every 5s until the clock reaches at,
// checking each deadline stays within limit.
func runtimeHeartbeatUntil(b *testBundle, c *norn.Task, at, limit time.Time) {
	b.t.Helper()
	for b.now().Before(at) {
		b.advance(5 * time.Second)
		dl := b.heartbeat(c, norn.Heartbeat{})
		if dl.After(limit) {
			b.t.Fatalf("heartbeat at %v granted %v, past the runtime limit %v", b.now(), dl, limit)
		}
	}
}
