package kafkabridge

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/postgres"
)

// TestBench runs the benchmark driver small, so `norn bench delay` is known
// to work and to count every message.
func TestBench(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := Bench(ctx, newStore(t), BenchConfig{Rate: 200, N: 100, Delay: 500 * time.Millisecond,
		Bridge: Config{PollInterval: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 100 || r.Received != 100 || r.Duplicates != 0 {
		t.Errorf("result %v", r)
	}
	if r.P50 > r.P99 || r.P99 > r.P999 || r.P999 > r.Max || r.Max <= -DefaultTimingAdvance-10*time.Millisecond {
		t.Errorf("percentiles out of order: %v", r)
	}
	t.Log(r)
}

// BenchmarkRoundTrip sends b.N messages with a short delay through one
// bridge node and reports the firing lateness.
func BenchmarkRoundTrip(b *testing.B) {
	ctx := context.Background()
	r, err := Bench(ctx, newStore(b), BenchConfig{Rate: 5000, N: max(b.N, 10), Delay: 200 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	reportBench(b, r)
}

// BenchmarkSLA is the Chronos SLA run: 1,000 msg/s for 10 s with a 3 s
// delay (NORN_BENCH_BIG=1 only; it takes ~15 s).
func BenchmarkSLA(b *testing.B) {
	if os.Getenv("NORN_BENCH_BIG") == "" {
		b.Skip("set NORN_BENCH_BIG=1 to run the 10 s SLA benchmark")
	}
	for i := 0; i < b.N; i++ {
		r, err := Bench(context.Background(), newStore(b), BenchConfig{Rate: 1000, N: 10000, Delay: 3 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Log(r)
		reportBench(b, r)
	}
}

// BenchmarkSLAPostgres is BenchmarkSLA on the Postgres store with two
// bridge nodes, each with its own connection (NORN_BENCH_BIG=1 only).
func BenchmarkSLAPostgres(b *testing.B) {
	if os.Getenv("NORN_BENCH_BIG") == "" {
		b.Skip("set NORN_BENCH_BIG=1 to run the 10 s SLA benchmark")
	}
	url, schema := pgtest.Schema(b)
	st, err := postgres.Open(context.Background(), postgres.Config{URL: url, Schema: schema, Migrate: true, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := 0; i < b.N; i++ {
		r, err := Bench(context.Background(), st, BenchConfig{Rate: 1000, N: 10000, Delay: 3 * time.Second, Nodes: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Log(r)
		reportBench(b, r)
	}
}

func reportBench(b *testing.B, r BenchResult) {
	b.ReportMetric(r.Throughput, "msg/s")
	b.ReportMetric(float64(r.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.P99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(r.P999.Microseconds())/1000, "p99.9-ms")
	b.ReportMetric(float64(r.Max.Microseconds())/1000, "max-ms")
}
