package server

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"
	"unsafe"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/store/embedded"
)

// fakeClock is a settable clock for the recorder.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func ev(kind norn.EventKind, queue string, at time.Time) norn.Event {
	return norn.Event{Kind: kind, Queue: queue, TaskID: "t", Time: at}
}

func pointsOf(h norn.Throughput) map[time.Time][3]int64 {
	out := map[time.Time][3]int64{}
	for _, p := range h.Points {
		out[p.Minute] = [3]int64{p.Submitted, p.Completed, p.Failed}
	}
	return out
}

func TestThroughputCountsPerMinuteAndQueue(t *testing.T) {
	t0 := time.Date(2030, 3, 4, 10, 0, 30, 0, time.UTC)
	clk := &fakeClock{t0}
	tp := newThroughput(clk.now)
	tp.observe(ev(norn.EventSubmitted, "a", t0))
	tp.observe(ev(norn.EventSubmitted, "b", t0))
	tp.observe(ev(norn.EventKind(norn.TaskComplete), "a", t0.Add(10*time.Second)))
	tp.observe(ev(norn.EventProgress, "a", t0)) // not drawn
	tp.observe(ev(norn.EventUpdated, "a", t0))  // not drawn
	tp.observe(ev(norn.EventDeleted, "a", t0))  // not drawn
	// A counted event adds its count (a Postgres subscription with Counts).
	counted := ev(norn.EventKind(norn.TaskComplete), "b", t0)
	counted.TaskID, counted.Count = "", 4
	tp.observe(counted)
	clk.t = t0.Add(2 * time.Minute)
	tp.observe(ev(norn.EventKind(norn.TaskRetry), "a", clk.t))
	tp.observe(ev(norn.EventKind(norn.TaskTimeout), "a", clk.t))
	tp.observe(ev(norn.EventKind(norn.TaskAbort), "b", clk.t))

	m0 := t0.Truncate(time.Minute)
	m2 := m0.Add(2 * time.Minute)
	for _, tc := range []struct {
		queues []string
		want   map[time.Time][3]int64
	}{
		{nil, map[time.Time][3]int64{m0: {2, 5, 0}, m2: {0, 0, 3}}},
		{[]string{"a"}, map[time.Time][3]int64{m0: {1, 1, 0}, m2: {0, 0, 2}}},
		{[]string{"b"}, map[time.Time][3]int64{m0: {1, 4, 0}, m2: {0, 0, 1}}},
		{[]string{"a", "b"}, map[time.Time][3]int64{m0: {2, 5, 0}, m2: {0, 0, 3}}},
		{[]string{"none"}, map[time.Time][3]int64{}},
	} {
		h := tp.history(tc.queues, time.Time{})
		if got := pointsOf(h); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("queues %v: %v, want %v", tc.queues, got, tc.want)
		}
		if !h.Until.Equal(m2) || !h.Since.Equal(m2.Add(-norn.ThroughputWindow+time.Minute)) || !h.RecordingSince.Equal(t0) {
			t.Errorf("queues %v: since %v until %v recording %v", tc.queues, h.Since, h.Until, h.RecordingSince)
		}
	}
	// since cuts the answer; ahead of now it means the minute under way.
	if got := pointsOf(tp.history(nil, m0.Add(time.Minute))); len(got) != 1 || got[m2] != [3]int64{0, 0, 3} {
		t.Errorf("since m0+1m: %v", got)
	}
	if h := tp.history(nil, m2.Add(time.Hour)); len(h.Points) != 1 || !h.Since.Equal(m2) {
		t.Errorf("since in the future: %+v", h)
	}
}

