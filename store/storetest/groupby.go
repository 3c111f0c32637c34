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
	groupClaimsGroupByConcurrencyKey(t, setup)
	groupClaimsGroupByLabel(t, setup)
	groupClaimsGroupByALabelsCurrentValue(t, setup)
	groupClaimsGroupByTheLabelAQueueIsFairBy(t, setup)
	groupClaimsGroupWaitsForMin(t, setup)
	groupClaimsGroupCountsAcrossQueues(t, setup)
	groupClaimsGroupCountsAQueueNamedTwiceOnce(t, setup)
	groupClaimsGroupLingerAnswersAlone(t, setup)
	groupClaimsGroupKeepsLimits(t, setup)
	groupClaimsGroupSkipsPausedQueues(t, setup)
	groupClaimsGroupLongPollAnswersWhenAGroupReachesMin(t, setup)
	groupClaimsGroupByInvalid(t, setup)
}

// gbKeyed is a task of queue q with a concurrency key; tasks submitted at
// one instant go in claim order by id.
func gbKeyed(id, key string) norn.NewTask {
	return norn.NewTask{ID: id, Queue: "q", ConcurrencyKey: key}
}

// gbTenant is a task of queue q with a key and, unless empty, a tenant
// label.
func gbTenant(id, tenant, key string) norn.NewTask {
	nt := norn.NewTask{ID: id, Queue: "q", ConcurrencyKey: key}
	if tenant != "" {
		nt.Labels = map[string]string{"tenant": tenant}
	}
	return nt
}

// gbGroup is a group claim of queue q.
func gbGroup(by string, min, n int) norn.ClaimRequest {
	return norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n, Min: min, GroupBy: by}
}

func groupClaimsGroupByConcurrencyKey(t *testing.T, setup setupFunc) {
	t.Run("GroupByConcurrencyKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(gbKeyed("1x", "x"), gbKeyed("2y", "y"), gbKeyed("3x", "x"), gbKeyed("4", ""), gbKeyed("5y", "y"))
		req := gbGroup(norn.FairByConcurrencyKey, 0, 10)
		// Without min, every answer is the group of the first task in
		// claim order; tasks without a key are a group of their own.
		eqStrings(t, "first claim", ids(b.claimReq(req)), []string{"1x", "3x"})
		eqStrings(t, "second claim", ids(b.claimReq(req)), []string{"2y", "5y"})
		eqStrings(t, "third claim", ids(b.claimReq(req)), []string{"4"})
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("claim of an empty queue: %v", ids(got))
		}
	})
}

func groupClaimsGroupByLabel(t *testing.T, setup setupFunc) {
	t.Run("GroupByLabel", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		// The label groups, whatever the concurrency keys.
		b.submit(gbTenant("1", "acme", "k1"), gbTenant("2", "", "k1"), gbTenant("3", "bolt", "k2"),
			gbTenant("4", "acme", "k2"), gbTenant("5", "", ""))
		req := gbGroup("label:tenant", 0, 10)
		eqStrings(t, "first claim", ids(b.claimReq(req)), []string{"1", "4"})
		eqStrings(t, "second claim", ids(b.claimReq(req)), []string{"2", "5"})
		eqStrings(t, "third claim", ids(b.claimReq(req)), []string{"3"})
	})
}

func groupClaimsGroupByALabelsCurrentValue(t *testing.T, setup setupFunc) {
	t.Run("GroupByALabelsCurrentValue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(gbTenant("1", "acme", ""), gbTenant("2", "bolt", ""), gbTenant("3", "acme", ""))
		b.update("3", norn.Update{Labels: map[string]string{"tenant": "bolt"}})
		eqStrings(t, "claim", ids(b.claimReq(gbGroup("label:tenant", 2, 10))), []string{"2", "3"})
	})
}

func groupClaimsGroupByTheLabelAQueueIsFairBy(t *testing.T, setup setupFunc) {
	t.Run("GroupByTheLabelAQueueIsFairBy", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{FairBy: ptr("label:tenant")})
		b.must(err, "UpdateQueue")
		b.submit(gbTenant("1", "acme", ""), gbTenant("2", "bolt", ""), gbTenant("3", "acme", ""), gbTenant("4", "bolt", ""),
			gbTenant("5", "bolt", ""))
		req := gbGroup("label:tenant", 3, 10)
		eqStrings(t, "the group with min", ids(b.claimReq(req)), []string{"2", "4", "5"})
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("claim with 2 of min 3 ready: %v", ids(got))
		}
		// And by concurrency key in a queue fair by a label.
		b.submit(gbTenant("6", "acme", "k"), gbTenant("7", "bolt", "k"))
		eqStrings(t, "by concurrency key", ids(b.claimReq(gbGroup(norn.FairByConcurrencyKey, 0, 10))), []string{"1", "3"})
	})
}

