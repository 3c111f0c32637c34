package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// fairCases checks fair claiming (fair_by), as part of the flow control
// cases: claims rotate across the key's values among ready tasks of equal
// priority, weighted by the keys' weights, with priorities first.
func fairCases(t *testing.T, setup setupFunc) {
	fairCasesFairRotatesAcrossKeys(t, setup)
	fairCasesFairBatchTakesOneOfEachKey(t, setup)
	fairCasesFairWeights(t, setup)
	fairCasesFairPriorityComesFirst(t, setup)
	fairCasesFairByLabel(t, setup)
	fairCasesFairDominantBacklogDelaysASmallKeyOneBatchAtMost(t, setup)
	fairCasesFairWithKeyLimit(t, setup)
	fairCasesFairOffRestoresClaimOrder(t, setup)
	fairCasesFairBadInputChangesNothing(t, setup)
}

func fairCasesFairRotatesAcrossKeys(t *testing.T, setup setupFunc) {
	t.Run("FairRotatesAcrossKeys", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		qi := fairFair(b, norn.QueueUpdate{FairBy: ptr("concurrency_key")})
		if qi.FairBy != "concurrency_key" {
			t.Fatalf("UpdateQueue answered fair_by %q", qi.FairBy)
		}
		fairTasks(b, "a", 6, "a", 0)
		fairTasks(b, "b", 2, "b", 0)
		fairTasks(b, "c", 2, "c", 0)
		fairTasks(b, "n", 1, "", 0) // no key: a group of its own
		if g, err := b.s.Queue(b.ctx, "q"); err != nil || g.FairBy != "concurrency_key" {
			t.Fatalf("Queue: fair_by %q, %v", g.FairBy, err)
		}
		if got, want := fairOrder(b), "a1 b1 c1 n1 a2 b2 c2 a3 a4 a5 a6"; got != want {
			t.Fatalf("claim fairOrder %q, want %q", got, want)
		}
	})
}

func fairCasesFairBatchTakesOneOfEachKey(t *testing.T, setup setupFunc) {
	t.Run("FairBatchTakesOneOfEachKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		fairFair(b, norn.QueueUpdate{FairBy: ptr("concurrency_key")})
		fairTasks(b, "a", 20, "a", 0)
		fairTasks(b, "b", 2, "b", 0)
		fairTasks(b, "c", 2, "c", 0)
		got := ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 3}))
		slices.Sort(got)
		if strings.Join(got, " ") != "a1 b1 c1" {
			t.Fatalf("a batch of 3 took %v, want one task of each key", got)
		}
	})
}

func fairCasesFairWeights(t *testing.T, setup setupFunc) {
	t.Run("FairWeights", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		qi := fairFair(b, norn.QueueUpdate{FairBy: ptr("concurrency_key"), Keys: map[string]*norn.KeySettings{"a": {Weight: 3}}})
		if fmt.Sprint(qi.Keys) != "[{a {0 3 {0 0}} 0}]" {
			t.Fatalf("UpdateQueue keys %v, want a with weight 3", qi.Keys)
		}
		fairTasks(b, "a", 8, "a", 0)
		fairTasks(b, "b", 8, "b", 0)
		var got []string
		for range 8 {
			got = append(got, b.claim("w", "q").ID)
		}
		// a takes three claims for each of b's.
		if s, want := strings.Join(got, " "), "a1 b1 a2 a3 a4 b2 a5 a6"; s != want {
			t.Fatalf("claim fairOrder %q, want %q", s, want)
		}
	})
}

func fairCasesFairPriorityComesFirst(t *testing.T, setup setupFunc) {
	t.Run("FairPriorityComesFirst", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		fairFair(b, norn.QueueUpdate{FairBy: ptr("concurrency_key")})
		fairTasks(b, "a", 3, "a", 5)
		fairTasks(b, "b", 1, "b", 0)
		fairTasks(b, "c", 1, "c", 5)
		if got, want := fairOrder(b), "a1 c1 a2 a3 b1"; got != want {
			t.Fatalf("claim fairOrder %q, want %q", got, want)
		}
	})
}

