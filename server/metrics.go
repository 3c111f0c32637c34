package server

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornq/norn/internal/buildinfo"

	"github.com/nornq/norn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// unknownQueue labels finish calls on tasks this server did not hand out
// (claimed through another node, or before a restart).
const unknownQueue = "(unknown)"

// otherQueue labels the activity of queues past Config.MetricsMaxQueues.
const otherQueue = "(other)"

// maxTracked bounds the claims remembered for end-to-end latency and the
// queue label of finish calls; beyond it new claims are not tracked.
const maxTracked = 1 << 16

// metrics are the Prometheus metrics of docs/metrics.md. Counters of
// submits, claims and finishes count what passes through this server's
// HTTP API; timeouts and retries are decided by the store's monitor, so
// they are counted from the store's event stream.
type metrics struct {
	authFailures prometheus.Counter
	refused      *prometheus.CounterVec
	reg          *prometheus.Registry

	submittedTotal, claimedTotal, completedTotal, failedTotal, abortedTotal *prometheus.CounterVec
	yieldedTotal, snoozedTotal, timedOutTotal, retriedTotal, redrivenTotal  *prometheus.CounterVec
	awaitedTotal                                                            *prometheus.CounterVec
	expiredTotal                                                            *prometheus.CounterVec
	claimLatency, endToEnd                                                  *prometheus.HistogramVec
	httpRequests                                                            *prometheus.CounterVec
	httpDuration                                                            *prometheus.HistogramVec
	inFlight                                                                atomic.Int64

	mu     sync.Mutex
	claims map[string]claimInfo // task id → what finish calls need

	// queues are the queues with series of their own (queueLabels).
	queues *queueLabels
	counts *countsCollector
}

// queueLabels bounds the queue label of every per-queue series: each queue
// takes a place when it is first seen, while places are left; the others
// are counted under queue="(other)". A queue's place and series go when it
// holds no tasks (prune, at a scrape), so a store whose queues come and go
// does not grow /metrics (and the server's memory) without end.
type queueLabels struct {
	mu  sync.Mutex
	max int
	set map[string]bool
}

func newQueueLabels(max int) *queueLabels {
	return &queueLabels{max: max, set: map[string]bool{}}
}

// label returns the label of queue q.
func (l *queueLabels) label(q string) string {
	if q == unknownQueue || q == otherQueue {
		return q
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.set[q] {
		return q
	}
	if len(l.set) < l.max {
		l.set[q] = true
		return q
	}
	return otherQueue
}

// prune frees the places of the queues that hold no tasks (present says
// which do) and returns them.
func (l *queueLabels) prune(present map[string]bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var gone []string
	for q := range l.set {
		if !present[q] {
			delete(l.set, q)
			gone = append(gone, q)
		}
	}
	return gone
}

// size is how many queues have places.
func (l *queueLabels) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.set)
}

type claimInfo struct {
	queue   string
	created time.Time
}

// latencyBuckets span 1 ms to ~4.7 h: claims are usually fast, end-to-end
// latency of delayed or retried tasks can be hours.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 4, 13)

