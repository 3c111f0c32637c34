package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/bench"
	"github.com/nornq/norn/internal/storeopen"
	"github.com/nornq/norn/server"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// benchOptions are the flags of `norn bench`.
type benchOptions struct {
	store      string
	durability string
	transport  string
	tasks      int
	workers    int
	batch      int
	claimBatch int
	rate       float64
	delay      time.Duration
	specBytes  int
	queued     []int
	runs       int
	serverPid  int
	settle     time.Duration
	kafka      []string
	kafkaNodes int
	kafkaTA    time.Duration
	cpuProfile string
	memProfile string
	backlog    int
	window     time.Duration
	limits     bool
	keyLimit   int
	keys       int
	rateLimit  bool
}

// Transports of --transport.
const (
	transportInproc = "inproc"
	transportHTTP   = "http"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		var o benchOptions
		cmd := &cobra.Command{
			Use:   "bench WORKLOAD... [flags]",
			Short: "Measure throughput, latency and memory of a store (in-process or over HTTP)",
			Long: `Run benchmark workloads and print their figures (a table, or one JSON object
per result with -o json).

Workloads (or "all" for every one, in this order):
  submit   submission throughput at batch sizes 1, 100 and 1000 (or --batch)
  work     burn-down of --tasks pre-submitted no-op tasks by --workers workers
           claiming --claim-batch at a time and completing them in one call;
           with --limits the queue has max_running and key_limit set far
           above what the claims reach (tasks over --keys concurrency keys,
           default 1,000, taken in turn),
           so the figure is the cost of the limited claim path; with
           --rate-limit it has a rate limit that cannot bind (1,000,000/s,
           burst 1,000,000), the cost of the rate-limited claim path; the
           two combine; with --key-limit N the queue has key_limit N
           (max_running far, tasks over --keys keys), a per-key limit that
           rarely binds
  latency  submit → claim with a waiting long-poll claimer on an idle queue:
           p50/p99/p99.9/max, one task at a time
  delay    tasks with run_at = now + --delay submitted at --rate per second;
           firing lateness = claim time − run_at
  scale    work throughput with each --queued backlog (default 10k and 1M);
           the ratio is largest backlog ÷ smallest
  memory   queue --tasks ready tasks (default 1M) and report resident memory
           (this process, or --server-pid's)

Not part of "all":
  kafka    messages through the Kafka delay bridge (one or --kafka-nodes
           nodes on --store) at --rate (default 1000/s) with deadlines --delay
           ahead (default 3s); lateness = receive time on the output topic −
           deadline, negative = early; a second table gives the early side
           (share early, share over 5 ms early, p99.9 and max earliness).
           Uses an in-process Kafka unless --kafka-brokers is given; the
           bridge's adaptive timing advance unless --kafka-timing-advance.
  fairness one key with a --backlog of ready tasks (default 1,000,000) and
           ten small keys submitting 10 tasks/s each while --workers claim
           and complete for --window (default 10s); run without and with
           fair_by concurrency_key, and with --key-limit N a third time
           with key_limit N and no fair_by (the claims must find the small
           keys' tasks behind the held-back backlog). P50/P99/MAX are the
           small keys' submit → claim latency (tasks unclaimed at the end
           count with the time they waited), TASKS/S the total claim
           throughput.
  shaping  the work burn-down four times: plain, the tasks spread over
           --keys sequences (one task per key at a time, in submit
           order), plain tasks claimed with min half the claim size
           and a 10 ms linger (batch claims), and the tasks spread over
           --keys concurrency keys under a key rate limit that cannot
           bind; what ordering, batching and per-key buckets cost
           against a plain queue.

Where it runs:
  default                  in-process against --store (default: an embedded
                           store in a temporary directory, removed afterwards)
  --transport http         the same store behind an in-process HTTP server on
                           127.0.0.1, driven through the Go client
  --server URL             an already running server (its store is whatever
                           it was started with; --store then only labels the
                           figures). Only the flag counts: NORN_SERVER alone
                           does not move a benchmark off the in-process store.

--runs K repeats each workload K times and reports, for every figure, the
median of the K runs. With the default temporary store every run gets a new
store; with --store or --server each run uses fresh queues and deletes its
tasks afterwards, so runs against a persistent store do not pile up.`,
			Example: `  norn bench all
  norn bench submit work --runs 3 -o json
  norn bench work --tasks 1000000 --workers 4 --claim-batch 100
  norn bench latency delay --transport http
  norn bench memory --server http://127.0.0.1:7070 --server-pid $(pidof norn)`,
			Args: cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return runBench(cmd, g, &o, args)
			},
		}
		o.add(cmd.Flags())
		return clientCommand(cmd)
	})
}

