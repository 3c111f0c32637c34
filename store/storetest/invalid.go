package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseInvalidInput feeds every kind of bad input to every operation,
// one subtest per kind, and checks the error class, the field it names, and
// that nothing changed. The rows share one store and run in order.
func exerciseInvalidInput(t *testing.T, setup setupFunc) {
	t.Run("InvalidInput", func(t *testing.T) {
		t.Parallel()
		invalidInput(t, setup)
	})
}

func invalidInput(t *testing.T, setup setupFunc) {
	s, b := setup(t)
	b.submit(norn.NewTask{ID: "ready", Queue: "q"}, norn.NewTask{ID: "run", Queue: "r"})
	run := b.claim("w", "r")
	r := ref(run)
	before := b.snapshot()
	if !json.Valid(badUTF8) {
		t.Fatal("badUTF8 must be valid JSON apart from its UTF-8")
	}
	var cases []invalidCase
	for _, group := range []func(norn.Store, *testBundle, norn.LeaseRef) []invalidCase{invalidSubmits, invalidCalls, invalidReads, invalidSettings} {
		cases = append(cases, group(s, b, r)...)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if tc.field == "" {
				wantErr(t, tc.name, err, tc.want)
			} else {
				wantField(t, tc.name, err, tc.want, tc.field)
			}
			b.with(t).unchanged(tc.name, before)
		})
	}
	t.Run("RefusedCallsLeaveTheLeaseAndQueueAlone", func(t *testing.T) {
		if _, err := s.Heartbeat(t.Context(), r, norn.Heartbeat{}); err != nil {
			t.Fatalf("heartbeat after refused calls: %v", err)
		}
		qi, err := s.Queue(t.Context(), "q")
		if err != nil || qi.Paused {
			t.Fatalf("queue q after refused updates: %+v, %v", qi, err)
		}
		sameDefaults(t, "queue q after refused updates", qi.Defaults, norn.DefaultQueueDefaults())
	})
}

// invalidCase is one refused call: the error it must get, and the field
// it must name ("" = the contract leaves the field name open).
type invalidCase struct {
	name  string
	call  func() error
	want  *norn.Error
	field string
}

// badUTF8 is valid JSON apart from its UTF-8.
var badUTF8 = json.RawMessage("{\"name\":\"\xff\xfe\"}")

