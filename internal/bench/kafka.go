package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/bridge/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kafka drives messages through the Kafka delay bridge at cfg.Rate with
// deadlines cfg.Delay ahead and reports firing lateness = receive time on the
// output topic − deadline, early and late separately. With no
// cfg.KafkaBrokers it runs franz-go's in-process Kafka over TCP. It is not
// part of "all": its default (1,000 msg/s, the Chronos SLA, for 10 s) answers
// a different question from the store workloads.
func Kafka(ctx context.Context, st norn.Store, env Env, cfg Config) (Result, error) {
	res, err := KafkaRun(ctx, st, KafkaConfig{Brokers: cfg.KafkaBrokers, Rate: cfg.Rate, Delay: cfg.Delay,
		N: cfg.Tasks, Nodes: cfg.KafkaNodes, Bridge: kafka.Config{TimingAdvance: cfg.KafkaTimingAdvance}})
	if err != nil {
		return Result{}, err
	}
	r := env.result("kafka")
	r.Tasks, r.Seconds, r.TasksPerS, r.Rate = res.Received, res.Seconds, res.Throughput, res.Rate
	r.Workers = res.Nodes
	r.P50ms, r.P99ms, r.P999ms, r.Maxms = ms(res.P50), ms(res.P99), ms(res.P999), ms(res.Max)
	r.EarlyPct, r.EarlyOver5msPct = res.pct(res.Early), res.pct(res.EarlyOver5ms)
	r.EarlyP999ms, r.MaxEarlyms = ms(res.EarlyP999), ms(res.MaxEarly)
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// KafkaConfig parameterises KafkaRun. Zero fields take the documented defaults.
type KafkaConfig struct {
	// Brokers of the Kafka cluster to use; empty starts an in-process
	// cluster (franz-go's kfake, one broker, over TCP on localhost).
	Brokers []string
	// Rate is the offered load in messages per second (default 1,000, the
	// Chronos SLA).
	Rate float64
	// Delay is each message's deadline relative to when it is sent (default 3s).
	Delay time.Duration
	// N is how many messages are sent (default Rate × 10 s).
	N int
	// Nodes is how many bridge nodes share the work (default 1).
	Nodes int
	// Partitions of the topics the benchmark creates (default 4).
	Partitions int32
	// Bridge is the base configuration of the bridge nodes; Brokers, the
	// topics, the group and the queue are set per run so runs never mix.
	Bridge kafka.Config
	// Logger for the bridge nodes (default: discard).
	Logger *slog.Logger
}

// KafkaResult is what KafkaRun measured. Lateness is receive time on the
// output topic minus the deadline: negative is early.
type KafkaResult struct {
	Sent     int
	Received int
	// Duplicates counts messages received more than once.
	Duplicates int
	Nodes      int
	// Rate is the offered rate.
	Rate float64
	// Seconds from the first send to the last receipt.
	Seconds float64
	// Throughput is distinct messages received per second, over the window
	// from the first to the last receipt (at most the offered Rate).
	Throughput float64
	// Signed lateness percentiles.
	P50, P99, P999, Max time.Duration
	// Early counts messages received before their deadline, EarlyOver5ms
	// those received more than 5 ms before it.
	Early, EarlyOver5ms int
	// EarlyP999 is how early the earliest 0.1% begin (0 if fewer than 0.1%
	// are early); MaxEarly how early the earliest message was (0 if none).
	EarlyP999, MaxEarly time.Duration
}

func (r KafkaResult) pct(n int) float64 {
	if r.Received == 0 {
		return 0
	}
	return 100 * float64(n) / float64(r.Received)
}

var kafkaSeq atomic.Int64

// seqHeader carries the message number through the bridge (it is not a
// Chronos header, so it is relayed).
const seqHeader = "norn-bench-seq"

// KafkaRun drives N messages at Rate through bridge nodes running on st,
// each due Delay after it is sent, and measures firing lateness at a
// consumer of the output topic (this includes the consumer's own fetch
// latency).
func KafkaRun(ctx context.Context, st norn.Store, cfg KafkaConfig) (KafkaResult, error) {
	cfg.defaults()
	run := strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 10) + "-" + strconv.FormatInt(kafkaSeq.Add(1), 10)
	in, out := "norn-bench-in-"+run, "norn-bench-out-"+run
	brokers := cfg.Brokers
	if len(brokers) == 0 {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(cfg.Partitions, in, out))
		if err != nil {
			return KafkaResult{}, fmt.Errorf("starting in-process kafka: %w", err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
	}
	bc := cfg.Bridge
	bc.Brokers, bc.InTopic, bc.OutTopic = brokers, in, out
	bc.Group, bc.Queue, bc.Logger, bc.Registerer = "norn-bench-"+run, "norn.kafka-bench-"+run, cfg.Logger, nil
	if err := bc.Validate(); err != nil {
		return KafkaResult{}, err
	}
	opts, err := bc.ClientOptions()
	if err != nil {
		return KafkaResult{}, err
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DefaultProduceTopic(in), kgo.ProducerLinger(time.Millisecond), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return KafkaResult{}, err
	}
	defer cl.Close()
	if len(cfg.Brokers) > 0 {
		if err := createTopics(ctx, cl, cfg.Partitions, in, out); err != nil {
			return KafkaResult{}, err
		}
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = st.DeleteMatching(cctx, norn.Filter{Queues: []string{bc.Queue}})
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var nodes sync.WaitGroup
	for i := 0; i < cfg.Nodes; i++ {
		b, err := kafka.New(bc, st)
		if err != nil {
			return KafkaResult{}, err
		}
		nodes.Add(1)
		go func() {
			defer nodes.Done()
			defer b.Close()
			_ = b.Run(ctx)
		}()
	}
	defer nodes.Wait()
	defer cancel()
	return measureKafka(ctx, cancel, cl, cfg, in, run)
}

// defaults fills in the settings left zero.
func (cfg *KafkaConfig) defaults() {
	if cfg.Rate <= 0 {
		cfg.Rate = 1000
	}
	if cfg.Delay <= 0 {
		cfg.Delay = 3 * time.Second
	}
	if cfg.N <= 0 {
		cfg.N = int(cfg.Rate * 10)
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 1
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

// kafkaMeasure is what the consumer of the output topic saw: each
// message's deadline as sent, whether it arrived, and how late.
type kafkaMeasure struct {
	n                   int
	mu                  sync.Mutex
	deadlines           []time.Time
	seen                []bool
	late                []time.Duration
	duplicates          int
	firstRecv, lastRecv time.Time
	received            atomic.Int64
}

// measureKafka sends cfg.N messages to topic in through cl and receives
// them from the output topic, with the bridge nodes running.
func measureKafka(ctx context.Context, cancel context.CancelFunc, cl *kgo.Client, cfg KafkaConfig, in, run string) (KafkaResult, error) {
	m := &kafkaMeasure{n: cfg.N, deadlines: make([]time.Time, cfg.N), seen: make([]bool, cfg.N),
		late: make([]time.Duration, 0, cfg.N)}
	res := KafkaResult{Nodes: cfg.Nodes, Rate: cfg.Rate}
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		m.receive(ctx, cl)
	}()
	start := time.Now()
	sent, err := m.send(ctx, cl, cfg, in, run, start)
	if err != nil {
		return KafkaResult{}, err
	}
	res.Sent = sent
	wait := cfg.Delay + 60*time.Second
	select {
	case <-recvDone:
	case <-time.After(time.Until(start.Add(time.Duration(float64(cfg.N)/cfg.Rate*float64(time.Second)) + wait))):
		cancel()
		<-recvDone
	case <-ctx.Done():
		<-recvDone
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	res.Duplicates = m.duplicates
	res.Received = len(m.late)
	if res.Received < cfg.N {
		return res, fmt.Errorf("only %d of %d messages came out within %s of their deadline", res.Received, cfg.N, wait)
	}
	res.Seconds = m.lastRecv.Sub(start).Seconds()
	if win := m.lastRecv.Sub(m.firstRecv).Seconds(); win > 0 {
		res.Throughput = float64(res.Received) / win
	} else if res.Seconds > 0 {
		res.Throughput = float64(res.Received) / res.Seconds
	}
	res.lateness(m.late)
	return res, nil
}

// receive consumes the output topic until every message arrived or ctx
// ends.
func (m *kafkaMeasure) receive(ctx context.Context, cl *kgo.Client) {
	for m.received.Load() < int64(m.n) && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Now()
		fs.EachRecord(func(r *kgo.Record) {
			seq := -1
			for _, h := range r.Headers {
				if h.Key == seqHeader && len(h.Value) == 8 {
					seq = int(binary.BigEndian.Uint64(h.Value))
				}
			}
			if seq < 0 || seq >= m.n {
				return
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.seen[seq] {
				m.duplicates++
				return
			}
			m.seen[seq] = true
			m.late = append(m.late, now.Sub(m.deadlines[seq]))
			if m.firstRecv.IsZero() {
				m.firstRecv = now
			}
			m.lastRecv = now
			m.received.Add(1)
		})
	}
}

// send produces the messages at cfg.Rate from start, in 10ms slices so the
// offered rate is smooth, and returns how many it sent.
func (m *kafkaMeasure) send(ctx context.Context, cl *kgo.Client, cfg KafkaConfig, in, run string, start time.Time) (int, error) {
	const slice = 10 * time.Millisecond
	var produceErr atomic.Value
	sent := 0
	value := make([]byte, 200)
	for sent < cfg.N && ctx.Err() == nil {
		due := int(math.Min(float64(cfg.N), cfg.Rate*time.Since(start).Seconds()+1))
		for ; sent < due; sent++ {
			now := time.Now()
			dl := now.Add(cfg.Delay)
			m.mu.Lock()
			m.deadlines[sent] = dl
			m.mu.Unlock()
			seq := make([]byte, 8)
			binary.BigEndian.PutUint64(seq, uint64(sent))
			cl.Produce(ctx, &kgo.Record{Topic: in, Key: seq, Value: value, Headers: []kgo.RecordHeader{
				{Key: kafka.HeaderMessageID, Value: []byte("bench-" + run + "-" + strconv.Itoa(sent))},
				{Key: kafka.HeaderDeadline, Value: []byte(dl.UTC().Format(time.RFC3339Nano))},
				{Key: seqHeader, Value: seq},
			}}, func(_ *kgo.Record, err error) {
				if err != nil && ctx.Err() == nil {
					produceErr.CompareAndSwap(nil, err)
				}
			})
		}
		if v := produceErr.Load(); v != nil {
			return sent, fmt.Errorf("producing input: %w", v.(error))
		}
		select {
		case <-ctx.Done():
		case <-time.After(slice):
		}
	}
	return sent, nil
}

// lateness fills the percentiles and the early figures from the measured
// lateness of every message (it sorts late).
func (r *KafkaResult) lateness(late []time.Duration) {
	if len(late) == 0 {
		return
	}
	slices.Sort(late)
	pct := func(p float64) time.Duration { return late[max(int(math.Ceil(p*float64(len(late))))-1, 0)] }
	r.P50, r.P99, r.P999, r.Max = pct(0.5), pct(0.99), pct(0.999), late[len(late)-1]
	for _, l := range late {
		if l >= 0 {
			break
		}
		r.Early++
		if l < -5*time.Millisecond {
			r.EarlyOver5ms++
		}
	}
	r.MaxEarly = max(-late[0], 0)
	r.EarlyP999 = max(-pct(0.001), 0)
}

// createTopics creates the benchmark's topics on an external cluster.
func createTopics(ctx context.Context, cl *kgo.Client, partitions int32, topics ...string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = 30000
	for _, t := range topics {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = t, partitions, -1
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("creating benchmark topics: %w", err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", t.Topic, err)
		}
	}
	return nil
}