// add defines the flags of norn bench.
func (o *benchOptions) add(f *pflag.FlagSet) {
	f.StringVar(&o.store, "store", "", "store spec: embedded:DIR or postgres://… (default: embedded store in a temporary directory)")
	f.StringVar(&o.durability, "durability", "strict", "store durability: strict or opportunistic")
	f.StringVar(&o.transport, "transport", transportInproc, "inproc (Go API) or http (in-process server + client); --server implies http")
	f.IntVar(&o.tasks, "tasks", 0, "tasks per workload (default: submit/work 100000, latency 2000, delay rate×10s, scale the smallest backlog, memory 1000000)")
	f.IntVar(&o.workers, "workers", 0, "concurrent submitters/claimers (default 2×GOMAXPROCS in-process, 32 over HTTP; work: GOMAXPROCS claimers)")
	f.IntVar(&o.batch, "batch", 0, "submit batch size (default: submit runs 1, 100 and 1000)")
	f.IntVar(&o.claimBatch, "claim-batch", 0, "tasks per claim (default 100; work: 2000 in flight as in River's bench, 2000÷workers, at least 100)")
	f.Float64Var(&o.rate, "rate", 0, "delay workload submission rate in tasks/s (default 5000)")
	f.DurationVar(&o.delay, "delay", 0, "delay workload: how far in the future run_at is (default 1s)")
	f.IntVar(&o.specBytes, "spec-bytes", 0, "size of each task's spec in bytes (default 200)")
	f.IntSliceVar(&o.queued, "queued", nil, "scale workload backlogs (default 10000,1000000)")
	f.DurationVar(&o.settle, "settle", 0, "work/scale/fairness: pause between queueing the backlog and burning it down (lets flushes and compactions finish)")
	f.IntVar(&o.runs, "runs", 1, "repeat each workload K times and report the medians")
	f.StringSliceVar(&o.kafka, "kafka-brokers", nil, "kafka workload: brokers host:port[,…] (default: an in-process Kafka)")
	f.IntVar(&o.kafkaNodes, "kafka-nodes", 1, "kafka workload: bridge nodes sharing the store")
	f.DurationVar(&o.kafkaTA, "kafka-timing-advance", 0, "kafka workload: force this timing advance (default: the bridge's adaptive one)")
	f.IntVar(&o.serverPid, "server-pid", 0, "pid of the --server process: memory reports its RSS, CPU figures include its CPU time")
	f.IntVar(&o.backlog, "backlog", 0, "fairness workload: the large key's backlog (default 1000000)")
	f.DurationVar(&o.window, "window", 0, "fairness workload: how long to measure (default 10s)")
	f.BoolVar(&o.limits, "limits", false, "work workload: configure flow limits that cannot bind (measures the limited claim path)")
	f.IntVar(&o.keyLimit, "key-limit", 0, "work workload: set key_limit to N over --keys concurrency keys (a small limit that rarely binds); fairness: add a pass with key_limit N and no fair_by")
	f.IntVar(&o.keys, "keys", 0, "work workload with --limits or --key-limit: how many concurrency keys the tasks take in turn; shaping: how many sequences and rate-limited keys (default 1000)")
	f.BoolVar(&o.rateLimit, "rate-limit", false, "work workload: configure a rate limit that cannot bind (measures the rate-limited claim path)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	f.StringVar(&o.memProfile, "memprofile", "", "write a heap profile at the end of the run to this file")
}

// benchWorkloads expands "all" and rejects unknown names (usage error).
func benchWorkloads(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		a = strings.ToLower(a)
		if a == "all" {
			out = append(out, bench.Workloads...)
			continue
		}
		known := false
		for _, w := range append(bench.Workloads, bench.Extra...) {
			known = known || w == a
		}
		if !known {
			return nil, usagef("unknown workload %q (want %s, %s or all)", a, strings.Join(bench.Workloads, ", "), strings.Join(bench.Extra, ", "))
		}
		out = append(out, a)
	}
	return out, nil
}

