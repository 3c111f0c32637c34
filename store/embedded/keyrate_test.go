package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/storetest"
)

// TestKeyBucketsSurviveReopenAndArePruned: a reopen resumes each key's
// bucket as the last claim left it (no fresh burst), and the sweep forgets
// buckets that refilled to their burst, in memory and on disk.
func TestKeyBucketsSurviveReopenAndArePruned(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	dir := t.TempDir()
	clock := storetest.NewFakeClock()
	open := func() *Store {
		s, err := Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 1, Burst: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(bg, norn.NewTask{ID: "a0", Queue: "q", ConcurrencyKey: "a"}, norn.NewTask{ID: "a1", Queue: "q", ConcurrencyKey: "a"}); err != nil {
		t.Fatal(err)
	}
	claim := func(s *Store) int {
		ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 5})
		if err != nil {
			t.Fatal(err)
		}
		return len(ts)
	}
	if n := claim(s); n != 1 {
		t.Fatalf("first claim: %d tasks, want the burst of 1", n)
	}
	s.Close()
	s = open()
	if n := claim(s); n != 0 {
		t.Fatalf("after reopen: %d tasks, want none (the key's bucket is empty)", n)
	}
	clock.Advance(time.Second)
	if n := claim(s); n != 1 {
		t.Fatalf("a second later: %d tasks, want 1", n)
	}
	clock.Advance(time.Hour)
	if _, err := s.Sweep(bg); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	left := len(s.queues["q"].keyBuckets)
	s.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d key buckets after they refilled and a sweep, want 0", left)
	}
	s.Close()
	s = open()
	defer s.Close()
	s.mu.Lock()
	left = len(s.queues["q"].keyBuckets)
	s.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d key buckets loaded after the sweep forgot them, want 0", left)
	}
}
