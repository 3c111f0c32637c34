// Package postgres is the cluster-mode norn.Store: any number of Norn nodes
// share one PostgreSQL database, which is the only state. Claims take ready
// tasks with one FOR UPDATE SKIP LOCKED statement on a partial index,
// every other state change is a compare-and-set on the task's (status,
// lease, version), LISTEN/NOTIFY wakes long-polling claimers on every node,
// and one node at a time (an advisory-lock leader) runs the monitor sweeps.
// docs/postgres.md is the operator's page; docs/internals/postgres-claims.md
// says how the claim paths work and why they are correct.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nornq/norn"
)

// DefaultSchema is the schema Norn's tables live in unless configured.
const DefaultSchema = "norn"

// Config configures Open. Only URL is required.
type Config struct {
	// URL is the database, as a postgres:// URL or key=value string.
	// Required. Connection parameters in it (sslmode, connect_timeout,
	// default_query_exec_mode, ...) are honoured.
	URL string
	// Schema holds Norn's tables (default DefaultSchema, "norn"), so several
	// deployments can share a database.
	Schema string
	// Migrate applies pending migrations on Open. Without it Open refuses a
	// schema that is not at the latest version.
	Migrate bool
	// Clock, when set, replaces the database clock (tests inject a fake
	// clock). Default nil: every time comes from the database's clock, so
	// node clocks need not agree.
	Clock norn.Clock
	// HistoryLimit caps each task's history (default norn.DefaultHistoryLimit).
	HistoryLimit int
	// PollInterval is how often a long-polling Claim looks again when no
	// notification arrived, the fallback for lost notifications (default 1s).
	PollInterval time.Duration
	// SweepInterval is the longest the monitor leader waits between sweeps
	// (default 1s); it sweeps sooner when the next delay or deadline is due.
	SweepInterval time.Duration
	// LeaderRetry is how often a node that is not the monitor leader tries
	// to become it (default 1s): a dead leader is replaced within about this long.
	LeaderRetry time.Duration
	// LeaderLockKey is the advisory lock key of the monitor leader (default:
	// derived from Schema, so deployments sharing a database elect their
	// own leaders).
	LeaderLockKey int64
	// DisableMonitor turns the automatic monitor off on this node (Sweep
	// still works). Tests with a fake clock use it; a cluster needs at least
	// one node with the monitor on.
	DisableMonitor bool
	// MaxConns caps the connection pool (default max(8, 2×GOMAXPROCS)). The
	// store also keeps three dedicated sessions: the listener, the leader lock
	// and the health probe.
	MaxConns int
	// ProbeInterval is how often the health duty asks the database whether
	// it answers (default 1s); ProbeTimeout how long it waits for an answer
	// (default 5s). While it gets none, calls fail at once with 503 and
	// the calls in flight are cancelled (health.go), so a silent network
	// makes a node answer 503 within about ProbeInterval + ProbeTimeout.
	ProbeInterval, ProbeTimeout time.Duration
	// Logger receives operational messages (default slog.Default()).
	Logger *slog.Logger
	// Observer receives background measurements (schedule lateness).
	// Default none.
	Observer norn.Observer

	// sweepPause, when set (tests), runs between a sweep's read and its
	// compare-and-set write, to prove a racing change is never overwritten.
	sweepPause func()
	// flushPause, when set (tests), runs before each merged completion
	// statement with the number of callers it answers.
	flushPause func(callers int)
	// submitPause, when set (tests), runs before each merged submit with
	// the number of callers it answers.
	submitPause func(callers int)
	// claimWaits, when set (tests), runs when a long-polling claim found
	// nothing and is about to wait, so a test can act at that moment.
	claimWaits func()
	// completionFlushes, when set (tests), replaces the number of merged
	// completion statements run at once (completer.go).
	completionFlushes int
}

