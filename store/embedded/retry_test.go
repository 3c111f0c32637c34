package embedded

import (
	"testing"

	"github.com/nornq/norn"
)

// TestRetryWithDependentsSurvivesReopen: dependents a retry brought back
// wait for their dependency again after a restart (the open rebuilds the
// waiting lists from the blocked tasks on disk).
func TestRetryWithDependentsSurvivesReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := newFakeClock()
	s, err := Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	mustSubmit(t, s,
		norn.NewTask{ID: "a", Queue: "q"},
		norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}},
		norn.NewTask{ID: "c", Queue: "q", DependsOn: []string{"b"}},
	)
	if _, err := s.Cancel(bg, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Retry(bg, "a", norn.RetryOptions{WithDependents: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	status := func(id string, want norn.Status) {
		t.Helper()
		tk, err := s.Get(bg, id)
		if err != nil || tk.Status != want {
			t.Fatalf("task %s after reopen: %v, %v; want %s", id, tk, err, want)
		}
	}
	status("b", norn.StatusBlocked)
	status("c", norn.StatusBlocked)
	a := mustClaim(t, s, "w", 1, "q")[0]
	if err := s.Complete(bg, refOf(a), nil); err != nil {
		t.Fatal(err)
	}
	status("b", norn.StatusReady)
	status("c", norn.StatusBlocked)
	b := mustClaim(t, s, "w", 1, "q")[0]
	if err := s.Complete(bg, refOf(b), nil); err != nil {
		t.Fatal(err)
	}
	status("c", norn.StatusReady)
}
