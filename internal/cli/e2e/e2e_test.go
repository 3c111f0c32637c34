package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nornq/norn/internal/nornbin"
	"github.com/nornq/norn/internal/oacheck"
	nornserver "github.com/nornq/norn/server"
)

// bin is the norn binary built once for the whole test run.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	defer nornbin.Remove()
	var err error
	if bin, err = nornbin.Build(); err != nil {
		fmt.Fprintln(os.Stderr, "building norn:", err)
		return 1
	}
	return m.Run()
}

// server is a running `norn server` process.
type server struct {
	url  string
	dir  string
	cmd  *exec.Cmd
	errb *bytes.Buffer
	done chan error
}

// startServer runs `norn server` on a free loopback port with its data in
// dir and waits for the line that says where it listens.
func startServer(t *testing.T, dir string, extra ...string) *server {
	t.Helper()
	args := append([]string{"server", "--addr", "127.0.0.1:0", "--store", "embedded:" + dir, "--log-level", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errb := &bytes.Buffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{dir: dir, cmd: cmd, errb: errb, done: make(chan error, 1)}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "norn: listening on "); ok {
				u, _, _ := strings.Cut(rest, " ")
				urlc <- u
			}
		}
		close(urlc)
		s.done <- cmd.Wait()
	}()
	select {
	case u, ok := <-urlc:
		if !ok {
			t.Fatalf("server exited before listening; stderr:\n%s", errb)
		}
		s.url = checked(t, u)
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("server did not say where it listens; stderr:\n%s", errb)
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// checked puts a reverse proxy in front of the server at u that checks
// every request and response against server/openapi.json and fails t on
// a mismatch; the CLI talks to the server through it. Registered before
// the server's stop, its cleanup runs after it: the last calls count too.
func checked(t *testing.T, u string) string {
	t.Helper()
	target, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // event streams pass at once
	ps := httptest.NewServer(oacheck.ForTest(t, nornserver.OpenAPI())(rp))
	t.Cleanup(ps.Close)
	return ps.URL
}

// stop sends SIGTERM and expects a clean, prompt exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("server exited with %v after SIGTERM; stderr:\n%s", err, s.errb)
		}
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		t.Errorf("server did not stop after SIGTERM")
	}
}

// cleanEnv is the environment without NORN_* settings of the developer.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NORN_") {
			env = append(env, kv)
		}
	}
	return env
}

type result struct {
	out, err string
	code     int
}

// norn runs the CLI against s with args and optional stdin.
func (s *server) norn(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), "NORN_SERVER="+s.url)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("norn %v: %v", args, err)
	}
	return result{out.String(), errb.String(), code}
}

// ok runs the CLI and fails the test unless it exits 0.
func (s *server) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := s.norn(t, "", args...)
	if r.code != 0 {
		t.Fatalf("norn %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

// fails runs the CLI and expects exit code code with want in stderr.
func (s *server) fails(t *testing.T, code int, want string, args ...string) {
	t.Helper()
	r := s.norn(t, "", args...)
	if r.code != code || !strings.Contains(r.err, want) {
		t.Fatalf("norn %s: exit %d (want %d), stderr %q (want %q)", strings.Join(args, " "), r.code, code, r.err, want)
	}
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Fatalf("%s: %q does not contain %q", what, got, w)
		}
	}
}

type task struct {
	ID       string            `json:"id"`
	Queue    string            `json:"queue"`
	Status   string            `json:"status"`
	Priority int               `json:"priority"`
	Labels   map[string]string `json:"labels"`
	Spec     json.RawMessage   `json:"spec"`
	Result   json.RawMessage   `json:"result"`
	Lease    uint64            `json:"lease"`
	// MaxRuntime is a Go duration string ("" when the task has none).
	MaxRuntime string `json:"max_runtime"`
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decoding %q: %v", s, err)
	}
	return v
}