func fairCasesFairByLabel(t *testing.T, setup setupFunc) {
	t.Run("FairByLabel", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		// Tasks submitted before fair_by is set are grouped when it is.
		var nts []norn.NewTask
		for i := 1; i <= 4; i++ {
			nts = append(nts, norn.NewTask{ID: fmt.Sprintf("x%d", i), Queue: "q", ConcurrencyKey: "same",
				Labels: map[string]string{"tenant": "x"}})
		}
		nts = append(nts, norn.NewTask{ID: "y1", Queue: "q", ConcurrencyKey: "same", Labels: map[string]string{"tenant": "y"}},
			norn.NewTask{ID: "z1", Queue: "q", ConcurrencyKey: "same"})
		b.submit(nts...)
		qi := fairFair(b, norn.QueueUpdate{FairBy: ptr("label:tenant")})
		if qi.FairBy != "label:tenant" {
			t.Fatalf("UpdateQueue answered fair_by %q", qi.FairBy)
		}
		b.submit(norn.NewTask{ID: "w1", Queue: "q", ConcurrencyKey: "same", Labels: map[string]string{"tenant": "w"}})
		if got, want := fairOrder(b), "w1 x1 y1 z1 x2 x3 x4"; got != want {
			t.Fatalf("claim fairOrder %q, want %q", got, want)
		}
	})
}

func fairCasesFairDominantBacklogDelaysASmallKeyOneBatchAtMost(t *testing.T, setup setupFunc) {
	t.Run("FairDominantBacklogDelaysASmallKeyOneBatchAtMost", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		fairFair(b, norn.QueueUpdate{FairBy: ptr("concurrency_key")})
		var nts []norn.NewTask
		for i := range 300 {
			nts = append(nts, norn.NewTask{ID: fmt.Sprintf("big%03d", i), Queue: "q", ConcurrencyKey: "big"})
		}
		b.submitMany(nts)
		claimBatch := func() []string {
			return ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 5}))
		}
		claimBatch()
		claimBatch()
		b.advance(time.Second) // the small key's task is younger than the whole backlog
		b.submit(norn.NewTask{ID: "small", Queue: "q", ConcurrencyKey: "small"})
		if got := claimBatch(); !slices.Contains(got, "small") {
			t.Fatalf("the next batch after the small key's submit took %v, not its task", got)
		}
	})
}

func fairCasesFairWithKeyLimit(t *testing.T, setup setupFunc) {
	t.Run("FairWithKeyLimit", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		fairFair(b, norn.QueueUpdate{FairBy: ptr("concurrency_key"), KeyLimit: ptr(1)})
		fairTasks(b, "a", 3, "a", 0)
		fairTasks(b, "b", 3, "b", 0)
		got := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
		if s := strings.Join(ids(got), " "); len(got) != 2 || !strings.Contains(s, "a1") || !strings.Contains(s, "b1") {
			t.Fatalf("claimed %q, want a1 and b1 (one per key)", s)
		}
		b.complete(got[0], "")
		if next := b.claim("w", "q"); next.ID[0] != got[0].ID[0] {
			t.Fatalf("after %s completed, claimed %s", got[0].ID, next.ID)
		}
	})
}

func fairCasesFairOffRestoresClaimOrder(t *testing.T, setup setupFunc) {
	t.Run("FairOffRestoresClaimOrder", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		fairFair(b, norn.QueueUpdate{FairBy: ptr("concurrency_key")})
		fairTasks(b, "a", 3, "a", 0)
		fairTasks(b, "b", 2, "b", 0)
		b.claim("w", "q") // a1
		if qi := fairFair(b, norn.QueueUpdate{FairBy: ptr("")}); qi.FairBy != "" {
			t.Fatalf("fair_by %q after turning it off", qi.FairBy)
		}
		if got, want := fairOrder(b), "a2 a3 b1 b2"; got != want {
			t.Fatalf("claim fairOrder %q, want %q", got, want)
		}
	})
}