// invalidSubmits are the refused submits.
func invalidSubmits(s norn.Store, b *testBundle, r norn.LeaseRef) []invalidCase {
	sub := func(nts ...norn.NewTask) func() error {
		return func() error { _, err := s.Submit(b.ctx, nts...); return err }
	}
	ok := norn.NewTask{Queue: "q"}
	bigJSON := json.RawMessage(`"` + strings.Repeat("a", norn.MaxSpecBytes) + `"`)
	labels := map[string]string{}
	for i := 0; i <= norn.MaxLabels; i++ {
		labels[fmt.Sprintf("k%d", i)] = "v"
	}
	inv, big := norn.ErrInvalidArgument, norn.ErrTooLarge
	return []invalidCase{
		{"SubmitWithoutQueue", sub(norn.NewTask{}), inv, "tasks[0].queue"},
		{"SubmitBadQueue", sub(norn.NewTask{Queue: "bad queue!"}), inv, "tasks[0].queue"},
		{"SubmitLongQueue", sub(norn.NewTask{Queue: strings.Repeat("q", norn.MaxQueueLength+1)}), inv, "tasks[0].queue"},
		{"SubmitOversizeSpec", sub(norn.NewTask{Queue: "q", Spec: bigJSON}), big, "tasks[0].spec"},
		{"SubmitInvalidJSONSpec", sub(norn.NewTask{Queue: "q", Spec: json.RawMessage(`{"a":`)}), inv, "tasks[0].spec"},
		{"SubmitNegativeDelay", sub(norn.NewTask{Queue: "q", Delay: dur(-time.Second)}), inv, "tasks[0].delay"},
		{"SubmitNegativeTimeout", sub(norn.NewTask{Queue: "q", Timeout: dur(-time.Second)}), inv, "tasks[0].timeout"},
		{"SubmitNegativeMaxAttempts", sub(norn.NewTask{Queue: "q", MaxAttempts: ptr(-1)}), inv, "tasks[0].max_attempts"},
		{"SubmitNegativeMaxRetries", sub(norn.NewTask{Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: -1}}), inv, "tasks[0].retry.max_retries"},
		{"SubmitNegativeBackoff", sub(norn.NewTask{Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 1, Base: dur(-time.Second)}}), inv, "tasks[0].retry"},
		{"SubmitIDWithSpace", sub(norn.NewTask{ID: "a b", Queue: "q"}), inv, "tasks[0].id"},
		{"SubmitLongID", sub(norn.NewTask{ID: strings.Repeat("i", norn.MaxIDLength+1), Queue: "q"}), inv, "tasks[0].id"},
		{"SubmitLongConcurrencyKey", sub(norn.NewTask{Queue: "q", ConcurrencyKey: strings.Repeat("k", norn.MaxConcurrencyKeyLength+1)}), inv, "tasks[0].concurrency_key"},
		{"SubmitConcurrencyKeyWithControlCharacter", sub(ok, norn.NewTask{Queue: "q", ConcurrencyKey: "a\nb"}), inv, "tasks[1].concurrency_key"},
		{"SubmitTooManyLabels", sub(norn.NewTask{Queue: "q", Labels: labels}), inv, "tasks[0].labels"},
		{"SubmitNonUTF8Spec", sub(ok, norn.NewTask{Queue: "q", Spec: badUTF8}), inv, "tasks[1].spec"},
		{"SubmitSecondTaskInvalid", sub(ok, norn.NewTask{Queue: "bad queue"}), inv, "tasks[1].queue"},
		{"SubmitDuplicateIDsInBatch", sub(norn.NewTask{ID: "d", Queue: "q"}, norn.NewTask{ID: "d", Queue: "q"}), inv, "tasks[1].id"},
		{"SubmitLongUniqueKey", sub(norn.NewTask{Queue: "q", UniqueKey: strings.Repeat("k", norn.MaxUniqueKeyLength+1)}), inv, "tasks[0].unique_key"},
		{"SubmitUniqueKeyWithControlCharacter", sub(ok, norn.NewTask{Queue: "q", UniqueKey: "a\nb"}), inv, "tasks[1].unique_key"},
		{"SubmitNonUTF8UniqueKey", sub(norn.NewTask{Queue: "q", UniqueKey: "\xff\xfe"}), inv, "tasks[0].unique_key"},
		{"SubmitUniqueForWithoutKey", sub(norn.NewTask{Queue: "q", UniqueFor: dur(time.Minute)}), inv, "tasks[0].unique_for"},
		{"SubmitNegativeUniqueFor", sub(norn.NewTask{Queue: "q", UniqueKey: "k", UniqueFor: dur(-time.Minute)}), inv, "tasks[0].unique_for"},
		{"SubmitMissingDependency", sub(ok, norn.NewTask{Queue: "q", DependsOn: []string{"nope"}}), inv, "tasks[1].depends_on[0]"},
	}
}

