package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/oacheck"
	"github.com/nornq/norn/internal/wire"
	"github.com/nornq/norn/store/embedded"
)

// authCase is one route of the auth matrix: a request that is valid for
// an authorized caller, and whether the route is queue-scoped.
type authCase struct {
	method, path, body string
	// scoped: the request targets queues q/q2, so a token scoped to
	// "other" must be refused.
	scoped bool
}

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	tokens := []Token{
		{Token: "admin", Role: RoleAdmin},
		{Token: "client", Role: RoleClient},
		{Token: "worker", Role: RoleWorker},
		{Token: "client-q", Role: RoleClient, Queues: []string{"q", "q2"}},
		{Token: "worker-q", Role: RoleWorker, Queues: []string{"q", "q2"}},
		{Token: "client-other", Role: RoleClient, Queues: []string{"other"}},
		{Token: "worker-other", Role: RoleWorker, Queues: []string{"other"}},
		{Token: "admin-other", Role: RoleAdmin, Queues: []string{"other"}},
	}
	// The matrix fails authentication on purpose, many times over.
	e := startServer(t, func(c *Config) { c.Tokens = tokens; c.MaxAuthFailures = 1 << 30 })
	admin := withToken("admin")
	e.must(201, "POST", "/v1/tasks", `{"id":"run","queue":"q","priority":10}`, admin)
	for _, id := range []string{"c1", "u1", "d1"} {
		e.must(201, "POST", "/v1/tasks", `{"id":"`+id+`","queue":"q"}`, admin)
	}
	// A worker id belongs to the token that registered it: each worker
	// token names its own worker ("WORKER" in the bodies below).
	workerOf := map[string]string{}
	for _, tok := range []string{"worker", "worker-q", "worker-other"} {
		var reg wire.RegisterResponse
		e.must(201, "POST", "/v1/workers", `{}`, withToken(tok)).decode(t, &reg)
		workerOf[tok] = reg.ID
	}
	run := e.claimOne("q", workerOf["worker-q"], withToken("worker-q"))
	if run.ID != "run" {
		t.Fatalf("claimed %s", run.ID)
	}
	lease := `"worker":"WORKER","lease":` + itoa(run.Lease)
	for _, name := range []string{"s", "sd"} {
		e.must(200, "PUT", "/v1/schedules/"+name, `{"queue":"q","cron":"@hourly"}`, admin)
	}
	for _, id := range []string{"bs", "bd"} {
		e.must(201, "POST", "/v1/batches", `{"id":"`+id+`","on_complete":{"queue":"q"}}`, admin)
	}

	cases := map[string]authCase{
		"POST /v1/tasks":                         {"POST", "/v1/tasks", `{"queue":"q"}`, true},
		"POST /v1/tasks/batch":                   {"POST", "/v1/tasks/batch", `{"tasks":[{"queue":"q"}]}`, true},
		"GET /v1/tasks/count":                    {"GET", "/v1/tasks/count?queue=q", "", true},
		"GET /v1/tasks/{id}":                     {"GET", "/v1/tasks/run", "", true},
		"GET /v1/tasks":                          {"GET", "/v1/tasks?queue=q", "", true},
		"DELETE /v1/tasks/{id}":                  {"DELETE", "/v1/tasks/d1", "", true},
		"DELETE /v1/tasks":                       {"DELETE", "/v1/tasks?queue=q&label=k:none", "", true},
		"PATCH /v1/tasks/{id}":                   {"PATCH", "/v1/tasks/u1", `{"priority":3}`, true},
		"POST /v1/tasks/{id}/cancel":             {"POST", "/v1/tasks/c1/cancel", "", true},
		"POST /v1/tasks/{id}/retry":              {"POST", "/v1/tasks/c1/retry", "", true},
		"POST /v1/tasks/retry":                   {"POST", "/v1/tasks/retry?queue=q&label=k:none", "", true},
		"POST /v1/tasks/cancel":                  {"POST", "/v1/tasks/cancel?queue=q&label=k:none", "", true},
		"GET /v1/tasks/{id}/log":                 {"GET", "/v1/tasks/run/log", "", true},
		"POST /v1/tasks/{id}/signals":            {"POST", "/v1/tasks/u1/signals", `{"name":"go"}`, true},
		"GET /v1/tasks/{id}/signals":             {"GET", "/v1/tasks/run/signals", "", true},
		"POST /v1/transactions":                  {"POST", "/v1/transactions", `{"submit":[{"queue":"q"}]}`, true},
		"POST /v1/workers":                       {"POST", "/v1/workers", `{"name":"n","queues":["q"]}`, true},
		"GET /v1/workers":                        {"GET", "/v1/workers", "", false},
		"GET /v1/whoami":                         {"GET", "/v1/whoami", "", false},
		"POST /v1/queues/{queue}/claim":          {"POST", "/v1/queues/q2/claim", `{"worker":"WORKER"}`, true},
		"POST /v1/claim":                         {"POST", "/v1/claim", `{"worker":"WORKER","queues":["q2"]}`, true},
		"POST /v1/tasks/{id}/heartbeat":          {"POST", "/v1/tasks/run/heartbeat", `{` + lease + `}`, true},
		"POST /v1/tasks/{id}/log":                {"POST", "/v1/tasks/run/log", `{` + lease + `,"data":1}`, true},
		"POST /v1/tasks/{id}/complete":           {"POST", "/v1/tasks/run/complete", `{` + lease + `}`, true},
		"POST /v1/tasks/{id}/fail":               {"POST", "/v1/tasks/run/fail", `{` + lease + `,"error":{"code":"x"}}`, true},
		"POST /v1/tasks/{id}/abort":              {"POST", "/v1/tasks/run/abort", `{` + lease + `,"error":{"code":"x"}}`, true},
		"POST /v1/tasks/{id}/yield":              {"POST", "/v1/tasks/run/yield", `{` + lease + `}`, true},
		"POST /v1/tasks/{id}/snooze":             {"POST", "/v1/tasks/run/snooze", `{` + lease + `,"delay":"1s"}`, true},
		"POST /v1/tasks/{id}/await":              {"POST", "/v1/tasks/run/await", `{` + lease + `,"tasks":[{"queue":"q"}]}`, true},
		"POST /v1/leases/batch":                  {"POST", "/v1/leases/batch", `{"ops":[{"op":"heartbeat","id":"run",` + lease + `}]}`, true},
		"GET /v1/queues":                         {"GET", "/v1/queues", "", false},
		"GET /v1/queues/{queue}":                 {"GET", "/v1/queues/q", "", true},
		"PATCH /v1/queues/{queue}":               {"PATCH", "/v1/queues/q", `{"max_attempts":3}`, true},
		"GET /v1/queues/{queue}/keys/{key}":      {"GET", "/v1/queues/q/keys/k", "", true},
		"GET /v1/queues/{queue}/sequences/{key}": {"GET", "/v1/queues/q/sequences/k", "", true},
		"GET /v1/queues/{queue}/sequences":       {"GET", "/v1/queues/q/sequences?halted=true", "", true},
		"PUT /v1/queues/{queue}/keys/{key}":      {"PUT", "/v1/queues/q/keys/k", `{"limit":2}`, true},
		"DELETE /v1/queues/{queue}/keys/{key}":   {"DELETE", "/v1/queues/q/keys/k", "", true},
		"GET /v1/stats":                          {"GET", "/v1/stats", "", false},
		"GET /v1/stats/throughput":               {"GET", "/v1/stats/throughput?queue=q", "", true},
		"POST /v1/sweep":                         {"POST", "/v1/sweep", "", false},
		"POST /v1/backup":                        {"POST", "/v1/backup", `{"dir":"/nonexistent/parent/b"}`, false},
		"GET /v1/events":                         {"GET", "/v1/events?queue=q", "", true},
		// Schedules of other queues look like missing ones (404, see
		// TestScheduleScope), so only PUT is a scope refusal.
		"GET /v1/schedules":                 {"GET", "/v1/schedules", "", false},
		"GET /v1/schedules/{name}":          {"GET", "/v1/schedules/s", "", false},
		"PUT /v1/schedules/{name}":          {"PUT", "/v1/schedules/s2", `{"queue":"q","cron":"@hourly"}`, true},
		"PATCH /v1/schedules/{name}":        {"PATCH", "/v1/schedules/s", `{"paused":true}`, false},
		"DELETE /v1/schedules/{name}":       {"DELETE", "/v1/schedules/sd", "", false},
		"POST /v1/schedules/{name}/trigger": {"POST", "/v1/schedules/s/trigger", "", false},
		// Batches whose callbacks submit to other queues look like missing
		// ones; creating one is a scope refusal.
		"POST /v1/batches":           {"POST", "/v1/batches", `{"on_complete":{"queue":"q"}}`, true},
		"GET /v1/batches":            {"GET", "/v1/batches", "", false},
		"GET /v1/batches/{id}":       {"GET", "/v1/batches/bs", "", true},
		"POST /v1/batches/{id}/seal": {"POST", "/v1/batches/bs/seal", "", true},
		"DELETE /v1/batches/{id}":    {"DELETE", "/v1/batches/bd", "", true},
	}

	// status sends a request and returns the status and error code without
	// reading a streaming body to its end.
	status := func(c authCase, tok string) (int, norn.Code, http.Header) {
		t.Helper()
		var body io.Reader
		if c.body != "" {
			w, ok := workerOf[tok]
			if !ok {
				w = workerOf["worker-q"]
			}
			body = strings.NewReader(strings.ReplaceAll(c.body, "WORKER", w))
		}
		req, _ := http.NewRequest(c.method, e.base+c.path, body)
		if c.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var code norn.Code
		if resp.StatusCode >= 400 {
			b, _ := io.ReadAll(resp.Body)
			r := response{status: resp.StatusCode, body: b}
			code, _ = r.errorOf(t)
		}
		return resp.StatusCode, code, resp.Header
	}

	seen := map[string]bool{}
	for _, rt := range e.srv.apiRoutes() {
		if rt.public {
			continue
		}
		seen[rt.pattern] = true
		c, ok := cases[rt.pattern]
		if !ok {
			t.Errorf("route %s has no auth matrix case", rt.pattern)
			continue
		}
		if st, code, h := status(c, ""); st != 401 || code != norn.CodeUnauthenticated || h.Get("WWW-Authenticate") == "" {
			t.Errorf("%s without token: %d %s", rt.pattern, st, code)
		}
		if st, code, _ := status(c, "nope"); st != 401 || code != norn.CodeUnauthenticated {
			t.Errorf("%s with unknown token: %d %s", rt.pattern, st, code)
		}
		allows := func(r Role) bool { return (&principal{role: r}).roleAllowed(rt.roles) }
		for _, r := range []Role{RoleClient, RoleWorker} {
			if allows(r) {
				continue
			}
			if st, code, _ := status(c, string(r)); st != 403 || code != norn.CodePermissionDenied {
				t.Errorf("%s with role %s: %d %s, want 403", rt.pattern, r, st, code)
			}
		}
		// The token with the least privilege that may call the route.
		role := RoleAdmin
		if allows(RoleClient) {
			role = RoleClient
		} else if allows(RoleWorker) {
			role = RoleWorker
		}
		if c.scoped {
			// A task of another queue looks like one that does not exist
			// (a lease batch says so per op); a queue the caller names is
			// refused as such.
			wantSt, wantCode := 403, norn.CodePermissionDenied
			switch {
			case strings.Contains(rt.pattern, "{id}"):
				wantSt, wantCode = 404, norn.CodeNotFound
			case rt.pattern == "POST /v1/leases/batch":
				wantSt, wantCode = 200, ""
			}
			if st, code, _ := status(c, string(role)+"-other"); st != wantSt || code != wantCode {
				t.Errorf("%s with %s token scoped to another queue: %d %s, want %d %s", rt.pattern, role, st, code, wantSt, wantCode)
			}
		}
		tok := string(role)
		if role != RoleAdmin {
			tok += "-q" // in scope: must be allowed
		}
		if st, code, _ := status(c, tok); st == 401 || st == 403 || st >= 500 {
			t.Errorf("%s with valid token %s: %d %s", rt.pattern, tok, st, code)
		}
	}
	for p := range cases {
		if !seen[p] {
			t.Errorf("auth case %s matches no route", p)
		}
	}
	// Public routes need no token.
	for _, p := range []string{"/healthz", "/readyz", "/v1/openapi.json", "/metrics"} {
		e.must(200, "GET", p, "")
	}
}

