package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nornq/norn"
)

// monitorParams configures the monitor duty (Config's LeaderLockKey,
// LeaderRetry and SweepInterval).
type monitorParams struct {
	lockKey       int64
	retry         time.Duration
	sweepInterval time.Duration
}

// monitor is the background duty that, on every node, tries to lead the
// sweeps: see run.
type monitor struct {
	p      monitorParams
	s      *Store // whose sweeps it runs
	leader atomic.Bool
	*duty
	// Owned by run's goroutine: the leader-lock session (nil: none), and
	// when the last full sweep was.
	lockConn *pgx.Conn
	lastFull time.Time
	// contact is when the lock session last answered (unix nanoseconds);
	// holdLead's goroutine updates it too.
	contact atomic.Int64
}

// startMonitor starts the monitor duty of s; stop it with stop.
func startMonitor(s *Store, p monitorParams) *monitor {
	m := &monitor{p: p, s: s}
	m.duty = startDuty(m.run)
	return m
}

// run is the monitor duty: it tries to become the leader with a
// session-level advisory lock on a dedicated connection and, while it
// holds it, sweeps timeouts and delays as they fall due and runs a full
// sweep (retention too) every SweepInterval. A new delay reported by any
// node wakes it to recompute when the next one is due. When the leader's
// session dies the lock is released by the server and another node takes
// over at its next attempt.
func (m *monitor) run(ctx context.Context) {
	defer func() {
		m.dropLock()
		m.leader.Store(false)
	}()
	for {
		m.campaign(ctx)
		wait := m.p.retry
		// Taken before looking at what is due, so a delay reported while
		// we look is not missed.
		wake := m.s.sweepWake.wait()
		if m.leader.Load() {
			var ok bool
			if wait, ok = m.lead(ctx); !ok {
				continue
			}
		} else {
			// Only the leader cares about new delays; the others just
			// retry the lock now and then.
			wake = nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-wake:
			timer.Stop()
		}
	}
}

