package storetest

import (
	"fmt"
	"testing"

	"github.com/nornq/norn"
)

// exerciseBatches: members join a batch at submit until it is sealed; once
// it is sealed and every member ended, on_complete is submitted exactly
// once, and on_success once every member completed.
func exerciseBatches(t *testing.T, setup setupFunc) {
	t.Run("Batch", func(t *testing.T) {
		t.Parallel()
		batchCallbacks(t, setup)
		batchSealing(t, setup)
		batchJoins(t, setup)
		batchReads(t, setup)
	})
}

func newBatch(b *testBundle, nb norn.NewBatch) *norn.BatchCreated {
	b.t.Helper()
	out, err := b.s.CreateBatch(b.ctx, nb)
	b.must(err, "CreateBatch")
	return out
}

func getBatch(b *testBundle, id string) *norn.Batch {
	b.t.Helper()
	out, err := b.s.GetBatch(b.ctx, id)
	b.must(err, "GetBatch %s", id)
	return out
}

// callbacks creates batch id with both callbacks in queue cb.
func callbacks(id string) norn.NewBatch {
	return norn.NewBatch{ID: id, Labels: map[string]string{"team": "a"},
		OnSuccess:  &norn.NewTask{Queue: "cb", Spec: []byte(`{"on":"success"}`), Labels: map[string]string{"k": "v"}},
		OnComplete: &norn.NewTask{Queue: "cb", Spec: []byte(`{"on":"complete"}`)}}
}

// fired asserts which callbacks of batch id exist.
func fired(b *testBundle, id string, complete, success bool) {
	b.t.Helper()
	for _, c := range []struct {
		kind string
		want bool
	}{{norn.CallbackComplete, complete}, {norn.CallbackSuccess, success}} {
		cid := norn.BatchCallbackID(id, c.kind)
		_, err := b.s.Get(b.ctx, cid)
		if got := err == nil; got != c.want {
			b.t.Fatalf("callback %s exists: %v, want %v (err %v)", cid, got, c.want, err)
		}
	}
}

func batchCallbacks(t *testing.T, setup setupFunc) {
	t.Run("FiresBothCallbacksOnceWhenSealedAndAllCompleted", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		newBatch(b, callbacks("b1"))
		b.submit(norn.NewTask{ID: "m1", Queue: "q", Batch: "b1"}, norn.NewTask{ID: "m2", Queue: "q", Batch: "b1"})
		b.submit(norn.NewTask{ID: "m3", Queue: "q", Batch: "b1"})
		for _, id := range []string{"m1", "m2", "m3"} {
			b.complete(b.claimID("w", id, "q"), `{"ok":true}`)
		}
		b.sweep()
		fired(b, "b1", false, false) // open: more members may come
		if g := getBatch(b, "b1"); g.State != norn.BatchOpen || g.Total != 3 || g.Counts[norn.StatusCompleted] != 3 {
			t.Fatalf("open batch %+v, want open with 3 completed", g)
		}
		sealed, err := b.s.SealBatch(b.ctx, "b1")
		b.must(err, "SealBatch")
		if sealed.State != norn.BatchSealed && sealed.State != norn.BatchDone {
			t.Fatalf("sealed batch state %s", sealed.State)
		}
		b.sweep()
		fired(b, "b1", true, true)
		g := getBatch(b, "b1")
		if g.State != norn.BatchDone || g.CompleteTask != norn.BatchCallbackID("b1", "complete") ||
			g.SuccessTask != norn.BatchCallbackID("b1", "success") || g.Final[norn.StatusCompleted] != 3 || g.Done.IsZero() {
			t.Fatalf("done batch %+v", g)
		}
		cb := b.get(g.SuccessTask)
		if cb.Queue != "cb" || cb.Labels[norn.LabelBatch] != "b1" || cb.Labels[norn.LabelCallback] != "success" ||
			cb.Labels[norn.LabelTotal] != "3" || cb.Labels["norn.completed"] != "3" || cb.Labels["norn.aborted"] != "0" || cb.Labels["k"] != "v" {
			t.Fatalf("success callback labels %v", cb.Labels)
		}
		jsonEq(t, "complete callback spec", b.get(g.CompleteTask).Spec, `{"on":"complete"}`)
		// Sweeping again, or sealing again, fires nothing more.
		b.sweep()
		_, err = b.s.SealBatch(b.ctx, "b1")
		b.must(err, "SealBatch again")
		b.sweep()
		b.count(norn.Filter{Queues: []string{"cb"}}, 2)
	})

	t.Run("FiresOnCompleteButNotOnSuccessWhenAMemberFailed", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		newBatch(b, callbacks("b2"))
		b.submit(norn.NewTask{ID: "a-ok", Queue: "q", Batch: "b2"},
			norn.NewTask{ID: "b-bad", Queue: "q", Batch: "b2"},
			norn.NewTask{ID: "c-gone", Queue: "q", Batch: "b2"})
		_, err := b.s.SealBatch(b.ctx, "b2")
		b.must(err, "SealBatch")
		b.complete(b.claimID("w", "a-ok", "q"), "")
		b.abort(b.claimID("w", "b-bad", "q"), "boom")
		b.sweep()
		fired(b, "b2", false, false) // "c-gone" is still pending
		b.cancel("c-gone")
		b.sweep()
		fired(b, "b2", true, false)
		cb := b.get(norn.BatchCallbackID("b2", "complete"))
		if cb.Labels["norn.completed"] != "1" || cb.Labels["norn.aborted"] != "1" || cb.Labels["norn.cancelled"] != "1" {
			t.Fatalf("complete callback labels %v", cb.Labels)
		}
		// A failed member redriven and then completed: on_success fires
		// once, on_complete is not fired again.
		for _, id := range []string{"b-bad", "c-gone"} {
			_, err := b.s.Retry(b.ctx, id, norn.RetryOptions{})
			b.must(err, "Retry %s", id)
		}
		if g := getBatch(b, "b2"); g.State != norn.BatchDone || g.Counts[norn.StatusReady] != 2 {
			t.Fatalf("batch after redrive %+v, want done with 2 ready members", g)
		}
		b.complete(b.claimID("w", "b-bad", "q"), "")
		b.sweep()
		fired(b, "b2", true, false)
		b.complete(b.claimID("w", "c-gone", "q"), "")
		b.sweep()
		fired(b, "b2", true, true)
		b.sweep()
		b.count(norn.Filter{Queues: []string{"cb"}}, 2)
	})

}

