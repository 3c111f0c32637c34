package storecopy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/embedded"
	"github.com/nornq/norn/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func openPostgres(t *testing.T) *postgres.Store {
	t.Helper()
	dbURL, schema := pgtest.Schema(t)
	st, err := postgres.Open(context.Background(), postgres.Config{URL: dbURL, Schema: schema, Migrate: true, DisableMonitor: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openEmbedded(t *testing.T) *embedded.Store {
	t.Helper()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// seed gives src tasks in every status, with labels, logs, results,
// errors, a lease held, dependencies, unique keys, queue and key settings
// a schedule and a batch whose members are parent and child.
func seed(t *testing.T, src norn.Store) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	two, ten := 2, norn.Duration(10*time.Minute)
	cont := norn.SequenceContinue
	_, err := src.UpdateQueue(ctx, "mail", norn.QueueUpdate{MaxAttempts: &two, ExpireIn: &ten, KeyLimit: &two,
		Retry:             &norn.RetryPolicy{MaxRetries: 3, Base: norn.Duration(time.Second), Jitter: norn.JitterFull},
		KeyRateLimit:      &norn.RateLimit{PerSecond: 5, Burst: 2},
		SequenceOnFailure: &cont,
		Keys:              map[string]*norn.KeySettings{"acme": {Limit: 1, RateLimit: norn.RateLimit{PerSecond: 1, Burst: 1}}}})
	must(err)
	_, err = src.CreateBatch(ctx, norn.NewBatch{ID: "wf", Labels: map[string]string{"k": "v"}, OnComplete: &norn.NewTask{Queue: "cbq"}})
	must(err)
	var nts []norn.NewTask
	for i := range 40 {
		nt := norn.NewTask{ID: fmt.Sprintf("bulk-%03d", i), Queue: "bulk", Spec: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
			Labels: map[string]string{"batch": "1"}, Priority: uint32(i % 3)}
		if i < 3 {
			nt.SequenceKey = "s" // bulk-000 the head, the two others waiting
		}
		nts = append(nts, nt)
	}
	nts = append(nts,
		norn.NewTask{ID: "later", Queue: "mail", Delay: norn.Duration(time.Hour), UniqueKey: "welcome-7"},
		norn.NewTask{ID: "parent", Queue: "mail", ConcurrencyKey: "acme", Batch: "wf"},
		norn.NewTask{ID: "child", Queue: "mail", DependsOn: []string{"parent", "done"}, Batch: "wf", OnDependencyFailure: norn.DependencyRun},
		norn.NewTask{ID: "done", Queue: "mail"},
		norn.NewTask{ID: "broken", Queue: "mail", Retry: &norn.RetryPolicy{}},
		norn.NewTask{ID: "gone", Queue: "mail"},
	)
	_, err = src.Submit(ctx, nts...)
	must(err)
	w, err := src.RegisterWorker(ctx, norn.WorkerInfo{Name: "w", Queues: []string{"mail"}})
	must(err)
	claim := func(id string) norn.LeaseRef {
		t.Helper()
		for range 10 {
			ts, err := src.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"mail"}, N: 1, Timeout: norn.Duration(time.Hour)})
			must(err)
			if len(ts) == 1 && ts[0].ID == id {
				return norn.LeaseRef{TaskID: id, Worker: w, Lease: ts[0].Lease}
			}
			if len(ts) == 1 {
				must(src.Yield(ctx, norn.LeaseRef{TaskID: ts[0].ID, Worker: w, Lease: ts[0].Lease}))
			}
		}
		t.Fatalf("could not claim %s", id)
		return norn.LeaseRef{}
	}
	for _, id := range []string{"gone", "done", "broken"} {
		if _, err := src.Update(ctx, id, norn.Update{Priority: ptr(uint32(9))}); err != nil {
			t.Fatal(err)
		}
	}
	r := claim("done")
	_, err = src.AppendLog(ctx, r, norn.LogAppend{Data: json.RawMessage(`{"step":1}`)})
	must(err)
	must(src.Complete(ctx, r, json.RawMessage(`{"sent":true}`)))
	must(src.Fail(ctx, claim("broken"), norn.ErrorInfo{Code: "smtp", Description: "550"}))
	_, err = src.Cancel(ctx, "gone")
	must(err)
	// parent stays running with its lease; child blocked on it.
	r = claim("parent")
	p := 0.5
	_, err = src.Heartbeat(ctx, r, norn.Heartbeat{Progress: &p})
	must(err)
	_, err = src.Signal(ctx, "parent", norn.NewSignal{Name: "go", Data: json.RawMessage(`{"a":1}`)})
	must(err)
	if sa, ok := src.(norn.ScheduleAPI); ok {
		_, err = sa.PutSchedule(ctx, norn.Schedule{Name: "nightly", Queue: "mail", Cron: "0 3 * * *"})
		must(err)
	}
}

