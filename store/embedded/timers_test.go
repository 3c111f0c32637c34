package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// checkTimers verifies that every task with a pending duty has its timer,
// due when timerFor says, in the heap of its status (leases for running
// tasks, timers for the rest), that both heaps are ordered and know
// their entries' positions, and that a lease finds its task.
func checkTimers(t *testing.T, s *Store, when string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, h := range map[string]timerHeap{"timers": s.timers, "leases": s.leases} {
		for i, e := range h {
			tk := e.t
			if e.at != tk.timerAt {
				t.Fatalf("%s: %s entry %d (%s) is due at %d, its task at %d", when, name, i, tk.id, e.at, tk.timerAt)
			}
			if int(tk.timerIdx) != i {
				t.Fatalf("%s: %s entry %d (%s) has timerIdx %d", when, name, i, tk.id, tk.timerIdx)
			}
			if tk.inLeases != (name == "leases") {
				t.Fatalf("%s: task %s in %s has inLeases %v", when, tk.id, name, tk.inLeases)
			}
			if p := (i - 1) / 2; i > 0 && h.less(i, p) {
				t.Fatalf("%s: %s entry %d is due before its parent", when, name, i)
			}
		}
	}
	for tk := range s.tasks.all() {
		if got := s.tasks.getClaimed(tk.id); got != tk {
			t.Fatalf("%s: getClaimed(%s) = %v", when, tk.id, got)
		}
		at := timerFor(tk)
		if at == 0 {
			if tk.timerIdx >= 0 {
				t.Fatalf("%s: task %s (%s) has a timer but no duty", when, tk.id, statusOf(tk.st.status))
			}
			continue
		}
		if tk.timerIdx < 0 || tk.timerAt != at {
			t.Fatalf("%s: task %s (%s) due at %d has timer %d at index %d", when, tk.id, statusOf(tk.st.status), at, tk.timerAt, tk.timerIdx)
		}
		if tk.inLeases != (tk.st.status == stRunning) {
			t.Fatalf("%s: task %s (%s) has inLeases %v", when, tk.id, statusOf(tk.st.status), tk.inLeases)
		}
	}
}

// TestTimersFollowTransitions drives tasks through random transitions
// (claims, completions, failures with retries, yields, heartbeats,
// cancellations, delays, sweeps that time leases out, release delays and
// purge) and checks the two timer heaps and task lookups after every
// step and after a reopen: a lease deadline lives in the heap of running
// tasks, every other duty in the main one, and sweeping fires whichever is
// due first. Half the tasks have generated (UUID) ids, half chosen ones.
func TestTimersFollowTransitions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := newFakeClock()
	open := func() *Store {
		s, err := Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	ret := norn.Retention{Completed: norn.Duration(3 * time.Minute), Aborted: norn.Duration(time.Minute)}
	if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{Retention: &ret}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	two := 2
	var running []*norn.Task
	n := 0
	for step := 0; step < 1500; step++ {
		switch op := rng.IntN(10); {
		case op < 2:
			var nts []norn.NewTask
			for range 1 + rng.IntN(5) {
				n++
				id := fmt.Sprintf("t%05d", n)
				if rng.IntN(2) == 0 {
					id = "" // generated
				}
				nt := norn.NewTask{ID: id, Queue: "q", Timeout: norn.Duration(time.Duration(1+rng.IntN(120)) * time.Second),
					MaxAttempts: &two, Retry: &norn.RetryPolicy{MaxRetries: 1, Base: norn.Duration(time.Second), Max: norn.Duration(time.Second)}}
				if rng.IntN(4) == 0 {
					nt.Delay = norn.Duration(time.Duration(rng.IntN(90)) * time.Second)
				}
				nts = append(nts, nt)
			}
			mustSubmit(t, s, nts...)
		case op < 4:
			running = append(running, mustClaim(t, s, fmt.Sprintf("w%d", rng.IntN(3)), 1+rng.IntN(4), "q")...)
		case op < 8 && len(running) > 0:
			k := rng.IntN(len(running))
			tk := running[k]
			running = append(running[:k], running[k+1:]...)
			var err error
			switch rng.IntN(6) {
			case 0, 1:
				err = s.Complete(bg, refOf(tk), json.RawMessage(`1`))
			case 2:
				err = s.Fail(bg, refOf(tk), norn.ErrorInfo{Code: "x"})
			case 3:
				err = s.Yield(bg, refOf(tk))
			case 4:
				_, err = s.Heartbeat(bg, refOf(tk), norn.Heartbeat{Extend: norn.Duration(time.Minute)})
				running = append(running, tk)
			case 5:
				_, err = s.Cancel(bg, tk.ID)
			}
			// A lease a sweep already ended (the task may even be purged
			// since, or, for a cancel, ended for good) is an expected refusal.
			if err != nil && !errors.Is(err, norn.ErrLeaseLost) && !errors.Is(err, norn.ErrCancelled) && !errors.Is(err, norn.ErrNotFound) && !errors.Is(err, norn.ErrConflict) {
				t.Fatalf("step %d: %v", step, err)
			}
		default:
			clock.Advance(time.Duration(rng.IntN(40)) * time.Second)
			if _, err := s.Sweep(bg); err != nil {
				t.Fatal(err)
			}
		}
		checkTimers(t, s, fmt.Sprintf("step %d", step))
		if step%500 == 499 {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = open()
			checkTimers(t, s, fmt.Sprintf("reopen at step %d", step))
		}
	}
	// Everything due fires: after an hour nothing is running or delayed,
	// and every ended task has been purged.
	clock.Advance(time.Hour)
	if _, err := s.Sweep(bg); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := s.Sweep(bg); err != nil {
		t.Fatal(err)
	}
	checkTimers(t, s, "end")
	s.mu.Lock()
	leases, timers := len(s.leases), len(s.timers)
	s.mu.Unlock()
	if leases != 0 || timers != 0 {
		t.Fatalf("after two hours %d leases and %d other timers are pending", leases, timers)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
