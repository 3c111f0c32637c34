package embedded

import (
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/bench"
	"github.com/nornq/norn/internal/proccpu"
)

// BenchmarkBurnDown is `norn bench work` in-process, timed over the
// burn-down alone: one op submits the tasks (untimed, in batches of
// 1,000), then one claimer per core claims 2,000 ÷ GOMAXPROCS at a time
// (bench.RiverSlots) and completes each claim with one LeaseBatch
// (bench.ClaimRound). It reports tasks/s and the process's CPU per task
// (user+sys over the burn-down), the figure to compare on a shared machine
// (docs/internals/embedded-performance.md). 200,000 tasks; 1,000,000 with
// NORN_BENCH_BIG=1. NORN_BENCH_CPUPROFILE=FILE writes a CPU profile of the
// last burn-down alone (go test's -cpuprofile includes the submits).
func BenchmarkBurnDown(b *testing.B) {
	n := 200_000
	if os.Getenv("NORN_BENCH_BIG") == "1" {
		n = 1_000_000
	}
	workers := runtime.GOMAXPROCS(0)
	claim := min(norn.MaxClaim, max(100, bench.RiverSlots/workers))
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := benchStore(b, Strict)
		fillFrom(b, s, "q", n, workers)
		runtime.GC()
		stop := startBurnDownProfile(b, i == b.N-1)
		c0 := proccpu.Used()
		b.StartTimer()
		burnDown(b, s, "q", n, workers, claim)
		b.StopTimer()
		cpu += proccpu.Used() - c0
		stop()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tasks/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N*n), "cpu-µs/task")
}

// fillFrom submits n tasks of 200-byte specs and one priority (as `norn
// bench work` does) with the given number of concurrent submitters, 1,000
// per call.
func fillFrom(b *testing.B, s *Store, queue string, n, workers int) {
	nts := make([]norn.NewTask, 1000)
	for i := range nts {
		nts[i] = norn.NewTask{Queue: queue, Spec: spec200}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := int(next.Add(1000)) - 1000
				if start >= n {
					return
				}
				if _, err := s.Submit(bg, nts[:min(1000, n-start)]...); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// burnDown claims and completes n tasks of queue as `norn bench work` does.
func burnDown(b *testing.B, s *Store, queue string, n, workers, claim int) {
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for done.Load() < int64(n) {
				k, err := bench.ClaimRound(bg, s, "bench-"+strconv.Itoa(w), queue, claim, nil)
				if err != nil {
					b.Error(err)
					return
				}
				done.Add(int64(k))
			}
		}(w)
	}
	wg.Wait()
}

// startBurnDownProfile starts NORN_BENCH_CPUPROFILE's profile when on.
func startBurnDownProfile(b *testing.B, on bool) (stop func()) {
	path := os.Getenv("NORN_BENCH_CPUPROFILE")
	if !on || path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
