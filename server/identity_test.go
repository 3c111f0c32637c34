package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/oacheck"
	"github.com/nornq/norn/internal/wire"
)

// TestWorkerIdentityBoundToToken: with tokens, a worker id belongs to the
// token that registered it. A claim naming a worker that was never
// registered, or another token's worker, is refused (403, the same answer
// for both), and so are lease calls, alone or in a batch: a worker token of
// the same queue can no longer complete another worker's lease with a
// forged result. The binding lives in the store's worker record, so
// another server on the same store enforces it too. Before, claims
// accepted any worker id and any worker token could end any lease of its
// queues.
func TestWorkerIdentityBoundToToken(t *testing.T) {
	t.Parallel()
	tokens := []Token{{Token: "admin", Role: RoleAdmin}, {Token: "wqa1", Role: RoleWorker, Queues: []string{"qa"}},
		{Token: "wqa2", Role: RoleWorker, Queues: []string{"qa"}}}
	e := startServer(t, func(c *Config) { c.Tokens = tokens })
	admin, wqa1, wqa2 := withToken("admin"), withToken("wqa1"), withToken("wqa2")
	register := func(tok reqOpt) string {
		var reg wire.RegisterResponse
		e.must(201, "POST", "/v1/workers", `{"queues":["qa"]}`, tok).decode(t, &reg)
		return reg.ID
	}
	w1, w2 := register(wqa1), register(wqa2)
	e.must(201, "POST", "/v1/tasks", `{"id":"t","queue":"qa","priority":5}`, admin)

	unknown := e.do("POST", "/v1/queues/qa/claim", `{"worker":"worker-1234567890123456"}`, wqa1)
	theirs := e.do("POST", "/v1/queues/qa/claim", `{"worker":"`+w2+`"}`, wqa1)
	if code, _ := theirs.errorOf(t); theirs.status != 403 || code != norn.CodePermissionDenied {
		t.Errorf("claim as another token's worker: %d %s", theirs.status, theirs.body)
	}
	sameAnswer(t, "claim as an unknown worker vs another token's", unknown, theirs, "worker-1234567890123456", w2)
	e.must(403, "POST", "/v1/claim", `{"worker":"`+w2+`","queues":["qa"]}`, wqa1)

	run := e.claimOne("qa", w1, wqa1)
	lease := `"worker":"` + w1 + `","lease":` + itoa(run.Lease)
	for _, c := range []struct{ path, body string }{
		{"/v1/tasks/t/complete", `{` + lease + `,"result":{"forged":true}}`},
		{"/v1/tasks/t/heartbeat", `{` + lease + `}`},
		{"/v1/tasks/t/fail", `{` + lease + `,"error":{"code":"x"}}`},
		{"/v1/tasks/t/abort", `{` + lease + `,"error":{"code":"x"}}`},
		{"/v1/tasks/t/yield", `{` + lease + `}`},
		{"/v1/tasks/t/snooze", `{` + lease + `,"delay":"1h"}`},
		{"/v1/tasks/t/log", `{` + lease + `,"data":1}`},
	} {
		if r := e.do("POST", c.path, c.body, wqa2); r.status != 403 {
			t.Errorf("POST %s as another token's worker: %d %s", c.path, r.status, r.body)
		}
	}
	var lr wire.LeaseBatchResponse
	e.must(200, "POST", "/v1/leases/batch", `{"ops":[{"op":"heartbeat","id":"t",`+lease+`},{"op":"complete","id":"t",`+lease+`,"result":1}]}`, wqa2).decode(t, &lr)
	for i, res := range lr.Results {
		if res.Error == nil || res.Error.Code != norn.CodePermissionDenied || res.Error.Field != "ops["+itoa(uint64(i))+"].worker" {
			t.Errorf("lease batch op %d as another token's worker: %+v", i, res)
		}
	}
	var tr wire.TaskResponse
	e.must(200, "GET", "/v1/tasks/t", "", admin).decode(t, &tr)
	if tr.Task.Status != norn.StatusRunning || tr.Task.Owner != w1 || tr.Task.Version != run.Version {
		t.Fatalf("the lease changed under refused calls: %+v", tr.Task)
	}

	// A second server on the same store knows the binding.
	srv2, err := New(Config{Addr: "127.0.0.1:0", Store: e.store, Tokens: tokens, Logger: quietLogger(), WrapHandler: oacheck.ForTest(t, openapiDoc)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv2.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("second server did not stop")
		}
	})
	e2 := &env{t: t, srv: srv2, store: e.store, base: srv2.URL()}
	e2.must(403, "POST", "/v1/tasks/t/complete", `{`+lease+`,"result":{"forged":true}}`, wqa2)
	e2.must(200, "POST", "/v1/tasks/t/heartbeat", `{`+lease+`}`, wqa1)
	e2.must(200, "POST", "/v1/tasks/t/complete", `{`+lease+`,"result":{"ok":true}}`, wqa1)

	// The registrar never shows.
	r := e.must(200, "GET", "/v1/workers", "", admin)
	if strings.Contains(string(r.body), "token:") || strings.Contains(string(r.body), "registrar") {
		t.Errorf("the worker list shows registrars: %s", r.body)
	}
}

// TestWorkerIDsWithoutTokens: without tokens every caller may do
// everything, unregistered worker ids included; registrations get random
// ids.
func TestWorkerIDsWithoutTokens(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	e.must(201, "POST", "/v1/tasks", `{"id":"t","queue":"q"}`)
	e.claimOne("q", "any-name")
	var a, b wire.RegisterResponse
	e.must(201, "POST", "/v1/workers", `{}`).decode(t, &a)
	e.must(201, "POST", "/v1/workers", `{}`).decode(t, &b)
	if a.ID == b.ID || a.ID == "worker-1" || b.ID == "worker-2" || len(a.ID) != len("worker-")+16 {
		t.Errorf("worker ids %s, %s", a.ID, b.ID)
	}
}
