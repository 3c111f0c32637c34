package dashboard_test

// Browser tests: a real server over the embedded store, driven by headless
// Chromium through chromedp. Each test seeds tasks through the store, loads
// a page, acts in the page like a user would, and checks both the DOM and
// the store afterwards. Every page is also checked and photographed at a
// desktop (1280×800) and a phone (390×844) size.
//
// Chromium: $NORN_CHROMIUM, else chromium / chromium-browser / google-chrome
// on PATH. Without it the tests skip, unless NORN_REQUIRE_BROWSER=1 (CI).
// Screenshots go to $NORN_ARTIFACTS/dashboard when set, else a temporary
// directory that is logged; -update-docs also copies a few into docs/img.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/internal/chromium"
	"github.com/nornq/norn/internal/servertest"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/server/dashboard"
	"github.com/nornq/norn/store/embedded"
)

var updateDocs = flag.Bool("update-docs", false, "copy screenshots used by docs/dashboard.md into docs/img")

// The browser tests do not run in parallel: each starts a Chromium, and the
// CI machine has two cores.

const waitTimeout = 15 * time.Second

type env struct {
	t         *testing.T
	st        norn.Store
	url       string
	ctx       context.Context
	artifacts string

	mu       sync.Mutex
	problems []string
}

type viewport struct {
	name string
	w, h int64
}

// docShots are the screenshots docs/dashboard.md and the README use.
var docShots = map[string]bool{"overview-desktop": true, "task-desktop": true, "queue-desktop": true, "queue-phone": true}

var viewports = []viewport{{"desktop", 1280, 800}, {"phone", 390, 844}}

func artifactDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("NORN_ARTIFACTS"); d != "" {
		dir := filepath.Join(d, "dashboard")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// newEnv starts a store, a server with the dashboard (and tokens, if any)
// and a fresh headless Chromium.
func newEnv(t *testing.T, tokens []server.Token) *env {
	t.Helper()
	exe := chromium.Path(t)
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), Durability: embedded.Opportunistic,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := servertest.Start(t, server.Config{Store: st, Dashboard: dashboard.Handler(), Tokens: tokens, ShutdownTimeout: time.Second})

	opts := chromium.Options(t, exe, chromedp.Flag("hide-scrollbars", true), chromedp.WindowSize(1280, 800))
	tctx := chromium.Start(t, 3*time.Minute, opts...)

	e := &env{t: t, st: st, url: srv.URL(), ctx: tctx, artifacts: artifactDir(t)}
	// Start the browser and watch the console: an uncaught exception, a
	// console.error from the app or a CSP violation fails the test.
	msgs := chromedp.Console(tctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			bad := m.IsException() || (m.Type == chromedp.ConsoleError && m.Source == "") ||
				strings.Contains(m.Text, "Content Security Policy") || strings.Contains(m.Text, "Content-Security-Policy")
			if bad {
				e.mu.Lock()
				e.problems = append(e.problems, m.String())
				e.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, p := range e.problems {
			t.Errorf("browser console: %s", p)
		}
	})
	e.do(chromedp.EmulateViewport(1280, 800))
	t.Logf("screenshots: %s", e.artifacts)
	return e
}

func (e *env) do(actions ...chromedp.Action[chromedp.Void]) {
	e.t.Helper()
	if err := chromedp.Do(e.ctx, actions...); err != nil {
		e.t.Fatalf("browser: %v\npage: %s", err, e.pageText())
	}
}

// open loads the app afresh at a hash route (via about:blank, because a
// navigation that only changes the fragment would not reload the page).
func (e *env) open(hash string) {
	e.t.Helper()
	e.do(chromedp.Navigate("about:blank"), chromedp.Navigate(e.url+"/"+hash))
}

// goHash changes the route inside the running app (no reload).
func (e *env) goHash(hash string) {
	e.t.Helper()
	e.eval(fmt.Sprintf("location.hash = %q", hash))
}

func (e *env) pageText() string {
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "(unavailable: " + err.Error() + ")"
	}
	if len(s) > 3000 {
		s = s[:3000] + "…"
	}
	return s
}

// wait polls a JavaScript condition until it is truthy.
func (e *env) wait(cond string) {
	e.t.Helper()
	_, err := chromedp.Run(e.ctx, chromedp.Poll[any](cond, chromedp.WithPollingTimeout(waitTimeout), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		e.t.Fatalf("waiting for %s: %v\npage: %s", cond, err, e.pageText())
	}
}

func (e *env) eval(js string) {
	e.t.Helper()
	if _, err := chromedp.Run(e.ctx, chromedp.Evaluate[any](js)); err != nil {
		e.t.Fatalf("eval %s: %v", js, err)
	}
}

func evalAs[T any](e *env, js string) T {
	e.t.Helper()
	v, err := chromedp.Run(e.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		e.t.Fatalf("eval %s: %v", js, err)
	}
	return v
}

func (e *env) text(sel string) string {
	e.t.Helper()
	return evalAs[string](e, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel))
}

// editDefaults opens the queue page's defaults form, clicking again if a
// live update rendered the card anew before the form appeared.
func (e *env) editDefaults() {
	e.t.Helper()
	for range 5 {
		e.click("#edit-defaults")
		ctx, cancel := context.WithTimeout(e.ctx, 3*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Poll[any](`!!document.querySelector("#defaults-form")`, chromedp.WithPollingInterval(50*time.Millisecond)))
		cancel()
		if err == nil {
			return
		}
	}
	e.t.Fatalf("the defaults form did not open\npage: %s", e.pageText())
}

