package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	inTopic  = "delay-in"
	outTopic = "delay-out"
	// testIDHeader travels through the bridge untouched (it is not a
	// Chronos header), which lets the tests tell output messages apart.
	testIDHeader = "test-id"
)

// cluster is an in-process Kafka reachable over real TCP.
type cluster struct {
	t    *testing.T
	c    *kfake.Cluster
	dir  string
	port int
}

func startCluster(t *testing.T, persist bool) *cluster {
	t.Helper()
	kc := &cluster{t: t}
	if persist {
		kc.dir = t.TempDir()
	}
	kc.start()
	t.Cleanup(func() { kc.c.Close() })
	return kc
}

func (kc *cluster) start() {
	kc.t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(3, inTopic, outTopic)}
	if kc.port != 0 {
		opts = append(opts, kfake.Ports(kc.port))
	}
	if kc.dir != "" {
		opts = append(opts, kfake.DataDir(kc.dir))
	}
	// The port of a stopped cluster may take a moment to be free again.
	await.Check(kc.t, 10*time.Second, "kfake to start", func() (string, error) {
		var err error
		if kc.c, err = kfake.NewCluster(opts...); err != nil {
			return err.Error(), nil
		}
		return "", nil
	})
	if kc.port == 0 {
		var p int
		if _, err := fmt.Sscanf(portOf(kc.c.ListenAddrs()[0]), "%d", &p); err != nil {
			kc.t.Fatalf("parsing kfake address: %v", err)
		}
		kc.port = p
	}
}

func portOf(addr string) string {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	return addr
}

func (kc *cluster) addrs() []string { return []string{fmt.Sprintf("127.0.0.1:%d", kc.port)} }

// stop closes the cluster; restart brings it back on the same port with
// the same data.
func (kc *cluster) stop()    { kc.c.Close() }
func (kc *cluster) restart() { kc.start() }

// testLogger keeps test output quiet unless NORN_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("NORN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(discard{}, nil))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// testConfig is a bridge configuration for kc with short hold times.
func testConfig(kc *cluster) Config {
	return Config{
		Brokers: kc.addrs(), InTopic: inTopic, OutTopic: outTopic, Group: "g",
		HoldTime: time.Second, PollInterval: 20 * time.Millisecond,
		FailureDetectionInterval: 100 * time.Millisecond, Logger: testLogger(),
	}
}

// node is a running bridge.
type node struct {
	b      *Bridge
	cancel context.CancelFunc
	done   chan struct{}
}

func startNode(t *testing.T, cfg Config, st norn.Store, h hooks) *node {
	t.Helper()
	b, err := New(cfg, st)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.hooks = h
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{b: b, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(n.done)
		if err := b.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(n.stop)
	return n
}

// warmUp returns once the bridge consumes and publishes: it sends a message
// that is already due and waits for it on out. Tests whose timing matters
// call it first, since joining the consumer group can take seconds on a
// loaded machine. The message counts as consumed and fired immediately.
//
// It returns how many messages the bridge n has stored so far: the warm-up
// itself is stored when its immediate publication fails (the producer's
// first connection can exceed the hold time on a loaded machine).
func warmUp(t *testing.T, kc *cluster, out *collector, n *node) int64 {
	t.Helper()
	produce(t, kc, msg{id: "warm-up", deadline: rfc(time.Now().Add(-time.Second))})
	out.waitAll(t, []string{"warm-up"}, 60*time.Second)
	return n.b.Stats().Stored
}

// isWarmUp reports whether a claimed batch is the warm-up message alone
// (hooks that simulate a dying node let it through).
func isWarmUp(ts []*norn.Task) bool {
	return len(ts) == 1 && ts[0].ID == TaskID(DefaultQueue, "warm-up")
}

// stop cancels Run, waits for it and closes the client.
func (n *node) stop() {
	n.cancel()
	<-n.done
	n.b.Close()
}

// msg is a test input message.
type msg struct {
	id       string // chronosMessageId
	deadline string // chronosDeadline
	key      []byte
	value    []byte
	headers  []kgo.RecordHeader
	noID     bool
	noDL     bool
}

func (m msg) record() *kgo.Record {
	r := &kgo.Record{Topic: inTopic, Key: m.key, Value: m.value}
	if !m.noID {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(m.id)})
	}
	if !m.noDL {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderDeadline, Value: []byte(m.deadline)})
	}
	r.Headers = append(r.Headers, m.headers...)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: testIDHeader, Value: []byte(m.id)})
	return r
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func produce(t *testing.T, kc *cluster, msgs ...msg) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.addrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = m.record()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing input: %v", err)
	}
}

// received is one output record with its arrival time.
type received struct {
	rec *kgo.Record
	at  time.Time
}

// collector reads the output topic from the start.
type collector struct {
	mu   sync.Mutex
	byID map[string][]received
	n    atomic.Int64
}

func collect(t *testing.T, kc *cluster) *collector {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.addrs()...), kgo.ConsumeTopics(outTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{byID: map[string][]received{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				id := ""
				for _, h := range r.Headers {
					if h.Key == testIDHeader {
						id = string(h.Value)
					}
				}
				c.mu.Lock()
				c.byID[id] = append(c.byID[id], received{r, now})
				c.mu.Unlock()
				c.n.Add(1)
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return c
}

func (c *collector) get(id string) []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.byID[id]...)
}

// waitAll waits until every id arrived at least once.
func (c *collector) waitAll(t *testing.T, ids []string, within time.Duration) {
	t.Helper()
	waitFor(t, within, func() string {
		var missing []string
		for _, id := range ids {
			if len(c.get(id)) == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) == 0 {
			return ""
		}
		if len(missing) > 5 {
			missing = append(missing[:5], "…")
		}
		return fmt.Sprintf("%d of %d messages missing: %v", len(missing), len(ids), missing)
	})
}

// waitFor waits until cond returns "" (otherwise it says what is still
// missing) or within passes.
func waitFor(t *testing.T, within time.Duration, cond func() string) {
	t.Helper()
	await.Check(t, within, "the condition", func() (string, error) { return cond(), nil })
}

// storeKind names the store a test runs on.
type storeKind string

const (
	memKind      storeKind = "mem"
	embeddedKind storeKind = "embedded"
)