// compact strips the indentation -o json adds inside raw JSON values.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func TestCLI(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())

	// submit: arguments, idempotency, delays, stdin, bad input.
	mustContain(t, "submit", s.ok(t, "submit", "emails", `{"to":"a@example.com"}`, "--id", "job-1", "--priority", "5", "--label", "tenant=acme"),
		"job-1 submitted to emails (ready)")
	mustContain(t, "duplicate", s.ok(t, "submit", "emails", `{"to":"b"}`, "--id", "job-1"), "job-1 already exists")
	mustContain(t, "delayed", s.ok(t, "submit", "emails", "--id", "job-2", "--delay", "1h"), "(scheduled)")
	if r := s.norn(t, `{"from":"stdin"}`, "submit", "emails", "--id", "job-3", "--max-runtime", "90s", "-o", "json"); r.code != 0 ||
		compact(decode[struct{ Task task }](t, r.out).Task.Spec) != `{"from":"stdin"}` ||
		decode[struct{ Task task }](t, r.out).Task.MaxRuntime != "1m30s" {
		t.Fatalf("submit from stdin: %+v", r)
	}
	s.fails(t, 2, "negative", "submit", "emails", "--max-runtime=-1s")
	s.fails(t, 2, "not valid JSON", "submit", "emails", "{nope")
	s.fails(t, 2, "--label", "submit", "emails", "--label", "novalue")
	s.fails(t, 1, "queue", "submit", "bad queue!")
	s.fails(t, 2, "unknown output format", "list", "-o", "yaml")
	s.fails(t, 2, "unknown flag", "list", "--bogus")

	// submit --batch: 2,500 tasks in 3 chunks, with a dependency on an earlier chunk.
	var b strings.Builder
	for i := 0; i < 2500; i++ {
		fmt.Fprintf(&b, `{"id":"b-%04d","spec":{"i":%d},"labels":{"kind":"batch"}}`+"\n", i, i)
	}
	fmt.Fprintln(&b, `{"id":"b-dep","queue":"later","depends_on":["b-0001"]}`)
	batch := filepath.Join(t.TempDir(), "tasks.ndjson")
	os.WriteFile(batch, []byte(b.String()), 0o644)
	mustContain(t, "batch", s.ok(t, "submit", "batch", "--batch", batch, "--chunk", "1000"), "submitted 2501 tasks (0 duplicates)")
	bad := filepath.Join(t.TempDir(), "bad.ndjson")
	os.WriteFile(bad, []byte(`{"queue":"q"}`+"\n\n"+`{"queue":"q","priorty":1}`+"\n"), 0o644)
	s.fails(t, 2, "line 3", "submit", "--batch", bad)

	// list: table, json, ndjson, filters.
	mustContain(t, "list table", s.ok(t, "list", "-q", "emails"), "ID", "job-1", "job-2", "job-3", "scheduled")
	all := decode[[]task](t, s.ok(t, "list", "-q", "batch", "--limit", "0", "-o", "json"))
	if len(all) != 2500 || all[0].ID != "b-0000" || compact(all[7].Spec) != `{"i":7}` {
		t.Fatalf("list -o json: %d tasks, first %+v", len(all), all[0])
	}
	nd := strings.Split(strings.TrimSpace(s.ok(t, "list", "--label", "tenant=acme", "-o", "ndjson")), "\n")
	if len(nd) != 1 || decode[task](t, nd[0]).ID != "job-1" {
		t.Fatalf("list --label: %q", nd)
	}
	r := s.norn(t, "", "list", "-q", "batch", "--limit", "2")
	if r.code != 0 || strings.Count(r.out, "b-0") != 2 || !strings.Contains(r.err, "--limit 0") {
		t.Fatalf("list --limit 2: %+v", r)
	}
	mustContain(t, "blocked", s.ok(t, "list", "-s", "blocked"), "b-dep")

	// get: one, several, missing.
	j1 := decode[task](t, s.ok(t, "get", "job-1", "-o", "json"))
	if j1.Priority != 5 || j1.Labels["tenant"] != "acme" || j1.Status != "ready" {
		t.Fatalf("get job-1: %+v", j1)
	}
	mustContain(t, "get table", s.ok(t, "get", "job-1"), "queue:", "emails", "tenant=acme", `{"to":"a@example.com"}`)
	r = s.norn(t, "", "get", "job-1", "nope", "-o", "json")
	if r.code != 1 || !strings.Contains(r.err, "nope") || len(decode[[]task](t, r.out)) != 1 {
		t.Fatalf("get with a missing id: %+v", r)
	}
	s.fails(t, 1, "not found", "get", "nope")

	// count.
	if got := strings.TrimSpace(s.ok(t, "count", "-q", "batch")); got != "2500" {
		t.Fatalf("count = %q", got)
	}
	cg := decode[struct {
		Count  int
		Groups []struct {
			Queue, Status string
			Count         int
		}
	}](t, s.ok(t, "count", "--group", "-o", "json"))
	if cg.Count != 2504 || len(cg.Groups) != 4 {
		t.Fatalf("count --group: %+v", cg)
	}

	// cancel and delete.
	mustContain(t, "cancel", s.ok(t, "cancel", "job-1"), "job-1 cancelled")
	mustContain(t, "cancel again", s.ok(t, "cancel", "job-1"), "job-1 cancelled")
	s.fails(t, 1, "not found", "cancel", "nope")
	mustContain(t, "after cancel", s.ok(t, "get", "job-1"), "cancelled", "TaskCancel")
	mustContain(t, "delete", s.ok(t, "delete", "job-2"), "deleted 1 task\n")
	s.fails(t, 2, "at least one filter", "delete")
	mustContain(t, "dry run", s.ok(t, "delete", "-q", "batch", "--dry-run"), "would delete 2500 tasks")
	// By filter without a terminal: refused without --yes, with the count.
	s.fails(t, 2, "this would delete 2500 tasks: give --yes", "delete", "-q", "batch", "-s", "ready")
	mustContain(t, "delete by filter", s.ok(t, "delete", "-q", "batch", "-s", "ready", "--yes"), "deleted 2500 tasks")
	mustContain(t, "dependent aborted", s.ok(t, "get", "b-dep"), "aborted", "dependency_failed")

	// retry: by id, and by filter after counting what it would retry.
	mustContain(t, "retry", s.ok(t, "retry", "job-1"), "job-1 retried (ready)")
	s.fails(t, 1, "only aborted or cancelled", "retry", "job-1")
	s.fails(t, 2, "at least one filter", "retry")
	s.fails(t, 2, "task ids only", "retry", "-q", "emails", "--with-dependents")
	mustContain(t, "after retry", s.ok(t, "get", "job-1"), "ready", "TaskRedrive")
	s.ok(t, "cancel", "job-1")
	mustContain(t, "retry dry run", s.ok(t, "retry", "-q", "emails", "-s", "terminal", "--dry-run"), "would retry 1 task\n")
	mustContain(t, "retry by filter", s.ok(t, "retry", "-q", "emails", "-s", "terminal", "-y"), "retried 1 task\n")
	mustContain(t, "retried by filter", s.ok(t, "get", "job-1"), "ready")
	s.ok(t, "cancel", "job-1") // as the checks below expect
	// cancel by filter: a count first, then the cancel; ids and filters
	// together are refused.
	s.ok(t, "submit", "sweepme", "{}")
	s.ok(t, "submit", "sweepme", "{}", "--delay", "1h")
	mustContain(t, "cancel dry run", s.ok(t, "cancel", "-q", "sweepme", "--dry-run"), "would cancel 2 tasks")
	mustContain(t, "cancel by filter", s.ok(t, "cancel", "-q", "sweepme", "--yes"), "cancelled 2 tasks")
	mustContain(t, "cancelled by filter", s.ok(t, "count", "-q", "sweepme", "-s", "cancelled"), "2")
	// A repeated -s adds statuses, as a comma list does.
	if a, b := s.ok(t, "count", "-s", "ready", "-s", "cancelled"), s.ok(t, "count", "-s", "ready,cancelled"); a != b || strings.TrimSpace(a) == "0" {
		t.Fatalf("-s ready -s cancelled counts %q, -s ready,cancelled %q", a, b)
	}
	s.fails(t, 2, "not both", "cancel", "job-1", "-q", "sweepme")
	s.fails(t, 2, "at least one filter", "cancel")
	mustContain(t, "clean up", s.ok(t, "delete", "-q", "sweepme", "--yes"), "deleted 2 tasks")
	// expiry and retry jitter on submit.
	mustContain(t, "submit with an expiry", s.ok(t, "-o", "json", "submit", "otp", "{}", "--expire-in", "5m", "--retry", "2", "--retry-jitter", "full"),
		`"expires_at"`, `"jitter": "full"`)
	s.fails(t, 2, "not both", "submit", "otp", "--expire-in", "5m", "--expires-at", "2100-01-01T00:00:00Z")
	mustContain(t, "clean up", s.ok(t, "delete", "-q", "otp", "--yes"), "deleted 1 task\n")

	// queues.
	mustContain(t, "pause", s.ok(t, "queues", "pause", "emails"), "emails paused")
	// A submit to a paused queue says so; pausing a name nobody uses needs
	// --create; a one-task submit's error speaks of the queue, not tasks[0].
	if r := s.norn(t, "", "submit", "emails", "{}"); r.code != 0 || !strings.Contains(r.err, "note: queue emails is paused") {
		t.Fatalf("submit to a paused queue: exit %d, stderr %q", r.code, r.err)
	} else {
		s.ok(t, "delete", strings.Fields(r.out)[0])
	}
	s.fails(t, 2, `queue "emials" has no tasks and no settings`, "queues", "pause", "emials")
	mustContain(t, "pause --create", s.ok(t, "queues", "pause", "emials", "--create"), "emials paused")
	s.fails(t, 1, `queue: queue name "bad queue"`, "submit", "bad queue", "{}")
	type queue struct {
		Name     string
		Paused   bool
		Counts   map[string]int
		Defaults struct {
			Timeout     string
			MaxAttempts int    `json:"max_attempts"`
			MaxRuntime  string `json:"max_runtime"`
			Retention   struct{ Completed string }
		}
	}
	qs := decode[[]queue](t, s.ok(t, "queues", "-o", "json"))
	found := false
	for _, q := range qs {
		if q.Name == "emails" {
			found = q.Paused && q.Counts["cancelled"] == 1 && q.Counts["ready"] == 1
		}
	}
	if !found {
		t.Fatalf("queues after pause: %+v", qs)
	}
	mustContain(t, "queues table", s.ok(t, "queues"), "QUEUE", "PAUSED", "emails", "yes")
	mustContain(t, "resume", s.ok(t, "queues", "resume", "emails"), "emails resumed")
	q := decode[queue](t, s.ok(t, "queues", "set", "emails", "--timeout", "30s", "--max-attempts", "3", "--retention-completed", "1h",
		"--max-runtime", "10m", "-o", "json"))
	if q.Paused || q.Defaults.Timeout != "30s" || q.Defaults.MaxAttempts != 3 || q.Defaults.Retention.Completed != "1h0m0s" ||
		q.Defaults.MaxRuntime != "10m0s" {
		t.Fatalf("queues set: %+v", q)
	}
	mustContain(t, "queue get", s.ok(t, "queues", "get", "emails"), "max_runtime:", "10m0s")
	s.fails(t, 2, "nothing to change", "queues", "set", "emails")
	rl := decode[struct {
		RateLimit struct {
			PerSecond float64 `json:"per_second"`
			Burst     int
		} `json:"rate_limit"`
	}](t, s.ok(t, "queues", "set", "emails", "--rate-limit", "30/m", "--burst", "4", "-o", "json"))
	if rl.RateLimit.PerSecond != 0.5 || rl.RateLimit.Burst != 4 {
		t.Fatalf("queues set --rate-limit 30/m --burst 4: %+v", rl)
	}
	mustContain(t, "queue get with a rate limit", s.ok(t, "queues", "get", "emails"), "rate_limit:", "0.5/s, burst 4", "4.00 tokens now")
	s.fails(t, 2, "--burst needs --rate-limit", "queues", "set", "emails", "--burst", "3")
	s.fails(t, 2, "want a rate like", "queues", "set", "emails", "--rate-limit", "fast")
	mustContain(t, "rate limit removed", s.ok(t, "queues", "set", "emails", "--rate-limit", "off"), "rate_limit:", "unlimited")

	// Fair claiming: --key-weight keeps the key's limit set by --key.
	type fairQueue struct {
		FairBy string `json:"fair_by"`
		Keys   []struct {
			Key           string
			Limit, Weight int
		}
	}
	fq := decode[fairQueue](t, s.ok(t, "queues", "set", "reports", "--fair-by", "concurrency_key", "--key", "acme=2", "-o", "json"))
	if fq.FairBy != "concurrency_key" || len(fq.Keys) != 1 || fq.Keys[0].Limit != 2 {
		t.Fatalf("queues set --fair-by: %+v", fq)
	}
	fq = decode[fairQueue](t, s.ok(t, "queues", "set", "reports", "--key-weight", "acme=3", "-o", "json"))
	if len(fq.Keys) != 1 || fq.Keys[0].Limit != 2 || fq.Keys[0].Weight != 3 {
		t.Fatalf("queues set --key-weight: %+v", fq)
	}
	mustContain(t, "queue get fair", s.ok(t, "queues", "get", "reports"), "fair_by:", "concurrency_key", "limit 2, weight 3")
	s.fails(t, 1, "fair_by", "queues", "set", "reports", "--fair-by", "label:tenant") // acme has a limit
	s.fails(t, 1, "fair_by", "queues", "set", "reports", "--fair-by", "tenant")

	// stats.
	st := decode[struct {
		Total  int
		Totals map[string]int
	}](t, s.ok(t, "stats", "-o", "json"))
	if st.Total != 3 || st.Totals["cancelled"] != 1 || st.Totals["aborted"] != 1 {
		t.Fatalf("stats: %+v", st)
	}
	mustContain(t, "stats table", s.ok(t, "stats"), "QUEUE", "emails", "total", "3 tasks")
}

