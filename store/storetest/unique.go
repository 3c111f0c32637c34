package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func exerciseUnique(t *testing.T, setup setupFunc) {
	t.Run("Unique", func(t *testing.T) {
		t.Parallel()
		exerciseUniqueHolders(t, setup)
		exerciseUniqueBatchesAndIDs(t, setup)
		exerciseUniqueDeletesAndConcurrency(t, setup)
	})
}

func exerciseUniqueHolders(t *testing.T, setup setupFunc) {
	t.Run("SecondSubmitReturnsTheLiveTask", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		first := b.submitOne(uniqKeyed("a", "user-42"))
		if first.UniqueKey != "user-42" {
			t.Fatalf("submitted task: unique_key %q, want user-42", first.UniqueKey)
		}
		res := uniqDupOf(b, "a", uniqKeyed("b", "user-42"))
		sameTask(t, "duplicate", b.get("a"), res[0].Task)
		b.gone("b")
		b.count(norn.Filter{Queues: []string{"q"}}, 1)
	})

	t.Run("GeneratedIDDuplicateReturnsTheHolder", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		first := b.submitOne(norn.NewTask{Queue: "q", UniqueKey: "k"})
		uniqDupOf(b, first.ID, norn.NewTask{Queue: "q", UniqueKey: "k", Priority: 9})
		if g := b.get(first.ID); g.Priority != 0 {
			t.Fatalf("the duplicate changed the holder: priority %d", g.Priority)
		}
	})

	t.Run("HoldsWhileNotTerminal", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "dep", Queue: "other"})
		b.submit(
			norn.NewTask{ID: "scheduled", Queue: "q", UniqueKey: "s", Delay: dur(time.Hour)},
			norn.NewTask{ID: "blocked", Queue: "q", UniqueKey: "b", DependsOn: []string{"dep"}},
			norn.NewTask{ID: "running", Queue: "q", UniqueKey: "r"},
		)
		b.claimID("w", "running", "q")
		uniqDupOf(b, "scheduled", uniqKeyed("", "s"))
		uniqDupOf(b, "blocked", uniqKeyed("", "b"))
		uniqDupOf(b, "running", uniqKeyed("", "r"))
	})

	t.Run("EndedHolderFreesTheKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		for _, end := range []string{"completed", "aborted", "cancelled"} {
			key := "k-" + end
			b.submitOne(uniqKeyed(end, key))
			switch end {
			case "completed":
				b.complete(b.claimID("w", end, "q"), "")
			case "aborted":
				b.abort(b.claimID("w", end, "q"), "bad")
			case "cancelled":
				b.cancel(end)
			}
			b.clock.Advance(time.Millisecond)
			if n := b.submitOne(uniqKeyed(end+"-again", key)); n.Status != norn.StatusReady {
				t.Fatalf("after the holder %s: new task %s", end, canonTask(n))
			}
		}
	})

	t.Run("UniqueForHoldsWithinTheWindowAfterTheEnd", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(uniqKeyed("a", "k"))
		b.complete(b.claimID("w", "a", "q"), "")
		window := norn.NewTask{Queue: "q", UniqueKey: "k", UniqueFor: dur(time.Minute)}
		b.clock.Advance(time.Minute - time.Millisecond)
		uniqDupOf(b, "a", window)
		// unique_for after the end, it no longer holds.
		b.clock.Advance(time.Millisecond)
		if n := b.submitOne(window); n.ID == "a" {
			t.Fatalf("a minute after the end: still a duplicate")
		}
	})

	t.Run("UniqueForReturnsTheTaskThatEndedLast", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(uniqKeyed("a", "k"))
		b.complete(b.claimID("w", "a", "q"), "")
		b.clock.Advance(time.Second)
		b.submitOne(uniqKeyed("b", "k"))
		b.cancel("b")
		b.clock.Advance(time.Second)
		uniqDupOf(b, "b", norn.NewTask{Queue: "q", UniqueKey: "k", UniqueFor: dur(time.Hour)})
	})
}

