package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func exerciseHeartbeat(t *testing.T, setup setupFunc) {
	t.Run("Heartbeat", func(t *testing.T) {
		t.Parallel()
		exerciseHeartbeatDeadline(t, setup)
	})
}

func exerciseHeartbeatDeadline(t *testing.T, setup setupFunc) {
	t.Run("ExtendsTheDeadlineAndRecordsProgress", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := b.claimed("w", norn.NewTask{ID: "h", Queue: "q", Timeout: dur(10 * time.Second)})
		b.clock.Advance(4 * time.Second)
		dl, err := s.Heartbeat(b.ctx, ref(c), norn.Heartbeat{Progress: ptr(0.25)})
		if err != nil {
			t.Fatalf("Heartbeat: %v", err)
		}
		eqTime(t, "heartbeat deadline", dl, b.now().Add(10*time.Second))
		g := b.get("h")
		eqTime(t, "task deadline after heartbeat", g.Deadline, dl)
		if g.Progress != 0.25 || g.Status != norn.StatusRunning || g.Owner != "w" || g.Lease != 1 || g.Attempts != 1 {
			t.Fatalf("after heartbeat: %s", canonTask(g))
		}
		if len(g.History) != len(c.History) {
			t.Fatalf("heartbeat recorded history: %v", historyTypes(g))
		}
	})

	t.Run("ExtendOverridesTheTimeoutAndNoProgressKeepsIt", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := hbBeating(b)
		dl, err := s.Heartbeat(b.ctx, ref(c), norn.Heartbeat{Extend: dur(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		eqTime(t, "deadline with extend", dl, b.now().Add(time.Minute))
		if g := b.get("h"); g.Progress != 0.25 {
			t.Fatalf("progress %v after heartbeat without progress, want 0.25", g.Progress)
		}
	})

	t.Run("RefusesProgressAboveOne", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := hbBeating(b)
		before := b.get("h")
		_, err := s.Heartbeat(b.ctx, ref(c), norn.Heartbeat{Progress: ptr(1.5)})
		wantField(t, "Heartbeat progress 1.5", err, norn.ErrInvalidArgument, "progress")
		sameTask(t, "refused heartbeat changes nothing", before, b.get("h"))
	})

	t.Run("KeepsTheLeaseLengthTheClaimGranted", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "short", Queue: "q", Timeout: dur(time.Second)})
		c := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Timeout: dur(30 * time.Second)})[0]
		eqTime(t, "deadline at claim", c.Deadline, b.now().Add(30*time.Second))
		b.clock.Advance(500 * time.Millisecond)
		dl, err := s.Heartbeat(b.ctx, ref(c), norn.Heartbeat{})
		if err != nil {
			t.Fatal(err)
		}
		eqTime(t, "deadline after a heartbeat", dl, b.now().Add(30*time.Second))
		b.advance(20 * time.Second)
		b.status("short", norn.StatusRunning)
		// An explicit extension sets the length from then on.
		if dl, err = s.Heartbeat(b.ctx, ref(c), norn.Heartbeat{Extend: dur(5 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		eqTime(t, "deadline after extend", dl, b.now().Add(5*time.Minute))
		b.clock.Advance(time.Minute)
		if dl, err = s.Heartbeat(b.ctx, ref(c), norn.Heartbeat{Progress: ptr(0.5)}); err != nil {
			t.Fatal(err)
		}
		eqTime(t, "deadline after a heartbeat following extend", dl, b.now().Add(5*time.Minute))
		eqTime(t, "stored deadline", b.get("short").Deadline, dl)
		// Without a claim timeout the lease is the task's own.
		b.submitOne(norn.NewTask{ID: "own", Queue: "q2", Timeout: dur(7 * time.Second)})
		c2 := b.claim("w", "q2")
		b.clock.Advance(time.Second)
		if dl, err = s.Heartbeat(b.ctx, ref(c2), norn.Heartbeat{}); err != nil {
			t.Fatal(err)
		}
		eqTime(t, "deadline of a task's own timeout", dl, b.now().Add(7*time.Second))
	})

	t.Run("ExtendedLeaseHoldsPastTheOriginalDeadline", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		c := hbBeating(b)
		b.heartbeat(c, norn.Heartbeat{Extend: dur(time.Minute)})
		b.advance(50 * time.Second)
		b.status("h", norn.StatusRunning)
		b.advance(11 * time.Second)
		lastHistory(t, b.status("h", norn.StatusReady), norn.TaskTimeout, time.Time{})
	})
}

// beating claims a task with a 10s timeout and heartbeats it with
// progress 0.25 four seconds later.
func hbBeating(b *testBundle) *norn.Task {
	c := b.claimed("w", norn.NewTask{ID: "h", Queue: "q", Timeout: dur(10 * time.Second)})
	b.clock.Advance(4 * time.Second)
	b.heartbeat(c, norn.Heartbeat{Progress: ptr(0.25)})
	return c
}

func exerciseLog(t *testing.T, setup setupFunc) {
	t.Run("Log", func(t *testing.T) {
		t.Parallel()
		exerciseLogAppendAndRead(t, setup)
		exerciseLogRepeats(t, setup)
		logRules(t, setup)
	})
}

