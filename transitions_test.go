package norn

import (
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
		{"failure that aborts", AfterFailure(&Task{Attempts: 1}, now, ErrorInfo{Code: "e"}), true, false, TaskAbort},
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