func groupClaimsGroupWaitsForMin(t *testing.T, setup setupFunc) {
	t.Run("GroupWaitsForMin", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(gbKeyed("1x", "x"), gbKeyed("2y", "y"), gbKeyed("3x", "x"), gbKeyed("4y", "y"), gbKeyed("5y", "y"))
		req := gbGroup(norn.FairByConcurrencyKey, 3, 10)
		// x comes first in claim order but has 2 of 3: y answers.
		eqStrings(t, "claim", ids(b.claimReq(req)), []string{"2y", "4y", "5y"})
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("claim with 2 of min 3 ready in the only group: %v", ids(got))
		}
		b.submit(gbKeyed("6x", "x"))
		eqStrings(t, "claim once x has 3", ids(b.claimReq(req)), []string{"1x", "3x", "6x"})
	})
}

func groupClaimsGroupCountsAQueueNamedTwiceOnce(t *testing.T, setup setupFunc) {
	t.Run("GroupCountsAQueueNamedTwiceOnce", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(gbKeyed("1x", "x"))
		req := norn.ClaimRequest{Worker: "w", Queues: []string{"q", "r", "q"}, N: 10, Min: 2, GroupBy: norn.FairByConcurrencyKey}
		if got := b.claimReq(req); len(got) != 0 {
			t.Fatalf("one ready task counted as two: %v", ids(got))
		}
	})
}

func groupClaimsGroupCountsAcrossQueues(t *testing.T, setup setupFunc) {
	t.Run("GroupCountsAcrossQueues", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "1", Queue: "q", ConcurrencyKey: "x"}, norn.NewTask{ID: "2", Queue: "r", ConcurrencyKey: "x"},
			norn.NewTask{ID: "3", Queue: "r", ConcurrencyKey: "y"})
		req := norn.ClaimRequest{Worker: "w", Queues: []string{"q", "r"}, N: 10, Min: 2, GroupBy: norn.FairByConcurrencyKey}
		eqStrings(t, "claim", ids(b.claimReq(req)), []string{"1", "2"})
	})
}

func groupClaimsGroupLingerAnswersAlone(t *testing.T, setup setupFunc) {
	t.Run("GroupLingerAnswersAlone", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(gbKeyed("x1", "x"))
		b.advance(5 * time.Second)
		b.submit(gbKeyed("y1", "y"))
		req := gbGroup(norn.FairByConcurrencyKey, 3, 10)
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
}

func groupClaimsGroupKeepsLimits(t *testing.T, setup setupFunc) {
	t.Run("GroupKeepsLimits", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		_, err := s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{KeyLimit: ptr(2)})
		b.must(err, "UpdateQueue")
		b.submit(gbKeyed("1x", "x"), gbKeyed("2x", "x"), gbKeyed("3x", "x"), gbKeyed("4x", "x"), gbKeyed("5y", "y"))
		req := gbGroup(norn.FairByConcurrencyKey, 3, 10)
		// x has min ready, but its key limit lets two run: fewer, never more.
		eqStrings(t, "claim", ids(b.claimReq(req)), []string{"1x", "2x"})
		// x is at its limit: its tasks cannot be taken, so x cannot answer.
		eqStrings(t, "claim while x is at its limit", ids(b.claimReq(gbGroup(norn.FairByConcurrencyKey, 0, 10))), []string{"5y"})

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
}

func groupClaimsGroupSkipsPausedQueues(t *testing.T, setup setupFunc) {
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
}

func groupClaimsGroupLongPollAnswersWhenAGroupReachesMin(t *testing.T, setup setupFunc) {
	t.Run("GroupLongPollAnswersWhenAGroupReachesMin", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(gbKeyed("1x", "x"), gbKeyed("2y", "y"))
		type result struct {
			got []*norn.Task
			err error
		}
		done := make(chan result, 1)
		go func() {
			req := gbGroup(norn.FairByConcurrencyKey, 2, 5)
			req.Wait = dur(time.Minute)
			got, err := b.s.Claim(b.ctx, req)
			done <- result{got, err}
		}()
		b.submit(gbKeyed("3y", "y"))
		r := <-done
		b.must(r.err, "Claim")
		eqStrings(t, "long-poll claim", ids(r.got), []string{"2y", "3y"})
	})
}

func groupClaimsGroupByInvalid(t *testing.T, setup setupFunc) {
	t.Run("GroupByInvalid", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(gbKeyed("1x", "x"))
		before := b.snapshot()
		for _, by := range []string{"tenant", "label:", "label:a:b", "Concurrency_Key"} {
			_, err := s.Claim(b.ctx, gbGroup(by, 0, 2))
			wantField(t, "group_by "+by, err, norn.ErrInvalidArgument, "group_by")
		}
		b.unchanged("after refused group claims", before)
	})
}
