package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/oacheck"
	"github.com/nornq/norn/internal/wire"
)

// loadOpenAPI loads the document the way every checked test does
// (internal/oacheck): valid, OpenAPI 3.1.
func loadOpenAPI(t *testing.T) *oacheck.Checker {
	t.Helper()
	c, err := oacheck.New(openapiDoc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestOpenAPIDocument checks the document is valid and describes exactly
// the server's routes.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t).Doc()
	var documented []string
	for tmpl, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+tmpl)
		}
	}
	sort.Strings(documented)
	var served []string
	for _, rt := range (&Server{}).apiRoutes() {
		served = append(served, rt.pattern)
	}
	served = append(served, "GET /metrics")
	sort.Strings(served)
	if strings.Join(documented, "\n") != strings.Join(served, "\n") {
		t.Errorf("documented routes:\n%s\n\nserved routes:\n%s", strings.Join(documented, "\n"), strings.Join(served, "\n"))
	}
}

// TestOpenAPIResponses drives every route of a real server and validates
// each response (status, content type, body schema) against the document.
func TestOpenAPIResponses(t *testing.T) {
	t.Parallel()
	checker := loadOpenAPI(t)
	doc := checker.Doc()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}}
	})
	tok := withToken("admin")
	covered := map[string]bool{}

	check := func(method, path string, status int, header http.Header, body []byte) error {
		req, _ := http.NewRequest(method, e.base+path, nil)
		route, params := checker.Route(method, req.URL.Path)
		if route == nil {
			return errors.New("no documented route")
		}
		covered[method+" "+route.Path] = true
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 status,
			Header:                 header,
			Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
		}
		in.SetBodyBytes(body)
		return openapi3filter.ValidateResponse(context.Background(), in)
	}
	validate := func(method, path string, status int, header http.Header, body []byte) {
		t.Helper()
		if err := check(method, path, status, header, body); err != nil {
			t.Errorf("%s %s → %d %s\ndoes not match the document: %v", method, path, status, truncBytes(body), err)
		}
	}
	// The validator must be able to fail: wrong shapes and undeclared
	// statuses are refused. And it must accept what the document allows:
	// any JSON, null included, where it says "any JSON value", and the
	// OpenAPI 3.1 type lists (["object","null"]).
	jsonHeader := http.Header{"Content-Type": {"application/json"}}
	task := func(extra string) string {
		return `{"task":{"id":"a","queue":"q","priority":0,"status":"ready","progress":0,` +
			`"created":"2026-01-01T00:00:00Z","updated":"2026-01-01T00:00:00Z","run_at":"2026-01-01T00:00:00Z",` +
			`"lease":0,"attempts":0,"max_attempts":1,"timeout":"1m0s","version":1` + extra + `}}`
	}
	queue := func(counts string) string {
		return `{"queue":{"name":"q","paused":false,"counts":` + counts +
			`,"defaults":{"timeout":"1m0s","max_attempts":0,"retention":{"completed":"0s","aborted":"0s","cancelled":"0s"},"max_runtime":"0s"}}}`
	}
	for _, c := range []struct {
		path   string
		status int
		body   string
		ok     bool
	}{
		{"/v1/tasks/a", 200, task(""), true},
		{"/v1/tasks/a", 200, task(`,"spec":null,"result":null`), true},
		{"/v1/tasks/a", 200, task(`,"spec":[1,"x",{"y":null}],"result":"done"`), true},
		{"/v1/tasks/a", 200, task(`,"priority":null`), false},
		{"/v1/tasks/a", 200, task(`,"labels":null`), false},
		{"/v1/tasks/a", 200, task(`,"status":"bogus"`), false},
		{"/v1/tasks/a", 200, `{"task":{"id":1}}`, false},
		{"/v1/tasks/a", 200, `{"task":{"id":"a","queue":"q"},"extra":true}`, false},
		{"/v1/tasks/a", 418, `{}`, false},
		{"/v1/tasks/a", 404, `{"error":{"code":"nope","message":"m"}}`, false},
		{"/v1/queues/q", 200, queue(`{"pending":1}`), true},
		{"/v1/queues/q", 200, queue(`null`), true},
		{"/v1/queues/q", 200, queue(`"none"`), false},
		{"/v1/queues/q", 200, queue(`{"pending":"1"}`), false},
	} {
		err := check("GET", c.path, c.status, jsonHeader, []byte(c.body))
		if c.ok && err != nil {
			t.Errorf("validator refused %d %s: %v", c.status, c.body, err)
		}
		if !c.ok && err == nil {
			t.Errorf("validator accepted %d %s", c.status, c.body)
		}
	}
	call := func(want int, method, path, body string, opts ...reqOpt) response {
		t.Helper()
		r := e.must(want, method, path, body, append([]reqOpt{tok}, opts...)...)
		validate(method, path, r.status, r.header, r.body)
		return r
	}

	// Errors of each class.
	call(401, "GET", "/v1/stats", "", withToken("wrong"))
	call(400, "POST", "/v1/tasks", `{"queue":"q","x":1}`)
	call(404, "GET", "/v1/tasks/nope", "")
	call(413, "POST", "/v1/tasks", `{"queue":"q","spec":"`+strings.Repeat("x", norn.MaxSpecBytes)+`"}`)

	call(201, "POST", "/v1/tasks", `{"id":"a","queue":"q","spec":{"x":1},"labels":{"k":"v"},"retry":{"max_retries":1,"base":"1s"},"max_attempts":3}`)
	call(200, "POST", "/v1/tasks", `{"id":"a","queue":"q"}`)
	call(200, "POST", "/v1/tasks/batch", `{"tasks":[{"id":"b","queue":"q","depends_on":["a"]},{"id":"c","queue":"q","delay":"1h"},{"id":"a","queue":"q"}]}`)
	call(200, "GET", "/v1/tasks/a", "")
	call(200, "GET", "/v1/tasks/a,b,zz", "")
	call(200, "GET", "/v1/tasks?queue=q&limit=1", "")
	call(200, "GET", "/v1/tasks?view=summary&order=newest", "")
	call(200, "GET", "/v1/tasks?queue=q", "", withHeader("Accept", "application/x-ndjson"))
	call(200, "GET", "/v1/tasks/count?queue=q", "")
	call(200, "GET", "/v1/tasks/count?group=queue,status", "")
	call(200, "PATCH", "/v1/tasks/c", `{"priority":4,"run_at":"2030-01-01T00:00:00Z"}`)
	call(409, "PATCH", "/v1/tasks/c", `{"priority":4,"if_version":99}`)

	var reg wire.RegisterResponse
	call(201, "POST", "/v1/workers", `{"name":"w","queues":["q"]}`).decode(t, &reg)
	call(200, "GET", "/v1/workers", "")
	call(200, "GET", "/v1/whoami", "")
	var tr wire.TasksResponse
	call(200, "POST", "/v1/queues/q/claim", `{"worker":"`+reg.ID+`","n":1,"timeout":"30s"}`).decode(t, &tr)
	if len(tr.Tasks) != 1 {
		t.Fatalf("claimed %d", len(tr.Tasks))
	}
	lease := `"worker":"` + reg.ID + `","lease":` + itoa(tr.Tasks[0].Lease)
	call(200, "POST", "/v1/tasks/a/heartbeat", `{`+lease+`,"progress":0.25}`)
	call(201, "POST", "/v1/tasks/a/signals", `{"name":"go","data":{"ok":1}}`)
	call(200, "POST", "/v1/tasks/a/heartbeat", `{`+lease+`,"signals_after":0}`)
	call(200, "GET", "/v1/tasks/a/signals?after=0", "")
	call(404, "POST", "/v1/tasks/none/signals", `{"name":"go"}`)
	call(400, "POST", "/v1/tasks/a/signals", `{"name":""}`)
	call(200, "POST", "/v1/tasks/a/log", `{`+lease+`,"data":{"step":1}}`)
	call(200, "GET", "/v1/tasks/a/log?after=0&limit=10", "")
	call(200, "POST", "/v1/tasks/a/yield", `{`+lease+`}`)
	call(409, "POST", "/v1/tasks/a/complete", `{`+lease+`}`)
	call(200, "POST", "/v1/claim", `{"worker":"`+reg.ID+`","queues":["q"]}`).decode(t, &tr)
	lease = `"worker":"` + reg.ID + `","lease":` + itoa(tr.Tasks[0].Lease)
	call(200, "POST", "/v1/tasks/a/snooze", `{`+lease+`,"run_at":"2000-01-01T00:00:00Z"}`)
	call(400, "POST", "/v1/tasks/a/snooze", `{`+lease+`}`)
	call(200, "POST", "/v1/claim", `{"worker":"`+reg.ID+`","queues":["q"]}`).decode(t, &tr)
	lease = `"worker":"` + reg.ID + `","lease":` + itoa(tr.Tasks[0].Lease)
	call(200, "POST", "/v1/leases/batch", `{"ops":[{"op":"heartbeat","id":"a",`+lease+`},{"op":"yield","id":"a","worker":"x","lease":1},{"op":"snooze","id":"a","worker":"x","lease":1,"delay":"1s"}]}`)
	call(200, "POST", "/v1/tasks/a/fail", `{`+lease+`,"error":{"code":"boom","description":"d","args":{"n":1}}}`)
	call(200, "POST", "/v1/claim", `{"worker":"`+reg.ID+`","queues":["q"],"wait":"10s"}`).decode(t, &tr)
	if len(tr.Tasks) == 1 {
		lease = `"worker":"` + reg.ID + `","lease":` + itoa(tr.Tasks[0].Lease)
		call(200, "POST", "/v1/tasks/"+tr.Tasks[0].ID+"/abort", `{`+lease+`,"error":{"code":"bad"}}`)
	} else {
		t.Fatalf("retry not claimable: %d tasks", len(tr.Tasks))
	}
	call(201, "POST", "/v1/tasks", `{"id":"d","queue":"q"}`)
	call(200, "POST", "/v1/claim", `{"worker":"`+reg.ID+`","queues":["q"]}`).decode(t, &tr)
	lease = `"worker":"` + reg.ID + `","lease":` + itoa(tr.Tasks[0].Lease)
	call(200, "POST", "/v1/tasks/"+tr.Tasks[0].ID+"/await", `{`+lease+`,"on_child_failure":"continue","tasks":[{"id":"kid","queue":"q3"}]}`)
	call(400, "POST", "/v1/tasks/"+tr.Tasks[0].ID+"/await", `{`+lease+`,"tasks":[]}`)
	var kid wire.TasksResponse
	call(200, "POST", "/v1/claim", `{"worker":"`+reg.ID+`","queues":["q3"]}`).decode(t, &kid)
	call(200, "POST", "/v1/tasks/kid/complete", `{"worker":"`+reg.ID+`","lease":`+itoa(kid.Tasks[0].Lease)+`,"result":[1]}`)
	call(200, "POST", "/v1/claim", `{"worker":"`+reg.ID+`","queues":["q"]}`).decode(t, &tr)
	if len(tr.Tasks) != 1 || len(tr.Tasks[0].DependencyResults) != 1 {
		t.Fatalf("the awaiting task's claim: %+v", tr.Tasks)
	}
	lease = `"worker":"` + reg.ID + `","lease":` + itoa(tr.Tasks[0].Lease)
	call(200, "POST", "/v1/tasks/"+tr.Tasks[0].ID+"/complete", `{`+lease+`,"result":{"ok":true}}`)
	call(200, "GET", "/v1/tasks/"+tr.Tasks[0].ID, "")
	call(200, "POST", "/v1/tasks/c/cancel", "")
	call(200, "POST", "/v1/tasks/c/retry", `{"run_at":"2030-01-01T00:00:00Z","with_dependents":true}`)
	call(409, "POST", "/v1/tasks/c/retry", "")
	call(200, "POST", "/v1/tasks/c/cancel", "")
	call(200, "POST", "/v1/tasks/retry?queue=q&status=aborted", "")
	call(400, "POST", "/v1/tasks/retry", "")
	call(200, "POST", "/v1/tasks/cancel?queue=q&status=scheduled", "")
	call(400, "POST", "/v1/tasks/cancel", "")
	call(200, "POST", "/v1/transactions", `{"submit":[{"id":"t1","queue":"q2"}],"update":[{"id":"t1","priority":2}],"require":[{"id":"a"}]}`)
	call(200, "DELETE", "/v1/tasks/t1", "")
	call(200, "DELETE", "/v1/tasks?status=cancelled", "")
	call(400, "DELETE", "/v1/tasks", "")
	call(200, "GET", "/v1/queues", "")
	call(200, "GET", "/v1/queues/q", "")
	call(200, "PATCH", "/v1/queues/q", `{"paused":true,"timeout":"20s","retry":{"max_retries":2,"base":"1s","max":"10s"},"retention":{"completed":"1h","aborted":"2h","cancelled":"0s"}}`)
	call(200, "PATCH", "/v1/queues/q", `{"paused":false,"max_running":5,"key_limit":2,"keys":{"acme":{"limit":3},"old":null}}`)
	call(200, "PATCH", "/v1/queues/q", `{"retention":{"completed":"2h"},"retry":{"max":null}}`)
	call(200, "PUT", "/v1/queues/q/keys/acme", `{"limit":4}`)
	call(200, "GET", "/v1/queues/q/keys/acme", "")
	call(201, "POST", "/v1/tasks", `{"queue":"q","sequence_key":"s1"}`)
	call(200, "GET", "/v1/queues/q/sequences/s1", "")
	call(200, "GET", "/v1/queues/q/sequences?halted=false&limit=10", "")
	call(400, "GET", "/v1/queues/q/sequences?halted=maybe", "")
	call(400, "GET", "/v1/queues/q/sequences/%20bad%0A", "")
	call(200, "GET", "/v1/queues/q", "")
	call(200, "DELETE", "/v1/queues/q/keys/acme", "")
	call(400, "PUT", "/v1/queues/q/keys/acme", `{"limit":-1}`)
	call(200, "GET", "/v1/stats", "")
	call(200, "GET", "/v1/stats/throughput?queue=q&since=1h", "")
	call(400, "GET", "/v1/stats/throughput?since=soon", "")
	call(200, "POST", "/v1/sweep", "")
	call(200, "POST", "/v1/sweep", "{}")
	backups := t.TempDir()
	call(200, "POST", "/v1/backup", `{"dir":"`+backups+`/b1"}`)
	call(400, "POST", "/v1/backup", `{"dir":"`+backups+`/b1"}`)
	call(200, "PUT", "/v1/schedules/nightly", `{"queue":"q","cron":"0 3 * * *","timezone":"Europe/Berlin","spec":{"r":1},"labels":{"k":"v"},"retry":{"max_retries":1},"max_attempts":2,"overlap":"skip","catch_up":"all"}`)
	call(400, "PUT", "/v1/schedules/nightly", `{"queue":"q","cron":"nope"}`)
	call(200, "GET", "/v1/schedules", "")
	call(200, "GET", "/v1/schedules/nightly", "")
	call(404, "GET", "/v1/schedules/none", "")
	call(200, "PATCH", "/v1/schedules/nightly", `{"paused":true,"priority":3}`)
	call(200, "POST", "/v1/schedules/nightly/trigger", "")
	call(200, "DELETE", "/v1/schedules/nightly", "")
	call(201, "POST", "/v1/batches", `{"id":"b1","labels":{"k":"v"},"on_success":{"queue":"q","spec":{"s":1}},"on_complete":{"queue":"q"},"tasks":[{"id":"bm1","queue":"q"}]}`)
	call(400, "POST", "/v1/batches", `{"on_complete":{"queue":"q","id":"mine"}}`)
	call(404, "POST", "/v1/tasks", `{"queue":"q","batch":"none"}`)
	call(201, "POST", "/v1/tasks", `{"id":"bm2","queue":"q","batch":"b1"}`)
	call(200, "GET", "/v1/tasks?batch=b1", "")
	call(200, "GET", "/v1/batches?state=open&label=k:v&limit=10", "")
	call(400, "GET", "/v1/batches?state=closed", "")
	call(200, "POST", "/v1/batches/b1/seal", "")
	call(409, "POST", "/v1/tasks", `{"queue":"q","batch":"b1"}`)
	call(200, "GET", "/v1/batches/b1", "")
	call(404, "GET", "/v1/batches/none", "")
	call(200, "DELETE", "/v1/batches/b1?members=true", "")
	call(200, "GET", "/v1/openapi.json", "")
	call(200, "GET", "/healthz", "")
	call(200, "GET", "/readyz", "")
	call(200, "GET", "/metrics", "")

	// Events: read the stream until one event arrived, then validate what was read.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/events?queue=q", nil)
	req.Header.Set("Authorization", "Bearer admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	e.must(201, "POST", "/v1/tasks", `{"queue":"q"}`, tok)
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for !bytes.Contains(got.Bytes(), []byte("\n\n")) {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("events: %v after %q", err, got.String())
		}
	}
	resp.Body.Close()
	validate("GET", "/v1/events?queue=q", resp.StatusCode, resp.Header, got.Bytes())

	for tmpl, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !covered[method+" "+tmpl] {
				t.Errorf("%s %s: no response was validated", method, tmpl)
			}
		}
	}
}

func truncBytes(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
