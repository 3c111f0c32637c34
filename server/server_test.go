package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/internal/oacheck"
	"github.com/nornq/norn/internal/wire"
	"github.com/nornq/norn/store/embedded"
)

// env is one in-process server on 127.0.0.1:0 over a fresh embedded store.
type env struct {
	t     *testing.T
	srv   *Server
	store norn.Store
	base  string
	stop  context.CancelFunc
	done  chan error
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// startServer starts a server; mod may change the config (and wrap the store).
func startServer(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	ctx := context.Background()
	st, err := embedded.Open(ctx, embedded.Options{Dir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Addr: "127.0.0.1:0", Store: st, Logger: quietLogger(), PingInterval: time.Hour,
		WrapHandler: oacheck.ForTest(t, openapiDoc)}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	e := &env{t: t, srv: srv, store: st, base: srv.URL(), stop: cancel, done: make(chan error, 1)}
	go func() { e.done <- srv.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-e.done:
		case <-time.After(20 * time.Second):
			t.Error("server did not stop")
		}
		st.Close()
	})
	return e
}

// response is a finished HTTP exchange.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

// errorOf returns the code and field of an error body.
func (r response) errorOf(t *testing.T) (norn.Code, string) {
	t.Helper()
	var b wire.ErrorBody
	r.decode(t, &b)
	if b.Error == nil {
		return "", "" // not an error body
	}
	return b.Error.Code, b.Error.Field
}

type reqOpt func(*http.Request)

func withToken(tok string) reqOpt {
	return func(r *http.Request) {
		if tok != "" {
			r.Header.Set("Authorization", "Bearer "+tok)
		}
	}
}

func withHeader(k, v string) reqOpt { return func(r *http.Request) { r.Header.Set(k, v) } }

