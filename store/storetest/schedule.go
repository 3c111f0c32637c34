package storetest

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// The fake clock starts at 2030-01-02T03:04:05Z, so an every-minute schedule
// created then first fires at 03:05:00, 55 s later.
const everyMinute = "* * * * *"

func (b *testBundle) putSchedule(s norn.Schedule) *norn.Schedule {
	b.t.Helper()
	out, err := b.s.PutSchedule(b.ctx, s)
	b.must(err, "PutSchedule(%q)", s.Name)
	return out
}

func (b *testBundle) getSchedule(name string) *norn.Schedule {
	b.t.Helper()
	out, err := b.s.GetSchedule(b.ctx, name)
	b.must(err, "GetSchedule(%q)", name)
	return out
}

func (b *testBundle) updateSchedule(name string, u norn.ScheduleUpdate) *norn.Schedule {
	b.t.Helper()
	out, err := b.s.UpdateSchedule(b.ctx, name, u)
	b.must(err, "UpdateSchedule(%q)", name)
	return out
}

// scheduleTasks lists the ids of the tasks a schedule submitted, oldest first.
func (b *testBundle) scheduleTasks(name string) []string {
	b.t.Helper()
	p, err := b.s.List(b.ctx, norn.Query{Filter: norn.Filter{Labels: map[string]string{norn.ScheduleLabel: name}}, Limit: norn.MaxListLimit})
	b.must(err, "List(label %s=%s)", norn.ScheduleLabel, name)
	var ids []string
	for _, tk := range p.Tasks {
		ids = append(ids, tk.ID)
	}
	return ids
}

func (b *testBundle) wantScheduleTasks(name string, ticks ...time.Time) {
	b.t.Helper()
	got := b.scheduleTasks(name)
	var want []string
	for _, tick := range ticks {
		want = append(want, norn.ScheduleTaskID(name, tick))
	}
	if len(got) != len(want) {
		b.t.Fatalf("schedule %q submitted %v, want %v", name, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			b.t.Fatalf("schedule %q submitted %v, want %v", name, got, want)
		}
	}
}

func minuteSchedule(name string) norn.Schedule {
	return norn.Schedule{Name: name, Queue: "cron", Cron: everyMinute, Spec: json.RawMessage(`{"job":"report"}`)}
}

// firstTick is the first tick of an every-minute schedule created at the
// fake clock's start.
func firstTick(b *testBundle) time.Time { return b.now().Truncate(time.Minute).Add(time.Minute) }

func exerciseSchedules(t *testing.T, setup setupFunc) {
	t.Run("Schedule", func(t *testing.T) {
		t.Parallel()
		exerciseSchedulesPut(t, setup)
		exerciseSchedulesManageAndFire(t, setup)
		exerciseSchedulesSweepsAndCatchUp(t, setup)
		exerciseSchedulesOverlapPauseAndZones(t, setup)
	})
}

