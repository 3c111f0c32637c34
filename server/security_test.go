package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/chromium"
	"github.com/nornq/norn/internal/wire"
)

// Regression tests of the defences in docs/security.md, one per finding.

func (e *env) count(f norn.Filter) int64 {
	e.t.Helper()
	n, err := e.store.Count(context.Background(), f)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// TestMalformedQueryStringsRefused: a query string that does not parse
// exactly is refused with 400 naming the parameter, on every route; above
// all a delete by filter whose bad pair Go's parser would drop (widening
// the filter to every queue) deletes nothing.
func TestMalformedQueryStringsRefused(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	e.must(201, "POST", "/v1/tasks", `{"queue":"a"}`)
	e.must(201, "POST", "/v1/tasks", `{"queue":"b"}`)
	for _, c := range []struct{ query, field string }{
		{"status=ready&queue=junk;", "queue"},
		{"status=ready&queue=junk%zz", "queue"},
		{"status=ready&qu%zzeue=junk", "qu%zzeue"},
		{"status=ready;queue=junk", "status"},
		{"status=ready&" + strings.Repeat("label=k:v&", wire.MaxQueryParams), "query"},
	} {
		for _, method := range []string{"DELETE", "GET"} {
			r := e.do(method, "/v1/tasks?"+c.query, "")
			code, field := r.errorOf(t)
			if r.status != 400 || code != norn.CodeInvalidArgument || field != c.field {
				t.Errorf("%s ?%.40s: %d %s %q, want 400 on %q", method, c.query, r.status, code, field, c.field)
			}
		}
	}
	if n := e.count(norn.Filter{}); n != 2 {
		t.Fatalf("%d tasks left of 2: a malformed delete deleted", n)
	}
	// Every route goes through the same check.
	for _, pattern := range wire.Routes {
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.NewReplacer("{id}", "x", "{queue}", "q").Replace(path)
		r := e.do(method, path+"?a=%zz", "")
		if _, field := r.errorOf(t); r.status != 400 || field != "a" {
			t.Errorf("%s: %d %s, want 400 naming a", pattern, r.status, r.body)
		}
	}
}

// TestMultiGetDeduplicatesAndCaps: repeated ids come back once, and a
// multi-get whose response would pass MaxResponseBytes is refused with 413
// instead of being built.
func TestMultiGetDeduplicatesAndCaps(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) { c.MaxResponseBytes = 4 << 20 })
	big := `"` + strings.Repeat("x", 900<<10) + `"`
	for i := range 6 {
		e.must(201, "POST", "/v1/tasks", fmt.Sprintf(`{"id":"big%d","queue":"q","spec":%s}`, i, big))
	}
	var many wire.ManyResponse
	e.must(200, "GET", "/v1/tasks/big0"+strings.Repeat(",big0", 299)+",nope,nope", "").decode(t, &many)
	if len(many.Tasks) != 1 || many.Tasks[0].ID != "big0" || strings.Join(many.Missing, ",") != "nope" {
		t.Fatalf("got %d tasks, missing %v; want big0 once and nope once", len(many.Tasks), many.Missing)
	}
	e.must(200, "GET", "/v1/tasks/big0,big1,big2", "")
	r := e.must(413, "GET", "/v1/tasks/big0,big1,big2,big3,big4,big5", "")
	if code, field := r.errorOf(t); code != norn.CodeTooLarge || field != "response" {
		t.Errorf("got %s %q", code, field)
	}
	e.must(413, "GET", "/v1/tasks?queue=q", "")
	e.must(200, "GET", "/v1/tasks?queue=q&view=summary", "")
}

