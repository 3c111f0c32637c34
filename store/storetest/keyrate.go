package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// keyRateCases checks per-key rate limits (run inside Flow): each key's
// own bucket under the injected clock, keys without tokens skipped for
// other keys' tasks, a key's own limit over the queue's, long polls woken
// by a key's token, a worker's back-pressure (snooze with scope "key"),
// and bad input.
func keyRateCases(t *testing.T, setup setupFunc) {
	keyRateCasesKeyRateLimitGivesEachKeyItsOwnBucket(t, setup)
	keyRateCasesKeyRateLimitSkipsAKeyWithoutTokens(t, setup)
	keyRateCasesKeyRateLimitOfTheKeyOverridesTheQueue(t, setup)
	keyRateCasesKeyRateLimitHoldsInAFairQueue(t, setup)
	keyRateCasesKeyRateLimitLongPollWakesWhenAKeysTokenComes(t, setup)
	keyRateCasesKeyRateLimitRemovedReleasesEveryKey(t, setup)
	keyRateCasesSnoozeWithKeyScopeHoldsTheKeyBack(t, setup)
	keyRateCasesKeyRateLimitBadInputChangesNothing(t, setup)
	keyRateCasesKeyRateLimitHoldsUnderConcurrentClaimers(t, setup)
}

func keyRateCasesKeyRateLimitGivesEachKeyItsOwnBucket(t *testing.T, setup setupFunc) {
	t.Run("KeyRateLimitGivesEachKeyItsOwnBucket", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		qi := krSet(b, norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 1, Burst: 2}})
		if qi.KeyRateLimit != (norn.RateLimit{PerSecond: 1, Burst: 2}) {
			t.Fatalf("UpdateQueue answered key_rate_limit %+v", qi.KeyRateLimit)
		}
		krTasks(b, "a", 4)
		krTasks(b, "b", 4)
		b.submit(norn.NewTask{ID: "n0", Queue: "q"}, norn.NewTask{ID: "n1", Queue: "q"})
		eqSet(t, "first claim", krClaim(b, 20), "a0", "a1", "b0", "b1", "n0", "n1")
		b.claimNone("q")
		b.clock.Advance(999 * time.Millisecond)
		b.claimNone("q")
		b.clock.Advance(time.Millisecond)
		eqSet(t, "a second later", krClaim(b, 20), "a2", "b2")
		b.clock.Advance(time.Hour) // refills up to the burst only
		eqSet(t, "an hour later", krClaim(b, 20), "a3", "b3")
		if got, err := b.s.Queue(b.ctx, "q"); err != nil || got.KeyRateLimit.PerSecond != 1 {
			t.Fatalf("Queue: key_rate_limit %+v, %v", got.KeyRateLimit, err)
		}
	})
}

func keyRateCasesKeyRateLimitSkipsAKeyWithoutTokens(t *testing.T, setup setupFunc) {
	t.Run("KeyRateLimitSkipsAKeyWithoutTokens", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		krSet(b, norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 0.5, Burst: 1}})
		krTasks(b, "big", 300) // a backlog ahead of the other keys' tasks
		krTasks(b, "c", 1)
		krTasks(b, "d", 1)
		eqSet(t, "first claim", krClaim(b, 10), "big000", "c0", "d0")
		b.submit(norn.NewTask{ID: "free", Queue: "q"})
		eqSet(t, "second claim", krClaim(b, 10), "free")
	})
}

func keyRateCasesKeyRateLimitOfTheKeyOverridesTheQueue(t *testing.T, setup setupFunc) {
	t.Run("KeyRateLimitOfTheKeyOverridesTheQueue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		krSet(b, norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 1, Burst: 1},
			Keys: map[string]*norn.KeySettings{"vip": {RateLimit: norn.RateLimit{PerSecond: 10}}}})
		qi, err := b.s.Queue(b.ctx, "q")
		b.must(err, "Queue")
		i := slices.IndexFunc(qi.Keys, func(k norn.KeyInfo) bool { return k.Key == "vip" })
		if i < 0 || qi.Keys[i].RateLimit != (norn.RateLimit{PerSecond: 10, Burst: 10}) {
			t.Fatalf("Queue keys %+v: want vip with rate_limit 10/s burst 10", qi.Keys)
		}
		krTasks(b, "vip", 15)
		krTasks(b, "std", 3)
		if got := krClaim(b, 30); len(got) != 11 || !slices.Contains(got, "std0") || slices.Contains(got, "std1") {
			t.Fatalf("first claim %v: want vip's burst of 10 and std's one", got)
		}
		b.clock.Advance(100 * time.Millisecond)
		eqSet(t, "0.1 s later", krClaim(b, 30), "vip10")
	})
}