func (e *env) do(method, path, body string, opts ...reqOpt) response {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, o := range opts {
		o(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// must does a request and fails the test unless it answers want.
func (e *env) must(want int, method, path, body string, opts ...reqOpt) response {
	e.t.Helper()
	r := e.do(method, path, body, opts...)
	if r.status != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, r.status, want, r.body)
	}
	return r
}

// claimOne submits nothing; it claims one task of queue as worker w.
func (e *env) claimOne(queue, worker string, opts ...reqOpt) *norn.Task {
	e.t.Helper()
	var tr wire.TasksResponse
	e.must(200, "POST", "/v1/queues/"+queue+"/claim", `{"worker":"`+worker+`"}`, opts...).decode(e.t, &tr)
	if len(tr.Tasks) != 1 {
		e.t.Fatalf("claimed %d tasks, want 1", len(tr.Tasks))
	}
	return tr.Tasks[0]
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)

	var sub norn.Submitted
	e.must(201, "POST", "/v1/tasks", `{"id":"t1","queue":"emails","spec":{"to":"a@b"},"priority":5,"labels":{"tenant":"x"}}`).decode(t, &sub)
	if sub.Task.ID != "t1" || sub.Task.Status != norn.StatusReady || sub.Duplicate {
		t.Fatalf("submitted %+v", sub)
	}
	e.must(200, "POST", "/v1/tasks", `{"id":"t1","queue":"emails"}`).decode(t, &sub)
	if !sub.Duplicate {
		t.Fatal("resubmit not flagged duplicate")
	}
	var batch wire.BatchResponse
	e.must(200, "POST", "/v1/tasks/batch", `{"tasks":[{"id":"t1","queue":"emails"},{"id":"t2","queue":"emails","depends_on":["t1"],"retry":{"max_retries":0}},{"id":"t3","queue":"sms","delay":"1h"}]}`).decode(t, &batch)
	if len(batch.Tasks) != 3 || len(batch.Duplicates) != 1 || batch.Duplicates[0] != "t1" ||
		batch.Tasks[1].Status != norn.StatusBlocked || batch.Tasks[2].Status != norn.StatusScheduled {
		t.Fatalf("batch %+v", batch)
	}

	var tr wire.TaskResponse
	e.must(200, "GET", "/v1/tasks/t1", "").decode(t, &tr)
	if string(tr.Task.Spec) != `{"to":"a@b"}` {
		t.Fatalf("spec %s", tr.Task.Spec)
	}
	var many wire.ManyResponse
	e.must(200, "GET", "/v1/tasks/t1,nope,t3", "").decode(t, &many)
	if len(many.Tasks) != 2 || len(many.Missing) != 1 || many.Missing[0] != "nope" {
		t.Fatalf("many %+v", many)
	}
	if c, _ := e.must(404, "GET", "/v1/tasks/nope", "").errorOf(t); c != norn.CodeNotFound {
		t.Fatalf("code %s", c)
	}

	var page norn.Page
	e.must(200, "GET", "/v1/tasks?queue=emails&view=summary&limit=1", "").decode(t, &page)
	if len(page.Tasks) != 1 || page.NextCursor == "" || page.Tasks[0].Spec != nil {
		t.Fatalf("page %+v", page)
	}
	e.must(200, "GET", "/v1/tasks?queue=emails&view=summary&limit=1&cursor="+page.NextCursor, "").decode(t, &page)
	if len(page.Tasks) != 1 || page.Tasks[0].ID != "t2" {
		t.Fatalf("page 2 %+v", page)
	}
	var cnt wire.GroupedCountResponse
	e.must(200, "GET", "/v1/tasks/count?status=pending", "").decode(t, &cnt)
	if cnt.Count != 3 {
		t.Fatalf("count %+v", cnt)
	}
	e.must(200, "GET", "/v1/tasks/count?group=queue,status", "").decode(t, &cnt)
	if cnt.Count != 3 || len(cnt.Groups) != 3 {
		t.Fatalf("grouped %+v", cnt)
	}

	var reg wire.RegisterResponse
	e.must(201, "POST", "/v1/workers", `{"name":"test","queues":["emails"]}`).decode(t, &reg)
	if !strings.HasPrefix(reg.ID, "worker-") {
		t.Fatalf("worker id %q", reg.ID)
	}
	task := e.claimOne("emails", reg.ID)
	if task.ID != "t1" || task.Status != norn.StatusRunning || task.Lease == 0 {
		t.Fatalf("claimed %+v", task)
	}
	lease := `"worker":"` + reg.ID + `","lease":` + itoa(task.Lease)
	var dl wire.DeadlineResponse
	e.must(200, "POST", "/v1/tasks/t1/heartbeat", `{`+lease+`,"progress":0.5,"extend":"30s"}`).decode(t, &dl)
	if dl.Deadline.IsZero() {
		t.Fatal("no deadline")
	}
	var ent wire.EntryResponse
	e.must(200, "POST", "/v1/tasks/t1/log", `{`+lease+`,"data":{"step":1}}`).decode(t, &ent)
	if ent.Entry.Seq != 1 {
		t.Fatalf("entry %+v", ent)
	}
	var logs wire.LogResponse
	e.must(200, "GET", "/v1/tasks/t1/log?after=0", "").decode(t, &logs)
	if len(logs.Entries) != 1 || string(logs.Entries[0].Data) != `{"step":1}` {
		t.Fatalf("log %+v", logs)
	}
	if c, _ := e.must(409, "POST", "/v1/tasks/t1/complete", `{"worker":"`+reg.ID+`","lease":99}`).errorOf(t); c != norn.CodeLeaseLost {
		t.Fatalf("stale lease: %s", c)
	}
	e.must(200, "POST", "/v1/tasks/t1/complete", `{`+lease+`,"result":{"ok":true}}`)
	e.must(200, "GET", "/v1/tasks/t2", "").decode(t, &tr)
	if tr.Task.Status != norn.StatusReady {
		t.Fatalf("dependent is %s", tr.Task.Status)
	}

	// Lease batch: heartbeat and fail t2 in one request, plus a stale op.
	t2 := e.claimOne("emails", reg.ID)
	var lb wire.LeaseBatchResponse
	e.must(200, "POST", "/v1/leases/batch", `{"ops":[{"op":"heartbeat","id":"t2","worker":"`+reg.ID+`","lease":`+itoa(t2.Lease)+`},`+
		`{"op":"complete","id":"t2","worker":"`+reg.ID+`","lease":`+itoa(t2.Lease+7)+`},`+
		`{"op":"fail","id":"t2","worker":"`+reg.ID+`","lease":`+itoa(t2.Lease)+`,"error":{"code":"boom"}}]}`).decode(t, &lb)
	if len(lb.Results) != 3 || lb.Results[0].Deadline.IsZero() || lb.Results[1].Error == nil ||
		lb.Results[1].Error.Code != norn.CodeLeaseLost || lb.Results[2].Error != nil {
		t.Fatalf("lease batch %+v", lb)
	}

	// Update, cancel, delete.
	e.must(200, "PATCH", "/v1/tasks/t3", `{"priority":9,"labels":{"a":"b"}}`).decode(t, &tr)
	if tr.Task.Priority != 9 || tr.Task.Labels["a"] != "b" {
		t.Fatalf("updated %+v", tr.Task)
	}
	if c, _ := e.must(409, "PATCH", "/v1/tasks/t3", `{"priority":1,"if_version":1}`).errorOf(t); c != norn.CodeConflict {
		t.Fatalf("if_version: %s", c)
	}
	e.must(200, "POST", "/v1/tasks/t3/cancel", "").decode(t, &tr)
	if tr.Task.Status != norn.StatusCancelled {
		t.Fatalf("cancelled %+v", tr.Task)
	}
	e.must(200, "POST", "/v1/tasks/t3/cancel", "{}")
	var del wire.DeletedResponse
	e.must(200, "DELETE", "/v1/tasks/t3", "").decode(t, &del)
	if del.Deleted != 1 {
		t.Fatal(del)
	}
	e.must(404, "DELETE", "/v1/tasks/t3", "")
	e.must(200, "DELETE", "/v1/tasks?status=aborted,completed", "").decode(t, &del)
	if del.Deleted != 2 {
		t.Fatalf("deleted %d by filter, want 2", del.Deleted)
	}

	// Transactions.
	var txr norn.TxnResult
	e.must(200, "POST", "/v1/transactions", `{"submit":[{"id":"x1","queue":"q"},{"id":"x2","queue":"q"}],"cancel":["x2"]}`).decode(t, &txr)
	if len(txr.Submitted) != 2 || len(txr.Cancelled) != 1 {
		t.Fatalf("txn %+v", txr)
	}
	e.must(409, "POST", "/v1/transactions", `{"submit":[{"id":"x3","queue":"q"}],"require":[{"id":"missing"}]}`)
	e.must(404, "GET", "/v1/tasks/x3", "")

	// Queues, stats, workers, sweep.
	var qr wire.QueueResponse
	e.must(200, "PATCH", "/v1/queues/q", `{"paused":true,"timeout":"1m"}`).decode(t, &qr)
	if !qr.Queue.Paused || qr.Queue.Defaults.Timeout.D() != time.Minute {
		t.Fatalf("queue %+v", qr)
	}
	var qs wire.QueuesResponse
	e.must(200, "GET", "/v1/queues", "").decode(t, &qs)
	if len(qs.Queues) == 0 {
		t.Fatal("no queues")
	}
	var st norn.Stats
	e.must(200, "GET", "/v1/stats", "").decode(t, &st)
	if st.Total != 2 || st.Workers != 1 {
		t.Fatalf("stats %+v", st)
	}
	var ws wire.WorkersResponse
	e.must(200, "GET", "/v1/workers", "").decode(t, &ws)
	if len(ws.Workers) != 1 {
		t.Fatalf("workers %+v", ws)
	}
	e.must(200, "POST", "/v1/sweep", "")
	e.must(200, "GET", "/healthz", "")
	e.must(200, "GET", "/readyz", "")
	e.must(404, "GET", "/v1/nothing", "")
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestBadInputWritesNothing: every kind of bad input is a 400 (or 413)
// naming the field, and the store stays empty.
func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) { c.MaxLabels = 2 })
	cases := []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"POST", "/v1/tasks", `{"queue":"q"`, 400, "body"},
		{"POST", "/v1/tasks", `{"queue":"q","colour":"red"}`, 400, "colour"},
		{"POST", "/v1/tasks", `{"queue":"q","priority":"high"}`, 400, "priority"},
		{"POST", "/v1/tasks", `{"queue":"q","priority":-3}`, 400, "priority"},
		{"POST", "/v1/tasks", `{"queue":"bad queue"}`, 400, "queue"},
		{"POST", "/v1/tasks", `{"queue":"q","timeout":"forever"}`, 400, "timeout"},
		{"POST", "/v1/tasks", `{"queue":"q","run_at":"noon"}`, 400, "run_at"},
		{"POST", "/v1/tasks", `{"queue":"q","retry":{"max_retries":1,"base":"-1s"}}`, 400, "retry"},
		{"POST", "/v1/tasks", `{"queue":"q","delay":"-1s"}`, 400, "delay"},
		{"POST", "/v1/tasks/t/heartbeat", `{"worker":"w","lease":1,"extend":"-1s"}`, 400, "extend"},
		{"POST", "/v1/tasks", `{"queue":"q","labels":{"a":"1","b":"2","c":"3"}}`, 400, "labels"},
		{"POST", "/v1/tasks", `{"queue":"q","depends_on":["nope"]}`, 400, "tasks[0].depends_on[0]"},
		{"POST", "/v1/tasks", ``, 400, "body"},
		{"POST", "/v1/tasks?x=1", `{"queue":"q"}`, 400, "x"},
		{"POST", "/v1/tasks/batch", `{"tasks":[{"queue":"q"},{"queue":"q","max_attempts":-1}]}`, 400, "tasks[1].max_attempts"},
		{"POST", "/v1/tasks/batch", `{"tasks":[{"id":"a","queue":"q"},{"id":"a","queue":"q"}]}`, 400, "tasks[1].id"},
		{"POST", "/v1/transactions", `{"submit":[{"queue":"q"}],"update":[{"id":"a","labels":{"x:y":"1"}}]}`, 400, "update[0].labels"},
		{"GET", "/v1/tasks?status=done", "", 400, "status"},
		{"GET", "/v1/tasks?created_after=today", "", 400, "created_after"},
		{"GET", "/v1/tasks?limit=x", "", 400, "limit"},
		{"GET", "/v1/tasks/count?group=owner", "", 400, "group"},
		{"DELETE", "/v1/tasks", "", 400, "filter"},
		{"POST", "/v1/claim", `{"worker":"w","queues":["q"],"n":5000}`, 400, "n"},
		{"POST", "/v1/claim", `{"worker":"w","queues":["q"],"wait":"1h"}`, 400, "wait"},
		{"POST", "/v1/queues/q/claim", `{"worker":"w","queues":["q"]}`, 400, "queues"},
		{"POST", "/v1/tasks/t/heartbeat", `{"worker":"w","lease":1,"progress":1.5}`, 400, "progress"},
		{"POST", "/v1/tasks/t/heartbeat", `{"worker":"w","lease":0}`, 400, "lease"},
		{"POST", "/v1/leases/batch", `{"ops":[{"op":"explode","id":"t","worker":"w","lease":1}]}`, 400, "ops[0].op"},
		{"PATCH", "/v1/queues/q", `{"timeout":"-1s"}`, 400, "timeout"},
		{"PATCH", "/v1/queues/q", `{"max_attempts":-1}`, 400, "max_attempts"},
		{"GET", "/v1/events?task=a/b", "", 400, "task"},
		{"GET", "/v1/tasks/a,,b", "", 400, "id[1]"},
	}
	for _, c := range cases {
		r := e.do(c.method, c.path, c.body)
		if r.status != c.status {
			t.Errorf("%s %s %s: status %d, want %d: %s", c.method, c.path, c.body, r.status, c.status, r.body)
			continue
		}
		if code, field := r.errorOf(t); field != c.field || code == "" {
			t.Errorf("%s %s %s: field %q (code %s), want %q", c.method, c.path, c.body, field, code, c.field)
		}
	}
	var cnt wire.CountResponse
	e.must(200, "GET", "/v1/tasks/count", "").decode(t, &cnt)
	if cnt.Count != 0 {
		t.Fatalf("bad input wrote %d tasks", cnt.Count)
	}
	var qr wire.QueueResponse
	e.must(200, "GET", "/v1/queues/q", "").decode(t, &qr)
	if qr.Queue.Defaults.MaxAttempts != 0 || qr.Queue.Defaults.Timeout.D() != norn.DefaultTimeout {
		t.Fatalf("bad queue update changed the queue: %+v", qr.Queue)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.MaxBodyBytes = 64 << 10
		c.MaxSpecBytes = 1 << 10
		c.MaxBatch = 3
	})
	big := `{"queue":"q","spec":"` + strings.Repeat("x", 100<<10) + `"}`
	if c, f := e.must(413, "POST", "/v1/tasks", big).errorOf(t); c != norn.CodeTooLarge || f != "body" {
		t.Errorf("big body: %s %s", c, f)
	}
	spec := `{"queue":"q","spec":"` + strings.Repeat("x", 2<<10) + `"}`
	if c, f := e.must(413, "POST", "/v1/tasks", spec).errorOf(t); c != norn.CodeTooLarge || f != "spec" {
		t.Errorf("big spec: %s %s", c, f)
	}
	if _, f := e.must(413, "POST", "/v1/tasks/batch", `{"tasks":[{"queue":"q"},{"queue":"q","spec":`+spec[len(`{"queue":"q","spec":`):]+`]}`).errorOf(t); f != "tasks[1].spec" {
		t.Errorf("big spec in batch: field %s", f)
	}
	if _, f := e.must(413, "POST", "/v1/tasks/batch", `{"tasks":[{"queue":"q"},{"queue":"q"},{"queue":"q"},{"queue":"q"}]}`).errorOf(t); f != "tasks" {
		t.Errorf("long batch: field %s", f)
	}
	if _, f := e.must(400, "POST", "/v1/tasks", `{"queue":"q","labels":{`+manyLabels(65)+`}}`).errorOf(t); f != "labels" {
		t.Errorf("too many labels: field %s", f)
	}
	e.must(201, "POST", "/v1/tasks", `{"queue":"q","labels":{`+manyLabels(64)+`}}`)
}