func TestWatch(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	cmd := exec.Command(bin, "watch", "-q", "watched", "--count", "2", "-o", "ndjson")
	cmd.Env = append(cleanEnv(), "NORN_SERVER="+s.url)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// The watcher subscribes asynchronously: keep submitting until it has
	// seen two events (an unrelated queue's task must not count).
	deadline := time.After(30 * time.Second)
	for i := 0; ; i++ {
		s.ok(t, "submit", "other", "--id", fmt.Sprintf("o-%d", i))
		s.ok(t, "submit", "watched", "--id", fmt.Sprintf("w-%d", i))
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("watch: %v; stderr %s", err, errb.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("watch printed %q", out.String())
			}
			for _, l := range lines {
				ev := decode[struct {
					Kind, Queue string
					TaskID      string `json:"task_id"`
				}](t, l)
				if ev.Kind != "TaskSubmit" || ev.Queue != "watched" || !strings.HasPrefix(ev.TaskID, "w-") {
					t.Fatalf("unexpected event %q", l)
				}
			}
			return
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("watch saw fewer than 2 events; stdout %q stderr %q", out.String(), errb.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestCurlFlow is the README's quick start with plain HTTP: submit, claim
// and complete, then see the task in `norn list`. It also checks that a
// graceful stop keeps the data for the next start.
func TestCurlFlow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := startServer(t, dir)
	call := func(method, path, body string, want int) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s (want %d)", method, path, resp.StatusCode, b, want)
		}
		return decode[map[string]any](t, string(b))
	}
	sub := call("POST", "/v1/tasks", `{"queue":"emails","spec":{"to":"ada@example.com"}}`, 201)
	id := sub["task"].(map[string]any)["id"].(string)
	w := call("POST", "/v1/workers", `{"name":"curl"}`, 201)["id"].(string)
	claimed := call("POST", "/v1/queues/emails/claim", fmt.Sprintf(`{"worker":%q,"n":1,"timeout":"30s"}`, w), 200)
	tasks := claimed["tasks"].([]any)
	if len(tasks) != 1 || tasks[0].(map[string]any)["id"] != id {
		t.Fatalf("claim: %v", claimed)
	}
	lease := tasks[0].(map[string]any)["lease"].(float64)
	call("POST", "/v1/tasks/"+id+"/complete", fmt.Sprintf(`{"worker":%q,"lease":%d,"result":{"sent":true}}`, w, int(lease)), 200)
	errBody := call("POST", "/v1/tasks/"+id+"/complete", fmt.Sprintf(`{"worker":%q,"lease":%d}`, w, int(lease)+1), 409)
	if errBody["error"].(map[string]any)["code"] != "lease_lost" {
		t.Fatalf("stale lease: %v", errBody)
	}
	mustContain(t, "list", s.ok(t, "list", "-s", "completed"), id, "emails", "completed", "100%")

	s.stop(t)
	s2 := startServer(t, dir)
	got := decode[task](t, s2.ok(t, "get", id, "-o", "json"))
	if got.Status != "completed" || compact(got.Result) != `{"sent":true}` {
		t.Fatalf("after restart: %+v", got)
	}
}

