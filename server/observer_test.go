package server

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/embedded"
	"github.com/nornq/norn/store/storetest"
)

// TestScheduleLatenessMetric: a store given the observer reports each
// fired tick's lateness into norn_schedule_lateness_seconds.
func TestScheduleLatenessMetric(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	obs, err := NewStoreObserver(reg)
	if err != nil {
		t.Fatal(err)
	}
	clock := storetest.NewFakeClock()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), Clock: clock, ManualSweep: true, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	sc, err := st.PutSchedule(ctx, norn.Schedule{Name: "nightly", Queue: "q", Cron: "* * * * *"})
	if err != nil {
		t.Fatal(err)
	}
	clock.Set(sc.NextFire.Add(1500 * time.Millisecond)) // 1.5 s late
	if _, err := st.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, mf := range mfs {
		if mf.GetName() != "norn_schedule_lateness_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != "nightly" || h.GetSampleCount() != 1 || h.GetSampleSum() != 1.5 {
				t.Fatalf("lateness metric %v", m)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no norn_schedule_lateness_seconds sample after a firing")
	}
}
