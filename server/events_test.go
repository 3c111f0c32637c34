package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// subscribeCounter counts the store subscriptions made without Counts
// (the event streams'; the server's own recorders count) and how many
// are open.
type subscribeCounter struct {
	norn.Store
	made, open atomic.Int64
}

func (c *subscribeCounter) Subscribe(ctx context.Context, f norn.EventFilter) (norn.EventStream, error) {
	st, err := c.Store.Subscribe(ctx, f)
	if err != nil || f.Counts {
		return st, err
	}
	c.made.Add(1)
	c.open.Add(1)
	return &countedStream{EventStream: st, open: &c.open}, nil
}

type countedStream struct {
	norn.EventStream
	open   *atomic.Int64
	closed atomic.Bool
}

func (s *countedStream) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		s.open.Add(-1)
	}
	return s.EventStream.Close()
}

// TestEventStreamsShareOneSubscriptionAndEncodeOnce: any number of event
// streams share one store subscription, made with the first and ended with
// the last, and each event is encoded once whatever the number of streams
// it goes to. Before, each stream had its own subscription and encoded
// every event itself: one client with 256 streams submitting batches of
// 2,000 tasks pushed a normal request from 1 ms to 186–302 ms p50.
func TestEventStreamsShareOneSubscriptionAndEncodeOnce(t *testing.T) {
	t.Parallel()
	var subs subscribeCounter
	e := startServer(t, func(c *Config) { subs.Store = c.Store; c.Store = &subs })
	const streams = 10
	var readers []*sseReader
	for i := range streams {
		q := "?queue=ev"
		if i == 0 {
			q = "" // one stream follows every queue
		}
		r, stop := openEvents(t, e, q)
		defer stop()
		readers = append(readers, r)
	}
	if n := subs.made.Load(); n != 1 {
		t.Fatalf("%d event streams made %d store subscriptions, want 1", streams, n)
	}
	e.must(201, "POST", "/v1/tasks", `{"id":"x","queue":"elsewhere"}`)
	for i := range 5 {
		e.must(201, "POST", "/v1/tasks", fmt.Sprintf(`{"id":"e%d","queue":"ev"}`, i))
	}
	for i, r := range readers {
		want := 5
		if i == 0 {
			want = 6
		}
		for got := 0; got < want; {
			kind, data, err := r.next()
			if err != nil {
				t.Fatal(err)
			}
			if kind == ":" {
				continue
			}
			var ev norn.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Kind != norn.EventSubmitted {
				t.Fatalf("stream %d: %s %s", i, kind, data)
			}
			if i > 0 && ev.Queue != "ev" {
				t.Fatalf("stream %d's filter let through %+v", i, ev)
			}
			got++
		}
	}
	if n := e.srv.events.encoded.Load(); n != 6 {
		t.Errorf("6 events to %d streams were encoded %d times, want 6", streams, n)
	}
}

// TestEventStreamSubscriptionEndsWithTheLastStream: once no stream is
// open the store subscription ends (on PostgreSQL a subscriber without
// Counts makes every node send every event), and a new stream makes a new
// one.
func TestEventStreamSubscriptionEndsWithTheLastStream(t *testing.T) {
	t.Parallel()
	var subs subscribeCounter
	e := startServer(t, func(c *Config) { subs.Store = c.Store; c.Store = &subs })
	_, stop1 := openEvents(t, e, "")
	_, stop2 := openEvents(t, e, "")
	stop1()
	stop2()
	waitFor(t, func() bool { return subs.open.Load() == 0 })
	r, stop := openEvents(t, e, "")
	defer stop()
	e.must(201, "POST", "/v1/tasks", `{"id":"a","queue":"q"}`)
	for {
		kind, _, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		if kind == string(norn.EventSubmitted) {
			break
		}
	}
	if subs.made.Load() != 2 || subs.open.Load() != 1 {
		t.Errorf("subscriptions made %d, open %d; want 2 and 1", subs.made.Load(), subs.open.Load())
	}
}

