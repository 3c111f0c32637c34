package kafka

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metrics are the bridge's Prometheus metrics (all prefixed norn_kafka_).
type metrics struct {
	consumed         prometheus.Counter
	invalid          *prometheus.CounterVec
	stored           prometheus.Counter
	firedImmediately prometheus.Counter
	fired            prometheus.Counter
	takenOver        prometheus.Counter
	duplicates       prometheus.Counter
	publishErrors    prometheus.Counter
	lateness         prometheus.Histogram
	advance          prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "norn", Subsystem: "kafka", Name: name, Help: help})
	}
	m := &metrics{
		consumed: c("consumed_total", "Messages consumed from the input topic."),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norn", Subsystem: "kafka", Name: "invalid_total",
			Help: "Input messages skipped because a Chronos header was missing or malformed, or the message could not be stored, by reason."}, []string{"reason"}),
		stored:           c("stored_total", "Messages stored as delayed tasks."),
		firedImmediately: c("fired_immediately_total", "Messages published at once because their deadline was within the timing advance."),
		fired:            c("fired_total", "Delayed messages published on the output topic when due."),
		takenOver:        c("taken_over_total", "Due messages claimed after another node's hold expired (suspected node failure)."),
		duplicates:       c("duplicates_total", "Input messages ignored because a message with the same id was pending."),
		publishErrors:    c("publish_errors_total", "Publishes to the output topic that failed (the message is retried)."),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "norn", Subsystem: "kafka", Name: "firing_lateness_seconds",
			Help:    "Publish acknowledgement time minus the message deadline (negative: early, by up to the timing advance).",
			Buckets: []float64{-0.1, -0.05, -0.025, -0.01, -0.005, -0.002, 0, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}}),
		advance: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "norn", Subsystem: "kafka", Name: "timing_advance_seconds",
			Help: "Timing advance in force: the configured one, or the adaptive one (10th percentile of recent publish latencies)."}),
	}
	// Every reason is pre-declared so dashboards see zeros, not gaps.
	for _, r := range []string{reasonMissingID, reasonMissingDeadline, reasonBadDeadline, reasonTooLarge, reasonRejected, reasonIDConflict} {
		m.invalid.WithLabelValues(r)
	}
	if reg != nil {
		for _, col := range []prometheus.Collector{m.consumed, m.invalid, m.stored, m.firedImmediately, m.fired,
			m.takenOver, m.duplicates, m.publishErrors, m.lateness, m.advance} {
			if err := reg.Register(col); err != nil {
				var are prometheus.AlreadyRegisteredError
				if errors.As(err, &are) {
					return nil, errors.New("kafka bridge metrics are already registered on this Registerer (one bridge per registry)")
				}
				return nil, err
			}
		}
	}
	return m, nil
}

// Stats is a snapshot of the bridge's counters.
type Stats struct {
	Consumed         int64
	Invalid          int64
	Stored           int64
	FiredImmediately int64
	Fired            int64
	TakenOver        int64
	Duplicates       int64
	PublishErrors    int64
}

func counterValue(c prometheus.Metric) int64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return 0
	}
	return int64(m.Counter.GetValue())
}

func (m *metrics) stats() Stats {
	var invalid int64
	for _, r := range []string{reasonMissingID, reasonMissingDeadline, reasonBadDeadline, reasonTooLarge, reasonRejected, reasonIDConflict} {
		invalid += counterValue(m.invalid.WithLabelValues(r))
	}
	return Stats{
		Consumed:         counterValue(m.consumed),
		Invalid:          invalid,
		Stored:           counterValue(m.stored),
		FiredImmediately: counterValue(m.firedImmediately),
		Fired:            counterValue(m.fired),
		TakenOver:        counterValue(m.takenOver),
		Duplicates:       counterValue(m.duplicates),
		PublishErrors:    counterValue(m.publishErrors),
	}
}
