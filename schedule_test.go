package norn

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestSchedulePlan(t *testing.T) {
	base := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	min := func(n int) time.Time { return base.Add(time.Duration(n) * time.Minute) }
	every, err := ParseCron("cron", "* * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	hourly, err := ParseCron("cron", "0 * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		s           Schedule
		cron        *Cron // nil: every minute
		now         time.Time
		running     bool
		wantTicks   []time.Time
		wantSkipped int
		wantNext    time.Time
	}{
		{"NotDueYet", Schedule{NextFire: min(1)}, nil, min(0).Add(59 * time.Second), false,
			nil, 0, min(1)},
		{"DueOnTime", Schedule{NextFire: min(1)}, nil, min(1), false,
			[]time.Time{min(1)}, 0, min(2)},
		{"SlightlyLateIsStillOneTick", Schedule{NextFire: min(1)}, nil, min(1).Add(40 * time.Second), false,
			[]time.Time{min(1)}, 0, min(2)},
		{"PausedFiresNothing", Schedule{NextFire: min(1), Paused: true}, nil, min(10), false,
			nil, 0, min(1)},
		{"CatchUpOneFiresLatestMissed", Schedule{NextFire: min(1), CatchUp: CatchUpOne}, nil, min(10).Add(time.Second), false,
			[]time.Time{min(10)}, 9, min(11)},
		{"CatchUpDefaultIsOne", Schedule{NextFire: min(1)}, nil, min(5), false,
			[]time.Time{min(5)}, 4, min(6)},
		{"CatchUpAllFiresEveryMissedTick", Schedule{NextFire: min(1), CatchUp: CatchUpAll}, nil, min(3), false,
			[]time.Time{min(1), min(2), min(3)}, 0, min(4)},
		{"CatchUpAllKeepsTheLatestHundred", Schedule{NextFire: min(1), CatchUp: CatchUpAll}, nil, min(150), false,
			ticksFrom(min(51), 100), 50, min(151)},
		{"CatchUpNoneSkipsMissed", Schedule{NextFire: min(60), CatchUp: CatchUpNone}, hourly, min(185), false,
			nil, 3, min(240)},
		{"CatchUpNoneStillFiresOnTimeTick", Schedule{NextFire: min(1), CatchUp: CatchUpNone}, nil, min(5).Add(10 * time.Second), false,
			[]time.Time{min(5)}, 4, min(6)},
		{"OverlapSkipWhilePreviousRuns", Schedule{NextFire: min(1), Overlap: OverlapSkip}, nil, min(1), true,
			nil, 1, min(2)},
		{"OverlapSkipFiresWhenPreviousDone", Schedule{NextFire: min(1), Overlap: OverlapSkip}, nil, min(1), false,
			[]time.Time{min(1)}, 0, min(2)},
		{"OverlapSkipWithCatchUpAllFiresOnlyOne", Schedule{NextFire: min(1), Overlap: OverlapSkip, CatchUp: CatchUpAll}, nil, min(3), false,
			[]time.Time{min(3)}, 2, min(4)},
		{"OverlapAllowIgnoresRunning", Schedule{NextFire: min(1)}, nil, min(1), true,
			[]time.Time{min(1)}, 0, min(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cron
			if c == nil {
				c = every
			}
			p := tt.s.Plan(c, tt.now, tt.running)
			if len(p.Ticks) != len(tt.wantTicks) {
				t.Fatalf("ticks %v, want %v", p.Ticks, tt.wantTicks)
			}
			for i := range p.Ticks {
				if !p.Ticks[i].Equal(tt.wantTicks[i]) {
					t.Fatalf("tick %d = %s, want %s", i, p.Ticks[i], tt.wantTicks[i])
				}
			}
			if p.Skipped != tt.wantSkipped {
				t.Errorf("skipped %d, want %d", p.Skipped, tt.wantSkipped)
			}
			if !p.Next.Equal(tt.wantNext) {
				t.Errorf("next %s, want %s", p.Next, tt.wantNext)
			}
		})
	}
}

func ticksFrom(first time.Time, n int) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = first.Add(time.Duration(i) * time.Minute)
	}
	return out
}

