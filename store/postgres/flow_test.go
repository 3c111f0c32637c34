package postgres

import (
	"context"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/storetest"
)

// TestFlowLimitsAcrossInstances runs the concurrent flow-limit check with
// claimers spread over three store instances sharing one schema, as three
// norn server nodes would: the limits must hold across them.
func TestFlowLimitsAcrossInstances(t *testing.T) {
	first := openTest(t, nil, nil)
	stores := []norn.Store{first}
	for range 2 {
		s, err := Open(context.Background(), Config{URL: first.cfg.URL, Schema: first.cfg.Schema})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	storetest.ConcurrentLimits(t, stores, context.Background())
}

// TestRateLimitAcrossInstances runs the concurrent rate-limit check with
// claimers spread over three store instances sharing one schema and one
// (injected) clock: the bucket in the database must hold the rate across
// them.
func TestRateLimitAcrossInstances(t *testing.T) {
	clock := storetest.NewFakeClock()
	first := openTest(t, clock, func(c *Config) { c.DisableMonitor = true })
	stores := []norn.Store{first}
	for range 2 {
		s, err := Open(context.Background(), Config{URL: first.cfg.URL, Schema: first.cfg.Schema, Clock: clock, DisableMonitor: true})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		stores = append(stores, s)
	}
	storetest.ConcurrentRate(t, stores, clock, context.Background())
}