func (c *Config) withDefaults() (Config, error) {
	o := *c
	if o.completionFlushes == 0 {
		o.completionFlushes = completionFlushes
	}
	if o.URL == "" {
		return o, norn.Invalid("url", "database URL is required")
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if len(o.Schema) > 40 {
		return o, norn.Invalid("schema", "schema name must be at most 40 bytes")
	}
	if o.HistoryLimit < 0 {
		return o, norn.Invalid("history_limit", "must not be negative")
	}
	if o.HistoryLimit == 0 {
		o.HistoryLimit = norn.DefaultHistoryLimit
	}
	if o.PollInterval < 0 || o.SweepInterval < 0 || o.LeaderRetry < 0 {
		return o, norn.Invalid("poll_interval", "intervals must not be negative")
	}
	if o.ProbeInterval < 0 {
		return o, norn.Invalid("probe_interval", "must not be negative")
	}
	if o.ProbeTimeout < 0 {
		return o, norn.Invalid("probe_timeout", "must not be negative")
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = time.Second
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = 5 * time.Second
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.SweepInterval == 0 {
		o.SweepInterval = time.Second
	}
	if o.LeaderRetry == 0 {
		o.LeaderRetry = time.Second
	}
	if o.LeaderLockKey == 0 {
		o.LeaderLockKey = lockKey("norn-leader:" + o.Schema)
	}
	if o.MaxConns < 0 {
		return o, norn.Invalid("max_conns", "must not be negative")
	}
	if o.MaxConns == 0 {
		o.MaxConns = max(8, 2*runtime.GOMAXPROCS(0))
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// idleInTxLimit is the idle_in_transaction_session_timeout of the store's
// sessions (unless the URL sets one): how long a frozen node can hold the
// locks of a transaction it is in the middle of.
const idleInTxLimit = 30 * time.Second

func lockKey(s string) int64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int64(h.Sum64())
}

// Store is the PostgreSQL norn.Store. It is safe for concurrent use.
type Store struct {
	cfg     Config
	connCfg *pgx.ConnConfig
	pool    *pgxpool.Pool
	sql     *statements
	chanLit string // the NOTIFY channel as a quoted SQL literal
	channel string

	closed    atomic.Bool
	keyPruned atomic.Int64    // when the sweep last pruned key buckets (unix ns; keyrate.go)
	ctx       context.Context // cancelled by Close: ends waiting claims
	cancel    context.CancelFunc
	wake      *broadcaster // ready tasks: long-polling claimers
	sweepWake *broadcaster // new delays: the monitor leader
	subs      *subscribers
	rate      rateState // rate limits' token timers and held-back counts (ratelimit.go)
	flow      flowState // what this node learnt about flow-limited queues (claim.go)

	// The background duties (nil when not running).
	listener  *listener
	announcer *announcer
	monitor   *monitor
	node      string         // this store's name in event_subscribers
	announced atomic.Bool    // this node has a row in event_subscribers
	completer completer      // merges concurrent completions (completer.go)
	submitter submitter      // merges concurrent plain submits (submitter.go)
	readyIDs  readyIDs       // ready row ids for new batches (batches.go)
	readyRows readyRowLimits // ready rows a plain claim locks, per queue (batches.go)
	hints     claimHints     // where each queue's ready tasks start (claimhint.go)
	health    *health        // whether the database answers (health.go)
	listening atomic.Bool    // the listener's session is up: wake-ups are not missed
}

var _ norn.Store = (*Store)(nil)

// Open connects, checks (or with Config.Migrate applies) the schema, starts
// the listener and the monitor, and returns the store.
func Open(ctx context.Context, c Config) (*Store, error) {
	cfg, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	connCfg, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return nil, norn.Invalid("url", "cannot parse database URL: %v", err)
	}
	// All times cross the wire in UTC so history JSON built by the
	// database parses the same everywhere.
	connCfg.RuntimeParams["timezone"] = "UTC"
	// JIT compilation pays off for long analytical queries; for Norn's
	// short statements it only adds latency, and the hot statements whose
	// sorts are disabled (noSortSQL) carry a huge nominal cost that made
	// PostgreSQL JIT-compile every claim (seconds of CPU each).
	if _, set := connCfg.RuntimeParams["jit"]; !set {
		connCfg.RuntimeParams["jit"] = "off"
	}
	// A node frozen between the statements of a transaction (SIGSTOP, a
	// paused VM) keeps its locks until it resumes; a limited claim's queue
	// lock would stall every node's claims of that queue meanwhile. The
	// store's transactions never wait for anything but the database, so a
	// session idle that long inside one belongs to a frozen node.
	if _, set := connCfg.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		connCfg.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.Itoa(int(idleInTxLimit.Milliseconds()))
	}
	if cfg.Migrate {
		if _, err := Migrate(ctx, cfg.URL, cfg.Schema, -1); err != nil {
			return nil, err
		}
	}
	s := &Store{
		cfg:       cfg,
		connCfg:   connCfg,
		sql:       newStatements(quoteIdent(cfg.Schema)),
		channel:   "norn:" + cfg.Schema,
		wake:      newBroadcaster(),
		sweepWake: newBroadcaster(),
		subs:      newSubscribers(),
		node:      uuid.NewString(),
	}
	s.chanLit = "'" + strings.ReplaceAll(s.channel, "'", "''") + "'"
	s.completer.s = s
	s.sql.build(s)
	s.pool, err = newPool(connCfg, cfg.MaxConns)
	if err != nil {
		return nil, err
	}
	err = s.withConn(ctx, func(conn *pgx.Conn) error { return checkSchema(ctx, conn, cfg.Schema) })
	if err != nil {
		s.pool.Close()
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// Claim hints are used only while wake-ups arrive (claimhint.go); the
	// store is not used before the listener is up or Open fails.
	s.listening.Store(true)
	s.listener, err = startListener(ctx, listenerParams{connCfg: connCfg, channel: s.channel, dispatch: s.dispatch,
		lost: func() {
			s.listening.Store(false)
			s.subs.lagAll()
		},
		resumed: func() {
			s.listening.Store(true)
			s.wake.fire()
			s.sweepWake.fire()
			s.subs.lagAll()
		},
		logger: cfg.Logger})
	if err != nil {
		s.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, norn.Unavailable(fmt.Errorf("listen: %w", err))
	}
	s.health = startHealth(healthParams{connCfg: connCfg, every: cfg.ProbeInterval, timeout: cfg.ProbeTimeout, logger: cfg.Logger})
	s.announcer = startAnnouncer(announcerParams{every: subscriberTTL / 3, active: func() bool { return s.subs.count() > 0 },
		announce: s.announceSubscriber, withdraw: s.withdrawSubscriber, logger: cfg.Logger})
	if !cfg.DisableMonitor {
		s.monitor = startMonitor(s, monitorParams{lockKey: cfg.LeaderLockKey, retry: cfg.LeaderRetry,
			sweepInterval: cfg.SweepInterval})
	}
	return s, nil
}

// Close stops the monitor and the listener and closes every connection.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.monitor != nil {
		s.monitor.stop()
	}
	if s.health != nil {
		s.health.stop()
	}
	if s.announcer != nil {
		s.announcer.stop()
	}
	if s.listener != nil {
		s.listener.stop()
	}
	s.pool.Close()
	s.subs.closeAll()
	return nil
}

