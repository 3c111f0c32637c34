package embedded

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func TestTaskKeysSortByID(t *testing.T) {
	t.Parallel()
	// Every key of "ab" sorts before every key of "ab!" and "abc", whatever
	// the suffix: a scan in key order is a scan in id order.
	ids := []string{"a", "ab", "ab!", "abc", "b"}
	for i := 0; i+1 < len(ids); i++ {
		last := taskSeqKey(ids[i], sufResult, 1<<63)
		first := taskKey(ids[i+1], sufImmutable)
		if bytes.Compare(last, first) >= 0 || bytes.Compare(taskEnd(ids[i]), first) > 0 {
			t.Errorf("keys of %q do not all sort before %q", ids[i], ids[i+1])
		}
	}
	id, suf, ok := splitTaskKey(taskSeqKey("x-1", sufHistory, 7))
	if !ok || id != "x-1" || suf[0] != sufHistory {
		t.Fatalf("splitTaskKey: %q %q %v", id, suf, ok)
	}
}

func TestRecordsRoundTrip(t *testing.T) {
	t.Parallel()
	st := state{status: stRunning, priority: 7, progress: 0.25, updated: 1, runAt: 2, deadline: 3, readyAt: 4,
		endedAt: 5, started: 6, owner: "worker-1", lease: 9, attempts: 3, version: 11, histNext: 12, logNext: 13, errN: 2,
		implied: impAll}
	got, err := decodeState(st.encode(nil))
	if err != nil || got != st {
		t.Fatalf("state round trip: %+v, %v", got, err)
	}
	if !storedImplied(st.encode(nil)) {
		t.Fatal("storedImplied misses the implied entries")
	}
	// More implied entries than the history has, or unknown bits: corrupt.
	for _, bad := range []state{{implied: impAssign}, {implied: impAll, histNext: 1}, {implied: 4, histNext: 5}} {
		if _, err := decodeState(bad.encode(nil)); err == nil {
			t.Fatalf("state %+v decoded", bad)
		}
	}
	im := immutable{queue: "q", created: 99, maxAttempts: 3, timeout: int64(time.Second), maxRuntime: int64(time.Minute),
		retry: &norn.RetryPolicy{MaxRetries: 2, Base: norn.Duration(time.Second), Jitter: norn.JitterFull}, expires: 1_900_000_000_123_456_789, uniqueKey: "user-42",
		deps: []string{"a", "b"}, spec: []byte(`{"x":1}`), key: "tenant-7", labels: map[string]string{"k": "v"}, st: st,
		traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate: "congo=t61rcWkgMzE"}
	gim, err := decodeImmutable(im.encode(nil), true, true)
	if err != nil || !reflect.DeepEqual(gim, im) {
		t.Fatalf("immutable round trip:\n%+v\n%+v\n%v", gim, im, err)
	}
	min, err := decodeImmutable(im.encode(nil), false, false)
	// Recovery keeps the retry policy whole: the in-memory task decides
	// the next fail's wait from it.
	if err != nil || min.spec != nil || min.labels != nil || min.traceparent != "" || min.st != st || min.queue != "q" ||
		!reflect.DeepEqual(min.retry, im.retry) || min.expires != im.expires {
		t.Fatalf("minimal decode: %+v %v", min, err)
	}
	h := norn.HistoryEntry{Type: norn.TaskAbort, Time: time.Unix(5, 6).UTC(), Worker: "w", Lease: 2, Progress: 0.5,
		Error: &norn.ErrorInfo{Code: "x", Description: "y"}}
	gh, err := decodeHistory(encodeHistory(h))
	if err != nil || !reflect.DeepEqual(gh, h) {
		t.Fatalf("history round trip: %+v %v", gh, err)
	}
	l := norn.LogEntry{Seq: 4, Lease: 2, Time: time.Unix(7, 0).UTC(), Data: json.RawMessage(`[1]`)}
	gl, err := decodeLog(4, encodeLog(l))
	if err != nil || !reflect.DeepEqual(gl, l) {
		t.Fatalf("log round trip: %+v %v", gl, err)
	}
}

// legacyState writes st as state record version 1 did (no started).
func legacyState(st state) []byte {
	e := enc{b: []byte{1, st.status}}
	e.u(uint64(st.priority))
	e.f(st.progress)
	e.i(st.updated)
	e.i(st.runAt)
	e.i(st.deadline)
	e.i(st.readyAt)
	e.i(st.endedAt)
	e.s(st.owner)
	e.u(st.lease)
	e.i(int64(st.attempts))
	e.u(st.version)
	e.u(st.histNext)
	e.u(st.logNext)
	e.u(uint64(st.errN))
	return e.b
}

// legacyImmutable writes im as immutable record version v (2: before unique
// keys, 3: before concurrency keys, 4: before max runtimes, 5: before the
// optional fields) did, with a
// version 1 state inside.
func legacyImmutable(v byte, im immutable) []byte {
	e := enc{b: []byte{v}}
	e.s(im.queue)
	e.i(im.created)
	e.i(im.maxAttempts)
	e.i(im.timeout)
	if v >= 5 {
		e.i(im.maxRuntime)
	}
	if im.retry != nil {
		e.b = append(e.b, 1)
		e.i(int64(im.retry.MaxRetries))
		e.i(int64(im.retry.Base))
		e.i(int64(im.retry.Max))
	} else {
		e.b = append(e.b, 0)
	}
	if v >= 3 {
		e.s(im.uniqueKey)
	}
	e.u(uint64(len(im.deps)))
	for _, d := range im.deps {
		e.s(d)
	}
	e.b = append(e.b, 1)
	e.by(im.spec)
	if v >= 4 {
		e.s(im.key)
	}
	e.b = appendLabels(e.b, im.labels)
	return append(e.b, legacyState(im.st)...)
}

