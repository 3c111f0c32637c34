package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/bench"
	"github.com/nornq/norn/internal/servertest"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/store/embedded"
)

// runNorn runs the CLI in-process and returns stdout and stderr.
func runNorn(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := NewRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errb.String(), err
}

// decodeResults parses the stream of JSON objects `norn bench -o json` prints.
func decodeResults(t *testing.T, s string) []bench.Result {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var out []bench.Result
	for dec.More() {
		var r bench.Result
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("decoding %q: %v", s, err)
		}
		out = append(out, r)
	}
	return out
}

func TestBenchSubmitJSON(t *testing.T) {
	t.Parallel()
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	stdout, stderr, err := runNorn(t, "bench", "submit", "--tasks", "2000", "-o", "json", "--cpuprofile", prof)
	if err != nil {
		t.Fatalf("norn bench: %v\nstderr: %s", err, stderr)
	}
	rs := decodeResults(t, stdout)
	if len(rs) != 3 {
		t.Fatalf("%d results, want 3 (batch 1, 100, 1000):\n%s", len(rs), stdout)
	}
	for i, b := range []int{1, 100, 1000} {
		r := rs[i]
		if r.Workload != "submit" || r.Store != "embedded" || r.Durability != "strict" || r.Transport != "inproc" ||
			r.NProc < 1 || r.Tasks != 2000 || r.Batch != b || !(r.Seconds > 0) || !(r.TasksPerS > 0) || r.Runs != 1 {
			t.Errorf("result %d: %+v", i, r)
		}
	}
	// The required keys are present by these exact names.
	var raw map[string]any
	if err := json.NewDecoder(strings.NewReader(stdout)).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"workload", "store", "transport", "nproc", "tasks", "seconds", "tasks_per_sec"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON lacks %q: %v", k, raw)
		}
	}
	if fi, err := os.Stat(prof); err != nil || fi.Size() == 0 {
		t.Errorf("cpu profile: %v", err)
	}
}

func TestBenchHTTPTransportTable(t *testing.T) {
	t.Parallel()
	stdout, stderr, err := runNorn(t, "bench", "latency", "work", "--transport", "http", "--tasks", "200", "--runs", "2")
	if err != nil {
		t.Fatalf("norn bench: %v\nstderr: %s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "WORKLOAD") {
		t.Fatalf("want a header and two rows:\n%s", stdout)
	}
	for i, w := range []string{"latency", "work"} {
		f := strings.Fields(lines[i+1])
		if f[0] != w || f[3] != "http" || f[len(f)-1] != "2" {
			t.Errorf("row %d = %q, want workload %s, transport http, runs 2", i, lines[i+1], w)
		}
	}
}

func TestBenchRemoteServer(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := servertest.Start(t, server.Config{Store: st})

	stdout, stderr, err := runNorn(t, "bench", "work", "memory", "--server", srv.URL(), "--tasks", "300",
		"--store", "embedded:/elsewhere", "--server-pid", strconv.Itoa(os.Getpid()), "-o", "ndjson")
	if err != nil {
		t.Fatalf("norn bench: %v\nstderr: %s", err, stderr)
	}
	rs := decodeResults(t, stdout)
	if len(rs) != 2 || strings.Count(stdout, "\n") != 2 {
		t.Fatalf("want two NDJSON lines:\n%s", stdout)
	}
	for _, r := range rs {
		if r.Transport != "http" || r.Store != "embedded" || r.Durability != "" || r.Tasks != 300 {
			t.Errorf("labels: %+v", r)
		}
	}
	// Over HTTP too, the work workload claims with one claimer per core.
	if n := runtime.GOMAXPROCS(0); rs[0].Workers != n || rs[0].Batch != min(norn.MaxClaim, max(100, bench.RiverSlots/n)) {
		t.Errorf("work over HTTP: %d workers claiming %d, want one per core (%d)", rs[0].Workers, rs[0].Batch, n)
	}
	if rs[1].Workload != "memory" || !(rs[1].RSSMiB > 0) {
		t.Errorf("memory of our own pid: %+v", rs[1])
	}
	if n, err := st.Stats(context.Background()); err != nil || n.Total != 0 {
		t.Errorf("the server's store holds %d tasks after the bench (%v)", n.Total, err)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	t.Parallel()
	cases := [][]string{
		{"bench"},
		{"bench", "nosuch"},
		{"bench", "work", "--runs", "0"},
		{"bench", "work", "--transport", "carrier-pigeon"},
		{"bench", "work", "--server", "http://127.0.0.1:1", "--transport", "inproc"},
		{"bench", "work", "--store", "nosuchkind:x"},
		{"bench", "work", "--queued", "0"},
		{"bench", "work", "-o", "yaml"},
		{"bench", "work", "--tasks", "many"},
		{"bench", "work", "--key-limit", "-1"},
		{"bench", "work", "--keys", "-3"},
	}
	for _, args := range cases {
		_, _, err := runNorn(t, args...)
		var ue *usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
}

func TestBenchWorkloadsAll(t *testing.T) {
	t.Parallel()
	got, err := benchWorkloads([]string{"ALL", "work"})
	if err != nil || strings.Join(got, ",") != strings.Join(append(append([]string{}, bench.Workloads...), "work"), ",") {
		t.Fatalf("benchWorkloads = %v, %v", got, err)
	}
}

// TestBenchKafkaJSON runs the bridge workload end to end on an in-process
// Kafka: every message must come back, and lateness can be at most the
// timing advance early.
func TestBenchKafkaJSON(t *testing.T) {
	t.Parallel()
	stdout, stderr, err := runNorn(t, "bench", "kafka", "--tasks", "300", "--rate", "600", "--delay", "300ms", "-o", "json")
	if err != nil {
		t.Fatalf("norn bench kafka: %v\nstderr: %s", err, stderr)
	}
	rs := decodeResults(t, stdout)
	if len(rs) != 1 {
		t.Fatalf("%d results, want 1:\n%s", len(rs), stdout)
	}
	r := rs[0]
	if r.Workload != "kafka" || r.Tasks != 300 || !(r.TasksPerS > 0) || r.P50ms > r.P99ms || r.P99ms > r.P999ms ||
		r.P999ms > r.Maxms || r.P50ms < -60 {
		t.Errorf("result %+v", r)
	}
}
