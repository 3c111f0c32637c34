// Package bench implements the workloads of `norn bench`. Every workload
// drives a norn.Store, so the same code measures the embedded store
// in-process, the Postgres store, and either of them through a server (the
// HTTP client implements norn.Store too).
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/proccpu"
)

// Config parameterises the workloads. Zero fields take the documented defaults.
type Config struct {
	// Tasks is how many tasks a workload submits or works (default 100,000;
	// latency: 2,000; delay: Rate × 10 s).
	Tasks int
	// Workers is the number of concurrent submitters and claimers (default
	// 2×GOMAXPROCS for in-process stores; the work workload's claimers:
	// GOMAXPROCS; 64 over HTTP is a good choice).
	Workers int
	// Batch is the submit batch size; 0 runs submit at 1, 100 and 1000.
	Batch int
	// ClaimBatch is how many tasks a worker claims at once (default 100;
	// the work workload: RiverSlots ÷ Workers, at least 100 and at most
	// norn.MaxClaim, so that as many tasks are in flight as in River's own
	// bench).
	ClaimBatch int
	// Rate is the submission rate of the delay workload in tasks/s (default
	// 5,000; the kafka workload's default is 1,000 msg/s).
	Rate float64
	// KafkaBrokers are the brokers of the kafka workload (default: an
	// in-process Kafka).
	KafkaBrokers []string
	// KafkaNodes is how many bridge nodes the kafka workload runs (default 1).
	KafkaNodes int
	// KafkaTimingAdvance forces the bridge's timing advance to this value
	// (default 0: the bridge's adaptive advance).
	KafkaTimingAdvance time.Duration
	// Delay is how far in the future delayed tasks are scheduled (default 1s).
	Delay time.Duration
	// SpecBytes is the size of each task's spec (default 200).
	SpecBytes int
	// Queued lists the backlog sizes of the scale workload (default 10,000 and 1,000,000).
	Queued []int
	// Queue is the queue the workloads use; each run appends a unique suffix
	// so runs never see each other's tasks (default "bench").
	Queue string
	// Settle is how long the work and scale workloads wait between queueing
	// their backlog and burning it down, so background work the queueing
	// caused (an LSM store's flushes and compactions) can finish first
	// (default 0: measure right away, as a busy system would).
	Settle time.Duration
	// KeepTasks skips deleting each run's tasks afterwards (default false:
	// delete them, so a persistent store does not grow with every run). Set
	// it when the store is thrown away after the run: deleting a million
	// tasks takes seconds and leaves compaction work behind that would slow
	// down whatever is measured next.
	KeepTasks bool
	// ServerPid is the process id of the server when benchmarking one that
	// runs in another process (0, the default, means none): the memory
	// workload then reports its resident memory instead of this process's,
	// and the CPU figures add its CPU time to ours (Linux only).
	ServerPid int
	// Backlog is the fairness workload's backlog of one key (default
	// 1,000,000).
	Backlog int
	// Window is how long the fairness workload measures (default 10s).
	Window time.Duration
	// Limits makes the work workload configure flow limits that cannot
	// bind: max_running and key_limit far above the workers' claims, with
	// the tasks spread over Keys concurrency keys. It measures the cost of
	// the limited claim path against the plain one.
	Limits bool
	// KeyLimit, if positive, makes the work workload set key_limit to it
	// (and max_running far above the claims), with the tasks spread over
	// Keys concurrency keys: a limit small per key that rarely binds, the
	// Postgres store's keyed claim path. It replaces Limits' key_limit.
	KeyLimit int
	// Keys is how many concurrency keys Limits and KeyLimit spread the
	// work workload's tasks over, in turn (task i has key i mod Keys), so
	// that every claim window holds min(Keys, window) distinct keys.
	// Default 1,000.
	Keys int
	// RateLimit makes the work workload give the queue a rate limit that
	// cannot bind (norn.MaxRatePerSecond, burst norn.MaxRateBurst): it
	// measures the cost of the rate-limited claim path. It combines with
	// Limits.
	RateLimit bool
	// Progress, if set, is called as work advances (done of total). It may
	// be called from several goroutines at once.
	Progress func(phase string, done, total int64)
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 2 * runtime.GOMAXPROCS(0)
	}
	if c.ClaimBatch <= 0 {
		c.ClaimBatch = 100
	}
	if c.Rate <= 0 {
		c.Rate = 5000
	}
	if c.Delay <= 0 {
		c.Delay = time.Second
	}
	if c.SpecBytes <= 0 {
		c.SpecBytes = 200
	}
	if c.Queue == "" {
		c.Queue = "bench"
	}
	if len(c.Queued) == 0 {
		c.Queued = []int{10_000, 1_000_000}
	}
	if c.Keys <= 0 {
		c.Keys = 1000
	}
}

