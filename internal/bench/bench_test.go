package bench

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/nornq/norn/internal/proccpu"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	cases := []struct {
		p    float64
		want time.Duration
	}{
		{50, 500 * time.Millisecond},
		{99, 990 * time.Millisecond},
		{99.9, 999 * time.Millisecond},
		{100, 1000 * time.Millisecond},
		{0, time.Millisecond},
	}
	for _, c := range cases {
		if got := Percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty input")
	}
	if got := Percentile([]time.Duration{7}, 99.9); got != 7 {
		t.Errorf("single sample p99.9 = %v", got)
	}
}

func TestSpecSize(t *testing.T) {
	t.Parallel()
	for _, n := range []int{8, 200, 1000} {
		if got := len(spec(n)); got != n {
			t.Errorf("spec(%d) has %d bytes", n, got)
		}
	}
}

func TestProcessCPU(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	// Burn a little CPU so both clocks have something to show.
	deadline := time.Now().Add(50 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	got, err := ProcessCPU(os.Getpid())
	want := proccpu.Used()
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in 10 ms ticks; other tests run in parallel, so allow
	// the other clock to have moved on a little.
	if d := want - got; d < -20*time.Millisecond || d > 200*time.Millisecond || got <= 0 {
		t.Errorf("ProcessCPU = %v, getrusage = %v (x=%d)", got, want, x)
	}
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Error("no error for a pid that does not exist")
	}
	if _, err := RSS(1 << 30); err == nil {
		t.Error("RSS: no error for a pid that does not exist")
	}
}
