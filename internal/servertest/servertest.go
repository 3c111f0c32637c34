// Package servertest runs a real norn server on a loopback port for the
// tests of the packages around the server (the Go client, the worker SDK,
// tracing, the command line, the benchmarks), so they share one way to start
// it and to stop it before its store closes.
package servertest

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nornq/norn/internal/oacheck"
	"github.com/nornq/norn/server"
)

// Start runs a server with cfg until the test ends. Addr defaults to
// 127.0.0.1:0 (a free port), Logger to one that discards everything and
// ShutdownTimeout to 5 s, and WrapHandler to a check of every request and
// response against the OpenAPI document that fails t on a mismatch. The server stops in a cleanup registered here, so
// it stops before whatever earlier cleanups close (register the store's
// Close before calling Start). An error from Run fails the test.
func Start(t testing.TB, cfg server.Config) *server.Server {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	if cfg.WrapHandler == nil {
		cfg.WrapHandler = oacheck.ForTest(t, server.OpenAPI())
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("server.Run: %v", err)
		}
	})
	return srv
}
