package postgres

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

var spec200 = []byte(`{"payload":"` + strings.Repeat("x", 186) + `"}`)

func benchBatch(n int) []norn.NewTask {
	nts := make([]norn.NewTask, n)
	for i := range nts {
		nts[i] = norn.NewTask{Queue: "q", Spec: spec200}
	}
	return nts
}

func benchFill(b *testing.B, s *Store, n int) {
	b.Helper()
	for n > 0 {
		k := min(n, 1000)
		if _, err := s.Submit(context.Background(), benchBatch(k)...); err != nil {
			b.Fatal(err)
		}
		n -= k
	}
}

// BenchmarkSubmit measures submits: single ones from 16 goroutines per
// core, and batches of 100 and 1000 in one INSERT each.
func BenchmarkSubmit(b *testing.B) {
	for _, batch := range []int{1, 100, 1000} {
		name := "single"
		if batch > 1 {
			name = fmt.Sprintf("batch%d", batch)
		}
		b.Run(name, func(b *testing.B) {
			s := openTest(b, nil, func(c *Config) { c.DisableMonitor = true })
			nts := benchBatch(batch)
			b.ResetTimer()
			if batch == 1 {
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Submit(context.Background(), nts[0]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for i := 0; i < b.N; i++ {
					if _, err := s.Submit(context.Background(), nts...); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// BenchmarkSubmitPaths measures the submit paths that do not COPY: batches
// with the caller's ids (INSERT … ON CONFLICT), and tasks with unique keys
// (a transaction, the keys' advisory locks, the holder lookup), next to
// the same batches without keys.
func BenchmarkSubmitPaths(b *testing.B) {
	var seq atomic.Int64
	batch := func(n int, keyed bool) []norn.NewTask {
		nts := make([]norn.NewTask, n)
		for i := range nts {
			k := seq.Add(1)
			nts[i] = norn.NewTask{ID: fmt.Sprintf("t-%d", k), Queue: "q", Spec: spec200}
			if keyed {
				nts[i].UniqueKey = fmt.Sprintf("key-%d", k)
			}
		}
		return nts
	}
	for _, c := range []struct {
		name  string
		n     int
		keyed bool
	}{{"ids/single", 1, false}, {"ids/batch100", 100, false}, {"unique/single", 1, true}, {"unique/batch100", 100, true}} {
		b.Run(c.name, func(b *testing.B) {
			s := openTest(b, nil, func(cfg *Config) { cfg.DisableMonitor = true })
			b.ResetTimer()
			if c.n == 1 {
				b.SetParallelism(16)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := s.Submit(context.Background(), batch(1, c.keyed)...); err != nil {
							b.Error(err)
							return
						}
					}
				})
			} else {
				for i := 0; i < b.N; i++ {
					if _, err := s.Submit(context.Background(), batch(c.n, c.keyed)...); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.N*c.n)/b.Elapsed().Seconds(), "tasks/s")
		})
	}
}

// BenchmarkClaimComplete measures work throughput on a queue holding
// 10,000 tasks (1,000,000 with NORN_BENCH_BIG=1): single claim+complete
// from many goroutines, and claims of 100 completed with one LeaseBatch.
func BenchmarkClaimComplete(b *testing.B) {
	sizes := []int{10_000}
	if os.Getenv("NORN_BENCH_BIG") == "1" {
		sizes = append(sizes, 1_000_000)
	}
	for _, queued := range sizes {
		for _, n := range []int{1, 100} {
			b.Run(fmt.Sprintf("queued=%d/n=%d", queued, n), func(b *testing.B) {
				s := openTest(b, nil, func(c *Config) { c.DisableMonitor = true })
				benchFill(b, s, queued)
				var done atomic.Int64
				ctx := context.Background()
				b.ResetTimer()
				if n == 1 {
					b.SetParallelism(8)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}})
							if err != nil || len(ts) != 1 {
								b.Errorf("claim: %v (%d tasks)", err, len(ts))
								return
							}
							if err := s.Complete(ctx, norn.LeaseRef{TaskID: ts[0].ID, Worker: "w", Lease: ts[0].Lease}, nil); err != nil {
								b.Error(err)
								return
							}
							if done.Add(1)%1000 == 0 {
								benchFill(b, s, 1000) // keep the queue length steady
							}
						}
					})
				} else {
					for i := 0; i < b.N; i++ {
						ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n})
						if err != nil || len(ts) != n {
							b.Fatalf("claim: %v (%d tasks)", err, len(ts))
						}
						ops := make([]norn.LeaseOp, len(ts))
						for j, t := range ts {
							ops[j] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: t.ID, Worker: "w", Lease: t.Lease}}
						}
						res, err := s.LeaseBatch(ctx, ops)
						if err != nil {
							b.Fatal(err)
						}
						for _, r := range res {
							if r.Err != nil {
								b.Fatal(r.Err)
							}
						}
						b.StopTimer()
						benchFill(b, s, n)
						b.StartTimer()
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tasks/s")
			})
		}
	}
}

// nopRow is a pgx.Row whose Scan fills nothing: BenchmarkScanRec measures
// the reader's own work and allocations per row, apart from pgx's decoding.
type nopRow struct{}

func (nopRow) Scan(...any) error { return nil }

// BenchmarkScanRec: every claimed, listed or changed task row goes through
// recReader.read. Its scan targets were separate locals, each escaping to
// the heap through Scan's pointers (27 allocations per row), then one
// struct per row (2); now they are the reader's, reused for every row of a
// result set, and a row costs the rec it returns.
func BenchmarkScanRec(b *testing.B) {
	b.ReportAllocs()
	d := newRecReader()
	for b.Loop() {
		if _, err := d.read(nopRow{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCollectClaimed reads 500 claimed task rows (200-byte specs) from
// the database with the claim's column list and decodes them as a claim
// does: pgx's row decoding, the rec reader and the claim's own history entry. The
// allocations per op are the client's garbage per 500 claimed tasks; the
// time includes the SELECT's round trip.
func BenchmarkCollectClaimed(b *testing.B) {
	s := openTest(b, nil, func(c *Config) { c.DisableMonitor = true })
	ctx := context.Background()
	benchFill(b, s, 500)
	if ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 500}); err != nil || len(ts) != 500 {
		b.Fatalf("claim: %v (%d tasks)", err, len(ts))
	}
	sql := s.q(`SELECT ` + colsClaim + ` FROM {s}.tasks t WHERE t.queue = 'q'`)
	b.ReportAllocs()
	for b.Loop() {
		err := s.withConn(ctx, func(conn *pgx.Conn) error {
			rows, err := conn.Query(ctx, sql)
			if err != nil {
				return err
			}
			ts, _, err := collectClaimed(rows)
			if err == nil && len(ts) != 500 {
				err = fmt.Errorf("%d rows", len(ts))
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
