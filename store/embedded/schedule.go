package embedded

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nornq/norn"
)

// Schedules are few (tens to thousands) and read on every monitor wake, so
// they live in memory (s.schedules, under s.mu) and on disk as one JSON
// record each under 's' + name. A firing is one transaction: the tasks of
// the ticks and the advanced record go into the same Pebble batch, so a
// crash leaves either both or neither, and the derived task ids make a
// repeated firing of a tick a duplicate.
const pfxSchedule = 's'

func scheduleKey(name string) []byte { return append([]byte{pfxSchedule}, name...) }

func cloneSchedule(sc *norn.Schedule) *norn.Schedule {
	out := *sc
	out.Spec = append(json.RawMessage(nil), sc.Spec...)
	if sc.Labels != nil {
		out.Labels = make(map[string]string, len(sc.Labels))
		for k, v := range sc.Labels {
			out.Labels[k] = v
		}
	}
	if sc.Retry != nil {
		r := *sc.Retry
		out.Retry = &r
	}
	if sc.MaxAttempts != nil {
		m := *sc.MaxAttempts
		out.MaxAttempts = &m
	}
	return &out
}

// putScheduleTx stores sc in tx, with undo of the in-memory map.
func (tx *txn) putSchedule(sc *norn.Schedule) error {
	s := tx.s
	j, err := json.Marshal(sc)
	if err != nil {
		return fmt.Errorf("embedded: encode schedule %q: %w", sc.Name, err)
	}
	old, had := s.schedules[sc.Name]
	tx.onUndo(func() {
		if had {
			s.schedules[sc.Name] = old
		} else {
			delete(s.schedules, sc.Name)
		}
	})
	s.schedules[sc.Name] = sc
	if err := tx.b.Set(scheduleKey(sc.Name), j, nil); err != nil {
		return err
	}
	if !sc.Paused && !sc.NextFire.IsZero() {
		s.kickMonitor()
	}
	return nil
}

// PutSchedule creates or replaces a schedule; see norn.ScheduleAPI.
func (s *Store) PutSchedule(ctx context.Context, sc norn.Schedule) (*norn.Schedule, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out *norn.Schedule
	err := s.run(func(tx *txn) error {
		tx.grows = true
		next, err := norn.PrepareSchedule(sc, s.schedules[sc.Name], fromNanos(tx.now))
		if err != nil {
			return err
		}
		out = cloneSchedule(next)
		return tx.putSchedule(next)
	})
	return out, err
}

// GetSchedule returns one schedule.
func (s *Store) GetSchedule(ctx context.Context, name string) (*norn.Schedule, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.schedules[name]
	if sc == nil {
		return nil, norn.ScheduleNotFound(name)
	}
	return cloneSchedule(sc), nil
}

// ListSchedules returns every schedule by name.
func (s *Store) ListSchedules(ctx context.Context) ([]*norn.Schedule, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	s.mu.Lock()
	out := make([]*norn.Schedule, 0, len(s.schedules))
	for _, sc := range s.schedules {
		out = append(out, cloneSchedule(sc))
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *norn.Schedule) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// UpdateSchedule changes the fields u sets.
func (s *Store) UpdateSchedule(ctx context.Context, name string, u norn.ScheduleUpdate) (*norn.Schedule, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	var out *norn.Schedule
	err := s.run(func(tx *txn) error {
		old := s.schedules[name]
		if old == nil {
			return norn.ScheduleNotFound(name)
		}
		next, err := norn.ApplyScheduleUpdate(old, u, fromNanos(tx.now))
		if err != nil {
			return err
		}
		out = cloneSchedule(next)
		return tx.putSchedule(next)
	})
	return out, err
}

// DeleteSchedule removes a schedule; its tasks stay.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	return s.run(func(tx *txn) error {
		old := s.schedules[name]
		if old == nil {
			return norn.ScheduleNotFound(name)
		}
		delete(s.schedules, name)
		tx.onUndo(func() { s.schedules[name] = old })
		return tx.b.Delete(scheduleKey(name), nil)
	})
}