func batchJoins(t *testing.T, setup setupFunc) {
	t.Run("RefusesJoinsToUnknownOrSealedBatchesAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		_, err := b.s.Submit(b.ctx, norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q", Batch: "nope"})
		wantField(t, "join of an unknown batch", err, norn.ErrNotFound, "tasks[1].batch")
		b.gone("a")
		newBatch(b, norn.NewBatch{ID: "s", Seal: true})
		_, err = b.s.Submit(b.ctx, norn.NewTask{ID: "c", Queue: "q", Batch: "s"})
		wantField(t, "join of a sealed batch", err, norn.ErrConflict, "tasks[0].batch")
		b.gone("c")
	})

	t.Run("RefusesInvalidBatchesAtCreation", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		for _, c := range []struct {
			name  string
			nb    norn.NewBatch
			field string
		}{
			{"callback queue", norn.NewBatch{ID: "i1", OnComplete: &norn.NewTask{Queue: "bad queue"}}, "on_complete.queue"},
			{"callback id", norn.NewBatch{ID: "i2", OnSuccess: &norn.NewTask{ID: "mine", Queue: "q"}}, "on_success.id"},
			{"callback dependency", norn.NewBatch{ID: "i3", OnSuccess: &norn.NewTask{Queue: "q", DependsOn: []string{"x"}}}, "on_success.depends_on"},
			{"callback label", norn.NewBatch{ID: "i4", OnSuccess: &norn.NewTask{Queue: "q", Labels: map[string]string{norn.LabelBatch: "x"}}}, "on_success.labels"},
			{"member of another batch", norn.NewBatch{ID: "i5", Tasks: []norn.NewTask{{Queue: "q", Batch: "other"}}}, "tasks[0].batch"},
			{"member", norn.NewBatch{ID: "i6", Tasks: []norn.NewTask{{Queue: "q"}, {Queue: ""}}}, "tasks[1].queue"},
			{"id", norn.NewBatch{ID: "a/b"}, "id"},
		} {
			_, err := b.s.CreateBatch(b.ctx, c.nb)
			wantField(t, c.name, err, norn.ErrInvalidArgument, c.field)
			_, err = b.s.GetBatch(b.ctx, c.nb.ID)
			if c.nb.ID != "a/b" {
				wantErr(t, c.name+": the batch after a refused creation", err, norn.ErrNotFound)
			}
		}
		b.count(norn.Filter{Queues: []string{"q"}}, 0)
		newBatch(b, norn.NewBatch{ID: "dup", Tasks: []norn.NewTask{{Queue: "m"}}})
		_, err := b.s.CreateBatch(b.ctx, norn.NewBatch{ID: "dup"})
		wantErr(t, "a second batch with the id", err, norn.ErrConflict)
		// The batch with members exists: the refusal says so, not that
		// its tasks belong to a deleted batch.
		if want := norn.CheckNewBatch("dup", true, 1); err == nil || err.Error() != want.Error() {
			t.Fatalf("a second batch with the id: %v, want %v", err, want)
		}
		_, err = b.s.SealBatch(b.ctx, "missing")
		wantErr(t, "SealBatch of a missing batch", err, norn.ErrNotFound)
	})
}

