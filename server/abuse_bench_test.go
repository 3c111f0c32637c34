package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn/internal/proccpu"
	"github.com/nornq/norn/store/embedded"
)

// BenchmarkNormalClientUnderAbuse measures what an ordinary client's
// requests (GET /v1/tasks/{id} with a token, on a kept-alive connection)
// take while another caller abuses the server the way docs/security.md
// bounds, on a real server over loopback with the embedded store:
//
//   - queues-100k-metrics-polled: 100,000 queues of one task each exist
//     and four loops scrape /metrics without a token;
//   - sse-256-batches-2000: one token asks for 256 event streams (the
//     server lets it hold MaxEventStreamsPerCaller of them; accepted-streams
//     says how many), drains them, and submits batches of 2,000 tasks in
//     a loop;
//   - sse-256-allowed-batches-2000: the same with the limit raised so all
//     256 streams are open, which measures the event hub rather than the
//     limit (as 16 tokens holding 16 streams each would, within the
//     server's MaxEventStreams);
//   - sse-64-allowed-batches-2000: the same with 64 streams, between the
//     two;
//   - batches-2000-no-streams: the batches alone, the control that tells
//     the streams' cost from the submissions'.
//
// The batch and stream abuser runs in a process of its own (runAbuser), as
// a real client would, so that its readers and its submitting loop neither
// take the server's Go processors nor count as the server's work; it still
// competes with the server for the machine's cores. The abuse runs for
// half a second before the ordinary client starts. Each iteration is two
// seconds of that client: a request every 5 ms (about 400); p50-ms, p99-ms
// and max-ms are over all of them. abuse-batches/s and scrapes/s are the
// abuser's rates while measured; server-cpu-ms/batch is the CPU time the
// server's process spent per batch (the fan-out to the streams included),
// a figure that other load on the machine changes little;
// streamed-MB/batch is what all the streams read per batch, and
// abuser-cpu-ms/batch the abuser's own CPU. The process runs with
// GOMAXPROCS raised as `norn server` raises it (RaiseProcs). Run each
// scenario in a process of its own, on a quiet machine (after the
// 100,000-queue scenario the process keeps a large heap, which raises the
// later scenarios' figures), for example
//
//	go test -run '^$' -bench 'NormalClientUnderAbuse/batches-2000-no-streams$' -benchtime 2x ./server/
func BenchmarkNormalClientUnderAbuse(b *testing.B) {
	// As `norn server` runs (procs.go); GOMAXPROCS=2 in the environment
	// measures without it.
	defer runtime.GOMAXPROCS(RaiseProcs())
	b.Run("queues-100k-metrics-polled", func(b *testing.B) {
		base, client, stop := abuseServer(b, nil)
		defer stop()
		const queues, batch = 100_000, 10_000
		for start := 0; start < queues; start += batch {
			var sb strings.Builder
			sb.WriteString(`{"tasks":[`)
			for i := start; i < start+batch; i++ {
				if i > start {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, `{"queue":"abuse-%06d"}`, i)
			}
			sb.WriteString(`]}`)
			mustDo(b, client, "POST", base+"/v1/tasks/batch", "abuse", sb.String(), 200)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var scrapes atomic.Int64
		start := time.Now()
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
					if resp, err := client.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						scrapes.Add(1)
					}
				}
			})
		}
		normalClient(b, base)
		rate := float64(scrapes.Load()) / time.Since(start).Seconds()
		cancel()
		wg.Wait()
		b.ReportMetric(rate, "scrapes/s")
	})
	for _, c := range []struct {
		name    string
		streams int // asked for
		allowed int // MaxEventStreamsPerCaller (0: the default)
	}{{"batches-2000-no-streams", 0, 0}, {"sse-256-batches-2000", 256, 0}, {"sse-256-allowed-batches-2000", 256, 256}, {"sse-32-allowed-batches-2000", 32, 32}, {"sse-64-allowed-batches-2000", 64, 64}} {
		b.Run(c.name, func(b *testing.B) {
			base, _, stop := abuseServer(b, func(cfg *Config) {
				if c.allowed > 0 {
					cfg.MaxEventStreamsPerCaller = c.allowed
				}
			})
			defer stop()
			ab := startAbuser(b, base, c.streams)
			start, cpu := time.Now(), proccpu.Used()
			normalClient(b, base)
			batches, streamed, abuserCPU := ab.stop(b)
			cpu = proccpu.Used() - cpu
			b.ReportMetric(float64(ab.accepted), "accepted-streams")
			b.ReportMetric(float64(batches)/time.Since(start).Seconds(), "abuse-batches/s")
			// What the server spends per batch, its streams' events
			// included (the ordinary client's share is small), whatever
			// else runs on the machine.
			b.ReportMetric(float64(cpu)/float64(time.Millisecond)/float64(max(batches, 1)), "server-cpu-ms/batch")
			// What the streams carried per batch, all of them together: a
			// batch's events are about 350 KB a stream, less when the store's
			// subscription fell behind and the streams got Lagged instead.
			b.ReportMetric(float64(streamed)/1e6/float64(max(batches, 1)), "streamed-MB/batch")
			// The abuser's own CPU per batch: on a small machine it takes
			// cores the server would have.
			b.ReportMetric(float64(abuserCPU)/float64(time.Millisecond)/float64(max(batches, 1)), "abuser-cpu-ms/batch")
		})
	}
}

