package embedded

import (
	"context"
	"fmt"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/storetest"
)

// TestFlowSurvivesReopen: queue limits, key settings and the running
// counts (rebuilt from the task states) are the same after a reopen.
func TestFlowSurvivesReopen(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	dir := t.TempDir()
	clock := storetest.NewFakeClock()
	s, err := Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{MaxRunning: ptr(3), KeyLimit: ptr(1),
		Keys: map[string]*norn.KeySettings{"b": {Limit: 2}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Submit(bg, norn.NewTask{ID: fmt.Sprintf("a%d", i), Queue: "q", ConcurrencyKey: "a"},
			norn.NewTask{ID: fmt.Sprintf("b%d", i), Queue: "q", ConcurrencyKey: "b"}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(s *Store) []string {
		ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tk := range ts {
			ids = append(ids, tk.ID)
		}
		return ids
	}
	if got := fmt.Sprint(claim(s)); got != "[a0 b0 b1]" {
		t.Fatalf("first claim %s", got)
	}
	s.Close()
	if s, err = Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	qi, err := s.Queue(bg, "q")
	if err != nil {
		t.Fatal(err)
	}
	if qi.MaxRunning != 3 || qi.KeyLimit != 1 || fmt.Sprint(qi.Keys) != "[{a {0 0 {0 0}} 1} {b {2 0 {0 0}} 2}]" {
		t.Fatalf("after reopen: max_running %d key_limit %d keys %v", qi.MaxRunning, qi.KeyLimit, qi.Keys)
	}
	// Both keys and the queue are at their limits.
	if got := fmt.Sprint(claim(s)); got != "[]" {
		t.Fatalf("claim after reopen %s", got)
	}
	if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{MaxRunning: ptr(10),
		Keys: map[string]*norn.KeySettings{"b": {Limit: 3}}}); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(claim(s)); got != "[b2]" {
		t.Fatalf("claim after raising b's limit %s", got)
	}
}

func ptr[T any](v T) *T { return &v }

// TestFairByLabelSurvivesReopen: a queue fair by a label regroups its
// tasks by the label when it is opened again (the groups are in memory
// only), and weights still apply.
func TestFairByLabelSurvivesReopen(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	dir := t.TempDir()
	clock := storetest.NewFakeClock()
	s, err := Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{FairBy: ptr("label:tenant"),
		Keys: map[string]*norn.KeySettings{"x": {Weight: 2}}}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := s.Submit(bg, norn.NewTask{ID: fmt.Sprintf("x%d", i), Queue: "q", Labels: map[string]string{"tenant": "x"}},
			norn.NewTask{ID: fmt.Sprintf("y%d", i), Queue: "q", ConcurrencyKey: "x", Labels: map[string]string{"tenant": "y"}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	if s, err = Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	for range 6 {
		ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 1})
		if err != nil || len(ts) != 1 {
			t.Fatalf("claim: %d tasks, %v", len(ts), err)
		}
		got = append(got, ts[0].ID)
	}
	// x has weight 2: two claims for each of y's.
	if fmt.Sprint(got) != "[x0 y0 x1 x2 y1 x3]" {
		t.Fatalf("claim order after reopen %v", got)
	}
}
