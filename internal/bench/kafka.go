package bench

import (
	"context"
	"time"

	"github.com/nornq/norn"
	kafkabridge "github.com/nornq/norn/bridge/kafka"
)

// Kafka drives messages through the Kafka delay bridge (DESIGN §7) at
// cfg.Rate with deadlines cfg.Delay ahead and reports firing lateness =
// receive time on the output topic − deadline. With no cfg.KafkaBrokers it
// runs franz-go's in-process Kafka over TCP. It is not part of "all": its
// default (1,000 msg/s, the Chronos SLA, for 10 s) answers a different
// question from the store workloads.
func Kafka(ctx context.Context, st norn.Store, env Env, cfg Config) (Result, error) {
	rate := cfg.Rate
	if rate <= 0 {
		rate = 1000
	}
	delay := cfg.Delay
	if delay <= 0 {
		delay = 3 * time.Second
	}
	bc := kafkabridge.BenchConfig{Brokers: cfg.KafkaBrokers, Rate: rate, Delay: delay, N: cfg.Tasks, Nodes: cfg.KafkaNodes}
	res, err := kafkabridge.Bench(ctx, st, bc)
	if err != nil {
		return Result{}, err
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	r := env.result("kafka")
	r.Tasks, r.Seconds, r.TasksPerS, r.Rate = res.Received, res.Seconds, res.Throughput, rate
	r.Workers = max(cfg.KafkaNodes, 1)
	r.P50ms, r.P99ms, r.P999ms, r.Maxms = ms(res.P50), ms(res.P99), ms(res.P999), ms(res.Max)
	return r, nil
}
