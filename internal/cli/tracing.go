package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/nornq/norn/tracing"
)

// startTracing sets up OpenTelemetry tracing from the OTEL_* environment
// (off unless it asks: see package tracing) and installs it globally. stop
// exports what is buffered, waiting at most 5 s: spans must not hold up an
// exit for long.
func startTracing(ctx context.Context, service string, log *slog.Logger) (p *tracing.Provider, stop func(), err error) {
	p, err = tracing.FromEnv(ctx, service)
	if err != nil {
		return nil, nil, err
	}
	if p == nil {
		return nil, func() {}, nil
	}
	p.Install()
	log.Info("tracing: exporting spans over OTLP/HTTP as the OTEL_* environment says")
	return p, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			log.Warn("tracing: spans not exported at exit", slog.Any("err", err))
		}
	}, nil
}
