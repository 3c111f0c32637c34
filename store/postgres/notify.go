package postgres

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// listen keeps a dedicated session LISTENing on the store's channel. Every
// notification is parsed into events for subscribers; a task becoming
// ready wakes long-polling claimers and a new delay wakes the monitor. When
// the session drops it reconnects with backoff; meanwhile claimers fall back
// to polling, and subscribers get EventLagged because events were missed.
func (s *Store) listen(ready chan<- error) {
	defer s.wg.Done()
	backoff := 50 * time.Millisecond
	first := true
	for s.ctx.Err() == nil {
		err := s.listenOnce(func() {
			if first {
				ready <- nil
				first = false
			} else {
				// Whatever happened while we were away is unknown.
				s.wake.fire()
				s.sweepWake.fire()
				s.subs.lagAll()
			}
			backoff = 50 * time.Millisecond
		})
		if s.ctx.Err() != nil {
			break
		}
		if first {
			ready <- err
			return
		}
		s.cfg.Logger.Warn("norn: notification listener lost its connection; reconnecting", "err", err)
		s.subs.lagAll()
		select {
		case <-s.ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
	if first {
		ready <- s.ctx.Err()
	}
}

func (s *Store) listenOnce(up func()) error {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(ctx, s.connCfg)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(s.ctx, "LISTEN "+quoteIdent(s.channel)); err != nil {
		return err
	}
	up()
	for {
		n, err := conn.WaitForNotification(s.ctx)
		if err != nil {
			return err
		}
		s.dispatch(n.Payload)
	}
}

// dispatch parses a payload of event lines (kind, id, queue, status,
// version, unix microseconds; tab-separated).
func (s *Store) dispatch(payload string) {
	wakeClaim, wakeSweep := false, false
	switch payload {
	case "wake":
		s.wake.fire()
		return
	case "sched":
		s.sweepWake.fire()
		return
	}
	for _, line := range strings.Split(payload, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 6 {
			continue
		}
		v, _ := strconv.ParseUint(f[4], 10, 64)
		us, _ := strconv.ParseInt(f[5], 10, 64)
		ev := norn.Event{Kind: norn.EventKind(f[0]), TaskID: f[1], Queue: f[2], Status: norn.Status(f[3]),
			Version: v, Time: time.UnixMicro(us).UTC()}
		if ev.Status == "deleted" {
			ev.Status = ""
		}
		switch ev.Status {
		case norn.StatusReady:
			wakeClaim = true
		case norn.StatusScheduled:
			wakeSweep = true
		}
		s.subs.publish(ev)
	}
	if wakeClaim {
		s.wake.fire()
	}
	if wakeSweep {
		s.sweepWake.fire()
	}
}

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

// renewSubscribers keeps this node's announcement alive while it has
// Subscribe streams, and withdraws it when the store closes.
func (s *Store) renewSubscribers() {
	defer s.wg.Done()
	t := time.NewTicker(subscriberTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			if s.announced.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, _ = s.pool.Exec(ctx, s.q(`DELETE FROM {s}.event_subscribers WHERE node = $1`), s.node)
				cancel()
			}
			return
		case <-t.C:
			if s.subs.count() == 0 {
				continue
			}
			ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			if err := s.announceSubscriber(ctx); err != nil && s.ctx.Err() == nil {
				s.cfg.Logger.Warn("norn: cannot renew the event subscription; events may stop until it succeeds", "err", err)
			}
			cancel()
		}
	}
}

func (ss *subscribers) count() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.subs)
}