// IsLeader reports whether this node currently runs the monitor sweeps.
func (s *Store) IsLeader() bool { return s.monitor != nil && s.monitor.leader.Load() }

// querier is what both a connection and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// withConn runs f on a pooled connection, retrying serialization failures
// and deadlocks, and maps backend failures to norn errors.
func (s *Store) withConn(ctx context.Context, f func(conn *pgx.Conn) error) (err error) {
	if s.closed.Load() {
		return norn.ErrClosed
	}
	var epoch context.Context // cancelled when the database stops answering
	if s.health != nil {
		if err := s.health.failing(); err != nil {
			return err
		}
		epoch = s.health.current()
		defer func() {
			// Cut off because the database stopped answering: say so.
			if err != nil && epoch.Err() != nil {
				if down := s.health.failing(); down != nil {
					err = down
				}
			}
		}()
	}
	for attempt := 0; ; attempt++ {
		conn, err := s.acquire(ctx, epoch)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if s.closed.Load() {
				return norn.ErrClosed
			}
			return norn.Unavailable(err)
		}
		err = s.run(conn, epoch, f)
		release(conn, err)
		if err != nil && retryable(err) && attempt < 8 {
			time.Sleep(time.Duration(attempt+1) * time.Millisecond)
			continue
		}
		if err != nil && ctx.Err() != nil && !isNornErr(err) {
			return ctx.Err()
		}
		return mapErr(err)
	}
}

