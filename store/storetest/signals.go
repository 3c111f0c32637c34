package storetest

import (
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseSignals: a task keeps the signals sent to it; a worker can
// snooze until one arrives (or a timeout passes), and one sent before the
// wait counts.
func exerciseSignals(t *testing.T, setup setupFunc) {
	t.Run("Signal", func(t *testing.T) {
		t.Parallel()
		signalBasics(t, setup)
		signalWaits(t, setup)
	})
}

func (b *testBundle) signal(id, name, data string) *norn.Signal {
	b.t.Helper()
	var raw []byte
	if data != "" {
		raw = []byte(data)
	}
	sg, err := b.s.Signal(b.ctx, id, norn.NewSignal{Name: name, Data: raw})
	b.must(err, "Signal(%s, %s)", id, name)
	return sg
}

func (b *testBundle) snoozeUntil(tk *norn.Task, name string, timeout time.Duration) *norn.Task {
	b.t.Helper()
	got, err := b.s.Snooze(b.ctx, ref(tk), norn.Snooze{UntilSignal: name, Timeout: dur(timeout)})
	b.must(err, "Snooze(%s) until %s", tk.ID, name)
	return got
}

func signalBasics(t *testing.T, setup setupFunc) {
	t.Run("KeepsSignalsInOrder", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "t", Queue: "q"})
		first := b.signal("t", "a", `{"x":1}`)
		b.signal("t", "b", "")
		if first.Seq != 1 || !first.Time.Equal(b.now()) {
			t.Fatalf("first signal %+v", first)
		}
		g := b.get("t")
		if len(g.Signals) != 2 || g.Signals[0].Name != "a" || canonJSON(g.Signals[0].Data) != `{"x":1}` || g.Signals[1].Seq != 2 || g.Signals[1].Data != nil {
			t.Fatalf("signals %+v", g.Signals)
		}
		after, err := b.s.Signals(b.ctx, "t", 1)
		b.must(err, "Signals")
		if len(after) != 1 || after[0].Name != "b" {
			t.Fatalf("signals after 1: %+v", after)
		}
		b.status("t", norn.StatusReady) // a signal nobody waits for changes nothing else
	})

	t.Run("RefusesSignalsToMissingOrEndedTasksAndBadOnes", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		_, err := b.s.Signal(b.ctx, "nope", norn.NewSignal{Name: "a"})
		wantErr(t, "signal to a missing task", err, norn.ErrNotFound)
		_, err = b.s.Signals(b.ctx, "nope", 0)
		wantErr(t, "signals of a missing task", err, norn.ErrNotFound)
		b.submit(norn.NewTask{ID: "t", Queue: "q"})
		b.cancel("t")
		_, err = b.s.Signal(b.ctx, "t", norn.NewSignal{Name: "a"})
		wantErr(t, "signal to a cancelled task", err, norn.ErrConflict)
		b.submit(norn.NewTask{ID: "u", Queue: "q"})
		_, err = b.s.Signal(b.ctx, "u", norn.NewSignal{Name: ""})
		wantField(t, "a signal without a name", err, norn.ErrInvalidArgument, "name")
		_, err = b.s.Signal(b.ctx, "u", norn.NewSignal{Name: "a", Data: []byte(`{bad`)})
		wantField(t, "a signal with bad data", err, norn.ErrInvalidArgument, "data")
		if g := b.get("u"); len(g.Signals) != 0 {
			t.Fatalf("refused signals were kept: %+v", g.Signals)
		}
	})
}

func signalWaits(t *testing.T, setup setupFunc) {
	t.Run("SnoozeUntilASignalWakesOnIt", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		tk := b.claimed("w", norn.NewTask{ID: "t", Queue: "q"})
		got := b.snoozeUntil(tk, "approval", time.Hour)
		if got.Status != norn.StatusScheduled || got.Attempts != 0 || !got.RunAt.Equal(b.now().Add(time.Hour)) ||
			got.SignalWait == nil || got.SignalWait.Name != "approval" || got.SignalWait.Received {
			t.Fatalf("snoozed until a signal: %+v", got)
		}
		b.signal("t", "other", "")
		b.claimNone("q")
		b.advance(time.Minute)
		b.signal("t", "approval", `"yes"`)
		again := b.claimID("w", "t", "q")
		if again.SignalWait == nil || !again.SignalWait.Received || len(again.Signals) != 2 || again.Attempts != 1 {
			t.Fatalf("claimed after the signal: %+v", again)
		}
	})

	t.Run("ASignalSentBeforeTheWaitCounts", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		tk := b.claimed("w", norn.NewTask{ID: "t", Queue: "q"})
		b.signal("t", "go", "")
		got := b.snoozeUntil(tk, "go", time.Hour)
		if got.Status != norn.StatusReady || !got.SignalWait.Received {
			t.Fatalf("snoozed until a signal already received: %+v", got)
		}
	})

	t.Run("TheTimeoutMakesItReadyNotReceived", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		tk := b.claimed("w", norn.NewTask{ID: "t", Queue: "q"})
		b.snoozeUntil(tk, "never", time.Minute)
		b.advance(time.Minute)
		again := b.claimID("w", "t", "q")
		if again.SignalWait == nil || again.SignalWait.Received {
			t.Fatalf("claimed after the timeout: %+v", again.SignalWait)
		}
		// A signal after the wait timed out is kept, and wakes nothing.
		b.snoozeUntil(again, "later", time.Hour)
		b.signal("t", "never", "")
		b.status("t", norn.StatusScheduled)
	})

	t.Run("RefusesBadWaits", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		tk := b.claimed("w", norn.NewTask{ID: "t", Queue: "q"})
		_, err := b.s.Snooze(b.ctx, ref(tk), norn.Snooze{UntilSignal: "a", Delay: dur(time.Second)})
		wantField(t, "until_signal with a delay", err, norn.ErrInvalidArgument, "until_signal")
		_, err = b.s.Snooze(b.ctx, ref(tk), norn.Snooze{Delay: dur(time.Second), Timeout: dur(time.Second)})
		wantField(t, "a timeout without until_signal", err, norn.ErrInvalidArgument, "timeout")
		res, err := b.s.LeaseBatch(b.ctx, []norn.LeaseOp{{Op: norn.OpSnooze, LeaseRef: ref(tk), Snooze: norn.Snooze{UntilSignal: "a"}}})
		b.must(err, "LeaseBatch")
		if res[0].Err == nil || res[0].Err.Code != norn.CodeInvalidArgument {
			t.Fatalf("until_signal in a lease batch: %+v", res[0])
		}
		b.status("t", norn.StatusRunning)
	})
}
