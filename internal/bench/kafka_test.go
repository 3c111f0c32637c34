package bench

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestKafkaRun runs the bridge benchmark small, so `norn bench kafka` is
// known to work and to count every message.
func TestKafkaRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	r, err := KafkaRun(ctx, openEmbedded(t), KafkaConfig{Rate: 200, N: 100, Delay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent != 100 || r.Received != 100 || r.Duplicates != 0 {
		t.Errorf("result %v", r)
	}
	if r.P50 > r.P99 || r.P99 > r.P999 || r.P999 > r.Max || r.Early < r.EarlyOver5ms || r.EarlyP999 > r.MaxEarly {
		t.Errorf("figures out of order: %v", r)
	}
	t.Log(r)
}

// TestKafkaLateness checks how the early and late figures are derived.
func TestKafkaLateness(t *testing.T) {
	t.Parallel()
	var late []time.Duration
	for i := -10; i < 990; i++ { // 10 early: -10..-1 ms
		late = append(late, time.Duration(i)*time.Millisecond)
	}
	r := KafkaResult{Received: len(late)}
	r.lateness(late)
	if r.Early != 10 || r.EarlyOver5ms != 5 || r.MaxEarly != 10*time.Millisecond || r.EarlyP999 != 10*time.Millisecond {
		t.Errorf("early figures %+v", r)
	}
	if r.P50 != 489*time.Millisecond || r.Max != 989*time.Millisecond || r.pct(r.Early) != 1 {
		t.Errorf("late figures %+v", r)
	}
	r = KafkaResult{Received: 3}
	r.lateness([]time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond})
	if r.Early != 0 || r.MaxEarly != 0 || r.EarlyP999 != 0 || r.P50 != 2*time.Millisecond {
		t.Errorf("all late: %+v", r)
	}
}

// BenchmarkKafkaRoundTrip sends b.N messages with a short delay through one
// bridge node and reports the firing lateness.
func BenchmarkKafkaRoundTrip(b *testing.B) {
	r, err := KafkaRun(context.Background(), openEmbedded(b), KafkaConfig{Rate: 5000, N: max(b.N, 10), Delay: 200 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	reportKafka(b, r)
}

// BenchmarkKafkaSLA is the Chronos SLA run: 1,000 msg/s for 10 s with a 3 s
// delay (NORN_BENCH_BIG=1 only; it takes ~15 s).
func BenchmarkKafkaSLA(b *testing.B) {
	if os.Getenv("NORN_BENCH_BIG") == "" {
		b.Skip("set NORN_BENCH_BIG=1 to run the 10 s SLA benchmark")
	}
	for i := 0; i < b.N; i++ {
		r, err := KafkaRun(context.Background(), openEmbedded(b), KafkaConfig{Rate: 1000, N: 10000, Delay: 3 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Log(r)
		reportKafka(b, r)
	}
}

// BenchmarkKafkaSLAPostgres is BenchmarkKafkaSLA on the Postgres store with
// two bridge nodes, each with its own connection (NORN_BENCH_BIG=1 only).
func BenchmarkKafkaSLAPostgres(b *testing.B) {
	if os.Getenv("NORN_BENCH_BIG") == "" {
		b.Skip("set NORN_BENCH_BIG=1 to run the 10 s SLA benchmark")
	}
	url, schema := pgtest.Schema(b)
	st, err := postgres.Open(context.Background(), postgres.Config{URL: url, Schema: schema, Migrate: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := 0; i < b.N; i++ {
		r, err := KafkaRun(context.Background(), norn.Store(st), KafkaConfig{Rate: 1000, N: 10000, Delay: 3 * time.Second, Nodes: 2})
		if err != nil {
			b.Fatal(err)
		}
		b.Log(r)
		reportKafka(b, r)
	}
}

func reportKafka(b *testing.B, r KafkaResult) {
	b.ReportMetric(r.Throughput, "msg/s")
	b.ReportMetric(ms(r.P50), "p50-ms")
	b.ReportMetric(ms(r.P99), "p99-ms")
	b.ReportMetric(ms(r.P999), "p99.9-ms")
	b.ReportMetric(ms(r.Max), "max-ms")
	b.ReportMetric(r.pct(r.EarlyOver5ms), "early>5ms-%")
}
