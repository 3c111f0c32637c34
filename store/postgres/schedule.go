package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Schedules live in {s}.schedules: the schedule as one JSON document plus
// next_fire and paused as columns for the due index. Every change reads
// the row FOR UPDATE, so writers of one schedule are serialized; a firing
// additionally inserts its tasks (ids derived from the tick, ON CONFLICT a
// duplicate) in the same transaction, so a tick yields exactly one task
// however many nodes sweep at once.

func (s *Store) loadSchedule(ctx context.Context, tx pgx.Tx, name string, lock bool) (*norn.Schedule, error) {
	sql := `SELECT doc FROM {s}.schedules WHERE name = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	var doc []byte
	err := tx.QueryRow(ctx, s.q(sql), name).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sc := new(norn.Schedule)
	if err := json.Unmarshal(doc, sc); err != nil {
		return nil, fmt.Errorf("postgres: schedule %q: %w", name, err)
	}
	return sc, nil
}

func (s *Store) storeSchedule(ctx context.Context, tx pgx.Tx, sc *norn.Schedule) error {
	doc, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	var next *time.Time
	if !sc.NextFire.IsZero() {
		next = &sc.NextFire
	}
	_, err = tx.Exec(ctx, s.q(`INSERT INTO {s}.schedules (name, doc, next_fire, paused) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET doc = EXCLUDED.doc, next_fire = EXCLUDED.next_fire, paused = EXCLUDED.paused`),
		sc.Name, doc, next, sc.Paused)
	if err == nil {
		s.sweepWake.fire() // the leader recomputes when the next thing is due
	}
	return err
}

// PutSchedule creates or replaces a schedule; see norn.ScheduleAPI.
func (s *Store) PutSchedule(ctx context.Context, sc norn.Schedule) (*norn.Schedule, error) {
	if _, err := sc.Validate(); err != nil {
		return nil, err
	}
	var out *norn.Schedule
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		// Serialize concurrent first puts of one name (no row to lock yet).
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey("norn-schedule:"+s.cfg.Schema+":"+sc.Name)); err != nil {
			return err
		}
		existing, err := s.loadSchedule(ctx, tx, sc.Name, true)
		if err != nil {
			return err
		}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		out, err = norn.PrepareSchedule(sc, existing, micro(now))
		if err != nil {
			return err
		}
		return s.storeSchedule(ctx, tx, out)
	})
	return out, err
}

// GetSchedule returns one schedule.
func (s *Store) GetSchedule(ctx context.Context, name string) (*norn.Schedule, error) {
	var out *norn.Schedule
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = s.loadSchedule(ctx, tx, name, false)
		return err
	})
	if err == nil && out == nil {
		return nil, norn.ScheduleNotFound(name)
	}
	return out, err
}

// ListSchedules returns every schedule by name.
func (s *Store) ListSchedules(ctx context.Context) ([]*norn.Schedule, error) {
	out := []*norn.Schedule{}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, s.q(`SELECT doc FROM {s}.schedules ORDER BY name COLLATE "C"`))
		if err != nil {
			return err
		}
		docs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
		if err != nil {
			return err
		}
		out = out[:0]
		for _, d := range docs {
			sc := new(norn.Schedule)
			if err := json.Unmarshal(d, sc); err != nil {
				return fmt.Errorf("postgres: schedule: %w", err)
			}
			out = append(out, sc)
		}
		return nil
	})
	return out, err
}

// UpdateSchedule changes the fields u sets.
func (s *Store) UpdateSchedule(ctx context.Context, name string, u norn.ScheduleUpdate) (*norn.Schedule, error) {
	var out *norn.Schedule
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		existing, err := s.loadSchedule(ctx, tx, name, true)
		if err != nil {
			return err
		}
		if existing == nil {
			return norn.ScheduleNotFound(name)
		}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		out, err = norn.ApplyScheduleUpdate(existing, u, micro(now))
		if err != nil {
			return err
		}
		return s.storeSchedule(ctx, tx, out)
	})
	return out, err
}

// DeleteSchedule removes a schedule; its tasks stay.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	return s.withConn(ctx, func(conn *pgx.Conn) error {
		tag, err := conn.Exec(ctx, s.q(`DELETE FROM {s}.schedules WHERE name = $1`), name)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return norn.ScheduleNotFound(name)
		}
		return nil
	})
}

// TriggerSchedule submits one task now, outside the cadence.
func (s *Store) TriggerSchedule(ctx context.Context, name string) (norn.Submitted, error) {
	var out norn.Submitted
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		sc, err := s.loadSchedule(ctx, tx, name, true)
		if err != nil {
			return err
		}
		if sc == nil {
			return norn.ScheduleNotFound(name)
		}
		nt := []norn.NewTask{sc.TaskFor(time.Time{})}
		if err := norn.ValidateBatch("task", nt); err != nil {
			return err
		}
		res, err := s.submitIn(ctx, tx, "task", nt)
		if err != nil {
			return err
		}
		out = res[0]
		sc.LastTask = out.Task.ID
		return s.storeSchedule(ctx, tx, sc)
	})
	if err != nil {
		return norn.Submitted{}, err
	}
	s.wakeForSubmitted([]norn.Submitted{out})
	return out, nil
}

// fireSchedules fires every due schedule, one transaction each. A schedule
// another node is firing is locked and skipped; once that node commits,
// its next_fire is no longer due.
func (s *Store) fireSchedules(ctx context.Context, rep *norn.SweepReport) error {
	skip := map[string]bool{} // failed this pass: do not spin on them
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		var (
			name  string
			found bool
			subs  []norn.Submitted
			ticks []time.Time
			at    time.Time
		)
		err := s.withTx(ctx, func(tx pgx.Tx) error {
			subs, ticks, found = nil, nil, false
			now, err := s.dbNow(ctx, tx)
			if err != nil {
				return err
			}
			at = micro(now)
			var doc []byte
			err = tx.QueryRow(ctx, s.q(`SELECT name, doc FROM {s}.schedules
WHERE NOT paused AND next_fire <= $1 AND NOT (name = ANY($2))
ORDER BY next_fire, name LIMIT 1 FOR UPDATE SKIP LOCKED`), at, keys(skip)).Scan(&name, &doc)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			found = true
			sc := new(norn.Schedule)
			if err := json.Unmarshal(doc, sc); err != nil {
				return fmt.Errorf("postgres: schedule %q: %w", name, err)
			}
			prev := false
			if sc.LastTask != "" {
				var st string
				err := tx.QueryRow(ctx, s.q(`SELECT status FROM {s}.tasks WHERE id = $1`), sc.LastTask).Scan(&st)
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
				prev = err == nil && !norn.Status(st).Terminal()
			}
			f, ok, err := norn.FireSchedule(sc, at, prev)
			if err != nil || !ok {
				return err
			}
			if len(f.Tasks) > 0 {
				if err := norn.ValidateBatch("schedule", f.Tasks); err != nil {
					return err
				}
				res, err := s.submitIn(ctx, tx, "schedule", f.Tasks)
				if err != nil {
					return err
				}
				for i, r := range res {
					if !r.Duplicate {
						subs = append(subs, r)
						ticks = append(ticks, f.Ticks[i])
					}
				}
			}
			return s.storeSchedule(ctx, tx, f.Schedule)
		})
		if err != nil {
			if !found {
				return err
			}
			// A template that can no longer be submitted must not stop the
			// other schedules: skip its due ticks (logged).
			s.cfg.Logger.Error("norn: schedule firing failed; skipping its due ticks", "schedule", name, "err", err)
			skip[name] = true
			if err := s.skipSchedule(ctx, name); err != nil {
				return err
			}
			continue
		}
		if !found {
			return nil
		}
		rep.Fired += len(subs)
		s.wakeForSubmitted(subs)
		if o := s.cfg.Observer; o != nil {
			for _, tick := range ticks {
				o.ScheduleFired(name, tick, at.Sub(tick))
			}
		}
	}
}

// skipSchedule moves a schedule whose firing failed past now without tasks.
func (s *Store) skipSchedule(ctx context.Context, name string) error {
	return s.withTx(ctx, func(tx pgx.Tx) error {
		sc, err := s.loadSchedule(ctx, tx, name, true)
		if err != nil || sc == nil {
			return err
		}
		c, err := norn.ParseCron("cron", sc.Cron, sc.Timezone)
		if err != nil {
			return nil
		}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		sc.NextFire = c.Next(micro(now))
		return s.storeSchedule(ctx, tx, sc)
	})
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