func (o *benchOptions) validate() error {
	switch {
	case o.transport != transportInproc && o.transport != transportHTTP:
		return usagef("--transport: unknown transport %q (want inproc or http)", o.transport)
	case o.tasks < 0:
		return usagef("--tasks must not be negative")
	case o.workers < 0:
		return usagef("--workers must not be negative")
	case o.batch < 0 || o.batch > norn.MaxBatch:
		return usagef("--batch must be between 1 and %d", norn.MaxBatch)
	case o.claimBatch < 0:
		return usagef("--claim-batch must not be negative")
	case o.keyLimit < 0:
		return usagef("--key-limit must not be negative")
	case o.keys < 0:
		return usagef("--keys must not be negative")
	case o.rate < 0:
		return usagef("--rate must not be negative")
	case o.delay < 0:
		return usagef("--delay must not be negative")
	case o.specBytes < 0 || o.specBytes > norn.MaxSpecBytes:
		return usagef("--spec-bytes must be between 8 and %d", norn.MaxSpecBytes)
	case o.runs < 1:
		return usagef("--runs must be at least 1")
	case o.settle < 0:
		return usagef("--settle must not be negative")
	case o.serverPid < 0:
		return usagef("--server-pid must not be negative")
	}
	for _, q := range o.queued {
		if q < 1 {
			return usagef("--queued sizes must be positive, got %d", q)
		}
	}
	return nil
}

// benchTarget is what the workloads run against, and how to tear it down.
type benchTarget struct {
	store   norn.Store
	env     bench.Env
	closers []func() error
}

func (t *benchTarget) close() error {
	var first error
	for i := len(t.closers) - 1; i >= 0; i-- {
		if err := t.closers[i](); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// benchHTTPClient allows enough idle connections per host for every worker:
// the default of 2 would make most requests open a new connection and
// measure TCP handshakes instead of the server.
func benchHTTPClient(workers int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = workers + 64
	tr.MaxIdleConnsPerHost = workers + 64
	return &http.Client{Transport: tr}
}

// storeKind is the part of a store spec before the location, used to label
// results without leaking paths or passwords.
func storeKind(spec string) string {
	kind, _, _ := strings.Cut(spec, ":")
	kind = strings.ToLower(kind)
	if kind == "postgresql" {
		kind = "postgres"
	}
	return kind
}

// openBenchTarget opens the store (or connects to --server) and wraps it in
// an in-process server when --transport http asks for one.
func openBenchTarget(ctx context.Context, cmd *cobra.Command, g *Globals, o *benchOptions, logger *slog.Logger, workers int) (*benchTarget, error) {
	t := &benchTarget{}
	if cmd.Flags().Changed("server") {
		if cmd.Flags().Changed("transport") && o.transport != transportHTTP {
			return nil, usagef("--server runs over HTTP; it cannot be combined with --transport %s", o.transport)
		}
		c, err := client.New(g.Server, client.WithToken(g.bearerToken()), client.WithUserAgent("norn-bench/1"),
			client.WithHTTPClient(benchHTTPClient(workers)))
		if err != nil {
			return nil, usagef("--server: %v", err)
		}
		t.store = c
		t.closers = append(t.closers, c.Close)
		t.env = bench.Env{Store: "remote", Transport: transportHTTP}
		if cmd.Flags().Changed("store") {
			t.env.Store = storeKind(o.store)
		}
		if cmd.Flags().Changed("durability") {
			t.env.Durability = o.durability
		}
		return t, nil
	}
	spec := o.store
	if spec == "" {
		dir, err := os.MkdirTemp("", "norn-bench-")
		if err != nil {
			return nil, fmt.Errorf("temporary store directory: %w", err)
		}
		t.closers = append(t.closers, func() error { return os.RemoveAll(dir) })
		spec = "embedded:" + dir
	}
	st, err := storeopen.Open(ctx, spec, storeopen.Options{Durability: o.durability, Logger: logger})
	if err != nil {
		_ = t.close()
		if norn.CodeOf(err) == norn.CodeInvalidArgument {
			return nil, usagef("--store: %v", err)
		}
		return nil, err
	}
	t.closers = append(t.closers, st.Close)
	t.store = st
	t.env = bench.Env{Store: storeKind(spec), Durability: o.durability, Transport: transportInproc}
	if o.transport == transportHTTP {
		// The server is private to this process and listens on loopback
		// only, so its "authentication is off" warning is noise here.
		quiet := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelError}))
		srv, err := server.New(server.Config{Addr: "127.0.0.1:0", Store: st, Logger: quiet})
		if err != nil {
			_ = t.close()
			return nil, fmt.Errorf("in-process server: %w", err)
		}
		sctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(sctx) }()
		t.closers = append(t.closers, func() error { stop(); return <-done })
		c, err := client.New(srv.URL(), client.WithUserAgent("norn-bench/1"), client.WithHTTPClient(benchHTTPClient(workers)))
		if err != nil {
			_ = t.close()
			return nil, err
		}
		t.closers = append(t.closers, c.Close)
		t.store = c
		t.env.Transport = transportHTTP
	}
	return t, nil
}

