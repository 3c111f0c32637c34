package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/storetest"
)

// TestRateBucketSurvivesReopen: a restart resumes with the bucket the last
// claim left, so it cannot hand out a fresh burst; removing the limit
// removes the stored bucket.
func TestRateBucketSurvivesReopen(t *testing.T) {
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
	claim := func(s *Store) int {
		ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(ts)
	}
	s := open()
	if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{RateLimit: &norn.RateLimit{PerSecond: 1, Burst: 4}}); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := s.Submit(bg, norn.NewTask{Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := claim(s); n != 4 {
		t.Fatalf("first claim: %d", n)
	}
	clock.Advance(1500 * time.Millisecond)
	if n := claim(s); n != 1 {
		t.Fatalf("claim 1.5 s later: %d", n)
	}
	s.Close()
	s = open()
	qi, err := s.Queue(bg, "q")
	if err != nil {
		t.Fatal(err)
	}
	if qi.RateLimit != (norn.RateLimit{PerSecond: 1, Burst: 4}) || qi.RateTokens == nil || *qi.RateTokens != 0.5 {
		t.Fatalf("after reopen: rate_limit %+v tokens %v", qi.RateLimit, qi.RateTokens)
	}
	if n := claim(s); n != 0 {
		t.Fatalf("claim after reopen: %d, the bucket was refilled by the restart", n)
	}
	if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{RateLimit: &norn.RateLimit{}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open()
	defer s.Close()
	if _, ok := s.queues["q"]; !ok || s.queues["q"].bucket != nil || s.queues["q"].flow.RateLimited() {
		t.Fatal("after removal and reopen: the queue still has a rate limit or bucket")
	}
	if n := claim(s); n != 5 {
		t.Fatalf("claim without the limit: %d", n)
	}
}
