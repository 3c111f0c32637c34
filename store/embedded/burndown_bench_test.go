package embedded

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
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
// With -mutexprofile and -blockprofile it also reports, over the burn-downs
// alone, the time per task spent waiting for the store's own mutexes
// (mu-wait, mutex profile: contention delay; lock-wait, block profile:
// time blocked in Lock) and for WAL syncs (sync-wait), summed over both
// claimers; claim-sync-wait is the part of sync-wait spent in Claim.
func BenchmarkBurnDown(b *testing.B) {
	n := 200_000
	if os.Getenv("NORN_BENCH_BIG") == "1" {
		n = 1_000_000
	}
	workers := runtime.GOMAXPROCS(0)
	claim := min(norn.MaxClaim, max(100, bench.RiverSlots/workers))
	var cpu time.Duration
	var waits burnDownWaits
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s := benchStore(b, Strict)
		fillFrom(b, s, "q", n, workers)
		runtime.GC()
		stop := startBurnDownProfile(b, i == b.N-1)
		w0 := takeBurnDownWaits()
		c0 := proccpu.Used()
		b.StartTimer()
		burnDown(b, s, "q", n, workers, claim)
		b.StopTimer()
		cpu += proccpu.Used() - c0
		waits.add(takeBurnDownWaits(), w0)
		stop()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tasks/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N*n), "cpu-µs/task")
	if runtime.SetMutexProfileFraction(-1) > 0 {
		b.ReportMetric(waits.mu/1e3/float64(b.N*n), "mu-wait-µs/task")
	}
	if waits.blocked {
		b.ReportMetric(waits.lock/1e3/float64(b.N*n), "lock-wait-µs/task")
		b.ReportMetric(waits.sync/1e3/float64(b.N*n), "sync-wait-µs/task")
		b.ReportMetric(waits.claimSync/1e3/float64(b.N*n), "claim-sync-wait-µs/task")
	}
}

// burnDownWaits are nanoseconds summed from the runtime's mutex and block
// profiles, which count from the start of the process: a burn-down's are
// the difference of two takes.
type burnDownWaits struct {
	mu, lock, sync, claimSync float64
	blocked                   bool
}

func (w *burnDownWaits) add(after, before burnDownWaits) {
	w.mu += after.mu - before.mu
	w.lock += after.lock - before.lock
	w.sync += after.sync - before.sync
	w.claimSync += after.claimSync - before.claimSync
	w.blocked = w.blocked || after.blocked
}

// takeBurnDownWaits reads the mutex and block profiles in their text form
// (which names each stack's functions): mu is the mutex delay of stacks
// through this package (s.mu and the package's other locks, not Pebble's),
// lock the time blocked in a Lock called from this package, sync the time
// blocked in Pebble's SyncWait (claimSync: within a Claim).
func takeBurnDownWaits() burnDownWaits {
	var w burnDownWaits
	w.mu = profileDelay("mutex", func(stack string) bool {
		return strings.Contains(stack, "store/embedded.")
	})
	if p := pprof.Lookup("block"); p != nil && p.Count() > 0 {
		w.blocked = true
		w.lock = profileDelay("block", func(stack string) bool {
			i := strings.Index(stack, "sync.(*Mutex).Lock")
			return i >= 0 && strings.Contains(stack[i:], "store/embedded.")
		})
		w.sync = profileDelay("block", func(stack string) bool {
			return strings.Contains(stack, "(*Batch).SyncWait")
		})
		w.claimSync = profileDelay("block", func(stack string) bool {
			return strings.Contains(stack, "(*Batch).SyncWait") && strings.Contains(stack, "(*Store).Claim+")
		})
	}
	return w
}

// profileDelay sums, in nanoseconds, the delay of the records of the named
// contention profile whose stack (function names, innermost first) keep
// accepts.
func profileDelay(name string, keep func(stack string) bool) float64 {
	var buf bytes.Buffer
	if err := pprof.Lookup(name).WriteTo(&buf, 1); err != nil {
		return 0
	}
	perSec := 0.0
	var total, cycles float64
	var stack strings.Builder
	flush := func() {
		if cycles > 0 && keep(stack.String()) {
			total += cycles
		}
		cycles = 0
		stack.Reset()
	}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "cycles/second="):
			perSec, _ = strconv.ParseFloat(strings.TrimPrefix(line, "cycles/second="), 64)
		case strings.Contains(line, " @ "):
			flush()
			f := strings.Fields(line)
			cycles, _ = strconv.ParseFloat(f[0], 64)
		case strings.HasPrefix(line, "#\t0x"):
			if f := strings.Fields(line); len(f) >= 3 {
				stack.WriteString(f[2])
				stack.WriteByte('\n')
			}
		}
	}
	flush()
	if perSec == 0 {
		return 0
	}
	return total / perSec * 1e9
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