// The abusing client of the batch and stream scenarios runs in a process
// of its own, as a real one would: in the server's process its readers
// and its submitting loop would take the server's Go processors (the 16
// readers alone went through about 150,000 scheduling events in 2.5 s)
// and its goroutines would be counted as the server's load. It still
// competes with the server for the machine's cores.
const abuserEnv = "NORN_ABUSE_CHILD"

// TestMain runs the abusing client when the benchmark starts this test
// binary as one, and the tests otherwise.
func TestMain(m *testing.M) {
	if base := os.Getenv(abuserEnv); base != "" {
		os.Exit(runAbuser(base))
	}
	os.Exit(m.Run())
}

// abuser is the abusing client's process.
type abuser struct {
	cmd      *exec.Cmd
	in       io.Closer
	out      *bufio.Reader
	accepted int
}

// startAbuser starts the abusing client against base with the given
// number of event streams asked for, and returns once it has them open
// and submits batches.
func startAbuser(b *testing.B, base string, streams int) *abuser {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), abuserEnv+"="+base, fmt.Sprintf("%s_STREAMS=%d", abuserEnv, streams))
	cmd.Stderr = os.Stderr
	// The abuser stops when its standard input closes: when stop closes
	// it, or when this process ends however it ends.
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	a := &abuser{cmd: cmd, in: in, out: bufio.NewReader(out)}
	line, err := a.out.ReadString('\n')
	if _, serr := fmt.Sscanf(line, "accepted %d", &a.accepted); err != nil || serr != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.Fatalf("abusing client: %q %v %v", line, err, serr)
	}
	return a
}

// stop ends the abusing client and returns how many batches it submitted,
// how many bytes its streams read and the CPU time it used since it
// started.
func (a *abuser) stop(b *testing.B) (batches int, streamed int64, cpu time.Duration) {
	b.Helper()
	_ = a.in.Close()
	line, _ := a.out.ReadString('\n')
	_ = a.cmd.Wait()
	if _, err := fmt.Sscanf(line, "batches %d streamed %d", &batches, &streamed); err != nil {
		b.Fatalf("abusing client: %q: %v", line, err)
	}
	if st := a.cmd.ProcessState; st != nil {
		cpu = st.UserTime() + st.SystemTime()
	}
	return batches, streamed, cpu
}

// runAbuser is the abusing client: it asks for NORN_ABUSE_CHILD_STREAMS
// event streams with the "abuse" token and drains those accepted, prints
// "accepted N", then submits batches of 2,000 tasks in a loop until its
// standard input closes, and prints "batches N streamed BYTES".
func runAbuser(base string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	streams, _ := strconv.Atoi(os.Getenv(abuserEnv + "_STREAMS"))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	var wg sync.WaitGroup
	var streamed atomic.Int64
	accepted := 0
	for range streams {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer abuse")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if resp.StatusCode != 200 {
			resp.Body.Close()
			continue
		}
		accepted++
		wg.Go(func() {
			defer resp.Body.Close()
			n, _ := io.Copy(io.Discard, resp.Body)
			streamed.Add(n)
		})
	}
	var sb strings.Builder
	sb.WriteString(`{"tasks":[`)
	for i := range 2000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"queue":"abuse","spec":{"n":1}}`)
	}
	sb.WriteString(`]}`)
	body := sb.String()
	fmt.Printf("accepted %d\n", accepted)
	batches := 0
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/tasks/batch", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer abuse")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				batches++
			}
		}
	}
	wg.Wait()
	fmt.Printf("batches %d streamed %d\n", batches, streamed.Load())
	return 0
}

// abuseServer runs a server with an ordinary client token "ok" and an
// abusing one "abuse" on loopback, over an embedded store with the default
// durability, and returns its base URL and an HTTP client with enough
// connections for both.
func abuseServer(b *testing.B, mod func(*Config)) (string, *http.Client, func()) {
	b.Helper()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Addr: "127.0.0.1:0", Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Tokens: []Token{{Token: "ok", Role: RoleClient}, {Token: "abuse", Role: RoleClient}}}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}}
	return s.URL(), client, func() {
		cancel()
		<-done
		st.Close()
	}
}

// normalClient is the ordinary client: GET /v1/tasks/{id} with the "ok"
// token every 5 ms for two seconds per iteration; it reports the latency
// percentiles.
func normalClient(b *testing.B, base string) {
	b.Helper()
	// Its own connection, as a separate client would have.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	mustDo(b, client, "POST", base+"/v1/tasks", "ok", `{"id":"normal","queue":"normal"}`, 201)
	time.Sleep(500 * time.Millisecond) // the abuse reaches its pace
	var lat []time.Duration
	for b.Loop() {
		tick := time.NewTicker(5 * time.Millisecond)
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); <-tick.C {
			start := time.Now()
			mustDo(b, client, "GET", base+"/v1/tasks/normal", "ok", "", 200)
			lat = append(lat, time.Since(start))
		}
		tick.Stop()
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}

func mustDo(b *testing.B, client *http.Client, method, url, tok, body string, want int) {
	b.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		b.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, msg)
	}
}
