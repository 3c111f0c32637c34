package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nornq/norn"
)

// The health duty asks the database every ProbeInterval, on a session of
// its own, whether it answers, and tells the store. While it does not
// (no answer within ProbeTimeout), calls fail at once with the cause, and
// the calls in flight are cancelled: a network that drops packets without
// closing connections (a dead switch, a frozen middlebox) would otherwise
// hold every one of them until TCP gives up, minutes later, and a node
// would hang instead of answering 503. The probe also reads how the
// database replicates, so that an operator learns of asynchronous
// standbys (which a failover can lose acknowledged work to) before the bad
// day, not after.

// healthParams configures the health duty.
type healthParams struct {
	connCfg        *pgx.ConnConfig
	every, timeout time.Duration
	logger         *slog.Logger
}

// health is the health duty and what it found.
type health struct {
	p healthParams
	*duty

	mu    sync.Mutex
	down  *norn.Error     // nil while the database answers
	epoch context.Context // cancelled when the database stops answering
	trip  context.CancelFunc
	repl  string // the replication warning ("" none)

	logged map[string]time.Time // the last line logged for each kind of failure
}

// replCheckEvery is how many probes apart the replication mode is read.
const replCheckEvery = 10

func startHealth(p healthParams) *health {
	h := &health{p: p, logged: map[string]time.Time{}}
	h.epoch, h.trip = context.WithCancel(context.Background())
	h.duty = startDuty(h.run)
	return h
}

func (h *health) run(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	wait := h.p.every
	for round := 0; ; round++ {
		var err error
		conn, err = h.probeOnce(ctx, conn, round%replCheckEvery == 0)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// While down, look again soon, backing off to every: a node
			// should serve within moments of the database coming back,
			// not a whole interval later.
			if h.failing() == nil {
				wait = min(downProbeMin, h.p.every)
			} else {
				wait = min(2*wait, h.p.every)
			}
			h.setDown(classify(err))
		} else {
			h.setUp()
			wait = h.p.every
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// downProbeMin is how soon a probe follows one that failed.
const downProbeMin = 100 * time.Millisecond

// probeOnce probes on conn (opening one when it has none) and returns the
// connection to keep (nil after a failure). A probe that fails on a
// connection opened earlier is tried once more at once on a fresh one: a
// failover or a restart kills the idle probe connection, while the pool's
// connections are already reconnected, and taking that dead connection for
// a dead database would refuse every call until the next probe.
func (h *health) probeOnce(ctx context.Context, conn *pgx.Conn, repl bool) (*pgx.Conn, error) {
	for fresh := conn == nil || conn.IsClosed(); ; fresh = true {
		pctx, cancel := context.WithTimeout(ctx, h.p.timeout)
		var err error
		if conn == nil || conn.IsClosed() {
			conn, err = pgx.ConnectConfig(pctx, h.p.connCfg)
		}
		if err == nil {
			err = h.probe(pctx, conn, repl)
		}
		cancel()
		if err == nil {
			return conn, nil
		}
		if conn != nil {
			conn.Close(context.Background())
			conn = nil
		}
		if fresh || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("no answer within %s: %w", h.p.timeout, err)
			}
			return nil, err
		}
	}
}

// probe asks the database for an answer and, when repl is set, how it
// replicates.
func (h *health) probe(ctx context.Context, conn *pgx.Conn, repl bool) error {
	if !repl {
		_, err := conn.Exec(ctx, "SELECT 1")
		return err
	}
	var recovery bool
	var syncNames string
	var streaming int
	err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'),
	(SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming')`).Scan(&recovery, &syncNames, &streaming)
	if err != nil {
		return err
	}
	h.setRepl(replicationWarning(recovery, syncNames, streaming))
	return nil
}

// replicationWarning says what a failover could lose, from what the
// database reports ("" when nothing to warn of).
func replicationWarning(recovery bool, syncNames string, streaming int) string {
	switch {
	case recovery:
		return "connected to a standby (read-only): writes fail until the URL reaches the primary"
	case strings.TrimSpace(syncNames) == "" && streaming > 0:
		return fmt.Sprintf("the primary replicates asynchronously to %d standby(s) (synchronous_standby_names is empty): "+
			"a failover can lose acknowledged submits and completions (docs/reliability.md)", streaming)
	}
	return ""
}

func (h *health) setRepl(w string) {
	h.mu.Lock()
	changed := w != h.repl
	h.repl = w
	h.mu.Unlock()
	if changed && w != "" {
		h.p.logger.Warn("norn: " + w)
	}
}

// replication returns the replication warning ("" none).
func (h *health) replication() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.repl
}

func (h *health) setDown(e *norn.Error) {
	h.mu.Lock()
	was := h.down
	h.down = e
	if was == nil {
		h.trip()
	}
	last, seen := h.logged[e.Cause]
	logIt := !seen || time.Since(last) >= time.Minute
	if logIt {
		h.logged[e.Cause] = time.Now()
	}
	h.mu.Unlock()
	if was == nil || logIt {
		// One line per kind of failure a minute, however often it fails.
		h.p.logger.Warn("norn: the database does not answer; calls fail until it does", "cause", e.Cause, "err", e.Err)
	}
}

func (h *health) setUp() {
	h.mu.Lock()
	was := h.down
	if was != nil {
		h.down = nil
		h.epoch, h.trip = context.WithCancel(context.Background())
	}
	h.mu.Unlock()
	if was != nil {
		h.p.logger.Info("norn: the database answers again")
	}
}

// failing returns the error calls fail with now (nil: none).
func (h *health) failing() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down == nil {
		return nil
	}
	return h.down
}

// current returns the context that is cancelled when the database stops
// answering (the one of this period of answers).
func (h *health) current() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch
}

// classify gives a failure to reach the database its cause class.
func classify(err error) *norn.Error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "25006":
			return norn.UnavailableBecause(norn.CauseReadOnly, err)
		case strings.HasPrefix(pe.Code, "53"):
			return norn.UnavailableBecause(norn.CauseOverloaded, err)
		case strings.HasPrefix(pe.Code, "57P"):
			return norn.UnavailableBecause(norn.CauseShuttingDown, err)
		case strings.HasPrefix(pe.Code, "08"):
			return norn.UnavailableBecause(norn.CauseRefused, err)
		}
		return norn.Unavailable(err)
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return norn.UnavailableBecause(norn.CauseUnreachable, err)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), strings.Contains(err.Error(), "connection refused"),
		strings.Contains(err.Error(), "conn closed"):
		return norn.UnavailableBecause(norn.CauseRefused, err)
	case strings.Contains(err.Error(), "read only connection"):
		// target_session_attrs=read-write found only standbys (a failover
		// not yet promoted).
		return norn.UnavailableBecause(norn.CauseReadOnly, err)
	}
	return norn.Unavailable(err)
}

// Ready reports whether the store can serve: nil, or why not (the server's
// /readyz).
func (s *Store) Ready(ctx context.Context) error {
	if s.health == nil {
		return nil
	}
	return s.health.failing()
}

// ReplicationWarning says what a failover of the database could lose, as
// last read by the health probe ("" when nothing to warn of).
func (s *Store) ReplicationWarning() string {
	if s.health == nil {
		return ""
	}
	return s.health.replication()
}
