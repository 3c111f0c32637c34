package postgres

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// subscribers fans events out to local Subscribe streams.
type subscribers struct {
	mu   sync.Mutex
	subs map[*eventStream]struct{}
}

func newSubscribers() *subscribers { return &subscribers{subs: map[*eventStream]struct{}{}} }

func (ss *subscribers) publish(ev norn.Event) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for st := range ss.subs {
		if st.filter.Match(ev) {
			st.push(ev)
		}
	}
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
	ctx    context.Context
	ch     chan norn.Event
	mu     sync.Mutex
	lagged bool
	done   chan struct{}
	once   sync.Once
	item   norn.Event
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
	// Announce this node's subscriber before returning, so every change
	// committed from now on publishes its events.
	if err := s.announceSubscriber(ctx); err != nil {
		return nil, err
	}
	st := &eventStream{ss: s.subs, filter: f, ctx: ctx, ch: make(chan norn.Event, subscriberBuffer), done: make(chan struct{})}
	s.subs.mu.Lock()
	s.subs.subs[st] = struct{}{}
	s.subs.mu.Unlock()
	return st, nil
}

// subscriberTTL is how long an announcement in event_subscribers lasts; a
// node with Subscribe streams renews it every third of that, and a node
// that died stops costing per-task events at most this long after.
const subscriberTTL = time.Minute

// announceSubscriber records (or renews) that this node has Subscribe
// streams.
func (s *Store) announceSubscriber(ctx context.Context) error {
	return s.withConn(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, s.q(`INSERT INTO {s}.event_subscribers (node, until)
VALUES ($1, clock_timestamp() + $2 * interval '1 microsecond')
ON CONFLICT (node) DO UPDATE SET until = EXCLUDED.until`), s.node, subscriberTTL.Microseconds())
		if err == nil {
			s.announced.Store(true)
		}
		return err
	})
}

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
