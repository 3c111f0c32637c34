package norn

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestBatchFiring(t *testing.T) {
	t.Parallel()
	cb := &NewTask{Queue: "cb"}
	cases := []struct {
		name              string
		b                 Batch
		counts            map[Status]int
		complete, success bool
	}{
		{"open never fires", Batch{State: BatchOpen, OnSuccess: cb}, map[Status]int{StatusCompleted: 2}, false, false},
		{"sealed with a pending member", Batch{State: BatchSealed, OnSuccess: cb}, map[Status]int{StatusCompleted: 1, StatusRunning: 1}, false, false},
		{"sealed, all completed", Batch{State: BatchSealed, OnSuccess: cb}, map[Status]int{StatusCompleted: 2}, true, true},
		{"sealed, one aborted", Batch{State: BatchSealed, OnSuccess: cb}, map[Status]int{StatusCompleted: 1, StatusAborted: 1}, true, false},
		{"sealed and empty", Batch{State: BatchSealed, OnSuccess: cb}, map[Status]int{}, true, true},
		{"no on_success", Batch{State: BatchSealed}, map[Status]int{StatusCompleted: 1}, true, false},
		{"done, redriven member completed", Batch{State: BatchDone, OnSuccess: cb}, map[Status]int{StatusCompleted: 2}, false, true},
		{"done, success fired already", Batch{State: BatchDone, OnSuccess: cb, SuccessTask: "x"}, map[Status]int{StatusCompleted: 2}, false, false},
		{"done, member pending again", Batch{State: BatchDone, OnSuccess: cb}, map[Status]int{StatusCompleted: 1, StatusReady: 1}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			complete, success := BatchFiring(&c.b, c.counts)
			if complete != c.complete || success != c.success {
				t.Fatalf("BatchFiring = %v, %v; want %v, %v", complete, success, c.complete, c.success)
			}
		})
	}
}

func TestBatchCallbackLabels(t *testing.T) {
	t.Parallel()
	b := &Batch{ID: "b1", OnComplete: &NewTask{Queue: "cb", Labels: map[string]string{"team": "a"}}}
	nt, ok := BatchCallback(b, CallbackComplete, map[Status]int{StatusCompleted: 3, StatusAborted: 1})
	if !ok || nt.ID != "norn:batch:b1:complete" || nt.Labels[LabelBatch] != "b1" || nt.Labels[LabelTotal] != "4" ||
		nt.Labels["norn.aborted"] != "1" || nt.Labels["norn.cancelled"] != "0" || nt.Labels["team"] != "a" {
		t.Fatalf("callback %+v", nt)
	}
	if b.OnComplete.Labels[LabelBatch] != "" {
		t.Fatal("the batch's callback definition was changed")
	}
	if _, ok := BatchCallback(b, CallbackSuccess, nil); ok {
		t.Fatal("a batch without on_success gave a success callback")
	}
	if err := nt.Validate(); err != nil {
		t.Fatalf("the callback does not validate: %v", err)
	}
}

func TestAfterAwait(t *testing.T) {
	t.Parallel()
	st := map[string]Status{"p": StatusReady, "done": StatusCompleted, "bad": StatusAborted, "old": StatusCompleted}
	status := func(id string) Status { return st[id] }
	cases := []struct {
		name   string
		deps   []string
		ids    []string
		policy string
		want   string
	}{
		{"pending children block", nil, []string{"p", "done"}, "", "blocked pending 1 ended [done] deps [p done]"},
		{"all ended: ready", []string{"old"}, []string{"done"}, "", "ready pending 0 ended [done] deps [old done]"},
		{"a failed child aborts", nil, []string{"p", "bad"}, ChildFailureAbort, "aborted pending 0 ended [] deps [p bad] error dependency bad is aborted"},
		{"continue counts it ended", nil, []string{"p", "bad"}, ChildFailureContinue, "blocked pending 1 ended [bad] deps [p bad]"},
		{"repeated and known ids once", []string{"p"}, []string{"p", "done", "done"}, "", "ready pending 0 ended [done] deps [p done]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := AfterAwait(&Task{DependsOn: c.deps}, c.ids, c.policy, status)
			got := fmt.Sprintf("%s pending %d ended %v deps %v", a.Status, a.PendingDeps, fmtList(a.EndedDeps), a.DependsOn)
			if a.Error != nil {
				got += " error " + a.Error.Description
			}
			if got != c.want {
				t.Fatalf("AfterAwait = %q, want %q", got, c.want)
			}
			if a.Run != (c.policy == ChildFailureContinue) {
				t.Fatalf("run %v", a.Run)
			}
		})
	}
}