// batchRows sends b and collects its last statement's rows with fn.
func batchRows[T any](ctx context.Context, conn *pgx.Conn, b *pgx.Batch, fn pgx.RowToFunc[T]) (out []T, err error) {
	b.QueuedQueries[b.Len()-1].Query(func(rows pgx.Rows) (err error) {
		out, err = pgx.CollectRows(rows, fn)
		return err
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// withTx runs f in a transaction on a pooled connection (retried as withConn).
// acquire takes a pooled connection; a wait for one ends when the
// database stops answering (epoch, nil: never).
func (s *Store) acquire(ctx context.Context, epoch context.Context) (*pgxpool.Conn, error) {
	if epoch == nil {
		return s.pool.Acquire(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(epoch, cancel)()
	defer cancel()
	return s.pool.Acquire(ctx)
}

// run calls f on conn. If the database stops answering meanwhile (epoch
// is cancelled), conn's socket gets a deadline in the past: whatever f
// waits for on it fails at once, and the broken connection is dropped on
// release. The statements take the caller's context, not one of the
// store's, so this is how the health duty reaches them.
func (s *Store) run(conn *pgxpool.Conn, epoch context.Context, f func(conn *pgx.Conn) error) error {
	if epoch == nil {
		return f(conn.Conn())
	}
	nc := conn.Conn().PgConn().Conn()
	stop := context.AfterFunc(epoch, func() { _ = nc.SetDeadline(time.Now()) })
	err := f(conn.Conn())
	if !stop() && err == nil {
		// Cut just after f finished: the session may be mid-message.
		_ = conn.Conn().Close(context.Background())
	}
	return err
}

func (s *Store) withTx(ctx context.Context, f func(tx pgx.Tx) error) error {
	return s.withConn(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, f)
	})
}

func isNornErr(err error) bool {
	var ne *norn.Error
	return errors.As(err, &ne)
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return false
}

// mapErr turns backend failures into norn errors: lost or refused
// connections become unavailable (retryable, HTTP 503); norn errors pass
// through; anything else is an internal error with its cause.
func mapErr(err error) error {
	if err == nil || isNornErr(err) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"), // insufficient resources
			strings.HasPrefix(pe.Code, "57"), // operator intervention: shutdown, cannot connect now
			pe.Code == "40001", pe.Code == "40P01",
			pe.Code == "25006": // read-only transaction: a standby after failover
			return classify(err)
		}
		return fmt.Errorf("postgres: %w", err)
	}
	if connectionLost(err) {
		return classify(err)
	}
	return fmt.Errorf("postgres: %w", err)
}

func connectionLost(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.As(err, &ne) || errors.As(err, &ce) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err) ||
		strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "connection reset")
}

// newPool builds the pgxpool for everything but the listener and the leader
// lock (those need sessions of their own). Statements are prepared and
// cached per connection (pgx's default exec mode), so hot statements are
// parsed and planned once per session.
func newPool(connCfg *pgx.ConnConfig, maxConns int) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	pc.ConnConfig = connCfg.Copy()
	pc.MaxConns = int32(maxConns)
	pc.MaxConnIdleTime = 5 * time.Minute
	pc.HealthCheckPeriod = 10 * time.Second
	// A session idle for a while may have died with a server restart:
	// check it cheaply rather than fail the caller's first query.
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > time.Second }
	pc.PingTimeout = 5 * time.Second
	return pgxpool.NewWithConfig(context.Background(), pc)
}

// release returns c to the pool. A session left in a transaction or broken
// by a network error or a cancellation (its state is unknown) is closed
// first, so the pool drops it instead of handing it out again.
func release(c *pgxpool.Conn, err error) {
	if err != nil && !c.Conn().IsClosed() {
		var pe *pgconn.PgError
		if c.Conn().PgConn().TxStatus() != 'I' || (!errors.As(err, &pe) && !isNornErr(err) && !errors.Is(err, pgx.ErrNoRows)) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = c.Conn().Close(ctx)
			cancel()
		}
	}
	c.Release()
}

// nowOf returns the injected clock's time, or zero (meaning: ask the database).
func (s *Store) clockNow() *time.Time {
	if s.cfg.Clock == nil {
		return nil
	}
	t := s.cfg.Clock.Now().UTC().Truncate(time.Microsecond)
	return &t
}

// dbNow returns the time to use for a change: the injected clock's, or the
// database's clock_timestamp().
func (s *Store) dbNow(ctx context.Context, q querier) (time.Time, error) {
	if t := s.clockNow(); t != nil {
		return *t, nil
	}
	var t time.Time
	if err := q.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t); err != nil {
		return t, err
	}
	return t.UTC(), nil
}

// broadcaster wakes every waiter at once.
type broadcaster struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBroadcaster() *broadcaster { return &broadcaster{ch: make(chan struct{})} }

func (b *broadcaster) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

func (b *broadcaster) fire() {
	b.mu.Lock()
	close(b.ch)
	b.ch = make(chan struct{})
	b.mu.Unlock()
}