func ptr[T any](v T) *T { return &v }

func TestCopyEmbeddedToPostgres(t *testing.T) {
	ctx := context.Background()
	src := openEmbedded(t)
	seed(t, src)
	dst := openPostgres(t)
	var progress []int64
	rep, err := Copy(ctx, src, dst, Options{Batch: 7, Progress: func(done, total int64) { progress = append(progress, done) }})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Check.Same || rep.Tasks != 46 || rep.Imported != 46 || rep.Schedules != 1 || rep.Queues < 2 || rep.Batches != 1 {
		t.Fatalf("report %+v", rep)
	}
	if b, err := dst.GetBatch(ctx, "wf"); err != nil || b.State != norn.BatchOpen || b.Total != 2 || b.Labels["k"] != "v" {
		t.Fatalf("batch in the copy: %+v %v", b, err)
	}
	if len(progress) != 7 || progress[len(progress)-1] != 46 {
		t.Fatalf("progress %v, want 7 batches up to 46", progress)
	}
	checkSequence(t, dst)
	// The copy is a working store: the lease held goes on, the child is
	// still blocked on its parent, settings and the unique key hold.
	got, err := dst.Get(ctx, "parent")
	if err != nil || got.Status != norn.StatusRunning || got.Progress != 0.5 || len(got.Signals) != 1 || string(got.Signals[0].Data) != `{"a":1}` {
		t.Fatalf("parent %+v %v", got, err)
	}
	ref := norn.LeaseRef{TaskID: "parent", Worker: got.Owner, Lease: got.Lease}
	if err := dst.Complete(ctx, ref, nil); err != nil {
		t.Fatalf("completing the copied lease: %v", err)
	}
	if c, _ := dst.Get(ctx, "child"); c.Status != norn.StatusReady || c.OnDependencyFailure != norn.DependencyRun ||
		len(c.DependencyResults) != 2 || string(c.DependencyResults[1].Result) != `{"sent":true}` {
		t.Fatalf("child after its parent completed in the copy: %+v", c)
	}
	if log, err := dst.ReadLog(ctx, "done", 0, 0); err != nil || len(log) != 1 || string(log[0].Data) != `{"step":1}` {
		t.Fatalf("log of done: %+v %v", log, err)
	}
	subs, err := dst.Submit(ctx, norn.NewTask{Queue: "mail", UniqueKey: "welcome-7"})
	if err != nil || !subs[0].Duplicate || subs[0].Task.ID != "later" {
		t.Fatalf("unique key in the copy: %+v %v", subs, err)
	}
	q, err := dst.Queue(ctx, "mail")
	if err != nil || q.Defaults.MaxAttempts != 2 || q.Defaults.Retry == nil || q.Defaults.Retry.Jitter != norn.JitterFull ||
		q.KeyLimit != 2 || q.Defaults.ExpireIn.D() != 10*time.Minute || q.KeyRateLimit != (norn.RateLimit{PerSecond: 5, Burst: 2}) ||
		q.Defaults.SequenceOnFailure != norn.SequenceContinue || len(q.Keys) != 1 || q.Keys[0].RateLimit.PerSecond != 1 {
		t.Fatalf("queue settings in the copy: %+v %v", q, err)
	}
	if sc, err := dst.GetSchedule(ctx, "nightly"); err != nil || sc.Cron != "0 3 * * *" {
		t.Fatalf("schedule in the copy: %+v %v", sc, err)
	}
	// The batch goes on in the copy: sealed and its last member done, it
	// fires there.
	if _, err := dst.SealBatch(ctx, "wf"); err != nil {
		t.Fatal(err)
	}
	w, err := dst.RegisterWorker(ctx, norn.WorkerInfo{Name: "w2"})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := dst.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"mail"}, N: 1})
	if err != nil || len(ts) != 1 || ts[0].ID != "child" {
		t.Fatalf("claim of child in the copy: %+v %v", ts, err)
	}
	if err := dst.Complete(ctx, norn.LeaseRef{TaskID: "child", Worker: w, Lease: ts[0].Lease}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := dst.GetBatch(ctx, "wf"); err != nil || b.State != norn.BatchDone || b.CompleteTask == "" {
		t.Fatalf("batch in the copy after its members ended: %+v %v", b, err)
	}
}

