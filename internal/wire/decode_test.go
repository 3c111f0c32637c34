package wire

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func TestStatusOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code norn.Code
		want int
	}{
		{norn.CodeNotFound, 404},
		{norn.CodeConflict, 409},
		{norn.CodeLeaseLost, 409},
		{norn.CodeCancelled, 409},
		{norn.CodeInvalidArgument, 400},
		{norn.CodeTooLarge, 413},
		{norn.CodeUnauthenticated, 401},
		{norn.CodePermissionDenied, 403},
		{norn.CodeUnavailable, 503},
		{norn.CodeInsufficientStorage, 507},
		{norn.CodeInternal, 500},
		{norn.Code("something-new"), 500},
	}
	for _, c := range cases {
		if got := StatusOf(c.code); got != c.want {
			t.Errorf("StatusOf(%s) = %d, want %d", c.code, got, c.want)
		}
	}
}

func TestToNornError(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		err   error
		code  norn.Code
		field string
	}{
		{"typed", norn.Invalid("queue", "bad"), norn.CodeInvalidArgument, "queue"},
		{"wrapped", errors.Join(errors.New("ctx"), norn.NotFound("x")), norn.CodeNotFound, ""},
		{"max bytes", &http.MaxBytesError{Limit: 10}, norn.CodeTooLarge, "body"},
		{"untyped", errors.New("boom"), norn.CodeInternal, ""},
	}
	for _, c := range cases {
		ne := Classify(c.err)
		if ne.Code != c.code || ne.Field != c.field {
			t.Errorf("%s: got code %s field %q, want %s %q", c.name, ne.Code, ne.Field, c.code, c.field)
		}
	}
	if w := FromError(Classify(errors.New("secret detail"))); strings.Contains(w.Message, "secret") {
		t.Errorf("internal error leaks its cause: %q", w.Message)
	}
}

func TestDecodeNewTask(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		field      string // "" = success
	}{
		{"ok", `{"queue":"q","spec":{"a":1},"priority":5,"labels":{"k":"v"},"timeout":"5s","retry":{"max_retries":2,"base":"1s"}}`, ""},
		{"unknown field", `{"queue":"q","bogus":1}`, "bogus"},
		{"unknown nested", `{"queue":"q","retry":{"max_retries":1,"nope":2}}`, "retry.nope"},
		{"wrong type", `{"queue":5}`, "queue"},
		{"negative priority", `{"queue":"q","priority":-1}`, "priority"},
		{"huge priority", `{"queue":"q","priority":4294967296}`, "priority"},
		{"fraction priority", `{"queue":"q","priority":1.5}`, "priority"},
		{"bad duration", `{"queue":"q","timeout":"soon"}`, "timeout"},
		{"numeric duration", `{"queue":"q","timeout":10}`, "timeout"},
		{"bad nested duration", `{"queue":"q","retry":{"max_retries":1,"base":"x"}}`, "retry.base"},
		{"bad time", `{"queue":"q","run_at":"tomorrow"}`, "run_at"},
		{"label not string", `{"queue":"q","labels":{"k":1}}`, "labels"},
		{"malformed", `{"queue":`, "body"},
		{"not object", `[1,2]`, "body"},
		{"trailing data", `{"queue":"q"} {}`, "body"},
		{"bad spec", `{"queue":"q","spec":{]}`, "body"},
		{"depends wrong type", `{"queue":"q","depends_on":"a"}`, "depends_on"},
	}
	for _, c := range cases {
		var nt norn.NewTask
		err := DecodeStrict([]byte(c.body), &nt, "")
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: unexpected error %v", c.name, err)
			}
			continue
		}
		var ne *norn.Error
		if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != c.field {
			t.Errorf("%s: got %#v, want invalid_argument on %q", c.name, err, c.field)
		}
	}
	var nt norn.NewTask
	if err := DecodeStrict([]byte(`{"queue":"q","spec":{"a":[1,2]},"priority":7,"retry":{"max_retries":3,"base":"2s","max":"1m"}}`), &nt, ""); err != nil {
		t.Fatal(err)
	}
	if nt.Queue != "q" || nt.Priority != 7 || string(nt.Spec) != `{"a":[1,2]}` || nt.Retry == nil ||
		nt.Retry.MaxRetries != 3 || nt.Retry.Base.D() != 2*time.Second || nt.Retry.Max.D() != time.Minute {
		t.Errorf("decoded wrongly: %+v retry %+v", nt, nt.Retry)
	}
}

