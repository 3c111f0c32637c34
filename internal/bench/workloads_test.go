package bench

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/servertest"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/store/embedded"
)

// counting wraps a store and counts what the workloads did through it, so
// the tests check that a workload really submitted and completed what its
// result claims.
type counting struct {
	norn.Store
	submitted, completed, claimed atomic.Int64
	failedOps                     atomic.Int64
	keyLimit                      atomic.Int64 // the last key_limit UpdateQueue set
	mu                            sync.Mutex
	keys                          map[string]bool // the concurrency keys submitted
}

func (c *counting) UpdateQueue(ctx context.Context, name string, u norn.QueueUpdate) (norn.QueueInfo, error) {
	if u.KeyLimit != nil {
		c.keyLimit.Store(int64(*u.KeyLimit))
	}
	return c.Store.UpdateQueue(ctx, name, u)
}

func (c *counting) Submit(ctx context.Context, ts ...norn.NewTask) ([]norn.Submitted, error) {
	c.mu.Lock()
	for _, t := range ts {
		if t.ConcurrencyKey != "" {
			if c.keys == nil {
				c.keys = map[string]bool{}
			}
			c.keys[t.ConcurrencyKey] = true
		}
	}
	c.mu.Unlock()
	out, err := c.Store.Submit(ctx, ts...)
	if err == nil {
		c.submitted.Add(int64(len(out)))
	}
	return out, err
}

func (c *counting) Claim(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	ts, err := c.Store.Claim(ctx, req)
	c.claimed.Add(int64(len(ts)))
	return ts, err
}

func (c *counting) Complete(ctx context.Context, ref norn.LeaseRef, result json.RawMessage) error {
	err := c.Store.Complete(ctx, ref, result)
	if err == nil {
		c.completed.Add(1)
	}
	return err
}

func (c *counting) LeaseBatch(ctx context.Context, ops []norn.LeaseOp) ([]norn.LeaseOpResult, error) {
	res, err := c.Store.LeaseBatch(ctx, ops)
	for _, r := range res {
		if r.Err == nil {
			c.completed.Add(1)
		} else {
			c.failedOps.Add(1)
		}
	}
	return res, err
}

// target is one place the workloads run: the embedded store itself, or the
// same store behind a real server reached through the HTTP client.
type target struct {
	name string
	open func(t testing.TB) (norn.Store, Env)
}

