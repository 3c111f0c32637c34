package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseWorkerRetries holds the worker-facing rules a lost reply or an idle
// worker depends on: staying visible while idle, leases that heartbeats do
// not shorten, finishing calls and log appends that may be retried, and a
// closed store that says so.
func exerciseWorkerRetries(t *testing.T, setup setupFunc) {
	t.Run("WorkerRetries", func(t *testing.T) {
		t.Parallel()
		exerciseWorkerRetriesCases(t, func(t *testing.T) *testBundle {
			t.Parallel()
			_, b := setup(t)
			return b
		})
	})
}

func exerciseWorkerRetriesCases(t *testing.T, fresh func(*testing.T) *testBundle) {
	t.Run("ClaimThatFindsNothingKeepsTheWorkerActive", func(t *testing.T) {
		e := fresh(t)
		id, err := e.s.RegisterWorker(e.ctx, norn.WorkerInfo{Name: "idle", Queues: []string{"empty"}})
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(norn.ActiveWorkerWindow + time.Minute)
		if ts := e.claimReq(norn.ClaimRequest{Worker: id, Queues: []string{"empty"}}); len(ts) != 0 {
			t.Fatalf("claimed %d tasks from an empty queue", len(ts))
		}
		st, err := e.s.Stats(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.ActiveWorkers != 1 {
			t.Fatalf("active workers after an empty claim: %d, want 1", st.ActiveWorkers)
		}
		ws, err := e.s.Workers(e.ctx)
		if err != nil || len(ws) != 1 {
			t.Fatalf("Workers: %+v, %v", ws, err)
		}
		if age := e.now().Sub(ws[0].LastSeen); age < 0 || age > 5*time.Second {
			t.Fatalf("last seen %v before the empty claim, want at most 5s", age)
		}
	})

	t.Run("HeartbeatKeepsTheLeaseLengthTheClaimGranted", func(t *testing.T) {
		e := fresh(t)
		e.submitOne(norn.NewTask{ID: "short", Queue: "q", Timeout: dur(time.Second)})
		c := e.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Timeout: dur(30 * time.Second)})[0]
		eqTime(t, "deadline at claim", c.Deadline, e.now().Add(30*time.Second))
		e.clock.Advance(500 * time.Millisecond)
		dl, err := e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{})
		if err != nil {
			t.Fatal(err)
		}
		eqTime(t, "deadline after a heartbeat", dl, e.now().Add(30*time.Second))
		e.advance(20 * time.Second)
		e.status("short", norn.StatusRunning)
		// An explicit extension sets the length from then on.
		if dl, err = e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Extend: dur(5 * time.Minute)}); err != nil {
			t.Fatal(err)
		}
		eqTime(t, "deadline after extend", dl, e.now().Add(5*time.Minute))
		e.clock.Advance(time.Minute)
		if dl, err = e.s.Heartbeat(e.ctx, ref(c), norn.Heartbeat{Progress: ptr(0.5)}); err != nil {
			t.Fatal(err)
		}
		eqTime(t, "deadline after a heartbeat following extend", dl, e.now().Add(5*time.Minute))
		eqTime(t, "stored deadline", e.get("short").Deadline, dl)
		// Without a claim timeout the lease is the task's own.
		e.submitOne(norn.NewTask{ID: "own", Queue: "q2", Timeout: dur(7 * time.Second)})
		c2 := e.claim("w", "q2")
		e.clock.Advance(time.Second)
		if dl, err = e.s.Heartbeat(e.ctx, ref(c2), norn.Heartbeat{}); err != nil {
			t.Fatal(err)
		}
		eqTime(t, "deadline of a task's own timeout", dl, e.now().Add(7*time.Second))
	})

	t.Run("RetriedFinishingCallSucceedsOnlyAsAnExactRepeat", func(t *testing.T) {
		e := fresh(t)
		retry := &norn.RetryPolicy{MaxRetries: 5, Base: dur(time.Minute)}
		e.submit(norn.NewTask{ID: "done", Queue: "q1"}, norn.NewTask{ID: "failed", Queue: "q2", Retry: retry},
			norn.NewTask{ID: "aborted", Queue: "q3"}, norn.NewTask{ID: "yielded", Queue: "q4"})
		boom, other := norn.ErrorInfo{Code: "boom"}, norn.ErrorInfo{Code: "other"}
		calls := []struct {
			queue  string
			finish func(norn.LeaseRef) error
			// others must stay lease_lost after finish took effect.
			others map[string]func(norn.LeaseRef) error
		}{
			{"q1", func(r norn.LeaseRef) error { return e.s.Complete(e.ctx, r, json.RawMessage(`{"ok":1}`)) },
				map[string]func(norn.LeaseRef) error{
					"Fail":  func(r norn.LeaseRef) error { return e.s.Fail(e.ctx, r, boom) },
					"Abort": func(r norn.LeaseRef) error { return e.s.Abort(e.ctx, r, boom) },
					"Yield": func(r norn.LeaseRef) error { return e.s.Yield(e.ctx, r) },
				}},
			{"q2", func(r norn.LeaseRef) error { return e.s.Fail(e.ctx, r, boom) },
				map[string]func(norn.LeaseRef) error{
					"Complete":          func(r norn.LeaseRef) error { return e.s.Complete(e.ctx, r, nil) },
					"Fail another code": func(r norn.LeaseRef) error { return e.s.Fail(e.ctx, r, other) },
					"Abort":             func(r norn.LeaseRef) error { return e.s.Abort(e.ctx, r, boom) },
				}},
			{"q3", func(r norn.LeaseRef) error { return e.s.Abort(e.ctx, r, boom) },
				map[string]func(norn.LeaseRef) error{
					"Complete":           func(r norn.LeaseRef) error { return e.s.Complete(e.ctx, r, nil) },
					"Abort another code": func(r norn.LeaseRef) error { return e.s.Abort(e.ctx, r, other) },
					"Yield":              func(r norn.LeaseRef) error { return e.s.Yield(e.ctx, r) },
				}},
			{"q4", func(r norn.LeaseRef) error { return e.s.Yield(e.ctx, r) },
				map[string]func(norn.LeaseRef) error{
					"Complete": func(r norn.LeaseRef) error { return e.s.Complete(e.ctx, r, nil) },
					"Fail":     func(r norn.LeaseRef) error { return e.s.Fail(e.ctx, r, boom) },
				}},
		}
		for _, c := range calls {
			tk := e.claim("w1", c.queue)
			if err := c.finish(ref(tk)); err != nil {
				t.Fatalf("%s: first call: %v", tk.ID, err)
			}
			after := e.get(tk.ID)
			e.clock.Advance(time.Second)
			if err := c.finish(ref(tk)); err != nil {
				t.Fatalf("%s: repeated call: %v, want success", tk.ID, err)
			}
			sameTask(t, tk.ID+": a repeat changes nothing", after, e.get(tk.ID))
			stranger := ref(tk)
			stranger.Worker = "w2"
			wantErr(t, tk.ID+": the same call by another worker", c.finish(stranger), norn.ErrLeaseLost)
			for name, call := range c.others {
				wantErr(t, tk.ID+": "+name+" after the lease ended", call(ref(tk)), norn.ErrLeaseLost)
			}
			sameTask(t, tk.ID+": refused calls change nothing", after, e.get(tk.ID))
		}
		// Once the task is claimed again the old lease is simply lost.
		e.advance(time.Minute)
		again := e.claim("w1", "q2")
		if again.ID != "failed" || again.Lease != 2 {
			t.Fatalf("claimed %q lease %d, want failed lease 2", again.ID, again.Lease)
		}
		old := ref(again)
		old.Lease = 1
		wantErr(t, "Fail repeated after a new claim", e.s.Fail(e.ctx, old, boom), norn.ErrLeaseLost)
		again = e.claim("w1", "q4")
		old = ref(again)
		old.Lease = 1
		wantErr(t, "Yield repeated after a new claim", e.s.Yield(e.ctx, old), norn.ErrLeaseLost)
		// Through a lease batch as well.
		res, err := e.s.LeaseBatch(e.ctx, []norn.LeaseOp{
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

	t.Run("RetriedLogAppendReturnsTheStoredEntry", func(t *testing.T) {
		e := fresh(t)
		e.submitOne(norn.NewTask{ID: "l", Queue: "q"})
		c := e.claim("w", "q")
		first, err := e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Seq: 1, Data: json.RawMessage(`{"step":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
		again, err := e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Seq: 1, Data: json.RawMessage(`{"step":1}`)})
		if err != nil {
			t.Fatalf("repeated append: %v, want the stored entry", err)
		}
		if again.Seq != 1 || again.Lease != first.Lease || !again.Time.Equal(first.Time) || string(again.Data) != `{"step":1}` {
			t.Fatalf("repeated append returned %+v, want %+v", again, first)
		}
		_, err = e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Seq: 1, Data: json.RawMessage(`{"step":2}`)})
		wantErr(t, "append of other data under a used seq", err, norn.ErrConflict)
		if _, err := e.s.AppendLog(e.ctx, ref(c), norn.LogAppend{Seq: 2, Data: json.RawMessage(`{"step":2}`)}); err != nil {
			t.Fatal(err)
		}
		log, err := e.s.ReadLog(e.ctx, "l", 0, 0)
		if err != nil || len(log) != 2 {
			t.Fatalf("ReadLog: %d entries, %v; want 2", len(log), err)
		}
	})

	t.Run("ErrClosedOnlyAfterClose", func(t *testing.T) {
		e := fresh(t)
		e.submitOne(norn.NewTask{ID: "x", Queue: "q"})
		if _, err := e.s.Get(e.ctx, "missing"); errors.Is(err, norn.ErrClosed) {
			t.Fatalf("not found on an open store matches ErrClosed: %v", err)
		}
		if err := e.s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		_, err := e.s.Get(e.ctx, "x")
		if !errors.Is(err, norn.ErrClosed) || !errors.Is(err, norn.ErrUnavailable) {
			t.Fatalf("Get after Close: %v, want an error matching ErrClosed and ErrUnavailable", err)
		}
		_, err = e.s.Submit(e.ctx, norn.NewTask{Queue: "q"})
		wantErr(t, "Submit after Close", err, norn.ErrClosed)
	})
}
