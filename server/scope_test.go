package server

import (
	"strings"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// sameAnswer fails unless a (about id a) and b (about id b) are the same
// answer once the ids are blanked out.
func sameAnswer(t *testing.T, what string, ra, rb response, a, b string) {
	t.Helper()
	ba := strings.ReplaceAll(string(ra.body), a, "ID")
	bb := strings.ReplaceAll(string(rb.body), b, "ID")
	if ra.status != rb.status || ba != bb {
		t.Errorf("%s: another queue's id answers %d %s; an unused id answers %d %s", what, ra.status, ra.body, rb.status, rb.body)
	}
}

// TestScopedTokenCannotTellOtherQueuesIDs: every route that names task ids
// answers a scoped token about another queue's task exactly as about an id
// nobody uses. Before, a transaction answered `task "other-b" not found`
// for one and `cancel[0]: …` for the other, a lease batch 404 for one and
// a per-op error for the other, and a dependency on another queue's task
// was accepted (its dependent then followed the hidden task's fate) while
// an unused one was refused.
func TestScopedTokenCannotTellOtherQueuesIDs(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "cqa", Role: RoleClient, Queues: []string{"qa"}},
			{Token: "wqa", Role: RoleWorker, Queues: []string{"qa"}}}
	})
	admin, cqa, wqa := withToken("admin"), withToken("cqa"), withToken("wqa")
	e.must(201, "POST", "/v1/tasks", `{"id":"other-b","queue":"qb"}`, admin)
	e.must(201, "POST", "/v1/tasks", `{"id":"mine","queue":"qa"}`, admin)
	const other, unused = "other-b", "unused-b"
	pair := func(method, path, tmpl string, tok reqOpt) {
		t.Helper()
		ra := e.do(method, strings.ReplaceAll(path, "ID", other), strings.ReplaceAll(tmpl, "ID", other), tok)
		rb := e.do(method, strings.ReplaceAll(path, "ID", unused), strings.ReplaceAll(tmpl, "ID", unused), tok)
		sameAnswer(t, method+" "+path+" "+tmpl, ra, rb, other, unused)
		if ra.status < 400 {
			t.Errorf("%s %s %s: %d %s, want a refusal", method, path, tmpl, ra.status, ra.body)
		}
	}
	for _, body := range []string{
		`{"cancel":["ID"]}`, `{"delete":["ID"]}`, `{"update":[{"id":"ID","priority":3}]}`, `{"require":[{"id":"ID"}]}`,
		`{"require":[{"id":"mine"}],"update":[{"id":"mine","priority":2}],"cancel":["mine","ID"]}`,
		`{"submit":[{"queue":"qa","depends_on":["ID"]}]}`,
		`{"submit":[{"id":"n1","queue":"qa"},{"queue":"qa","depends_on":["n1","ID"]}]}`,
	} {
		pair("POST", "/v1/transactions", body, cqa)
	}
	pair("POST", "/v1/tasks", `{"queue":"qa","depends_on":["mine","ID"]}`, cqa)
	pair("POST", "/v1/tasks/batch", `{"tasks":[{"queue":"qa"},{"queue":"qa","depends_on":["ID"]}]}`, cqa)
	for _, path := range []string{"/v1/tasks/ID/cancel", "/v1/tasks/ID/retry"} {
		pair("POST", path, "", cqa)
	}
	pair("PATCH", "/v1/tasks/ID", `{"priority":1}`, cqa)
	pair("DELETE", "/v1/tasks/ID", "", cqa)

	// Lease calls: one batch answers per op, alike for both.
	var reg wire.RegisterResponse
	e.must(201, "POST", "/v1/workers", `{"queues":["qa"]}`, wqa).decode(t, &reg)
	batch := `{"ops":[{"op":"heartbeat","id":"ID","worker":"` + reg.ID + `","lease":1},{"op":"complete","id":"ID","worker":"` + reg.ID + `","lease":1}]}`
	ra := e.do("POST", "/v1/leases/batch", strings.ReplaceAll(batch, "ID", other), wqa)
	rb := e.do("POST", "/v1/leases/batch", strings.ReplaceAll(batch, "ID", unused), wqa)
	sameAnswer(t, "lease batch", ra, rb, other, unused)
	var lr wire.LeaseBatchResponse
	ra.decode(t, &lr)
	if ra.status != 200 || len(lr.Results) != 2 || lr.Results[0].Error == nil || lr.Results[0].Error.Code != norn.CodeNotFound {
		t.Errorf("lease batch on another queue's task: %d %s", ra.status, ra.body)
	}
	for _, path := range []string{"/v1/tasks/ID/heartbeat", "/v1/tasks/ID/complete"} {
		pair("POST", path, `{"worker":"`+reg.ID+`","lease":1}`, wqa)
	}

	// The hidden task is untouched and nothing of qa depends on it.
	var tr wire.TaskResponse
	e.must(200, "GET", "/v1/tasks/other-b", "", admin).decode(t, &tr)
	if tr.Task.Status != norn.StatusReady || tr.Task.Version != 1 {
		t.Errorf("another queue's task changed: %+v", tr.Task)
	}
	if n := e.count(norn.Filter{DependsOn: other}); n != 0 {
		t.Errorf("%d tasks depend on another queue's task", n)
	}
}

