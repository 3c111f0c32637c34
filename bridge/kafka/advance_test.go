package kafka

import (
	"testing"
	"time"
)

// TestLatencyEstimate: the adaptive advance is the 10th percentile of the
// last 256 publish latencies, so stalls do not move it (even when most
// recent publications were stalled), while a lasting change of latency does.
func TestLatencyEstimate(t *testing.T) {
	t.Parallel()
	l := newLatency()
	if got := l.get(); got != initialAdvance {
		t.Fatalf("before any publication: %s, want %s", got, initialAdvance)
	}
	ms := time.Millisecond
	for i := 0; i < latencyWindow; i++ {
		d := 2 * ms
		if i%10 < 6 {
			d = 80 * ms // 60% of the publications stalled
		}
		l.observe(d)
	}
	if got := l.get(); got != 2*ms {
		t.Errorf("with 60%% stalled publications: %s, want 2ms", got)
	}
	for i := 0; i < latencyWindow; i++ {
		l.observe(7 * ms)
	}
	if got := l.get(); got != 7*ms {
		t.Errorf("after latency moved to 7ms: %s", got)
	}
	l.observe(-ms) // a clock step back counts as zero, never negative
	b := &Bridge{lat: l, cfg: Config{ClaimAhead: 10 * ms}, m: mustMetrics(t)}
	if got := b.advance(); got != 5*ms {
		t.Errorf("advance %s, want capped at ClaimAhead/2 = 5ms", got)
	}
	b.cfg.TimingAdvance = 30 * ms
	if got := b.advance(); got != 30*ms {
		t.Errorf("fixed advance %s, want 30ms", got)
	}
}

func mustMetrics(t *testing.T) *metrics {
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