func TestSchedulePlanLongOutageIsBounded(t *testing.T) {
	c, err := ParseCron("cron", "* * * * * *", "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start.Add(30 * 24 * time.Hour) // a month of per-second ticks
	s := Schedule{NextFire: start}
	p := s.Plan(c, now, false)
	if len(p.Ticks) != 1 || !p.Ticks[0].Equal(now) {
		t.Fatalf("ticks %v, want the single latest tick %s", p.Ticks, now)
	}
	if !p.Next.Equal(now.Add(time.Second)) {
		t.Fatalf("next %s", p.Next)
	}
}

func TestScheduleTaskFor(t *testing.T) {
	two := 2
	s := Schedule{Name: "nightly", Queue: "reports", Spec: json.RawMessage(`{"k":1}`), Priority: 3,
		Labels: map[string]string{"team": "a"}, MaxAttempts: &two, Timeout: Duration(time.Minute)}
	tick := time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC)
	n := s.TaskFor(tick)
	if n.ID != "schedule:nightly:20260308T070000Z" {
		t.Fatalf("id %q", n.ID)
	}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	if n.Labels[ScheduleLabel] != "nightly" || n.Labels["team"] != "a" || n.Queue != "reports" ||
		n.Priority != 3 || *n.MaxAttempts != 2 || n.Timeout.D() != time.Minute {
		t.Fatalf("task %+v", n)
	}
	if s.Labels[ScheduleLabel] != "" {
		t.Fatal("TaskFor changed the schedule's own labels")
	}
	if m := s.TaskFor(time.Time{}); m.ID != "" {
		t.Fatalf("manual trigger id %q, want a generated one", m.ID)
	}
	long := Schedule{Name: "n" + string(bytesOf('x', MaxScheduleNameLength-1)), Queue: "q", Cron: "@hourly"}
	if _, err := long.Validate(); err != nil {
		t.Fatalf("longest name: %v", err)
	}
	if err := ValidateID("id", long.TaskFor(tick).ID); err != nil {
		t.Fatalf("derived id of the longest name: %v", err)
	}
}

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestScheduleValidate(t *testing.T) {
	ok := func() Schedule {
		return Schedule{Name: "s", Queue: "q", Cron: "@hourly", Spec: json.RawMessage(`{}`)}
	}
	tests := []struct {
		name  string
		edit  func(*Schedule)
		field string
	}{
		{"MissingName", func(s *Schedule) { s.Name = "" }, "name"},
		{"BadName", func(s *Schedule) { s.Name = "a b" }, "name"},
		{"NameTooLong", func(s *Schedule) { s.Name = string(bytesOf('x', MaxScheduleNameLength+1)) }, "name"},
		{"MissingQueue", func(s *Schedule) { s.Queue = "" }, "queue"},
		{"BadCron", func(s *Schedule) { s.Cron = "nope" }, "cron"},
		{"BadZone", func(s *Schedule) { s.Timezone = "Nowhere/City" }, "timezone"},
		{"BadOverlap", func(s *Schedule) { s.Overlap = "queue" }, "overlap"},
		{"BadCatchUp", func(s *Schedule) { s.CatchUp = "some" }, "catch_up"},
		{"BadSpec", func(s *Schedule) { s.Spec = json.RawMessage(`{`) }, "spec"},
		{"ReservedLabel", func(s *Schedule) { s.Labels = map[string]string{ScheduleLabel: "x"} }, "labels." + ScheduleLabel},
		{"NegativeTimeout", func(s *Schedule) { s.Timeout = -1 }, "timeout"},
		{"NegativeMaxRuntime", func(s *Schedule) { s.MaxRuntime = -1 }, "max_runtime"},
		{"BadRetry", func(s *Schedule) { s.Retry = &RetryPolicy{MaxRetries: -1} }, "retry.max_retries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok()
			tt.edit(&s)
			_, err := s.Validate()
			var e *Error
			if !errors.As(err, &e) || e.Field != tt.field {
				t.Fatalf("got %v, want an error naming %s", err, tt.field)
			}
		})
	}
	s := ok()
	if _, err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	s.Normalize()
	if s.Overlap != OverlapAllow || s.CatchUp != CatchUpOne {
		t.Fatalf("defaults %q %q", s.Overlap, s.CatchUp)
	}
}
