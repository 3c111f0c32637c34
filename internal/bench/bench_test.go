package bench

import (
	"testing"
	"time"
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
