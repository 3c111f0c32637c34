package server

import (
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// TestRetryRoutes: the body and query rules of both retry routes, the
// queue scope of tokens and the redriven counter.
func TestRetryRoutes(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "a", Role: RoleClient, Queues: []string{"a"}}}
	})
	admin, scoped := withToken("admin"), withToken("a")
	e.must(200, "POST", "/v1/tasks/batch", `{"tasks":[{"id":"a1","queue":"a"},{"id":"a2","queue":"a"},{"id":"a3","queue":"a","depends_on":["a2"]},
		{"id":"b1","queue":"b"},{"id":"b2","queue":"b"}]}`, admin)
	for _, id := range []string{"a1", "a2", "b1", "b2"} {
		e.must(200, "POST", "/v1/tasks/"+id+"/cancel", "", admin)
	}

	// One task: no body, {} or options; unknown members are refused.
	var tr wire.TaskResponse
	e.must(200, "POST", "/v1/tasks/a1/retry", "", scoped).decode(t, &tr)
	if tr.Task.Status != norn.StatusReady || tr.Task.History[len(tr.Task.History)-1].Type != norn.TaskRedrive {
		t.Fatalf("retried: %+v", tr.Task)
	}
	if c, _ := e.must(409, "POST", "/v1/tasks/a1/retry", "{}", scoped).errorOf(t); c != norn.CodeConflict {
		t.Fatalf("retry of a ready task: %s", c)
	}
	if c, f := e.must(400, "POST", "/v1/tasks/a2/retry", `{"with_dependants":true}`, scoped).errorOf(t); c != norn.CodeInvalidArgument || f != "with_dependants" {
		t.Fatalf("unknown member: %s %s", c, f)
	}
	e.must(400, "POST", "/v1/tasks/a2/retry?x=1", "", scoped)
	e.must(404, "POST", "/v1/tasks/b1/retry", "", scoped) // out of scope looks missing
	e.must(200, "POST", "/v1/tasks/a2/retry", `{"run_at":"2000-01-01T00:00:00Z","with_dependents":true}`, scoped).decode(t, &tr)
	if tr.Task.Status != norn.StatusReady {
		t.Fatalf("retried with a past run_at: %s", tr.Task.Status)
	}
	var a3 wire.TaskResponse
	e.must(200, "GET", "/v1/tasks/a3", "", admin).decode(t, &a3)
	if a3.Task.Status != norn.StatusBlocked {
		t.Fatalf("dependent after retry with dependents: %s", a3.Task.Status)
	}

	// By filter: at least one condition; a scoped token without a queue
	// retries only its own queues, and naming another is refused.
	if c, f := e.must(400, "POST", "/v1/tasks/retry", "", admin).errorOf(t); c != norn.CodeInvalidArgument || f != "filter" {
		t.Fatalf("empty filter: %s %s", c, f)
	}
	e.must(400, "POST", "/v1/tasks/retry?queue=b&limit=3", "", admin)
	e.must(403, "POST", "/v1/tasks/retry?queue=b", "", scoped)
	var rr wire.RetriedResponse
	e.must(200, "POST", "/v1/tasks/retry?status=cancelled", "", scoped).decode(t, &rr)
	if rr.Retried != 0 {
		t.Fatalf("scoped retry by filter retried %d, want 0 (b's tasks are out of scope)", rr.Retried)
	}
	e.must(200, "POST", "/v1/tasks/retry?queue=b&status=cancelled,completed", "{}", admin).decode(t, &rr)
	if rr.Retried != 2 {
		t.Fatalf("retry by filter retried %d, want 2", rr.Retried)
	}

	waitFor(t, func() bool {
		text := string(e.must(200, "GET", "/metrics", "").body)
		return metricLine(text, "norn_tasks_redriven_total", `queue="a"`) == "3" &&
			metricLine(text, "norn_tasks_redriven_total", `queue="b"`) == "2"
	})
}