func TestServerSettings(t *testing.T) {
	t.Parallel()
	runServer := func(env []string, args ...string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"server"}, args...)...)
		cmd.Env = append(cleanEnv(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return result{out.String(), errb.String(), code}
	}
	dir := "embedded:" + t.TempDir()
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{args: []string{"--store", "mysql://u:p@localhost/norn"}, want: "postgres://"},
		{env: []string{"NORN_STORE=nope"}, want: "embedded:PATH"},
		{args: []string{"--store", dir, "--addr", "0.0.0.0:0"}, want: "--allow-unauthenticated"},
		{args: []string{"--store", dir, "--durability", "eventually"}, want: "durability"},
		{args: []string{"--store", dir, "--log-format", "xml"}, want: "--log-format"},
		{args: []string{"--store", dir, "--auth-token", "t:root"}, want: "--auth-token"},
		{env: []string{"NORN_MAX_BATCH=many"}, want: "NORN_MAX_BATCH"},
		{args: []string{"--store", dir, "--tls-cert", "c.pem"}, want: "--tls-key"},
	} {
		r := runServer(tc.env, tc.args...)
		if r.code != 2 || !strings.Contains(r.err, tc.want) {
			t.Errorf("norn server %v %v: exit %d, stderr %q (want 2 and %q)", tc.env, tc.args, r.code, r.err, tc.want)
		}
	}

	// A Postgres store that cannot be reached is a runtime failure (exit 1)
	// that says which store, without printing the password.
	if r := runServer(nil, "--store", "postgres://u:secret@127.0.0.1:1/norn"); r.code != 1 ||
		!strings.Contains(r.err, "postgres store") || strings.Contains(r.err, "secret") {
		t.Errorf("unreachable postgres: exit %d, stderr %q", r.code, r.err)
	}

	// Tokens: the CLI needs one, and NORN_TOKEN provides it.
	s := startServer(t, t.TempDir(), "--auth-token", "adm1n:admin", "--auth-token", "cl1ent:client:emails", "--auth-token", "w0rker:worker")
	s.fails(t, 1, "bearer token", "list")
	r := s.norn(t, "", "--token", "cl1ent", "submit", "other")
	if r.code != 1 || !strings.Contains(r.err, "may not use queue") {
		t.Fatalf("client token on another queue: %+v", r)
	}
	s.ok(t, "--token", "cl1ent", "submit", "emails", "--id", "t1")
	s.fails(t, 1, "may not call", "--token", "cl1ent", "queues", "pause", "emails")
	// A worker's token on a submit: the refusal speaks of submitting, not of
	// the batch route the client uses, and says what token would do.
	if r := s.norn(t, "", "--token", "w0rker", "submit", "emails"); r.code != 1 || !strings.Contains(r.err, "may not call submit tasks") ||
		strings.Contains(r.err, "/v1/tasks/batch") || !strings.Contains(r.err, "an admin's token") {
		t.Fatalf("worker token on submit: %+v", r)
	}
	s.ok(t, "--token", "adm1n", "queues", "pause", "emails")

	// A reserve larger than any disk: new tasks are refused with 507,
	// and the CLI says why; what needs no new data still works.
	full := startServer(t, t.TempDir(), "--min-free-bytes", fmt.Sprint(int64(1)<<60))
	full.fails(t, 1, "refused until space is freed", "submit", "emails")
	resp, err := http.Post(full.url+"/v1/tasks", "application/json", strings.NewReader(`{"queue":"emails"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage {
		t.Fatalf("submit below the reserve: %d, want 507", resp.StatusCode)
	}
	full.ok(t, "stats")

	// An unreachable server is a clear, non-zero failure.
	off := &server{url: "http://127.0.0.1:1"}
	off.fails(t, 1, "no norn server answers at http://127.0.0.1:1", "stats")
}

// TestScheduleCommands: norn schedule against a real server process.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	type sched struct {
		Name, Queue, Cron, Timezone, Overlap string
		CatchUp                              string `json:"catch_up"`
		Paused                               bool
		NextFire                             string `json:"next_fire"`
		LastTask                             string `json:"last_task"`
		Labels                               map[string]string
	}
	got := decode[sched](t, s.ok(t, "schedule", "set", "nightly", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin",
		"--queue", "reports", "--spec", `{"kind":"daily"}`, "--label", "team=ops", "--overlap", "skip", "--catch-up", "none", "-o", "json"))
	if got.Name != "nightly" || got.Timezone != "Europe/Berlin" || got.Overlap != "skip" || got.CatchUp != "none" ||
		got.NextFire == "" || got.Labels["team"] != "ops" {
		t.Fatalf("schedule set: %+v", got)
	}
	s.fails(t, 2, "--cron", "schedule", "set", "bad", "--cron", "every day", "--queue", "q")
	s.fails(t, 2, "--catch-up", "schedule", "set", "bad", "--cron", "@daily", "--queue", "q", "--catch-up", "most")
	s.fails(t, 2, "--spec", "schedule", "set", "bad", "--cron", "@daily", "--queue", "q", "--spec", "{")
	mustContain(t, "list", s.ok(t, "schedule", "list"), "SCHEDULE", "nightly", "reports", "Europe/Berlin")
	mustContain(t, "pause", s.ok(t, "schedule", "pause", "nightly"), "nightly paused")
	if !decode[sched](t, s.ok(t, "schedule", "get", "nightly", "-o", "json")).Paused {
		t.Fatal("schedule pause did not pause")
	}
	mustContain(t, "resume", s.ok(t, "schedule", "resume", "nightly"), "nightly resumed")
	id := strings.TrimSpace(s.ok(t, "schedule", "trigger", "nightly"))
	mustContain(t, "triggered task", s.ok(t, "get", id), "reports", "norn.schedule")
	if decode[sched](t, s.ok(t, "schedule", "get", "nightly", "-o", "json")).LastTask != id {
		t.Fatal("trigger did not record the last task")
	}
	mustContain(t, "delete", s.ok(t, "schedule", "delete", "nightly"), "nightly deleted")
	s.fails(t, 1, "not found", "schedule", "get", "nightly")
}

func TestSubmitUniqueKey(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	mustContain(t, "first", s.ok(t, "submit", "reports", `{"user":42}`, "--id", "r-1", "--unique-key", "report-42"),
		"r-1 submitted to reports (ready)")
	mustContain(t, "held", s.ok(t, "submit", "reports", `{"user":42}`, "--unique-key", "report-42", "--unique-for", "1h"),
		`r-1 holds unique key "report-42"`, "nothing submitted")
	dup := decode[struct {
		Task      task
		Duplicate bool
	}](t, s.ok(t, "submit", "reports", "--unique-key", "report-42", "-o", "json"))
	if !dup.Duplicate || dup.Task.ID != "r-1" {
		t.Fatalf("submit -o json of a held key: %+v", dup)
	}
	mustContain(t, "other queue", s.ok(t, "submit", "other", "--id", "o-1", "--unique-key", "report-42"), "o-1 submitted")
	mustContain(t, "get", s.ok(t, "get", "r-1"), "unique_key:", "report-42")
	nd := strings.Split(strings.TrimSpace(s.ok(t, "list", "--unique-key", "report-42", "-o", "ndjson")), "\n")
	if len(nd) != 2 {
		t.Fatalf("list --unique-key: %q", nd)
	}
	if got := strings.TrimSpace(s.ok(t, "count", "--unique-key", "report-42", "-q", "reports")); got != "1" {
		t.Fatalf("count --unique-key = %q", got)
	}
	s.fails(t, 2, "--unique-for needs --unique-key", "submit", "reports", "--unique-for", "1h")
	s.fails(t, 2, "--unique-key", "submit", "reports", "--unique-key", strings.Repeat("k", 257))
	s.fails(t, 2, "negative", "submit", "reports", "--unique-key", "k", "--unique-for", "-1s")
}
