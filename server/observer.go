package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nornq/norn"
)

// storeObserver turns a store's background measurements into metrics.
type storeObserver struct {
	lateness *prometheus.HistogramVec
}

// scheduleLatenessBuckets: a healthy firing is milliseconds late; a node
// that was down shows up in the seconds-to-minutes buckets.
var scheduleLatenessBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 30, 60, 300, 3600}

// NewStoreObserver registers the store-side metrics on reg and returns the
// norn.Observer to give the store when opening it (the store exists before
// the server, so it cannot come from New): norn_schedule_lateness_seconds,
// how long after its tick each schedule's task was submitted.
func NewStoreObserver(reg prometheus.Registerer) (norn.Observer, error) {
	o := &storeObserver{lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "norn", Name: "schedule_lateness_seconds",
		Help:    "Time from a schedule's tick to the submission of its task, by schedule.",
		Buckets: scheduleLatenessBuckets,
	}, []string{"schedule"})}
	if err := reg.Register(o.lateness); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *storeObserver) ScheduleFired(name string, _ time.Time, lateness time.Duration) {
	o.lateness.WithLabelValues(name).Observe(max(lateness, 0).Seconds())
}