// TestScopedRetryAndHiddenDependencies: the retry of a scoped token's task
// that depends on another queue's task answers as if that dependency were
// deleted, whatever its status; and a retry with dependents that would
// bring back tasks of other queues is refused and changes nothing, while
// one that stays in the token's queues works. Before, the retry answered
// 409 naming the hidden task's status, and with_dependents moved other
// queues' tasks.
func TestScopedRetryAndHiddenDependencies(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "cqa", Role: RoleClient, Queues: []string{"qa"}}}
	})
	admin, cqa := withToken("admin"), withToken("cqa")
	status := func(id string) norn.Status {
		var tr wire.TaskResponse
		e.must(200, "GET", "/v1/tasks/"+id, "", admin).decode(t, &tr)
		return tr.Task.Status
	}

	// d (qa) depends on x (qb), created by a token that may read both.
	e.must(201, "POST", "/v1/tasks", `{"id":"x","queue":"qb"}`, admin)
	e.must(201, "POST", "/v1/tasks", `{"id":"d","queue":"qa","depends_on":["x"]}`, admin)
	e.must(200, "POST", "/v1/tasks/x/cancel", "", admin)
	if st := status("d"); st != norn.StatusAborted {
		t.Fatalf("d is %s", st)
	}
	first := e.do("POST", "/v1/tasks/d/retry", "", cqa)
	e.must(200, "POST", "/v1/tasks/x/retry", "", admin) // x is pending now
	second := e.do("POST", "/v1/tasks/d/retry", "", cqa)
	if first.status != 409 || !strings.Contains(string(first.body), "deleted") || string(first.body) != string(second.body) {
		t.Errorf("retry of a task depending on another queue's: %d %s, then %d %s; want the same 409 as for a deleted dependency",
			first.status, first.body, second.status, second.body)
	}
	if st := status("d"); st != norn.StatusAborted {
		t.Errorf("d is %s after refused retries", st)
	}

	// p (qa) has dependents in qa (c) and in qb (o).
	e.must(201, "POST", "/v1/tasks", `{"id":"p","queue":"qa"}`, admin)
	e.must(201, "POST", "/v1/tasks", `{"id":"c","queue":"qa","depends_on":["p"]}`, admin)
	e.must(201, "POST", "/v1/tasks", `{"id":"o","queue":"qb","depends_on":["c"]}`, admin)
	e.must(200, "POST", "/v1/tasks/p/cancel", "", cqa)
	for _, id := range []string{"p", "c", "o"} {
		if st := status(id); !st.Terminal() {
			t.Fatalf("%s is %s", id, st)
		}
	}
	r := e.do("POST", "/v1/tasks/p/retry", `{"with_dependents":true}`, cqa)
	if code, _ := r.errorOf(t); r.status != 403 || code != norn.CodePermissionDenied || strings.Contains(string(r.body), `"o"`) {
		t.Errorf("retry with dependents reaching another queue: %d %s", r.status, r.body)
	}
	for _, id := range []string{"p", "c", "o"} {
		if st := status(id); !st.Terminal() {
			t.Errorf("%s is %s after a refused retry", id, st)
		}
	}
	e.must(200, "POST", "/v1/tasks/p/retry", `{"with_dependents":true}`, admin)
	if status("o") != norn.StatusBlocked {
		t.Errorf("an unscoped token's retry with dependents leaves o %s", status("o"))
	}

	// Within the token's queues, with dependents works.
	e.must(201, "POST", "/v1/tasks", `{"id":"p2","queue":"qa"}`, cqa)
	e.must(201, "POST", "/v1/tasks", `{"id":"c2","queue":"qa","depends_on":["p2"]}`, cqa)
	e.must(200, "POST", "/v1/tasks/p2/cancel", "", cqa)
	e.must(200, "POST", "/v1/tasks/p2/retry", `{"with_dependents":true}`, cqa)
	if st := status("c2"); st != norn.StatusBlocked {
		t.Errorf("c2 is %s after a retry with dependents", st)
	}
}