// invalidCalls are the refused updates, claims and lease calls.
func invalidCalls(s norn.Store, b *testBundle, r norn.LeaseRef) []invalidCase {
	bigJSON := json.RawMessage(`"` + strings.Repeat("a", norn.MaxSpecBytes) + `"`)
	labels := map[string]string{}
	for i := 0; i <= norn.MaxLabels; i++ {
		labels[fmt.Sprintf("k%d", i)] = "v"
	}
	claim := func(req norn.ClaimRequest) func() error {
		return func() error { _, err := s.Claim(b.ctx, req); return err }
	}
	inv, big := norn.ErrInvalidArgument, norn.ErrTooLarge
	return []invalidCase{
		{"UpdateBadLabels", func() error {
			_, err := s.Update(b.ctx, "ready", norn.Update{Labels: map[string]string{"": "v"}})
			return err
		}, inv, "labels"},

		{"ClaimWithoutWorker", claim(norn.ClaimRequest{Queues: []string{"q"}}), inv, "worker"},
		{"ClaimWithoutQueues", claim(norn.ClaimRequest{Worker: "w"}), inv, "queues"},
		{"ClaimBadQueue", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q", "bad q"}}), inv, "queues[1]"},
		{"ClaimTooMany", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: norn.MaxClaim + 1}), inv, "n"},
		{"ClaimNegativeN", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: -1}), inv, "n"},
		{"ClaimNegativeTimeout", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Timeout: dur(-time.Second)}), inv, "timeout"},
		{"ClaimNegativeWait", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Wait: dur(-time.Second)}), inv, "wait"},
		{"ClaimWaitTooLong", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Wait: dur(norn.MaxClaimWait + time.Second)}), inv, "wait"},

		{"HeartbeatProgressAboveOne", func() error {
			_, err := s.Heartbeat(b.ctx, r, norn.Heartbeat{Progress: ptr(1.5)})
			return err
		}, inv, "progress"},
		{"HeartbeatProgressBelowZero", func() error {
			_, err := s.Heartbeat(b.ctx, r, norn.Heartbeat{Progress: ptr(-0.1)})
			return err
		}, inv, "progress"},
		{"HeartbeatLeaseZero", func() error {
			_, err := s.Heartbeat(b.ctx, norn.LeaseRef{TaskID: "run", Worker: "w"}, norn.Heartbeat{})
			return err
		}, inv, "lease"},
		{"HeartbeatWithoutWorker", func() error {
			_, err := s.Heartbeat(b.ctx, norn.LeaseRef{TaskID: "run", Lease: 1}, norn.Heartbeat{})
			return err
		}, inv, "worker"},
		{"CompleteWithoutID", func() error { return s.Complete(b.ctx, norn.LeaseRef{Worker: "w", Lease: 1}, nil) }, inv, "id"},
		{"LogInvalidJSON", func() error {
			_, err := s.AppendLog(b.ctx, r, norn.LogAppend{Data: json.RawMessage(`{`)})
			return err
		}, inv, "data"},
		{"LogOversize", func() error {
			_, err := s.AppendLog(b.ctx, r, norn.LogAppend{Data: bigJSON})
			return err
		}, big, "data"},
		{"LogNonUTF8Data", func() error {
			_, err := s.AppendLog(b.ctx, r, norn.LogAppend{Data: badUTF8})
			return err
		}, inv, "data"},
		{"CompleteNonUTF8Result", func() error { return s.Complete(b.ctx, r, badUTF8) }, inv, "result"},
		{"CompleteInvalidJSONResult", func() error { return s.Complete(b.ctx, r, json.RawMessage(`[1,`)) }, inv, "result"},
		{"CompleteOversizeResult", func() error { return s.Complete(b.ctx, r, bigJSON) }, big, "result"},
		{"FailOversizeError", func() error {
			return s.Fail(b.ctx, r, norn.ErrorInfo{Code: "x", Description: strings.Repeat("d", norn.MaxErrorBytes)})
		}, big, "error"},
	}
}