func TestThroughputWindowSlides(t *testing.T) {
	t0 := time.Date(2030, 3, 4, 0, 0, 0, 0, time.UTC)
	clk := &fakeClock{t0}
	tp := newThroughput(clk.now)
	// One submit per hour for two days: only the last 24 h stay.
	for h := 0; h < 48; h++ {
		clk.t = t0.Add(time.Duration(h) * time.Hour)
		tp.observe(ev(norn.EventSubmitted, "q", clk.t))
	}
	for _, queues := range [][]string{nil, {"q"}} {
		got := pointsOf(tp.history(queues, time.Time{}))
		if len(got) != 24 {
			t.Fatalf("queues %v: %d points, want 24: %v", queues, len(got), got)
		}
		for h := 24; h < 48; h++ {
			if got[t0.Add(time.Duration(h)*time.Hour)] != [3]int64{1, 0, 0} {
				t.Errorf("queues %v: hour %d missing: %v", queues, h, got)
			}
		}
	}
	// The slot of minute 0 is reused by minute 1440: a late event for an
	// older minute is out of the window and not counted over the new one.
	tp.observe(ev(norn.EventSubmitted, "q", t0.Add(24*time.Hour)))
	if got := pointsOf(tp.history(nil, time.Time{}))[t0.Add(24*time.Hour)]; got != [3]int64{2, 0, 0} {
		t.Errorf("minute 1440 after a second event: %v", got)
	}
	// An hour later than everything, nothing of the past remains after 24 h.
	clk.t = t0.Add(47*time.Hour + 24*time.Hour)
	if got := tp.history(nil, time.Time{}).Points; len(got) != 0 {
		t.Errorf("after a day of silence: %v", got)
	}
}

func TestThroughputEventTimeOutsideWindowUsesClock(t *testing.T) {
	t0 := time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{t0}
	tp := newThroughput(clk.now)
	tp.observe(ev(norn.EventSubmitted, "q", t0.Add(time.Hour)))     // ahead of this node's clock
	tp.observe(ev(norn.EventSubmitted, "q", t0.Add(-48*time.Hour))) // long ago
	tp.observe(ev(norn.EventSubmitted, "q", time.Time{}))           // no time
	tp.observe(ev(norn.EventSubmitted, "q", t0.Add(-5*time.Minute)))
	got := pointsOf(tp.history(nil, time.Time{}))
	if got[t0] != [3]int64{3, 0, 0} || got[t0.Add(-5*time.Minute)] != [3]int64{1, 0, 0} || len(got) != 2 {
		t.Errorf("points %v", got)
	}
}

func TestThroughputQueueLimit(t *testing.T) {
	t0 := time.Date(2030, 3, 4, 12, 0, 0, 0, time.UTC)
	clk := &fakeClock{t0}
	tp := newThroughput(clk.now)
	for i := range throughputMaxQueues {
		tp.observe(ev(norn.EventSubmitted, fmt.Sprintf("q%d", i), t0))
	}
	// Over the limit: counted in the total only.
	tp.observe(ev(norn.EventSubmitted, "late", t0))
	if n := len(tp.queues); n != throughputMaxQueues {
		t.Fatalf("%d rings, want %d", n, throughputMaxQueues)
	}
	if got := pointsOf(tp.history([]string{"late"}, time.Time{})); len(got) != 0 {
		t.Errorf("late queue has a history over the limit: %v", got)
	}
	if got := pointsOf(tp.history(nil, time.Time{}))[t0]; got[0] != int64(throughputMaxQueues)+1 {
		t.Errorf("total %v", got)
	}
	// A day later, q0 keeps its ring by being busy; the idle ones give
	// theirs up to a newcomer.
	clk.t = t0.Add(norn.ThroughputWindow - time.Minute)
	tp.observe(ev(norn.EventSubmitted, "q0", clk.t))
	clk.t = t0.Add(norn.ThroughputWindow)
	tp.observe(ev(norn.EventSubmitted, "late", clk.t))
	if got := pointsOf(tp.history([]string{"late"}, time.Time{})); got[clk.t] != [3]int64{1, 0, 0} || len(got) != 1 {
		t.Errorf("late queue after an idle one left: %v", got)
	}
	if _, ok := tp.queues["q0"]; !ok || len(tp.queues) != throughputMaxQueues {
		t.Errorf("busy q0 lost its ring or the limit was passed (%d)", len(tp.queues))
	}
}

// The documented memory bound rests on the bucket size.
func TestThroughputBucketSize(t *testing.T) {
	if n := unsafe.Sizeof(bucket{}); n != 16 {
		t.Fatalf("bucket is %d bytes; update the bound in throughput.go and docs/api.md (throughput history)", n)
	}
}

