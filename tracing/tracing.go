// Package tracing sets up OpenTelemetry tracing for programs built on norn
// (the norn command, and any program that embeds the server or runs the Go
// worker) from the standard OTEL_* environment variables, exporting with the
// standard OTLP/HTTP exporter. It is a public package, not an internal one,
// because such a program needs the very setup the norn command uses to
// behave the same under the same environment.
//
// Tracing is off unless the environment asks for it, and off costs nothing:
// FromEnv then returns a nil *Provider, whose TracerProvider is nil, which
// the server and the worker take as "no spans of my own".
//
// The environment, as the OpenTelemetry specification defines it:
//
//   - OTEL_SDK_DISABLED=true: off, whatever else is set.
//   - OTEL_TRACES_EXPORTER: "otlp" turns tracing on, "none" off. Unset, it
//     is on when an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and off otherwise: the
//     specification's default ("otlp" to localhost:4318) would make every
//     norn program try to export to a collector that usually is not there.
//     Other exporters (console, zipkin) are refused with an error.
//   - OTEL_EXPORTER_OTLP_PROTOCOL / OTEL_EXPORTER_OTLP_TRACES_PROTOCOL:
//     "http/protobuf" (the default) only; gRPC would bring a second network
//     stack into the binary for the same spans.
//   - OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT, _COMPRESSION,
//     _CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY: read by the exporter.
//   - OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: the resource (the service
//     name defaults to the one FromEnv is given).
//   - OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG, OTEL_BSP_*: read by the
//     SDK (default: parentbased_always_on, batched export).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/nornq/norn"
)

// Provider is the tracer provider FromEnv built. A nil *Provider is tracing
// turned off; its methods are safe to call.
type Provider struct {
	sdk *sdktrace.TracerProvider
}

// TracerProvider returns the provider to hand to server.Config and
// worker.Config, or nil when p is nil (tracing off).
func (p *Provider) TracerProvider() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p.sdk
}

// Shutdown exports the spans still buffered and stops the exporter. Call it
// before the program exits, with a deadline: spans not exported by then are
// lost.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}

// Install makes p the global tracer provider (what libraries calling
// otel.Tracer use) and W3C trace context with baggage the global
// propagator. It does nothing when p is nil.
func (p *Provider) Install() {
	if p == nil {
		return
	}
	otel.SetTracerProvider(p.sdk)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
}

// Enabled reports whether the environment getenv reads asks for tracing,
// and an error naming the variable when it asks for something this package
// cannot do.
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := false
	exporters := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	if exporters == "" {
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	}
	for e := range strings.SplitSeq(exporters, ",") {
		switch e = strings.TrimSpace(e); e {
		case "", "none":
		case "otlp":
			on = true
		default:
			return false, norn.Invalid("OTEL_TRACES_EXPORTER", "exporter %q is not supported; use otlp or none", e)
		}
	}
	if !on {
		return false, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			if v != "http/protobuf" {
				return false, norn.Invalid(name, "protocol %q is not supported; use http/protobuf (the collector's port 4318)", v)
			}
			break
		}
	}
	return true, nil
}

// FromEnv builds a tracer provider exporting over OTLP/HTTP as the process
// environment says, for a program whose service name is service unless
// OTEL_SERVICE_NAME says otherwise. It returns nil and no error when the
// environment does not ask for tracing. Nothing is contacted here: the
// exporter connects when it first exports.
func FromEnv(ctx context.Context, service string) (*Provider, error) {
	on, err := Enabled(os.Getenv)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// Later options win: the service name given here is only the default
	// for OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return &Provider{sdk: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))}, nil
}