func fairCasesFairBadInputChangesNothing(t *testing.T, setup setupFunc) {
	t.Run("FairBadInputChangesNothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		fairFair(b, norn.QueueUpdate{KeyLimit: ptr(2)})
		fairTasks(b, "a", 2, "a", 0)
		before, err := b.s.Queue(b.ctx, "q")
		b.must(err, "Queue")
		snap := b.snapshot()
		for _, c := range []struct {
			name  string
			u     norn.QueueUpdate
			field string
		}{
			{"unknown fair_by", norn.QueueUpdate{FairBy: ptr("tenant"), MaxRunning: ptr(9)}, "fair_by"},
			{"label without name", norn.QueueUpdate{FairBy: ptr("label:")}, "fair_by"},
			{"negative weight", norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"a": {Weight: -1}}}, `keys["a"].weight`},
			{"weight too big", norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"a": {Weight: norn.MaxKeyWeight + 1}}}, `keys["a"].weight`},
			{"label fairness with key_limit", norn.QueueUpdate{FairBy: ptr("label:tenant"), MaxRunning: ptr(9)}, "fair_by"},
		} {
			_, err := b.s.UpdateQueue(b.ctx, "q", c.u)
			var ne *norn.Error
			if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != c.field {
				t.Fatalf("%s: %v, want invalid naming %s", c.name, err, c.field)
			}
			after, err := b.s.Queue(b.ctx, "q")
			b.must(err, "Queue")
			if fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("%s changed the queue:\nbefore %+v\nafter  %+v", c.name, before, after)
			}
		}
		b.unchanged("refused updates", snap)
		// The other way round: key limits onto a queue fairFair by a label.
		fairFair(b, norn.QueueUpdate{KeyLimit: ptr(0)})
		fairFair(b, norn.QueueUpdate{FairBy: ptr("label:tenant")})
		for _, c := range []struct {
			u     norn.QueueUpdate
			field string
		}{
			{norn.QueueUpdate{KeyLimit: ptr(1)}, "key_limit"},
			{norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"x": {Limit: 1}}}, `keys["x"].limit`},
		} {
			_, err := b.s.UpdateQueue(b.ctx, "q", c.u)
			var ne *norn.Error
			if !errors.As(err, &ne) || ne.Field != c.field {
				t.Fatalf("%+v: %v, want invalid naming %s", c.u, err, c.field)
			}
		}
		if qi, err := b.s.Queue(b.ctx, "q"); err != nil || qi.KeyLimit != 0 || len(qi.Keys) != 0 {
			t.Fatalf("refused key limits were stored: %+v, %v", qi, err)
		}
	})
}

func fairFair(b *testBundle, u norn.QueueUpdate) norn.QueueInfo {
	b.t.Helper()
	qi, err := b.s.UpdateQueue(b.ctx, "q", u)
	b.must(err, "UpdateQueue")
	return qi
}

// fairTasks submits n fairTasks id1..idn with a key and priority.
func fairTasks(b *testBundle, id string, n int, key string, prio uint32) {
	b.t.Helper()
	var nts []norn.NewTask
	for i := 1; i <= n; i++ {
		nts = append(nts, norn.NewTask{ID: fmt.Sprintf("%s%d", id, i), Queue: "q", ConcurrencyKey: key, Priority: prio})
	}
	b.submit(nts...)
}

// fairOrder claims one task at a time until none is left.
func fairOrder(b *testBundle) string {
	b.t.Helper()
	var got []string
	for {
		ts := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 1})
		if len(ts) == 0 {
			return strings.Join(got, " ")
		}
		got = append(got, ts[0].ID)
	}
}