func TestDecodeEmbeddedStructs(t *testing.T) {
	t.Parallel()
	var op norn.LeaseOp
	body := `{"op":"heartbeat","id":"t1","worker":"w","lease":3,"progress":0.5,"extend":"3s"}`
	if err := DecodeStrict([]byte(body), &op, "ops[0]"); err != nil {
		t.Fatal(err)
	}
	if op.TaskID != "t1" || op.Worker != "w" || op.Lease != 3 || op.Progress == nil || *op.Progress != 0.5 || op.Extend.D() != 3*time.Second {
		t.Errorf("decoded wrongly: %+v", op)
	}
	err := DecodeStrict([]byte(`{"op":"yield","id":"t","worker":"w","lease":"x"}`), &op, "ops[2]")
	var ne *norn.Error
	if !errors.As(err, &ne) || ne.Field != "ops[2].lease" {
		t.Errorf("got %v, want field ops[2].lease", err)
	}
	var tx norn.Txn
	err = DecodeStrict([]byte(`{"update":[{"id":"a","priority":1},{"id":"b","labels":{"x":"y"},"if_version":"z"}]}`), &tx, "")
	if !errors.As(err, &ne) || ne.Field != "update[1].if_version" {
		t.Errorf("got %v, want field update[1].if_version", err)
	}
}

func TestDecodeBatch(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		max        int
		code       norn.Code
		field      string
		n          int
	}{
		{"ok", `{"tasks":[{"queue":"a"},{"queue":"b"}]}`, 10, "", "", 2},
		{"empty", `{"tasks":[]}`, 10, "", "", 0},
		{"missing key", `{}`, 10, norn.CodeInvalidArgument, "tasks", 0},
		{"unknown key", `{"tasks":[],"x":1}`, 10, norn.CodeInvalidArgument, "x", 0},
		{"too many", `{"tasks":[{"queue":"a"},{"queue":"b"},{"queue":"c"}]}`, 2, norn.CodeTooLarge, "tasks", 2},
		{"bad item", `{"tasks":[{"queue":"a"},{"queue":"b","x":1}]}`, 10, norn.CodeInvalidArgument, "tasks[1].x", 1},
		{"not array", `{"tasks":{}}`, 10, norn.CodeInvalidArgument, "tasks", 0},
		{"not object", `[]`, 10, norn.CodeInvalidArgument, "body", 0},
		{"empty body", ``, 10, norn.CodeInvalidArgument, "body", 0},
		{"truncated", `{"tasks":[{"queue":"a"}`, 10, norn.CodeInvalidArgument, "tasks", 1},
		{"trailing", `{"tasks":[]}x`, 10, norn.CodeInvalidArgument, "body", 0},
	}
	for _, c := range cases {
		n := 0
		err := DecodeBatch(strings.NewReader(c.body), "tasks", c.max, func(i int, nt *norn.NewTask) error {
			n++
			return nil
		})
		if c.code == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		} else {
			ne := Classify(err)
			if ne.Code != c.code || ne.Field != c.field {
				t.Errorf("%s: got %v (%s %q), want %s %q", c.name, err, ne.Code, ne.Field, c.code, c.field)
			}
		}
		if n != c.n {
			t.Errorf("%s: %d items seen, want %d", c.name, n, c.n)
		}
	}
}