// TestCancelMatchingRoute: cancel by filter needs a condition, keeps a
// scoped token inside its queues, counts only pending tasks and refuses
// unknown parameters and bodies.
func TestCancelMatchingRoute(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "a", Role: RoleClient, Queues: []string{"a"}}}
	})
	admin, scoped := withToken("admin"), withToken("a")
	e.must(200, "POST", "/v1/tasks/batch", `{"tasks":[{"id":"a1","queue":"a"},{"id":"a2","queue":"a","delay":"1h"},
		{"id":"a3","queue":"a","depends_on":["a1"]},{"id":"b1","queue":"b"},{"id":"b2","queue":"b","labels":{"k":"v"}}]}`, admin)

	if c, f := e.must(400, "POST", "/v1/tasks/cancel", "", admin).errorOf(t); c != norn.CodeInvalidArgument || f != "filter" {
		t.Fatalf("empty filter: %s %s", c, f)
	}
	e.must(400, "POST", "/v1/tasks/cancel?queue=b&limit=3", "", admin)
	e.must(400, "POST", "/v1/tasks/cancel?queue=b", `{"all":true}`, admin)
	e.must(403, "POST", "/v1/tasks/cancel?queue=b", "", scoped)
	var cr wire.CancelledResponse
	e.must(200, "POST", "/v1/tasks/cancel?status=ready,scheduled,blocked", "", scoped).decode(t, &cr)
	// a3 waits for a1: cancelling a1 aborts it (dependency_failed) before
	// the filter reaches it, so it is not counted as cancelled.
	if cr.Cancelled != 2 {
		t.Fatalf("scoped cancel by filter cancelled %d, want a1 and a2", cr.Cancelled)
	}
	var a3 wire.TaskResponse
	e.must(200, "GET", "/v1/tasks/a3", "", admin).decode(t, &a3)
	if a3.Task.Status != norn.StatusAborted || a3.Task.Errors[0].Code != norn.CodeDependencyFailed {
		t.Fatalf("a3 after its dependency was cancelled: %s %+v", a3.Task.Status, a3.Task.Errors)
	}
	e.must(200, "POST", "/v1/tasks/cancel?queue=a&status=cancelled", "{}", admin).decode(t, &cr)
	if cr.Cancelled != 0 {
		t.Fatalf("cancelling cancelled tasks counted %d", cr.Cancelled)
	}
	e.must(200, "POST", "/v1/tasks/cancel?label=k:v", "", admin).decode(t, &cr)
	if cr.Cancelled != 1 {
		t.Fatalf("cancel by label cancelled %d, want 1", cr.Cancelled)
	}
	var tr wire.TaskResponse
	e.must(200, "GET", "/v1/tasks/b1", "", admin).decode(t, &tr)
	if tr.Task.Status != norn.StatusReady {
		t.Fatalf("b1 outside every filter is %s", tr.Task.Status)
	}
}

// TestExpiryOverHTTP: expires_at and expire_in over the API, the error
// naming the field, the sweep's count and the expired counter.
func TestExpiryOverHTTP(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	var sub wire.TaskResponse
	e.must(201, "POST", "/v1/tasks", `{"id":"x1","queue":"exp","expire_in":"50ms"}`).decode(t, &sub)
	if sub.Task.ExpiresAt.IsZero() {
		t.Fatalf("submitted task has no expires_at: %+v", sub.Task)
	}
	if c, f := e.must(400, "POST", "/v1/tasks", `{"queue":"exp","expires_at":"2001-01-01T00:00:00Z"}`).errorOf(t); c != norn.CodeInvalidArgument || f != "tasks[0].expires_at" {
		t.Fatalf("an expiry in the past: %s %s", c, f)
	}
	if c, f := e.must(400, "POST", "/v1/tasks", `{"queue":"exp","expire_in":"1m","expires_at":"2100-01-01T00:00:00Z"}`).errorOf(t); c != norn.CodeInvalidArgument || f != "expire_in" {
		t.Fatalf("both forms: %s %s", c, f)
	}
	waitFor(t, func() bool {
		var tr wire.TaskResponse
		e.must(200, "GET", "/v1/tasks/x1", "").decode(t, &tr)
		return tr.Task.Status == norn.StatusAborted && tr.Task.Errors[0].Code == norn.CodeExpired
	})
	waitFor(t, func() bool {
		return metricLine(string(e.must(200, "GET", "/metrics", "").body), "norn_tasks_expired_total", `queue="exp"`) == "1"
	})
}
