package client_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
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
	srv, err := server.New(server.Config{
		Addr: "127.0.0.1:0", Store: st, ShutdownTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		st.Close()
		t.Fatalf("server.New: %v", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	c, err := client.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		stop()
		if err := <-done; err != nil {
			t.Errorf("server.Run: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("store Close: %v", err)
		}
	})
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
