package postgres

import (
	"context"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/servertest"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/store/embedded"
	"github.com/nornq/norn/store/storetest"
)

// TestTwinWithEmbedded runs one workload on this store and on the embedded
// store side by side: every answer and every task must come out the same.
func TestTwinWithEmbedded(t *testing.T) {
	t.Parallel()
	storetest.RunTwin(t,
		openEmbedded,
		func(t *testing.T, clock norn.Clock) norn.Store {
			return openTest(t, clock, func(c *Config) { c.DisableMonitor = true })
		})
}

// TestTwinOverHTTP runs the workload through the client, a server and this
// store, beside the embedded store in-process: the whole path on
// PostgreSQL answers as the embedded store does.
func TestTwinOverHTTP(t *testing.T) {
	t.Parallel()
	storetest.RunTwin(t,
		openEmbedded,
		func(t *testing.T, clock norn.Clock) norn.Store {
			st := openTest(t, clock, func(c *Config) { c.DisableMonitor = true })
			srv := servertest.Start(t, server.Config{Store: st})
			c, err := client.New(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		})
}

// openEmbedded is the embedded store the twins run beside, its duties run
// only by Sweep under the fake clock.
func openEmbedded(t *testing.T, clock norn.Clock) norn.Store {
	s, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), Clock: clock, ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