// campaign opens the leader-lock session if there is none, and tries to
// take the lock if this node does not lead.
func (m *monitor) campaign(ctx context.Context) {
	s := m.s
	if m.lockConn == nil || m.lockConn.IsClosed() {
		if m.leader.Swap(false) {
			// Every end of a term is logged: the fault suite reads
			// the terms from these lines.
			s.cfg.Logger.Warn("norn: lost the monitor leadership", "err", "the lock session is closed")
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := pgx.ConnectConfig(ctx, s.connCfg)
		if err == nil {
			err = m.limitIdle(ctx, c)
		}
		cancel()
		m.lockConn = nil
		if err == nil {
			m.lockConn = c
		}
	}
	if m.lockConn == nil || m.leader.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	var got bool
	err := m.lockConn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", m.p.lockKey).Scan(&got)
	cancel()
	if err != nil {
		m.dropLock()
	} else if got {
		m.leader.Store(true)
		m.lastFull = time.Time{}
		m.contact.Store(time.Now().UnixNano())
		s.cfg.Logger.Info("norn: this node now leads the monitor", "schema", s.cfg.Schema)
	}
}

// dropLock closes the leader-lock session, which releases the lock.
func (m *monitor) dropLock() {
	if m.lockConn != nil {
		m.lockConn.Close(context.Background())
		m.lockConn = nil
	}
}

// stepDown ends this node's term: the session (and with it the lock)
// goes, and the line says why.
func (m *monitor) stepDown(msg string, err error) {
	m.leader.Store(false)
	m.dropLock()
	m.s.cfg.Logger.Warn(msg, "err", err)
}

// lead checks that the lock session lives, then sweeps what is due:
// everything every SweepInterval, else the timeouts, delays and schedules
// that fell due. It returns how long to wait before the next round; ok
// false: the lead was lost.
func (m *monitor) lead(ctx context.Context) (wait time.Duration, ok bool) {
	s := m.s
	// Still leading? A dead session means the lock is gone, and a session
	// that has not answered for half the server's idle limit may be gone
	// without this node hearing of it (a silent network): the server ends
	// it at the idle limit and another node may lead then, so this one
	// steps down first, by its own clock.
	if since := m.sinceContact(); since >= m.term() {
		m.stepDown("norn: lost the monitor leadership", fmt.Errorf("the database has not answered for %s", since.Round(time.Millisecond)))
		return 0, false
	} else if since >= m.p.retry {
		if err := m.ping(ctx); err != nil {
			m.stepDown("norn: lost the monitor leadership", err)
			return 0, false
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	lost := m.holdLead(ctx, sctx, cancel)
	var err error
	var rep norn.SweepReport
	start := time.Now()
	due := m.nextDue(sctx)
	switch {
	case time.Since(m.lastFull) >= m.p.sweepInterval:
		rep, err = s.Sweep(sctx)
		m.lastFull = time.Now()
		due = m.nextDue(sctx)
	case due <= 0:
		if err = s.sweepTimeouts(sctx, &rep); err == nil {
			err = s.sweepExpiries(sctx, &rep) // due too (nextDueSQL counts them)
		}
		if err == nil {
			err = s.sweepDelays(sctx, &rep)
		}
		if err == nil {
			err = s.fireSchedules(sctx, &rep)
		}
		due = m.nextDue(sctx)
	}
	cancel()
	if rep != (norn.SweepReport{}) {
		// Which node did the monitor's duties, and when: the fault
		// suite checks from these lines that no two nodes sweep at once.
		s.cfg.Logger.Debug("norn: monitor swept", "start", start, "timed_out", rep.TimedOut,
			"released", rep.Released, "aborted", rep.Aborted, "purged", rep.Purged, "fired", rep.Fired)
	}
	if lostErr := lost(); lostErr != nil {
		m.stepDown("norn: lost the monitor leadership during a sweep; sweep stopped", lostErr)
		return 0, false
	}
	if err != nil && ctx.Err() == nil {
		s.cfg.Logger.Warn("norn: sweep failed", "err", err)
	}
	return max(min(due, m.p.sweepInterval-time.Since(m.lastFull)), 5*time.Millisecond), true
}

// holdLead keeps the leader-lock session busy while the leader sweeps on
// other connections (a sweep can outlast the session's idle limit on a
// loaded database) and cancels the sweep if the session dies, since the
// lock, and with it the lead, is then gone and another node may sweep.
// The returned function stops it and reports a lost session; the session is
// the monitor's again once it returned. ctx is the duty's, sctx the sweep's.
func (m *monitor) holdLead(ctx, sctx context.Context, cancel context.CancelFunc) func() error {
	done := make(chan struct{})
	var lostErr error
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(max(m.p.retry/2, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-sctx.Done():
				return
			case <-t.C:
			}
			if err := m.ping(ctx); err != nil {
				lostErr = err
				cancel()
				return
			}
		}
	}()
	return func() error {
		close(done)
		<-stopped
		return lostErr
	}
}

// limitIdle makes the server end the leader-lock session when it stays idle
// for a few monitor rounds. A leader that is frozen (SIGSTOP, a paused VM,
// a process stuck in GC or swap) keeps its TCP connection, and with it the
// advisory lock, for as long as it is frozen, since its kernel still
// acknowledges packets; no other node would sweep expired leases or due
// delays meanwhile. The loop uses the session at least every
// max(LeaderRetry, SweepInterval) plus one sweep, so a live leader is never
// idle that long. PostgreSQL before 14 has no idle_session_timeout: there a
// frozen leader keeps the lead until it resumes.
func (m *monitor) limitIdle(ctx context.Context, c *pgx.Conn) error {
	_, err := c.Exec(ctx, fmt.Sprintf("SET idle_session_timeout = %d", m.idleLimit().Milliseconds()))
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42704" { // undefined_object: PostgreSQL < 14
		return nil
	}
	if err != nil {
		c.Close(context.Background())
	}
	return err
}

// idleLimit is the leader-lock session's idle_session_timeout.
func (m *monitor) idleLimit() time.Duration {
	return max(5*time.Second, 3*max(m.p.retry, m.p.sweepInterval))
}

// term is how long a leader goes on without an answer from its lock
// session: half the idle limit, after which the server may have ended the
// session and released the lock.
func (m *monitor) term() time.Duration { return m.idleLimit() / 2 }

func (m *monitor) sinceContact() time.Duration {
	return time.Since(time.Unix(0, m.contact.Load()))
}

// ping asks the lock session for an answer, waiting no longer than the
// rest of the term, and notes the contact.
func (m *monitor) ping(ctx context.Context) error {
	left := m.term() - m.sinceContact()
	if left <= 0 {
		return fmt.Errorf("the database has not answered for %s", m.term())
	}
	pctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	if err := m.lockConn.Ping(pctx); err != nil {
		return err
	}
	m.contact.Store(time.Now().UnixNano())
	return nil
}

// nextDueSQL reads, in seconds from now, the earliest delay, lease
// deadline and schedule firing due within $1 microseconds (NULL if none).
// Nothing later matters, as the monitor sweeps at least that often, and
// the bound is what keeps the reads cheap: a burn-down leaves the dead
// entries of every task it completed at the low end of tasks_running (and
// due delays leave theirs in tasks_scheduled) until VACUUM, and an
// unbounded min() stepped over all of them at every call (600–2,800
// shared buffers per call halfway through a 200,000-task burn-down). With
// the bound, the index scan stops at the first entry past it, live or not.
// It runs after sweepSetupSQL: a plan made while the table was empty would
// otherwise read the whole table once a backlog arrived.
const nextDueSQL = `SELECT extract(epoch FROM least(
	(SELECT min(run_at) FROM {s}.tasks WHERE ist = 'scheduled' AND run_at < ` + dueBound + `),
	(SELECT min(deadline) FROM {s}.tasks WHERE ist = 'running' AND deadline < ` + dueBound + `),
	(SELECT min(deadline) FROM {s}.leases WHERE deadline < ` + dueBound + `),
	(SELECT min(expires_at) FROM {s}.tasks WHERE expires_at IS NOT NULL AND ist IN ('scheduled', 'blocked', 'ready', 'batched')
		AND expires_at < ` + dueBound + `),
	(SELECT min(next_fire) FROM {s}.schedules WHERE NOT paused)) - clock_timestamp())`

// dueBound is nextDueSQL's bound: statement_timestamp() rather than
// clock_timestamp(), as an index condition must be stable.
const dueBound = `statement_timestamp() + $1::bigint * interval '1 microsecond'`

// nextDue returns how long until the next delay or lease deadline is due
// (zero or less: something is due now), SweepInterval when nothing is
// pending or the clock is a fake one.
func (m *monitor) nextDue(ctx context.Context) time.Duration {
	s := m.s
	wait := m.p.sweepInterval
	if s.cfg.Clock != nil {
		return wait // a fake clock does not move with real time
	}
	var d *float64
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		b := &pgx.Batch{}
		b.Queue(sweepSetupSQL)
		b.Queue(s.q(nextDueSQL), wait.Microseconds())
		ds, err := batchRows(ctx, conn, b, pgx.RowTo[*float64])
		if len(ds) == 1 {
			d = ds[0]
		}
		return err
	})
	if err != nil || d == nil {
		return wait
	}
	// Deadlines are strict (deadline < now): be a moment late, not early.
	return min(time.Duration(*d*float64(time.Second))+time.Millisecond, wait)
}