func openEmbedded(t testing.TB) *embedded.Store {
	t.Helper()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

var targets = []target{
	{"inproc", func(t testing.TB) (norn.Store, Env) {
		return openEmbedded(t), Env{Store: "embedded", Durability: "strict", Transport: "inproc"}
	}},
	{"http", func(t testing.TB) (norn.Store, Env) {
		// Started after the store's cleanup was registered, so the server
		// stops before its store closes.
		srv := servertest.Start(t, server.Config{Store: openEmbedded(t)})
		c, err := client.New(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, Env{Store: "embedded", Durability: "strict", Transport: "http"}
	}},
}

// checkCommon asserts what every result must satisfy.
func checkCommon(t *testing.T, r Result, workload string, env Env, tasks int) {
	t.Helper()
	if r.Workload != workload || r.Store != env.Store || r.Transport != env.Transport || r.Durability != env.Durability {
		t.Errorf("labels = %q/%q/%q/%q, want %q/%+v", r.Workload, r.Store, r.Transport, r.Durability, workload, env)
	}
	if r.NProc < 1 || r.Runs != 1 {
		t.Errorf("nproc %d runs %d", r.NProc, r.Runs)
	}
	if r.Tasks != tasks {
		t.Errorf("%s: tasks = %d, want %d", workload, r.Tasks, tasks)
	}
	if !(r.Seconds > 0) || !(r.TasksPerS > 0) {
		t.Errorf("%s: seconds %v tasks/s %v, want both > 0", workload, r.Seconds, r.TasksPerS)
	}
	if runtime.GOOS == "linux" && (!(r.CPUSeconds > 0) || r.TasksPerCPUSec != float64(r.Tasks)/r.CPUSeconds) {
		t.Errorf("%s: cpu seconds %v tasks/cpu-s %v", workload, r.CPUSeconds, r.TasksPerCPUSec)
	}
	if d := r.TasksPerS - float64(r.Tasks)/r.Seconds; d > 1e-6*r.TasksPerS || d < -1e-6*r.TasksPerS {
		t.Errorf("%s: tasks/s %v is not tasks/seconds %v", workload, r.TasksPerS, float64(r.Tasks)/r.Seconds)
	}
}

func checkPercentiles(t *testing.T, r Result, allowZero bool) {
	t.Helper()
	if r.P50ms < 0 || (!allowZero && r.P50ms == 0) {
		t.Errorf("%s: p50 = %v ms", r.Workload, r.P50ms)
	}
	if !(r.P50ms <= r.P99ms && r.P99ms <= r.P999ms && r.P999ms <= r.Maxms) {
		t.Errorf("%s: percentiles out of order: p50 %v p99 %v p99.9 %v max %v", r.Workload, r.P50ms, r.P99ms, r.P999ms, r.Maxms)
	}
}

// checkEmpty asserts the workload deleted its tasks afterwards.
func checkEmpty(t *testing.T, st norn.Store) {
	t.Helper()
	stats, err := st.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if stats.Total != 0 {
		t.Errorf("the store still holds %d tasks after the workload: %v", stats.Total, stats.Counts)
	}
}

func TestWorkloads(t *testing.T) {
	t.Parallel()
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			// The deadline only ends a hang: every target's workloads
			// share it, and under -race on a busy 2-core machine the HTTP
			// target's took all of 2 minutes.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			base, env := tg.open(t)
			cfg := Config{Workers: 4, ClaimBatch: 50}

			t.Run("submit", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Tasks = 300
				rs, err := Submit(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				if len(rs) != 3 {
					t.Fatalf("%d results, want one per batch size (1, 100, 1000)", len(rs))
				}
				for i, b := range []int{1, 100, 1000} {
					checkCommon(t, rs[i], "submit", env, 300)
					if rs[i].Batch != b {
						t.Errorf("result %d batch %d, want %d", i, rs[i].Batch, b)
					}
				}
				if got := st.submitted.Load(); got != 900 {
					t.Errorf("submitted %d tasks, want 900", got)
				}
				checkEmpty(t, base)
			})
			t.Run("work", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Tasks = 1000
				r, err := Work(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				checkCommon(t, r, "work", env, 1000)
				if r.Workers != 4 || r.Batch != 50 {
					t.Errorf("workers %d claim batch %d, want 4 and 50", r.Workers, r.Batch)
				}
				if st.submitted.Load() != 1000 || st.completed.Load() != 1000 || st.failedOps.Load() != 0 {
					t.Errorf("submitted %d completed %d failed %d, want 1000/1000/0", st.submitted.Load(), st.completed.Load(), st.failedOps.Load())
				}
				checkEmpty(t, base)
			})
			t.Run("work default claim batch", func(t *testing.T) {
				// As many tasks in flight as River's bench (4 workers ×
				// 500), whatever the store.
				for kind, want := range map[string]int{"embedded": RiverSlots / 4, "postgres": RiverSlots / 4} {
					c, e := cfg, env
					c.Tasks, c.ClaimBatch, e.Store = 1000, 0, kind
					r, err := Work(ctx, &counting{Store: base}, e, c)
					if err != nil {
						t.Fatal(err)
					}
					if r.Batch != want {
						t.Errorf("%s: claim batch %d, want %d", kind, r.Batch, want)
					}
					checkEmpty(t, base)
				}
			})
			t.Run("work default claimers", func(t *testing.T) {
				// One claimer per core, River's tasks in flight over them.
				c := cfg
				c.Tasks, c.Workers, c.ClaimBatch = 1000, 0, 0
				r, err := Work(ctx, &counting{Store: base}, env, c)
				if err != nil {
					t.Fatal(err)
				}
				n := runtime.GOMAXPROCS(0)
				if want := min(norn.MaxClaim, max(100, RiverSlots/n)); r.Workers != n || r.Batch != want {
					t.Errorf("workers %d claim batch %d, want %d and %d", r.Workers, r.Batch, n, want)
				}
				checkEmpty(t, base)
			})
			t.Run("work with limits", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Tasks, c.Limits = 1000, true
				r, err := Work(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				checkCommon(t, r, "work-limits", env, 1000)
				if st.completed.Load() != 1000 || st.failedOps.Load() != 0 {
					t.Errorf("completed %d failed %d, want 1000/0", st.completed.Load(), st.failedOps.Load())
				}
				checkEmpty(t, base)
			})
			t.Run("work with a small key limit", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Tasks, c.KeyLimit = 1000, 10
				r, err := Work(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				checkCommon(t, r, "work-keylimit10", env, 1000)
				if st.completed.Load() != 1000 || st.failedOps.Load() != 0 {
					t.Errorf("completed %d failed %d, want 1000/0", st.completed.Load(), st.failedOps.Load())
				}
				if st.keyLimit.Load() != 10 {
					t.Errorf("the queue's key limit was set to %d, want 10", st.keyLimit.Load())
				}
				if len(st.keys) != 1000 {
					t.Errorf("the tasks had %d concurrency keys, want 1000", len(st.keys))
				}
				checkEmpty(t, base)
			})
			t.Run("work with a key limit over fewer keys", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Tasks, c.KeyLimit, c.Keys = 1000, 300, 7
				r, err := Work(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				checkCommon(t, r, "work-keylimit300-keys7", env, 1000)
				if st.completed.Load() != 1000 || len(st.keys) != 7 {
					t.Errorf("completed %d over %d keys, want 1000 over 7", st.completed.Load(), len(st.keys))
				}
				checkEmpty(t, base)
			})
			t.Run("work with limits and a rate limit", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Tasks, c.Limits, c.RateLimit = 1000, true, true
				r, err := Work(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				checkCommon(t, r, "work-limits-rate", env, 1000)
				if st.completed.Load() != 1000 || st.failedOps.Load() != 0 {
					t.Errorf("completed %d failed %d, want 1000/0", st.completed.Load(), st.failedOps.Load())
				}
				checkEmpty(t, base)
			})
			t.Run("fairness", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Backlog, c.Window = 2000, 500*time.Millisecond
				rs, err := Fairness(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				if len(rs) != 2 || rs[0].Workload != "fairness-plain" || rs[1].Workload != "fairness-fair" {
					t.Fatalf("results %+v, want fairness-plain and fairness-fair", rs)
				}
				for _, r := range rs {
					checkCommon(t, r, r.Workload, env, int(r.TasksPerS*r.Seconds+0.5))
					if r.Queued != 2000 || r.Tasks <= 0 || !(r.P50ms > 0) || r.P99ms < r.P50ms {
						t.Errorf("%s: backlog %d claimed %d p50 %v p99 %v", r.Workload, r.Queued, r.Tasks, r.P50ms, r.P99ms)
					}
				}
				if st.submitted.Load() < 4000+20 || st.completed.Load() != st.claimed.Load() {
					t.Errorf("submitted %d claimed %d completed %d", st.submitted.Load(), st.claimed.Load(), st.completed.Load())
				}
				checkEmpty(t, base)
			})
			t.Run("shaping", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Tasks, c.Keys, c.ClaimBatch = 600, 7, 50
				rs, err := Shaping(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				if len(rs) != 4 || rs[0].Workload != "shaping-plain" || rs[1].Workload != "shaping-sequences" || rs[2].Workload != "shaping-batch" ||
					rs[3].Workload != "shaping-keyrate" {
					t.Fatalf("results %+v, want shaping-plain, -sequences, -batch and -keyrate", rs)
				}
				for _, r := range rs {
					checkCommon(t, r, r.Workload, env, 600)
				}
				if rs[1].Queued != 7 || rs[3].Queued != 7 || st.completed.Load() != 2400 {
					t.Errorf("sequences over %d keys, keys rated %d, completed %d; want 7, 7 and 2400", rs[1].Queued, rs[3].Queued, st.completed.Load())
				}
				checkEmpty(t, base)
			})
			t.Run("fairness with a key limit", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Backlog, c.Window, c.KeyLimit = 500, 300*time.Millisecond, 1
				rs, err := Fairness(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				if len(rs) != 3 || rs[2].Workload != "fairness-keylimit1" {
					t.Fatalf("results %+v, want a third, fairness-keylimit1", rs)
				}
				if st.keyLimit.Load() != 1 {
					t.Errorf("the queue's key limit was set to %d, want 1", st.keyLimit.Load())
				}
				if r := rs[2]; r.Queued != 500 || r.Tasks <= 0 {
					t.Errorf("%s: backlog %d claimed %d", r.Workload, r.Queued, r.Tasks)
				}
				checkEmpty(t, base)
			})
			t.Run("latency", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Tasks = 50
				r, err := Latency(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				checkCommon(t, r, "latency", env, 50)
				checkPercentiles(t, r, false)
				if st.completed.Load() != 50 || st.claimed.Load() != 50 {
					t.Errorf("claimed %d completed %d, want 50 each", st.claimed.Load(), st.completed.Load())
				}
				checkEmpty(t, base)
			})
			t.Run("delay", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Tasks, c.Rate, c.Delay = 200, 2000, 50*time.Millisecond
				r, err := Delay(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				checkCommon(t, r, "delay", env, 200)
				// Lateness may round to 0 ms but never be negative: a task
				// claimed before its run_at fired early.
				checkPercentiles(t, r, true)
				if !(r.Rate > 0) || r.Rate > 2000*1.5 {
					t.Errorf("achieved submit rate %v, want (0, 3000] for 2000 offered", r.Rate)
				}
				if st.completed.Load() != 200 {
					t.Errorf("completed %d, want 200", st.completed.Load())
				}
				checkEmpty(t, base)
			})
			t.Run("scale", func(t *testing.T) {
				st := &counting{Store: base}
				c := cfg
				c.Queued = []int{300, 1500}
				rs, err := Scale(ctx, st, env, c)
				if err != nil {
					t.Fatal(err)
				}
				if len(rs) != 2 {
					t.Fatalf("%d results, want 2", len(rs))
				}
				for i, q := range c.Queued {
					checkCommon(t, rs[i], "scale", env, 300)
					if rs[i].Queued != q {
						t.Errorf("result %d queued %d, want %d", i, rs[i].Queued, q)
					}
				}
				if want := rs[1].TasksPerS / rs[0].TasksPerS; rs[0].Ratio != 0 || rs[1].Ratio != want {
					t.Errorf("ratios %v, %v; want 0 and %v", rs[0].Ratio, rs[1].Ratio, want)
				}
				if st.submitted.Load() != 1800 || st.completed.Load() < 600 || st.failedOps.Load() != 0 {
					t.Errorf("submitted %d completed %d failed %d", st.submitted.Load(), st.completed.Load(), st.failedOps.Load())
				}
				checkEmpty(t, base)
			})
			t.Run("memory", func(t *testing.T) {
				c := cfg
				c.Tasks = 500
				r, err := Memory(ctx, base, env, c)
				if err != nil {
					t.Fatal(err)
				}
				checkCommon(t, r, "memory", env, 500)
				if !(r.RSSMiB > 1) {
					t.Errorf("rss = %v MiB", r.RSSMiB)
				}
				checkEmpty(t, base)
			})
		})
	}
}

