package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nornq/norn"
)

// exerciseImport checks norn.TaskImporter, for stores that implement it:
// tasks read whole from one store are written into another as they are.
func exerciseImport(t *testing.T, setup setupFunc) {
	t.Run("Import", func(t *testing.T) {
		t.Parallel()
		probe, _ := setup(t)
		if _, ok := probe.(norn.TaskImporter); !ok {
			t.Skip("the store does not implement norn.TaskImporter")
		}
		t.Run("KeepsTasksAsTheyAre", func(t *testing.T) {
			t.Parallel()
			src, _ := setup(t)
			dst, _ := setup(t)
			importFill(t, src, 10)
			recs := importRecords(t, src)
			n, err := dst.(norn.TaskImporter).ImportTasks(context.Background(), recs)
			if err != nil || n != len(recs) {
				t.Fatalf("import: %d, %v; want %d", n, err, len(recs))
			}
			if err := dst.(norn.TaskImporter).FinishImport(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got, want := importJSON(t, importRecords(t, dst)), importJSON(t, recs); got != want {
				t.Fatalf("imported tasks differ from the source's:\n got %s\nwant %s", got, want)
			}
			sc, err := src.CountGrouped(context.Background(), norn.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			dc, err := dst.CountGrouped(context.Background(), norn.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if importJSON(t, sc) != importJSON(t, dc) {
				t.Fatalf("counts after import: %v, source %v", dc, sc)
			}
		})
		t.Run("RunningTaskIsFinishedWithItsLease", func(t *testing.T) {
			t.Parallel()
			src, _ := setup(t)
			dst, b := setup(t)
			running := importFill(t, src, 0)
			importInto(t, dst, importRecords(t, src))
			stale := running
			stale.Lease++
			if err := dst.Complete(context.Background(), stale, nil); norn.CodeOf(err) != norn.CodeLeaseLost {
				t.Fatalf("complete with another lease: %v, want lease_lost", err)
			}
			if err := dst.Complete(context.Background(), running, json.RawMessage(`1`)); err != nil {
				t.Fatalf("complete with the copied lease: %v", err)
			}
			if got := b.get(running.TaskID); got.Status != norn.StatusCompleted {
				t.Fatalf("after completion: %s", got.Status)
			}
		})
		t.Run("HoldsUniqueKeys", func(t *testing.T) {
			t.Parallel()
			src, _ := setup(t)
			dst, _ := setup(t)
			importFill(t, src, 0)
			importInto(t, dst, importRecords(t, src))
			res, err := dst.Submit(context.Background(), norn.NewTask{Queue: "q", UniqueKey: "uc005"})
			if err != nil || !res[0].Duplicate || res[0].Task.ID != "c005" {
				t.Fatalf("submit with an imported task's unique key: %+v, %v", res, err)
			}
		})

		importRules(t, setup)
	})
}

// importFill submits n+6 tasks ("c000"...) with unique keys and brings
// the first into every status: completed with a log and a result, failed
// (retried), aborted, running, cancelled; one more is blocked. It returns
// the running task's lease.
func importFill(t *testing.T, s norn.Store, n int) norn.LeaseRef {
	t.Helper()
	ctx := context.Background()
	var nts []norn.NewTask
	for i := range n + 6 {
		id := fmt.Sprintf("c%03d", i)
		nts = append(nts, norn.NewTask{ID: id, Queue: "q", Spec: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			Labels: map[string]string{"i": fmt.Sprint(i)}, UniqueKey: "u" + id})
	}
	nts = append(nts, norn.NewTask{ID: "z-blocked", Queue: "q", DependsOn: []string{"c005"}})
	if _, err := s.Submit(ctx, nts...); err != nil {
		t.Fatal(err)
	}
	w, err := s.RegisterWorker(ctx, norn.WorkerInfo{Name: "w", Queues: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"q"}, N: 4})
	if err != nil || len(claimed) != 4 {
		t.Fatalf("claim: %d tasks, %v", len(claimed), err)
	}
	ref := func(i int) norn.LeaseRef {
		return norn.LeaseRef{TaskID: claimed[i].ID, Worker: w, Lease: claimed[i].Lease}
	}
	if _, err := s.AppendLog(ctx, ref(0), norn.LogAppend{Data: json.RawMessage(`"step"`)}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		s.Complete(ctx, ref(0), json.RawMessage(`{"ok":true}`)),
		s.Fail(ctx, ref(1), norn.ErrorInfo{Code: "boom"}),
		s.Abort(ctx, ref(2), norn.ErrorInfo{Code: "fatal"}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Cancel(ctx, "c004"); err != nil {
		t.Fatal(err)
	}
	return ref(3)
}

// importInto imports recs into s and finishes the import, as a copy does
// before the destination is used.
func importInto(t *testing.T, s norn.Store, recs []norn.TaskRecord) {
	t.Helper()
	im := s.(norn.TaskImporter)
	if _, err := im.ImportTasks(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	if err := im.FinishImport(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// importRecords reads every task of s whole, with its log, in id order.
func importRecords(t *testing.T, s norn.Store) []norn.TaskRecord {
	t.Helper()
	it, err := s.Stream(context.Background(), norn.Query{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []norn.TaskRecord
	for it.Next() {
		task := it.Item().Clone()
		log, err := s.ReadLog(context.Background(), task.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, norn.TaskRecord{Task: task, Log: log})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func importRecord(t *testing.T, s norn.Store, id string) norn.TaskRecord {
	t.Helper()
	task, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	log, err := s.ReadLog(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return norn.TaskRecord{Task: task, Log: log}
}

func importJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// importRules: what an import skips, refuses and settles at its end.
func importRules(t *testing.T, setup setupFunc) {
	t.Run("SkipsTasksPresentAtTheSameVersion", func(t *testing.T) {
		t.Parallel()
		src, _ := setup(t)
		dst, _ := setup(t)
		importFill(t, src, 10)
		recs := importRecords(t, src)
		im := dst.(norn.TaskImporter)
		importInto(t, dst, recs[:5])
		n, err := im.ImportTasks(context.Background(), recs)
		if err != nil || n != len(recs)-5 {
			t.Fatalf("second import: %d, %v; want %d written", n, err, len(recs)-5)
		}
		if err := im.FinishImport(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := importRecords(t, dst); len(got) != len(recs) {
			t.Fatalf("%d tasks after importing twice, want %d", len(got), len(recs))
		}
	})
	t.Run("AnotherVersionIsAConflictAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		src, _ := setup(t)
		dst, _ := setup(t)
		importFill(t, src, 4)
		recs := importRecords(t, src)
		im := dst.(norn.TaskImporter)
		importInto(t, dst, recs[:1])
		changed := append([]norn.TaskRecord(nil), recs...)
		c := *changed[0].Task
		c.Version++
		changed[0].Task = &c
		if _, err := im.ImportTasks(context.Background(), changed); norn.CodeOf(err) != norn.CodeConflict {
			t.Fatalf("import over another version: %v, want a conflict", err)
		}
		if err := im.FinishImport(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := importRecords(t, dst); len(got) != 1 {
			t.Fatalf("a refused import wrote: %d tasks, want 1", len(got))
		}
	})
	t.Run("RefusesARecordNoStoreCouldHoldAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		src, _ := setup(t)
		dst, _ := setup(t)
		importFill(t, src, 2)
		recs := importRecords(t, src)
		bad := *recs[1].Task
		bad.Queue = "no spaces"
		for _, tc := range []struct {
			rec   norn.TaskRecord
			field string
		}{{norn.TaskRecord{}, "recs[1].task"}, {norn.TaskRecord{Task: &bad}, "recs[1].task.queue"}} {
			_, err := dst.(norn.TaskImporter).ImportTasks(context.Background(), []norn.TaskRecord{recs[0], tc.rec})
			if e, ok := err.(*norn.Error); !ok || e.Code != norn.CodeInvalidArgument || e.Field != tc.field {
				t.Fatalf("import of a bad record: %v, want invalid_argument naming %s", err, tc.field)
			}
		}
		if got := importRecords(t, dst); len(got) != 0 {
			t.Fatalf("a refused import wrote %d tasks", len(got))
		}
	})
	t.Run("FinishReleasesBlockedTasksWhoseDependencyCameLater", func(t *testing.T) {
		t.Parallel()
		src, b := setup(t)
		dst, d := setup(t)
		ctx := context.Background()
		if _, err := src.Submit(ctx, norn.NewTask{ID: "p", Queue: "q"}, norn.NewTask{ID: "child", Queue: "q", DependsOn: []string{"p"}}); err != nil {
			t.Fatal(err)
		}
		child := importRecord(t, src, "child")
		if child.Task.Status != norn.StatusBlocked {
			t.Fatalf("child submitted %s", child.Task.Status)
		}
		w := b.registerWorker(norn.WorkerInfo{Name: "w", Queues: []string{"q"}})
		p := b.claim(w, "q")
		if err := src.Complete(ctx, norn.LeaseRef{TaskID: p.ID, Worker: w, Lease: p.Lease}, nil); err != nil {
			t.Fatal(err)
		}
		// The child as it was before its dependency completed, then the
		// dependency: only FinishImport sees both.
		im := dst.(norn.TaskImporter)
		if _, err := im.ImportTasks(ctx, []norn.TaskRecord{child, importRecord(t, src, "p")}); err != nil {
			t.Fatal(err)
		}
		if err := im.FinishImport(ctx); err != nil {
			t.Fatal(err)
		}
		if got := d.get("child"); got.Status != norn.StatusReady {
			t.Fatalf("child after FinishImport: %s, want ready", got.Status)
		}
	})
}
