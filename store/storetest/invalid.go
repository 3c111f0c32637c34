package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// testInvalidInput feeds every kind of bad input to every operation and
// checks the error class, the field it names, and that nothing changed.
func testInvalidInput(t *testing.T, f Factory) {
	e := newEnv(t, f)
	e.submit(norn.NewTask{ID: "ready", Queue: "q"}, norn.NewTask{ID: "run", Queue: "r"})
	run := e.claim("w", "r")
	r := ref(run)
	before := e.snapshot()

	sub := func(nts ...norn.NewTask) func() error {
		return func() error { _, err := e.s.Submit(e.ctx, nts...); return err }
	}
	ok := norn.NewTask{Queue: "q"}
	bigJSON := json.RawMessage(`"` + strings.Repeat("a", norn.MaxSpecBytes) + `"`)
	labels := map[string]string{}
	for i := 0; i <= norn.MaxLabels; i++ {
		labels[fmt.Sprintf("k%d", i)] = "v"
	}
	claim := func(req norn.ClaimRequest) func() error {
		return func() error { _, err := e.s.Claim(e.ctx, req); return err }
	}
	inv, big := norn.ErrInvalidArgument, norn.ErrTooLarge
	cases := []struct {
		name  string
		call  func() error
		want  *norn.Error
		field string // "" = the contract leaves the field name open
	}{
		{"submit without queue", sub(norn.NewTask{}), inv, "tasks[0].queue"},
		{"submit bad queue", sub(norn.NewTask{Queue: "bad queue!"}), inv, "tasks[0].queue"},
		{"submit long queue", sub(norn.NewTask{Queue: strings.Repeat("q", norn.MaxQueueLength+1)}), inv, "tasks[0].queue"},
		{"submit oversize spec", sub(norn.NewTask{Queue: "q", Spec: bigJSON}), big, "tasks[0].spec"},
		{"submit invalid JSON spec", sub(norn.NewTask{Queue: "q", Spec: json.RawMessage(`{"a":`)}), inv, "tasks[0].spec"},
		{"submit negative delay", sub(norn.NewTask{Queue: "q", Delay: dur(-time.Second)}), inv, "tasks[0].delay"},
		{"submit negative timeout", sub(norn.NewTask{Queue: "q", Timeout: dur(-time.Second)}), inv, "tasks[0].timeout"},
		{"submit negative max_attempts", sub(norn.NewTask{Queue: "q", MaxAttempts: ptr(-1)}), inv, "tasks[0].max_attempts"},
		{"submit negative max_retries", sub(norn.NewTask{Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: -1}}), inv, "tasks[0].retry.max_retries"},
		{"submit negative backoff", sub(norn.NewTask{Queue: "q", Retry: &norn.RetryPolicy{MaxRetries: 1, Base: dur(-time.Second)}}), inv, "tasks[0].retry"},
		{"submit id with space", sub(norn.NewTask{ID: "a b", Queue: "q"}), inv, "tasks[0].id"},
		{"submit long id", sub(norn.NewTask{ID: strings.Repeat("i", norn.MaxIDLength+1), Queue: "q"}), inv, "tasks[0].id"},
		{"submit too many labels", sub(norn.NewTask{Queue: "q", Labels: labels}), inv, "tasks[0].labels"},
		{"submit second task invalid", sub(ok, norn.NewTask{Queue: "bad queue"}), inv, "tasks[1].queue"},
		{"submit duplicate ids in batch", sub(norn.NewTask{ID: "d", Queue: "q"}, norn.NewTask{ID: "d", Queue: "q"}), inv, "tasks[1].id"},
		{"submit missing dependency", sub(ok, norn.NewTask{Queue: "q", DependsOn: []string{"nope"}}), inv, "tasks[1].depends_on[0]"},

		{"update bad labels", func() error {
			_, err := e.s.Update(e.ctx, "ready", norn.Update{Labels: map[string]string{"": "v"}})
			return err
		}, inv, "labels"},

		{"claim without worker", claim(norn.ClaimRequest{Queues: []string{"q"}}), inv, "worker"},
		{"claim without queues", claim(norn.ClaimRequest{Worker: "w"}), inv, "queues"},
		{"claim bad queue", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q", "bad q"}}), inv, "queues[1]"},
		{"claim too many", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: norn.MaxClaim + 1}), inv, "n"},
		{"claim negative n", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: -1}), inv, "n"},
		{"claim negative timeout", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Timeout: dur(-time.Second)}), inv, "timeout"},
		{"claim negative wait", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Wait: dur(-time.Second)}), inv, "wait"},
		{"claim wait too long", claim(norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Wait: dur(norn.MaxClaimWait + time.Second)}), inv, "wait"},

		{"heartbeat progress > 1", func() error {
			_, err := e.s.Heartbeat(e.ctx, r, norn.Heartbeat{Progress: ptr(1.5)})
			return err
		}, inv, "progress"},
		{"heartbeat progress < 0", func() error {
			_, err := e.s.Heartbeat(e.ctx, r, norn.Heartbeat{Progress: ptr(-0.1)})
			return err
		}, inv, "progress"},
		{"heartbeat lease 0", func() error {
			_, err := e.s.Heartbeat(e.ctx, norn.LeaseRef{TaskID: "run", Worker: "w"}, norn.Heartbeat{})
			return err
		}, inv, "lease"},
		{"heartbeat without worker", func() error {
			_, err := e.s.Heartbeat(e.ctx, norn.LeaseRef{TaskID: "run", Lease: 1}, norn.Heartbeat{})
			return err
		}, inv, "worker"},
		{"complete without id", func() error { return e.s.Complete(e.ctx, norn.LeaseRef{Worker: "w", Lease: 1}, nil) }, inv, "id"},
		{"log invalid JSON", func() error {
			_, err := e.s.AppendLog(e.ctx, r, norn.LogAppend{Data: json.RawMessage(`{`)})
			return err
		}, inv, "data"},
		{"log oversize", func() error {
			_, err := e.s.AppendLog(e.ctx, r, norn.LogAppend{Data: bigJSON})
			return err
		}, big, "data"},
		{"complete invalid JSON result", func() error { return e.s.Complete(e.ctx, r, json.RawMessage(`[1,`)) }, inv, "result"},
		{"complete oversize result", func() error { return e.s.Complete(e.ctx, r, bigJSON) }, big, "result"},
		{"fail oversize error", func() error {
			return e.s.Fail(e.ctx, r, norn.ErrorInfo{Code: "x", Description: strings.Repeat("d", norn.MaxErrorBytes)})
		}, big, "error"},

		{"list bad cursor", func() error { _, err := e.s.List(e.ctx, norn.Query{Cursor: "%%%"}); return err }, inv, "cursor"},
		{"list bad status", func() error {
			_, err := e.s.List(e.ctx, norn.Query{Filter: norn.Filter{Statuses: []norn.Status{"done"}}})
			return err
		}, inv, "statuses[0]"},
		{"list bad queue", func() error {
			_, err := e.s.List(e.ctx, norn.Query{Filter: norn.Filter{Queues: []string{"bad q"}}})
			return err
		}, inv, "queues[0]"},
		{"stream bad status", func() error {
			it, err := e.s.Stream(e.ctx, norn.Query{Filter: norn.Filter{Statuses: []norn.Status{"done"}}})
			if err == nil {
				for it.Next() {
				}
				err = it.Err()
				it.Close()
			}
			return err
		}, inv, "statuses[0]"},
		{"count bad status", func() error {
			_, err := e.s.Count(e.ctx, norn.Filter{Statuses: []norn.Status{norn.StatusReady, "nope"}})
			return err
		}, inv, "statuses[1]"},
		{"count grouped bad queue", func() error {
			_, err := e.s.CountGrouped(e.ctx, norn.Filter{Queues: []string{""}})
			return err
		}, inv, "queues[0]"},
		{"delete matching bad status", func() error {
			_, err := e.s.DeleteMatching(e.ctx, norn.Filter{Statuses: []norn.Status{"x"}})
			return err
		}, inv, "statuses[0]"},
		{"delete matching empty filter", func() error { _, err := e.s.DeleteMatching(e.ctx, norn.Filter{}); return err }, inv, ""},

		{"update queue bad name", func() error {
			_, err := e.s.UpdateQueue(e.ctx, "bad q", norn.QueueUpdate{Paused: ptr(true)})
			return err
		}, inv, ""},
		{"update queue zero timeout", func() error {
			_, err := e.s.UpdateQueue(e.ctx, "q", norn.QueueUpdate{Timeout: ptr(norn.Duration(0))})
			return err
		}, inv, "timeout"},
		{"update queue negative max_attempts", func() error {
			_, err := e.s.UpdateQueue(e.ctx, "q", norn.QueueUpdate{MaxAttempts: ptr(-1)})
			return err
		}, inv, "max_attempts"},
		{"update queue negative retention", func() error {
			_, err := e.s.UpdateQueue(e.ctx, "q", norn.QueueUpdate{Retention: &norn.Retention{Completed: dur(-time.Hour)}})
			return err
		}, inv, "retention"},
		{"update queue bad retry", func() error {
			_, err := e.s.UpdateQueue(e.ctx, "q", norn.QueueUpdate{Retry: &norn.RetryPolicy{MaxRetries: 1, Base: dur(time.Hour), Max: dur(time.Second)}})
			return err
		}, inv, "retry.base"},

		{"transaction invalid submit", func() error {
			_, err := e.s.Transact(e.ctx, norn.Txn{Submit: []norn.NewTask{ok, {Queue: "q", Spec: json.RawMessage(`nope`)}}})
			return err
		}, inv, "submit[1].spec"},
	}
	for _, tc := range cases {
		err := tc.call()
		if tc.field == "" {
			wantErr(t, tc.name, err, tc.want)
		} else {
			wantField(t, tc.name, err, tc.want, tc.field)
		}
		e.unchanged(tc.name, before)
	}
	// The refused calls left the live lease intact.
	if _, err := e.s.Heartbeat(e.ctx, r, norn.Heartbeat{}); err != nil {
		t.Fatalf("heartbeat after refused calls: %v", err)
	}
	qi, err := e.s.Queue(e.ctx, "q")
	if err != nil || qi.Paused {
		t.Fatalf("queue q after refused updates: %+v, %v", qi, err)
	}
	sameDefaults(t, "queue q after refused updates", qi.Defaults, norn.DefaultQueueDefaults())
}