func exerciseSchedulesPut(t *testing.T, setup setupFunc) {
	t.Run("PutCreatesWithDefaultsAndNextFire", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		t0 := b.now()
		s := b.putSchedule(minuteSchedule("report"))
		if s.Overlap != norn.OverlapAllow || s.CatchUp != norn.CatchUpOne || s.Paused {
			t.Fatalf("defaults: overlap %q catch_up %q paused %v", s.Overlap, s.CatchUp, s.Paused)
		}
		eqTime(t, "next_fire", s.NextFire, firstTick(b))
		eqTime(t, "created", s.Created, t0)
		eqTime(t, "updated", s.Updated, t0)
		if !s.LastFire.IsZero() || s.LastTask != "" {
			t.Fatalf("new schedule has last fire %v / task %q", s.LastFire, s.LastTask)
		}
		got := b.getSchedule("report")
		if got.Queue != "cron" || got.Cron != everyMinute || string(got.Spec) != `{"job":"report"}` {
			t.Fatalf("stored %+v", got)
		}
	})

	t.Run("PutReplacesKeepingCreatedAndNextFire", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		first := b.putSchedule(minuteSchedule("report"))
		b.clock.Advance(10 * time.Second)
		s := minuteSchedule("report")
		s.Priority = 7
		second := b.putSchedule(s)
		eqTime(t, "created", second.Created, first.Created)
		eqTime(t, "next_fire", second.NextFire, first.NextFire)
		eqTime(t, "updated", second.Updated, b.now())
		if second.Priority != 7 {
			t.Fatalf("priority %d, want 7", second.Priority)
		}
		if again := b.putSchedule(s); !again.NextFire.Equal(second.NextFire) || again.Priority != 7 {
			t.Fatalf("a repeated put changed the schedule: %+v", again)
		}
	})

	t.Run("PutWithANewCadenceRecomputesNextFire", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.putSchedule(minuteSchedule("report"))
		s := minuteSchedule("report")
		s.Cron = "@hourly"
		got := b.putSchedule(s)
		eqTime(t, "next_fire", got.NextFire, b.now().Truncate(time.Hour).Add(time.Hour))
	})

	t.Run("PutRejectsBadInputNamingTheFieldAndStoresNothing", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for _, c := range []struct {
			field string
			edit  func(*norn.Schedule)
		}{
			{"name", func(x *norn.Schedule) { x.Name = "has space" }},
			{"queue", func(x *norn.Schedule) { x.Queue = "" }},
			{"cron", func(x *norn.Schedule) { x.Cron = "61 * * * *" }},
			{"timezone", func(x *norn.Schedule) { x.Timezone = "Atlantis/Capital" }},
			{"overlap", func(x *norn.Schedule) { x.Overlap = "sometimes" }},
			{"catch_up", func(x *norn.Schedule) { x.CatchUp = "most" }},
			{"spec", func(x *norn.Schedule) { x.Spec = json.RawMessage(`{"a":`) }},
		} {
			x := minuteSchedule("bad")
			c.edit(&x)
			_, err := s.PutSchedule(b.ctx, x)
			wantField(t, "PutSchedule with bad "+c.field, err, norn.ErrInvalidArgument, c.field)
		}
		all, err := s.ListSchedules(b.ctx)
		b.must(err, "ListSchedules")
		if len(all) != 0 {
			t.Fatalf("rejected puts stored %d schedules", len(all))
		}
	})

	t.Run("GetOfAnUnknownNameIsNotFound", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.GetSchedule(b.ctx, "nope")
		wantErr(t, "GetSchedule(nope)", err, norn.ErrNotFound)
		_, err = s.UpdateSchedule(b.ctx, "nope", norn.ScheduleUpdate{Paused: ptr(true)})
		wantErr(t, "UpdateSchedule(nope)", err, norn.ErrNotFound)
		wantErr(t, "DeleteSchedule(nope)", s.DeleteSchedule(b.ctx, "nope"), norn.ErrNotFound)
		_, err = s.TriggerSchedule(b.ctx, "nope")
		wantErr(t, "TriggerSchedule(nope)", err, norn.ErrNotFound)
	})
}