func exerciseLogAppendAndRead(t *testing.T, setup setupFunc) {
	t.Run("AppendNumbersEntriesFromOne", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := b.claimed("w1", norn.NewTask{ID: "l", Queue: "q"})
		now := b.now()
		for i := 1; i <= 2; i++ {
			le := b.appendLog(c, fmt.Sprintf(`{"step": %d}`, i))
			if le.Seq != uint64(i) || le.Lease != 1 || !le.Time.Equal(now) {
				t.Fatalf("AppendLog %d: %+v, want seq %d lease 1 at %v", i, le, i, now)
			}
			jsonEq(t, "appended data", le.Data, fmt.Sprintf(`{"step":%d}`, i))
		}
		le, err := s.AppendLog(b.ctx, ref(c), norn.LogAppend{Seq: 3, Data: json.RawMessage(`{"step":3}`)})
		if err != nil || le.Seq != 3 {
			t.Fatalf("AppendLog with explicit next seq: %+v, %v", le, err)
		}
	})

	t.Run("RefusesASeqThatIsNotNext", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := logLogged(b)
		for _, seq := range []uint64{3, 5, 1} {
			_, err := s.AppendLog(b.ctx, ref(c), norn.LogAppend{Seq: seq, Data: json.RawMessage(`"x"`)})
			wantErr(t, fmt.Sprintf("AppendLog with seq %d when 4 is next", seq), err, norn.ErrConflict)
		}
		b.logLen("l", 3)
	})

	t.Run("ReadsFromAnOffsetUpToALimit", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		logLogged(b)
		logs, err := s.ReadLog(b.ctx, "l", 0, 0)
		if err != nil || len(logs) != 3 {
			t.Fatalf("ReadLog: %d entries, %v; want 3", len(logs), err)
		}
		for i, l := range logs {
			if l.Seq != uint64(i+1) {
				t.Fatalf("ReadLog entry %d has seq %d", i, l.Seq)
			}
			jsonEq(t, "read log data", l.Data, fmt.Sprintf(`{"step":%d}`, i+1))
		}
		logs, err = s.ReadLog(b.ctx, "l", 1, 1)
		if err != nil || len(logs) != 1 || logs[0].Seq != 2 {
			t.Fatalf("ReadLog after 1 limit 1: %+v, %v; want seq 2", logs, err)
		}
		logs, err = s.ReadLog(b.ctx, "l", 3, 0)
		if err != nil || len(logs) != 0 {
			t.Fatalf("ReadLog after the last: %+v, %v", logs, err)
		}
	})

	t.Run("NextClaimantReadsItAndContinuesTheNumbering", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := logLogged(b)
		b.advance(11 * time.Second)
		c2 := b.claim("w2", "q")
		logs, err := s.ReadLog(b.ctx, "l", 0, 0)
		if err != nil || len(logs) != 3 || logs[2].Lease != 1 {
			t.Fatalf("ReadLog by the next claimant: %+v, %v", logs, err)
		}
		_, err = s.AppendLog(b.ctx, ref(c), norn.LogAppend{Data: json.RawMessage(`"stale"`)})
		wantErr(t, "AppendLog with the old lease", err, norn.ErrLeaseLost)
		le := b.appendLog(c2, `{"step":4}`)
		if le.Seq != 4 || le.Lease != 2 {
			t.Fatalf("AppendLog under the new lease: %+v; want seq 4 lease 2", le)
		}
	})

	t.Run("OutlivesCompletionWhichEndsAppends", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := logLogged(b)
		b.complete(c, "")
		b.logLen("l", 3)
		_, err := s.AppendLog(b.ctx, ref(c), norn.LogAppend{Data: json.RawMessage(`5`)})
		wantErrOneOf(t, "AppendLog after completion", err, norn.ErrLeaseLost, norn.ErrConflict)
	})
}