// TestScopedListings: a scoped token only sees its queues when it does not
// name any.
func TestScopedListings(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "a", Role: RoleClient, Queues: []string{"a"}}}
	})
	admin := withToken("admin")
	e.must(200, "POST", "/v1/tasks/batch", `{"tasks":[{"queue":"a"},{"queue":"b"},{"queue":"b"}]}`, admin)
	scoped := withToken("a")
	var page norn.Page
	e.must(200, "GET", "/v1/tasks", "", scoped).decode(t, &page)
	if len(page.Tasks) != 1 || page.Tasks[0].Queue != "a" {
		t.Fatalf("scoped list: %+v", page.Tasks)
	}
	var cnt wire.CountResponse
	e.must(200, "GET", "/v1/tasks/count", "", scoped).decode(t, &cnt)
	if cnt.Count != 1 {
		t.Fatalf("scoped count %d", cnt.Count)
	}
	var st norn.Stats
	e.must(200, "GET", "/v1/stats", "", scoped).decode(t, &st)
	if st.Total != 1 {
		t.Fatalf("scoped stats %+v", st)
	}
	var qs wire.QueuesResponse
	e.must(200, "GET", "/v1/queues", "", scoped).decode(t, &qs)
	if len(qs.Queues) != 1 || qs.Queues[0].Name != "a" {
		t.Fatalf("scoped queues %+v", qs)
	}
	var many wire.ManyResponse
	e.must(200, "GET", "/v1/tasks/"+page.Tasks[0].ID+",x", "", scoped).decode(t, &many)
	e.must(403, "DELETE", "/v1/tasks?queue=b", "", scoped)
	e.must(400, "DELETE", "/v1/tasks", "", scoped) // a filter is still required
	e.must(200, "GET", "/v1/tasks/count?queue=b", "", admin).decode(t, &cnt)
	if cnt.Count != 2 {
		t.Fatalf("queue b lost tasks: %d", cnt.Count)
	}
}

// TestWhoami: the dashboard reads its rights from /v1/whoami instead of
// trying actions, so the answer must be exact for every kind of token.
func TestWhoami(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, tc := range []struct {
		name   string
		tokens []Token
		bearer string
		want   string
	}{
		{"auth off", nil, "", `{"role":"admin","auth":false}`},
		{"admin", []Token{{Token: "a", Role: RoleAdmin}}, "a", `{"role":"admin","auth":true}`},
		{"scoped client", []Token{{Token: "c", Role: RoleClient, Queues: []string{"q1", "q2"}}}, "c", `{"role":"client","queues":["q1","q2"],"auth":true}`},
		{"worker", []Token{{Token: "w", Role: RoleWorker}}, "w", `{"role":"worker","auth":true}`},
	} {
		srv, err := New(Config{Addr: "127.0.0.1:0", Store: st, Tokens: tc.tokens, WrapHandler: oacheck.ForTest(t, openapiDoc)})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("GET", "http://127.0.0.1:7070/v1/whoami", nil)
		if tc.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+tc.bearer)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != tc.want {
			t.Errorf("%s: %d %s, want %s", tc.name, rec.Code, got, tc.want)
		}
		srv.Close()
	}
}
