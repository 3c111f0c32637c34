package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nornq/norn"
)

// storeObserver turns a store's background measurements into metrics.
type storeObserver struct {
	lateness  *prometheus.HistogramVec
	done      prometheus.Counter
	callbacks *prometheus.CounterVec
}

// scheduleLatenessBuckets: a healthy firing is milliseconds late; a node
// that was down shows up in the seconds-to-minutes buckets.
var scheduleLatenessBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 30, 60, 300, 3600}

// NewStoreObserver registers the store-side metrics on reg and returns the
// norn.Observer to give the store when opening it (the store exists before
// the server, so it cannot come from New): norn_schedule_lateness_seconds,
// how long after its tick each schedule's task was submitted;
// norn_batches_done_total and norn_batch_callbacks_total{callback}, the
// batches that became done and the callbacks submitted (by the node whose
// monitor fired them).
func NewStoreObserver(reg prometheus.Registerer) (norn.Observer, error) {
	o := &storeObserver{lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "norn", Name: "schedule_lateness_seconds",
		Help:    "Time from a schedule's tick to the submission of its task, by schedule.",
		Buckets: scheduleLatenessBuckets,
	}, []string{"schedule"}),
		done: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "norn", Name: "batches_done_total",
			Help: "Batches that became done (sealed, every member ended), fired by this node."}),
		callbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "norn", Name: "batch_callbacks_total",
			Help: "Batch callbacks submitted by this node, by callback (complete, success)."}, []string{"callback"}),
	}
	for _, c := range []prometheus.Collector{o.lateness, o.done, o.callbacks} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, k := range []string{norn.CallbackComplete, norn.CallbackSuccess} {
		o.callbacks.WithLabelValues(k)
	}
	return o, nil
}

func (o *storeObserver) BatchFired(_ string, done bool, kinds []string) {
	if done {
		o.done.Inc()
	}
	for _, k := range kinds {
		o.callbacks.WithLabelValues(k).Inc()
	}
}

func (o *storeObserver) ScheduleFired(name string, _ time.Time, lateness time.Duration) {
	o.lateness.WithLabelValues(name).Observe(max(lateness, 0).Seconds())
}