func keyRateCasesKeyRateLimitHoldsInAFairQueue(t *testing.T, setup setupFunc) {
	t.Run("KeyRateLimitHoldsInAFairQueue", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		krSet(b, norn.QueueUpdate{FairBy: ptr(norn.FairByConcurrencyKey), KeyRateLimit: &norn.RateLimit{PerSecond: 1, Burst: 1}})
		krTasks(b, "a", 3)
		krTasks(b, "b", 3)
		eqSet(t, "first claim", krClaim(b, 10), "a0", "b0")
		b.claimNone("q")
		b.clock.Advance(time.Second)
		eqSet(t, "a second later", krClaim(b, 10), "a1", "b1")
	})
}

func keyRateCasesKeyRateLimitLongPollWakesWhenAKeysTokenComes(t *testing.T, setup setupFunc) {
	t.Run("KeyRateLimitLongPollWakesWhenAKeysTokenComes", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		krSet(b, norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 10, Burst: 1}})
		krTasks(b, "a", 2)
		eqSet(t, "first claim", krClaim(b, 5), "a0")
		got := b.longPoll("q", 5)
		stillWaiting(t, got, 300*time.Millisecond, "the key's bucket was empty")
		b.clock.Advance(100 * time.Millisecond)
		eqStrings(t, "long poll", ids(woken(t, got, "a token of the key came")), []string{"a1"})
	})
}

func keyRateCasesKeyRateLimitRemovedReleasesEveryKey(t *testing.T, setup setupFunc) {
	t.Run("KeyRateLimitRemovedReleasesEveryKey", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		krSet(b, norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 0.01, Burst: 1}})
		krTasks(b, "a", 3)
		eqSet(t, "first claim", krClaim(b, 5), "a0")
		krSet(b, norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{}})
		eqSet(t, "after removal", krClaim(b, 5), "a1", "a2")
	})
}

func keyRateCasesSnoozeWithKeyScopeHoldsTheKeyBack(t *testing.T, setup setupFunc) {
	t.Run("SnoozeWithKeyScopeHoldsTheKeyBack", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		krSet(b, norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 100, Burst: 5}})
		krTasks(b, "a", 4)
		krTasks(b, "b", 1)
		tk := b.claimID("w", "a0", "q")
		if _, err := b.s.Snooze(b.ctx, ref(tk), norn.Snooze{Delay: dur(10 * time.Second), Scope: norn.SnoozeScopeKey}); err != nil {
			t.Fatalf("Snooze with scope key: %v", err)
		}
		bs := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
		eqSet(t, "after the key's snooze", ids(bs), "b0")
		b.complete(bs[0], "")
		b.clock.Advance(9900 * time.Millisecond)
		b.claimNone("q")
		b.clock.Advance(100 * time.Millisecond) // the snooze ends: the key's first token is there
		b.sweep()
		if got := krClaim(b, 10); len(got) != 1 {
			t.Fatalf("when the snooze ended: claimed %v, want one task of key a", got)
		}
	})
}