func exerciseSchedulesManageAndFire(t *testing.T, setup setupFunc) {
	t.Run("ListIsSortedByName", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		for _, n := range []string{"c", "a", "b"} {
			b.putSchedule(minuteSchedule(n))
		}
		all, err := s.ListSchedules(b.ctx)
		b.must(err, "ListSchedules")
		if len(all) != 3 || all[0].Name != "a" || all[1].Name != "b" || all[2].Name != "c" {
			t.Fatalf("ListSchedules = %v", names(all))
		}
	})

	t.Run("UpdateChangesOnlyWhatItSets", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		before := b.putSchedule(minuteSchedule("report"))
		b.clock.Advance(time.Second)
		got := b.updateSchedule("report", norn.ScheduleUpdate{Paused: ptr(true)})
		if !got.Paused || got.Cron != before.Cron || string(got.Spec) != string(before.Spec) {
			t.Fatalf("after pausing: %+v", got)
		}
		eqTime(t, "next_fire", got.NextFire, before.NextFire)
		eqTime(t, "updated", got.Updated, b.now())
		if !b.getSchedule("report").Paused {
			t.Fatal("pause was not stored")
		}
	})

	t.Run("UpdateWithAnInvalidResultChangesNothing", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.putSchedule(minuteSchedule("report"))
		bad := "every now and then"
		_, err := s.UpdateSchedule(b.ctx, "report", norn.ScheduleUpdate{Cron: &bad, Paused: ptr(true)})
		wantField(t, "UpdateSchedule with a bad cron", err, norn.ErrInvalidArgument, "cron")
		if got := b.getSchedule("report"); got.Paused || got.Cron != everyMinute {
			t.Fatalf("a rejected update changed the schedule: %+v", got)
		}
	})

	t.Run("DeleteRemovesTheScheduleButKeepsItsTasks", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.putSchedule(minuteSchedule("report"))
		b.clock.Set(firstTick(b))
		b.sweep()
		b.must(s.DeleteSchedule(b.ctx, "report"), "DeleteSchedule")
		_, err := s.GetSchedule(b.ctx, "report")
		wantErr(t, "GetSchedule after delete", err, norn.ErrNotFound)
		b.wantScheduleTasks("report", b.now())
		b.advance(5 * time.Minute)
		b.wantScheduleTasks("report", b.now().Add(-5*time.Minute))
	})

	t.Run("FiresOneTaskPerTickWithTheTemplateAndLabel", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		x := minuteSchedule("report")
		x.Priority, x.Labels, x.Timeout = 4, map[string]string{"team": "ops"}, norn.Duration(time.Minute)
		b.putSchedule(x)
		tick := firstTick(b)
		b.clock.Set(tick.Add(-time.Second))
		b.sweep()
		b.wantScheduleTasks("report")
		b.clock.Set(tick)
		b.sweep()
		b.wantScheduleTasks("report", tick)
		tk := b.status(norn.ScheduleTaskID("report", tick), norn.StatusReady)
		if tk.Queue != "cron" || tk.Priority != 4 || tk.Labels["team"] != "ops" ||
			tk.Labels[norn.ScheduleLabel] != "report" || tk.Timeout.D() != time.Minute || string(tk.Spec) != `{"job":"report"}` {
			t.Fatalf("task %+v does not follow the schedule's template", tk)
		}
		s := b.getSchedule("report")
		eqTime(t, "last_fire", s.LastFire, tick)
		eqTime(t, "next_fire", s.NextFire, tick.Add(time.Minute))
		if s.LastTask != tk.ID {
			t.Fatalf("last_task %q, want %q", s.LastTask, tk.ID)
		}
		b.clock.Set(tick.Add(time.Minute))
		b.sweep()
		b.wantScheduleTasks("report", tick, tick.Add(time.Minute))
	})
}

func exerciseSchedulesSweepsAndCatchUp(t *testing.T, setup setupFunc) {
	t.Run("SweepingTwiceAtOneInstantFiresOnce", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.putSchedule(minuteSchedule("report"))
		tick := firstTick(b)
		b.clock.Set(tick)
		b.sweep()
		b.sweep()
		b.wantScheduleTasks("report", tick)
	})

	t.Run("ConcurrentSweepsFireEachTickOnce", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		x := minuteSchedule("report")
		x.CatchUp = norn.CatchUpAll
		b.putSchedule(x)
		tick := firstTick(b)
		for round := 0; round < 3; round++ {
			b.clock.Set(tick.Add(time.Duration(round) * time.Minute))
			var wg sync.WaitGroup
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if _, err := s.Sweep(b.ctx); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
		}
		b.wantScheduleTasks("report", tick, tick.Add(time.Minute), tick.Add(2*time.Minute))
	})

	t.Run("CatchUpOneFiresTheLatestMissedTick", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.putSchedule(minuteSchedule("report"))
		tick := firstTick(b)
		b.clock.Set(tick.Add(10*time.Minute + 30*time.Second)) // down for ten ticks
		b.sweep()
		b.wantScheduleTasks("report", tick.Add(10*time.Minute))
		eqTime(t, "next_fire", b.getSchedule("report").NextFire, tick.Add(11*time.Minute))
	})

	t.Run("CatchUpAllFiresEveryMissedTick", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		x := minuteSchedule("report")
		x.CatchUp = norn.CatchUpAll
		b.putSchedule(x)
		tick := firstTick(b)
		b.clock.Set(tick.Add(3*time.Minute + time.Second))
		b.sweep()
		b.wantScheduleTasks("report", tick, tick.Add(time.Minute), tick.Add(2*time.Minute), tick.Add(3*time.Minute))
	})

	t.Run("CatchUpNoneSkipsMissedTicks", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		x := minuteSchedule("report")
		x.Cron, x.CatchUp = "0 * * * *", norn.CatchUpNone
		b.putSchedule(x)
		hour := b.now().Truncate(time.Hour).Add(time.Hour)
		b.clock.Set(hour.Add(2*time.Hour + 5*time.Minute)) // three hourly ticks missed
		b.sweep()
		b.wantScheduleTasks("report")
		eqTime(t, "next_fire", b.getSchedule("report").NextFire, hour.Add(3*time.Hour))
		b.clock.Set(hour.Add(3 * time.Hour))
		b.sweep()
		b.wantScheduleTasks("report", hour.Add(3*time.Hour))
	})
}