func newMetrics(reg *prometheus.Registry, store norn.Store, maxQueues int, storeInterval time.Duration) (*metrics, error) {
	if maxQueues <= 0 {
		maxQueues = DefaultMetricsMaxQueues
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	bi := buildinfo.Read()
	build := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "norn", Name: "build_info",
		Help:        "Which build of norn this server runs: always 1, with the build in its labels.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "go_version": bi.GoVersion}})
	build.Set(1)
	if err := reg.Register(build); err != nil {
		return nil, err
	}
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norn", Name: name, Help: help}, []string{"queue"})
	}
	m := &metrics{
		reg:            reg,
		submittedTotal: counter("tasks_submitted_total", "Tasks created through this server (duplicates not counted)."),
		claimedTotal:   counter("tasks_claimed_total", "Tasks leased through this server."),
		completedTotal: counter("tasks_completed_total", "Successful complete calls through this server."),
		failedTotal:    counter("tasks_failed_total", "Successful fail calls through this server (the task is then retried or aborted)."),
		abortedTotal:   counter("tasks_aborted_total", "Successful abort calls through this server."),
		yieldedTotal:   counter("tasks_yielded_total", "Successful yield calls through this server."),
		snoozedTotal:   counter("tasks_snoozed_total", "Successful snooze calls through this server (the task waits, its attempt given back)."),
		awaitedTotal:   counter("tasks_awaited_total", "Successful await calls through this server (the task waits for the children it submitted, its attempt given back)."),
		timedOutTotal:  counter("tasks_timed_out_total", "Leases that expired (from the store's events)."),
		retriedTotal:   counter("tasks_retried_total", "Failures scheduled for a retry (from the store's events)."),
		expiredTotal:   counter("tasks_expired_total", "Tasks aborted because they reached their expires_at without running (from the store's events)."),
		redrivenTotal: counter("tasks_redriven_total",
			"Ended (aborted or cancelled) tasks a client ran again with retry, dependents included (from the store's events)."),
		claimLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "norn", Name: "claim_latency_seconds",
			Help: "Time from when a task could first run (run_at, or creation) to its claim.", Buckets: latencyBuckets}, []string{"queue"}),
		endToEnd: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "norn", Name: "end_to_end_latency_seconds",
			Help: "Time from a task's creation to its completion, for tasks claimed through this server.", Buckets: latencyBuckets}, []string{"queue"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norn", Name: "http_requests_total",
			Help: "HTTP requests by method, route pattern and status code."}, []string{"method", "route", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "norn", Name: "http_request_duration_seconds",
			Help: "HTTP request duration by method and route pattern (long polls and streams included).", Buckets: prometheus.DefBuckets},
			[]string{"method", "route"}),
		authFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "norn", Name: "auth_failures_total",
			Help: "Requests refused for a missing or unknown token."}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norn", Name: "requests_refused_total",
			Help: "Requests refused by the server's abuse limits, by the limit that refused them."}, []string{"reason"}),
		claims: map[string]claimInfo{},
		queues: newQueueLabels(maxQueues),
	}
	m.counts = &countsCollector{store: store, m: m, every: storeInterval}
	for _, r := range refusalReasons {
		m.refused.WithLabelValues(r) // every reason is exported from the start, at 0
	}
	for _, c := range []prometheus.Collector{m.submittedTotal, m.claimedTotal, m.completedTotal, m.failedTotal,
		m.abortedTotal, m.yieldedTotal, m.snoozedTotal, m.awaitedTotal, m.timedOutTotal, m.retriedTotal, m.redrivenTotal, m.expiredTotal,
		m.claimLatency, m.endToEnd, m.httpRequests, m.httpDuration, m.authFailures, m.refused, m.counts,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "norn", Name: "http_requests_in_flight",
			Help: "HTTP requests being served (long polls and streams included)."},
			func() float64 { return float64(m.inFlight.Load()) })} {
		if err := reg.Register(c); err != nil {
			return nil, norn.Invalid("Registry", "registering metrics: %v", err)
		}
	}
	return m, nil
}

// handler serves /metrics, computed at most once per interval: scrapes
// in between are answered with the bytes of the last answer (one per
// encoding the scrapers ask for). The store's figures are read before
// anything is gathered, so a queue dropped by that read has none of its
// series in the same answer.
func (m *metrics) handler() http.Handler {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	type answer struct {
		at     time.Time
		code   int
		header http.Header
		body   []byte
	}
	var mu sync.Mutex // one computation at a time; the others wait for it
	last := map[string]*answer{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Accept") + "\x00" + r.Header.Get("Accept-Encoding")
		mu.Lock()
		a := last[key]
		if a == nil || time.Since(a.at) >= m.counts.every {
			m.counts.refresh()
			rec := &answerRecorder{h: http.Header{}}
			h.ServeHTTP(rec, r)
			a = &answer{at: time.Now(), code: rec.code, header: rec.h, body: rec.body}
			if len(last) > 8 {
				clear(last)
			}
			last[key] = a
		}
		mu.Unlock()
		for k, v := range a.header {
			w.Header()[k] = v
		}
		w.WriteHeader(a.code)
		_, _ = w.Write(a.body)
	})
}

