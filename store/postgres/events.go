package postgres

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// eventLevel is what the live subscribers of all nodes ask writers to
// publish (event_subscribers).
type eventLevel int

const (
	// eventsOff: no node subscribes; writers send wake-up words only.
	eventsOff eventLevel = iota
	// eventsCounted: every live subscriber only counts; writers send the
	// counted kinds as one line per kind, queue and status.
	eventsCounted
	// eventsAll: some node wants every event; one line per task.
	eventsAll
)

// eventLevelSQL reads the eventLevel from event_subscribers, as a column
// named level (one row).
const eventLevelSQL = `SELECT CASE WHEN bool_or(NOT counts_only) THEN 2 WHEN count(*) > 0 THEN 1 ELSE 0 END AS level
	FROM {s}.event_subscribers WHERE until > clock_timestamp()`

// countedKindsSQL is norn.CountedKinds as an SQL list.
var countedKindsSQL = func() string {
	q := make([]string, len(norn.CountedKinds))
	for i, k := range norn.CountedKinds {
		q[i] = "'" + string(k) + "'"
	}
	return "(" + strings.Join(q, ", ") + ")"
}()

// subscribers fans events out to local Subscribe streams.
type subscribers struct {
	mu   sync.Mutex
	subs map[*eventStream]struct{}
	seq  uint64 // the last stream's token
}

func newSubscribers() *subscribers { return &subscribers{subs: map[*eventStream]struct{}{}} }

func (ss *subscribers) publish(ev norn.Event) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for st := range ss.subs {
		switch {
		case st.filter.Match(ev):
			st.push(ev)
		case ev.Count > 0 && st.announced && !st.filter.Counts && (len(st.filter.Queues) == 0 || slices.Contains(st.filter.Queues, ev.Queue)):
			// A write that read the level before this stream's announcement
			// committed after it: the stream misses those tasks' own events.
			st.lag()
		}
	}
}

// announced marks the stream with this token as announced: the listener
// read the marker its announcement sent. Notifications arrive in commit
// order, so counted lines before the marker come from writes committed
// before the announcement (the stream does not need them), and those
// after it from writes that missed it.
func (ss *subscribers) announced(token uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for st := range ss.subs {
		if st.token == token {
			st.announced = true
		}
	}
}

// countsOnly reports whether every local stream only counts (and there is
// at least one), which this node announces as counts_only.
func (ss *subscribers) countsOnly() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for st := range ss.subs {
		if !st.filter.Counts {
			return false
		}
	}
	return len(ss.subs) > 0
}

func (ss *subscribers) lagAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for st := range ss.subs {
		st.lag()
	}
}

func (ss *subscribers) closeAll() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for st := range ss.subs {
		st.shut()
	}
	ss.subs = map[*eventStream]struct{}{}
}

func (ss *subscribers) remove(st *eventStream) {
	ss.mu.Lock()
	delete(ss.subs, st)
	ss.mu.Unlock()
}

// subscriberBuffer is how many events a subscriber may fall behind before
// it gets EventLagged instead.
const subscriberBuffer = 4096

type eventStream struct {
	ss     *subscribers
	filter norn.EventFilter
	// token names the stream in its announcement's marker; announced is
	// set when the listener reads that marker (both under ss.mu).
	token     uint64
	announced bool
	ctx       context.Context
	ch        chan norn.Event
	mu        sync.Mutex
	lagged    bool
	done      chan struct{}
	once      sync.Once
	item      norn.Event
}

// push never blocks the listener: a full buffer turns into a lag marker.
func (st *eventStream) push(ev norn.Event) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lagged {
		select {
		case st.ch <- norn.Event{Kind: norn.EventLagged, Time: ev.Time}:
			st.lagged = false
		default:
			return
		}
	}
	select {
	case st.ch <- ev:
	default:
		st.lagged = true
	}
}

func (st *eventStream) lag() {
	st.mu.Lock()
	defer st.mu.Unlock()
	select {
	case st.ch <- norn.Event{Kind: norn.EventLagged, Time: time.Now().UTC()}:
	default:
		st.lagged = true
	}
}

func (st *eventStream) shut() { st.once.Do(func() { close(st.done) }) }

func (st *eventStream) Next() bool {
	select {
	case ev := <-st.ch:
		st.item = ev
		return true
	case <-st.done:
		return false
	case <-st.ctx.Done():
		return false
	}
}