func TestCopyRefusesANonEmptyDestinationAndResumes(t *testing.T) {
	ctx := context.Background()
	src := openEmbedded(t)
	seed(t, src)
	dst := openPostgres(t)
	// An interrupted copy: the context ends after the second batch.
	cctx, cancel := context.WithCancel(ctx)
	_, err := Copy(cctx, src, dst, Options{Batch: 10, Progress: func(done, _ int64) {
		if done >= 20 {
			cancel()
		}
	}})
	if err == nil {
		t.Fatal("an interrupted copy reported success")
	}
	_, err = Copy(ctx, src, dst, Options{})
	if err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("a non-empty destination without --resume: %v", err)
	}
	rep, err := Copy(ctx, src, dst, Options{Resume: true, Batch: 10})
	if err != nil || !rep.Check.Same || rep.Tasks != 46 || rep.Imported != 26 {
		t.Fatalf("resumed copy: %+v %v (want 26 imported: 20 were there)", rep, err)
	}
	// Different data under one id is a conflict, not an overwrite.
	if _, err := src.Update(ctx, "later", norn.Update{Priority: ptr(uint32(5))}); err != nil {
		t.Fatal(err)
	}
	if _, err := Copy(ctx, src, dst, Options{Resume: true}); norn.CodeOf(err) != norn.CodeConflict {
		t.Fatalf("a changed source task over a copied one: %v", err)
	}
}

func TestVerifyFindsADifference(t *testing.T) {
	ctx := context.Background()
	src := openEmbedded(t)
	seed(t, src)
	dst := openPostgres(t)
	if _, err := Copy(ctx, src, dst, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Update(ctx, "bulk-007", norn.Update{Labels: map[string]string{"batch": "2"}}); err != nil {
		t.Fatal(err)
	}
	c, err := Verify(ctx, src, dst)
	if err != nil || c.Same || !strings.Contains(strings.Join(c.Differences, " "), "bulk-007") {
		t.Fatalf("verify after a change: %+v %v", c, err)
	}
	if err := dst.Delete(ctx, "bulk-008"); err != nil {
		t.Fatal(err)
	}
	c, _ = Verify(ctx, src, dst)
	if c.Same || !strings.Contains(c.Differences[0], "counts") {
		t.Fatalf("verify after a deletion: %+v", c)
	}
}

// checkSequence checks that the seeded sequence works in the copy: the
// head and its waiting members, handed over in order.
func checkSequence(t *testing.T, dst norn.Store) {
	t.Helper()
	ctx := context.Background()
	want := norn.SequenceInfo{Queue: "bulk", Key: "s", Head: "bulk-000", HeadStatus: norn.StatusReady, Waiting: 2}
	if got, err := dst.Sequence(ctx, "bulk", "s"); err != nil || got != want {
		t.Fatalf("sequence in the copy: %+v %v; want %+v", got, err, want)
	}
	if _, err := dst.Cancel(ctx, "bulk-000"); err != nil {
		t.Fatal(err)
	}
	if got, err := dst.Get(ctx, "bulk-001"); err != nil || got.Status != norn.StatusReady || got.SequenceKey != "s" {
		t.Fatalf("next member in the copy: %+v %v", got, err)
	}
	if got, err := dst.Get(ctx, "bulk-002"); err != nil || got.Status != norn.StatusBlocked {
		t.Fatalf("last member in the copy: %+v %v", got, err)
	}
}