// answerRecorder keeps an answer to serve it again.
type answerRecorder struct {
	h    http.Header
	code int
	body []byte
}

func (r *answerRecorder) Header() http.Header { return r.h }
func (r *answerRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *answerRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.body = append(r.body, b...)
	return len(b), nil
}

func (m *metrics) submitted(queue string, n int) {
	m.submittedTotal.WithLabelValues(m.queues.label(queue)).Add(float64(n))
}

// perQueue are the vectors with a queue label, whose series a pruned queue
// loses.
func (m *metrics) perQueue() []interface{ DeleteLabelValues(...string) bool } {
	return []interface{ DeleteLabelValues(...string) bool }{m.submittedTotal, m.claimedTotal, m.completedTotal,
		m.failedTotal, m.abortedTotal, m.yieldedTotal, m.snoozedTotal, m.awaitedTotal, m.timedOutTotal, m.retriedTotal, m.redrivenTotal,
		m.expiredTotal, m.claimLatency, m.endToEnd}
}

// prune drops the series of the queues that hold no tasks.
func (m *metrics) prune(present map[string]bool) {
	for _, q := range m.queues.prune(present) {
		for _, v := range m.perQueue() {
			v.DeleteLabelValues(q)
		}
	}
}

// claimed counts claimed tasks, observes how long each waited and
// remembers it for the finish call.
func (m *metrics) claimed(tasks []*norn.Task, now time.Time) {
	if len(tasks) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range tasks {
		q := m.queues.label(t.Queue)
		m.claimedTotal.WithLabelValues(q).Inc()
		since := t.Created
		if t.RunAt.After(since) {
			since = t.RunAt
		}
		if d := now.Sub(since); d >= 0 {
			m.claimLatency.WithLabelValues(q).Observe(d.Seconds())
		}
		if _, ok := m.claims[t.ID]; ok || len(m.claims) < maxTracked {
			m.claims[t.ID] = claimInfo{queue: t.Queue, created: t.Created}
		}
	}
}

// finished counts a successful lease call that ends a lease.
func (m *metrics) finished(op norn.LeaseOpKind, id string, now time.Time) {
	if op == norn.OpHeartbeat {
		return
	}
	m.mu.Lock()
	ci, ok := m.claims[id]
	delete(m.claims, id)
	m.mu.Unlock()
	q := unknownQueue
	if ok {
		q = m.queues.label(ci.queue)
	}
	switch op {
	case norn.OpComplete:
		m.completedTotal.WithLabelValues(q).Inc()
		if ok {
			if d := now.Sub(ci.created); d >= 0 {
				m.endToEnd.WithLabelValues(q).Observe(d.Seconds())
			}
		}
	case norn.OpFail:
		m.failedTotal.WithLabelValues(q).Inc()
	case norn.OpAbort:
		m.abortedTotal.WithLabelValues(q).Inc()
	case norn.OpYield:
		m.yieldedTotal.WithLabelValues(q).Inc()
	case norn.OpSnooze:
		m.snoozedTotal.WithLabelValues(q).Inc()
	case opAwait:
		m.awaitedTotal.WithLabelValues(q).Inc()
	}
}

// opAwait is an await, counted with the lease operations that end an
// attempt (it is not a lease batch operation).
const opAwait norn.LeaseOpKind = "await"

