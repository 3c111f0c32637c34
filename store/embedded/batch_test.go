package embedded

import (
	"context"
	"testing"

	"github.com/nornq/norn"
)

// TestBatchDueSurvivesReopen: a sealed batch whose last member ended just
// before the store closed (so the monitor never fired it) fires at the
// first sweep after a reopen, exactly once, and its membership, pending
// count and state come back from disk.
func TestBatchDueSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, Options{Dir: dir, ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateBatch(ctx, norn.NewBatch{ID: "b", Seal: true, OnComplete: &norn.NewTask{Queue: "cb"},
		Tasks: []norn.NewTask{{ID: "m1", Queue: "q"}, {ID: "m2", Queue: "q"}}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.RegisterWorker(ctx, norn.WorkerInfo{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"q"}, N: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	if err := s.Complete(ctx, norn.LeaseRef{TaskID: got[0].ID, Worker: w, Lease: got[0].Lease}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, dir)
	if b, err := s.GetBatch(ctx, "b"); err != nil || b.State != norn.BatchSealed || b.Total != 2 {
		t.Fatalf("batch after reopen: %+v, %v", b, err)
	}
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, norn.BatchCallbackID("b", norn.CallbackComplete)); err == nil {
		t.Fatal("on_complete fired with a member still pending")
	}
	if _, err := s.Cancel(ctx, "m2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // ended, not yet fired
		t.Fatal(err)
	}
	s = reopen(t, dir)
	for range 2 { // the second sweep fires nothing more
		if _, err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b, err := s.GetBatch(ctx, "b")
	if err != nil || b.State != norn.BatchDone || b.CompleteTask == "" {
		t.Fatalf("batch after the sweep: %+v, %v", b, err)
	}
	if n, err := s.Count(ctx, norn.Filter{Queues: []string{"cb"}}); err != nil || n != 1 {
		t.Fatalf("%d callbacks, %v; want 1", n, err)
	}
}
