package norn

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	r := RetryPolicy{MaxRetries: 10, Base: Duration(20 * time.Second), Max: Duration(time.Hour)}
	cases := []struct {
		n    int
		want time.Duration
	}{
		{-1, 20 * time.Second},
		{0, 20 * time.Second},
		{1, 40 * time.Second},
		{2, 80 * time.Second},
		{6, 1280 * time.Second},
		{7, 2560 * time.Second},
		{8, time.Hour}, // 5120s is above the 1h cap
		{100, time.Hour},
		{1 << 30, time.Hour},
	}
	for _, c := range cases {
		if got := r.backoff(c.n); got != c.want {
			t.Errorf("Backoff(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	uncapped := RetryPolicy{Base: Duration(time.Second)}
	if got := uncapped.backoff(200); got <= 0 {
		t.Errorf("uncapped Backoff(200) overflowed to %v", got)
	}
	if got := (RetryPolicy{}).backoff(3); got != 0 {
		t.Errorf("zero policy Backoff = %v, want 0", got)
	}
}

func TestAfterFailure(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	retry := &RetryPolicy{MaxRetries: 2, Base: Duration(10 * time.Second), Max: Duration(15 * time.Second)}
	e := ErrorInfo{Code: "boom", Description: "it broke"}
	cases := []struct {
		name    string
		task    Task
		status  Status
		runAt   time.Time
		history HistoryType
		code    string
	}{
		{"a zero retry policy aborts", Task{Attempts: 1, Retry: &RetryPolicy{}}, StatusAborted, time.Time{}, TaskAbort, "boom"},
		{"first failure retries after base", Task{Attempts: 1, Retry: retry}, StatusScheduled, now.Add(10 * time.Second), TaskRetry, "boom"},
		{"second failure backoff capped", Task{Attempts: 2, Retry: retry}, StatusScheduled, now.Add(15 * time.Second), TaskRetry, "boom"},
		{"retries used up aborts", Task{Attempts: 3, Retry: retry}, StatusAborted, time.Time{}, TaskAbort, "boom"},
		{"max attempts wins over retries", Task{Attempts: 2, MaxAttempts: 2, Retry: retry}, StatusAborted, time.Time{}, TaskAbort, CodeAttemptsExhausted},
		{"zero backoff is ready now", Task{Attempts: 1, Retry: &RetryPolicy{MaxRetries: 1}}, StatusReady, now, TaskRetry, "boom"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := AfterFailure(&c.task, now, e)
			if o.Status != c.status || !o.RunAt.Equal(c.runAt) || o.History != c.history || o.Error.Code != c.code {
				t.Errorf("got %+v", o)
			}
		})
	}
}

func TestAfterTimeout(t *testing.T) {
	t.Parallel()
	now := time.Now()
	if o := AfterTimeout(&Task{Attempts: 1}, now); o.Status != StatusReady || o.History != TaskTimeout || o.Error.Code != CodeTimeout {
		t.Errorf("unlimited: %+v", o)
	}
	if o := AfterTimeout(&Task{Attempts: 3, MaxAttempts: 3}, now); o.Status != StatusAborted || o.Error.Code != CodeAttemptsExhausted {
		t.Errorf("exhausted: %+v", o)
	}
	if o := AfterTimeout(&Task{Attempts: 2, MaxAttempts: 3}, now); o.Status != StatusReady {
		t.Errorf("not yet exhausted: %+v", o)
	}
}

func TestParseStatuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want []Status
		err  bool
	}{
		{"", nil, false},
		{"ready", []Status{StatusReady}, false},
		{"running, ready", []Status{StatusReady, StatusRunning}, false},
		{"pending", []Status{StatusScheduled, StatusBlocked, StatusReady, StatusRunning}, false},
		{"terminal,completed", []Status{StatusCompleted, StatusAborted, StatusCancelled}, false},
		{"succeeded,failed", []Status{StatusCompleted, StatusAborted}, false},
		{"READY", []Status{StatusReady}, false},
		{"done", nil, true},
		{"ready,,", nil, true},
	}
	for _, c := range cases {
		got, err := ParseStatuses(c.in)
		if (err != nil) != c.err {
			t.Errorf("%q: err %v", c.in, err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%q: error %v is not invalid_argument", c.in, err)
			}
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%q: got %v want %v", c.in, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%q: got %v want %v", c.in, got, c.want)
			}
		}
	}
}