func TestRunDispatch(t *testing.T) {
	t.Parallel()
	st := openEmbedded(t)
	env := Env{Store: "embedded", Transport: "inproc"}
	rs, err := Run(context.Background(), "work", st, env, Config{Tasks: 100})
	if err != nil || len(rs) != 1 || rs[0].Workload != "work" {
		t.Fatalf("Run(work) = %+v, %v", rs, err)
	}
	if stats, err := st.Stats(context.Background()); err != nil || stats.Total != 0 {
		t.Fatalf("after a run without KeepTasks the store holds %d tasks (%v)", stats.Total, err)
	}
	if _, err := Run(context.Background(), "work", st, env, Config{Tasks: 100, KeepTasks: true}); err != nil {
		t.Fatal(err)
	}
	if stats, err := st.Stats(context.Background()); err != nil || stats.Total != 100 {
		t.Errorf("after a run with KeepTasks the store holds %d tasks, want 100 (%v)", stats.Total, err)
	}
	if _, err := Run(context.Background(), "nope", st, env, Config{}); norn.CodeOf(err) != norn.CodeInvalidArgument {
		t.Errorf("unknown workload: err = %v, want invalid_argument", err)
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	mk := func(tps, p99 float64) []Result {
		return []Result{{Workload: "scale", TasksPerS: 100, Runs: 1}, {Workload: "scale", TasksPerS: tps, P99ms: p99, Runs: 1}}
	}
	cases := []struct {
		name      string
		runs      [][]Result
		tps, p99  float64
		ratio     float64
		wantError bool
	}{
		{"one run", [][]Result{mk(80, 3)}, 80, 3, 0.8, false},
		{"odd count picks the middle per figure", [][]Result{mk(90, 1), mk(70, 9), mk(80, 5)}, 80, 5, 0.8, false},
		{"even count averages the middle two", [][]Result{mk(90, 2), mk(70, 4)}, 80, 3, 0.8, false},
		{"shapes differ", [][]Result{mk(90, 2), mk(70, 4)[:1]}, 0, 0, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Median(c.runs)
			if c.wantError {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 || got[1].TasksPerS != c.tps || got[1].P99ms != c.p99 || got[1].Runs != len(c.runs) {
				t.Fatalf("got %+v", got)
			}
			if d := got[1].Ratio - c.ratio; d > 1e-9 || d < -1e-9 {
				t.Errorf("ratio %v, want %v", got[1].Ratio, c.ratio)
			}
		})
	}
	if got, err := Median(nil); got != nil || err != nil {
		t.Errorf("Median(nil) = %v, %v", got, err)
	}
}

// BenchmarkHotPaths measures the hot paths in-process and over HTTP (server + client on
// loopback, embedded store): one op is a 1000-task batch submit, or a
// 100-task claim completed with one lease batch. The store's own
// benchmarks (store/embedded) measure the same paths without HTTP, so the
// difference is the cost of the wire.
func BenchmarkHotPaths(b *testing.B) {
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			benchHotPaths(b, tg)
		})
	}
}