// invalidReads are the refused reads and filtered deletes.
func invalidReads(s norn.Store, b *testBundle, _ norn.LeaseRef) []invalidCase {
	inv := norn.ErrInvalidArgument
	return []invalidCase{
		{"ListBadCursor", func() error { _, err := s.List(b.ctx, norn.Query{Cursor: "%%%"}); return err }, inv, "cursor"},
		// A real cursor with a line break in it: base64 decoders skip
		// those, so it would name the same page under another spelling.
		{"ListCursorWithALineBreak", func() error {
			p, err := s.List(b.ctx, norn.Query{Limit: 1})
			if err != nil {
				return err
			}
			if len(p.NextCursor) < 2 {
				return errors.New("no second page to spoil the cursor of")
			}
			_, err = s.List(b.ctx, norn.Query{Limit: 1, Cursor: p.NextCursor[:1] + "\n" + p.NextCursor[1:]})
			return err
		}, inv, "cursor"},
		{"ListOverMaxLimit", func() error { _, err := s.List(b.ctx, norn.Query{Limit: norn.MaxListLimit + 1}); return err }, inv, "limit"},
		{"ListNegativeLimit", func() error { _, err := s.List(b.ctx, norn.Query{Limit: -1}); return err }, inv, "limit"},
		{"ListBadOrder", func() error { _, err := s.List(b.ctx, norn.Query{Order: "oldest"}); return err }, inv, "order"},
		{"ListBadStatus", func() error {
			_, err := s.List(b.ctx, norn.Query{Filter: norn.Filter{Statuses: []norn.Status{"done"}}})
			return err
		}, inv, "statuses[0]"},
		{"ListBadQueue", func() error {
			_, err := s.List(b.ctx, norn.Query{Filter: norn.Filter{Queues: []string{"bad q"}}})
			return err
		}, inv, "queues[0]"},
		{"ListLongUniqueKey", func() error {
			_, err := s.List(b.ctx, norn.Query{Filter: norn.Filter{UniqueKey: strings.Repeat("k", norn.MaxUniqueKeyLength+1)}})
			return err
		}, inv, "unique_key"},
		{"StreamBadStatus", func() error {
			it, err := s.Stream(b.ctx, norn.Query{Filter: norn.Filter{Statuses: []norn.Status{"done"}}})
			if err == nil {
				for it.Next() {
				}
				err = it.Err()
				it.Close()
			}
			return err
		}, inv, "statuses[0]"},
		{"CountBadStatus", func() error {
			_, err := s.Count(b.ctx, norn.Filter{Statuses: []norn.Status{norn.StatusReady, "nope"}})
			return err
		}, inv, "statuses[1]"},
		{"CountGroupedBadQueue", func() error {
			_, err := s.CountGrouped(b.ctx, norn.Filter{Queues: []string{""}})
			return err
		}, inv, "queues[0]"},
		{"DeleteMatchingBadStatus", func() error {
			_, err := s.DeleteMatching(b.ctx, norn.Filter{Statuses: []norn.Status{"x"}})
			return err
		}, inv, "statuses[0]"},
		{"DeleteMatchingEmptyFilter", func() error { _, err := s.DeleteMatching(b.ctx, norn.Filter{}); return err }, inv, ""},
	}
}

// invalidSettings are the refused queue settings and transactions.
func invalidSettings(s norn.Store, b *testBundle, r norn.LeaseRef) []invalidCase {
	ok := norn.NewTask{Queue: "q"}
	labels := map[string]string{}
	for i := 0; i <= norn.MaxLabels; i++ {
		labels[fmt.Sprintf("k%d", i)] = "v"
	}
	inv := norn.ErrInvalidArgument
	return []invalidCase{
		{"UpdateQueueBadName", func() error {
			_, err := s.UpdateQueue(b.ctx, "bad q", norn.QueueUpdate{Paused: ptr(true)})
			return err
		}, inv, ""},
		{"UpdateQueueZeroTimeout", func() error {
			_, err := s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{Timeout: ptr(norn.Duration(0))})
			return err
		}, inv, "timeout"},
		{"UpdateQueueNegativeMaxAttempts", func() error {
			_, err := s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{MaxAttempts: ptr(-1)})
			return err
		}, inv, "max_attempts"},
		{"UpdateQueueNegativeRetention", func() error {
			_, err := s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{Retention: &norn.Retention{Completed: dur(-time.Hour)}})
			return err
		}, inv, "retention"},
		{"UpdateQueueBadRetry", func() error {
			_, err := s.UpdateQueue(b.ctx, "q", norn.QueueUpdate{Retry: &norn.RetryPolicy{MaxRetries: 1, Base: dur(time.Hour), Max: dur(time.Second)}})
			return err
		}, inv, "retry.base"},

		{"TransactionNonUTF8Spec", func() error {
			_, err := s.Transact(b.ctx, norn.Txn{Submit: []norn.NewTask{{Queue: "q", Spec: badUTF8}}})
			return err
		}, inv, "submit[0].spec"},
		{"TransactionInvalidSubmit", func() error {
			_, err := s.Transact(b.ctx, norn.Txn{Submit: []norn.NewTask{ok, {Queue: "q", Spec: json.RawMessage(`nope`)}}})
			return err
		}, inv, "submit[1].spec"},
		{"TransactionOverMaxBatchOperations", func() error {
			// Each cancel alone would succeed: the count refuses the whole.
			_, err := s.Transact(b.ctx, norn.Txn{Cancel: slices.Repeat([]string{"ready"}, norn.MaxBatch+1)})
			return err
		}, norn.ErrTooLarge, ""},
	}
}