// Records written by earlier versions of the store still decode, the
// fields they did not have reading as zero.
func TestOlderRecordsDecode(t *testing.T) {
	t.Parallel()
	st := state{status: stReady, priority: 7, updated: 1, runAt: 2, readyAt: 4, owner: "w", lease: 2, version: 3}
	got, err := decodeState(legacyState(st))
	if err != nil || got != st {
		t.Fatalf("state version 1: %+v, %v", got, err)
	}
	// Version 2: version 3 without the implied entries' byte.
	st2 := st
	st2.started = 6
	v3 := st2.encode(nil)
	got, err = decodeState(append([]byte{2, v3[1]}, v3[3:]...))
	if err != nil || got != st2 || storedImplied(append([]byte{2, v3[1]}, v3[3:]...)) {
		t.Fatalf("state version 2: %+v, %v", got, err)
	}
	for _, c := range []struct {
		v                  byte
		uniqueKey, flowKey string
		maxRuntime         int64
	}{{2, "", "", 0}, {3, "user-42", "", 0}, {4, "user-42", "tenant-7", 0}, {5, "user-42", "tenant-7", 60}} {
		im := immutable{queue: "q", created: 99, maxAttempts: 3, timeout: 5, maxRuntime: c.maxRuntime, retry: &norn.RetryPolicy{MaxRetries: 1},
			uniqueKey: c.uniqueKey, deps: []string{"a"}, spec: []byte(`{"x":1}`), key: c.flowKey,
			labels: map[string]string{"k": "v"}, st: st}
		gim, err := decodeImmutable(legacyImmutable(c.v, im), true, true)
		if err != nil || !reflect.DeepEqual(gim, im) {
			t.Fatalf("immutable version %d:\n%+v\n%+v\n%v", c.v, gim, im, err)
		}
	}
}

// Optional fields of tags this version does not know (written by a newer
// one) are skipped.
func TestImmutableSkipsUnknownOptionalFields(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	im := immutable{queue: "q", created: 5, spec: []byte(`1`), labels: map[string]string{"k": "v"},
		st: state{status: stReady, version: 1}, traceparent: tp}
	rec := im.encode(nil)
	known := enc{}
	known.u(1)
	known.u(optTraceparent)
	known.s(tp)
	at := bytes.Index(rec, known.b)
	if at < 0 {
		t.Fatal("layout assumption broken: optional fields not found")
	}
	future := enc{}
	future.u(2)
	future.u(99)
	future.s("from a later version")
	future.u(optTraceparent)
	future.s(tp)
	spliced := append(append(append([]byte(nil), rec[:at]...), future.b...), rec[at+len(known.b):]...)
	got, err := decodeImmutable(spliced, true, true)
	if err != nil || !reflect.DeepEqual(got, im) {
		t.Fatalf("record with an unknown optional field:\n%+v\n%+v\n%v", got, im, err)
	}
}

// Decoders of disk records must reject garbage with an error, never panic.
func FuzzDecodeRecords(f *testing.F) {
	st := state{status: stReady, owner: "w"}
	im := immutable{queue: "q", deps: []string{"d"}, spec: []byte(`1`), st: st}
	f.Add(st.encode(nil))
	f.Add((&state{status: stCompleted, owner: "w", lease: 1, histNext: 2, implied: impAll}).encode(nil))
	f.Add(im.encode(nil))
	im.traceparent, im.tracestate = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=b"
	f.Add(im.encode(nil))
	f.Add(encodeHistory(norn.HistoryEntry{Type: norn.TaskRetry}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decodeState(b)
		_, _ = decodeImmutable(b, true, true)
		_, _ = decodeImmutable(b, false, false)
		_, _ = decodeHistory(b)
		_, _ = decodeLog(1, b)
		_, _ = decodeLabels(b)
	})
}

// Cursors come from clients: anything malformed is invalid_argument on
// field "cursor"; a valid one round-trips.
func FuzzCursor(f *testing.F) {
	f.Add("", "x")
	f.Add("priority", encodeCursor(norn.OrderPriority, prioKey{3, "id"}.cursor()))
	f.Add("newest", encodeCursor(norn.OrderNewest, []byte("abc")))
	f.Add("", "!!!")
	f.Fuzz(func(t *testing.T, order, c string) {
		o := norn.Order(order)
		pos, err := decodeCursor(o, c)
		if err != nil {
			var ne *norn.Error
			if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != "cursor" {
				t.Fatalf("decodeCursor(%q) error %v is not invalid_argument on cursor", c, err)
			}
			return
		}
		if encodeCursor(o, pos) != c {
			t.Fatalf("cursor %q does not round-trip", c)
		}
	})
}

func TestListRejectsBadCursor(t *testing.T) {
	t.Parallel()
	s := newTestStore(t, Options{})
	for _, c := range []string{"nope!", encodeCursor(norn.OrderNewest, []byte("x"))} {
		_, err := s.List(bg, norn.Query{Cursor: c})
		var ne *norn.Error
		if !errors.As(err, &ne) || ne.Field != "cursor" {
			t.Errorf("List with cursor %q: %v", c, err)
		}
	}
}
