package embedded

import (
	"context"
	"testing"

	"github.com/nornq/norn"
)

// TestSequenceSurvivesReopen: a halted sequence, its waiting members in
// submit order and its numbering come back from disk, and the sequence
// goes on where it stopped.
func TestSequenceSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, Options{Dir: dir, ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(ctx, norn.NewTask{ID: "h", Queue: "q", SequenceKey: "k"},
		norn.NewTask{ID: "z", Queue: "q", SequenceKey: "k"}, norn.NewTask{ID: "a", Queue: "q", SequenceKey: "k", Priority: 7}); err != nil {
		t.Fatal(err)
	}
	w, err := s.RegisterWorker(ctx, norn.WorkerInfo{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(s *Store, want string) norn.LeaseRef {
		t.Helper()
		got, err := s.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"q"}, N: 5})
		if err != nil || len(got) != 1 || got[0].ID != want {
			t.Fatalf("claim: %v %v, want only %s", got, err, want)
		}
		return norn.LeaseRef{TaskID: want, Worker: w, Lease: got[0].Lease}
	}
	if err := s.Abort(ctx, claim(s, "h"), norn.ErrorInfo{Code: "bad"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, dir)
	want := norn.SequenceInfo{Queue: "q", Key: "k", Head: "h", HeadStatus: norn.StatusAborted, Halted: true, Waiting: 2}
	if got, err := s.Sequence(ctx, "q", "k"); err != nil || got != want {
		t.Fatalf("after reopen: %+v, %v; want %+v", got, err, want)
	}
	if err := s.Delete(ctx, "h"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(ctx, norn.NewTask{ID: "last", Queue: "q", SequenceKey: "k", Priority: 9}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"z", "a", "last"} {
		if err := s.Complete(ctx, claim(s, id), nil); err != nil {
			t.Fatal(err)
		}
	}
}
