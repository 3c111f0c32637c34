package embedded

import (
	"context"
	"sync"
	"time"

	"github.com/nornq/norn"
)

// subscription is one Subscribe stream: a bounded buffer filled by
// publish, which never blocks: when the buffer is full the event is dropped
// and the subscriber is told it lagged.
type subscription struct {
	s      *Store
	f      norn.EventFilter
	ch     chan norn.Event
	mu     sync.Mutex
	lagged bool
	closed bool
	stop   chan struct{}
	ctx    context.Context
	cur    norn.Event
	err    error
}

// Subscribe streams task state changes matching f.
func (s *Store) Subscribe(ctx context.Context, f norn.EventFilter) (norn.EventStream, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	for _, q := range f.Queues {
		if err := norn.ValidateQueue("queues", q); err != nil {
			return nil, err
		}
	}
	sub := &subscription{s: s, f: f, ch: make(chan norn.Event, s.opts.EventBuffer),
		stop: make(chan struct{}), ctx: ctx}
	s.subMu.Lock()
	s.subs[sub] = struct{}{}
	s.hasSubs.Store(true)
	s.subMu.Unlock()
	return sub, nil
}

// publish fans events out; called after the change committed, with no
// store lock held.
func (s *Store) publish(evs []norn.Event) {
	s.subMu.Lock()
	defer s.subMu.Unlock()
	for sub := range s.subs {
		for _, e := range evs {
			if !sub.f.Match(e) {
				continue
			}
			select {
			case sub.ch <- e:
			default:
				sub.mu.Lock()
				sub.lagged = true
				sub.mu.Unlock()
			}
		}
	}
}

func (sub *subscription) closeLocked() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.closed {
		sub.closed = true
		close(sub.stop)
	}
}

// Next waits for the next event. A subscriber that fell behind first gets
// one EventLagged.
func (sub *subscription) Next() bool {
	sub.mu.Lock()
	if sub.closed {
		sub.mu.Unlock()
		return false
	}
	if sub.lagged {
		sub.lagged = false
		sub.mu.Unlock()
		sub.cur = norn.Event{Kind: norn.EventLagged, Time: time.Now().UTC()}
		return true
	}
	sub.mu.Unlock()
	select {
	case e := <-sub.ch:
		sub.cur = e
		return true
	case <-sub.stop:
		return false
	case <-sub.ctx.Done():
		sub.err = sub.ctx.Err()
		sub.Close()
		return false
	}
}

func (sub *subscription) Item() norn.Event { return sub.cur }
func (sub *subscription) Err() error       { return sub.err }

// Close unsubscribes; safe to call more than once.
func (sub *subscription) Close() error {
	s := sub.s
	s.subMu.Lock()
	delete(s.subs, sub)
	s.hasSubs.Store(len(s.subs) > 0)
	s.subMu.Unlock()
	sub.closeLocked()
	return nil
}
