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
// write and one flush per stream rather than one per event. The fan-out
// allocates nothing per event: an event is encoded by hand into one reused
// buffer and copied into each stream's pending bytes, and each stream
// swaps two buffers between its writer and the hub. (Encoding with
// encoding/json, one allocation per event plus a slice entry per stream
// made the fan-out a sixth of the server's allocations under a client
// submitting batches of 2,000 tasks with 16 streams open, and the garbage
// collections they caused took processors a normal request needed.) A
// stream that cannot keep up never holds anything back: past its buffer,
// events are dropped, and the stream says so with a Lagged event counting
// them before it resumes (the client should re-read the state it follows).
// Without streams there is no subscription at all, which matters on
// PostgreSQL, where one subscriber without Counts makes every node send
// every event.

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
	// frame is the encoding of the event being delivered, reused.
	frame []byte
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
	pending []byte // encoded events, in order
	events  int    // how many pending holds
	dropped int    // events dropped since the last take
	ended   bool   // the store subscription ended: the stream must end too
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
	h.mu.Lock()
	defer h.mu.Unlock()
	encoded := false
	for s := range h.subs {
		if !s.f.Match(e) {
			continue
		}
		if !encoded {
			h.frame = appendEvent(h.frame[:0], e)
			encoded = true
			h.encoded.Add(1)
		}
		s.push(h.frame)
	}
}

// encodeEvent is the server-sent event of e.
func encodeEvent(e norn.Event) []byte { return appendEvent(nil, e) }

// appendEvent appends the server-sent event of e to b.
func appendEvent(b []byte, e norn.Event) []byte {
	b = append(b, "event: "...)
	b = append(b, e.Kind...)
	b = append(b, "\ndata: "...)
	n := len(b)
	var ok bool
	if b, ok = appendEventJSON(b, e); !ok {
		data, err := json.Marshal(e)
		if err != nil {
			data = []byte(`{}`)
		}
		b = append(b[:n], data...)
	}
	return append(b, "\n\n"...)
}

// appendEventJSON appends what json.Marshal makes of e, byte for byte,
// without reflection or allocation, for the events a store makes: strings
// of printable ASCII that JSON leaves as they are and a time of years 0 to
// 9999 with an offset under a day. For anything else it reports false and
// the caller asks encoding/json.
func appendEventJSON(b []byte, e norn.Event) ([]byte, bool) {
	if y := e.Time.Year(); y < 0 || y > 9999 {
		return b, false
	}
	if _, off := e.Time.Zone(); off <= -24*60*60 || off >= 24*60*60 {
		return b, false
	}
	ok := true
	str := func(name, v string, omitEmpty bool) {
		if v == "" && omitEmpty {
			return
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				ok = false
				return
			}
		}
		b = append(b, name...)
		b = append(b, '"')
		b = append(b, v...)
		b = append(b, '"')
	}
	str(`{"kind":`, string(e.Kind), false)
	str(`,"task_id":`, e.TaskID, true)
	str(`,"queue":`, e.Queue, true)
	str(`,"status":`, string(e.Status), true)
	if !ok {
		return b, false
	}
	if e.Version != 0 {
		b = append(b, `,"version":`...)
		b = strconv.AppendUint(b, e.Version, 10)
	}
	b = append(b, `,"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if e.Count != 0 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, int64(e.Count), 10)
	}
	return append(b, '}'), true
}

// push appends a copy of frame to the stream's pending bytes.
func (s *eventSub) push(frame []byte) {
	s.mu.Lock()
	if s.dropped > 0 || s.events >= s.maxEvents || len(s.pending)+len(frame) > s.maxBytes {
		// Once something is dropped, later events wait for the Lagged
		// marker too, so the stream never skips silently.
		s.dropped++
	} else {
		s.pending = append(s.pending, frame...)
		s.events++
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
// stream must end. The buffer returned is the stream's pending one, now
// the caller's; spare, a buffer the caller has done with (the one of its
// previous take), becomes the stream's pending buffer, so a stream reuses
// two buffers rather than allocating one per burst.
func (s *eventSub) take(spare []byte, now time.Time) ([]byte, bool) {
	s.mu.Lock()
	out, dropped, ended := s.pending, s.dropped, s.ended
	s.pending, s.events, s.dropped = spare[:0], 0, 0
	s.mu.Unlock()
	if dropped > 0 {
		out = append(out, lagged(dropped, now)...)
	}
	return out, ended
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