func manyLabels(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `"k` + itoa(uint64(i)) + `":"v"`
	}
	return strings.Join(parts, ",")
}

// TestBodyLimitStopsReading: the body limit refuses an endless body after
// reading about the limit, through the real handler chain.
func TestBodyLimitStopsReading(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) { c.MaxBodyBytes = 16 << 10 })
	body := &countingReader{r: io.MultiReader(strings.NewReader(`{"tasks":[{"queue":"q","spec":"`), endless{})}
	req, _ := http.NewRequest("POST", "http://localhost/v1/tasks/batch", body)
	req.Header.Set("Content-Type", "application/json")
	rec := newRecorder()
	e.srv.Handler().ServeHTTP(rec, req)
	if rec.code != 413 {
		t.Fatalf("status %d: %s", rec.code, rec.body.String())
	}
	if body.n > 64<<10 {
		t.Errorf("read %d bytes of an endless body with a 16 KiB limit", body.n)
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// recorder is a minimal ResponseWriter for driving the handler directly.
type recorder struct {
	mu   sync.Mutex
	h    http.Header
	code int
	body strings.Builder
}

func newRecorder() *recorder { return &recorder{h: http.Header{}} }

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(c int) {
	if r.code == 0 {
		r.code = c
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.code == 0 {
		r.code = 200
	}
	return r.body.Write(b)
}

func TestLongPollAnswersWhenTaskArrives(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	type result struct {
		tasks []*norn.Task
		took  time.Duration
		err   error
	}
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := http.Post(e.base+"/v1/queues/lp/claim", "application/json", strings.NewReader(`{"worker":"w","wait":"60s"}`))
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer resp.Body.Close()
		var tr wire.TasksResponse
		err = json.NewDecoder(resp.Body).Decode(&tr)
		ch <- result{tasks: tr.Tasks, took: time.Since(start), err: err}
	}()
	// Let the poll start waiting; if it has not yet, it claims at once,
	// which is also correct.
	waitFor(t, func() bool { return e.srv.m.httpInFlight() > 0 })
	e.must(201, "POST", "/v1/tasks", `{"id":"late","queue":"lp"}`)
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		if len(r.tasks) != 1 || r.tasks[0].ID != "late" {
			t.Fatalf("claimed %+v", r.tasks)
		}
		if r.took > 30*time.Second {
			t.Fatalf("long poll took %s", r.took)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("long poll did not answer when the task arrived")
	}
	// With nothing arriving, a short wait returns empty after the wait.
	var tr wire.TasksResponse
	start := time.Now()
	e.must(200, "POST", "/v1/queues/lp/claim", `{"worker":"w","wait":"200ms"}`).decode(t, &tr)
	if len(tr.Tasks) != 0 || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("empty poll: %d tasks after %s", len(tr.Tasks), time.Since(start))
	}
}

