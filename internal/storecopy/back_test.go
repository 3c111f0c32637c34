package storecopy

import (
	"context"
	"errors"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/embedded"
)

// The way back: PostgreSQL into an embedded store, which must then work
// as a store (the lease held goes on, the blocked child follows its
// parent, the unique key holds).
func TestCopyPostgresToEmbedded(t *testing.T) {
	ctx := context.Background()
	src := openPostgres(t)
	seed(t, src)
	dst := openEmbedded(t)
	rep, err := Copy(ctx, src, dst, Options{Batch: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Check.Same || rep.Tasks != 46 || rep.Imported != 46 || rep.Schedules != 1 || rep.Batches != 1 {
		t.Fatalf("report %+v", rep)
	}
	if b, err := dst.GetBatch(ctx, "wf"); err != nil || b.State != norn.BatchOpen || b.Total != 2 || b.Counts[norn.StatusRunning] != 1 {
		t.Fatalf("batch in the copy: %+v %v", b, err)
	}
	checkSequence(t, dst)
	got, err := dst.Get(ctx, "parent")
	if err != nil || got.Status != norn.StatusRunning || got.Progress != 0.5 || len(got.Signals) != 1 || string(got.Signals[0].Data) != `{"a":1}` {
		t.Fatalf("parent %+v %v", got, err)
	}
	if err := dst.Complete(ctx, norn.LeaseRef{TaskID: "parent", Worker: got.Owner, Lease: got.Lease}, nil); err != nil {
		t.Fatalf("completing the copied lease: %v", err)
	}
	if c, _ := dst.Get(ctx, "child"); c.Status != norn.StatusReady || c.OnDependencyFailure != norn.DependencyRun ||
		len(c.DependencyResults) != 2 || string(c.DependencyResults[1].Result) != `{"sent":true}` {
		t.Fatalf("child after its parent completed in the copy: %+v", c)
	}
	subs, err := dst.Submit(ctx, norn.NewTask{Queue: "mail", UniqueKey: "welcome-7"})
	if err != nil || !subs[0].Duplicate || subs[0].Task.ID != "later" {
		t.Fatalf("unique key in the copy: %+v %v", subs, err)
	}
}

// A copy into an embedded store interrupted midway, run again (by a new
// process, which opens the store again), is refused without Resume and
// with it resumes without duplicates and passes the check.
func TestCopyIntoEmbeddedResumes(t *testing.T) {
	src := openEmbedded(t)
	seed(t, src)
	dir := t.TempDir()
	open := func() *embedded.Store {
		st, err := embedded.Open(context.Background(), embedded.Options{Dir: dir, ManualSweep: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	dst := open()
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Copy(ctx, src, dst, Options{Batch: 5, Progress: func(done, _ int64) {
		if done >= 10 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted copy: %v", err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	dst = open()
	if _, err := Copy(context.Background(), src, dst, Options{Batch: 5}); err == nil {
		t.Fatal("a second copy without --resume went into the partly copied store")
	}
	rep, err := Copy(context.Background(), src, dst, Options{Batch: 5, Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Check.Same || rep.Tasks != 46 || rep.Imported != 46-10 {
		t.Fatalf("resumed copy: %+v", rep)
	}
}
