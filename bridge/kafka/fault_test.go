package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nornq/norn/store/embedded"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The total-queue checker of the bridge: producers publish delayed messages
// with their own ids and retry each until Kafka acknowledges it, while a
// nemesis kills the bridge process (SIGKILL) and restarts the Kafka
// cluster on a schedule. Afterwards every acknowledged message must have
// come out (lost = 0), nothing must have come out that nobody sent
// (unexpected = 0), and the duplicates must stay within what docs/kafka.md
// promises: per crash of the bridge or restart of Kafka, at most the
// messages the node held (ClaimBatch × FireConcurrency) plus the input
// consumed since its last offset commit (one poll, MaxPollRecords), plus
// one per message a producer had to send again.
//
// The bridge runs in a child process (this test binary, re-executed), so
// kill -9 is real: nothing of it runs after the signal. The short form runs
// in `go test ./...`; NORN_FAULT_MINUTES=M runs it for M minutes.

// childEnv names the environment variable that makes the test binary a
// bridge process instead of running tests; its value is the store directory.
const childEnv = "NORN_KAFKA_BRIDGE_CHILD"

// Settings of the bridge under test, small enough that the duplicate bound
// is meaningful at the test's rate.
const (
	faultClaimBatch      = 50
	faultFireConcurrency = 2
	faultMaxPollRecords  = 100
	faultHoldTime        = time.Second
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(runChild(dir))
	}
	pgTestMain(m)
}

// runChild is the bridge process: the embedded store in dir, the broker and
// topics from the environment, until SIGTERM (or SIGKILL).
func runChild(dir string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log := testLogger()
	st, err := embedded.Open(ctx, embedded.Options{Dir: dir, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "opening the store:", err)
		return 1
	}
	defer st.Close()
	b, err := New(Config{
		Brokers: strings.Split(os.Getenv("NORN_KAFKA_BROKERS"), ","), InTopic: inTopic, OutTopic: outTopic, Group: "fault",
		HoldTime: faultHoldTime, PollInterval: 20 * time.Millisecond, FailureDetectionInterval: 100 * time.Millisecond,
		ClaimBatch: faultClaimBatch, FireConcurrency: faultFireConcurrency, MaxPollRecords: faultMaxPollRecords,
		Logger:    log,
		extraOpts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(time.Second)},
	}, st)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the bridge:", err)
		return 1
	}
	defer b.Close()
	_ = b.Run(ctx)
	return 0
}

// child is a bridge process the test can kill and restart.
type child struct {
	t       *testing.T
	dir     string
	brokers string
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
}