// countingReader counts what the server read, to prove a limit stopped
// reading early.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestBatchRefusedBeforeBuffering shows a too-long batch is refused after
// reading little more than the limit, not the whole body.
func TestBatchRefusedBeforeBuffering(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	b.WriteString(`{"tasks":[`)
	for i := 0; i < 100000; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"queue":"q"}`)
	}
	b.WriteString(`]}`)
	total := int64(b.Len())
	cr := &countingReader{r: &b}
	err := DecodeBatch(cr, "tasks", 10, func(int, *norn.NewTask) error { return nil })
	if norn.CodeOf(err) != norn.CodeTooLarge {
		t.Fatalf("got %v, want too_large", err)
	}
	if cr.n > total/10 {
		t.Errorf("read %d of %d bytes before refusing", cr.n, total)
	}
}

func TestParseQuery(t *testing.T) {
	t.Parallel()
	ts := "2030-01-02T03:04:05Z"
	cases := []struct {
		name, query string
		field       string
		check       func(q norn.Query) bool
	}{
		{"empty", "", "", func(q norn.Query) bool { return q.Filter.Empty() && q.Limit == 0 }},
		{"queues", "queue=a,b&queue=c", "", func(q norn.Query) bool { return len(q.Queues) == 3 && q.Queues[2] == "c" }},
		{"status alias", "status=pending", "", func(q norn.Query) bool { return len(q.Statuses) == 4 }},
		{"labels", "label=a:1&label=b:x:y", "", func(q norn.Query) bool { return q.Labels["a"] == "1" && q.Labels["b"] == "x:y" }},
		{"times", "created_after=" + ts + "&updated_before=" + ts, "", func(q norn.Query) bool {
			return q.CreatedAfter.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) && !q.UpdatedBefore.IsZero()
		}},
		{"paging", "limit=50&cursor=abc&order=newest&view=summary", "", func(q norn.Query) bool {
			return q.Limit == 50 && q.Cursor == "abc" && q.Order == norn.OrderNewest && q.Summary
		}},
		{"bad queue", "queue=a%20b", "queue", nil},
		{"bad status", "status=done", "status", nil},
		{"bad label", "label=nocolon", "label", nil},
		{"conflicting label", "label=a:1&label=a:2", "label", nil},
		{"bad time", "created_after=yesterday", "created_after", nil},
		{"bad limit", "limit=-1", "limit", nil},
		{"limit too big", "limit=1001", "limit", nil},
		{"limit not a number", "limit=ten", "limit", nil},
		{"bad order", "order=random", "order", nil},
		{"bad view", "view=tiny", "view", nil},
		{"unknown param", "stauts=ready", "stauts", nil},
		{"repeated owner", "owner=a&owner=b", "owner", nil},
	}
	for _, c := range cases {
		v, err := url.ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParseQuery(v, norn.MaxLabels, norn.MaxListLimit)
		if c.field == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if !c.check(q) {
				t.Errorf("%s: parsed wrongly: %+v", c.name, q)
			}
			continue
		}
		var ne *norn.Error
		if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != c.field {
			t.Errorf("%s: got %v, want invalid_argument on %q", c.name, err, c.field)
		}
	}
}

func TestParseSmallParams(t *testing.T) {
	t.Parallel()
	if g, err := ParseGroup(url.Values{"group": {"status,queue"}}); err != nil || !g {
		t.Errorf("group=status,queue: %v %v", g, err)
	}
	if _, err := ParseGroup(url.Values{"group": {"owner"}}); norn.CodeOf(err) != norn.CodeInvalidArgument {
		t.Errorf("group=owner: %v", err)
	}
	if a, l, err := ParseLogParams(url.Values{"after": {"3"}, "limit": {"2"}}); err != nil || a != 3 || l != 2 {
		t.Errorf("log params: %d %d %v", a, l, err)
	}
	if _, _, err := ParseLogParams(url.Values{"after": {"-3"}}); norn.CodeOf(err) != norn.CodeInvalidArgument {
		t.Errorf("after=-3: %v", err)
	}
	if f, err := ParseEventFilter(url.Values{"queue": {"a,b"}, "task": {"t1"}}); err != nil || len(f.Queues) != 2 || f.TaskID != "t1" {
		t.Errorf("event filter: %+v %v", f, err)
	}
	if _, err := ParseEventFilter(url.Values{"task": {"a/b"}}); norn.CodeOf(err) != norn.CodeInvalidArgument {
		t.Errorf("task=a/b: %v", err)
	}
	if ids, err := SplitIDs("a,b,c", 10); err != nil || len(ids) != 3 {
		t.Errorf("SplitIDs: %v %v", ids, err)
	}
	if _, err := SplitIDs("a,,c", 10); norn.CodeOf(err) != norn.CodeInvalidArgument {
		t.Errorf("SplitIDs empty id: %v", err)
	}
	if _, err := SplitIDs("a,b,c", 2); norn.CodeOf(err) != norn.CodeTooLarge {
		t.Errorf("SplitIDs too many: %v", err)
	}
}

// FuzzDecodeNewTask: the single-submit decoder never panics, and whatever
// it accepts re-validates without panicking.
func FuzzDecodeNewTask(f *testing.F) {
	for _, s := range []string{`{"queue":"q"}`, `{"queue":"q","spec":{"a":[1]},"retry":{"max_retries":1,"base":"1s"}}`,
		`{"queue":5}`, `{`, `null`, `{"labels":{"a":"b"},"run_at":"2030-01-01T00:00:00Z"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var nt norn.NewTask
		if err := DecodeStrict(b, &nt, ""); err != nil {
			if norn.CodeOf(err) != norn.CodeInvalidArgument {
				t.Fatalf("decode error is not invalid_argument: %v", err)
			}
			return
		}
		_ = nt.Validate()
	})
}