func fmtList(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

func TestAfterSignalWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	o, w := AfterSignalWait(now, Snooze{UntilSignal: "go", Timeout: Duration(time.Minute)}, false)
	if o.Status != StatusScheduled || !o.RunAt.Equal(now.Add(time.Minute)) || w.Received || !w.Until.Equal(now.Add(time.Minute)) {
		t.Fatalf("wait: %+v %+v", o, w)
	}
	o, w = AfterSignalWait(now, Snooze{UntilSignal: "go"}, true)
	if o.Status != StatusReady || !w.Received || !w.Until.Equal(now.Add(DefaultSignalTimeout)) {
		t.Fatalf("received already: %+v %+v", o, w)
	}
	for _, c := range []struct {
		s     Snooze
		field string
	}{
		{Snooze{UntilSignal: "a", RunAt: now}, "until_signal"},
		{Snooze{UntilSignal: "a", Timeout: -1}, "timeout"},
		{Snooze{Delay: Duration(time.Second), Timeout: Duration(time.Second)}, "timeout"},
		{Snooze{UntilSignal: "a\nb"}, "until_signal"},
	} {
		var e *Error
		if err := c.s.Validate(); err == nil || !errors.As(err, &e) || e.Field != c.field {
			t.Fatalf("Validate(%+v) = %v, want an error naming %s", c.s, err, c.field)
		}
	}
}

func TestDecideRetryWithRunPolicy(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	st := map[string]Status{"bad": StatusAborted, "again": StatusReady, "p": StatusRunning}
	dep := func(id string) Status { return st[id] }
	task := func(policy string, recorded ...string) *Task {
		t := &Task{ID: "t", Status: StatusAborted, DependsOn: []string{"bad", "again", "p"}, OnDependencyFailure: policy}
		for _, r := range recorded {
			t.DependencyResults = append(t.DependencyResults, DependencyResult{ID: r, Status: "aborted"})
		}
		return t
	}
	if _, err := DecideRetry(task(""), now, RetryOptions{}, dep); CodeOf(err) != CodeConflict {
		t.Fatalf("abort policy with a failed dependency: %v", err)
	}
	r, err := DecideRetry(task(DependencyRun), now, RetryOptions{}, dep)
	if err != nil || r.Status != StatusBlocked || r.PendingDeps != 2 {
		t.Fatalf("run policy: %+v %v", r, err)
	}
	// "again" ended once (recorded) and was retried since: not waited for twice.
	r, err = DecideRetry(task(DependencyRun, "bad", "again"), now, RetryOptions{}, dep)
	if err != nil || r.PendingDeps != 1 {
		t.Fatalf("run policy with a recorded, retried dependency: %+v %v", r, err)
	}
}

func TestSortDependencyResults(t *testing.T) {
	t.Parallel()
	got := SortDependencyResults([]string{"c", "a", "b"}, []DependencyResult{{ID: "a"}, {ID: "x"}, {ID: "c"}})
	if len(got) != 2 || got[0].ID != "c" || got[1].ID != "a" {
		t.Fatalf("sorted %+v", got)
	}
	if r := NewDependencyResult("d", "", nil, nil); r.Status != DependencyDeletedStatus {
		t.Fatalf("deleted: %+v", r)
	}
	if r := NewDependencyResult("e", StatusAborted, []byte(`1`), []ErrorInfo{{Code: "x"}, {Code: "y"}}); r.Result != nil || r.Error.Code != "y" {
		t.Fatalf("failed: %+v", r)
	}
}