// observeEvent counts monitor decisions and forgets leases that ended
// without a finish call.
func (m *metrics) observeEvent(e norn.Event) {
	switch e.Kind {
	case norn.EventKind(norn.TaskTimeout):
		m.timedOutTotal.WithLabelValues(m.queues.label(e.Queue)).Inc()
	case norn.EventKind(norn.TaskRetry):
		m.retriedTotal.WithLabelValues(m.queues.label(e.Queue)).Inc()
	case norn.EventKind(norn.TaskRedrive):
		m.redrivenTotal.WithLabelValues(m.queues.label(e.Queue)).Inc()
		return
	case norn.EventExpired:
		m.expiredTotal.WithLabelValues(m.queues.label(e.Queue)).Add(float64(e.Tasks()))
		return
	case norn.EventKind(norn.TaskCancel), norn.EventDeleted, norn.EventKind(norn.TaskAbort):
	default:
		return
	}
	if e.Kind == norn.EventKind(norn.TaskRetry) {
		return
	}
	m.mu.Lock()
	delete(m.claims, e.TaskID)
	m.mu.Unlock()
}

// followEvents feeds the store's events to observeEvent until ctx is done,
// resubscribing after a failure.
func (m *metrics) followEvents(ctx context.Context, store norn.Store, log *slog.Logger) {
	for ctx.Err() == nil {
		// Counts: observeEvent reads none of the counted kinds.
		stream, err := store.Subscribe(ctx, norn.EventFilter{Counts: true})
		if err == nil {
			for stream.Next() {
				m.observeEvent(stream.Item())
			}
			err = stream.Err()
			_ = stream.Close()
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn("metrics: event subscription failed; timeouts and retries are not counted until it recovers", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// httpInFlight returns the number of requests being served.
func (m *metrics) httpInFlight() int64 { return m.inFlight.Load() }

// instrument records request count and duration under the route pattern
// (never the raw path, which would make one series per task id).
func (m *metrics) instrument(pattern string, h http.Handler) http.Handler {
	method, route, ok := strings.Cut(pattern, " ")
	if !ok {
		method, route = "", pattern
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		m.inFlight.Add(1)
		defer m.inFlight.Add(-1)
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		meth := method
		if meth == "" {
			meth = r.Method
			if len(meth) > 16 {
				meth = "other"
			}
		}
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		m.httpRequests.WithLabelValues(meth, route, strconv.Itoa(code)).Inc()
		m.httpDuration.WithLabelValues(meth, route).Observe(time.Since(start).Seconds())
	})
}

// statusWriter remembers the status code. It unwraps for
// http.ResponseController, so streaming handlers can still flush.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets code that type-asserts http.Flusher flush through the wrapper.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap exposes the underlying writer to http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countsCollector asks the store for per queue×status counts at scrape
// time, at most once per interval (a scrape in between shows the last
// figures), so the gauges are exact as of that read, cost nothing between
// scrapes, and polling /metrics in a loop cannot load the store. Queues
// past the label cap are summed under queue="(other)".
type countsCollector struct {
	store norn.Store
	m     *metrics
	every time.Duration

	mu   sync.Mutex // one read at a time; the others wait for it
	at   time.Time
	last []prometheus.Metric
}

var (
	tasksDesc = prometheus.NewDesc("norn_tasks", "Tasks in the store by queue and status.",
		[]string{"queue", "status"}, nil)
	workersDesc = prometheus.NewDesc("norn_workers", "Registered workers.", nil, nil)
	activeDesc  = prometheus.NewDesc("norn_workers_active", "Workers seen within the last minute.", nil, nil)
	storeUpDesc = prometheus.NewDesc("norn_store_up", "1 if the store answered the last scrape, else 0.", nil, nil)
	heldDesc    = prometheus.NewDesc("norn_flow_held_back_total",
		"Tasks a flow limit kept from claims of this server's store: ready, asked for, not handed out, by the limit that stopped them.",
		[]string{"queue", "reason"}, nil)
	flowRunningDesc = prometheus.NewDesc("norn_flow_running", "Running tasks of each queue with a running or rate limit.",
		[]string{"queue"}, nil)
	claimPathDesc = prometheus.NewDesc("norn_store_claims_total",
		"Claims of one queue served by each claim path of the store on this node (PostgreSQL: plain, shared, rated, keyed, exclusive).",
		[]string{"path"}, nil)
	queuesDesc = prometheus.NewDesc("norn_metrics_queues",
		"Queues with series of their own in /metrics; past norn_metrics_queues_max, activity is counted under queue=\"(other)\".", nil, nil)
	queuesMaxDesc = prometheus.NewDesc("norn_metrics_queues_max", "The most queues with series of their own (Config.MetricsMaxQueues).", nil, nil)
)

func (c *countsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksDesc
	ch <- workersDesc
	ch <- activeDesc
	ch <- storeUpDesc
	ch <- heldDesc
	ch <- flowRunningDesc
	ch <- claimPathDesc
	ch <- queuesDesc
	ch <- queuesMaxDesc
}

// refresh reads the store's figures unless the last read is recent.
func (c *countsCollector) refresh() []prometheus.Metric {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || time.Since(c.at) >= c.every {
		c.last, c.at = c.read(), time.Now()
	}
	return c.last
}

func (c *countsCollector) Collect(ch chan<- prometheus.Metric) {
	last := c.refresh()
	for _, m := range last {
		ch <- m
	}
	ch <- prometheus.MustNewConstMetric(queuesDesc, prometheus.GaugeValue, float64(c.m.queues.size()))
	ch <- prometheus.MustNewConstMetric(queuesMaxDesc, prometheus.GaugeValue, float64(c.m.queues.max))
}

// read reads the store's figures, and drops the series of queues that
// hold no tasks any more.
func (c *countsCollector) read() []prometheus.Metric {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.store.Stats(ctx)
	if err != nil {
		return []prometheus.Metric{prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 0)}
	}
	out := []prometheus.Metric{prometheus.MustNewConstMetric(storeUpDesc, prometheus.GaugeValue, 1)}
	present := make(map[string]bool)
	type qs struct{ queue, status string }
	sums := map[qs]int64{}
	var order []qs
	for _, g := range st.Counts {
		present[g.Queue] = true
	}
	c.m.prune(present)
	for _, g := range st.Counts {
		k := qs{c.m.queues.label(g.Queue), string(g.Status)}
		if _, ok := sums[k]; !ok {
			order = append(order, k)
		}
		sums[k] += g.Count
	}
	for _, k := range order {
		out = append(out, prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(sums[k]), k.queue, k.status))
	}
	out = append(out, prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(st.Workers)),
		prometheus.MustNewConstMetric(activeDesc, prometheus.GaugeValue, float64(st.ActiveWorkers)))
	if cp, ok := c.store.(norn.ClaimPathReporter); ok {
		for _, pc := range cp.ClaimPaths() {
			out = append(out, prometheus.MustNewConstMetric(claimPathDesc, prometheus.CounterValue, float64(pc.Claims), pc.Path))
		}
	}
	fr, ok := c.store.(norn.FlowReporter)
	if !ok {
		return out
	}
	flow, err := fr.FlowStats(ctx)
	if err != nil {
		return out // norn_store_up already said the store answered; the flow figures are just absent
	}
	running := map[string]int64{}
	held := map[[2]string]int64{}
	seen := map[string]bool{}
	var queues []string
	for _, f := range flow {
		q := c.m.queues.label(f.Queue)
		if !seen[q] {
			seen[q] = true
			queues = append(queues, q)
		}
		if f.Limited {
			running[q] += int64(f.Running)
		}
		for _, r := range norn.HoldReasons {
			held[[2]string{q, string(r)}] += int64(f.Held.Of(r))
		}
	}
	for _, q := range queues {
		if n, ok := running[q]; ok {
			out = append(out, prometheus.MustNewConstMetric(flowRunningDesc, prometheus.GaugeValue, float64(n), q))
		}
		for _, r := range norn.HoldReasons {
			out = append(out, prometheus.MustNewConstMetric(heldDesc, prometheus.CounterValue, float64(held[[2]string{q, string(r)}]), q, string(r)))
		}
	}
	return out
}