func benchHotPaths(b *testing.B, tg target) {
	st, _ := tg.open(b)
	ctx := context.Background()
	body := spec(200)
	batch := func(q string, n int) []norn.NewTask {
		out := make([]norn.NewTask, n)
		for i := range out {
			out[i] = norn.NewTask{Queue: q, Spec: body}
		}
		return out
	}
	b.Run("submit-batch-1000", func(b *testing.B) {
		q := queueName("bench-submit")
		ts := batch(q, 1000)
		b.ResetTimer()
		for range b.N {
			if _, err := st.Submit(ctx, ts...); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "tasks/s")
	})
	b.Run("claim-complete-100", func(b *testing.B) {
		q := queueName("bench-claim")
		for range b.N {
			if _, err := st.Submit(ctx, batch(q, 100)...); err != nil {
				b.Fatal(err)
			}
		}
		ops := make([]norn.LeaseOp, 0, 100)
		b.ResetTimer()
		for range b.N {
			tasks, err := st.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{q}, N: 100})
			if err != nil || len(tasks) != 100 {
				b.Fatalf("claimed %d: %v", len(tasks), err)
			}
			ops = ops[:0]
			for _, t := range tasks {
				ops = append(ops, norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: t.ID, Worker: "w", Lease: t.Lease}})
			}
			if _, err := st.LeaseBatch(ctx, ops); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "tasks/s")
	})
}
