package postgres

import (
	"context"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// openTest opens a store on a fresh schema, migrated, closed when t ends.
func openTest(t testing.TB, clock norn.Clock, tweak func(*Config)) *Store {
	t.Helper()
	url, schema := pgtest.Schema(t)
	cfg := Config{URL: url, Schema: schema, Migrate: true, Clock: clock}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the shared store suite. The automatic monitor is
// off: under a fake clock the suite drives every sweep itself.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock norn.Clock) norn.Store {
		return openTest(t, clock, func(c *Config) { c.DisableMonitor = true })
	})
}