// TestJSONRoutesRequireJSONContentType: bodies a cross-site form or a
// no-preflight fetch can send (text/plain, form-encoded, multipart, none)
// are refused with 415 and change nothing.
func TestJSONRoutesRequireJSONContentType(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx"} {
		req, _ := http.NewRequest("POST", e.base+"/v1/tasks", strings.NewReader(`{"queue":"q"}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if code, field := (response{status: resp.StatusCode, body: b}).errorOf(t); resp.StatusCode != 415 || code != norn.CodeInvalidArgument || field != "Content-Type" {
			t.Errorf("Content-Type %q: %d %s", ct, resp.StatusCode, b)
		}
	}
	if n := e.count(norn.Filter{}); n != 0 {
		t.Fatalf("%d tasks stored from non-JSON bodies", n)
	}
	e.must(201, "POST", "/v1/tasks", `{"queue":"q"}`, withHeader("Content-Type", "application/json; charset=utf-8"))
	// Bodiless calls need no Content-Type.
	e.must(200, "POST", "/v1/sweep", "")
}

// TestForeignOriginsRefused: a request from another web origin is refused
// unless CORSOrigins allows it; the server's own origin (the dashboard) is
// served; an allowed origin gets CORS headers and preflights.
func TestForeignOriginsRefused(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) { c.CORSOrigins = []string{"https://app.example.com"} })
	evil := withHeader("Origin", "http://evil.example")
	r := e.do("POST", "/v1/tasks", `{"queue":"q"}`, evil)
	if code, _ := r.errorOf(t); r.status != 403 || code != norn.CodePermissionDenied {
		t.Errorf("foreign origin POST: %d %s", r.status, r.body)
	}
	e.must(403, "GET", "/v1/tasks", "", evil)
	e.must(403, "GET", "/v1/tasks", "", withHeader("Origin", "null"))
	if n := e.count(norn.Filter{}); n != 0 {
		t.Fatalf("a foreign origin stored %d tasks", n)
	}
	e.must(201, "POST", "/v1/tasks", `{"queue":"q"}`, withHeader("Origin", e.base))
	r = e.must(201, "POST", "/v1/tasks", `{"queue":"q"}`, withHeader("Origin", "https://app.example.com"))
	if r.header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("allowed origin without CORS header: %v", r.header)
	}
	r = e.must(204, "OPTIONS", "/v1/tasks", "", withHeader("Origin", "https://app.example.com"), withHeader("Access-Control-Request-Method", "POST"))
	if !strings.Contains(r.header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Errorf("preflight headers %v", r.header)
	}
	if _, err := New(Config{Addr: "127.0.0.1:0", Store: e.store, CORSOrigins: []string{"app.example.com"}}); norn.CodeOf(err) != norn.CodeInvalidArgument {
		t.Errorf("an origin without a scheme was accepted: %v", err)
	}
}

// TestHostCheckWithoutTokens: a server without tokens answers only Host
// values that cannot come from DNS rebinding; with tokens every Host is
// answered (the token is what a rebinding page lacks).
func TestHostCheckWithoutTokens(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	e.must(201, "POST", "/v1/tasks", `{"queue":"q"}`)
	get := func(e *env, host string, tok string) int {
		req, _ := http.NewRequest("GET", e.base+"/v1/tasks", nil)
		req.Host = host
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	_, port, _ := net.SplitHostPort(e.srv.Addr())
	for host, want := range map[string]int{
		"evil.example:" + port: 421, "evil.example": 421, "localhost.evil.example:" + port: 421,
		"localhost:" + port: 200, "127.0.0.1:" + port: 200, "[::1]:" + port: 200, "app.localhost:" + port: 200, "10.1.2.3": 200,
	} {
		if got := get(e, host, ""); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	withTokens := startServer(t, func(c *Config) { c.Tokens = []Token{{Token: "t", Role: RoleAdmin}} })
	if got := get(withTokens, "evil.example", "t"); got != 200 {
		t.Errorf("with tokens, Host evil.example: %d", got)
	}
	named := startServer(t, func(c *Config) { c.AllowedHosts = []string{"norn.internal"} })
	if got := get(named, "norn.internal:7070", ""); got != 200 {
		t.Errorf("allowed host: %d", got)
	}
}

// TestBodyReadTimeout: connections that announce a body and never send it
// are answered and closed after BodyReadTimeout, with or without tokens,
// instead of holding a goroutine each indefinitely.
func TestBodyReadTimeout(t *testing.T) {
	t.Parallel()
	for _, tokens := range [][]Token{nil, {{Token: "t", Role: RoleAdmin}}} {
		e := startServer(t, func(c *Config) { c.BodyReadTimeout = 300 * time.Millisecond; c.Tokens = tokens })
		const conns = 200
		var wg sync.WaitGroup
		errs := make(chan error, conns)
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", e.srv.Addr())
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				fmt.Fprintf(c, "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
				_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
				if _, err := io.ReadAll(c); err != nil {
					errs <- fmt.Errorf("connection still open: %w", err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("tokens %v: %v", tokens != nil, err)
		}
	}
	// A body that arrives in time is not affected, and a long poll after
	// it outlives the body deadline.
	e := startServer(t, func(c *Config) { c.BodyReadTimeout = 200 * time.Millisecond })
	start := time.Now()
	var tr wire.TasksResponse
	e.must(200, "POST", "/v1/claim", `{"worker":"w","queues":["q"],"wait":"1s"}`).decode(t, &tr)
	if time.Since(start) < 900*time.Millisecond {
		t.Errorf("long poll ended after %v", time.Since(start))
	}
}

// TestMalformedChunkedBodyIs400: a broken chunked encoding is the
// client's fault.
func TestMalformedChunkedBodyIs400(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	c, err := net.Dial("tcp", e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"que\r\nzz\r\nue\":\"q\"}\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if code, field := (response{status: resp.StatusCode, body: b}).errorOf(t); resp.StatusCode != 400 || code != norn.CodeInvalidArgument || field != "body" {
		t.Errorf("malformed chunked body: %d %s", resp.StatusCode, b)
	}
}

// TestScopedTokenSeesOtherQueuesAsMissing: a task of another queue answers
// exactly like an id that does not exist, a multi-get lists it missing,
// and the worker list only shows workers of the token's queues.
func TestScopedTokenSeesOtherQueuesAsMissing(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "qa", Role: RoleClient, Queues: []string{"qa"}},
			{Token: "wa", Role: RoleWorker, Queues: []string{"qa"}}}
	})
	admin, qa := withToken("admin"), withToken("qa")
	e.must(201, "POST", "/v1/tasks", `{"id":"mine","queue":"qa"}`, admin)
	e.must(201, "POST", "/v1/tasks", `{"id":"theirs","queue":"qb"}`, admin)
	other := e.do("GET", "/v1/tasks/theirs", "", qa)
	none := e.do("GET", "/v1/tasks/nosuch", "", qa)
	if other.status != 404 || none.status != 404 ||
		strings.ReplaceAll(string(other.body), "theirs", "ID") != strings.ReplaceAll(string(none.body), "nosuch", "ID") {
		t.Errorf("other queue %d %s; missing %d %s", other.status, other.body, none.status, none.body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"DELETE", "/v1/tasks/theirs", ""}, {"POST", "/v1/tasks/theirs/cancel", ""}, {"PATCH", "/v1/tasks/theirs", `{"priority":1}`},
		{"GET", "/v1/tasks/theirs/log", ""},
	} {
		if r := e.do(c.method, c.path, c.body, qa); r.status != 404 {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	var many wire.ManyResponse
	e.must(200, "GET", "/v1/tasks/mine,theirs", "", qa).decode(t, &many)
	if len(many.Tasks) != 1 || many.Tasks[0].ID != "mine" || strings.Join(many.Missing, ",") != "theirs" {
		t.Errorf("multi-get: %d tasks, missing %v", len(many.Tasks), many.Missing)
	}
	e.must(201, "POST", "/v1/workers", `{"name":"a","queues":["qa","qb"]}`, admin)
	e.must(201, "POST", "/v1/workers", `{"name":"b","queues":["qb"]}`, admin)
	e.must(201, "POST", "/v1/workers", `{"name":"any"}`, admin)
	var ws wire.WorkersResponse
	e.must(200, "GET", "/v1/workers", "", withToken("wa")).decode(t, &ws)
	if len(ws.Workers) != 1 || ws.Workers[0].Name != "a" || strings.Join(ws.Workers[0].Queues, ",") != "qa" {
		t.Errorf("scoped worker list: %+v", ws.Workers)
	}
	e.must(200, "GET", "/v1/workers", "", admin).decode(t, &ws)
	if len(ws.Workers) != 3 {
		t.Errorf("admin sees %d workers", len(ws.Workers))
	}
}

// TestMetricsAuth: with MetricsAuth, /metrics needs a token like the API.
func TestMetricsAuth(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) { c.MetricsAuth = true; c.Tokens = []Token{{Token: "w", Role: RoleWorker}} })
	e.must(401, "GET", "/metrics", "")
	e.must(200, "GET", "/metrics", "", withToken("w"))
	open := startServer(t, func(c *Config) { c.Tokens = []Token{{Token: "w", Role: RoleWorker}} })
	open.must(200, "GET", "/metrics", "")
}

// TestTLSRefusesWeakSuites: TLS 1.2 clients offering only CBC/SHA-1 suites
// are refused; modern suites and TLS 1.3 work.
func TestTLSRefusesWeakSuites(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := writeCert(t)
	e := startServer(t, func(c *Config) { c.TLSCert, c.TLSKey = certFile, keyFile })
	dial := func(cfg *tls.Config) error {
		cfg.RootCAs = pool
		c, err := tls.Dial("tcp", e.srv.Addr(), cfg)
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA} {
		if err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}}); err == nil {
			t.Errorf("TLS 1.2 with %s accepted", tls.CipherSuiteName(suite))
		}
	}
	if err := dial(&tls.Config{MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("TLS 1.1 accepted")
	}
	if err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}); err != nil {
		t.Errorf("TLS 1.2 GCM refused: %v", err)
	}
	if err := dial(&tls.Config{MinVersion: tls.VersionTLS13}); err != nil {
		t.Errorf("TLS 1.3 refused: %v", err)
	}
}

// TestBrowserCannotDriveALocalServer: a real browser on a page of another
// origin tries what a malicious site would against the default server (no
// tokens, loopback): a text/plain form post of a JSON body, no-cors
// fetches with simple bodies, a cross-origin read, and a DNS-rebound page
// (evil.test mapped to 127.0.0.1) reading same-origin. Nothing is stored,
// cancelled or read.
func TestBrowserCannotDriveALocalServer(t *testing.T) {
	t.Parallel()
	exe := chromium.Path(t)
	e := startServer(t, nil)
	var victim wire.TaskResponse
	e.must(201, "POST", "/v1/tasks", `{"id":"victim","queue":"victim","spec":{"secret":"s3cr3t"}}`).decode(t, &victim)
	_, port, _ := net.SplitHostPort(e.srv.Addr())
	target := e.base

	page := `<!doctype html><html><body>
<iframe name="sink" onload="window.sinkLoads = (window.sinkLoads || 0) + 1"></iframe>
<form id="f" method="POST" action="` + target + `/v1/tasks" enctype="text/plain" target="sink"><input name='{"queue":"csrf","x":"' value='"}'></form>
<script>
window.results = [];
async function attack() {
  const base = ` + "`" + target + "`" + `;
  const tries = [
    () => fetch(base + "/v1/tasks", {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body: '{"queue":"csrf"}'}),
    () => fetch(base + "/v1/tasks/batch", {method: "POST", mode: "no-cors", body: new URLSearchParams({tasks: "[]"})}),
    () => fetch(base + "/v1/tasks/victim/cancel", {method: "POST", mode: "no-cors"}),
    () => fetch(base + "/v1/tasks", {method: "POST", headers: {"Content-Type": "application/json"}, body: '{"queue":"csrf"}'}),
    () => fetch(base + "/v1/tasks/victim").then(r => r.text()),
  ];
  for (const t of tries) {
    try { const r = await t(); results.push(typeof r === "string" ? "read:" + r : "sent:" + r.type); }
    catch (err) { results.push("blocked"); }
  }
  return results.join("|");
}
</script></body></html>`
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, page)
	}))
	defer attacker.Close()

	opts := chromium.Options(t, exe,
		// DNS rebinding, simulated: evil.test resolves to the server.
		chromedp.Flag("host-resolver-rules", "MAP evil.test 127.0.0.1"))
	ctx := chromium.Start(t, 2*time.Minute, opts...)

	if err := chromedp.Do(ctx, chromedp.Navigate(attacker.URL+"/")); err != nil {
		t.Fatal(err)
	}
	res, err := chromedp.Run(ctx, chromedp.Evaluate[string](`attack()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cross-origin attempts: %s", res)
	if strings.Contains(res, "s3cr3t") || strings.Contains(res, "read:") {
		t.Errorf("a cross-origin page read the API: %s", res)
	}
	// The classic JSON CSRF: a text/plain form whose body is valid JSON.
	// It posts into an iframe, whose load says the answer came back.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`window.before = window.sinkLoads || 0; document.getElementById("f").submit(), true`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[any](`(window.sinkLoads || 0) > window.before`, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatal(err)
	}
	// The rebound page: same origin as far as the browser knows.
	rebound := "http://evil.test:" + port
	if err := chromedp.Do(ctx, chromedp.Navigate(rebound+"/healthz")); err != nil {
		t.Fatal(err)
	}
	read, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch("/v1/tasks/victim").then(r => r.status + ":" + r.statusText).then(s => s, e => "blocked")`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(read, "421") {
		t.Errorf("DNS-rebound page read GET /v1/tasks/victim: %s", read)
	}
	if n := e.count(norn.Filter{Queues: []string{"csrf"}}); n != 0 {
		t.Errorf("a cross-origin page created %d tasks", n)
	}
	got, err := e.store.Get(context.Background(), "victim")
	if err != nil || got.Status != norn.StatusReady {
		t.Errorf("victim after the attack: %+v, %v", got, err)
	}
}