func (c *child) start() {
	c.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+c.dir, "NORN_KAFKA_BROKERS="+c.brokers)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("starting the bridge process: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.cmd, c.done = cmd, done
	c.mu.Unlock()
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill() {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// faultMinutes is the run length asked for with NORN_FAULT_MINUTES (0: the
// short form).
func faultMinutes(t *testing.T) time.Duration {
	v := os.Getenv("NORN_FAULT_MINUTES")
	if v == "" {
		return 0
	}
	m, err := strconv.ParseFloat(v, 64)
	if err != nil || m <= 0 {
		t.Fatalf("NORN_FAULT_MINUTES=%q: want a positive number of minutes", v)
	}
	return time.Duration(m * float64(time.Minute))
}

// sent tracks what the producers attempted and what Kafka acknowledged.
type sent struct {
	mu        sync.Mutex
	attempted map[string]bool
	acked     map[string]bool
	resends   int
}

func TestFaultsTotalQueue(t *testing.T) {
	length := 12 * time.Second
	if m := faultMinutes(t); m > 0 {
		length = m
	} else if testing.Short() {
		t.Skip("the fault run takes about half a minute")
	}
	kc := startCluster(t, true)
	out := collect(t, kc)
	bridge := &child{t: t, dir: t.TempDir(), brokers: strings.Join(kc.addrs(), ",")}
	bridge.start()
	t.Cleanup(bridge.kill)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &sent{attempted: map[string]bool{}, acked: map[string]bool{}}
	const producers = 4
	const perProducerRate = 50 // messages per second
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			produceUntilStopped(ctx, t, kc, s, p, perProducerRate)
		}()
	}

	// The nemesis: alternately kill -9 the bridge and restart Kafka.
	var kills, kafkaRestarts atomic.Int64
	end := time.Now().Add(length)
	for i := 0; time.Now().Before(end); i++ {
		time.Sleep(time.Duration(800+rand.IntN(1200)) * time.Millisecond)
		if i%2 == 0 {
			bridge.kill()
			kills.Add(1)
			time.Sleep(time.Duration(rand.IntN(500)) * time.Millisecond)
			bridge.start()
		} else {
			kc.stop()
			kafkaRestarts.Add(1)
			time.Sleep(time.Duration(200+rand.IntN(800)) * time.Millisecond)
			kc.restart()
		}
	}
	cancel()
	wg.Wait()

	s.mu.Lock()
	acked := make([]string, 0, len(s.acked))
	for id := range s.acked {
		acked = append(acked, id)
	}
	attempted := len(s.attempted)
	resends := s.resends
	s.mu.Unlock()
	// Deadlines are at most 2 s ahead; allow for take-overs after the hold.
	waitFor(t, 90*time.Second, func() string {
		var missing int
		for _, id := range acked {
			if len(out.get(id)) == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Sprintf("%d of %d acknowledged messages not delivered (yet)", missing, len(acked))
		}
		return ""
	})
	time.Sleep(2 * faultHoldTime) // let late duplicates arrive before counting them

	out.mu.Lock()
	var unexpected, duplicates, delivered int
	for id, got := range out.byID {
		if !s.attempted[id] {
			unexpected++
			continue
		}
		delivered++
		duplicates += len(got) - 1
	}
	out.mu.Unlock()
	faults := int(kills.Load() + kafkaRestarts.Load())
	bound := faults*(faultClaimBatch*faultFireConcurrency+faultMaxPollRecords) + resends
	t.Logf("%s: %d attempted, %d acknowledged, %d delivered, lost 0, unexpected %d, duplicates %d (bound %d); "+
		"%d bridge kills, %d Kafka restarts, %d producer resends",
		length, attempted, len(acked), delivered, unexpected, duplicates, bound, kills.Load(), kafkaRestarts.Load(), resends)
	if unexpected > 0 {
		t.Errorf("%d messages delivered that no producer sent", unexpected)
	}
	if duplicates > bound {
		t.Errorf("%d duplicates, more than the promised bound %d", duplicates, bound)
	}
	if len(acked) == 0 || faults == 0 {
		t.Errorf("the run checked nothing: %d acknowledged, %d faults", len(acked), faults)
	}
}

// produceUntilStopped publishes messages at rate per second, each with its
// own id and a deadline up to 2 s ahead, retrying each until Kafka
// acknowledges it or ctx ends.
func produceUntilStopped(ctx context.Context, t *testing.T, kc *cluster, s *sent, p, rate int) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.addrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
		kgo.RecordDeliveryTimeout(3*time.Second))
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		id := fmt.Sprintf("p%d-%d", p, i)
		m := msg{id: id, deadline: rfc(time.Now().Add(time.Duration(rand.IntN(2000)) * time.Millisecond)), value: []byte(id)}
		s.mu.Lock()
		s.attempted[id] = true
		s.mu.Unlock()
		for try := 0; ; try++ {
			if try > 0 {
				s.mu.Lock()
				s.resends++
				s.mu.Unlock()
			}
			pctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := cl.ProduceSync(pctx, m.record()).FirstErr()
			cancel()
			if err == nil {
				s.mu.Lock()
				s.acked[id] = true
				s.mu.Unlock()
				break
			}
			if ctx.Err() != nil {
				return // not acknowledged: neither promised nor lost
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
