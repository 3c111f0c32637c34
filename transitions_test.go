package norn

import (
	"fmt"
	"testing"
	"time"
)

func TestAfterYield(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	o := AfterYield(now)
	if o.Status != StatusReady || !o.RunAt.Equal(now) || o.History != TaskYield || o.Error.Code != "" {
		t.Fatalf("AfterYield = %+v, want ready at %v with TaskYield", o, now)
	}
}

func TestOutcomeOwnerAndAttempt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	retry := &RetryPolicy{MaxRetries: 3, Base: Duration(time.Second)}
	for _, c := range []struct {
		name        string
		o           Outcome
		keepsOwner  bool
		givesBack   bool
		wantHistory HistoryType
	}{
		{"yield", AfterYield(now), false, true, TaskYield},
		{"snooze until later", AfterSnooze(now, Snooze{Delay: Duration(time.Minute)}), true, true, TaskSnooze},
		{"snooze ready at once", AfterSnooze(now, Snooze{RunAt: now}), true, true, TaskSnooze},
		{"failure retried later", AfterFailure(&Task{Attempts: 1, Retry: retry}, now, ErrorInfo{Code: "e"}), false, false, TaskRetry},
		{"failure retried at once", AfterFailure(&Task{Attempts: 1, Retry: &RetryPolicy{MaxRetries: 1}}, now, ErrorInfo{Code: "e"}), false, false, TaskRetry},
		{"failure that aborts", AfterFailure(&Task{Attempts: 1, Retry: &RetryPolicy{}}, now, ErrorInfo{Code: "e"}), true, false, TaskAbort},
		{"timeout back to ready", AfterTimeout(&Task{Attempts: 1}, now), false, false, TaskTimeout},
		{"timeout that aborts", AfterTimeout(&Task{Attempts: 2, MaxAttempts: 2}, now), true, false, TaskAbort},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.o.History != c.wantHistory {
				t.Fatalf("history %s, want %s", c.o.History, c.wantHistory)
			}
			if got := c.o.KeepsOwner(); got != c.keepsOwner {
				t.Errorf("KeepsOwner = %v, want %v", got, c.keepsOwner)
			}
			if got := c.o.GivesAttemptBack(); got != c.givesBack {
				t.Errorf("GivesAttemptBack = %v, want %v", got, c.givesBack)
			}
		})
	}
}

func TestSweepReportCountTimeout(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var r SweepReport
	r.CountTimeout(AfterTimeout(&Task{Attempts: 1}, now))
	r.CountTimeout(AfterTimeout(&Task{Attempts: 2, MaxAttempts: 2}, now))
	if r != (SweepReport{TimedOut: 2, Aborted: 1}) {
		t.Fatalf("report %+v, want 2 timed out of which 1 aborted", r)
	}
}

func TestAfterFailureRetryWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	policy := func(j string) *RetryPolicy {
		return &RetryPolicy{MaxRetries: 5, Base: Duration(time.Minute), Max: Duration(time.Hour), Jitter: j}
	}
	for _, c := range []struct {
		name     string
		task     Task
		e        ErrorInfo
		min, max time.Duration // the wait's bounds, inclusive
		status   Status
	}{
		{"no jitter waits the backoff", Task{ID: "a", Attempts: 3, Retry: policy("")}, ErrorInfo{}, 4 * time.Minute, 4 * time.Minute, StatusScheduled},
		{"none is no jitter", Task{ID: "a", Attempts: 3, Retry: policy(JitterNone)}, ErrorInfo{}, 4 * time.Minute, 4 * time.Minute, StatusScheduled},
		{"full jitter stays within the backoff", Task{ID: "a", Attempts: 3, Retry: policy(JitterFull)}, ErrorInfo{}, 0, 4 * time.Minute, StatusScheduled},
		{"equal jitter keeps half", Task{ID: "a", Attempts: 3, Retry: policy(JitterEqual)}, ErrorInfo{}, 2 * time.Minute, 4 * time.Minute, StatusScheduled},
		{"retry_in replaces the backoff", Task{ID: "a", Attempts: 3, Retry: policy(JitterFull)}, ErrorInfo{RetryIn: Duration(90 * time.Second)}, 90 * time.Second, 90 * time.Second, StatusScheduled},
		{"retry_in is capped by max", Task{ID: "a", Attempts: 1, Retry: policy("")}, ErrorInfo{RetryIn: Duration(5 * time.Hour)}, time.Hour, time.Hour, StatusScheduled},
		{"retry_in adds no retry", Task{ID: "a", Attempts: 1, Retry: &RetryPolicy{}}, ErrorInfo{RetryIn: Duration(time.Minute)}, 0, 0, StatusAborted},
		{"no policy follows the default", Task{ID: "a", Attempts: 1}, ErrorInfo{}, DefaultRetry.Base.D() / 2, DefaultRetry.Base.D(), StatusScheduled},
		{"the default's last retry", Task{ID: "a", Attempts: DefaultRetry.MaxRetries}, ErrorInfo{}, DefaultRetry.Max.D() / 2, DefaultRetry.Max.D(), StatusScheduled},
		{"the default's retries used up", Task{ID: "a", Attempts: DefaultRetry.MaxRetries + 1}, ErrorInfo{}, 0, 0, StatusAborted},
		{"retry_in adds no attempt", Task{ID: "a", Attempts: 2, MaxAttempts: 2, Retry: policy("")}, ErrorInfo{RetryIn: Duration(time.Minute)}, 0, 0, StatusAborted},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := AfterFailure(&c.task, now, c.e)
			if o.Status != c.status {
				t.Fatalf("status %s, want %s", o.Status, c.status)
			}
			if o.Error.RetryIn != 0 {
				t.Errorf("recorded error keeps retry_in %s", o.Error.RetryIn)
			}
			if o.Status != StatusScheduled {
				return
			}
			if w := o.RunAt.Sub(now); w < c.min || w > c.max {
				t.Errorf("wait %s, want between %s and %s", w, c.min, c.max)
			}
		})
	}
}

func TestRetryJitterIsStableAndSpread(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{MaxRetries: 3, Base: Duration(time.Minute), Jitter: JitterFull}
	w := time.Minute
	seen := map[time.Duration]bool{}
	var below, above int
	for i := range 1000 {
		id := fmt.Sprintf("task-%d", i)
		d := p.jittered(w, id, 1)
		if d != p.jittered(w, id, 1) {
			t.Fatalf("%s: two decisions for one failure", id)
		}
		if d < 0 || d > w {
			t.Fatalf("%s: wait %s outside [0, %s]", id, d, w)
		}
		seen[d] = true
		if d < w/2 {
			below++
		} else {
			above++
		}
	}
	// 1000 failures spread over the whole range: each half gets a fair
	// share (a binomial(1000, ½) falls outside 400–600 with p < 1e-9).
	if below < 400 || above < 400 || len(seen) < 990 {
		t.Fatalf("poor spread: %d below half, %d above, %d distinct waits", below, above, len(seen))
	}
	if p.jittered(w, "task-1", 1) == p.jittered(w, "task-1", 2) {
		t.Fatal("the next attempt of a task drew the same wait")
	}
}

func TestOutcomeRequeue(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name   string
		o      Outcome
		status Status
		at     time.Time
	}{
		{"scheduled later", Outcome{Status: StatusScheduled, RunAt: now.Add(time.Minute)}, StatusScheduled, now.Add(time.Minute)},
		{"scheduled at now is ready", Outcome{Status: StatusScheduled, RunAt: now}, StatusReady, now},
		{"scheduled in the past is ready at its time", Outcome{Status: StatusScheduled, RunAt: now.Add(-time.Second)}, StatusReady, now.Add(-time.Second)},
		{"ready without a time is ready now", Outcome{Status: StatusReady}, StatusReady, now},
		{"ready never later than now", Outcome{Status: StatusReady, RunAt: now.Add(time.Hour)}, StatusReady, now},
		{"a timeout", AfterTimeout(&Task{Attempts: 1}, now), StatusReady, now},
		{"a yield", AfterYield(now), StatusReady, now},
	} {
		st, at := c.o.Requeue(now)
		if st != c.status || !at.Equal(c.at) {
			t.Errorf("%s: %s at %v, want %s at %v", c.name, st, at, c.status, c.at)
		}
	}
}
