package norn

import (
	"errors"
	"testing"
	"time"
)

func TestRuntimeLimit(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 1, 0, 0, 0, 123, time.UTC)
	cases := []struct {
		name    string
		started time.Time
		max     time.Duration
		want    time.Time
	}{
		{"no limit", start, 0, time.Time{}},
		{"never claimed", time.Time{}, time.Minute, time.Time{}},
		{"whole microseconds", start, time.Minute, start.Add(time.Minute)},
		{"rounded up to a microsecond", start, 1500 * time.Nanosecond, start.Add(2 * time.Microsecond)},
		{"a nanosecond is a microsecond", start, 1, start.Add(time.Microsecond)},
	}
	for _, c := range cases {
		if got := RuntimeLimit(c.started, Duration(c.max)); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestClaimDeadline(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		lease, max time.Duration
		want       time.Time
	}{
		{"no limit: the lease", 30 * time.Second, 0, now.Add(30 * time.Second)},
		{"limit beyond the lease", 30 * time.Second, time.Hour, now.Add(30 * time.Second)},
		{"limit shorter than the lease", 30 * time.Second, 5 * time.Second, now.Add(5 * time.Second)},
	}
	for _, c := range cases {
		if got := ClaimDeadline(now, c.lease, Duration(c.max)); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestAfterTimeoutMaxRuntime(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	capped := Task{Attempts: 1, Started: start, MaxRuntime: Duration(time.Minute), Deadline: start.Add(time.Minute)}
	cases := []struct {
		name   string
		task   Task
		status Status
		code   string
	}{
		{"lease capped at the limit", capped, StatusReady, CodeMaxRuntime},
		{"lease ended before the limit: a plain timeout",
			Task{Attempts: 1, Started: start, MaxRuntime: Duration(time.Minute), Deadline: start.Add(10 * time.Second)}, StatusReady, CodeTimeout},
		{"no limit", Task{Attempts: 1, Started: start, Deadline: start.Add(time.Minute)}, StatusReady, CodeTimeout},
		{"attempts used up", Task{Attempts: 2, MaxAttempts: 2, Started: start, MaxRuntime: Duration(time.Minute),
			Deadline: start.Add(time.Minute)}, StatusAborted, CodeAttemptsExhausted},
	}
	for _, c := range cases {
		// The monitor may run late: the decision rests on the deadline, not on now.
		o := AfterTimeout(&c.task, start.Add(time.Hour))
		if o.Status != c.status || o.Error.Code != c.code {
			t.Errorf("%s: %+v", c.name, o)
		}
		if c.status == StatusReady && o.History != TaskTimeout {
			t.Errorf("%s: history %s, want TaskTimeout", c.name, o.History)
		}
	}
}

func TestMaxRuntimeValidation(t *testing.T) {
	t.Parallel()
	n := NewTask{Queue: "q", MaxRuntime: -1}
	var ne *Error
	if err := n.Validate(); !errors.As(err, &ne) || ne.Field != "max_runtime" {
		t.Errorf("negative task max_runtime: %v", err)
	}
	neg := Duration(-1)
	if err := (&QueueUpdate{MaxRuntime: &neg}).Validate(); !errors.As(err, &ne) || ne.Field != "max_runtime" {
		t.Errorf("negative queue max_runtime: %v", err)
	}
	zero := Duration(0)
	if err := (&QueueUpdate{MaxRuntime: &zero}).Validate(); err != nil {
		t.Errorf("zero queue max_runtime removes the limit, got %v", err)
	}
}

func TestInitialMaxRuntime(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	qd := DefaultQueueDefaults()
	qd.MaxRuntime = Duration(time.Hour)
	none := func(string) Status { return "" }
	if in := (&NewTask{Queue: "q"}).Initial(now, &qd, none); in.MaxRuntime != qd.MaxRuntime {
		t.Errorf("queue default not applied: %v", in.MaxRuntime)
	}
	if in := (&NewTask{Queue: "q", MaxRuntime: Duration(time.Minute)}).Initial(now, &qd, none); in.MaxRuntime != Duration(time.Minute) {
		t.Errorf("task's own limit not kept: %v", in.MaxRuntime)
	}
	plain := DefaultQueueDefaults()
	if in := (&NewTask{Queue: "q"}).Initial(now, &plain, none); in.MaxRuntime != 0 {
		t.Errorf("no limit by default, got %v", in.MaxRuntime)
	}
}

func TestScheduleTaskCarriesMaxRuntime(t *testing.T) {
	t.Parallel()
	s := Schedule{Name: "n", Queue: "q", Cron: "@hourly", MaxRuntime: Duration(time.Minute)}
	if n := s.TaskFor(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)); n.MaxRuntime != Duration(time.Minute) {
		t.Fatalf("schedule task max_runtime %v, want 1m", n.MaxRuntime)
	}
}
