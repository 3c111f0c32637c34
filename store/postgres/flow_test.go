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

// TestFlowSharedPathAtTheLimit races claimers of four store instances
// right where claims switch between the shared path and the exclusive one:
// with 3 slots and shared claims of at most 2 tasks, a claim is shared
// only while the queue has at most 10 − 3×2 = 4 running tasks (max_running
// and key_limit 10), and sixteen claimers holding their tasks a few
// milliseconds keep the count around that edge and at the limit, where
// three shared claims in flight would exceed it if one counted too late. The limits must hold throughout
// (storetest.ConcurrentLimitsCase), and both paths must have been taken.
func TestFlowSharedPathAtTheLimit(t *testing.T) {
	first := openTest(t, nil, nil)
	stores := []norn.Store{first}
	all := []*Store{first}
	for range 3 {
		s, err := Open(context.Background(), Config{URL: first.cfg.URL, Schema: first.cfg.Schema})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		stores, all = append(stores, s), append(all, s)
	}
	for _, s := range all {
		s.flow.slots, s.flow.cap = 3, 2
	}
	storetest.ConcurrentLimitsCase(t, stores, context.Background(), storetest.LimitsCase{MaxRunning: 10, KeyLimit: 10,
		Keys: 4, PerKey: 60, Workers: 16, N: 3, HoldMs: 4})
	var shared, exclusive int64
	for _, s := range all {
		shared += s.flow.sharedClaims.Load()
		exclusive += s.flow.exclusiveClaims.Load()
	}
	t.Logf("%d shared claims, %d exclusive", shared, exclusive)
	if shared == 0 || exclusive == 0 {
		t.Fatalf("%d shared claims, %d exclusive: the edge between the paths was not exercised", shared, exclusive)
	}
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