func batchReads(t *testing.T, setup setupFunc) {
	t.Run("ListsFiltersAndDeletes", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		newBatch(b, norn.NewBatch{ID: "l1", Labels: map[string]string{"team": "a"}})
		newBatch(b, norn.NewBatch{ID: "l2", Labels: map[string]string{"team": "b"}, Seal: true})
		newBatch(b, norn.NewBatch{ID: "l3", Labels: map[string]string{"team": "a"}})
		b.submit(norn.NewTask{ID: "t1", Queue: "q", Batch: "l1"}, norn.NewTask{ID: "t2", Queue: "q", Batch: "l1"},
			norn.NewTask{ID: "t3", Queue: "q", Batch: "l3"}, norn.NewTask{ID: "t4", Queue: "q"})
		ids := func(q norn.BatchQuery) []string {
			bs, err := b.s.ListBatches(b.ctx, q)
			b.must(err, "ListBatches")
			out := []string{}
			for _, x := range bs {
				out = append(out, x.ID)
			}
			return out
		}
		for _, c := range []struct {
			q    norn.BatchQuery
			want string
		}{
			{norn.BatchQuery{}, "[l1 l2 l3]"},
			{norn.BatchQuery{Labels: map[string]string{"team": "a"}}, "[l1 l3]"},
			{norn.BatchQuery{State: norn.BatchOpen}, "[l1 l3]"},
			{norn.BatchQuery{After: "l1", Limit: 1}, "[l2]"},
		} {
			if got := fmtIDs(ids(c.q)); got != c.want {
				t.Fatalf("ListBatches(%+v) = %s, want %s", c.q, got, c.want)
			}
		}
		_, err := b.s.ListBatches(b.ctx, norn.BatchQuery{State: "closed"})
		wantField(t, "ListBatches with an unknown state", err, norn.ErrInvalidArgument, "state")
		page, err := b.s.List(b.ctx, norn.Query{Filter: norn.Filter{Batch: "l1"}})
		b.must(err, "List by batch")
		if len(page.Tasks) != 2 || page.Tasks[0].ID != "t1" || page.Tasks[0].Batch != "l1" {
			t.Fatalf("members of l1: %+v", page.Tasks)
		}
		b.count(norn.Filter{Batch: "l1", Statuses: []norn.Status{norn.StatusReady}}, 2)
		n, err := b.s.DeleteBatch(b.ctx, "l1", false)
		b.must(err, "DeleteBatch")
		if n != 0 {
			t.Fatalf("DeleteBatch without members deleted %d", n)
		}
		b.status("t1", norn.StatusReady)
		_, err = b.s.GetBatch(b.ctx, "l1")
		wantErr(t, "GetBatch after delete", err, norn.ErrNotFound)
		// Its members still name it: a new batch may not take the id.
		_, err = b.s.CreateBatch(b.ctx, norn.NewBatch{ID: "l1"})
		wantErr(t, "a batch over a deleted one's members", err, norn.ErrConflict)
		n, err = b.s.DeleteBatch(b.ctx, "l3", true)
		b.must(err, "DeleteBatch with members")
		if n != 1 {
			t.Fatalf("DeleteBatch with members deleted %d, want 1", n)
		}
		b.gone("t3")
		b.status("t4", norn.StatusReady)
		_, err = b.s.DeleteBatch(b.ctx, "l3", false)
		wantErr(t, "DeleteBatch of a missing batch", err, norn.ErrNotFound)
	})
}

func fmtIDs(ids []string) string { return fmt.Sprint(ids) }

// batchSealing: batches created sealed, empty ones, and members deleted.
func batchSealing(t *testing.T, setup setupFunc) {
	t.Run("CreatedSealedWithItsMembers", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		nb := callbacks("b3")
		nb.Seal = true
		nb.Tasks = []norn.NewTask{{ID: "x", Queue: "q"}, {ID: "y", Queue: "q", DependsOn: []string{"x"}}}
		out := newBatch(b, nb)
		if out.Batch.State != norn.BatchSealed || out.Batch.Total != 2 || len(out.Tasks) != 2 || out.Tasks[1].Task.Batch != "b3" {
			t.Fatalf("created %+v", out)
		}
		_, err := b.s.Submit(b.ctx, norn.NewTask{Queue: "q", Batch: "b3"})
		wantField(t, "join of a sealed batch", err, norn.ErrConflict, "tasks[0].batch")
		b.complete(b.claimID("w", "x", "q"), "")
		b.complete(b.claimID("w", "y", "q"), "")
		b.sweep()
		fired(b, "b3", true, true)
	})

	t.Run("AnEmptySealedBatchIsDoneAtOnce", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		nb := callbacks("b4")
		nb.Seal = true
		newBatch(b, nb)
		b.sweep()
		fired(b, "b4", true, true)
		if g := getBatch(b, "b4"); g.State != norn.BatchDone || g.Total != 0 {
			t.Fatalf("empty batch %+v", g)
		}
	})

	t.Run("DeletingAPendingMemberCountsAsItsEnd", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		newBatch(b, callbacks("b5"))
		b.submit(norn.NewTask{ID: "d1", Queue: "q", Batch: "b5"}, norn.NewTask{ID: "d2", Queue: "q", Batch: "b5"})
		_, err := b.s.SealBatch(b.ctx, "b5")
		b.must(err, "SealBatch")
		b.complete(b.claimID("w", "d1", "q"), "")
		b.delete("d2")
		b.sweep()
		fired(b, "b5", true, true)
		if g := getBatch(b, "b5"); g.Final[norn.StatusCompleted] != 1 || g.Total != 1 {
			t.Fatalf("batch %+v, want one completed member", g)
		}
	})
}