func (st *eventStream) Item() norn.Event { return st.item }
func (st *eventStream) Err() error       { return nil }
func (st *eventStream) Close() error {
	st.ss.remove(st)
	st.shut()
	return nil
}

// Subscribe streams task state changes from every node, as published
// through NOTIFY. Delivery is best effort: a subscriber that falls behind,
// or a listener reconnect, yields an EventLagged.
func (s *Store) Subscribe(ctx context.Context, f norn.EventFilter) (norn.EventStream, error) {
	if s.closed.Load() {
		return nil, norn.ErrClosed
	}
	for i, q := range f.Queues {
		if err := norn.ValidateQueue("queues["+strconv.Itoa(i)+"]", q); err != nil {
			return nil, err
		}
	}
	st := &eventStream{ss: s.subs, filter: f, ctx: ctx, ch: make(chan norn.Event, subscriberBuffer), done: make(chan struct{})}
	s.subs.mu.Lock()
	s.subs.seq++
	st.token = s.subs.seq
	s.subs.subs[st] = struct{}{}
	s.subs.mu.Unlock()
	// Announce this node's subscriber (with the level that includes the
	// new stream) before returning, so every change committed from now on
	// publishes its events.
	if err := s.announce(ctx, st.token); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// subscriberTTL is how long an announcement in event_subscribers lasts; a
// node with Subscribe streams renews it every third of that, and a node
// that died stops costing per-task events at most this long after.
const subscriberTTL = time.Minute

// announceSubscriber records (or renews) that this node has Subscribe
// streams, and whether they all only count. A stream that wants every
// event is announced before Subscribe returns; after the last such stream
// closes, the next renewal lets the node's row say counts_only again.
func (s *Store) announceSubscriber(ctx context.Context) error { return s.announce(ctx, 0) }

// announce is announceSubscriber for the stream with this token (0: a
// renewal), whose marker goes out in the same transaction.
func (s *Store) announce(ctx context.Context, token uint64) error {
	return s.withConn(ctx, func(conn *pgx.Conn) error {
		b := &pgx.Batch{}
		b.Queue(s.q(`INSERT INTO {s}.event_subscribers (node, until, counts_only)
VALUES ($1, clock_timestamp() + $2 * interval '1 microsecond', $3)
ON CONFLICT (node) DO UPDATE SET until = EXCLUDED.until, counts_only = EXCLUDED.counts_only`), s.node, subscriberTTL.Microseconds(), s.subs.countsOnly())
		if token > 0 {
			b.Queue("SELECT pg_notify($1, $2)", s.channel, announcedWord+"\t"+s.node+"\t"+strconv.FormatUint(token, 10))
		}
		err := conn.SendBatch(ctx, b).Close()
		if err == nil {
			s.announced.Store(true)
		}
		return err
	})
}

// announcedWord starts the marker a stream's announcement sends (its node
// and token follow, tab-separated).
const announcedWord = "announced"

// announcerParams configures the announcer duty.
type announcerParams struct {
	// every is how often the announcement is renewed while active says so.
	every    time.Duration
	active   func() bool
	announce func(ctx context.Context) error
	// withdraw runs when the duty stops, if announce ever succeeded.
	withdraw func(ctx context.Context)
	logger   *slog.Logger
}

// announcer is the background duty that keeps this node's row in
// event_subscribers alive while it has Subscribe streams, and withdraws it
// when the store closes.
type announcer struct {
	p announcerParams
	*duty
}

func startAnnouncer(p announcerParams) *announcer {
	a := &announcer{p: p}
	a.duty = startDuty(a.run)
	return a
}

func (a *announcer) run(ctx context.Context) {
	t := time.NewTicker(a.p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			a.p.withdraw(wctx)
			cancel()
			return
		case <-t.C:
			if !a.p.active() {
				continue
			}
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := a.p.announce(actx); err != nil && ctx.Err() == nil {
				a.p.logger.Warn("norn: cannot renew the event subscription; events may stop until it succeeds", "err", err)
			}
			cancel()
		}
	}
}

// withdrawSubscriber removes this node's row from event_subscribers, if it
// ever wrote one.
func (s *Store) withdrawSubscriber(ctx context.Context) {
	if s.announced.Load() {
		_, _ = s.pool.Exec(ctx, s.q(`DELETE FROM {s}.event_subscribers WHERE node = $1`), s.node)
	}
}

func (ss *subscribers) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.subs)
}