func TestThroughputHTTP(t *testing.T) {
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "scoped", Role: RoleClient, Queues: []string{"a"}},
			{Token: "worker", Role: RoleWorker}}
	})
	ctx := context.Background()
	for _, q := range []string{"a", "a", "b"} {
		if _, err := e.store.Submit(ctx, norn.NewTask{Queue: q, Spec: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// The recorder follows the store's events asynchronously.
	total := func(path, tok string) int64 {
		r := e.do("GET", path, "", withToken(tok))
		if r.status != 200 {
			t.Fatalf("%s: %d %s", path, r.status, r.body)
		}
		var h norn.Throughput
		r.decode(t, &h)
		var n int64
		for _, p := range h.Points {
			n += p.Submitted
		}
		return n
	}
	await.Until(t, 10*time.Second, "the history to count 3 submits", func() bool {
		return total("/v1/stats/throughput", "admin") == 3
	})
	for _, tc := range []struct {
		path, tok string
		want      int64
	}{
		{"/v1/stats/throughput?queue=a", "admin", 2},
		{"/v1/stats/throughput?queue=a,b&since=1h", "admin", 3},
		{"/v1/stats/throughput?since=" + url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339)), "admin", 3},
		{"/v1/stats/throughput", "scoped", 2}, // only its queue
	} {
		if got := total(tc.path, tc.tok); got != tc.want {
			t.Errorf("%s as %s: %d submitted, want %d", tc.path, tc.tok, got, tc.want)
		}
	}
	for _, tc := range []struct {
		path, tok string
		status    int
		field     string
	}{
		{"/v1/stats/throughput?queue=b", "scoped", 403, ""},
		{"/v1/stats/throughput", "worker", 403, ""},
		{"/v1/stats/throughput?since=soon", "admin", 400, "since"},
		{"/v1/stats/throughput?bucket=1m", "admin", 400, "bucket"},
	} {
		r := e.do("GET", tc.path, "", withToken(tc.tok))
		if _, field := r.errorOf(t); r.status != tc.status || field != tc.field {
			t.Errorf("%s as %s: %d field %q, want %d %q", tc.path, tc.tok, r.status, field, tc.status, tc.field)
		}
	}
}