// waitFor waits until cond holds, for at most 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	await.Until(t, 10*time.Second, "the condition", cond)
}

func TestNDJSONStream(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	var b strings.Builder
	b.WriteString(`{"tasks":[`)
	const n = 700
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"queue":"s","spec":{"i":` + itoa(uint64(i)) + `}}`)
	}
	b.WriteString(`]}`)
	e.must(200, "POST", "/v1/tasks/batch", b.String())

	count := func(query string) int {
		req, _ := http.NewRequest("GET", e.base+"/v1/tasks"+query, nil)
		req.Header.Set("Accept", "application/x-ndjson")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
			t.Fatalf("content type %q", ct)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		lines := 0
		seen := map[string]bool{}
		for sc.Scan() {
			var task norn.Task
			if err := json.Unmarshal(sc.Bytes(), &task); err != nil || task.ID == "" {
				t.Fatalf("line %d: %q: %v", lines, sc.Text(), err)
			}
			if seen[task.ID] {
				t.Fatalf("task %s twice", task.ID)
			}
			seen[task.ID] = true
			lines++
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		return lines
	}
	if got := count("?queue=s"); got != n {
		t.Errorf("streamed %d tasks, want %d (more than one page: no page limit applies)", got, n)
	}
	if got := count("?queue=s&limit=10"); got != 10 {
		t.Errorf("limit=10 streamed %d", got)
	}
	if got := count("?queue=other"); got != 0 {
		t.Errorf("empty stream gave %d", got)
	}
}

// sseReader reads server-sent events from a response body.
type sseReader struct {
	sc *bufio.Scanner
}

// next returns the next event (kind, data) or a comment as kind ":".
func (r *sseReader) next() (string, string, error) {
	var kind, data string
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "":
			if kind != "" || data != "" {
				return kind, data, nil
			}
		case strings.HasPrefix(line, ":"):
			return ":", strings.TrimSpace(line[1:]), nil
		case strings.HasPrefix(line, "event: "):
			kind = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
	if err := r.sc.Err(); err != nil {
		return "", "", err
	}
	return "", "", io.EOF
}

func openEvents(t *testing.T, e *env, query string) (*sseReader, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/events"+query, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &sseReader{sc: bufio.NewScanner(resp.Body)}, func() { cancel(); resp.Body.Close() }
}

func TestEvents(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) { c.PingInterval = 50 * time.Millisecond })
	sse, closeFn := openEvents(t, e, "?queue=ev")
	defer closeFn()
	e.must(201, "POST", "/v1/tasks", `{"id":"other","queue":"elsewhere"}`)
	e.must(201, "POST", "/v1/tasks", `{"id":"e1","queue":"ev"}`)
	e.must(200, "POST", "/v1/tasks/e1/cancel", "")
	var got []norn.Event
	pings := 0
	for len(got) < 2 {
		kind, data, err := sse.next()
		if err != nil {
			t.Fatal(err)
		}
		if kind == ":" {
			pings++
			continue
		}
		var ev norn.Event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatal(err)
		}
		if string(ev.Kind) != kind {
			t.Fatalf("event line %q but data kind %q", kind, ev.Kind)
		}
		if ev.Queue != "ev" {
			t.Fatalf("filter let through %+v", ev)
		}
		got = append(got, ev)
	}
	if got[0].Kind != norn.EventSubmitted || got[0].TaskID != "e1" || got[1].Kind != norn.EventKind(norn.TaskCancel) {
		t.Fatalf("events %+v", got)
	}
	for pings == 0 {
		kind, _, err := sse.next()
		if err != nil {
			t.Fatal(err)
		}
		if kind == ":" {
			pings++
		}
	}
}

// blockingStore makes Get wait until released, to hold a request in flight.
type blockingStore struct {
	norn.Store
	entered chan struct{}
	release chan struct{}
}

func (b *blockingStore) Get(ctx context.Context, id string) (*norn.Task, error) {
	if id == "slow" {
		b.entered <- struct{}{}
		<-b.release
	}
	return b.Store.Get(ctx, id)
}

func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	bs := &blockingStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := startServer(t, func(c *Config) {
		bs.Store = c.Store
		c.Store = bs
	})
	slow := make(chan response, 1)
	go func() {
		resp, err := http.Get(e.base + "/v1/tasks/slow")
		if err != nil {
			slow <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		slow <- response{status: resp.StatusCode, body: b}
	}()
	<-bs.entered
	// A long poll and an event stream must not hold up the drain.
	poll := make(chan int, 1)
	go func() {
		resp, err := http.Post(e.base+"/v1/claim", "application/json", strings.NewReader(`{"worker":"w","queues":["none"],"wait":"5m"}`))
		if err != nil {
			poll <- -1
			return
		}
		resp.Body.Close()
		poll <- resp.StatusCode
	}()
	_, closeEvents := openEvents(t, e, "")
	defer closeEvents()
	waitFor(t, func() bool { return e.srv.m.httpInFlight() >= 3 })

	e.stop()
	if code := <-poll; code != 200 {
		t.Fatalf("long poll during shutdown: %d", code)
	}
	select {
	case err := <-e.done:
		t.Fatalf("Run returned (%v) with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(bs.release)
	if r := <-slow; r.status != 404 {
		t.Fatalf("in-flight request: %d %s", r.status, r.body)
	}
	select {
	case err := <-e.done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		e.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the drain")
	}
	if _, err := http.Get(e.base + "/healthz"); err == nil {
		t.Fatal("server still accepts connections after shutdown")
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cases := []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Store"},
		{Config{Store: st, Addr: "0.0.0.0:0"}, "Addr"},
		{Config{Store: st, Addr: ":0"}, "Addr"},
		{Config{Store: st, Addr: "127.0.0.1:0", TLSCert: "x"}, "TLSKey"},
		{Config{Store: st, Addr: "127.0.0.1:0", MaxSpecBytes: 2 << 20}, "MaxSpecBytes"},
		{Config{Store: st, Addr: "127.0.0.1:0", MaxBatch: -1}, "MaxBatch"},
		{Config{Store: st, Addr: "127.0.0.1:0", MaxLabels: 100}, "MaxLabels"},
		{Config{Store: st, Addr: "127.0.0.1:0", Tokens: []Token{{Token: "a", Role: "root"}}}, "Tokens[0].Role"},
		{Config{Store: st, Addr: "127.0.0.1:0", TLSCert: "/nonexistent", TLSKey: "/nonexistent"}, "TLSCert"},
	}
	for _, c := range cases {
		c.cfg.Logger = quietLogger()
		s, err := New(c.cfg)
		var ne *norn.Error
		if !errors.As(err, &ne) || ne.Field != c.field {
			t.Errorf("%+v: got %v, want error on %s", c.cfg, err, c.field)
		}
		if s != nil {
			s.Close()
		}
	}
	// Non-loopback is fine with tokens, or when explicitly allowed.
	for _, cfg := range []Config{
		{Store: st, Addr: "0.0.0.0:0", Tokens: []Token{{Token: "a", Role: RoleAdmin}}},
		{Store: st, Addr: "0.0.0.0:0", AllowUnauthenticatedNonLoopback: true},
	} {
		cfg.Logger = quietLogger()
		s, err := New(cfg)
		if err != nil {
			t.Errorf("%+v: %v", cfg, err)
			continue
		}
		s.Close()
	}
}

// TestDashboardMount: the dashboard handler serves "/" while API routes,
// unknown API paths and probes keep their own handlers.
func TestDashboardMount(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Dashboard = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "dashboard "+r.URL.Path)
		})
	})
	if r := e.must(200, "GET", "/", ""); string(r.body) != "dashboard /" {
		t.Fatalf("/ served %q", r.body)
	}
	if r := e.must(200, "GET", "/assets/app.js", ""); string(r.body) != "dashboard /assets/app.js" {
		t.Fatalf("asset served %q", r.body)
	}
	if c, _ := e.must(404, "GET", "/v1/unknown", "").errorOf(t); c != norn.CodeNotFound {
		t.Fatalf("unknown API path: %s", c)
	}
	e.must(200, "GET", "/healthz", "")
	e.must(200, "GET", "/v1/stats", "")
}