func exerciseUniqueBatchesAndIDs(t *testing.T, setup setupFunc) {
	t.Run("WithoutUniqueForAnEndedTaskDoesNotHold", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(uniqKeyed("a", "k"))
		b.cancel("a")
		b.submitOne(uniqKeyed("b", "k"))
	})

	t.Run("KeysArePerQueue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(
			norn.NewTask{ID: "a", Queue: "q1", UniqueKey: "k"},
			norn.NewTask{ID: "b", Queue: "q2", UniqueKey: "k"},
		)
		uniqDupOf(b, "b", norn.NewTask{Queue: "q2", UniqueKey: "k"})
	})

	t.Run("TasksWithoutKeysAreNeverDuplicates", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(uniqKeyed("a", "k"))
		b.submit(norn.NewTask{Queue: "q"}, norn.NewTask{Queue: "q"})
	})

	t.Run("SameKeyTwiceInOneBatch", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		res, err := b.s.Submit(b.ctx, uniqKeyed("a", "k"), uniqKeyed("b", "k"), norn.NewTask{ID: "c", Queue: "q", UniqueKey: "other"})
		b.must(err, "Submit")
		if res[0].Duplicate || res[1].Task.ID != "a" || !res[1].Duplicate || res[2].Duplicate {
			t.Fatalf("batch results: %s %v, %s %v, %s %v", taskID(res[0].Task), res[0].Duplicate,
				taskID(res[1].Task), res[1].Duplicate, taskID(res[2].Task), res[2].Duplicate)
		}
		sameTask(t, "in-batch duplicate", res[0].Task, res[1].Task)
		b.gone("b")
		b.count(norn.Filter{UniqueKey: "k"}, 1)
	})

	t.Run("BatchMixesDuplicatesAndNewTasks", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(uniqKeyed("held", "k1"))
		res, err := b.s.Submit(b.ctx, uniqKeyed("x", "k1"), uniqKeyed("y", "k2"), norn.NewTask{ID: "z", Queue: "q", DependsOn: []string{"y"}})
		b.must(err, "Submit")
		if !res[0].Duplicate || res[0].Task.ID != "held" || res[1].Duplicate || res[2].Duplicate {
			t.Fatalf("results: %s %v, %s %v, %s %v", taskID(res[0].Task), res[0].Duplicate,
				taskID(res[1].Task), res[1].Duplicate, taskID(res[2].Task), res[2].Duplicate)
		}
		b.status("z", norn.StatusBlocked)
		b.gone("x")
	})

	t.Run("TransactSubmitsAreDeduplicated", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(uniqKeyed("held", "k1"))
		res, err := s.Transact(b.ctx, norn.Txn{Submit: []norn.NewTask{uniqKeyed("x", "k1"), uniqKeyed("y", "k2"), uniqKeyed("z", "k2")}})
		b.must(err, "Transact")
		got := res.Submitted
		if len(got) != 3 || !got[0].Duplicate || got[0].Task.ID != "held" || got[1].Duplicate || got[1].Task.ID != "y" ||
			!got[2].Duplicate || got[2].Task.ID != "y" {
			t.Fatalf("transaction results: %+v", got)
		}
		b.gone("x")
		b.gone("z")
	})

	t.Run("ExistingIDDecidesBeforeTheKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(uniqKeyed("a", "k1"), uniqKeyed("b", "k2"))
		// Submitting "b" again with a's key is a duplicate of b (by id), not of a.
		uniqDupOf(b, "b", uniqKeyed("b", "k1"))
	})

	t.Run("IDOfAnotherQueueIsStillAConflict", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q", UniqueKey: "k"}, norn.NewTask{ID: "o", Queue: "other"})
		before := b.snapshot()
		_, err := s.Submit(b.ctx, norn.NewTask{ID: "o", Queue: "q", UniqueKey: "k"})
		wantField(t, "Submit", err, norn.ErrConflict, "tasks[0].id")
		b.unchanged("conflicting submit", before)
	})
}