// TestThroughputSurvivesRestart: the keeper writes what a server counted
// when it closes, and the next server on the same store answers it.
func TestThroughputSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(ctx, embedded.Options{Dir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	useStore := func(c *Config) { c.Store = st }
	first := startServer(t, useStore)
	for _, q := range []string{"a", "a", "b"} {
		if _, err := st.Submit(ctx, norn.NewTask{Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	submitted := func(e *env, path string) (int64, norn.Throughput) {
		var h norn.Throughput
		e.must(200, "GET", path, "").decode(t, &h)
		var n int64
		for _, p := range h.Points {
			n += p.Submitted
		}
		return n, h
	}
	waitFor(t, func() bool { n, _ := submitted(first, "/v1/stats/throughput"); return n == 3 })
	if err := first.srv.Close(); err != nil {
		t.Fatal(err)
	}
	second := startServer(t, useStore)
	n, h := submitted(second, "/v1/stats/throughput")
	if n != 3 {
		t.Fatalf("after a restart the history counts %d submits, want 3: %+v", n, h)
	}
	if h.RecordingSince.After(time.Now().Add(-time.Second)) && h.RecordingSince.After(h.Points[0].Minute) {
		t.Fatalf("recording_since %s is after the first stored minute %s", h.RecordingSince, h.Points[0].Minute)
	}
	if n, _ := submitted(second, "/v1/stats/throughput?queue=a"); n != 2 {
		t.Fatalf("queue a after a restart: %d submits, want 2", n)
	}
}

// TestThroughputFromStoredHistory: minutes older than memory come from the
// store; a window older than norn.ThroughputKeep is answered in hours.
func TestThroughputFromStoredHistory(t *testing.T) {
	e := startServer(t, nil)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Minute)
	threeDays, tenDays := now.Add(-72*time.Hour), now.Truncate(time.Hour).Add(-240*time.Hour).Add(17*time.Minute)
	recs := []norn.ThroughputRecord{
		{Queue: "", Step: time.Minute, At: threeDays, Completed: 7},
		{Queue: "a", Step: time.Minute, At: threeDays, Completed: 5},
		{Queue: "", Step: time.Minute, At: tenDays, Failed: 2},
		{Queue: "", Step: time.Minute, At: tenDays.Add(time.Minute), Failed: 3},
	}
	if err := e.store.(norn.ThroughputStore).SaveThroughput(ctx, recs); err != nil {
		t.Fatal(err)
	}
	var h norn.Throughput
	e.must(200, "GET", "/v1/stats/throughput?since=96h", "").decode(t, &h)
	if h.Step.D() != time.Minute || len(h.Points) != 1 || !h.Points[0].Minute.Equal(threeDays) || h.Points[0].Completed != 7 {
		t.Fatalf("4 days by the minute: step %s points %+v", h.Step, h.Points)
	}
	if !h.RecordingSince.Equal(threeDays) {
		t.Fatalf("recording_since %s, want the first stored minute %s", h.RecordingSince, threeDays)
	}
	e.must(200, "GET", "/v1/stats/throughput?since=96h&queue=a", "").decode(t, &h)
	if len(h.Points) != 1 || h.Points[0].Completed != 5 {
		t.Fatalf("queue a: %+v", h.Points)
	}
	e.must(200, "GET", "/v1/stats/throughput?since=720h", "").decode(t, &h)
	if h.Step.D() != time.Hour || len(h.Points) != 2 {
		t.Fatalf("30 days by the hour: step %s points %+v", h.Step, h.Points)
	}
	if p := h.Points[0]; !p.Minute.Equal(tenDays.Truncate(time.Hour)) || p.Failed != 5 {
		t.Fatalf("the hour ten days ago: %+v, want 5 failed at %s", p, tenDays.Truncate(time.Hour))
	}
	// Compacted into hours, the same answer.
	if err := e.store.(norn.ThroughputStore).CompactThroughput(ctx, now.Add(-norn.ThroughputKeep), now.Add(-norn.ThroughputKeepHourly)); err != nil {
		t.Fatal(err)
	}
	var again norn.Throughput
	e.must(200, "GET", "/v1/stats/throughput?since=720h", "").decode(t, &again)
	if len(again.Points) != 2 || again.Points[0] != h.Points[0] || again.Points[1] != h.Points[1] {
		t.Fatalf("after compaction %+v, before %+v", again.Points, h.Points)
	}
}

// TestThroughputKeeperSaves: a save writes the closed minutes since the
// recorder started (the total always, a queue where it counted), and a
// node that counted less lowers nothing.
func TestThroughputKeeperSaves(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(ctx, embedded.Options{Dir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	t0 := time.Date(2030, 3, 4, 10, 0, 30, 0, time.UTC)
	m0 := t0.Truncate(time.Minute)
	clk := &fakeClock{t0}
	tp := newThroughput(clk.now)
	tp.observe(ev(norn.EventSubmitted, "a", t0))
	tp.observe(ev(norn.EventSubmitted, "a", t0))
	clk.t = t0.Add(time.Minute) // minute m0 closed, m0+1 under way
	tp.observe(ev(norn.EventSubmitted, "b", clk.t))
	if err := tp.save(ctx, st, false); err != nil {
		t.Fatal(err)
	}
	got, err := st.LoadThroughput(ctx, nil, m0.Add(-time.Hour), m0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []norn.ThroughputRecord{{Queue: "", Step: time.Minute, At: m0, Submitted: 2}, {Queue: "a", Step: time.Minute, At: m0, Submitted: 2}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("saved %+v, want %+v (the minute under way is not saved yet)", got, want)
	}
	// Another node started late: it saw one submit of m0, and b's.
	late := newThroughput(clk.now)
	late.start = t0
	late.observe(ev(norn.EventSubmitted, "a", t0))
	late.observe(ev(norn.EventSubmitted, "b", clk.t))
	if err := late.save(ctx, st, true); err != nil {
		t.Fatal(err)
	}
	got, _ = st.LoadThroughput(ctx, []string{"a", "b"}, m0.Add(-time.Hour), m0.Add(time.Hour))
	if len(got) != 2 || got[0].Submitted != 2 || got[1].Queue != "b" || !got[1].At.Equal(m0.Add(time.Minute)) {
		t.Fatalf("after the late node's final save: %+v", got)
	}
}
