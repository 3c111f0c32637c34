package storetest

import (
	"testing"
	"time"

	"github.com/nornq/norn"
)

func exerciseSnooze(t *testing.T, setup setupFunc) {
	t.Run("Snooze", func(t *testing.T) {
		t.Parallel()
		exerciseSnoozeScheduling(t, setup)
		exerciseSnoozeInputAndBatches(t, setup)
	})
}

func exerciseSnoozeScheduling(t *testing.T, setup setupFunc) {
	t.Run("DelayMakesItScheduledAndGivesTheAttemptBack", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		_, got := snoozeSnoozed(b, norn.Snooze{Delay: norn.Duration(30 * time.Second)})
		g := b.status("z", norn.StatusScheduled)
		sameTask(t, "Snooze result", g, got)
		if !g.RunAt.Equal(b.now().Add(30*time.Second)) || g.Attempts != 0 || g.Lease != 1 || g.Owner != "w1" || g.Progress != 0 || len(g.Errors) != 0 {
			t.Fatalf("snoozed task: %s", canonTask(g))
		}
		h := lastHistory(t, g, norn.TaskSnooze, b.now())
		if h.Worker != "w1" || h.Lease != 1 {
			t.Fatalf("snooze history entry %+v, want worker w1 lease 1", h)
		}
	})

	t.Run("IsNotClaimableUntilItsTime", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		snoozeSnoozed(b, norn.Snooze{Delay: norn.Duration(30 * time.Second)})
		b.advance(29 * time.Second)
		b.claimNone("q")
		b.advance(time.Second)
		c2 := b.claim("w2", "q")
		if c2.ID != "z" || c2.Lease != 2 || c2.Attempts != 1 {
			t.Fatalf("claim after snooze: %s; want lease 2, attempts 1", canonTask(c2))
		}
	})

	t.Run("FutureRunAtIsKeptExactly", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
		snoozeSnoozed(b, norn.Snooze{RunAt: at})
		if g := b.status("z", norn.StatusScheduled); !g.RunAt.Equal(at) {
			t.Fatalf("run_at %v, want %v", g.RunAt, at)
		}
	})

	t.Run("PastRunAtMakesItReadyAtOnce", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		snoozeSnoozed(b, norn.Snooze{RunAt: b.now().Add(-time.Hour)})
		g := b.status("z", norn.StatusReady)
		lastHistory(t, g, norn.TaskSnooze, b.now())
		if c2 := b.claim("w2", "q"); c2.Lease != 2 || c2.Attempts != 1 {
			t.Fatalf("claim after snooze: %s", canonTask(c2))
		}
	})

	t.Run("SpendsTheLease", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c, _ := snoozeSnoozed(b, norn.Snooze{Delay: norn.Duration(time.Minute)})
		_, err := s.Snooze(b.ctx, ref(c), norn.Snooze{Delay: norn.Duration(time.Minute)})
		wantErr(t, "Snooze again", err, norn.ErrLeaseLost)
		_, err = s.Heartbeat(b.ctx, ref(c), norn.Heartbeat{})
		wantErr(t, "Heartbeat after snooze", err, norn.ErrLeaseLost)
		wantErr(t, "Complete after snooze", s.Complete(b.ctx, ref(c), nil), norn.ErrLeaseLost)
	})

	t.Run("FencingStaysMonotonicOverSnoozes", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "m", Queue: "q"})
		var last uint64
		for i := 0; i < 3; i++ {
			c := b.claim("w1", "q")
			if c.Lease <= last || c.Attempts != 1 {
				t.Fatalf("claim %d: lease %d (previous %d), attempts %d", i, c.Lease, last, c.Attempts)
			}
			last = c.Lease
			_, err := s.Snooze(b.ctx, ref(c), norn.Snooze{Delay: norn.Duration(time.Second)})
			b.must(err, "Snooze")
			b.advance(time.Second)
		}
	})
}

func exerciseSnoozeInputAndBatches(t *testing.T, setup setupFunc) {
	t.Run("NeedsExactlyOneOfDelayAndRunAt", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "z", Queue: "q"})
		before := b.snapshot()
		for _, tc := range []struct {
			sn    norn.Snooze
			field string
		}{
			{norn.Snooze{}, "delay"},
			{norn.Snooze{Delay: norn.Duration(-time.Second)}, "delay"},
			{norn.Snooze{Delay: norn.Duration(time.Second), RunAt: b.now()}, "run_at"},
		} {
			_, err := s.Snooze(b.ctx, ref(c), tc.sn)
			wantField(t, "Snooze", err, norn.ErrInvalidArgument, tc.field)
		}
		b.unchanged("after invalid snoozes", before)
	})

	t.Run("OfACancelledTaskIsCancelled", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "z", Queue: "q"})
		b.cancel("z")
		_, err := s.Snooze(b.ctx, ref(c), norn.Snooze{Delay: norn.Duration(time.Second)})
		wantErr(t, "Snooze of a cancelled task", err, norn.ErrCancelled)
	})

	t.Run("InALeaseBatch", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c1 := b.claimed("w1", norn.NewTask{ID: "b1", Queue: "q"})
		c2 := b.claimed("w1", norn.NewTask{ID: "b2", Queue: "q"})
		res, err := s.LeaseBatch(b.ctx, []norn.LeaseOp{
			{Op: norn.OpSnooze, LeaseRef: ref(c1), Snooze: norn.Snooze{Delay: norn.Duration(time.Minute)}},
			{Op: norn.OpSnooze, LeaseRef: ref(c2)},
		})
		b.must(err, "LeaseBatch")
		if res[0].Err != nil {
			t.Fatalf("snooze op: %v", res[0].Err)
		}
		if res[1].Err == nil || res[1].Err.Code != norn.CodeInvalidArgument {
			t.Fatalf("snooze op without delay or run_at: %v, want invalid_argument", res[1].Err)
		}
		g := b.status("b1", norn.StatusScheduled)
		lastHistory(t, g, norn.TaskSnooze, b.now())
		if g.Attempts != 0 || !g.RunAt.Equal(b.now().Add(time.Minute)) {
			t.Fatalf("batch-snoozed task: %s", canonTask(g))
		}
		b.status("b2", norn.StatusRunning)
	})
}

// snoozed claims a task, records progress and snoozes it with sn.
func snoozeSnoozed(b *testBundle, sn norn.Snooze) (c, got *norn.Task) {
	b.t.Helper()
	c = b.claimed("w1", norn.NewTask{ID: "z", Queue: "q"})
	b.heartbeat(c, norn.Heartbeat{Progress: ptr(0.5)})
	b.clock.Advance(time.Second)
	got, err := b.s.Snooze(b.ctx, ref(c), sn)
	b.must(err, "Snooze")
	return c, got
}