// TestSlowEventStreamDropsWithAMarker: a stream whose reader stops
// neither holds back the others nor makes the server buffer without end:
// past its buffer its events are dropped, and when it reads again it gets
// a Lagged event counting them before the stream resumes.
func TestSlowEventStreamDropsWithAMarker(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	h := e.srv.events
	setMax := func(n int) {
		h.mu.Lock()
		h.maxEvents = n
		h.mu.Unlock()
	}
	// The stuck reader: a raw connection, with a small buffer of 50
	// events and a small receive buffer so the server's writes block
	// early, read only at the end.
	setMax(50)
	c, err := net.Dial("tcp", e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(c, "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	sc := bufioScanner(c)
	for sc.Scan() && sc.Text() != "" { // the headers: the stream has joined
	}
	setMax(maxPendingEvents)
	fast, stop := openEvents(t, e, "")
	defer stop()

	// Batches below the embedded store's event buffer (1,024), so only the
	// stuck stream lags.
	const batches, per = 20, 500
	for b := range batches {
		var tasks []string
		for i := range per {
			tasks = append(tasks, fmt.Sprintf(`{"id":"b%d-%d","queue":"q","spec":{"pad":"%s"}}`, b, i, strings.Repeat("x", 200)))
		}
		e.must(200, "POST", "/v1/tasks/batch", `{"tasks":[`+strings.Join(tasks, ",")+`]}`)
	}
	// The fast reader gets every event (a generous buffer: it keeps up).
	for got := 0; got < batches*per; {
		kind, _, err := fast.next()
		if err != nil {
			t.Fatal(err)
		}
		switch kind {
		case string(norn.EventSubmitted):
			got++
		case string(norn.EventLagged):
			t.Fatalf("the fast reader lagged after %d events", got)
		}
	}
	// The stuck one finds a Lagged marker with a count once it reads.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	sse := &sseReader{sc: sc}
	seen := 0
	for {
		kind, data, err := sse.next()
		if err != nil {
			t.Fatalf("after %d events, no Lagged marker: %v", seen, err)
		}
		if kind == string(norn.EventLagged) {
			var ev norn.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Count <= 0 {
				t.Fatalf("Lagged marker %s", data)
			}
			if seen+ev.Count > batches*per {
				t.Fatalf("%d events seen and %d dropped, more than %d", seen, ev.Count, batches*per)
			}
			break
		}
		if kind == string(norn.EventSubmitted) {
			seen++
		}
	}
}

// TestEventStreamLimits: a token may hold MaxEventStreamsPerCaller event
// streams, the server MaxEventStreams; past them 429 counted under
// event_streams_per_caller and event_streams, while long polls and other
// requests are still served.
func TestEventStreamLimits(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.MaxEventStreams, c.MaxEventStreamsPerCaller = 5, 3
		c.Tokens = []Token{{Token: "a", Role: RoleAdmin}, {Token: "b", Role: RoleAdmin}}
	})
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	open := func(tok string) int {
		st, _, stop := openStream(t, e, tok)
		closers = append(closers, stop)
		return st
	}
	for range 3 {
		if st := open("a"); st != 200 {
			t.Fatalf("stream within the limit: %d", st)
		}
	}
	if st := open("a"); st != 429 {
		t.Fatalf("4th event stream of a token: %d", st)
	}
	e.must(200, "POST", "/v1/claim", `{"worker":"w","queues":["q"],"wait":"10ms"}`, withToken("a"))
	for range 2 {
		if st := open("b"); st != 200 {
			t.Fatalf("b's stream: %d", st)
		}
	}
	if st := open("b"); st != 429 {
		t.Fatalf("event stream over the server's limit: %d", st)
	}
	m := string(e.must(200, "GET", "/metrics", "", withToken("a")).body)
	for _, reason := range []string{"event_streams_per_caller", "event_streams"} {
		if got := metricLine(m, "norn_requests_refused_total", `reason="`+reason+`"`); got != "1" {
			t.Errorf("refusals for %s: %q, want 1", reason, got)
		}
	}
}

// TestEventSubBuffer: a stream's buffer drops past its bound, and the
// next take ends with a Lagged event counting what was dropped.
func TestEventSubBuffer(t *testing.T) {
	s := &eventSub{wake: make(chan struct{}, 1), maxEvents: 2, maxBytes: 1 << 20}
	for i := range 5 {
		s.push(encodeEvent(norn.Event{Kind: norn.EventSubmitted, TaskID: fmt.Sprint(i)}))
	}
	out, ended := s.take(nil, time.Unix(1, 0))
	text := string(out)
	if ended || strings.Count(text, "event: TaskSubmit\n") != 2 || !strings.HasSuffix(text, `"count":3}`+"\n\n") {
		t.Fatalf("take after 5 pushes into 2 places:\n%s", text)
	}
	s.push(encodeEvent(norn.Event{Kind: norn.EventSubmitted, TaskID: "after"}))
	if out, _ := s.take(nil, time.Now()); !strings.Contains(string(out), `"task_id":"after"`) || strings.Contains(string(out), "Lagged") {
		t.Fatalf("the stream does not resume after the marker: %s", out)
	}
}

