package kafka

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nornq/norn"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestParseDeadline(t *testing.T) {
	t.Parallel()
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		in   string
		want time.Time // zero: must fail
	}{
		{"2022-12-01T11:09:01.123", utc("2022-12-01T11:09:01.123Z")}, // Chronos' example: no zone = UTC
		{"2022-12-01T11:09:01", utc("2022-12-01T11:09:01Z")},
		{"2022-12-01T11:09:01Z", utc("2022-12-01T11:09:01Z")},
		{"2022-12-01T11:09:01.123456789Z", utc("2022-12-01T11:09:01.123456789Z")},
		{"2022-12-01T13:09:01.5+02:00", utc("2022-12-01T11:09:01.5Z")},
		{"2022-12-01T06:09:01-05:00", utc("2022-12-01T11:09:01Z")},
		{"2022-12-01t11:09:01z", utc("2022-12-01T11:09:01Z")},
		{"", time.Time{}},
		{"tomorrow", time.Time{}},
		{"2022-12-01", time.Time{}},
		{"2022-12-01 11:09:01", time.Time{}},
		{"2022-13-01T11:09:01", time.Time{}},
		{"2022-12-01T25:09:01Z", time.Time{}},
		{"2022-12-01T11:09:01+25:00", time.Time{}},
		{"1669892941", time.Time{}},
		{"2022-12-01T11:09:01.123 ", time.Time{}},
		{"2022-12-01T11:09:01Zjunk", time.Time{}},
	}
	for _, tt := range tests {
		got, err := ParseDeadline(tt.in)
		if tt.want.IsZero() {
			if err == nil {
				t.Errorf("ParseDeadline(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !got.Equal(tt.want) {
			t.Errorf("ParseDeadline(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseRecord(t *testing.T) {
	t.Parallel()
	h := func(kv ...string) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			out = append(out, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	tests := []struct {
		name    string
		headers []kgo.RecordHeader
		reason  string // "" = valid
		keep    []string
	}{
		{"valid", h("a", "1", HeaderMessageID, "x", HeaderDeadline, "2022-12-01T11:09:01", "b", "2"), "", []string{"a", "b"}},
		{"no id", h(HeaderDeadline, "2022-12-01T11:09:01"), reasonMissingID, nil},
		{"empty id", h(HeaderMessageID, "", HeaderDeadline, "2022-12-01T11:09:01"), reasonMissingID, nil},
		{"no deadline", h(HeaderMessageID, "x"), reasonMissingDeadline, nil},
		{"bad deadline", h(HeaderMessageID, "x", HeaderDeadline, "soon"), reasonBadDeadline, nil},
		{"no headers", nil, reasonMissingID, nil},
		{"repeated chronos headers are stripped", h(HeaderMessageID, "x", HeaderDeadline, "2022-12-01T11:09:01Z",
			HeaderMessageID, "y", HeaderDeadline, "junk"), "", nil},
		{"header names are case-sensitive", h("chronosmessageid", "x", HeaderDeadline, "2022-12-01T11:09:01Z"), reasonMissingID, nil},
	}
	for _, tt := range tests {
		m, err := parseRecord(&kgo.Record{Headers: tt.headers, Value: []byte("v")})
		if tt.reason != "" {
			ie, ok := err.(*invalidError)
			if !ok || ie.reason != tt.reason {
				t.Errorf("%s: err = %v, want reason %s", tt.name, err, tt.reason)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if m.ID != "x" {
			t.Errorf("%s: id %q, want the first occurrence x", tt.name, m.ID)
		}
		var keys []string
		for _, hh := range m.Headers {
			keys = append(keys, hh.Key)
		}
		if strings.Join(keys, ",") != strings.Join(tt.keep, ",") {
			t.Errorf("%s: kept headers %v, want %v", tt.name, keys, tt.keep)
		}
	}
}

func TestTaskID(t *testing.T) {
	t.Parallel()
	const q = "norn.kafka-delay"
	long := strings.Repeat("é", 100) // 200 bytes: too long for a norn id
	tests := []struct {
		queue, in, want string
	}{
		{q, "3767d5c7-aced-45e5-91f1-3f7ad8205a3f", q + "~3767d5c7-aced-45e5-91f1-3f7ad8205a3f"},
		{q, "order:42", q + "~order:42"},
		{q, "order-42", q + "~order-42"},
		{"other", "order-42", "other~order-42"}, // another deployment's namespace
		{q, "a/b", q + "~~bYS9i"},
		{q, "with space", q + "~~bd2l0aCBzcGFjZQ"},
		{q, "~bYS9i", q + "~~bfmJZUzlp"}, // an id that looks encoded is encoded itself
		{q, "\xff", q + "~~b_w"},
		{q, "count", q + "~count"},                                        // reserved as a whole id, fine after the prefix
		{q, strings.Repeat("x", 111), q + "~" + strings.Repeat("x", 111)}, // exactly 128 bytes
		{q, strings.Repeat("x", 112), ""},                                 // too long after the prefix: encoded
		{q, long, ""},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got := TaskID(tt.queue, tt.in)
		if tt.want != "" && got != tt.want {
			t.Errorf("TaskID(%q, %q) = %q, want %q", tt.queue, tt.in, got, tt.want)
		}
		if err := norn.ValidateID("id", got); err != nil {
			t.Errorf("TaskID(%q, %q) = %q is not a valid norn id: %v", tt.queue, tt.in, got, err)
		}
		if !strings.HasPrefix(got, tt.queue+"~") {
			t.Errorf("TaskID(%q, %q) = %q is outside the queue's namespace", tt.queue, tt.in, got)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("TaskID(%q) = TaskID(%q) = %q", tt.in, prev, got)
		}
		seen[got] = tt.in
	}
	if got := TaskID(q, long); !strings.HasPrefix(got, q+"~~h") {
		t.Errorf("TaskID(long) = %q, want a hash", got)
	}
	if got := TaskID(q, strings.Repeat("x", 112)); !strings.HasPrefix(got, q+"~~h") {
		t.Errorf("TaskID(112 bytes) = %q, want a hash", got)
	}
	// The longest queue the configuration accepts still yields valid ids.
	maxQ := strings.Repeat("q", MaxQueueLength)
	for _, in := range []string{"a", long, strings.Repeat("z", 128)} {
		if got := TaskID(maxQ, in); norn.ValidateID("id", got) != nil {
			t.Errorf("TaskID(max queue, %q) = %q is not a valid id", in, got)
		}
	}
}

func TestSpecRoundTrip(t *testing.T) {
	t.Parallel()
	dl := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, m := range []*message{
		{ID: "a", Deadline: dl, Key: nil, Value: nil},
		{ID: "b", Deadline: dl, Key: []byte{}, Value: []byte{}},
		{ID: "c/d", Deadline: dl, Key: []byte{0, 0xff}, Value: []byte("\x00\x01{not json"),
			Headers: []kgo.RecordHeader{{Key: "t", Value: []byte("v")}, {Key: "\xff\xfe", Value: nil}, {Key: "e", Value: []byte{}}}},
	} {
		raw, err := encodeSpec(m, "in", 2, 42)
		if err != nil {
			t.Fatalf("%s: %v", m.ID, err)
		}
		got, err := decodeSpec(raw)
		if err != nil {
			t.Fatalf("%s: %v", m.ID, err)
		}
		sameBytes(t, m.ID+" key", got.Key, m.Key)
		sameBytes(t, m.ID+" value", got.Value, m.Value)
		if got.ID != m.ID || !got.Deadline.Equal(m.Deadline) || len(got.Headers) != len(m.Headers) {
			t.Fatalf("%s: decoded %+v, want %+v", m.ID, got, m)
		}
		for i := range m.Headers {
			if got.Headers[i].Key != m.Headers[i].Key {
				t.Errorf("%s: header %d key %q, want %q", m.ID, i, got.Headers[i].Key, m.Headers[i].Key)
			}
			sameBytes(t, m.ID+" header", got.Headers[i].Value, m.Headers[i].Value)
		}
	}
	big := &message{ID: "big", Deadline: dl, Value: make([]byte, norn.MaxSpecBytes)}
	if _, err := encodeSpec(big, "in", 0, 0); err == nil {
		t.Errorf("a value larger than the spec limit was accepted")
	}
	for _, bad := range []string{`{}`, `{"v":2,"message_id":"x"}`, `{"v":1}`, `[]`, `{"v":1,"message_id":"x","key":"!!"}`} {
		if _, err := decodeSpec([]byte(bad)); err == nil {
			t.Errorf("decodeSpec(%s) accepted a bad spec", bad)
		}
	}
}

// sameBytes compares byte slices including null versus empty, which Kafka distinguishes.
func sameBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
		t.Errorf("%s: %q (nil %v), want %q (nil %v)", what, got, got == nil, want, want == nil)
	}
}

func FuzzParseDeadline(f *testing.F) {
	for _, s := range []string{"2022-12-01T11:09:01.123", "2022-12-01T11:09:01Z", "2022-12-01T13:09:01.5+02:00", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDeadline(s)
		if err != nil {
			return
		}
		// Anything accepted is a real RFC 3339 time: formatting it in its
		// own zone and parsing again gives the same instant.
		again, err := ParseDeadline(d.Format(time.RFC3339Nano))
		if err != nil || !again.Equal(d) {
			t.Fatalf("ParseDeadline(%q) = %v does not round-trip: %v, %v", s, d, again, err)
		}
	})
}

func FuzzParseRecord(f *testing.F) {
	f.Add("3767d5c7", "2022-12-01T11:09:01.123", "trace", []byte("v"), []byte("k"))
	f.Add("", "", "", []byte(nil), []byte(nil))
	f.Add("a/b c", "2022-12-01T11:09:01+01:00", "\xff", []byte{0xff}, []byte{})
	f.Fuzz(func(t *testing.T, id, deadline, extra string, value, key []byte) {
		r := &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{
			{Key: HeaderMessageID, Value: []byte(id)}, {Key: extra, Value: value}, {Key: HeaderDeadline, Value: []byte(deadline)},
		}}
		m, err := parseRecord(r)
		if err != nil {
			if _, ok := err.(*invalidError); !ok {
				t.Fatalf("error %v is not an invalidError", err)
			}
			return
		}
		tid := TaskID(DefaultQueue, m.ID)
		if err := norn.ValidateID("id", tid); err != nil {
			t.Fatalf("TaskID(%q) = %q: %v", m.ID, tid, err)
		}
		raw, err := encodeSpec(m, "in", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeSpec(raw)
		if err != nil {
			t.Fatal(err)
		}
		if back.ID != m.ID && utf8.ValidString(m.ID) {
			t.Fatalf("id %q came back as %q", m.ID, back.ID)
		}
		sameBytes(t, "value", back.Value, m.Value)
		sameBytes(t, "key", back.Key, m.Key)
		for _, h := range back.Headers {
			if h.Key == HeaderMessageID || h.Key == HeaderDeadline {
				t.Fatalf("Chronos header %q relayed", h.Key)
			}
		}
	})
}

func FuzzDecodeSpec(f *testing.F) {
	raw, _ := encodeSpec(&message{ID: "x", Value: []byte("v")}, "in", 0, 0)
	f.Add([]byte(raw))
	f.Add([]byte(`{"v":1,"message_id":"x","headers":[{"key_b64":"/w==","value":null}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeSpec(b)
		if err != nil {
			return
		}
		if m.ID == "" {
			t.Fatal("decoded a message without an id")
		}
		_ = m.record("out")
	})
}
