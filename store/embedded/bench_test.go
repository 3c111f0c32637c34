package embedded

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"syscall"
	"testing"

	"github.com/nornq/norn"
)

// Benchmarks of the embedded store in-process. Figures and how to run them:
// docs/benchmarks.md. The 1M-task variants run only with NORN_BENCH_BIG=1.

// spec200 is a 200-byte JSON spec, the size the targets are stated for.
var spec200 = json.RawMessage(`{"to":"someone@example.com","subject":"a benchmark task with a realistic payload size","body":"` +
	"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" + `"}`)

var modes = []struct {
	name string
	d    Durability
}{{"strict", Strict}, {"opportunistic", Opportunistic}}

func benchStore(b *testing.B, d Durability) *Store {
	return newTestStore(b, Options{Durability: d})
}

func batchOf(n int, queue string) []norn.NewTask {
	nts := make([]norn.NewTask, n)
	for i := range nts {
		nts[i] = norn.NewTask{Queue: queue, Spec: spec200, Priority: uint32(i % 4)}
	}
	return nts
}

// fill submits n ready tasks in batches of 1000.
func fill(b *testing.B, s *Store, queue string, n int) {
	b.Helper()
	for n > 0 {
		k := min(n, 1000)
		if _, err := s.Submit(bg, batchOf(k, queue)...); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
}

// maxRSSMiB is the process's peak resident set size so far.
func maxRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Maxrss) / 1024 // Linux reports KiB
}

func queuedSizes() []int {
	if os.Getenv("NORN_BENCH_BIG") == "1" {
		return []int{10_000, 1_000_000}
	}
	return []int{10_000}
}

func BenchmarkSubmit(b *testing.B) {
	for _, m := range modes {
		for _, batch := range []int{1, 100, 1000} {
			name := "single"
			if batch > 1 {
				name = fmt.Sprintf("batch%d", batch)
			}
			b.Run(m.name+"/"+name, func(b *testing.B) {
				s := benchStore(b, m.d)
				nts := batchOf(batch, "bench")
				b.SetBytes(int64(len(spec200) * batch))
				b.ResetTimer()
				if batch == 1 {
					// Single submits come from many goroutines at once, so
					// strict mode shows group commit at work.
					b.SetParallelism(16)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if _, err := s.Submit(bg, nts[0]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				} else {
					// Four concurrent submitters, as in the write budget of docs/benchmarks.md.
					b.SetParallelism(2)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if _, err := s.Submit(bg, nts...); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
			})
		}
	}
}

// BenchmarkClaimComplete measures the worker path with a queue of a given
// length: claim one task and complete it (32 goroutines, single calls; the
// queue is filled with queued + b.N tasks before the timer starts, so it
// never drops below the nominal length), or claim 100 and complete them with
// one LeaseBatch (one goroutine; the 100 are replaced outside the timer).
func BenchmarkClaimComplete(b *testing.B) {
	for _, m := range modes {
		for _, queued := range queuedSizes() {
			for _, n := range []int{1, 100} {
				b.Run(fmt.Sprintf("%s/queued=%d/n=%d", m.name, queued, n), func(b *testing.B) {
					s := benchStore(b, m.d)
					if n == 1 {
						fill(b, s, "q", queued+b.N)
					} else {
						fill(b, s, "q", queued)
					}
					rss := maxRSSMiB()
					b.ResetTimer()
					if n == 1 {
						b.SetParallelism(16)
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}})
								if err != nil || len(ts) != 1 {
									b.Errorf("claim: %v (%d tasks)", err, len(ts))
									return
								}
								if err := s.Complete(bg, refOf(ts[0]), nil); err != nil {
									b.Error(err)
									return
								}
							}
						})
					} else {
						for i := 0; i < b.N; i++ {
							ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n})
							if err != nil || len(ts) != n {
								b.Fatalf("claim: %v (%d tasks)", err, len(ts))
							}
							ops := make([]norn.LeaseOp, len(ts))
							for j, tk := range ts {
								ops[j] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: refOf(tk)}
							}
							res, err := s.LeaseBatch(bg, ops)
							if err != nil || res[0].Err != nil {
								b.Fatalf("complete: %v %v", err, res[0].Err)
							}
							b.StopTimer()
							fill(b, s, "q", n)
							b.StartTimer()
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tasks/s")
					b.ReportMetric(rss, "maxRSS-MiB")
				})
			}
		}
	}
}

// BenchmarkGCMark measures what the in-memory entries cost the garbage
// collector: one op is one forced collection with queued tasks in memory,
// half of them ready and half completed (kept for their retention, with a
// timer each), the mix a burn-down passes through. gc-cpu-ms is the
// collector's CPU time per cycle (runtime/metrics), live-MiB the heap it
// leaves.
func BenchmarkGCMark(b *testing.B) {
	sizes := []int{100_000}
	if os.Getenv("NORN_BENCH_BIG") == "1" {
		sizes = append(sizes, 1_000_000)
	}
	for _, queued := range sizes {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) {
			s := benchStore(b, Opportunistic)
			fill(b, s, "q", queued)
			for done := 0; done < queued/2; {
				ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 1000})
				if err != nil || len(ts) == 0 {
					b.Fatalf("claim: %v (%d tasks)", err, len(ts))
				}
				ops := make([]norn.LeaseOp, len(ts))
				for j, tk := range ts {
					ops[j] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: refOf(tk)}
				}
				if _, err := s.LeaseBatch(bg, ops); err != nil {
					b.Fatal(err)
				}
				done += len(ts)
			}
			runtime.GC()
			sample := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/heap/live:bytes"}}
			metrics.Read(sample)
			gc0 := sample[0].Value.Float64()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				runtime.GC()
			}
			b.StopTimer()
			metrics.Read(sample)
			b.ReportMetric((sample[0].Value.Float64()-gc0)*1000/float64(b.N), "gc-cpu-ms")
			b.ReportMetric(float64(sample[1].Value.Uint64())/(1<<20), "live-MiB")
		})
	}
}