// FuzzDecodeBatch: the streaming batch decoder never panics and only
// returns typed errors.
func FuzzDecodeBatch(f *testing.F) {
	for _, s := range []string{`{"tasks":[{"queue":"q"}]}`, `{"tasks":null}`, `{"tasks":[1]}`, `{"x":[]}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := DecodeBatch(bytes.NewReader(b), "tasks", 5, func(int, *norn.NewTask) error { return nil })
		if err != nil && norn.CodeOf(err) == norn.CodeInternal {
			t.Fatalf("untyped error: %v", err)
		}
	})
}

// FuzzDecodeBodies runs every other JSON body type through the strict decoder.
func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{`{"submit":[{"queue":"q"}],"update":[{"id":"a","priority":1}],"require":[{"id":"a","version":2}]}`,
		`{"worker":"w","queues":["a"],"n":2,"wait":"1s"}`, `{"paused":true,"retention":{"completed":"1h","aborted":"1h","cancelled":"1h"}}`,
		`{"worker":"w","lease":1,"error":{"code":"c","args":{"x":[1]}}}`, `{"priority":1,"run_at":null,"labels":{}}`,
		`{"id":"b","seal":true,"on_success":{"queue":"q"},"tasks":[{"queue":"q","batch":"b"}]}`,
		`{"worker":"w","lease":2,"tasks":[{"queue":"q"}],"on_child_failure":"continue"}`, `{"name":"go","data":{"k":1}}`,
		`{"worker":"w","lease":1,"until_signal":"go","timeout":"1h"}`, `{"worker":"w","lease":1,"signals_after":3}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		targets := []any{new(norn.Txn), new(norn.ClaimRequest), new(QueueClaimRequest), new(norn.QueueUpdate),
			new(norn.Update), new(HeartbeatRequest), new(AppendLogRequest), new(CompleteRequest), new(FailRequest), new(norn.WorkerInfo),
			new(norn.NewBatch), new(AwaitRequest), new(norn.NewSignal), new(SnoozeRequest)}
		for _, v := range targets {
			if err := DecodeStrict(b, v, ""); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument {
				t.Fatalf("%T: error is not invalid_argument: %v", v, err)
			}
		}
		// What decodes is then validated: never a panic, only
		// invalid_argument (or too_large) naming what is wrong.
		var nb norn.NewBatch
		if DecodeStrict(b, &nb, "") == nil {
			if err := nb.Validate(); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument && norn.CodeOf(err) != norn.CodeTooLarge {
				t.Fatalf("NewBatch.Validate: %v", err)
			}
		}
		var ar AwaitRequest
		if DecodeStrict(b, &ar, "") == nil {
			if err := ar.AwaitRequest.Validate(0); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument && norn.CodeOf(err) != norn.CodeTooLarge {
				t.Fatalf("AwaitRequest.Validate: %v", err)
			}
		}
		var ns norn.NewSignal
		if DecodeStrict(b, &ns, "") == nil {
			if err := ns.Validate(); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument && norn.CodeOf(err) != norn.CodeTooLarge {
				t.Fatalf("NewSignal.Validate: %v", err)
			}
		}
	})
}

// FuzzParseFilter: query parsing never panics and only fails with
// invalid_argument.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{"queue=a&status=pending&label=k:v", "created_after=2030-01-01T00:00:00Z&limit=5",
		"order=newest&view=summary&cursor=x", "label=:", "since=90m&queue=a,b", "since=2030-01-01T00:00:00Z", "limit=99999999999999999999",
		"state=sealed&label=k:v&after=b1&limit=5", "after=18446744073709551615", "batch=b1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := url.ParseQuery(s)
		if err != nil {
			return
		}
		if _, err := ParseQuery(v, norn.MaxLabels, norn.MaxListLimit); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument {
			t.Fatalf("ParseQuery: %v", err)
		}
		if _, err := ParseEventFilter(v); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument {
			t.Fatalf("ParseEventFilter: %v", err)
		}
		if _, _, err := ParseLogParams(v); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument {
			t.Fatalf("ParseLogParams: %v", err)
		}
		if _, _, err := ParseThroughputParams(v, time.Now()); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument {
			t.Fatalf("ParseThroughputParams: %v", err)
		}
		if _, err := ParseBatchQuery(v); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument {
			t.Fatalf("ParseBatchQuery: %v", err)
		}
		if _, err := ParseAfter(v); err != nil && norn.CodeOf(err) != norn.CodeInvalidArgument {
			t.Fatalf("ParseAfter: %v", err)
		}
	})
}
