package norn

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDecideRetry(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	deps := map[string]Status{"done": StatusCompleted, "run": StatusRunning, "gone": "", "bad": StatusAborted, "off": StatusCancelled}
	depStatus := func(id string) Status { return deps[id] }
	for _, c := range []struct {
		name     string
		status   Status
		deps     []string
		o        RetryOptions
		want     Redrive
		conflict string // a word the conflict names; "" = no error
	}{
		{"aborted", StatusAborted, nil, RetryOptions{}, Redrive{Status: StatusReady, RunAt: now}, ""},
		{"cancelled", StatusCancelled, nil, RetryOptions{}, Redrive{Status: StatusReady, RunAt: now}, ""},
		{"run_at ahead", StatusAborted, nil, RetryOptions{RunAt: now.Add(time.Hour)}, Redrive{Status: StatusScheduled, RunAt: now.Add(time.Hour)}, ""},
		{"run_at past", StatusAborted, nil, RetryOptions{RunAt: now.Add(-time.Hour)}, Redrive{Status: StatusReady, RunAt: now}, ""},
		{"deps completed", StatusCancelled, []string{"done"}, RetryOptions{}, Redrive{Status: StatusReady, RunAt: now}, ""},
		{"dep pending", StatusCancelled, []string{"done", "run"}, RetryOptions{RunAt: now.Add(time.Hour)},
			Redrive{Status: StatusBlocked, RunAt: now.Add(time.Hour), PendingDeps: 1}, ""},
		{"dep aborted", StatusAborted, []string{"run", "bad"}, RetryOptions{}, Redrive{}, `"bad", which is aborted`},
		{"dep cancelled", StatusAborted, []string{"off"}, RetryOptions{}, Redrive{}, `"off", which is cancelled`},
		{"dep deleted", StatusAborted, []string{"gone"}, RetryOptions{}, Redrive{}, `"gone", which is deleted`},
		{"completed", StatusCompleted, nil, RetryOptions{}, Redrive{}, "is completed"},
		{"running", StatusRunning, nil, RetryOptions{}, Redrive{}, "is running"},
		{"ready", StatusReady, nil, RetryOptions{}, Redrive{}, "is ready"},
		{"blocked", StatusBlocked, nil, RetryOptions{}, Redrive{}, "is blocked"},
		{"scheduled", StatusScheduled, nil, RetryOptions{}, Redrive{}, "is scheduled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := DecideRetry(&Task{ID: "x", Status: c.status, DependsOn: c.deps}, now, c.o, depStatus)
			if c.conflict != "" {
				if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), c.conflict) {
					t.Fatalf("DecideRetry = %v, want a conflict naming %q", err, c.conflict)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("DecideRetry = %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

func TestDecideDependentRetry(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	later := now.Add(time.Hour)
	deps := map[string]Status{"x": StatusReady, "done": StatusCompleted, "bad": StatusAborted}
	depStatus := func(id string) Status { return deps[id] }
	for _, c := range []struct {
		name   string
		status Status
		deps   []string
		runAt  time.Time
		want   Redrive
		ok     bool
	}{
		{"waits again", StatusAborted, []string{"x", "done"}, now, Redrive{Status: StatusBlocked, RunAt: now, PendingDeps: 1}, true},
		{"keeps its run_at", StatusAborted, []string{"x"}, later, Redrive{Status: StatusBlocked, RunAt: later, PendingDeps: 1}, true},
		{"another dependency failed", StatusAborted, []string{"x", "bad"}, now, Redrive{}, false},
		{"another dependency deleted", StatusAborted, []string{"x", "gone"}, now, Redrive{}, false},
		{"not terminal", StatusBlocked, []string{"x"}, now, Redrive{}, false},
		{"completed", StatusCompleted, []string{"x"}, now, Redrive{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := DecideDependentRetry(&Task{ID: "d", Status: c.status, DependsOn: c.deps, RunAt: c.runAt}, now, depStatus)
			if ok != c.ok || got != c.want {
				t.Fatalf("DecideDependentRetry = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestAbortedBecauseOf(t *testing.T) {
	failed := DependencyFailed("x", StatusAborted)
	cancelled := DependencyFailed("x", StatusCancelled)
	other := DependencyFailed("x is", StatusAborted)
	deleted := DependencyDeleted("x")
	own := ErrorInfo{Code: "boom", Description: "dependency x is aborted"}
	for _, c := range []struct {
		name   string
		status Status
		last   *ErrorInfo
		want   bool
	}{
		{"aborted by x", StatusAborted, &failed, true},
		{"x was cancelled", StatusAborted, &cancelled, true},
		{"another dependency whose id starts alike", StatusAborted, &other, false},
		{"x was deleted", StatusAborted, &deleted, false},
		{"its own error", StatusAborted, &own, false},
		{"no error", StatusAborted, nil, false},
		{"cancelled since", StatusCancelled, &failed, false},
		{"retried since", StatusBlocked, &failed, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := AbortedBecauseOf(c.status, c.last, "x"); got != c.want {
				t.Fatalf("AbortedBecauseOf = %v, want %v", got, c.want)
			}
		})
	}
}

func TestRetryFilter(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []Status
		want []Status
		ok   bool
	}{
		{"no statuses", nil, []Status{StatusAborted, StatusCancelled}, true},
		{"aborted only", []Status{StatusAborted}, []Status{StatusAborted}, true},
		{"mixed", []Status{StatusCompleted, StatusCancelled, StatusReady}, []Status{StatusCancelled}, true},
		{"none retryable", []Status{StatusCompleted, StatusRunning}, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, ok := RetryFilter(Filter{Queues: []string{"q"}, Statuses: c.in})
			if ok != c.ok || !slices.Equal(g.Statuses, c.want) || !slices.Equal(g.Queues, []string{"q"}) {
				t.Fatalf("RetryFilter = %+v, %v; want statuses %v, %v", g, ok, c.want, c.ok)
			}
		})
	}
	if err := CheckRetryFilter(&Filter{}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("CheckRetryFilter(empty) = %v, want invalid_argument", err)
	}
	if err := CheckRetryFilter(&Filter{Statuses: []Status{"nope"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("CheckRetryFilter(bad status) = %v, want invalid_argument", err)
	}
	if err := CheckRetryFilter(&Filter{Queues: []string{"q"}}); err != nil {
		t.Fatalf("CheckRetryFilter(queue) = %v", err)
	}
}

func TestPlanDependentRetries(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// x was retried (ready). a and b waited for x; c waits for a and b;
	// d waits for a and for "bad", which failed on its own; e waits for d.
	found := []*Task{
		{ID: "c", Status: StatusAborted, DependsOn: []string{"a", "b"}, RunAt: now},
		{ID: "a", Status: StatusAborted, DependsOn: []string{"x"}, RunAt: now},
		{ID: "b", Status: StatusAborted, DependsOn: []string{"x", "done"}, RunAt: now},
		{ID: "e", Status: StatusAborted, DependsOn: []string{"d"}, RunAt: now},
		{ID: "d", Status: StatusAborted, DependsOn: []string{"a", "bad"}, RunAt: now},
	}
	outside := map[string]Status{"x": StatusReady, "done": StatusCompleted, "bad": StatusAborted}
	got := PlanDependentRetries(found, now, func(id string) Status { return outside[id] })
	want := map[string]Redrive{
		"a": {Status: StatusBlocked, RunAt: now, PendingDeps: 1},
		"b": {Status: StatusBlocked, RunAt: now, PendingDeps: 1},
		"c": {Status: StatusBlocked, RunAt: now, PendingDeps: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("PlanDependentRetries = %+v, want %+v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Fatalf("PlanDependentRetries[%s] = %+v, want %+v", id, got[id], w)
		}
	}
}

func TestCheckRetryUnique(t *testing.T) {
	keyed := &Task{ID: "a", Queue: "q", UniqueKey: "k"}
	for _, tc := range []struct {
		name    string
		task    *Task
		holders []UniqueHolder
		refused bool
	}{
		{"NoKeyIsNeverRefused", &Task{ID: "a", Queue: "q"}, []UniqueHolder{{ID: "b", Status: StatusReady}}, false},
		{"NoHolders", keyed, nil, false},
		{"OnlyItself", keyed, []UniqueHolder{{ID: "a", Status: StatusAborted}}, false},
		{"OthersEnded", keyed, []UniqueHolder{{ID: "b", Status: StatusCompleted}, {ID: "c", Status: StatusCancelled}}, false},
		{"AnotherLiveHolder", keyed, []UniqueHolder{{ID: "a", Status: StatusAborted}, {ID: "b", Status: StatusRunning}}, true},
		{"ABlockedHolderIsLive", keyed, []UniqueHolder{{ID: "b", Status: StatusBlocked}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckRetryUnique(tc.task, tc.holders)
			if (err != nil) != tc.refused {
				t.Fatalf("refused = %v (%v), want %v", err != nil, err, tc.refused)
			}
			var e *Error
			if err != nil && (!errors.As(err, &e) || e.Code != CodeConflict || !strings.Contains(err.Error(), `"b"`)) {
				t.Fatalf("want a conflict naming the holder, got %v", err)
			}
		})
	}
}
