package embedded

import (
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestSchedulesSurviveReopen: schedules, their cadence and what they last
// fired are on disk; after a restart the monitor picks them up, and the
// ticks missed while the store was closed follow catch_up.
func TestSchedulesSurviveReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := newFakeClock()
	s := newTestStore(t, Options{Dir: dir, Clock: clock, ManualSweep: true})
	sc, err := s.PutSchedule(bg, norn.Schedule{Name: "m", Queue: "q", Cron: "* * * * *", CatchUp: norn.CatchUpAll})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutSchedule(bg, norn.Schedule{Name: "paused", Queue: "q", Cron: "@hourly", Paused: true}); err != nil {
		t.Fatal(err)
	}
	first := sc.NextFire
	clock.Advance(first.Sub(clock.Now()))
	if _, err := s.Sweep(bg); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3*time.Minute + time.Second) // down for three ticks
	s2 := newTestStore(t, Options{Dir: dir, Clock: clock, ManualSweep: true})
	all, err := s2.ListSchedules(bg)
	if err != nil || len(all) != 2 || !all[1].Paused {
		t.Fatalf("after reopen: %v %v", all, err)
	}
	got := all[0]
	if !got.LastFire.Equal(first) || got.LastTask != norn.ScheduleTaskID("m", first) || !got.NextFire.Equal(first.Add(time.Minute)) {
		t.Fatalf("after reopen: %+v", got)
	}
	rep, err := s2.Sweep(bg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Fired != 3 {
		t.Fatalf("fired %d after the restart, want the 3 missed ticks", rep.Fired)
	}
	for i := 0; i <= 3; i++ {
		if _, err := s2.Get(bg, norn.ScheduleTaskID("m", first.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatalf("tick %d: %v", i, err)
		}
	}
}