func (e *env) click(sel string) {
	e.t.Helper()
	// A live update may render the element again between finding it and
	// clicking it; the click then names a node that is gone, and finds
	// the new one when tried again.
	for range 5 {
		err := chromedp.Do(e.ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "Could not find node") {
			e.t.Fatalf("browser: %v\npage: %s", err, e.pageText())
		}
	}
	e.do(chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// shots checks the page at every viewport (no horizontal scrolling on the
// phone) and saves a screenshot of each, then returns to the desktop size.
func (e *env) shots(name string, ready string) {
	e.t.Helper()
	for _, vp := range viewports {
		e.do(chromedp.EmulateViewport(vp.w, vp.h))
		e.wait(fmt.Sprintf("innerWidth === %d && (%s)", vp.w, ready))
		// Let layout and the chart's ResizeObserver settle for two frames.
		_, err := chromedp.Run(e.ctx, chromedp.Evaluate[any](`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise))
		if err != nil {
			e.t.Fatal(err)
		}
		sw := evalAs[float64](e, `document.scrollingElement.scrollWidth`)
		if sw > float64(vp.w) {
			wide := evalAs[string](e, `[...document.querySelectorAll("body *")].filter(x => x.getBoundingClientRect().right > innerWidth + 1).slice(0, 5).map(x => x.tagName + "#" + x.id + "." + x.className).join(", ")`)
			e.t.Errorf("%s at %dpx: page scrolls horizontally (scrollWidth %v); too wide: %s", name, vp.w, sw, wide)
		}
		// A task id (a UUID) and the breadcrumb each take one line, even on
		// a phone (the id once broke over three).
		lines := func(sel string) int {
			return int(evalAs[float64](e, `(() => { const el = document.querySelector(`+strconv.Quote(sel)+`); if (!el) return 0;
				const r = document.createRange(); r.selectNodeContents(el);
				const tops = [...r.getClientRects()].filter(x => x.width > 0).map(x => x.top).sort((a, b) => a - b);
				return tops.filter((t, i) => i === 0 || t - tops[i - 1] > 8).length; })()`))
		}
		for _, sel := range []string{"h1.task-id", "#crumbs"} {
			if n := lines(sel); n > 1 {
				e.t.Errorf("%s at %dpx: %s takes %d lines, want 1", name, vp.w, sel, n)
			}
		}
		png, err := chromedp.Run(e.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			e.t.Fatal(err)
		}
		file := filepath.Join(e.artifacts, fmt.Sprintf("%s-%s.png", name, vp.name))
		if err := os.WriteFile(file, png, 0o644); err != nil {
			e.t.Fatal(err)
		}
		if *updateDocs && docShots[name+"-"+vp.name] {
			// The docs show what a screen shows: the viewport, not the whole page.
			shot, err := chromedp.Run(e.ctx, chromedp.CaptureScreenshot())
			if err != nil {
				e.t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("..", "..", "docs", "img", "dashboard-"+name+"-"+vp.name+".png"), shot, 0o644); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	e.do(chromedp.EmulateViewport(1280, 800))
	e.wait("innerWidth === 1280")
}

// --- seeding -------------------------------------------------------------------

type seeded struct {
	worker string
	leases map[string]uint64
}

// seed fills the store: queue "emails" with 60 ready tasks labelled by
// tenant and priority, and queue "reports" with a running task (progress and
// log), a retried one, a completed one and a blocked dependent.
func seed(t *testing.T, st norn.Store) seeded {
	t.Helper()
	ctx := context.Background()
	var batch []norn.NewTask
	for i := 0; i < 60; i++ {
		tenant := "acme"
		if i%2 == 1 {
			tenant = "globex"
		}
		batch = append(batch, norn.NewTask{ID: fmt.Sprintf("email-%03d", i), Queue: "emails", Priority: uint32(i % 5),
			Spec: json.RawMessage(fmt.Sprintf(`{"to":"user%d@example.com"}`, i)), Labels: map[string]string{"tenant": tenant}})
	}
	retry := &norn.RetryPolicy{MaxRetries: 3, Base: norn.Duration(time.Hour)}
	batch = append(batch,
		norn.NewTask{ID: "report-1", Queue: "reports", Priority: 9, Spec: json.RawMessage(`{"report":"monthly","month":"2025-01"}`), Labels: map[string]string{"team": "finance"},
			MaxRuntime: norn.Duration(2 * time.Hour)},
		norn.NewTask{ID: "report-2", Queue: "reports", Priority: 8, Spec: json.RawMessage(`{"report":"weekly"}`), Retry: retry},
		norn.NewTask{ID: "report-3", Queue: "reports", Priority: 7, Spec: json.RawMessage(`{"report":"daily","rows":[1,2,3]}`), Labels: map[string]string{"team": "ops"}},
		norn.NewTask{ID: "report-4", Queue: "reports", Priority: 6, Spec: json.RawMessage(`{"report":"summary"}`), DependsOn: []string{"report-1"}},
	)
	if _, err := st.Submit(ctx, batch...); err != nil {
		t.Fatal(err)
	}
	w, err := st.RegisterWorker(ctx, norn.WorkerInfo{Name: "test-host/1", Queues: []string{"reports"}})
	if err != nil {
		t.Fatal(err)
	}
	s := seeded{worker: w, leases: map[string]uint64{}}
	for _, want := range []string{"report-1", "report-2", "report-3"} {
		got, err := st.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"reports"}, N: 1, Timeout: norn.Duration(time.Hour)})
		if err != nil || len(got) != 1 || got[0].ID != want {
			t.Fatalf("claim: want %s, got %v, %v", want, got, err)
		}
		s.leases[want] = got[0].Lease
	}
	ref := func(id string) norn.LeaseRef { return norn.LeaseRef{TaskID: id, Worker: w, Lease: s.leases[id]} }
	p := 0.4
	if _, err := st.Heartbeat(ctx, ref("report-1"), norn.Heartbeat{Progress: &p}); err != nil {
		t.Fatal(err)
	}
	for i, d := range []string{`{"step":"load","rows":1200}`, `{"step":"aggregate","done":0.4}`} {
		if _, err := st.AppendLog(ctx, ref("report-1"), norn.LogAppend{Data: json.RawMessage(d)}); err != nil {
			t.Fatalf("log %d: %v", i, err)
		}
	}
	if err := st.Fail(ctx, ref("report-2"), norn.ErrorInfo{Code: "smtp_down", Description: "connection refused by mail.example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, ref("report-3"), json.RawMessage(`{"rows":42,"url":"s3://reports/daily.csv"}`)); err != nil {
		t.Fatal(err)
	}
	return s
}

func count(t *testing.T, st norn.Store, f norn.Filter) int64 {
	t.Helper()
	n, err := st.Count(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// --- tests ---------------------------------------------------------------------

func TestOverview(t *testing.T) {
	e := newEnv(t, nil)
	s := seed(t, e.st)
	e.open("#/")
	e.wait(`document.querySelector('#queues tr[data-queue="emails"]') && document.querySelector('#queues tr[data-queue="reports"]')`)
	if got := e.text(`#queues tr[data-queue="emails"] td[data-status="ready"]`); got != "60" {
		t.Errorf("emails ready = %q, want 60", got)
	}
	if got := e.text(`#queues tr[data-queue="reports"] td[data-status="running"]`); got != "1" {
		t.Errorf("reports running = %q, want 1", got)
	}
	if got := e.text(`.stat[data-status="total"] .v`); got != "64" {
		t.Errorf("total = %q, want 64", got)
	}
	if got := e.text(`#active-workers`); got != "1" {
		t.Errorf("active workers = %q, want 1", got)
	}
	e.wait(fmt.Sprintf(`document.querySelector('#workers tr[data-worker=%q]')`, s.worker))

	// Live: a submit, a completion and a failure move the counts and the
	// chart without a reload.
	e.wait(`document.querySelector("#live").dataset.state === "live"`)
	ctx := context.Background()
	if _, err := e.st.Submit(ctx, norn.NewTask{ID: "email-new", Queue: "emails"}); err != nil {
		t.Fatal(err)
	}
	e.wait(`document.querySelector('#queues tr[data-queue="emails"] td[data-status="ready"]').textContent === "61"`)
	e.wait(`document.querySelector('.stat[data-status="total"] .v').textContent === "65"`)
	if err := e.st.Complete(ctx, norn.LeaseRef{TaskID: "report-1", Worker: s.worker, Lease: s.leases["report-1"]}, nil); err != nil {
		t.Fatal(err)
	}
	e.wait(`/submitted.* 65 in 1h/.test(document.querySelector('.legend-item[data-series="submitted"]').textContent)`)
	e.wait(`/completed.* 2 in 1h/.test(document.querySelector('.legend-item[data-series="completed"]').textContent)`)
	// report-1 completing releases report-4 (blocked → ready).
	e.wait(`document.querySelector('#queues tr[data-queue="reports"] td[data-status="blocked"]').textContent === "0"`)
	e.shots("overview", `document.querySelector('#queues tr[data-queue="emails"]')`)
}

// TestThroughputHistory: the chart is drawn from the server's history on
// the first page load, before any live event arrives, and again after a
// reload; the queue page draws its own queue's history.
func TestThroughputHistory(t *testing.T) {
	e := newEnv(t, nil)
	seed(t, e.st)
	// The server counts the store's events in the background: wait until
	// it has them all, so that the page's first request sees them.
	await.Check(t, waitTimeout, "the server's history to count 64 submits", func() (string, error) {
		var h norn.Throughput
		resp, err := http.Get(e.url + "/v1/stats/throughput")
		if err != nil {
			return "", err
		}
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		if err != nil {
			return "", err
		}
		var n int64
		for _, p := range h.Points {
			n += p.Submitted
		}
		if n != 64 {
			return fmt.Sprintf("%d submits", n), nil
		}
		return "", nil
	})
	e.open("#/")
	// Nothing happens after the page loads: these counts can only come
	// from the history. The rate is the last whole minute's, 0 or all of
	// them depending on when the minute turned, so only totals are checked.
	e.wait(`/^submitted (0|64)\/min · 64 in 1h$/.test((document.querySelector('.legend-item[data-series="submitted"]') || {}).textContent)`)
	e.wait(`/ 1 in 1h$/.test((document.querySelector('.legend-item[data-series="completed"]') || {}).textContent)`)
	e.wait(`/ 1 in 1h$/.test((document.querySelector('.legend-item[data-series="failed"]') || {}).textContent)`)
	if got := evalAs[bool](e, `document.querySelector('#throughput-note').hidden`); !got {
		t.Errorf("chart shows an error: %s", e.text("#throughput-note"))
	}
	// The line ends at the last whole minute, whose count the legend shows
	// as the rate: the minute under way, still growing, is not drawn (it
	// made the line drop towards 0 at its end).
	e.wait(`(() => { const c = document.querySelector('#throughput'); if (!c.dataset.lastPoint) return false;
		const rate = +(document.querySelector('.legend-item[data-series="submitted"] .rate').textContent.replace(/\/min$/, ''));
		return JSON.parse(c.dataset.lastPoint)[0] === rate; })()`)
	// The canvas has the submitted line drawn above the baseline.
	e.wait(`(() => { const c = document.querySelector('#throughput'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
		let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n > 0; })()`)
	e.click(`.range-chip[data-range="24h"]`)
	e.wait(`/ 64 in 24h$/.test((document.querySelector('.legend-item[data-series="submitted"]') || {}).textContent)`)
	if got := e.text(`.range-chip[aria-pressed="true"]`); got != "24 h" {
		t.Errorf("pressed range %q, want 24 h", got)
	}
	// A reload draws the same history at once (and keeps the range).
	e.open("#/")
	e.wait(`/ 64 in 24h$/.test((document.querySelector('.legend-item[data-series="submitted"]') || {}).textContent)`)
	// The queue page counts its queue only: 4 reports submitted, 1 completed.
	e.open("#/queues/reports")
	e.wait(`/ 4 in 24h$/.test((document.querySelector('.legend-item[data-series="submitted"]') || {}).textContent)`)
	e.wait(`/ 1 in 24h$/.test((document.querySelector('.legend-item[data-series="completed"]') || {}).textContent)`)
	e.open("#/queues/emails")
	e.wait(`/ 60 in 24h$/.test((document.querySelector('.legend-item[data-series="submitted"]') || {}).textContent)`)
	e.wait(`/ 0 in 24h$/.test((document.querySelector('.legend-item[data-series="completed"]') || {}).textContent)`)
}

func TestQueuePage(t *testing.T) {
	e := newEnv(t, nil)
	seed(t, e.st)
	ctx := context.Background()
	if _, err := e.st.Cancel(ctx, "email-000"); err != nil {
		t.Fatal(err)
	}
	rows := `document.querySelectorAll("#task-list tbody tr")`
	ids := `[...document.querySelectorAll("#task-list tbody tr")].map(r => r.dataset.id).join(",")`

	// Paging over 60 tasks, 25 at a time, newest first.
	e.open("#/queues/emails?limit=25")
	e.wait(rows + `.length === 25 && document.querySelector("#page-no").textContent === "page 1"`)
	first := evalAs[string](e, ids)
	if !strings.HasPrefix(first, "email-059,email-058") {
		t.Errorf("newest first: page 1 = %s", first)
	}
	e.wait(`document.querySelector("#match-count").dataset.count === "60"`)
	e.click("#next")
	e.wait(`document.querySelector("#page-no").textContent === "page 2"`)
	if got := evalAs[string](e, ids); strings.Split(got, ",")[0] != "email-034" {
		t.Errorf("page 2 starts with %s, want email-034", strings.Split(got, ",")[0])
	}
	e.click("#next")
	e.wait(`document.querySelector("#page-no").textContent === "page 3" && ` + rows + `.length === 10`)
	if !evalAs[bool](e, `document.querySelector("#next").disabled`) {
		t.Error("next is enabled on the last page")
	}
	e.click("#prev")
	e.wait(`document.querySelector("#page-no").textContent === "page 2" && ` + rows + `.length === 25`)

	// Status filter by chip.
	e.click(`#status-chips [data-status="cancelled"]`)
	e.wait(rows + `.length === 1 && ` + ids + ` === "email-000"`)
	if !strings.Contains(evalAs[string](e, "location.hash"), "status=cancelled") {
		t.Error("status filter is not in the URL")
	}
	e.click(`#status-chips [data-status="all"]`)
	e.wait(`document.querySelector("#match-count").dataset.count === "60"`)

	// Label filter and id search.
	e.do(chromedp.SendKeys(chromedp.CSS("#label-input"), "tenant:acme"))
	e.click(`#label-form button[type=submit]`)
	e.wait(`document.querySelector("#match-count").dataset.count === "30"`)
	e.wait(`[...document.querySelectorAll("#task-list tbody tr td[data-label=Labels]")].every(td => td.textContent === "tenant:acme")`)
	e.do(chromedp.SendKeys(chromedp.CSS("#id-search"), "email-01"))
	e.wait(`document.querySelector("#match-count").dataset.count === "5" && ` + rows + `.length === 5`)
	if got := evalAs[string](e, ids); got != "email-018,email-016,email-014,email-012,email-010" {
		t.Errorf("id search + label: %s", got)
	}

	// Priority order.
	e.goHash("#/queues/emails?order=priority")
	e.wait(rows + `.length === 50`)
	if got := e.text(`#task-list tbody tr td[data-label=Priority]`); got != "4" {
		t.Errorf("priority order: first priority %s, want 4", got)
	}

	// Pause and resume. The badge is judged by what is drawn, not by its
	// hidden attribute: a CSS display rule once drew it on every queue.
	const badgeShown = `document.querySelector("#paused-badge").getClientRects().length > 0`
	e.wait(`!document.querySelector("#pause").disabled`)
	if evalAs[bool](e, badgeShown) {
		t.Error("a running queue's page shows the paused badge")
	}
	e.click("#pause")
	e.wait(badgeShown + ` && document.querySelector("#pause").textContent === "Resume"`)
	q, err := e.st.Queue(ctx, "emails")
	if err != nil || !q.Paused {
		t.Fatalf("after pause: paused=%v err=%v", q.Paused, err)
	}
	e.shots("queue", rows+`.length > 0`)
	e.click("#pause")
	e.wait(`!(` + badgeShown + `)`)
	if q, _ := e.st.Queue(ctx, "emails"); q.Paused {
		t.Error("resume did not reach the store")
	}

	// Defaults: without a policy the queue shows the default retries.
	e.click(`#defaults-card summary`)
	if got := e.text("#def-retry"); !strings.HasPrefix(got, "default: 24× backoff 1s") {
		t.Errorf("retry shown %q for a queue without a policy, want the default", got)
	}
	e.editDefaults()
	e.do(chromedp.SetValue(chromedp.CSS("#timeout"), "45s"), chromedp.SetValue(chromedp.CSS("#max_retries"), "2"), chromedp.SetValue(chromedp.CSS("#retry_base"), "5s"),
		chromedp.SetValue(chromedp.CSS("#max_runtime"), "10m"), chromedp.SetValue(chromedp.CSS("#fair_by"), "label:tenant"),
		chromedp.SetValue(chromedp.CSS("#rate_per_second"), "2.5"), chromedp.SetValue(chromedp.CSS("#rate_burst"), "4"))
	e.click(`#defaults-form button[type=submit]`)
	e.wait(`document.querySelector("#def-timeout") && document.querySelector("#def-timeout").textContent === "45s"`)
	if got := e.text("#def-max-runtime"); got != "10m0s" {
		t.Errorf("max runtime shown %q, want 10m0s", got)
	}
	if got := e.text("#def-fair-by"); got != "label:tenant" {
		t.Errorf("fair by shown %q, want label:tenant", got)
	}
	if got := e.text("#def-rate-limit"); got != "2.5/s, burst 4 (4.0 tokens now)" {
		t.Errorf("rate limit shown %q, want 2.5/s, burst 4 with a full bucket", got)
	}
	q, _ = e.st.Queue(ctx, "emails")
	if q.RateLimit != (norn.RateLimit{PerSecond: 2.5, Burst: 4}) {
		t.Errorf("rate_limit not saved: %+v", q.RateLimit)
	}
	if q.FairBy != "label:tenant" {
		t.Errorf("fair_by not saved: %q", q.FairBy)
	}
	if q.Defaults.Timeout.D() != 45*time.Second || q.Defaults.Retry == nil || q.Defaults.Retry.MaxRetries != 2 || q.Defaults.MaxRuntime.D() != 10*time.Minute {
		t.Errorf("defaults not saved: %+v", q.Defaults)
	}

	// Bulk cancel with the count confirmed first.
	e.goHash("#/queues/emails?label=tenant:globex")
	e.wait(`document.querySelector("#match-count").dataset.count === "30"`)
	e.click("#cancel-all")
	e.wait(`document.querySelector("#confirm h2") && document.querySelector("#confirm h2").textContent === "Cancel 30 tasks?"`)
	e.click("#confirm-ok")
	e.wait(`document.querySelector("#bulk-text") && document.querySelector("#bulk-text").dataset.done === "30"`)
	if n := count(t, e.st, norn.Filter{Queues: []string{"emails"}, Labels: map[string]string{"tenant": "globex"}, Statuses: []norn.Status{norn.StatusCancelled}}); n != 30 {
		t.Errorf("cancelled globex tasks = %d, want 30", n)
	}
	e.click("#bulk-close")

	// Bulk delete of the cancelled ones; declining first changes nothing.
	e.goHash("#/queues/emails?status=cancelled")
	e.wait(`document.querySelector("#match-count").dataset.count === "31"`)
	e.click("#delete-all")
	e.wait(`document.querySelector("#confirm h2") && document.querySelector("#confirm h2").textContent === "Delete 31 tasks?"`)
	e.click("#confirm-cancel")
	e.wait(`!document.querySelector("#confirm")`)
	if n := count(t, e.st, norn.Filter{Queues: []string{"emails"}}); n != 60 {
		t.Fatalf("declined delete still deleted: %d tasks left", n)
	}
	e.click("#delete-all")
	e.wait(`document.querySelector("#confirm h2") && document.querySelector("#confirm h2").textContent === "Delete 31 tasks?"`)
	e.click("#confirm-ok")
	e.wait(`document.querySelector("#bulk-text") && document.querySelector("#bulk-text").dataset.done === "31"`)
	if n := count(t, e.st, norn.Filter{Queues: []string{"emails"}}); n != 29 {
		t.Errorf("after delete: %d tasks in emails, want 29", n)
	}
	e.click("#bulk-close")
	e.wait(`document.querySelector("#no-tasks")`)

	// Bulk retry of cancelled tasks, the count confirmed first.
	page, err := e.st.List(ctx, norn.Query{Filter: norn.Filter{Queues: []string{"emails"}, Statuses: []norn.Status{norn.StatusReady}}, Limit: 3})
	if err != nil || len(page.Tasks) != 3 {
		t.Fatalf("ready emails: %d, %v", len(page.Tasks), err)
	}
	for _, tk := range page.Tasks {
		if _, err := e.st.Cancel(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
	}
	e.wait(`document.querySelector("#match-count").dataset.count === "3"`)
	e.click("#retry-all")
	e.wait(`document.querySelector("#confirm h2") && document.querySelector("#confirm h2").textContent === "Retry 3 tasks?"`)
	e.click("#confirm-ok")
	e.wait(`document.querySelector("#bulk-text") && document.querySelector("#bulk-text").dataset.done === "3"`)
	for _, tk := range page.Tasks {
		if g, err := e.st.Get(ctx, tk.ID); err != nil || g.Status != norn.StatusReady || g.History[len(g.History)-1].Type != norn.TaskRedrive {
			t.Errorf("after bulk retry: %v, %v", g, err)
		}
	}
	e.click("#bulk-close")
	e.wait(`document.querySelector("#no-tasks")`)

	// A key with a weight of its own and no limit: its limit reads as the
	// queue's default, in words a user reads ("queue default").
	if _, err := e.st.UpdateQueue(ctx, "emails", norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"acme": {Weight: 3}}}); err != nil {
		t.Fatal(err)
	}
	e.goHash("#/queues/emails?k=1")
	e.click(`#defaults-card summary`)
	e.wait(`!!document.querySelector('#flow-keys tr[data-key="acme"]')`)
	if got := e.text(`#flow-keys tr[data-key="acme"] td[data-label="Limit"]`); got != "queue default" {
		t.Errorf("limit of a key without one shown as %q, want \"queue default\"", got)
	}
	if got := e.text("#def-key-rate-limit"); got != "no limit" {
		t.Errorf("per-key rate limit of a queue without one shown as %q, want \"no limit\"", got)
	}
	if got := e.text(`#flow-keys tr[data-key="acme"] td[data-label="Rate"]`); got != "no limit" {
		t.Errorf("rate of a key in a queue without key rates shown as %q, want \"no limit\"", got)
	}

	// Per-key rate limits: the queue's next to its rate limit, a key's own
	// in the keys table (another key follows the queue's), and the form
	// sets the queue's.
	fairBy := norn.FairByConcurrencyKey
	if _, err := e.st.UpdateQueue(ctx, "emails", norn.QueueUpdate{FairBy: &fairBy,
		KeyRateLimit: &norn.RateLimit{PerSecond: 5, Burst: 10},
		Keys:         map[string]*norn.KeySettings{"acme": {Weight: 3, RateLimit: norn.RateLimit{PerSecond: 50, Burst: 100}}, "globex": {Limit: 2}}}); err != nil {
		t.Fatal(err)
	}
	// A fresh load, not a route change: a click could otherwise land on
	// the page being replaced, and its form vanish with it.
	e.open("#/queues/emails?k=2")
	e.wait(`!!document.querySelector('#flow-keys tr[data-key="globex"]')`)
	e.click(`#defaults-card summary`)
	if got := e.text("#def-key-rate-limit"); got != "5/s, burst 10" {
		t.Errorf("per-key rate limit shown %q, want 5/s, burst 10", got)
	}
	if got := e.text(`#flow-keys tr[data-key="acme"] td[data-label="Rate"]`); got != "50/s, burst 100" {
		t.Errorf("acme's own rate shown %q, want 50/s, burst 100", got)
	}
	if got := e.text(`#flow-keys tr[data-key="globex"] td[data-label="Rate"]`); got != "queue default" {
		t.Errorf("rate of a key without its own shown %q, want \"queue default\"", got)
	}
	e.editDefaults()
	e.do(chromedp.SetValue(chromedp.CSS("#key_rate_per_second"), "0.5"), chromedp.SetValue(chromedp.CSS("#key_rate_burst"), "2"))
	e.click(`#defaults-form button[type=submit]`)
	e.wait(`document.querySelector("#def-key-rate-limit") && document.querySelector("#def-key-rate-limit").textContent === "0.5/s, burst 2"`)
	if q, err := e.st.Queue(ctx, "emails"); err != nil || q.KeyRateLimit != (norn.RateLimit{PerSecond: 0.5, Burst: 2}) {
		t.Errorf("key_rate_limit not saved: %+v, %v", q.KeyRateLimit, err)
	}
	e.editDefaults()
	e.do(chromedp.SetValue(chromedp.CSS("#key_rate_per_second"), "0"))
	e.click(`#defaults-form button[type=submit]`)
	e.wait(`document.querySelector("#def-key-rate-limit") && document.querySelector("#def-key-rate-limit").textContent === "no limit"`)
	if q, err := e.st.Queue(ctx, "emails"); err != nil || !q.KeyRateLimit.IsZero() {
		t.Errorf("key_rate_limit not removed: %+v, %v", q.KeyRateLimit, err)
	}
}

func TestTaskPage(t *testing.T) {
	e := newEnv(t, nil)
	s := seed(t, e.st)
	ctx := context.Background()

	// A running task: fields, progress, log, history, live updates.
	e.open("#/tasks/report-1")
	e.wait(`document.querySelector('#task-status [data-status="running"]')`)
	e.wait(`document.querySelectorAll("#log li[data-seq]").length === 2`)
	if got := evalAs[string](e, `document.querySelector("#progress .progress").getAttribute("aria-valuenow")`); got != "40" {
		t.Errorf("progress = %s, want 40", got)
	}
	if !strings.Contains(e.text("#spec"), `"month": "2025-01"`) {
		t.Errorf("spec not pretty-printed: %s", e.text("#spec"))
	}
	if e.text(`#history li[data-type="TaskAssignment"]`) == "" {
		t.Error("no assignment in the history")
	}
	if got := e.text("#max-runtime"); got != "2h0m0s" {
		t.Errorf("max runtime shown as %q, want 2h0m0s", got)
	}
	if got := e.text("#started"); got == "" || got == "—" {
		t.Errorf("started of a running task shown as %q", got)
	}
	ref := norn.LeaseRef{TaskID: "report-1", Worker: s.worker, Lease: s.leases["report-1"]}
	p := 0.8
	if _, err := e.st.Heartbeat(ctx, ref, norn.Heartbeat{Progress: &p}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.AppendLog(ctx, ref, norn.LogAppend{Data: json.RawMessage(`{"step":"render"}`)}); err != nil {
		t.Fatal(err)
	}
	e.wait(`document.querySelector("#progress .progress").getAttribute("aria-valuenow") === "80"`)
	e.wait(`document.querySelectorAll("#log li[data-seq]").length === 3`)

	// Dependencies both ways: the first dependents are listed unasked.
	e.wait(`document.querySelector('#dependents-list li[data-id="report-4"]')`)
	e.goHash("#/tasks/report-4")
	e.wait(`document.querySelector('#depends-on li[data-id="report-1"] [data-status="running"]')`)

	// A retried task shows its error in the timeline.
	e.goHash("#/tasks/report-2")
	e.wait(`document.querySelector('#history li[data-type="TaskRetry"]')`)
	if got := e.text(`#history li[data-type="TaskRetry"]`); !strings.Contains(got, "smtp_down") || !strings.Contains(got, "connection refused") {
		t.Errorf("retry entry lacks the error: %q", got)
	}
	e.wait(`document.querySelector('#task-status [data-status="scheduled"]')`)
	e.shots("task", `document.querySelector('#history li[data-type="TaskRetry"]')`)

	// Cancel.
	e.click("#cancel")
	e.wait(`document.querySelector('#task-status [data-status="cancelled"]')`)
	if tk, err := e.st.Get(ctx, "report-2"); err != nil || tk.Status != norn.StatusCancelled {
		t.Fatalf("after cancel: %v, %v", tk, err)
	}

	// Retry the cancelled task (a redrive: same id, history kept).
	e.wait(`document.querySelector("#retry")`)
	e.click("#retry")
	e.wait(`document.querySelector("#retry-dependents")`)
	e.click("#confirm-ok")
	e.wait(`document.querySelector('#task-status [data-status="ready"]') && document.querySelector('#history li[data-type="TaskRedrive"]')`)
	if tk, err := e.st.Get(ctx, "report-2"); err != nil || tk.Status != norn.StatusReady || tk.Attempts != 0 {
		t.Fatalf("after retry: %v, %v", tk, err)
	}
	if e.text("#retry") != "" {
		t.Error("a ready task still offers retry")
	}

	// Resubmit a completed task as a new one.
	e.goHash("#/tasks/report-3")
	e.wait(`document.querySelector('#task-status [data-status="completed"]') && document.querySelector("#result").textContent.includes('"rows": 42')`)
	e.click("#resubmit")
	e.wait(`location.hash.startsWith("#/tasks/") && location.hash !== "#/tasks/report-3" && document.querySelector('#task-status [data-status="ready"]')`)
	newID := strings.TrimPrefix(evalAs[string](e, `decodeURIComponent(location.hash)`), "#/tasks/")
	nt, err := e.st.Get(ctx, newID)
	if err != nil {
		t.Fatalf("resubmitted task %q: %v", newID, err)
	}
	old, _ := e.st.Get(ctx, "report-3")
	if nt.Queue != "reports" || string(nt.Spec) != string(old.Spec) || nt.Priority != old.Priority || nt.Labels["team"] != "ops" {
		t.Errorf("resubmitted task differs: %+v", nt)
	}

	// Delete after confirming.
	e.goHash("#/tasks/report-3")
	e.wait(`document.querySelector('#task-status [data-status="completed"]')`)
	e.click("#delete")
	e.click("#confirm-ok")
	e.wait(`location.hash === "#/queues/reports"`)
	if _, err := e.st.Get(ctx, "report-3"); !errors.Is(err, norn.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}

	// A missing task says so.
	e.goHash("#/tasks/report-3")
	e.wait(`document.querySelector("#task-gone")`)

	// The unique key a task was submitted with is shown (as text, never markup).
	if _, err := e.st.Submit(ctx, norn.NewTask{ID: "keyed", Queue: "reports", UniqueKey: "report <b>42</b>"}); err != nil {
		t.Fatal(err)
	}
	e.goHash("#/tasks/keyed")
	e.wait(`document.querySelector("#unique-key code")`)
	if got := e.text("#unique-key"); got != "report <b>42</b>" {
		t.Errorf("unique key shown as %q", got)
	}
}

// TestTaskPageNewerFields: a task's unique key shows on its page, and a
// snooze has its own label in the history.
func TestTaskPageNewerFields(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.st.Submit(ctx, norn.NewTask{ID: "invoice", Queue: "bills", UniqueKey: "invoice-7", ExpireIn: norn.Duration(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	w, err := e.st.RegisterWorker(ctx, norn.WorkerInfo{Name: "w", Queues: []string{"bills"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.st.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"bills"}, N: 1, Timeout: norn.Duration(time.Hour)})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v", got, err)
	}
	if _, err := e.st.Snooze(ctx, norn.LeaseRef{TaskID: "invoice", Worker: w, Lease: got[0].Lease}, norn.Snooze{Delay: norn.Duration(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	e.open("#/tasks/invoice")
	e.wait(`(document.querySelector('#unique-key') || {}).textContent === "invoice-7"`)
	e.wait(`/Snoozed/.test((document.querySelector('li[data-type="TaskSnooze"]') || {}).textContent)`)
	if got := evalAs[bool](e, `!!document.querySelector('#concurrency-key')`); got {
		t.Error("a concurrency key row for a task without one")
	}
	if got := e.text("#expires-at"); !strings.Contains(got, "in ") && !strings.Contains(got, "from now") {
		t.Errorf("expires shown as %q, want a time ahead", got)
	}

	// A debounce replace has its own label too, not the raw type.
	if _, err := e.st.Submit(ctx, norn.NewTask{ID: "digest", Queue: "bills", UniqueKey: "digest-1", Delay: norn.Duration(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if res, err := e.st.Submit(ctx, norn.NewTask{Queue: "bills", UniqueKey: "digest-1", OnDuplicate: norn.DuplicateReplace}); err != nil || !res[0].Replaced {
		t.Fatalf("replace: %+v, %v", res, err)
	}
	e.goHash("#/tasks/digest")
	e.wait(`/Replaced by a later submit/.test((document.querySelector('li[data-type="TaskReplace"]') || {}).textContent)`)
}

func TestAuthRoles(t *testing.T) {
	e := newEnv(t, []server.Token{
		{Token: "admin-secret", Role: server.RoleAdmin},
		{Token: "client-secret", Role: server.RoleClient},
		{Token: "worker-secret", Role: server.RoleWorker},
	})
	seed(t, e.st)
	ctx := context.Background()
	signIn := func(tok string) {
		e.wait(`document.querySelector("#signin-dialog") && document.querySelector("#signin-dialog").open`)
		e.do(chromedp.SetValue(chromedp.CSS("#token"), tok))
		e.click("#signin-submit")
	}

	e.open("#/queues/emails")
	e.wait(`document.querySelector("#signin-dialog")`)
	e.shots("signin", `document.querySelector("#signin-dialog").open`)
	signIn("wrong-secret")
	e.wait(`document.querySelector("#signin-msg").textContent.includes("did not accept")`)
	signIn("worker-secret")
	e.wait(`document.querySelector("#signin-msg").textContent.includes("worker token")`)

	// A client token sees the queue but cannot pause it.
	signIn("client-secret")
	e.wait(`!document.querySelector("#signin-dialog") && document.querySelectorAll("#task-list tbody tr").length > 0`)
	e.wait(`!document.querySelector("#role-note").hidden && document.querySelector("#pause").disabled`)
	if evalAs[bool](e, `!!document.querySelector("#edit-defaults")`) {
		t.Error("client token is offered to edit queue defaults")
	}
	if evalAs[string](e, `sessionStorage.getItem("norn.token")`) != "client-secret" {
		t.Error("token not kept in sessionStorage")
	}
	e.wait(`document.querySelector("#live").dataset.state === "live"`)
	// Client actions work: cancel a task from its page.
	e.goHash("#/tasks/email-001")
	e.wait(`document.querySelector("#cancel")`)
	e.click("#cancel")
	e.wait(`document.querySelector('#task-status [data-status="cancelled"]')`)
	if q, _ := e.st.Queue(ctx, "emails"); q.Paused {
		t.Fatal("queue paused by a client token")
	}
	// A client token sees schedules but is offered no pause or trigger.
	if _, err := e.st.PutSchedule(ctx, norn.Schedule{Name: "nightly", Queue: "reports", Cron: "0 3 1 1 *"}); err != nil {
		t.Fatal(err)
	}
	e.goHash("#/schedules")
	e.wait(`document.querySelector('tr[data-schedule="nightly"]') && !document.querySelector("#schedules-role-note").hidden`)
	if evalAs[bool](e, `!!document.querySelector('tr[data-schedule="nightly"] button')`) {
		t.Error("client token is offered schedule buttons")
	}

	// A stored worker token is refused on load.
	e.eval(`sessionStorage.setItem("norn.token", "worker-secret")`)
	e.open("#/")
	e.wait(`document.querySelector("#refused")`)

	// An admin token may pause.
	e.click("#refused button")
	signIn("admin-secret")
	e.goHash("#/queues/emails")
	e.wait(`document.querySelector("#pause") && !document.querySelector("#pause").disabled && document.querySelector("#role-note").hidden`)
	e.click("#pause")
	e.wait(`!document.querySelector("#paused-badge").hidden`)
	if q, _ := e.st.Queue(ctx, "emails"); !q.Paused {
		t.Fatal("admin pause did not reach the store")
	}
}

func TestSchedulesPage(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	// Through the HTTP API, as an operator would create it; a yearly cron
	// keeps the cadence itself from firing during the test.
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, e.url+"/v1/schedules/nightly-report",
		strings.NewReader(`{"queue":"reports","spec":{"kind":"daily"},"cron":"0 3 1 1 *","timezone":"Europe/Berlin"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT schedule: %s", resp.Status)
	}

	e.open("#/")
	// The breadcrumb follows the brand; the Schedules link sits apart from
	// it (beside it, the two read as one crumb: "Schedules Overview").
	if !evalAs[bool](e, `document.querySelector(".brand").nextElementSibling.id === "crumbs"`) {
		t.Error("the breadcrumb does not follow the brand")
	}
	e.click("#nav-schedules")
	row := `tr[data-schedule="nightly-report"]`
	e.wait(fmt.Sprintf(`document.querySelector('%s')`, row))
	if got := e.text(row + ` td.cron`); got != "0 3 1 1 * Europe/Berlin" {
		t.Errorf("cron cell = %q", got)
	}
	if got := e.text(row + ` td.state`); got != "active" {
		t.Errorf("state = %q, want active", got)
	}
	if got := e.text(row + ` td.last-tasks`); got != "none yet" {
		t.Errorf("last tasks = %q, want none yet", got)
	}

	e.click(row + ` button.pause`)
	e.wait(fmt.Sprintf(`document.querySelector('%s td.state').textContent === "paused" && document.querySelector('%s button.pause').textContent === "Resume"`, row, row))
	if s, err := e.st.GetSchedule(ctx, "nightly-report"); err != nil || !s.Paused {
		t.Fatalf("after pause: %+v, %v", s, err)
	}

	e.click(row + ` button.trigger`)
	e.wait(fmt.Sprintf(`document.querySelector('%s td.last-tasks li a')`, row))
	page, err := e.st.List(ctx, norn.Query{Filter: norn.Filter{Labels: map[string]string{"norn.schedule": "nightly-report"}}, Limit: 10})
	if err != nil || len(page.Tasks) != 1 {
		t.Fatalf("triggered tasks: %v, %v", page.Tasks, err)
	}
	tasks := page.Tasks
	if got := e.text(row + ` td.last-tasks li a`); got != tasks[0].ID {
		t.Errorf("last task link = %q, want %s", got, tasks[0].ID)
	}
	e.shots("schedules", fmt.Sprintf(`document.querySelector('%s td.last-tasks li a')`, row))
	e.click(row + ` td.last-tasks li a`)
	e.wait(fmt.Sprintf(`location.hash === %q && document.querySelector("#task-status")`, "#/tasks/"+tasks[0].ID))
}
