package norn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

func TestInitial(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	deps := map[string]Status{"done": StatusCompleted, "run": StatusRunning, "ab": StatusAborted, "ca": StatusCancelled}
	dep := func(id string) Status { return deps[id] }
	three := 3
	qRetry := &RetryPolicy{MaxRetries: 2, Base: Duration(time.Second)}
	queue := QueueDefaults{Timeout: Duration(time.Minute), MaxAttempts: 5, Retry: qRetry}
	cases := []struct {
		name string
		n    NewTask
		qd   QueueDefaults
		want Initial
	}{
		{"queue defaults", NewTask{}, queue,
			Initial{Status: StatusReady, RunAt: now, Timeout: Duration(time.Minute), MaxAttempts: 5, Retry: qRetry}},
		{"zero queue timeout falls back to the default", NewTask{}, QueueDefaults{},
			Initial{Status: StatusReady, RunAt: now, Timeout: Duration(DefaultTimeout)}},
		{"own settings win", NewTask{Timeout: Duration(time.Second), MaxAttempts: &three, Retry: &RetryPolicy{}}, queue,
			Initial{Status: StatusReady, RunAt: now, Timeout: Duration(time.Second), MaxAttempts: 3, Retry: &RetryPolicy{}}},
		{"delay", NewTask{Delay: Duration(time.Hour)}, QueueDefaults{},
			Initial{Status: StatusScheduled, RunAt: now.Add(time.Hour), Timeout: Duration(DefaultTimeout)}},
		{"run_at wins over delay", NewTask{RunAt: now.Add(time.Minute), Delay: Duration(time.Hour)}, QueueDefaults{},
			Initial{Status: StatusScheduled, RunAt: now.Add(time.Minute), Timeout: Duration(DefaultTimeout)}},
		{"past run_at is ready", NewTask{RunAt: now.Add(-time.Minute)}, QueueDefaults{},
			Initial{Status: StatusReady, RunAt: now.Add(-time.Minute), Timeout: Duration(DefaultTimeout)}},
		{"completed dependency does not block", NewTask{DependsOn: []string{"done"}}, QueueDefaults{},
			Initial{Status: StatusReady, RunAt: now, Timeout: Duration(DefaultTimeout), EndedDeps: []string{"done"}}},
		{"pending dependencies block", NewTask{DependsOn: []string{"done", "run"}, Delay: Duration(time.Hour)}, QueueDefaults{},
			Initial{Status: StatusBlocked, RunAt: now.Add(time.Hour), Timeout: Duration(DefaultTimeout), PendingDeps: 1, EndedDeps: []string{"done"}}},
		{"with run, failed dependencies count as ended", NewTask{DependsOn: []string{"run", "ca", "ab", "done"}, OnDependencyFailure: DependencyRun}, QueueDefaults{},
			Initial{Status: StatusBlocked, RunAt: now, Timeout: Duration(DefaultTimeout), PendingDeps: 1, EndedDeps: []string{"ca", "ab", "done"}}},
		{"failed dependency aborts", NewTask{DependsOn: []string{"run", "ca", "ab"}}, QueueDefaults{},
			Initial{Status: StatusAborted, RunAt: now, Timeout: Duration(DefaultTimeout),
				Error: &ErrorInfo{Code: CodeDependencyFailed, Description: "dependency ca is cancelled"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.n.Initial(now, &c.qd, dep)
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(c.want)
			if string(g) != string(w) {
				t.Fatalf("got  %s\nwant %s", g, w)
			}
			if got.Retry != nil && (got.Retry == c.n.Retry || got.Retry == c.qd.Retry) {
				t.Fatal("Retry is shared with the input, want a copy")
			}
		})
	}
}

func TestOrderBatch(t *testing.T) {
	t.Parallel()
	stored := map[string]bool{"old": true, "dup": true}
	exists := func(id string) bool { return stored[id] }
	task := func(id string, deps ...string) NewTask { return NewTask{ID: id, Queue: "q", DependsOn: deps} }
	cases := []struct {
		name    string
		tasks   []NewTask
		dup     []bool
		want    string
		wantErr string
	}{
		{"no dependencies keeps batch order", []NewTask{task("a"), task("b")}, nil, "[0 1]", ""},
		{"duplicates are not inserted", []NewTask{task("a"), task("dup")}, []bool{false, true}, "[0]", ""},
		{"dependency later in the batch goes first", []NewTask{task("a", "b"), task("b", "old")}, nil, "[1 0]", ""},
		{"dependency on a duplicate is a stored one", []NewTask{task("a", "dup"), task("dup")}, []bool{false, true}, "[0]", ""},
		{"unknown dependency", []NewTask{task("a"), task("b", "a", "nope")}, nil, "",
			`tasks[1].depends_on[1]: dependency "nope" does not exist`},
		{"cycle", []NewTask{task("a", "c"), task("b", "a"), task("c", "b"), task("d")}, nil, "",
			`tasks[0].depends_on[0]: dependency cycle through "c"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ids := make([]string, len(c.tasks))
			for i := range c.tasks {
				ids[i] = c.tasks[i].ID
			}
			got, err := OrderBatch("tasks", c.tasks, ids, c.dup, exists)
			if c.wantErr != "" {
				if err == nil || err.Error() != c.wantErr || !errors.Is(err, ErrInvalidArgument) {
					t.Fatalf("err %v, want %s", err, c.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != c.want {
				t.Fatalf("order %v, %v; want %s", got, err, c.want)
			}
		})
	}
}

func TestHeartbeatDeadline(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	claimed := now.Add(-10 * time.Second)
	cases := []struct {
		name              string
		updated, deadline time.Time
		extend            time.Duration
		limit             time.Time
		want              time.Time
		lost              bool
	}{
		{"keeps the granted length", claimed, claimed.Add(30 * time.Second), 0, time.Time{}, now.Add(30 * time.Second), false},
		{"extend sets the length", claimed, claimed.Add(30 * time.Second), time.Minute, time.Time{}, now.Add(time.Minute), false},
		{"unknown length falls back to the timeout", claimed, time.Time{}, 0, time.Time{}, now.Add(time.Second), false},
		{"capped at the runtime limit", claimed, claimed.Add(30 * time.Second), 0, now.Add(5 * time.Second), now.Add(5 * time.Second), false},
		{"extend capped at the runtime limit", claimed, claimed.Add(30 * time.Second), time.Hour, now.Add(5 * time.Second), now.Add(5 * time.Second), false},
		{"a limit further away changes nothing", claimed, claimed.Add(30 * time.Second), 0, now.Add(time.Hour), now.Add(30 * time.Second), false},
		{"at the runtime limit the lease is lost", claimed, now, 0, now, time.Time{}, true},
		{"past the runtime limit the lease is lost", claimed, now, time.Minute, now.Add(-time.Nanosecond), time.Time{}, true},
	}
	for _, c := range cases {
		got, ok := HeartbeatDeadline(now, c.updated, c.deadline, time.Second, c.extend, c.limit)
		if !got.Equal(c.want) || ok == c.lost {
			t.Errorf("%s: %v %v, want %v (lost %v)", c.name, got, ok, c.want, c.lost)
		}
	}
}

func TestIsRepeat(t *testing.T) {
	t.Parallel()
	ref := LeaseRef{TaskID: "t", Worker: "w", Lease: 3}
	boom := &ErrorInfo{Code: "boom"}
	entry := func(typ HistoryType, code string) *HistoryEntry {
		h := &HistoryEntry{Type: typ, Worker: "w", Lease: 3}
		if code != "" {
			h.Error = &ErrorInfo{Code: code}
		}
		return h
	}
	cases := []struct {
		name  string
		op    LeaseOp
		lease uint64
		last  *HistoryEntry
		want  bool
	}{
		{"complete repeated", LeaseOp{Op: OpComplete, LeaseRef: ref}, 3, entry(TaskComplete, ""), true},
		{"complete after a new claim", LeaseOp{Op: OpComplete, LeaseRef: ref}, 4, entry(TaskComplete, ""), false},
		{"complete by another worker", LeaseOp{Op: OpComplete, LeaseRef: LeaseRef{TaskID: "t", Worker: "x", Lease: 3}}, 3, entry(TaskComplete, ""), false},
		{"complete after a timeout", LeaseOp{Op: OpComplete, LeaseRef: ref}, 3, entry(TaskTimeout, "timeout"), false},
		{"complete after an abort", LeaseOp{Op: OpComplete, LeaseRef: ref}, 3, entry(TaskAbort, "boom"), false},
		{"fail that retried", LeaseOp{Op: OpFail, LeaseRef: ref, Error: boom}, 3, entry(TaskRetry, "boom"), true},
		{"fail that aborted", LeaseOp{Op: OpFail, LeaseRef: ref, Error: boom}, 3, entry(TaskAbort, "boom"), true},
		{"fail that exhausted attempts", LeaseOp{Op: OpFail, LeaseRef: ref, Error: boom}, 3, entry(TaskAbort, CodeAttemptsExhausted), true},
		{"fail with another code", LeaseOp{Op: OpFail, LeaseRef: ref, Error: &ErrorInfo{Code: "x"}}, 3, entry(TaskRetry, "boom"), false},
		{"abort repeated", LeaseOp{Op: OpAbort, LeaseRef: ref, Error: boom}, 3, entry(TaskAbort, "boom"), true},
		{"abort after a retry", LeaseOp{Op: OpAbort, LeaseRef: ref, Error: boom}, 3, entry(TaskRetry, "boom"), false},
		{"yield repeated", LeaseOp{Op: OpYield, LeaseRef: ref}, 3, entry(TaskYield, ""), true},
		{"no entry", LeaseOp{Op: OpYield, LeaseRef: ref}, 3, nil, false},
		{"heartbeat is never a repeat", LeaseOp{Op: OpHeartbeat, LeaseRef: ref}, 3, entry(TaskAssignment, ""), false},
	}
	for _, c := range cases {
		if got := IsRepeat(&c.op, c.lease, c.last); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestErrClosedMatchesOnlyClosed(t *testing.T) {
	t.Parallel()
	outage := Unavailable(io.ErrUnexpectedEOF)
	if errors.Is(outage, ErrClosed) {
		t.Error("an unavailable database matches ErrClosed")
	}
	if !errors.Is(outage, ErrUnavailable) {
		t.Error("an unavailable database does not match ErrUnavailable")
	}
	closed := Closed("client is closed")
	for _, err := range []error{ErrClosed, closed, fmt.Errorf("wrapped: %w", closed), WithFieldPrefix(closed, "x")} {
		if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrUnavailable) {
			t.Errorf("%v: want it to match ErrClosed and ErrUnavailable", err)
		}
	}
}

func TestValidateJSONRejectsInvalidUTF8(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"\"\xff\"", "{\"k\":\"a\xc3\"}", "[\"\xed\xa0\x80\"]"} {
		err := ValidateJSON("spec", json.RawMessage(raw), MaxSpecBytes)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Field != "spec" {
			t.Errorf("%q: %v, want invalid_argument on spec", raw, err)
		}
	}
	if err := ValidateJSON("spec", json.RawMessage(`{"name":"Ada Lovelace – ✓"}`), MaxSpecBytes); err != nil {
		t.Errorf("valid UTF-8: %v", err)
	}
}

func TestWorkerInfoValidate(t *testing.T) {
	t.Parallel()
	many := make([]string, MaxWorkerQueues+1)
	for i := range many {
		many[i] = "q"
	}
	cases := []struct {
		info  WorkerInfo
		field string
	}{
		{WorkerInfo{Name: "ok", Queues: []string{"a", "b.c"}}, ""},
		{WorkerInfo{Queues: []string{"a", "b c"}}, "queues[1]"},
		{WorkerInfo{Queues: []string{""}}, "queues[0]"},
		{WorkerInfo{Queues: many}, "queues"},
		{WorkerInfo{Name: string(make([]byte, MaxWorkerNameLength+1))}, "name"},
	}
	for _, c := range cases {
		err := c.info.Validate()
		var e *Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%+v: %v", c.info.Queues, err)
		case c.field != "" && (!errors.As(err, &e) || e.Field != c.field):
			t.Errorf("%v: want invalid_argument on %s", err, c.field)
		}
	}
}