func exerciseUniqueDeletesAndConcurrency(t *testing.T, setup setupFunc) {
	t.Run("DeletedHolderFreesTheKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submitOne(uniqKeyed("a", "k"))
		b.delete("a")
		b.submitOne(uniqKeyed("b", "k"))
		b.cancel("b")
		b.delete("b")
		b.submitOne(norn.NewTask{ID: "c", Queue: "q", UniqueKey: "k", UniqueFor: dur(time.Hour)})
	})

	t.Run("DependencyOnADuplicateThatWasNotCreatedIsRefused", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submitOne(uniqKeyed("held", "k"))
		before := b.snapshot()
		_, err := s.Submit(b.ctx, uniqKeyed("dup", "k"), norn.NewTask{Queue: "q", DependsOn: []string{"dup"}})
		wantField(t, "Submit", err, norn.ErrInvalidArgument, "tasks[1].depends_on[0]")
		b.unchanged("refused batch", before)
	})

	t.Run("FilterByUniqueKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(uniqKeyed("a", "k"), norn.NewTask{ID: "b", Queue: "q2", UniqueKey: "k"}, uniqKeyed("c", "other"), norn.NewTask{ID: "d", Queue: "q"})
		b.cancel("a")
		b.submitOne(uniqKeyed("e", "k"))
		eqStrings(t, "List unique_key=k", sortedIDs(b.listAll(norn.Query{Filter: norn.Filter{UniqueKey: "k"}})), []string{"a", "b", "e"})
		eqStrings(t, "List unique_key=k queue=q", sortedIDs(b.listAll(norn.Query{Filter: norn.Filter{UniqueKey: "k", Queues: []string{"q"}},
			Summary: true, Order: norn.OrderPriority})), []string{"a", "e"})
		b.count(norn.Filter{UniqueKey: "k", Statuses: []norn.Status{norn.StatusReady}}, 2)
		for _, tk := range b.listAll(norn.Query{Filter: norn.Filter{UniqueKey: "k"}, Summary: true}) {
			if tk.UniqueKey != "k" {
				t.Fatalf("summary of %q: unique_key %q", tk.ID, tk.UniqueKey)
			}
		}
	})

	t.Run("ConcurrentSubmittersCreateOne", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		const n = 16
		for round, nt := range []norn.NewTask{
			{Queue: "q", UniqueKey: "live"},
			{Queue: "q", UniqueKey: "window", UniqueFor: dur(time.Hour)},
		} {
			res := make([]norn.Submitted, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Go(func() {
					<-start
					r, err := s.Submit(b.ctx, nt)
					if err == nil {
						res[i] = r[0]
					}
					errs[i] = err
				})
			}
			close(start)
			wg.Wait()
			created := 0
			for i := range n {
				b.must(errs[i], "round %d: concurrent Submit %d", round, i)
				if !res[i].Duplicate {
					created++
				}
				if res[i].Task.ID != res[0].Task.ID {
					t.Fatalf("round %d: submitters got different tasks %q and %q", round, res[0].Task.ID, res[i].Task.ID)
				}
			}
			if created != 1 {
				t.Fatalf("round %d: %d of %d concurrent submitters created a task, want 1", round, created, n)
			}
			b.count(norn.Filter{UniqueKey: nt.UniqueKey}, 1)
		}
	})
}

// dupOf submits nt and checks it came back as a duplicate of id.
func uniqDupOf(b *testBundle, id string, nts ...norn.NewTask) []norn.Submitted {
	b.t.Helper()
	res, err := b.s.Submit(b.ctx, nts...)
	b.must(err, "Submit")
	for i, r := range res {
		if !r.Duplicate || r.Task == nil || r.Task.ID != id {
			b.t.Fatalf("Submit result %d: duplicate=%v task %s; want a duplicate of %q", i, r.Duplicate, taskID(r.Task), id)
		}
	}
	return res
}

func uniqKeyed(id, key string) norn.NewTask { return norn.NewTask{ID: id, Queue: "q", UniqueKey: key} }

func taskID(tk *norn.Task) string {
	if tk == nil {
		return "<nil>"
	}
	return tk.ID
}