func exerciseSchedulesOverlapPauseAndZones(t *testing.T, setup setupFunc) {
	t.Run("OverlapSkipWaitsForThePreviousTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		x := minuteSchedule("report")
		x.Overlap = norn.OverlapSkip
		b.putSchedule(x)
		tick := firstTick(b)
		b.clock.Set(tick)
		b.sweep()
		w := b.registerWorker(norn.WorkerInfo{Name: "w"})
		tk := b.claim(w, "cron")
		b.clock.Set(tick.Add(time.Minute))
		b.must(func() error { _, err := b.s.Heartbeat(b.ctx, ref(tk), norn.Heartbeat{}); return err }(), "Heartbeat")
		b.sweep()
		b.wantScheduleTasks("report", tick) // still running: the tick is skipped
		b.complete(tk, "")
		b.clock.Set(tick.Add(2 * time.Minute))
		b.sweep()
		b.wantScheduleTasks("report", tick, tick.Add(2*time.Minute))
	})

	t.Run("APausedScheduleDoesNotFireAndResumesPerCatchUp", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.putSchedule(minuteSchedule("report"))
		b.updateSchedule("report", norn.ScheduleUpdate{Paused: ptr(true)})
		tick := firstTick(b)
		b.clock.Set(tick.Add(5*time.Minute + time.Second))
		b.sweep()
		b.wantScheduleTasks("report")
		b.updateSchedule("report", norn.ScheduleUpdate{Paused: ptr(false)})
		b.sweep()
		b.wantScheduleTasks("report", tick.Add(5*time.Minute)) // catch_up one
	})

	t.Run("TriggerSubmitsNowWithoutMovingTheCadence", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		before := b.putSchedule(minuteSchedule("report"))
		sub, err := s.TriggerSchedule(b.ctx, "report")
		b.must(err, "TriggerSchedule")
		if sub.Duplicate || sub.Task == nil || sub.Task.Labels[norn.ScheduleLabel] != "report" || sub.Task.Queue != "cron" {
			t.Fatalf("trigger submitted %+v", sub)
		}
		b.status(sub.Task.ID, norn.StatusReady)
		after := b.getSchedule("report")
		eqTime(t, "next_fire", after.NextFire, before.NextFire)
		if !after.LastFire.IsZero() || after.LastTask != sub.Task.ID {
			t.Fatalf("after trigger: last_fire %v last_task %q", after.LastFire, after.LastTask)
		}
		again, err := s.TriggerSchedule(b.ctx, "report")
		b.must(err, "TriggerSchedule")
		if again.Task.ID == sub.Task.ID {
			t.Fatal("two triggers gave one task")
		}
	})

	t.Run("AScheduleInATimeZoneFiresAtLocalTime", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		x := minuteSchedule("tokyo")
		x.Cron, x.Timezone = "0 9 * * *", "Asia/Tokyo" // 00:00Z
		s := b.putSchedule(x)
		want := time.Date(2030, 1, 3, 0, 0, 0, 0, time.UTC)
		eqTime(t, "next_fire", s.NextFire, want)
		b.clock.Set(want)
		b.sweep()
		b.wantScheduleTasks("tokyo", want)
	})
}

func names(ss []*norn.Schedule) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}