func bufioScanner(c net.Conn) *bufio.Scanner {
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	return sc
}

// marshalEvent is the server-sent event of e as encoding/json makes it,
// which appendEvent must match byte for byte.
func marshalEvent(e norn.Event) string {
	data, err := json.Marshal(e)
	if err != nil {
		data = []byte(`{}`)
	}
	return "event: " + string(e.Kind) + "\ndata: " + string(data) + "\n\n"
}

// TestAppendEventMatchesJSON: the hand-made encoding of an event is what
// encoding/json makes of it, for the events stores make and for those it
// leaves to encoding/json (escapes, non-ASCII, years past 9999, offsets).
func TestAppendEventMatchesJSON(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 890000000, time.UTC)
	for _, e := range []norn.Event{
		{Kind: norn.EventSubmitted, TaskID: "019a-b", Queue: "q", Status: norn.StatusReady, Version: 1, Time: at},
		{Kind: norn.EventLagged, Time: at},
		{Kind: norn.EventSubmitted, Queue: "q", Status: norn.StatusReady, Time: at, Count: 2000},
		{Kind: norn.EventSubmitted, TaskID: "a\"b\\c<d>&e", Time: at},
		{Kind: norn.EventSubmitted, TaskID: "tâche\u2028", Queue: "\x7f", Time: at},
		{Kind: norn.EventSubmitted, TaskID: "bad\xff", Time: at},
		{Kind: norn.EventSubmitted, Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Kind: norn.EventSubmitted, Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 25*3600))},
		{Kind: norn.EventSubmitted, Time: time.Date(2026, 1, 1, 0, 0, 0, 1, time.FixedZone("x", -5*3600))},
		{Kind: norn.EventSubmitted, Version: 1<<64 - 1, Count: -3},
	} {
		if got, want := string(appendEvent([]byte("kept"), e)), "kept"+marshalEvent(e); got != want {
			t.Errorf("%+v:\n got %q\nwant %q", e, got, want)
		}
	}
}

func FuzzAppendEventMatchesJSON(f *testing.F) {
	f.Add("TaskSubmit", "id", "q", "ready", uint64(3), int64(1772600000123456789), 0, 0)
	f.Add("Lagged", "", "", "", uint64(0), int64(-1), 5, 3600)
	f.Fuzz(func(t *testing.T, kind, id, queue, status string, version uint64, nanos int64, count, offset int) {
		e := norn.Event{Kind: norn.EventKind(kind), TaskID: id, Queue: queue, Status: norn.Status(status),
			Version: version, Time: time.Unix(0, nanos).In(time.FixedZone("z", offset%(30*3600))), Count: count}
		if got, want := string(appendEvent(nil, e)), marshalEvent(e); got != want {
			t.Fatalf("%+v:\n got %q\nwant %q", e, got, want)
		}
	})
}

// TestEventFanOutAllocatesNothing: once a stream's two buffers have grown,
// delivering an event to several streams and taking it allocates nothing
// (encoding/json and a slice entry per stream made the fan-out a sixth of
// the server's allocations under batches with streams open).
func TestEventFanOutAllocatesNothing(t *testing.T) {
	h := &eventHub{subs: map[*eventSub]struct{}{}}
	var subs []*eventSub
	spares := make([][]byte, 3)
	for range 3 {
		s := &eventSub{wake: make(chan struct{}, 1), maxEvents: 1 << 10, maxBytes: 1 << 20}
		h.subs[s] = struct{}{}
		subs = append(subs, s)
	}
	e := norn.Event{Kind: norn.EventSubmitted, TaskID: "019a0000-0000-7000-8000-000000000000", Queue: "q",
		Status: norn.StatusReady, Version: 1, Time: time.Now().UTC()}
	now := time.Now()
	burst := func() {
		for range 100 {
			h.deliver(e)
		}
		for i, s := range subs {
			spares[i], _ = s.take(spares[i], now)
		}
	}
	burst()
	burst() // both buffers of every stream have grown
	if n := testing.AllocsPerRun(20, burst); n != 0 {
		t.Errorf("a burst of 100 events to 3 streams made %v allocations, want 0", n)
	}
	if got, want := string(spares[0]), strings.Repeat(marshalEvent(e), 100); got != want {
		t.Errorf("a stream took %d bytes, want the 100 events (%d bytes)", len(got), len(want))
	}
}