// TriggerSchedule submits one task now, outside the cadence.
func (s *Store) TriggerSchedule(ctx context.Context, name string) (norn.Submitted, error) {
	if err := s.enter(); err != nil {
		return norn.Submitted{}, err
	}
	defer s.exit()
	var out norn.Submitted
	err := s.run(func(tx *txn) error {
		sc := s.schedules[name]
		if sc == nil {
			return norn.ScheduleNotFound(name)
		}
		nt := []norn.NewTask{sc.TaskFor(time.Time{})}
		if err := norn.ValidateBatch("task", nt); err != nil {
			return err
		}
		res, err := tx.submit("task", nt)
		if err != nil {
			return err
		}
		next := cloneSchedule(sc)
		next.LastTask = res[0].Task.ID
		out = res[0]
		return tx.putSchedule(next)
	})
	return out, err
}

// nextScheduleFire is the earliest NextFire of an active schedule in unix
// nanoseconds, 0 if none (called under s.mu). A linear scan: schedules are
// few, and the monitor calls this once per wake.
func (s *Store) nextScheduleFire() int64 {
	var next int64
	for _, sc := range s.schedules {
		if sc.Paused || sc.NextFire.IsZero() {
			continue
		}
		if at := sc.NextFire.UnixNano(); next == 0 || at < next {
			next = at
		}
	}
	return next
}

type fired struct {
	name     string
	tick     time.Time
	lateness time.Duration
}

// fireSchedules fires every due schedule, one transaction each, and returns
// how many tasks it created.
func (s *Store) fireSchedules(ctx context.Context) (int, error) {
	s.mu.Lock()
	now := s.now()
	var due []string
	for name, sc := range s.schedules {
		if !sc.Paused && !sc.NextFire.IsZero() && sc.NextFire.UnixNano() <= now {
			due = append(due, name)
		}
	}
	s.mu.Unlock()
	slices.Sort(due)
	total := 0
	for _, name := range due {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		var done []fired
		err := s.run(func(tx *txn) error {
			// Firings are the store's own duty, like the monitor's: they
			// may use the free space kept in reserve.
			tx.useReserve = true
			done = done[:0]
			sc := s.schedules[name]
			if sc == nil {
				return nil // deleted meanwhile
			}
			at := fromNanos(tx.now)
			prev := false
			if t := s.tasks.get(sc.LastTask); sc.LastTask != "" && t != nil {
				prev = !terminal(t.st.status)
			}
			f, ok, err := norn.FireSchedule(sc, at, prev)
			if err != nil || !ok {
				return err
			}
			if len(f.Tasks) > 0 {
				if err := norn.ValidateBatch("schedule", f.Tasks); err != nil {
					return err
				}
				res, err := tx.submit("schedule", f.Tasks)
				if err != nil {
					return err
				}
				for i, r := range res {
					if !r.Duplicate {
						done = append(done, fired{name, f.Ticks[i], at.Sub(f.Ticks[i])})
					}
				}
			}
			return tx.putSchedule(f.Schedule)
		})
		if err != nil {
			// A template that can no longer be submitted must not stop the
			// other schedules or spin the monitor: skip its due ticks.
			s.log.Error("embedded: schedule firing failed; skipping its due ticks", "schedule", name, "err", err)
			if err := s.skipSchedule(name); err != nil {
				return total, err
			}
			continue
		}
		total += len(done)
		if o := s.opts.Observer; o != nil {
			for _, d := range done {
				o.ScheduleFired(d.name, d.tick, d.lateness)
			}
		}
	}
	return total, nil
}

// skipSchedule moves a schedule whose firing failed past now without tasks.
func (s *Store) skipSchedule(name string) error {
	return s.run(func(tx *txn) error {
		sc := s.schedules[name]
		if sc == nil {
			return nil
		}
		c, err := norn.ParseCron("cron", sc.Cron, sc.Timezone)
		if err != nil {
			return nil // cannot happen for a stored schedule; leave it be
		}
		next := cloneSchedule(sc)
		next.NextFire = c.Next(fromNanos(tx.now))
		return tx.putSchedule(next)
	})
}