func TestFilterMatch(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	task := &Task{ID: "abc-123", Queue: "emails", Status: StatusReady, Owner: "worker-1",
		Labels: map[string]string{"tenant": "x", "env": "prod"}, Created: t0, Updated: t0.Add(time.Minute)}
	cases := []struct {
		name string
		f    Filter
		want bool
	}{
		{"empty", Filter{}, true},
		{"queue", Filter{Queues: []string{"sms", "emails"}}, true},
		{"other queue", Filter{Queues: []string{"sms"}}, false},
		{"status", Filter{Statuses: []Status{StatusReady}}, true},
		{"other status", Filter{Statuses: []Status{StatusRunning}}, false},
		{"label", Filter{Labels: map[string]string{"tenant": "x"}}, true},
		{"two labels", Filter{Labels: map[string]string{"tenant": "x", "env": "prod"}}, true},
		{"label value differs", Filter{Labels: map[string]string{"tenant": "y"}}, false},
		{"label missing", Filter{Labels: map[string]string{"region": "eu"}}, false},
		{"owner", Filter{Owner: "worker-1"}, true},
		{"other owner", Filter{Owner: "worker-2"}, false},
		{"id contains", Filter{IDContains: "c-1"}, true},
		{"id not contained", Filter{IDContains: "zz"}, false},
		{"created after (exclusive)", Filter{CreatedAfter: t0}, false},
		{"created after earlier", Filter{CreatedAfter: t0.Add(-time.Second)}, true},
		{"created before (exclusive)", Filter{CreatedBefore: t0}, false},
		{"updated window", Filter{UpdatedAfter: t0, UpdatedBefore: t0.Add(2 * time.Minute)}, true},
		{"updated before", Filter{UpdatedBefore: t0.Add(time.Minute)}, false},
	}
	for _, c := range cases {
		if got := c.f.Match(task); got != c.want {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.want)
		}
		if c.name == "empty" != c.f.Empty() {
			t.Errorf("%s: Empty() = %v", c.name, c.f.Empty())
		}
	}
}

