package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseSequences: members of a sequence run one at a time, in submit
// order whatever their priority; a retrying head holds the sequence; an
// aborted head halts it until retried or deleted (or the queue continues).
func exerciseSequences(t *testing.T, setup setupFunc) {
	t.Run("Sequences", func(t *testing.T) {
		t.Parallel()
		sequenceOrder(t, setup)
		sequenceFailures(t, setup)
		sequenceLeaving(t, setup)
		sequenceOperations(t, setup)
		sequenceEdges(t, setup)
	})
}

func sequenceOrder(t *testing.T, setup setupFunc) {
	t.Run("RunInSubmitOrderOneAtATime", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(
			norn.NewTask{ID: "a1", Queue: "q", SequenceKey: "a", Priority: 1},
			norn.NewTask{ID: "a2", Queue: "q", SequenceKey: "a", Priority: 9},
			norn.NewTask{ID: "b1", Queue: "q", SequenceKey: "b"},
		)
		b.submit(norn.NewTask{ID: "a3", Queue: "q", SequenceKey: "a", Priority: 5}, norn.NewTask{ID: "free", Queue: "q"})
		if g := b.status("a2", norn.StatusBlocked); g.SequenceKey != "a" {
			t.Fatalf("a2's sequence_key %q, want a", g.SequenceKey)
		}
		b.status("a3", norn.StatusBlocked)
		wantSequence(t, b, "q", "a", norn.SequenceInfo{Head: "a1", HeadStatus: norn.StatusReady, Waiting: 2})
		// The heads of both keys and the task without one are claimable;
		// a2 and a3 are not, though their priority is higher.
		got := sortedIDs(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10}))
		eqStrings(t, "first claim", got, []string{"a1", "b1", "free"})
		b.complete(b.get("a1"), "")
		lastHistory(t, b.status("a2", norn.StatusReady), norn.TaskRelease, b.now())
		b.status("a3", norn.StatusBlocked)
		b.complete(b.claimID("w", "a2", "q"), "")
		b.complete(b.claimID("w", "a3", "q"), "")
		wantSequence(t, b, "q", "a", norn.SequenceInfo{})
		// The next member of a sequence without a head is the head at once.
		b.submit(norn.NewTask{ID: "a4", Queue: "q", SequenceKey: "a"})
		b.status("a4", norn.StatusReady)
	})
}

func sequenceFailures(t *testing.T, setup setupFunc) {
	t.Run("ARetryingHeadHoldsTheSequence", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		pol := &norn.RetryPolicy{MaxRetries: 2, Base: dur(time.Second)}
		b.submit(norn.NewTask{ID: "h", Queue: "q", SequenceKey: "k", Retry: pol}, norn.NewTask{ID: "n", Queue: "q", SequenceKey: "k"})
		b.fail(b.claimID("w", "h", "q"), "boom")
		b.status("h", norn.StatusScheduled)
		b.status("n", norn.StatusBlocked)
		b.claimNone("q")
		b.advance(time.Minute)
		b.complete(b.claimID("w", "h", "q"), "")
		b.status("n", norn.StatusReady)
	})

	t.Run("AnAbortedHeadHaltsUntilRetried", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", SequenceKey: "k"}, norn.NewTask{ID: "n", Queue: "q", SequenceKey: "k"})
		b.abort(b.claimID("w", "h", "q"), "bad")
		b.status("n", norn.StatusBlocked)
		wantSequence(t, b, "q", "k", norn.SequenceInfo{Head: "h", HeadStatus: norn.StatusAborted, Halted: true, Waiting: 1})
		b.claimNone("q")
		_, err := b.s.Retry(b.ctx, "h", norn.RetryOptions{})
		b.must(err, "Retry(h)")
		wantSequence(t, b, "q", "k", norn.SequenceInfo{Head: "h", HeadStatus: norn.StatusReady, Waiting: 1})
		b.complete(b.claimID("w", "h", "q"), "")
		b.status("n", norn.StatusReady)
	})

	t.Run("DeletingAHaltedHeadMovesOn", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", SequenceKey: "k"}, norn.NewTask{ID: "n", Queue: "q", SequenceKey: "k"})
		b.abort(b.claimID("w", "h", "q"), "bad")
		b.delete("h")
		b.status("n", norn.StatusReady)
		wantSequence(t, b, "q", "k", norn.SequenceInfo{Head: "n", HeadStatus: norn.StatusReady})
	})

	t.Run("AQueueThatContinuesPassesAnAbortedHead", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		q, err := s.UpdateQueue(b.ctx, "cq", norn.QueueUpdate{SequenceOnFailure: ptr(norn.SequenceContinue)})
		b.must(err, "UpdateQueue")
		if q.Defaults.SequenceOnFailure != norn.SequenceContinue {
			t.Fatalf("queue defaults %+v, want sequence_on_failure continue", q.Defaults)
		}
		b.submit(norn.NewTask{ID: "h", Queue: "cq", SequenceKey: "k"}, norn.NewTask{ID: "n", Queue: "cq", SequenceKey: "k"})
		b.abort(b.claimID("w", "h", "cq"), "bad")
		b.status("n", norn.StatusReady)
		wantSequence(t, b, "cq", "k", norn.SequenceInfo{Head: "n", HeadStatus: norn.StatusReady})
	})

}