func exerciseLogRepeats(t *testing.T, setup setupFunc) {
	t.Run("RepeatedAppendReturnsTheStoredEntry", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(norn.NewTask{ID: "l", Queue: "q"})
		c := b.claim("w", "q")
		first, err := s.AppendLog(b.ctx, ref(c), norn.LogAppend{Seq: 1, Data: json.RawMessage(`{"step":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Second)
		again, err := s.AppendLog(b.ctx, ref(c), norn.LogAppend{Seq: 1, Data: json.RawMessage(`{"step":1}`)})
		if err != nil {
			t.Fatalf("repeated append: %v, want the stored entry", err)
		}
		if again.Seq != 1 || again.Lease != first.Lease || !again.Time.Equal(first.Time) || string(again.Data) != `{"step":1}` {
			t.Fatalf("repeated append returned %+v, want %+v", again, first)
		}
		_, err = s.AppendLog(b.ctx, ref(c), norn.LogAppend{Seq: 1, Data: json.RawMessage(`{"step":2}`)})
		wantErr(t, "append of other data under a used seq", err, norn.ErrConflict)
		if _, err := s.AppendLog(b.ctx, ref(c), norn.LogAppend{Seq: 2, Data: json.RawMessage(`{"step":2}`)}); err != nil {
			t.Fatal(err)
		}
		log, err := s.ReadLog(b.ctx, "l", 0, 0)
		if err != nil || len(log) != 2 {
			t.Fatalf("ReadLog: %d entries, %v; want 2", len(log), err)
		}
	})
}

// logged claims task l (10s timeout) as w1 and appends steps 1 to 3.
func logLogged(b *testBundle) *norn.Task {
	c := b.claimed("w1", norn.NewTask{ID: "l", Queue: "q", Timeout: dur(10 * time.Second)})
	for i := 1; i <= 3; i++ {
		b.appendLog(c, fmt.Sprintf(`{"step": %d}`, i))
	}
	return c
}

func exerciseFinish(t *testing.T, setup setupFunc) {
	exerciseFinishComplete(t, setup)
	exerciseFinishFail(t, setup)
	exerciseFinishAbort(t, setup)
	exerciseFinishYield(t, setup)
}

func exerciseFinishComplete(t *testing.T, setup setupFunc) {
	t.Run("Complete", func(t *testing.T) {
		t.Parallel()

		t.Run("StoresTheResultAndFinishesTheTask", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			_, before := finishCompleted(b)
			g := b.status("c", norn.StatusCompleted)
			jsonEq(t, "result", g.Result, `{"n":42}`)
			if g.Progress != 1 || g.Owner != "w1" || g.Lease != 1 || g.Attempts != 1 || len(g.Errors) != 0 {
				t.Fatalf("finishCompleted task: %s", canonTask(g))
			}
			lastHistory(t, g, norn.TaskComplete, b.now())
			eqTime(t, "updated", g.Updated, b.now())
			wantVersion(t, "finishCompleted", g, before.Version+1)
		})

		t.Run("SpendsTheLease", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			c, _ := finishCompleted(b)
			g := b.get("c")
			// A repeated Complete is answered as a success (see
			// RepeatedCall/FinishingCallSucceedsOnlyAsAnExactRepeat).
			stranger := ref(c)
			stranger.Worker = "someone-else"
			err := s.Complete(b.ctx, stranger, json.RawMessage(`2`))
			wantErr(t, "Complete by another worker", err, norn.ErrLeaseLost)
			_, err = s.Heartbeat(b.ctx, ref(c), norn.Heartbeat{})
			wantErrOneOf(t, "Heartbeat after Complete", err, norn.ErrLeaseLost, norn.ErrConflict)
			err = s.Fail(b.ctx, ref(c), norn.ErrorInfo{Code: "late"})
			wantErrOneOf(t, "Fail after Complete", err, norn.ErrLeaseLost, norn.ErrConflict)
			sameTask(t, "calls after completion change nothing", g, b.get("c"))
		})

		t.Run("CompletedTaskIsNeverTimedOut", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			finishCompleted(b)
			b.settled("c", time.Minute, "q")
		})

		t.Run("WithoutAResultStoresNone", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.complete(b.claimed("w1", norn.NewTask{ID: "d", Queue: "q"}), "")
			if g := b.status("d", norn.StatusCompleted); canonJSON(g.Result) != "" || g.Progress != 1 {
				t.Fatalf("finishCompleted without result: %s", canonTask(g))
			}
			b.claimNone("q")
		})
	})
}

func exerciseFinishFail(t *testing.T, setup setupFunc) {
	t.Run("Fail", func(t *testing.T) {
		t.Parallel()

		t.Run("RetriesOnTheCappedBackoffScheduleThenAborts", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			pol := norn.RetryPolicy{MaxRetries: 3, Base: dur(10 * time.Second), Max: dur(25 * time.Second)}
			b.submitOne(norn.NewTask{ID: "f", Queue: "q", Retry: &pol})
			wantWaits := []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second}
			for attempt := 1; attempt <= 4; attempt++ {
				c := b.claim("w", "q")
				if c.Attempts != attempt || c.Lease != uint64(attempt) {
					t.Fatalf("attempt %d: claimed with attempts %d lease %d", attempt, c.Attempts, c.Lease)
				}
				b.clock.Advance(time.Second)
				failedAt := b.now()
				if err := s.Fail(b.ctx, ref(c), norn.ErrorInfo{Code: "boom", Description: fmt.Sprint(attempt)}); err != nil {
					t.Fatalf("Fail attempt %d: %v", attempt, err)
				}
				g := b.get("f")
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
				b.advance(wait - time.Millisecond)
				b.status("f", norn.StatusScheduled)
				b.claimNone("q")
				b.advance(2 * time.Millisecond)
				lastHistory(t, b.status("f", norn.StatusReady), norn.TaskRelease, time.Time{})
			}
			b.advance(time.Hour)
			b.status("f", norn.StatusAborted)
			b.claimNone("q")
		})

		t.Run("MaxAttemptsAbortsWithRetriesLeft", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.fail(b.claimed("w", norn.NewTask{ID: "m", Queue: "q", MaxAttempts: ptr(2), Retry: &norn.RetryPolicy{MaxRetries: 5}}), "e1")
			g := b.status("m", norn.StatusReady) // zero backoff: ready at once
			lastHistory(t, g, norn.TaskRetry, b.now())
			if g.Attempts != 1 {
				t.Fatalf("attempts %d after one failure", g.Attempts)
			}
			c := b.claim("w", "q")
			if c.Attempts != 2 || c.Lease != 2 {
				t.Fatalf("second claim: attempts %d lease %d", c.Attempts, c.Lease)
			}
			b.fail(c, "e2")
			g = b.status("m", norn.StatusAborted)
			lastError(t, g, norn.CodeAttemptsExhausted)
			lastHistory(t, g, norn.TaskAbort, b.now())
			if len(g.Errors) != 2 || g.Errors[0].Code != "e1" {
				t.Fatalf("errors %+v", g.Errors)
			}
		})

		failDefaultRetries(t, setup)

		failRetryControl(t, setup)

		failRules(t, setup)
	})
}

func exerciseFinishAbort(t *testing.T, setup setupFunc) {
	t.Run("Abort", func(t *testing.T) {
		t.Parallel()

		// aborted aborts a task that had retries left and returns the task
		// before.
		aborted := func(b *testBundle) *norn.Task {
			c := b.claimed("w", norn.NewTask{ID: "a", Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 5, Base: dur(time.Second)}})
			b.clock.Advance(time.Second)
			before := b.get("a")
			if err := b.s.Abort(b.ctx, ref(c), norn.ErrorInfo{Code: "fatal", Description: "disk on fire", Args: map[string]any{"disk": "sda"}}); err != nil {
				b.t.Fatalf("Abort: %v", err)
			}
			return before
		}

		t.Run("EndsTheTaskWithTheWorkersError", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			before := aborted(b)
			g := b.status("a", norn.StatusAborted)
			h := lastHistory(t, g, norn.TaskAbort, b.now())
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
		})

		t.Run("AbortedTaskIsNeverRetried", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			aborted(b)
			b.settled("a", time.Hour, "q")
		})
	})
}

func exerciseFinishYield(t *testing.T, setup setupFunc) {
	t.Run("Yield", func(t *testing.T) {
		t.Parallel()

		// yielded yields a claimed task with progress and returns the claim
		// and the task before.
		yielded := func(b *testBundle) (c, before *norn.Task) {
			c = b.claimed("w1", norn.NewTask{ID: "y", Queue: "q"})
			b.heartbeat(c, norn.Heartbeat{Progress: ptr(0.5)})
			b.clock.Advance(time.Second)
			before = b.get("y")
			b.yield(c)
			return c, before
		}

		t.Run("ReturnsTheTaskToReadyAsIfNeverClaimed", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			_, before := yielded(b)
			g := b.status("y", norn.StatusReady)
			if g.Owner != "" || g.Progress != 0 || g.Attempts != 0 || g.Lease != 1 || len(g.Errors) != 0 {
				t.Fatalf("yielded task: %s", canonTask(g))
			}
			lastHistory(t, g, norn.TaskYield, b.now())
			wantVersion(t, "yielded", g, before.Version+1)
		})

		t.Run("SetsRunAtToTheYield", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			yielded(b)
			// The task queues behind those already waiting at its
			// priority, on every store (norn.AfterYield).
			if g := b.status("y", norn.StatusReady); !g.RunAt.Equal(b.now()) {
				t.Fatalf("yielded task's run_at %v, want the yield's time %v", g.RunAt, b.now())
			}
		})

		t.Run("SpendsTheLease", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			c, _ := yielded(b)
			wantErr(t, "Complete after Yield", s.Complete(b.ctx, ref(c), nil), norn.ErrLeaseLost)
		})

		t.Run("NextClaimTakesANewLeaseAndTheSameAttempt", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			yielded(b)
			c2 := b.claim("w2", "q")
			if c2.Lease != 2 || c2.Attempts != 1 {
				t.Fatalf("claim after yield: lease %d attempts %d, want 2 and 1", c2.Lease, c2.Attempts)
			}
		})
	})
}

// finishCompleted claims a task with progress 0.3 and completes it a second
// later with a result; it returns the claim and the task before.
func finishCompleted(b *testBundle) (c, before *norn.Task) {
	c = b.claimed("w1", norn.NewTask{ID: "c", Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 3}})
	b.heartbeat(c, norn.Heartbeat{Progress: ptr(0.3)})
	b.clock.Advance(time.Second)
	before = b.get("c")
	b.complete(c, `{"n": 42}`)
	return c, before
}

func exerciseTimeout(t *testing.T, setup setupFunc) {
	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()

		// expired lets a claimed task with progress run past its 10s timeout
		// and returns the task as it was just before.
		expired := func(b *testBundle) *norn.Task {
			c := b.claimed("w1", norn.NewTask{ID: "t", Queue: "q", Timeout: dur(10 * time.Second)})
			b.heartbeat(c, norn.Heartbeat{Progress: ptr(0.5)})
			b.advance(9 * time.Second)
			before := b.status("t", norn.StatusRunning)
			b.advance(time.Second + time.Millisecond)
			return before
		}

		t.Run("ReturnsAnExpiredLeaseToReady", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			before := expired(b)
			g := b.status("t", norn.StatusReady)
			if g.Owner != "" || g.Progress != 0 || g.Attempts != 1 || g.Lease != 1 {
				t.Fatalf("timed out task: %s", canonTask(g))
			}
			h := lastHistory(t, g, norn.TaskTimeout, time.Time{})
			if h.Error == nil || h.Error.Code != norn.CodeTimeout {
				t.Fatalf("TaskTimeout entry error %+v", h.Error)
			}
			lastError(t, g, norn.CodeTimeout)
			wantVersion(t, "timed out", g, before.Version+1)
			// Back in the queue from the sweep's time on, as a retry or a
			// yield is (norn.AfterTimeout), on every store.
			eqTime(t, "timed out task's run_at", g.RunAt, b.now())
		})

		t.Run("NextClaimCountsAnotherAttempt", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			expired(b)
			c2 := b.claim("w2", "q")
			if c2.Lease != 2 || c2.Attempts != 2 {
				t.Fatalf("claim after timeout: lease %d attempts %d, want 2 and 2", c2.Lease, c2.Attempts)
			}
		})

		t.Run("LastAllowedAttemptTimingOutAborts", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.claimed("w", norn.NewTask{ID: "t", Queue: "q", MaxAttempts: ptr(2)})
			b.advance(11 * time.Second)
			b.status("t", norn.StatusReady)
			b.claim("w", "q")
			b.advance(11 * time.Second)
			g := b.status("t", norn.StatusAborted)
			lastError(t, g, norn.CodeAttemptsExhausted)
			lastHistory(t, g, norn.TaskAbort, time.Time{})
			if g.Attempts != 2 || len(g.Errors) != 2 || g.Errors[0].Code != norn.CodeTimeout {
				t.Fatalf("exhausted task: attempts %d errors %+v", g.Attempts, g.Errors)
			}
			b.claimNone("q")
		})

		t.Run("YieldedClaimDoesNotUseUpAnAttempt", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.yield(b.claimed("w", norn.NewTask{ID: "y", Queue: "q2", MaxAttempts: ptr(1)}))
			c := b.claim("w", "q2")
			if c.Attempts != 1 {
				t.Fatalf("attempts %d after a yield and a claim, want 1", c.Attempts)
			}
			b.advance(11 * time.Second)
			lastError(t, b.status("y", norn.StatusAborted), norn.CodeAttemptsExhausted)
		})
	})

	t.Run("History", func(t *testing.T) {
		t.Parallel()

		t.Run("KeepsTheNewestEntriesAndCountsTheDropped", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.submitOne(norn.NewTask{ID: "h", Queue: "q"})
			const cycles = 60
			for i := 0; i < cycles; i++ {
				b.yield(b.claim("w", "q"))
			}
			g := b.get("h")
			if len(g.History) > norn.DefaultHistoryLimit || len(g.History)+g.HistoryDropped != 2*cycles {
				t.Fatalf("history of %d entries with %d dropped, want at most %d kept and %d in all",
					len(g.History), g.HistoryDropped, norn.DefaultHistoryLimit, 2*cycles)
			}
			n := len(g.History)
			if g.History[n-1].Type != norn.TaskYield || g.History[n-2].Type != norn.TaskAssignment || g.History[n-2].Lease != cycles {
				t.Fatalf("newest history entries %+v %+v, want the last assignment (lease %d) and yield", g.History[n-2], g.History[n-1], cycles)
			}
		})
	})
}

func exerciseLeaseBatch(t *testing.T, setup setupFunc) {
	// batch claims b0 … b4 and runs one operation of every kind on them, one
	// with a stale lease and one on an unknown task.
	batch := func(b *testBundle) ([]*norn.Task, []norn.LeaseOp, []norn.LeaseOpResult) {
		var nts []norn.NewTask
		for i := 0; i < 5; i++ {
			nts = append(nts, norn.NewTask{ID: fmt.Sprintf("b%d", i), Queue: "q", Retry: noRetry})
		}
		b.submit(nts...)
		ts := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 5})
		if len(ts) != 5 {
			b.t.Fatalf("claimed %d", len(ts))
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
		res, err := b.s.LeaseBatch(b.ctx, ops)
		if err != nil {
			b.t.Fatalf("LeaseBatch: %v", err)
		}
		if len(res) != len(ops) {
			b.t.Fatalf("LeaseBatch: %d results for %d ops", len(res), len(ops))
		}
		return ts, ops, res
	}

	t.Run("LeaseBatch", func(t *testing.T) {
		t.Parallel()

		t.Run("AppliesEveryKindOfOperation", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			_, ops, res := batch(b)
			for i := 0; i < 5; i++ {
				if res[i].Err != nil {
					t.Fatalf("LeaseBatch op %d (%s): %v", i, ops[i].Op, res[i].Err)
				}
			}
			eqTime(t, "batched heartbeat deadline", res[0].Deadline, b.now().Add(norn.DefaultTimeout))
			if g := b.status("b0", norn.StatusRunning); g.Progress != 0.5 {
				t.Fatalf("batched heartbeat progress %v", g.Progress)
			}
			jsonEq(t, "batched result", b.status("b1", norn.StatusCompleted).Result, `"ok"`)
			lastError(t, b.status("b2", norn.StatusAborted), "f")
			lastError(t, b.status("b3", norn.StatusAborted), "a")
			lastHistory(t, b.status("b4", norn.StatusReady), norn.TaskYield, b.now())
		})

		t.Run("StaleLeaseOrUnknownTaskFailsOnlyItsOperation", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			_, _, res := batch(b)
			if res[5].Err == nil || res[5].Err.Code != norn.CodeLeaseLost {
				t.Fatalf("stale op result %+v, want lease_lost", res[5].Err)
			}
			if res[6].Err == nil || res[6].Err.Code != norn.CodeNotFound {
				t.Fatalf("unknown task op result %+v, want not_found", res[6].Err)
			}
		})

		t.Run("RefusesAnUnknownOperation", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			ts, _, _ := batch(b)
			before := b.snapshot()
			// Refused either alone or as a malformed batch.
			res, err := s.LeaseBatch(b.ctx, []norn.LeaseOp{{Op: "explode", LeaseRef: ref(ts[0])}})
			if err != nil {
				wantErr(t, "LeaseBatch with an unknown op", err, norn.ErrInvalidArgument)
			} else if len(res) != 1 || res[0].Err == nil || res[0].Err.Code != norn.CodeInvalidArgument {
				t.Fatalf("unknown op result %+v, want invalid_argument", res)
			}
			b.unchanged("LeaseBatch with an unknown op", before)
		})
	})
}

// leaseCalls runs every lease-checked worker call with r and asserts each
// fails with want.
func (b *testBundle) leaseCalls(what string, r norn.LeaseRef, want *norn.Error) {
	b.t.Helper()
	t, s, ctx := b.t, b.s, b.ctx
	_, err := s.Heartbeat(ctx, r, norn.Heartbeat{Progress: ptr(0.9)})
	wantErr(t, what+": Heartbeat", err, want)
	_, err = s.AppendLog(ctx, r, norn.LogAppend{Data: json.RawMessage(`"x"`)})
	wantErr(t, what+": AppendLog", err, want)
	wantErr(t, what+": Complete", s.Complete(ctx, r, json.RawMessage(`1`)), want)
	wantErr(t, what+": Fail", s.Fail(ctx, r, norn.ErrorInfo{Code: "x"}), want)
	wantErr(t, what+": Abort", s.Abort(ctx, r, norn.ErrorInfo{Code: "x"}), want)
	wantErr(t, what+": Yield", s.Yield(ctx, r), want)
	var ops []norn.LeaseOp
	for _, k := range []norn.LeaseOpKind{norn.OpHeartbeat, norn.OpComplete, norn.OpFail, norn.OpAbort, norn.OpYield} {
		ops = append(ops, norn.LeaseOp{Op: k, LeaseRef: r, Error: &norn.ErrorInfo{Code: "x"}})
	}
	res, err := s.LeaseBatch(ctx, ops)
	if err != nil || len(res) != len(ops) {
		t.Fatalf("%s: LeaseBatch: %d results, %v", what, len(res), err)
	}
	for i, r := range res {
		if r.Err == nil || r.Err.Code != want.Code {
			t.Fatalf("%s: LeaseBatch %s: %v, want %s", what, ops[i].Op, r.Err, want.Code)
		}
	}
}

func exerciseFencing(t *testing.T, setup setupFunc) {
	// owned claims task f as w1, with progress and one log entry.
	owned := func(b *testBundle) *norn.Task {
		c := b.claimed("w1", norn.NewTask{ID: "f", Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 3}})
		b.heartbeat(c, norn.Heartbeat{Progress: ptr(0.5)})
		b.appendLog(c, `"mine"`)
		return c
	}
	// reclaimed lets w1's lease on f expire and w2 claim it; it returns both
	// claims.
	reclaimed := func(b *testBundle) (c1, c2 *norn.Task) {
		c1 = b.claimed("w1", norn.NewTask{ID: "f", Queue: "q", Timeout: dur(10 * time.Second), Retry: &norn.RetryPolicy{MaxRetries: 3}})
		b.advance(11 * time.Second)
		c2 = b.claim("w2", "q")
		if c2.Lease != 2 {
			b.t.Fatalf("reclaimed with lease %d, want 2", c2.Lease)
		}
		return c1, c2
	}

	t.Run("Fencing", func(t *testing.T) {
		t.Parallel()

		for _, tc := range []struct {
			name   string
			forge  func(r norn.LeaseRef) norn.LeaseRef
			reason string
		}{
			{"RefusesEveryCallWithAFutureLease", func(r norn.LeaseRef) norn.LeaseRef { r.Lease++; return r }, "future lease"},
			{"RefusesEveryCallFromTheWrongWorker", func(r norn.LeaseRef) norn.LeaseRef { r.Worker = "w2"; return r }, "wrong worker"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				_, b := setup(t)
				c := owned(b)
				before := b.get("f")
				b.leaseCalls(tc.reason, tc.forge(ref(c)), norn.ErrLeaseLost)
				sameTask(t, "refused calls change nothing", before, b.get("f"))
				b.logLen("f", 1)
				// The real owner is unaffected.
				b.heartbeat(c, norn.Heartbeat{})
				b.complete(c, "")
			})
		}

		t.Run("UnknownTaskIsNotFoundForEveryCall", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			owned(b)
			before := b.snapshot()
			b.leaseCalls("unknown task", norn.LeaseRef{TaskID: "nope", Worker: "w1", Lease: 1}, norn.ErrNotFound)
			b.unchanged("calls on an unknown task", before)
		})

		t.Run("AfterReclaimRefusesEveryCallWithTheOldLease", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			c1, c2 := reclaimed(b)
			before := b.get("f")
			b.leaseCalls("stale lease", ref(c1), norn.ErrLeaseLost)
			// The new owner's name with the old lease is refused too.
			old := ref(c2)
			old.Lease = 1
			b.leaseCalls("new owner, old lease", old, norn.ErrLeaseLost)
			sameTask(t, "stale calls change nothing", before, b.get("f"))
		})

		t.Run("AfterReclaimOnlyTheNewLeaseWorks", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			c1, c2 := reclaimed(b)
			b.leaseCalls("stale lease", ref(c1), norn.ErrLeaseLost)
			b.heartbeat(c2, norn.Heartbeat{Progress: ptr(0.1)})
			b.appendLog(c2, `1`)
			b.complete(c2, `"second"`)
			g := b.get("f")
			jsonEq(t, "result", g.Result, `"second"`)
			b.leaseCalls("stale lease after completion", ref(c1), norn.ErrLeaseLost)
			sameTask(t, "stale calls after completion change nothing", g, b.get("f"))
		})
	})
}

// exerciseRepeatedCall checks what a worker whose reply was lost may do: send
// the same finishing call again.
func exerciseRepeatedCall(t *testing.T, setup setupFunc) {
	t.Run("RepeatedCall", func(t *testing.T) {
		t.Parallel()

		t.Run("FinishingCallSucceedsOnlyAsAnExactRepeat", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			retry := &norn.RetryPolicy{MaxRetries: 5, Base: dur(time.Minute)}
			b.submit(norn.NewTask{ID: "done", Queue: "q1"}, norn.NewTask{ID: "failed", Queue: "q2", Retry: retry},
				norn.NewTask{ID: "aborted", Queue: "q3"}, norn.NewTask{ID: "yielded", Queue: "q4"})
			boom, other := norn.ErrorInfo{Code: "boom"}, norn.ErrorInfo{Code: "other"}
			calls := []struct {
				queue  string
				finish func(norn.LeaseRef) error
				// others must stay lease_lost after finish took effect.
				others map[string]func(norn.LeaseRef) error
			}{
				{"q1", func(r norn.LeaseRef) error { return s.Complete(b.ctx, r, json.RawMessage(`{"ok":1}`)) },
					map[string]func(norn.LeaseRef) error{
						"Fail":  func(r norn.LeaseRef) error { return s.Fail(b.ctx, r, boom) },
						"Abort": func(r norn.LeaseRef) error { return s.Abort(b.ctx, r, boom) },
						"Yield": func(r norn.LeaseRef) error { return s.Yield(b.ctx, r) },
					}},
				{"q2", func(r norn.LeaseRef) error { return s.Fail(b.ctx, r, boom) },
					map[string]func(norn.LeaseRef) error{
						"Complete":          func(r norn.LeaseRef) error { return s.Complete(b.ctx, r, nil) },
						"Fail another code": func(r norn.LeaseRef) error { return s.Fail(b.ctx, r, other) },
						"Abort":             func(r norn.LeaseRef) error { return s.Abort(b.ctx, r, boom) },
					}},
				{"q3", func(r norn.LeaseRef) error { return s.Abort(b.ctx, r, boom) },
					map[string]func(norn.LeaseRef) error{
						"Complete":           func(r norn.LeaseRef) error { return s.Complete(b.ctx, r, nil) },
						"Abort another code": func(r norn.LeaseRef) error { return s.Abort(b.ctx, r, other) },
						"Yield":              func(r norn.LeaseRef) error { return s.Yield(b.ctx, r) },
					}},
				{"q4", func(r norn.LeaseRef) error { return s.Yield(b.ctx, r) },
					map[string]func(norn.LeaseRef) error{
						"Complete": func(r norn.LeaseRef) error { return s.Complete(b.ctx, r, nil) },
						"Fail":     func(r norn.LeaseRef) error { return s.Fail(b.ctx, r, boom) },
					}},
			}
			for _, c := range calls {
				tk := b.claim("w1", c.queue)
				if err := c.finish(ref(tk)); err != nil {
					t.Fatalf("%s: first call: %v", tk.ID, err)
				}
				after := b.get(tk.ID)
				b.clock.Advance(time.Second)
				if err := c.finish(ref(tk)); err != nil {
					t.Fatalf("%s: repeated call: %v, want success", tk.ID, err)
				}
				sameTask(t, tk.ID+": a repeat changes nothing", after, b.get(tk.ID))
				stranger := ref(tk)
				stranger.Worker = "w2"
				wantErr(t, tk.ID+": the same call by another worker", c.finish(stranger), norn.ErrLeaseLost)
				for name, call := range c.others {
					wantErr(t, tk.ID+": "+name+" after the lease ended", call(ref(tk)), norn.ErrLeaseLost)
				}
				sameTask(t, tk.ID+": refused calls change nothing", after, b.get(tk.ID))
			}
			// Once the task is claimed again the old lease is simply lost.
			b.advance(time.Minute)
			again := b.claim("w1", "q2")
			if again.ID != "failed" || again.Lease != 2 {
				t.Fatalf("claimed %q lease %d, want failed lease 2", again.ID, again.Lease)
			}
			old := ref(again)
			old.Lease = 1
			wantErr(t, "Fail repeated after a new claim", s.Fail(b.ctx, old, boom), norn.ErrLeaseLost)
			again = b.claim("w1", "q4")
			old = ref(again)
			old.Lease = 1
			wantErr(t, "Yield repeated after a new claim", s.Yield(b.ctx, old), norn.ErrLeaseLost)
			// Through a lease batch as well.
			res, err := s.LeaseBatch(b.ctx, []norn.LeaseOp{
				{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: "done", Worker: "w1", Lease: 1}},
				{Op: norn.OpAbort, LeaseRef: norn.LeaseRef{TaskID: "aborted", Worker: "w1", Lease: 1}, Error: &other},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res[0].Err != nil {
				t.Fatalf("batched repeat of Complete: %v, want success", res[0].Err)
			}
			if res[1].Err == nil || !errors.Is(res[1].Err, norn.ErrLeaseLost) {
				t.Fatalf("batched Abort with another code: %v, want lease_lost", res[1].Err)
			}
		})
	})
}

// failRetryControl: the wait a worker asks for (retry_in) and the policy's jitter.
func failRetryControl(t *testing.T, setup setupFunc) {
	t.Run("RetryInReplacesTheBackoffWithinMax", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		pol := norn.RetryPolicy{MaxRetries: 3, Base: dur(time.Second), Max: dur(time.Hour), Jitter: norn.JitterFull}
		c := b.claimed("w", norn.NewTask{ID: "r", Queue: "q", Retry: &pol})
		if err := s.Fail(b.ctx, ref(c), norn.ErrorInfo{Code: "rate_limited", RetryIn: dur(90 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		g := b.status("r", norn.StatusScheduled)
		eqTime(t, "run_at after retry_in 90s", g.RunAt, b.now().Add(90*time.Second))
		if g.Retry == nil || g.Retry.Jitter != norn.JitterFull {
			t.Fatalf("retry policy read back as %+v, want jitter full", g.Retry)
		}
		if e := g.Errors[len(g.Errors)-1]; e.Code != "rate_limited" || e.RetryIn != 0 {
			t.Fatalf("recorded error %+v: want the code without retry_in", e)
		}
		b.advance(90 * time.Second)
		c = b.claim("w", "q")
		// Through a lease batch, and past the policy's max: capped at max.
		res, err := s.LeaseBatch(b.ctx, []norn.LeaseOp{{Op: norn.OpFail, LeaseRef: ref(c), Error: &norn.ErrorInfo{Code: "later", RetryIn: dur(30 * time.Hour)}}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("LeaseBatch fail: %v %+v", err, res)
		}
		eqTime(t, "run_at after retry_in beyond max", b.status("r", norn.StatusScheduled).RunAt, b.now().Add(time.Hour))
	})

	t.Run("RetryInAddsNoRetry", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := b.claimed("w", norn.NewTask{ID: "n", Queue: "q", Retry: noRetry})
		if err := s.Fail(b.ctx, ref(c), norn.ErrorInfo{Code: "x", RetryIn: dur(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		b.status("n", norn.StatusAborted)
	})

	t.Run("RetryInOnAbortIsRefused", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		c := b.claimed("w", norn.NewTask{ID: "a", Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 1}})
		before := b.snapshot()
		wantField(t, "Abort with retry_in", s.Abort(b.ctx, ref(c), norn.ErrorInfo{Code: "x", RetryIn: dur(time.Minute)}), norn.ErrInvalidArgument, "error.retry_in")
		b.unchanged("refused abort", before)
	})

	t.Run("JitterSpreadsWaitsWithinTheBackoff", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		pol := norn.RetryPolicy{MaxRetries: 1, Base: dur(time.Hour), Jitter: norn.JitterEqual}
		waits := map[time.Duration]bool{}
		for i := range 8 {
			c := b.claimed("w", norn.NewTask{ID: fmt.Sprint("j", i), Queue: "q", Retry: &pol})
			b.fail(c, "x")
			w := b.status(c.ID, norn.StatusScheduled).RunAt.Sub(b.now())
			if w < 30*time.Minute-time.Millisecond || w > time.Hour {
				t.Fatalf("%s: equal jitter waited %s, want 30m to 1h", c.ID, w)
			}
			waits[w.Round(time.Second)] = true
		}
		if len(waits) < 4 {
			t.Fatalf("8 failures drew only %d distinct waits", len(waits))
		}
	})
}

// failDefaultRetries: a task without a policy follows norn.DefaultRetry; a zero policy never retries.
func failDefaultRetries(t *testing.T, setup setupFunc) {
	t.Run("WithoutARetryPolicyFollowsTheDefault", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		c := b.claimed("w", norn.NewTask{ID: "d", Queue: "q2"})
		b.fail(c, "boom")
		g := b.status("d", norn.StatusScheduled)
		if g.Retry != nil {
			t.Fatalf("the default policy was stored with the task: %+v", g.Retry)
		}
		// Retry 0 of DefaultRetry: its base, spread by equal jitter.
		w := g.RunAt.Sub(b.now())
		if base := norn.DefaultRetry.Base.D(); w < base/2-time.Millisecond || w > base {
			t.Fatalf("first default retry waits %s, want %s to %s", w, base/2, base)
		}
		// The last retry the default allows, then an abort.
		for range norn.DefaultRetry.MaxRetries {
			b.advance(time.Hour)
			b.fail(b.claim("w", "q2"), "boom")
		}
		if g := b.status("d", norn.StatusAborted); g.Attempts != norn.DefaultRetry.MaxRetries+1 {
			t.Fatalf("aborted after %d attempts, want %d", g.Attempts, norn.DefaultRetry.MaxRetries+1)
		}
	})

	t.Run("AZeroRetryPolicyAborts", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		n := b.claimed("w", norn.NewTask{ID: "n", Queue: "q2", Retry: noRetry})
		if err := s.Fail(b.ctx, ref(n), norn.ErrorInfo{Code: "nope", Description: "d"}); err != nil {
			t.Fatal(err)
		}
		g := b.status("n", norn.StatusAborted)
		lastError(t, g, "nope")
		lastHistory(t, g, norn.TaskAbort, b.now())
	})
}
