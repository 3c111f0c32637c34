package client_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/servertest"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/store/embedded"
	"github.com/nornq/norn/store/storetest"
)

// remoteStore opens an embedded store behind a real server on a free
// loopback port and returns a client of it, so the conformance suite runs
// through client → HTTP → server → store.
func remoteStore(t *testing.T, clock norn.Clock) norn.Store {
	t.Helper()
	ctx := context.Background()
	st, err := embedded.Open(ctx, embedded.Options{Dir: t.TempDir(), Clock: clock, ManualSweep: true})
	if err != nil {
		t.Fatalf("embedded.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("store Close: %v", err)
		}
	})
	srv := servertest.Start(t, server.Config{Store: st})
	c, err := client.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestConformance runs the whole store conformance suite over HTTP. The
// streaming memory test uses fewer tasks than in-process stores (every task
// crosses JSON twice under -race); NORN_STORETEST_STREAM_TASKS overrides.
func TestConformance(t *testing.T) {
	n := 25_000
	if v, err := strconv.Atoi(os.Getenv("NORN_STORETEST_STREAM_TASKS")); err == nil && v > 0 {
		n = v
	}
	storetest.RunWith(t, remoteStore, storetest.Options{StreamTasks: n})
}

// TestTwinWithEmbedded runs one workload through the client and on the
// embedded store it serves, side by side: what crosses HTTP must come back
// as the store gave it.
func TestTwinWithEmbedded(t *testing.T) {
	t.Parallel()
	storetest.RunTwin(t, func(t *testing.T, clock norn.Clock) norn.Store {
		st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), Clock: clock, ManualSweep: true})
		if err != nil {
			t.Fatalf("embedded.Open: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}, remoteStore)
}