func sequenceLeaving(t *testing.T, setup setupFunc) {
	t.Run("CancellingOrExpiringAWaitingMemberKeepsTheHead", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(
			norn.NewTask{ID: "h", Queue: "q", SequenceKey: "k"},
			norn.NewTask{ID: "c", Queue: "q", SequenceKey: "k"},
			norn.NewTask{ID: "e", Queue: "q", SequenceKey: "k", ExpireIn: dur(time.Minute)},
			norn.NewTask{ID: "d", Queue: "q", SequenceKey: "k"},
			norn.NewTask{ID: "last", Queue: "q", SequenceKey: "k"},
		)
		hd := b.claimID("w", "h", "q")
		b.cancel("c")
		b.delete("d")
		b.heartbeat(hd, norn.Heartbeat{Extend: dur(time.Hour)})
		b.advance(2 * time.Minute)
		b.status("e", norn.StatusAborted)
		b.status("last", norn.StatusBlocked)
		wantSequence(t, b, "q", "k", norn.SequenceInfo{Head: "h", HeadStatus: norn.StatusRunning, Waiting: 1})
		b.complete(hd, "")
		b.status("last", norn.StatusReady)
	})

	t.Run("CancellingTheHeadMovesOn", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", SequenceKey: "k", Delay: dur(time.Hour)},
			norn.NewTask{ID: "n", Queue: "q", SequenceKey: "k"})
		b.status("h", norn.StatusScheduled)
		b.cancel("h")
		b.status("n", norn.StatusReady)
	})

	t.Run("APromotedMemberKeepsItsDelay", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", SequenceKey: "k"},
			norn.NewTask{ID: "n", Queue: "q", SequenceKey: "k", Delay: dur(time.Hour)})
		b.complete(b.claimID("w", "h", "q"), "")
		b.status("n", norn.StatusScheduled)
		b.advance(time.Hour)
		b.status("n", norn.StatusReady)
	})

	t.Run("RetryOfAMemberBesideALiveHeadIsRefused", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", SequenceKey: "k"}, norn.NewTask{ID: "c", Queue: "q", SequenceKey: "k"})
		b.cancel("c")
		_, err := b.s.Retry(b.ctx, "c", norn.RetryOptions{})
		wantErr(t, "Retry of a member beside a live head", err, norn.ErrConflict)
		b.status("c", norn.StatusCancelled)
		// Once the sequence has no head, the member comes back as it.
		b.complete(b.claimID("w", "h", "q"), "")
		_, err = b.s.Retry(b.ctx, "c", norn.RetryOptions{})
		b.must(err, "Retry(c)")
		wantSequence(t, b, "q", "k", norn.SequenceInfo{Head: "c", HeadStatus: norn.StatusReady})
		b.submit(norn.NewTask{ID: "after", Queue: "q", SequenceKey: "k"})
		b.status("after", norn.StatusBlocked)
	})
}

func sequenceOperations(t *testing.T, setup setupFunc) {
	t.Run("ManyKeysKeepTheirOrder", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		const keys, per = 8, 12
		var nts []norn.NewTask
		for i := range per {
			for k := range keys {
				nts = append(nts, norn.NewTask{ID: fmt.Sprintf("k%d-%02d", k, i), Queue: "q",
					SequenceKey: fmt.Sprintf("k%d", k), Priority: uint32((i * 7) % 5)})
			}
		}
		b.submit(nts...)
		next := map[string]int{}
		for done := 0; done < keys*per; {
			got := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 100})
			if len(got) != keys {
				t.Fatalf("claim %d: %d tasks (%v), want one per key (%d)", done, len(got), ids(got), keys)
			}
			for _, tk := range got {
				want := fmt.Sprintf("%s-%02d", tk.SequenceKey, next[tk.SequenceKey])
				if tk.ID != want {
					t.Fatalf("claimed %q of sequence %s, want %q", tk.ID, tk.SequenceKey, want)
				}
				next[tk.SequenceKey]++
				b.complete(tk, "")
				done++
			}
			if done == keys*per {
				break
			}
		}
	})
}