func keyRateCasesKeyRateLimitBadInputChangesNothing(t *testing.T, setup setupFunc) {
	t.Run("KeyRateLimitBadInputChangesNothing", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		krTasks(b, "a", 1)
		b.submit(norn.NewTask{ID: "plain", Queue: "q"})
		tk := b.claimID("w", "a0", "q")
		krSetQueue(b, "lab", norn.QueueUpdate{FairBy: ptr("label:tenant")})
		before := b.snapshot()
		inv := norn.ErrInvalidArgument
		for _, c := range []struct {
			name, field string
			call        func() error
		}{
			{"NegativeRate", "key_rate_limit.per_second", func() error {
				_, err := b.s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: -1}})
				return err
			}},
			{"KeyBurstWithoutRate", `keys["a"].rate_limit.burst`, func() error {
				_, err := b.s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"a": {RateLimit: norn.RateLimit{Burst: 3}}}})
				return err
			}},
			{"AbsurdRate", "key_rate_limit.per_second", func() error {
				_, err := b.s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 1e12}})
				return err
			}},
			{"FairByLabel", "key_rate_limit", func() error {
				_, err := b.s.UpdateQueue(b.ctx, "lab", norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 1}})
				return err
			}},
			{"SnoozeScopeUnknown", "scope", func() error {
				_, err := b.s.Snooze(b.ctx, ref(tk), norn.Snooze{Delay: dur(time.Second), Scope: "queue"})
				return err
			}},
			{"SnoozeScopeKeyWithoutRate", "scope", func() error {
				_, err := b.s.Snooze(b.ctx, ref(tk), norn.Snooze{Delay: dur(time.Second), Scope: norn.SnoozeScopeKey})
				return err
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				wantField(t, c.name, c.call(), inv, c.field)
				b.with(t).unchanged(c.name, before)
			})
		}
		if g := b.get("a0"); g.Status != norn.StatusRunning || g.Lease != tk.Lease {
			t.Fatalf("a0 after refused snoozes: %s", canonTask(g))
		}
	})
}

func keyRateCasesKeyRateLimitHoldsUnderConcurrentClaimers(t *testing.T, setup setupFunc) {
	t.Run("KeyRateLimitHoldsUnderConcurrentClaimers", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		ConcurrentKeyRate(t, []norn.Store{s}, b.clock, b.ctx)
	})
}

func krSet(b *testBundle, u norn.QueueUpdate) norn.QueueInfo {
	b.t.Helper()
	return krSetQueue(b, "q", u)
}

func krSetQueue(b *testBundle, queue string, u norn.QueueUpdate) norn.QueueInfo {
	b.t.Helper()
	qi, err := b.s.UpdateQueue(b.ctx, queue, u)
	b.must(err, "UpdateQueue(%+v)", u)
	return qi
}

// krTasks submits n tasks of key into q, named key + a number, padded so
// that claim order (by id, for tasks ready at once) is submit order.
func krTasks(b *testBundle, key string, n int) {
	b.t.Helper()
	nts := make([]norn.NewTask, n)
	for i := range nts {
		id := fmt.Sprintf("%s%d", key, i)
		switch {
		case n > 100:
			id = fmt.Sprintf("%s%03d", key, i)
		case n > 10:
			id = fmt.Sprintf("%s%02d", key, i)
		}
		nts[i] = norn.NewTask{ID: id, Queue: "q", ConcurrencyKey: key}
	}
	b.submit(nts...)
}

func krClaim(b *testBundle, n int) []string {
	b.t.Helper()
	return ids(b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n}))
}

// eqSet fails unless got holds exactly want, in any order.
func eqSet(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	g := slices.Sorted(slices.Values(got))
	w := slices.Sorted(slices.Values(want))
	if !slices.Equal(g, w) {
		t.Fatalf("%s: got %v, want %v", what, g, w)
	}
}

// ConcurrentKeyRate checks that per-key rate limits hold with many
// concurrent claimers spread over stores (several instances of one
// cluster store, or one store) while the clock moves on in small steps:
// per key, no interval [a, b] of assignment times saw more than burst +
// rate × (b − a) claims, and every task was claimed. clock must be the
// stores' (injected) clock.
func ConcurrentKeyRate(t *testing.T, stores []norn.Store, clock *FakeClock, ctx context.Context) {
	const (
		rate  = 100.0
		burst = 3
		keys  = 3
		per   = 40
	)
	s0 := stores[0]
	if _, err := s0.UpdateQueue(ctx, "keyrated", norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: rate, Burst: burst}}); err != nil {
		t.Fatal(err)
	}
	var nts []norn.NewTask
	for i := range per {
		for k := range keys {
			nts = append(nts, norn.NewTask{ID: fmt.Sprintf("k%d-%02d", k, i), Queue: "keyrated", ConcurrencyKey: fmt.Sprintf("k%d", k)})
		}
	}
	if _, err := s0.Submit(ctx, nts...); err != nil {
		t.Fatal(err)
	}
	byKey := map[string][]time.Time{}
	for _, c := range claimWhileTheClockRuns(t, stores, clock, ctx, "keyrated", keys*per, 6) {
		byKey[c.key] = append(byKey[c.key], c.at)
	}
	for key, at := range byKey {
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		withinRate(t, "key "+key, at, burst, rate)
	}
}