func runBench(cmd *cobra.Command, g *Globals, o *benchOptions, args []string) (err error) {
	workloads, err := benchWorkloads(args)
	if err != nil {
		return err
	}
	format, err := outputFormat(g)
	if err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	stderr := cmd.ErrOrStderr()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	stopProfile, err := o.startCPUProfile()
	if err != nil {
		return err
	}
	defer stopProfile()

	remote := cmd.Flags().Changed("server") || o.transport == transportHTTP
	workers := o.workers
	if workers == 0 && remote {
		// HTTP round trips leave the CPU idle while waiting, so more
		// concurrent submits are needed to keep the server busy (the work
		// workload claims in large batches instead, below).
		workers = 32
	}
	targets := &benchTargets{
		// With the default temporary store every run gets a fresh one, so
		// runs are independent: a run does not inherit the previous one's
		// compaction debt, and nothing needs deleting afterwards.
		fresh: o.store == "" && !cmd.Flags().Changed("server"),
		open: func() (*benchTarget, error) {
			return openBenchTarget(ctx, cmd, g, o, logger, max(workers, 2*runtime.GOMAXPROCS(0)))
		},
	}
	if err := targets.start(); err != nil {
		return err
	}
	defer func() {
		if cerr := targets.stop(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	bar := &benchProgress{w: stderr}
	cfg := o.config(workers, bar.update)
	out := cmd.OutOrStdout()
	var all []bench.Result
	defer func() {
		// Print what was measured even when a later workload fails.
		if format == outTable && len(all) > 0 {
			if werr := writeBenchTable(out, all); werr != nil && err == nil {
				err = werr
			}
		}
	}()
	for _, w := range workloads {
		runs := make([][]bench.Result, 0, o.runs)
		for k := 0; k < o.runs; k++ {
			bar.run = fmt.Sprintf("%s %d/%d", w, k+1, o.runs)
			c := cfg
			if w == "work" && o.workers == 0 {
				// The work workload picks its own claimers (one per core),
				// over HTTP too: two claims of 1,000 did 60–70% more than 32
				// of 100 through one server (see docs/scaling.md).
				c.Workers = 0
			}
			rs, err := targets.runOnce(ctx, w, c)
			bar.clear()
			if err != nil {
				return fmt.Errorf("%s: %w", w, err)
			}
			runs = append(runs, rs)
		}
		med, err := bench.Median(runs)
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		all = append(all, med...)
		if format != outTable {
			for _, r := range med {
				if err := emit(out, format, r); err != nil {
					return err
				}
			}
		}
	}
	return o.writeMemProfile()
}

// config is the workloads' configuration from the flags.
func (o *benchOptions) config(workers int, progress func(phase string, done, total int64)) bench.Config {
	return bench.Config{
		Tasks: o.tasks, Workers: workers, Batch: o.batch, ClaimBatch: o.claimBatch,
		Rate: o.rate, Delay: o.delay, SpecBytes: o.specBytes, Queued: o.queued,
		Settle: o.settle, ServerPid: o.serverPid, Progress: progress,
		KafkaBrokers: o.kafka, KafkaNodes: o.kafkaNodes, KafkaTimingAdvance: o.kafkaTA,
		Backlog: o.backlog, Window: o.window, Limits: o.limits, KeyLimit: o.keyLimit, Keys: o.keys, RateLimit: o.rateLimit,
	}
}

// startCPUProfile starts --cpuprofile, if given; stop ends it.
func (o *benchOptions) startCPUProfile() (stop func(), err error) {
	if o.cpuProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(o.cpuProfile)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeMemProfile writes --memprofile, if given.
func (o *benchOptions) writeMemProfile() error {
	if o.memProfile == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(o.memProfile)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	return nil
}

// benchTargets gives each workload run its store: one shared for the whole
// run, or (fresh) a new one per run, closed after it.
type benchTargets struct {
	fresh  bool
	open   func() (*benchTarget, error)
	shared *benchTarget
}

func (b *benchTargets) start() error {
	if b.fresh {
		return nil
	}
	var err error
	b.shared, err = b.open()
	return err
}

func (b *benchTargets) stop() error {
	if b.shared == nil {
		return nil
	}
	return closeBenchTarget(b.shared)
}

// runOnce runs one workload once, on the shared target or a fresh one.
func (b *benchTargets) runOnce(ctx context.Context, w string, cfg bench.Config) ([]bench.Result, error) {
	t := b.shared
	if b.fresh {
		var err error
		if t, err = b.open(); err != nil {
			return nil, err
		}
		cfg.KeepTasks = true
	}
	rs, err := bench.Run(ctx, w, t.store, t.env, cfg)
	if b.fresh {
		if cerr := closeBenchTarget(t); cerr != nil && err == nil {
			err = cerr
		}
	}
	return rs, err
}

func closeBenchTarget(t *benchTarget) error {
	if err := t.close(); err != nil {
		return fmt.Errorf("closing the store: %w", err)
	}
	return nil
}

// benchProgress adapts the workloads' progress callbacks (phase, done,
// total; from many goroutines) to one Progress bar per phase.
type benchProgress struct {
	w     io.Writer
	run   string
	mu    sync.Mutex
	phase string
	bar   *Progress
}

func (b *benchProgress) update(phase string, done, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar == nil || phase != b.phase {
		if b.bar != nil {
			b.bar.Clear()
		}
		b.phase = phase
		b.bar = NewProgress(b.w, b.run+": "+phase, "tasks", total)
	}
	b.bar.Set(done, done)
}

func (b *benchProgress) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		b.bar.Clear()
		b.bar = nil
	}
}

// writeBenchTable prints every result in one aligned table; figures a
// workload does not measure are "-".
func writeBenchTable(w io.Writer, rs []bench.Result) error {
	num := func(v float64, prec int) string {
		if v == 0 {
			return "-"
		}
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
	integer := func(v int) string {
		if v == 0 {
			return "-"
		}
		return strconv.Itoa(v)
	}
	t := newTable(w, "WORKLOAD", "STORE", "DURABILITY", "TRANSPORT", "NPROC", "TASKS", "WORKERS", "BATCH", "QUEUED", "RATE",
		"SECONDS", "TASKS/S", "TASKS/CPU_S", "P50_MS", "P99_MS", "P99.9_MS", "MAX_MS", "RSS_MIB", "RATIO", "RUNS")
	for _, r := range rs {
		t.row(r.Workload, dash(r.Store), dash(r.Durability), r.Transport, integer(r.NProc), integer(r.Tasks),
			integer(r.Workers), integer(r.Batch), integer(r.Queued), num(r.Rate, 0), num(r.Seconds, 3), num(r.TasksPerS, 0),
			num(r.TasksPerCPUSec, 0), num(r.P50ms, 3), num(r.P99ms, 3), num(r.P999ms, 3), num(r.Maxms, 3), num(r.RSSMiB, 1), num(r.Ratio, 3),
			integer(r.Runs))
	}
	if err := t.flush(); err != nil {
		return err
	}
	return writeKafkaEarlyTable(w, rs)
}

// writeKafkaEarlyTable prints the early side of the kafka results (the main
// table's lateness columns are signed, so early and late show apart).
func writeKafkaEarlyTable(w io.Writer, rs []bench.Result) error {
	var t *table
	for _, r := range rs {
		if r.Workload != "kafka" {
			continue
		}
		if t == nil {
			fmt.Fprintln(w)
			t = newTable(w, "KAFKA", "STORE", "TASKS", "EARLY_%", "EARLY>5MS_%", "EARLY_P99.9_MS", "EARLY_MAX_MS",
				"P50_MS", "LATE_P99_MS", "LATE_P99.9_MS", "LATE_MAX_MS")
		}
		f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
		t.row("early/late", dash(r.Store), strconv.Itoa(r.Tasks), f(r.EarlyPct, 2), f(r.EarlyOver5msPct, 3),
			f(r.EarlyP999ms, 3), f(r.MaxEarlyms, 3), f(r.P50ms, 3), f(r.P99ms, 3), f(r.P999ms, 3), f(r.Maxms, 3))
	}
	if t == nil {
		return nil
	}
	return t.flush()
}