// Result is one measured figure. JSON field names are stable (scripts read them).
type Result struct {
	Workload   string  `json:"workload"`
	Store      string  `json:"store"`
	Durability string  `json:"durability,omitempty"`
	Transport  string  `json:"transport"`
	NProc      int     `json:"nproc"`
	Tasks      int     `json:"tasks"`
	Workers    int     `json:"workers,omitempty"`
	Batch      int     `json:"batch,omitempty"`
	Seconds    float64 `json:"seconds"`
	TasksPerS  float64 `json:"tasks_per_sec"`
	P50ms      float64 `json:"p50_ms,omitempty"`
	P99ms      float64 `json:"p99_ms,omitempty"`
	P999ms     float64 `json:"p999_ms,omitempty"`
	Maxms      float64 `json:"max_ms,omitempty"`
	// The kafka workload's early side: the share of messages received
	// before their deadline and more than 5 ms before it (percent), how
	// early the earliest 0.1% begin, and the earliest message (ms). The
	// P* and Max figures above are the signed lateness, negative = early.
	EarlyPct        float64 `json:"early_pct,omitempty"`
	EarlyOver5msPct float64 `json:"early_over_5ms_pct,omitempty"`
	EarlyP999ms     float64 `json:"early_p999_ms,omitempty"`
	MaxEarlyms      float64 `json:"max_early_ms,omitempty"`
	// Rate is the submission rate the delay workload achieved, in tasks/s:
	// when it is well below the configured rate, the store (or the network)
	// could not take the offered load and the lateness figures say so.
	Rate float64 `json:"rate,omitempty"`
	// Queued is the backlog size for scale runs.
	Queued int `json:"queued,omitempty"`
	// Ratio is throughput at the largest backlog ÷ throughput at the smallest (scale).
	Ratio float64 `json:"ratio,omitempty"`
	// RSSMiB is the resident memory of this process after the workload (memory).
	RSSMiB float64 `json:"rss_mib,omitempty"`
	// CPUSeconds is the user+system CPU time this process (plus the server
	// process, with Config.ServerPid) spent in the timed part of the
	// workload, including the store's background work. Unlike Seconds it hardly depends on
	// what else the machine runs, so TasksPerCPUSec is the figure to compare
	// on a shared machine. Zero where it cannot be measured.
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`
	// TasksPerCPUSec is Tasks ÷ CPUSeconds.
	TasksPerCPUSec float64 `json:"tasks_per_cpu_sec,omitempty"`
	// Runs is how many runs the figures are the median of (1 when not repeated).
	Runs int `json:"runs"`
	// Unclaimed counts the fairness workload's small-key tasks still not
	// claimed when the window ended; their latency counts as the time they
	// had waited by then (a lower bound).
	Unclaimed int `json:"unclaimed,omitempty"`
}

// Env describes where the workload runs; it is copied into every Result.
type Env struct {
	Store      string
	Durability string
	Transport  string
}

func (e Env) result(workload string) Result {
	return Result{Workload: workload, Store: e.Store, Durability: e.Durability, Transport: e.Transport, NProc: runtime.NumCPU(), Runs: 1}
}

// timing measures the wall and CPU time of a workload's timed part.
type timing struct {
	wall      time.Time
	cpu       time.Duration
	serverPid int
}

func startTiming(cfg Config) timing {
	tm := timing{wall: time.Now(), serverPid: cfg.ServerPid}
	tm.cpu = tm.cpuNow()
	return tm
}

// cpuNow is our CPU time plus the server's, when it runs apart.
func (tm timing) cpuNow() time.Duration {
	c := proccpu.Used()
	if tm.serverPid > 0 && c > 0 {
		sc, err := ProcessCPU(tm.serverPid)
		if err != nil {
			return 0
		}
		c += sc
	}
	return c
}

// finish fills Tasks, Seconds, TasksPerS and the CPU figures of r. end is
// when the timed part ended (the zero time means now).
func (tm timing) finish(r *Result, tasks int, end time.Time) {
	if end.IsZero() {
		end = time.Now()
	}
	el := end.Sub(tm.wall).Seconds()
	r.Tasks, r.Seconds, r.TasksPerS = tasks, el, float64(tasks)/el
	if c := (tm.cpuNow() - tm.cpu).Seconds(); c > 0 && tm.cpu > 0 {
		r.CPUSeconds, r.TasksPerCPUSec = c, float64(tasks)/c
	}
}

var runSeq atomic.Int64

// queueName returns a fresh queue for one run, so repeated runs against a
// persistent store never mix their tasks.
func queueName(base string) string {
	return fmt.Sprintf("%s-%d-%d", base, time.Now().UnixNano()%1_000_000_000, runSeq.Add(1))
}

func spec(n int) json.RawMessage {
	if n < 8 {
		n = 8
	}
	// {"p":"xxxx"} padded to n bytes.
	return json.RawMessage(`{"p":"` + strings.Repeat("x", n-8) + `"}`)
}

// submitAll submits n tasks in batches of b, calling progress; it is the
// untimed setup of the work workloads and the timed body of submit.
func submitAll(ctx context.Context, st norn.Store, queue string, n, b int, body json.RawMessage, workers int, progress func(int64)) error {
	return submitTasks(ctx, st, n, b, workers, func(int) norn.NewTask { return norn.NewTask{Queue: queue, Spec: body} }, progress)
}

// submitTasks submits n tasks made by mk (given each task's number) in
// batches of b with workers concurrent submitters.
func submitTasks(ctx context.Context, st norn.Store, n, b, workers int, mk func(i int) norn.NewTask, progress func(int64)) error {
	if b <= 0 {
		b = 1000
	}
	var next, done atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	if workers <= 0 {
		workers = 1
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]norn.NewTask, 0, b)
			for {
				start := int(next.Add(int64(b))) - b
				if start >= n || ctx.Err() != nil {
					return
				}
				end := min(start+b, n)
				batch = batch[:0]
				for i := start; i < end; i++ {
					batch = append(batch, mk(i))
				}
				if _, err := st.Submit(ctx, batch...); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				d := done.Add(int64(end - start))
				if progress != nil {
					progress(d)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("submit: %w", firstErr)
	}
	return ctx.Err()
}

// Submit measures submission throughput at each batch size.
func Submit(ctx context.Context, st norn.Store, env Env, cfg Config) ([]Result, error) {
	cfg.defaults()
	n := cfg.Tasks
	if n <= 0 {
		n = 100_000
	}
	sizes := []int{1, 100, 1000}
	if cfg.Batch > 0 {
		sizes = []int{cfg.Batch}
	}
	var out []Result
	for _, b := range sizes {
		count := n
		if b == 1 && count > 20_000 && cfg.Batch == 0 {
			// Single submits are sync-bound; a smaller sample gives the same rate.
			count = 20_000
		}
		q := queueName(cfg.Queue)
		body := spec(cfg.SpecBytes)
		phase := fmt.Sprintf("submit batch %d", b)
		tm := startTiming(cfg)
		err := submitAll(ctx, st, q, count, b, body, cfg.Workers, func(d int64) { report(cfg, phase, d, int64(count)) })
		r := env.result("submit")
		tm.finish(&r, count, time.Time{})
		if err != nil {
			return out, err
		}
		r.Batch, r.Workers = b, cfg.Workers
		out = append(out, r)
		cleanup(ctx, cfg, st, q)
	}
	return out, nil
}

func report(cfg Config, phase string, done, total int64) {
	if cfg.Progress != nil {
		cfg.Progress(phase, done, total)
	}
}

// cleanup removes a run's tasks so a persistent store does not grow with
// every benchmark run (unless cfg.KeepTasks), and on a store that can, has
// the space they took reclaimed at once: otherwise the next run inserts
// into a table that still holds this one's dead rows and shares the
// machine with autovacuum when it comes (on Postgres, three rounds of
// submit and work in a row grew the task table to 1.3 GB and a later
// round's submit ran up to 37% slower than the first; a
// measurement of the harness). River's bench truncates its table
// before each run for the same reason. Errors are ignored: the figures are
// already taken.
func cleanup(ctx context.Context, cfg Config, st norn.Store, queue string) {
	if cfg.KeepTasks {
		return
	}
	report(cfg, "deleting the run's tasks", 0, 0)
	_, _ = st.DeleteMatching(ctx, norn.Filter{Queues: []string{queue}})
	if v, ok := st.(interface{ Vacuum(context.Context) error }); ok {
		report(cfg, "reclaiming their space", 0, 0)
		_ = v.Vacuum(ctx)
	}
}

// Work pre-submits cfg.Tasks no-op tasks (untimed), then measures how fast
// cfg.Workers concurrent workers burn them down: claim ClaimBatch, complete
// them all in one LeaseBatch call. This is the River-comparable figure.
func Work(ctx context.Context, st norn.Store, env Env, cfg Config) (Result, error) {
	if cfg.Workers <= 0 {
		// One claimer per core, each claiming RiverSlots ÷ GOMAXPROCS:
		// River's bench fetches with one producer, and on two cores four
		// claimers of 500 ran 20–25% slower on Postgres than two of 1,000
		// with the same tasks in flight (twice the claim statements and
		// commits competing for the cores; see docs/scaling.md).
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.ClaimBatch <= 0 {
		cfg.defaults()
		cfg.ClaimBatch = min(norn.MaxClaim, max(100, RiverSlots/cfg.Workers))
	}
	cfg.defaults()
	n := cfg.Tasks
	if n <= 0 {
		n = 100_000
	}
	q := queueName(cfg.Queue)
	defer cleanup(ctx, cfg, st, q)
	body := spec(cfg.SpecBytes)
	mk := func(int) norn.NewTask { return norn.NewTask{Queue: q, Spec: body} }
	workload := "work"
	var u norn.QueueUpdate
	if cfg.Limits || cfg.KeyLimit > 0 {
		// Limits that cannot bind: the claims in flight never reach them.
		far := 1 << 30
		u.MaxRunning, u.KeyLimit = &far, &far
		mk = func(i int) norn.NewTask {
			return norn.NewTask{Queue: q, Spec: body, ConcurrencyKey: "k" + strconv.Itoa(i%cfg.Keys)}
		}
		if cfg.KeyLimit > 0 {
			kl := cfg.KeyLimit
			u.KeyLimit = &kl
			workload += "-keylimit" + strconv.Itoa(kl)
		} else {
			workload += "-limits"
		}
		if cfg.Keys != 1000 {
			workload += "-keys" + strconv.Itoa(cfg.Keys)
		}
	}
	if cfg.RateLimit {
		// A million tokens a second, a million in the bucket: more than
		// any run claims.
		u.RateLimit = &norn.RateLimit{PerSecond: norn.MaxRatePerSecond, Burst: norn.MaxRateBurst}
		workload += "-rate"
	}
	if cfg.Limits || cfg.KeyLimit > 0 || cfg.RateLimit {
		if _, err := st.UpdateQueue(ctx, q, u); err != nil {
			return Result{}, err
		}
	}
	if err := submitTasks(ctx, st, n, 1000, cfg.Workers, mk, func(d int64) { report(cfg, "work: submitting", d, int64(n)) }); err != nil {
		return Result{}, err
	}
	if err := settle(ctx, cfg.Settle); err != nil {
		return Result{}, err
	}
	r := env.result(workload)
	if err := burnDown(ctx, st, q, n, cfg, &r); err != nil {
		return Result{}, err
	}
	r.Workers, r.Batch = cfg.Workers, cfg.ClaimBatch
	return r, nil
}

// RiverSlots is the number of worker slots of River's bench (`river bench`
// runs one client with MaxWorkers 2,000 on the default queue): that many
// jobs are in flight at once, fetched about 390 per claim statement. The
// work workload keeps as many tasks in flight by default (Workers ×
// ClaimBatch), on every store, so that its figures and River's compare
// the same concurrency. (Over HTTP, with its 32 workers, that is claims of
// 100, the floor.)
const RiverSlots = 2000

// settle waits d (or until ctx is done).
func settle(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ClaimRound is one round of a benchmark worker: it claims up to batch
// tasks of queue (a long poll of 50 ms), shows them to seen (nil: nobody),
// and completes them all with one LeaseBatch. It returns how many it
// completed; an error names the step that failed.
func ClaimRound(ctx context.Context, st norn.Store, worker, queue string, batch int, seen func([]*norn.Task)) (int, error) {
	return claimRoundWith(ctx, st, norn.ClaimRequest{Worker: worker, Queues: []string{queue}, N: batch,
		Wait: norn.Duration(50 * time.Millisecond)}, seen)
}

// claimRoundWith is ClaimRound with the claim req.
func claimRoundWith(ctx context.Context, st norn.Store, req norn.ClaimRequest, seen func([]*norn.Task)) (int, error) {
	worker := req.Worker
	tasks, err := st.Claim(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("claim: %w", err)
	}
	if len(tasks) == 0 {
		return 0, nil
	}
	if seen != nil {
		seen(tasks)
	}
	ops := make([]norn.LeaseOp, len(tasks))
	for i, t := range tasks {
		ops[i] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: t.ID, Worker: worker, Lease: t.Lease}}
	}
	res, err := st.LeaseBatch(ctx, ops)
	if err != nil {
		return 0, fmt.Errorf("complete: %w", err)
	}
	for _, r := range res {
		if r.Err != nil {
			return 0, fmt.Errorf("complete: %w", r.Err)
		}
	}
	return len(tasks), nil
}

// burnDown claims and completes n tasks of queue with cfg.Workers workers.
// The clock stops when the n-th completion is acknowledged, not when the
// last worker's (empty) long poll returns, so short runs are not inflated.
func burnDown(ctx context.Context, st norn.Store, q string, n int, cfg Config, r *Result) error {
	return burnDownWith(ctx, st, q, n, cfg, r, norn.ClaimRequest{N: cfg.ClaimBatch, Wait: norn.Duration(50 * time.Millisecond)})
}

// burnDownWith is burnDown with each claim made as req (its worker and
// queue filled in).
func burnDownWith(ctx context.Context, st norn.Store, q string, n int, cfg Config, r *Result, req norn.ClaimRequest) error {
	var done atomic.Int64
	var firstErr error
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		once.Do(func() { firstErr = err; cancel() })
	}
	var endOnce sync.Once
	var end time.Time
	var wg sync.WaitGroup
	tm := startTiming(cfg)
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			req := req
			req.Worker, req.Queues = "bench-"+strconv.Itoa(w), []string{q}
			for done.Load() < int64(n) && ctx.Err() == nil {
				k, err := claimRoundWith(ctx, st, req, nil)
				if err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					return
				}
				if k == 0 {
					continue
				}
				d := done.Add(int64(k))
				if d >= int64(n) {
					endOnce.Do(func() { end = time.Now() })
				}
				report(cfg, "work", d, int64(n))
			}
		}(w)
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tm.finish(r, n, end)
	return nil
}

// Latency measures submit → claim with a waiting long-poll claimer on an
// idle system: one task at a time, so queueing never inflates the figure.
func Latency(ctx context.Context, st norn.Store, env Env, cfg Config) (Result, error) {
	cfg.defaults()
	n := cfg.Tasks
	if n <= 0 {
		n = 2000
	}
	q := queueName(cfg.Queue)
	defer cleanup(ctx, cfg, st, q)
	type claimed struct {
		at   time.Time
		task *norn.Task
		err  error
	}
	deliveries := func(ts []*norn.Task, at time.Time, err error) []claimed {
		if err != nil {
			return []claimed{{err: err}}
		}
		out := make([]claimed, len(ts))
		for i, t := range ts {
			out[i] = claimed{at: at, task: t}
		}
		return out
	}
	ch := make(chan claimed, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			ts, err := st.Claim(ctx, norn.ClaimRequest{Worker: "bench-latency", Queues: []string{q}, N: 1, Wait: norn.Duration(30 * time.Second)})
			at := time.Now()
			if err != nil {
				ts = nil
			}
			for _, c := range deliveries(ts, at, err) {
				select {
				case ch <- c:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	lat := make([]time.Duration, 0, n)
	body := spec(cfg.SpecBytes)
	tm := startTiming(cfg)
	for i := 0; i < n; i++ {
		// Let the claimer get back into its long poll so we measure wake-up,
		// not a claim that happened to be in flight.
		t0 := time.Now()
		if _, err := st.Submit(ctx, norn.NewTask{Queue: q, Spec: body}); err != nil {
			return Result{}, fmt.Errorf("submit: %w", err)
		}
		var c claimed
		select {
		case c = <-ch:
		case <-time.After(30 * time.Second):
			return Result{}, fmt.Errorf("no claim within 30s of submit %d", i)
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
		if c.err != nil {
			return Result{}, fmt.Errorf("claim: %w", c.err)
		}
		lat = append(lat, c.at.Sub(t0))
		if err := st.Complete(ctx, norn.LeaseRef{TaskID: c.task.ID, Worker: "bench-latency", Lease: c.task.Lease}, nil); err != nil {
			return Result{}, fmt.Errorf("complete: %w", err)
		}
		report(cfg, "latency", int64(i+1), int64(n))
	}
	r := env.result("latency")
	tm.finish(&r, n, time.Time{})
	setPercentiles(&r, lat)
	return r, nil
}

// Delay submits tasks at cfg.Rate with run_at = now + cfg.Delay while
// claimers long-poll, and measures firing lateness = claim time − run_at.
func Delay(ctx context.Context, st norn.Store, env Env, cfg Config) (Result, error) {
	cfg.defaults()
	n := cfg.Tasks
	if n <= 0 {
		n = int(cfg.Rate * 10)
	}
	q := queueName(cfg.Queue)
	defer cleanup(ctx, cfg, st, q)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	d := &delayRun{st: st, cfg: cfg, q: q, n: n, lat: make([]time.Duration, 0, n),
		errc: make(chan error, cfg.Workers+max(4, cfg.Workers)+1)} // claimers + submitters, so no send blocks
	for w := 0; w < cfg.Workers; w++ {
		d.claimers.Add(1)
		go d.claim(ctx, w)
	}
	tm := startTiming(cfg)
	start := tm.wall
	if err := d.submit(ctx, start); err != nil {
		return Result{}, err
	}
	r := env.result("delay")
	r.Rate = float64(n) / time.Since(start).Seconds()
	waitDone := make(chan struct{})
	go func() { d.claimers.Wait(); close(waitDone) }()
	select {
	case <-waitDone:
	case err := <-d.errc:
		return Result{}, err
	case <-time.After(cfg.Delay + 60*time.Second):
		return Result{}, fmt.Errorf("only %d of %d delayed tasks fired within %s", d.got.Load(), n, cfg.Delay+60*time.Second)
	}
	tm.finish(&r, n, time.Time{})
	r.Workers = cfg.Workers
	setPercentiles(&r, d.lat)
	return r, nil
}

// delayRun is one run of Delay: its claimers, what they measured, and the
// first error of a claimer or submitter.
type delayRun struct {
	st       norn.Store
	cfg      Config
	q        string
	n        int
	claimers sync.WaitGroup
	mu       sync.Mutex
	lat      []time.Duration // claim time − run_at, per task
	got      atomic.Int64
	errc     chan error
}

// claim is claimer w: it claims and completes until every task fired.
func (d *delayRun) claim(ctx context.Context, w int) {
	defer d.claimers.Done()
	worker := "bench-delay-" + strconv.Itoa(w)
	for d.got.Load() < int64(d.n) && ctx.Err() == nil {
		ts, err := d.st.Claim(ctx, norn.ClaimRequest{Worker: worker, Queues: []string{d.q}, N: d.cfg.ClaimBatch, Wait: norn.Duration(time.Second)})
		at := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				d.errc <- fmt.Errorf("claim: %w", err)
			}
			return
		}
		if len(ts) == 0 {
			continue
		}
		ops := make([]norn.LeaseOp, 0, len(ts))
		d.mu.Lock()
		for _, t := range ts {
			d.lat = append(d.lat, at.Sub(t.RunAt))
			ops = append(ops, norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: t.ID, Worker: worker, Lease: t.Lease}})
		}
		d.mu.Unlock()
		if _, err := d.st.LeaseBatch(ctx, ops); err != nil && ctx.Err() == nil {
			d.errc <- fmt.Errorf("complete: %w", err)
			return
		}
		report(d.cfg, "delay", d.got.Add(int64(len(ts))), int64(d.n))
	}
}

// submit offers the tasks at cfg.Rate from start, in small time slices so
// the offered rate is smooth. Several submitters share the slices: one
// synced submit per 10 ms slice would cap the rate at the store's (or the
// network's) round-trip time.
func (d *delayRun) submit(ctx context.Context, start time.Time) error {
	body := spec(d.cfg.SpecBytes)
	batches := make(chan []norn.NewTask, 64)
	var subWG sync.WaitGroup
	for range max(4, d.cfg.Workers) {
		subWG.Add(1)
		go func() {
			defer subWG.Done()
			for batch := range batches {
				if _, err := d.st.Submit(ctx, batch...); err != nil {
					if ctx.Err() == nil {
						d.errc <- fmt.Errorf("submit: %w", err)
					}
					return
				}
			}
		}()
	}
	const slice = 10 * time.Millisecond
	const maxChunk = 1000
	perSlice := d.cfg.Rate * slice.Seconds()
	n, sent := d.n, 0
	var submitErr error
pace:
	for sent < n && ctx.Err() == nil {
		due := int(math.Min(float64(n), perSlice*float64(time.Since(start)/slice+1)))
		runAt := time.Now().Add(d.cfg.Delay)
		for sent < due {
			end := min(due, sent+maxChunk)
			batch := make([]norn.NewTask, 0, end-sent)
			for i := sent; i < end; i++ {
				batch = append(batch, norn.NewTask{Queue: d.q, Spec: body, RunAt: runAt})
			}
			select {
			case batches <- batch:
			case submitErr = <-d.errc:
				break pace
			}
			sent = end
		}
		select {
		case submitErr = <-d.errc:
			break pace
		case <-time.After(time.Until(start.Add(slice * (time.Since(start)/slice + 1)))):
		}
	}
	close(batches)
	subWG.Wait()
	return submitErr
}

// Scale measures work throughput with different backlogs: the same number
// of tasks (cfg.Tasks, at most and by default the smallest backlog) is burnt
// down from a queue that holds Queued[i] tasks, so claim cost growing with
// queue length shows as a falling ratio.
func Scale(ctx context.Context, st norn.Store, env Env, cfg Config) ([]Result, error) {
	cfg.defaults()
	n := slices.Min(cfg.Queued)
	if cfg.Tasks > 0 {
		n = min(n, cfg.Tasks)
	}
	var out []Result
	for _, queued := range cfg.Queued {
		count := n
		q := queueName(cfg.Queue)
		if err := submitAll(ctx, st, q, queued, 1000, spec(cfg.SpecBytes), cfg.Workers,
			func(d int64) { report(cfg, fmt.Sprintf("scale: queueing %d", queued), d, int64(queued)) }); err != nil {
			return out, err
		}
		if err := settle(ctx, cfg.Settle); err != nil {
			return out, err
		}
		r := env.result("scale")
		err := burnDown(ctx, st, q, count, cfg, &r)
		cleanup(ctx, cfg, st, q)
		if err != nil {
			return out, err
		}
		r.Workers, r.Batch, r.Queued = cfg.Workers, cfg.ClaimBatch, queued
		out = append(out, r)
	}
	if len(out) > 1 {
		out[len(out)-1].Ratio = out[len(out)-1].TasksPerS / out[0].TasksPerS
	}
	return out, nil
}

// Memory queues cfg.Tasks ready tasks (default 1M, 200-byte specs) and
// reports this process's resident memory: meaningful for in-process stores.
// For a server, read the server process's RSS instead (ServerRSS).
func Memory(ctx context.Context, st norn.Store, env Env, cfg Config) (Result, error) {
	cfg.defaults()
	n := cfg.Tasks
	if n <= 0 {
		n = 1_000_000
	}
	q := queueName(cfg.Queue)
	defer cleanup(ctx, cfg, st, q)
	if cfg.ServerPid == 0 {
		// Give back what earlier workloads left in this process's heap,
		// so the figure is this workload's.
		debug.FreeOSMemory()
	}
	tm := startTiming(cfg)
	if err := submitAll(ctx, st, q, n, 1000, spec(cfg.SpecBytes), cfg.Workers, func(d int64) { report(cfg, "memory: submitting", d, int64(n)) }); err != nil {
		return Result{}, err
	}
	r := env.result("memory")
	tm.finish(&r, n, time.Time{})
	runtime.GC()
	pid := cfg.ServerPid
	if pid == 0 {
		pid = os.Getpid()
	}
	rss, err := RSS(pid)
	if err != nil {
		return Result{}, err
	}
	r.RSSMiB = float64(rss) / (1 << 20)
	return r, nil
}

// RSS reads the resident set size of a process from /proc (Linux only).
func RSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read RSS: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("parse VmRSS %q: %w", rest, err)
				}
				return kb << 10, nil
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// clockTicks is USER_HZ, the unit of the CPU times in /proc/PID/stat; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcessCPU reads the user+system CPU time a process has used so far from
// /proc (Linux only).
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	// The command name (field 2) may hold spaces and parentheses; the
	// fields after its closing parenthesis start at field 3 (state).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	var ticks int64
	for _, field := range f[11:13] { // utime (14), stime (15)
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// Percentile returns the p-th percentile (0..100) of sorted durations using
// the nearest-rank method.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// The epsilon keeps float error (99.9/100*1000 = 999.0000000001) from
	// bumping the rank.
	rank := int(math.Ceil(p/100*float64(len(sorted)) - 1e-9))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

func setPercentiles(r *Result, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	r.P50ms = ms(Percentile(lat, 50))
	r.P99ms = ms(Percentile(lat, 99))
	r.P999ms = ms(Percentile(lat, 99.9))
	r.Maxms = ms(Percentile(lat, 100))
}