func TestNewTaskValidate(t *testing.T) {
	t.Parallel()
	neg := -1
	cases := []struct {
		name  string
		task  NewTask
		field string
		code  Code
	}{
		{"ok", NewTask{Queue: "q", Spec: json.RawMessage(`{"a":1}`)}, "", ""},
		{"no queue", NewTask{}, "queue", CodeInvalidArgument},
		{"bad queue", NewTask{Queue: "a b"}, "queue", CodeInvalidArgument},
		{"long queue", NewTask{Queue: strings.Repeat("q", 129)}, "queue", CodeInvalidArgument},
		{"bad spec", NewTask{Queue: "q", Spec: json.RawMessage(`{`)}, "spec", CodeInvalidArgument},
		{"big spec", NewTask{Queue: "q", Spec: json.RawMessage(`"` + strings.Repeat("x", MaxSpecBytes) + `"`)}, "spec", CodeTooLarge},
		{"bad id", NewTask{ID: "a/b", Queue: "q"}, "id", CodeInvalidArgument},
		{"reserved id", NewTask{ID: "count", Queue: "q"}, "id", CodeInvalidArgument},
		{"long id", NewTask{ID: strings.Repeat("i", 129), Queue: "q"}, "id", CodeInvalidArgument},
		{"negative max attempts", NewTask{Queue: "q", MaxAttempts: &neg}, "max_attempts", CodeInvalidArgument},
		{"self dependency", NewTask{ID: "a", Queue: "q", DependsOn: []string{"a"}}, "depends_on[0]", CodeInvalidArgument},
		{"duplicate dependency", NewTask{Queue: "q", DependsOn: []string{"x", "x"}}, "depends_on[1]", CodeInvalidArgument},
		{"retry base above max", NewTask{Queue: "q", Retry: &RetryPolicy{MaxRetries: 1, Base: Duration(time.Hour), Max: Duration(time.Second)}}, "retry.base", CodeInvalidArgument},
		{"unknown retry jitter", NewTask{Queue: "q", Retry: &RetryPolicy{MaxRetries: 1, Jitter: "random"}}, "retry.jitter", CodeInvalidArgument},
		{"label key with colon", NewTask{Queue: "q", Labels: map[string]string{"a:b": "c"}}, "labels", CodeInvalidArgument},
	}
	for _, c := range cases {
		err := c.task.Validate()
		if c.code == "" {
			if err != nil {
				t.Errorf("%s: unexpected %v", c.name, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != c.code || e.Field != c.field {
			t.Errorf("%s: got %v (%#v), want %s on %q", c.name, err, e, c.code, c.field)
		}
	}
}

func TestValidateBatchNamesIndex(t *testing.T) {
	t.Parallel()
	err := ValidateBatch("tasks", []NewTask{{Queue: "q"}, {Queue: "q"}, {Queue: ""}})
	var e *Error
	if !errors.As(err, &e) || e.Field != "tasks[2].queue" {
		t.Fatalf("got %v", err)
	}
	err = ValidateBatch("tasks", []NewTask{{ID: "a", Queue: "q"}, {ID: "a", Queue: "q"}})
	if !errors.As(err, &e) || e.Field != "tasks[1].id" {
		t.Fatalf("duplicate ids: got %v", err)
	}
}

func TestErrorIsByCode(t *testing.T) {
	t.Parallel()
	err := error(LeaseLost("t1", 3))
	wrapped := errors.Join(errors.New("context"), err)
	if !errors.Is(wrapped, ErrLeaseLost) || errors.Is(wrapped, ErrCancelled) {
		t.Fatal("errors.Is must match by code")
	}
	if CodeOf(wrapped) != CodeLeaseLost || CodeOf(errors.New("x")) != CodeInternal || CodeOf(nil) != "" {
		t.Fatal("CodeOf")
	}
	if !errors.Is(ErrClosed, ErrUnavailable) {
		t.Fatal("ErrClosed must be unavailable")
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	var d Duration
	if err := json.Unmarshal([]byte(`"1m30s"`), &d); err != nil || d.D() != 90*time.Second {
		t.Fatalf("parse: %v %v", d, err)
	}
	b, _ := json.Marshal(Duration(10 * time.Second))
	if string(b) != `"10s"` {
		t.Fatalf("marshal: %s", b)
	}
	for _, bad := range []string{`10`, `"ten"`, `"-1s"`, `null x`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestTaskCloneIsDeep(t *testing.T) {
	t.Parallel()
	orig := &Task{ID: "a", Labels: map[string]string{"k": "v"}, Spec: json.RawMessage(`{}`),
		DependsOn: []string{"b"}, Retry: &RetryPolicy{MaxRetries: 1}, History: []HistoryEntry{{Type: TaskRelease}}}
	c := orig.Clone()
	c.Labels["k"] = "w"
	c.Spec[0] = '['
	c.DependsOn[0] = "z"
	c.Retry.MaxRetries = 9
	c.History[0].Type = TaskAbort
	if orig.Labels["k"] != "v" || orig.Spec[0] != '{' || orig.DependsOn[0] != "b" || orig.Retry.MaxRetries != 1 || orig.History[0].Type != TaskRelease {
		t.Fatal("Clone shares memory with the original")
	}
	s := orig.Summary()
	if s.Spec != nil || s.History != nil || s.ID != "a" {
		t.Fatal("Summary must drop spec and history")
	}
}

func FuzzDurationJSON(f *testing.F) {
	for _, s := range []string{`"10s"`, `"1h2m3.5s"`, `"-1s"`, `10`, `""`, `"9999999999h"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		var d Duration
		if err := json.Unmarshal([]byte(in), &d); err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("accepted negative duration %v from %q", d, in)
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		var back Duration
		if err := json.Unmarshal(b, &back); err != nil || back != d {
			t.Fatalf("round trip %q -> %s -> %v (%v)", in, b, back, err)
		}
	})
}

func FuzzParseStatuses(f *testing.F) {
	for _, s := range []string{"ready", "pending,terminal", " Running ", "bogus", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := ParseStatuses(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("non-typed error %v", err)
			}
			return
		}
		seen := map[Status]bool{}
		for _, s := range got {
			if !s.Valid() || seen[s] {
				t.Fatalf("%q gave invalid or duplicate status %q in %v", in, s, got)
			}
			seen[s] = true
		}
	})
}

func FuzzNewTaskValidate(f *testing.F) {
	f.Add(`{"queue":"q","spec":{"a":1}}`)
	f.Add(`{"id":"x","queue":"q","depends_on":["y","y"]}`)
	f.Add(`{"queue":"q","retry":{"max_retries":3,"base":"1s","max":"1m"}}`)
	f.Fuzz(func(t *testing.T, in string) {
		var n NewTask
		if err := json.Unmarshal([]byte(in), &n); err != nil {
			return
		}
		err := n.Validate()
		if err == nil {
			if !ValidQueueName(n.Queue) {
				t.Fatalf("accepted bad queue %q", n.Queue)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) || e.Field == "" {
			t.Fatalf("validation error without a field: %v", err)
		}
	})
}
