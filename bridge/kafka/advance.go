package kafka

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The adaptive timing advance. Chronos' timing advance makes up for the
// bridge's own delay between deciding to fire a message and the message
// being on the output topic; a fixed guess fires early by the difference
// (a 50 ms advance put messages ~45 ms early). The store's latency no longer
// counts (messages are claimed ClaimAhead before their time and held), so
// what is left to make up for is publishing: the bridge measures the time
// from handing each message to the Kafka client to the broker's
// acknowledgement and fires that much before the deadline.
//
// Which figure of the recent latencies: a publication stalled by the
// machine (CPU starvation, GC, a busy broker) is late whatever the advance,
// and an advance that follows stalls fires the next, unstalled messages
// early by the length of the stall. So the advance is a low quantile of the
// last latencyWindow publications — the latency of a publication nothing
// stalled. Measured on a loaded 2-core machine (1,000 msg/s, kfake), the
// median put 6–9% of messages over 5 ms early (up to 35 ms), the first
// quartile 0.3–0.5%, the tenth percentile none, with the median lateness
// within 1.2–1.4 ms of the deadline (docs/benchmarks.md).

const (
	latencyWindow = 256
	// latencyQuantile is the percentile of the window used as the advance.
	latencyQuantile = 10
	// latencyRecompute is how many new samples trigger a new estimate.
	latencyRecompute = 16
	// initialAdvance is the advance before anything was published: the
	// order of a publication to a broker on the same network.
	initialAdvance = time.Millisecond
)

// latency keeps the recent publish latencies and their latencyQuantile.
type latency struct {
	mu   sync.Mutex
	ring [latencyWindow]time.Duration
	n    int
	est  atomic.Int64 // nanoseconds
}

func newLatency() *latency {
	l := &latency{}
	l.est.Store(int64(initialAdvance))
	return l
}

func (l *latency) observe(d time.Duration) {
	if d < 0 {
		d = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.n%latencyWindow] = d
	l.n++
	if l.n <= latencyRecompute || l.n%latencyRecompute == 0 {
		s := slices.Clone(l.ring[:min(l.n, latencyWindow)])
		slices.Sort(s)
		l.est.Store(int64(s[len(s)*latencyQuantile/100]))
	}
}

func (l *latency) get() time.Duration { return time.Duration(l.est.Load()) }

// advance is the timing advance in force: the configured one when set,
// otherwise the measured one, at most half the claim-ahead time (beyond
// that, publishing is too slow for an advance to help).
func (b *Bridge) advance() time.Duration {
	if b.cfg.TimingAdvance > 0 {
		return b.cfg.TimingAdvance
	}
	a := min(b.lat.get(), b.cfg.ClaimAhead/2)
	b.m.advance.Set(a.Seconds())
	return a
}