func sequenceEdges(t *testing.T, setup setupFunc) {
	t.Run("ListsSequencesWithAHead", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(
			norn.NewTask{ID: "b1", Queue: "q", SequenceKey: "b"}, norn.NewTask{ID: "b2", Queue: "q", SequenceKey: "b"},
			norn.NewTask{ID: "a1", Queue: "q", SequenceKey: "a"},
			norn.NewTask{ID: "c1", Queue: "q", SequenceKey: "c", Priority: 5}, norn.NewTask{ID: "c2", Queue: "q", SequenceKey: "c"},
			norn.NewTask{ID: "done", Queue: "q", SequenceKey: "d", Priority: 9},
			norn.NewTask{ID: "other", Queue: "o", SequenceKey: "a"},
		)
		b.complete(b.claimID("w", "done", "q"), "") // its sequence is left without a head
		list := func(q norn.SequenceQuery) []string {
			t.Helper()
			got, err := s.Sequences(b.ctx, "q", q)
			b.must(err, "Sequences(%+v)", q)
			var keys []string
			for _, g := range got {
				keys = append(keys, g.Key+":"+g.Head)
			}
			return keys
		}
		eqStrings(t, "every sequence with a head", list(norn.SequenceQuery{}), []string{"a:a1", "b:b1", "c:c1"})
		eqStrings(t, "a page", list(norn.SequenceQuery{After: "a", Limit: 1}), []string{"b:b1"})
		b.abort(b.claimID("w", "c1", "q"), "bad")
		eqStrings(t, "halted only", list(norn.SequenceQuery{Halted: true}), []string{"c:c1"})
		_, err := s.Sequences(b.ctx, "q", norn.SequenceQuery{Limit: 5000})
		wantField(t, "a limit too large", err, norn.ErrInvalidArgument, "limit")
	})

	t.Run("DeletingOrCancellingEveryMemberAtOnce", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		var nts []norn.NewTask
		for i := range 12 {
			nts = append(nts, norn.NewTask{ID: fmt.Sprintf("d%02d", i), Queue: "dq", SequenceKey: "k"},
				norn.NewTask{ID: fmt.Sprintf("c%02d", i), Queue: "cq", SequenceKey: "k"})
		}
		b.submit(nts...)
		n, err := s.DeleteMatching(b.ctx, norn.Filter{Queues: []string{"dq"}})
		b.must(err, "DeleteMatching")
		if n != 12 {
			t.Fatalf("DeleteMatching deleted %d, want all 12 members", n)
		}
		b.count(norn.Filter{Queues: []string{"dq"}}, 0)
		wantSequence(t, b, "dq", "k", norn.SequenceInfo{})
		n, err = s.CancelMatching(b.ctx, norn.Filter{Queues: []string{"cq"}})
		b.must(err, "CancelMatching")
		if n != 12 {
			t.Fatalf("CancelMatching cancelled %d, want all 12 members", n)
		}
		b.count(norn.Filter{Queues: []string{"cq"}, Statuses: []norn.Status{norn.StatusCancelled}}, 12)
		wantSequence(t, b, "cq", "k", norn.SequenceInfo{})
	})

	t.Run("ATransactionCancelsTheHeadAndUpdatesTheNext", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", SequenceKey: "k"}, norn.NewTask{ID: "n", Queue: "q", SequenceKey: "k"})
		_, err := s.Transact(b.ctx, norn.Txn{Cancel: []string{"h"}, Update: []norn.TxnUpdate{{ID: "n", Update: norn.Update{Priority: ptr(uint32(5))}}}})
		b.must(err, "Transact")
		b.status("h", norn.StatusCancelled)
		if n := b.status("n", norn.StatusReady); n.Priority != 5 {
			t.Fatalf("next member's priority %d, want 5", n.Priority)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "dep", Queue: "q"})
		before := b.snapshot()
		_, err := s.Submit(b.ctx, norn.NewTask{Queue: "q"}, norn.NewTask{Queue: "q", SequenceKey: "k", DependsOn: []string{"dep"}})
		wantField(t, "a sequence member with depends_on", err, norn.ErrInvalidArgument, "tasks[1].sequence_key")
		_, err = s.Submit(b.ctx, norn.NewTask{Queue: "q", SequenceKey: "bad\nkey"})
		wantField(t, "a sequence key with a newline", err, norn.ErrInvalidArgument, "tasks[0].sequence_key")
		_, err = s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{SequenceOnFailure: ptr("skip")})
		wantField(t, "an unknown sequence_on_failure", err, norn.ErrInvalidArgument, "sequence_on_failure")
		b.unchanged("after refused sequence input", before)
		_, err = s.Sequence(b.ctx, "q", "")
		wantField(t, "an empty sequence key", err, norn.ErrInvalidArgument, "key")
	})
}

// wantSequence asserts a sequence's state (queue and key are filled in).
func wantSequence(t *testing.T, b *testBundle, queue, key string, want norn.SequenceInfo) {
	t.Helper()
	got, err := b.s.Sequence(b.ctx, queue, key)
	b.must(err, "Sequence(%s, %s)", queue, key)
	want.Queue, want.Key = queue, key
	if got != want {
		t.Fatalf("Sequence(%s, %s) = %+v, want %+v", queue, key, got, want)
	}
}
