package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornq/norn"
)

// The event streams of GET /v1/events share one subscription to the store
// (eventHub). Each event is encoded once, into the bytes of its
// server-sent event, whatever the number of streams it goes to; a stream's
// writer takes everything pending at once, so a burst of events is one
// write and one flush per stream rather than one per event. A stream that
// cannot keep up never holds anything back: past its buffer, events are
// dropped, and the stream says so with a Lagged event counting them before
// it resumes (the client should re-read the state it follows). Without
// streams there is no subscription at all, which matters on PostgreSQL,
// where one subscriber without Counts makes every node send every event.

// Limits of one event stream's buffer: past either, events are dropped.
const (
	maxPendingEvents = 8192
	maxPendingBytes  = 4 << 20
)

// eventHub fans the store's events out to the open event streams.
type eventHub struct {
	store norn.Store
	log   *slog.Logger
	drain context.Context // the server's: ends the subscription at shutdown

	// maxEvents and maxBytes bound each stream's buffer.
	maxEvents, maxBytes int
	// encoded counts the events encoded: once each, whatever the number
	// of streams they go to.
	encoded atomic.Int64

	mu   sync.Mutex
	subs map[*eventSub]struct{}
	// stop ends the store subscription of generation gen (nil: none).
	stop context.CancelFunc
	gen  uint64
}

func newEventHub(store norn.Store, log *slog.Logger, drain context.Context) *eventHub {
	return &eventHub{store: store, log: log, drain: drain, subs: map[*eventSub]struct{}{},
		maxEvents: maxPendingEvents, maxBytes: maxPendingBytes}
}

// eventSub is one stream's share of the hub.
type eventSub struct {
	f                   norn.EventFilter
	wake                chan struct{} // signalled when something is pending
	maxEvents, maxBytes int

	mu      sync.Mutex
	pending [][]byte // encoded events, in order
	bytes   int
	dropped int  // events dropped since the last take
	ended   bool // the store subscription ended: the stream must end too
}

// subscribe registers a stream with filter f. Every event the store
// stores after subscribe returns reaches it (or is counted as dropped).
func (h *eventHub) subscribe(f norn.EventFilter) (*eventSub, error) {
	s := &eventSub{f: f, wake: make(chan struct{}, 1), maxEvents: h.maxEvents, maxBytes: h.maxBytes}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stop == nil {
		ctx, cancel := context.WithCancel(h.drain)
		stream, err := h.store.Subscribe(ctx, norn.EventFilter{})
		if err != nil {
			cancel()
			return nil, err
		}
		h.gen++
		h.stop = cancel
		go h.pump(ctx, stream, h.gen)
	}
	h.subs[s] = struct{}{}
	return s, nil
}

// unsubscribe removes a stream; the last one ends the store subscription.
func (h *eventHub) unsubscribe(s *eventSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
	if len(h.subs) == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// pump delivers the store's events to the streams until the subscription
// ends; then it ends the streams still on it, whose clients reconnect.
func (h *eventHub) pump(ctx context.Context, stream norn.EventStream, gen uint64) {
	defer stream.Close()
	for stream.Next() {
		h.deliver(stream.Item())
	}
	if err := stream.Err(); err != nil && ctx.Err() == nil {
		h.log.Warn("event streams: the store's subscription failed; open streams end and their clients reconnect", slog.Any("error", err))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen != gen {
		return // a newer subscription serves the streams now
	}
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
	for s := range h.subs {
		s.end()
		delete(h.subs, s)
	}
}

// deliver appends e, encoded once, to every stream whose filter it
// passes. It never waits for a stream.
func (h *eventHub) deliver(e norn.Event) {
	var frame []byte
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if !s.f.Match(e) {
			continue
		}
		if frame == nil {
			frame = encodeEvent(e)
			h.encoded.Add(1)
		}
		s.push(frame)
	}
}

// encodeEvent is the server-sent event of e.
func encodeEvent(e norn.Event) []byte {
	data, err := json.Marshal(e)
	if err != nil {
		data = []byte(`{}`)
	}
	b := make([]byte, 0, len(e.Kind)+len(data)+17)
	b = append(b, "event: "...)
	b = append(b, e.Kind...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

func (s *eventSub) push(frame []byte) {
	s.mu.Lock()
	if s.dropped > 0 || len(s.pending) >= s.maxEvents || s.bytes+len(frame) > s.maxBytes {
		// Once something is dropped, later events wait for the Lagged
		// marker too, so the stream never skips silently.
		s.dropped++
	} else {
		s.pending = append(s.pending, frame)
		s.bytes += len(frame)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *eventSub) end() {
	s.mu.Lock()
	s.ended = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns, as one buffer, every pending event followed by a Lagged
// event counting those dropped since the last take, and whether the
// stream must end.
func (s *eventSub) take(buf []byte, now time.Time) ([]byte, bool) {
	s.mu.Lock()
	pending, dropped, ended := s.pending, s.dropped, s.ended
	s.pending, s.bytes, s.dropped = nil, 0, 0
	s.mu.Unlock()
	for _, f := range pending {
		buf = append(buf, f...)
	}
	if dropped > 0 {
		buf = append(buf, lagged(dropped, now)...)
	}
	return buf, ended
}

// lagged is the marker of n dropped events: a Lagged event whose count is
// how many this stream missed.
func lagged(n int, now time.Time) []byte {
	b := []byte(`event: Lagged` + "\n" + `data: {"kind":"Lagged","time":`)
	t, _ := now.UTC().MarshalJSON()
	b = append(b, t...)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "}\n\n"...)
}
