package storetest

import (
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseGroupClaims: a claim with group_by answers with the tasks of one
// group only (tasks sharing a concurrency key or a label's value): the
// group of the first task in claim order whose group has min ready tasks,
// or whose task ready longest has waited linger; every flow limit still
// holds. Run inside BatchClaims.
func exerciseGroupClaims(t *testing.T, setup setupFunc) {
	// Tasks submitted at one instant go in claim order by id.
	keyed := func(id, key string) norn.NewTask { return norn.NewTask{ID: id, Queue: "q", ConcurrencyKey: key} }
	tenant := func(id, tenant, key string) norn.NewTask {
		nt := norn.NewTask{ID: id, Queue: "q", ConcurrencyKey: key}
		if tenant != "" {
			nt.Labels = map[string]string{"tenant": tenant}
		}
		return nt
	}
	group := func(by string, min, n int) norn.ClaimRequest {
		return norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n, Min: min, GroupBy: by}
	}

	t.Run("GroupByConcurrencyKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(keyed("1x", "x"), keyed("2y", "y"), keyed("3x", "x"), keyed("4", ""), keyed("5y", "y"))
		req := group(norn.FairByConcurrencyKey, 0, 10)
		// Without min, every answer is the group of the first task in
		// claim order; tasks without a key are a group of their own.
		eqStrings(t, "first claim", ids(b.claimReq(req)), []string{"1x", "3x"})
		eqStrings(t, "second claim", ids(b.claimReq(req)), []string{"2y", "5y"})
		eqStrings(t, "third claim", ids(b.claimReq(req)), []string{"4"})
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("claim of an empty queue: %v", ids(got))
		}
	})

	t.Run("GroupByLabel", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		// The label groups, whatever the concurrency keys.
		b.submit(tenant("1", "acme", "k1"), tenant("2", "", "k1"), tenant("3", "bolt", "k2"),
			tenant("4", "acme", "k2"), tenant("5", "", ""))
		req := group("label:tenant", 0, 10)
		eqStrings(t, "first claim", ids(b.claimReq(req)), []string{"1", "4"})
		eqStrings(t, "second claim", ids(b.claimReq(req)), []string{"2", "5"})
		eqStrings(t, "third claim", ids(b.claimReq(req)), []string{"3"})
	})

	t.Run("GroupByALabelsCurrentValue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(tenant("1", "acme", ""), tenant("2", "bolt", ""), tenant("3", "acme", ""))
		b.update("3", norn.Update{Labels: map[string]string{"tenant": "bolt"}})
		eqStrings(t, "claim", ids(b.claimReq(group("label:tenant", 2, 10))), []string{"2", "3"})
	})

	t.Run("GroupByTheLabelAQueueIsFairBy", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{FairBy: ptr("label:tenant")})
		b.must(err, "UpdateQueue")
		b.submit(tenant("1", "acme", ""), tenant("2", "bolt", ""), tenant("3", "acme", ""), tenant("4", "bolt", ""),
			tenant("5", "bolt", ""))
		req := group("label:tenant", 3, 10)
		eqStrings(t, "the group with min", ids(b.claimReq(req)), []string{"2", "4", "5"})
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("claim with 2 of min 3 ready: %v", ids(got))
		}
		// And by concurrency key in a queue fair by a label.
		b.submit(tenant("6", "acme", "k"), tenant("7", "bolt", "k"))
		eqStrings(t, "by concurrency key", ids(b.claimReq(group(norn.FairByConcurrencyKey, 0, 10))), []string{"1", "3"})
	})

	t.Run("GroupWaitsForMin", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(keyed("1x", "x"), keyed("2y", "y"), keyed("3x", "x"), keyed("4y", "y"), keyed("5y", "y"))
		req := group(norn.FairByConcurrencyKey, 3, 10)
		// x comes first in claim order but has 2 of 3: y answers.
		eqStrings(t, "claim", ids(b.claimReq(req)), []string{"2y", "4y", "5y"})
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("claim with 2 of min 3 ready in the only group: %v", ids(got))
		}
		b.submit(keyed("6x", "x"))
		eqStrings(t, "claim once x has 3", ids(b.claimReq(req)), []string{"1x", "3x", "6x"})
	})

	t.Run("GroupCountsAcrossQueues", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "1", Queue: "q", ConcurrencyKey: "x"}, norn.NewTask{ID: "2", Queue: "r", ConcurrencyKey: "x"},
			norn.NewTask{ID: "3", Queue: "r", ConcurrencyKey: "y"})
		req := norn.ClaimRequest{Worker: "w", Queues: []string{"q", "r"}, N: 10, Min: 2, GroupBy: norn.FairByConcurrencyKey}
		eqStrings(t, "claim", ids(b.claimReq(req)), []string{"1", "2"})
	})

	t.Run("GroupLingerAnswersAlone", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(keyed("x1", "x"))
		b.advance(5 * time.Second)
		b.submit(keyed("y1", "y"))
		req := group(norn.FairByConcurrencyKey, 3, 10)
		req.Linger = dur(10 * time.Second)
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("claim while every group lingers: %v", ids(got))
		}
		b.advance(5 * time.Second)
		eqStrings(t, "claim after x's linger", ids(b.claimReq(req)), []string{"x1"})
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("claim while y lingers: %v", ids(got))
		}
		b.advance(5 * time.Second)
		eqStrings(t, "claim after y's linger", ids(b.claimReq(req)), []string{"y1"})
	})

	t.Run("GroupKeepsLimits", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{KeyLimit: ptr(2)})
		b.must(err, "UpdateQueue")
		b.submit(keyed("1x", "x"), keyed("2x", "x"), keyed("3x", "x"), keyed("4x", "x"), keyed("5y", "y"))
		req := group(norn.FairByConcurrencyKey, 3, 10)
		// x has min ready, but its key limit lets two run: fewer, never more.
		eqStrings(t, "claim", ids(b.claimReq(req)), []string{"1x", "2x"})
		// x is at its limit: its tasks cannot be taken, so x cannot answer.
		eqStrings(t, "claim while x is at its limit", ids(b.claimReq(group(norn.FairByConcurrencyKey, 0, 10))), []string{"5y"})

		_, err = s.UpdateQueue(b.ctx, "r", norn.QueueUpdate{MaxRunning: ptr(1)})
		b.must(err, "UpdateQueue")
		b.submit(norn.NewTask{ID: "6z", Queue: "r", ConcurrencyKey: "z"}, norn.NewTask{ID: "7z", Queue: "r", ConcurrencyKey: "z"})
		eqStrings(t, "claim under max_running", ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"r"}, N: 10, Min: 2,
			GroupBy: norn.FairByConcurrencyKey})), []string{"6z"})

		_, err = s.UpdateQueue(b.ctx, "s", norn.QueueUpdate{RateLimit: &norn.RateLimit{PerSecond: 1, Burst: 2}})
		b.must(err, "UpdateQueue")
		b.submit(norn.NewTask{ID: "8w", Queue: "s", ConcurrencyKey: "w"}, norn.NewTask{ID: "9w", Queue: "s", ConcurrencyKey: "w"},
			norn.NewTask{ID: "a0w", Queue: "s", ConcurrencyKey: "w"})
		rated := norn.ClaimRequest{Worker: "w", Queues: []string{"s"}, N: 10, Min: 3, GroupBy: norn.FairByConcurrencyKey}
		eqStrings(t, "claim under a rate limit of burst 2", ids(b.claimReq(rated)), []string{"8w", "9w"})
	})

	t.Run("GroupSkipsPausedQueues", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "1", Queue: "paused", ConcurrencyKey: "x"}, norn.NewTask{ID: "2", Queue: "q", ConcurrencyKey: "x"})
		_, err := s.UpdateQueue(b.ctx, "paused", norn.QueueUpdate{Paused: ptr(true)})
		b.must(err, "UpdateQueue")
		req := norn.ClaimRequest{Worker: "w", Queues: []string{"paused", "q"}, N: 10, Min: 2, GroupBy: norn.FairByConcurrencyKey}
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("a paused queue's task counted: %v", ids(got))
		}
		req.Min = 0
		eqStrings(t, "claim", ids(b.claimReq(req)), []string{"2"})
	})

	t.Run("GroupLongPollAnswersWhenAGroupReachesMin", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(keyed("1x", "x"), keyed("2y", "y"))
		type result struct {
			got []*norn.Task
			err error
		}
		done := make(chan result, 1)
		go func() {
			req := group(norn.FairByConcurrencyKey, 2, 5)
			req.Wait = dur(time.Minute)
			got, err := b.s.Claim(b.ctx, req)
			done <- result{got, err}
		}()
		b.submit(keyed("3y", "y"))
		r := <-done
		b.must(r.err, "Claim")
		eqStrings(t, "long-poll claim", ids(r.got), []string{"2y", "3y"})
	})

	t.Run("GroupByInvalid", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(keyed("1x", "x"))
		before := b.snapshot()
		for _, by := range []string{"tenant", "label:", "label:a:b", "Concurrency_Key"} {
			_, err := s.Claim(b.ctx, group(by, 0, 2))
			wantField(t, "group_by "+by, err, norn.ErrInvalidArgument, "group_by")
		}
		b.unchanged("after refused group claims", before)
	})
}
