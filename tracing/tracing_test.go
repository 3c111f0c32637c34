package tracing_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/nornq/norn"
	"github.com/nornq/norn/tracing"
)

func TestEnabled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		env   map[string]string
		on    bool
		field string // the variable an error names; "" = no error
	}{
		{"NothingSet", nil, false, ""},
		{"EndpointSet", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true, ""},
		{"TracesEndpointSet", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true, ""},
		{"ExporterOTLP", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true, ""},
		{"ExporterNoneWinsOverEndpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, false, ""},
		{"SDKDisabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false, ""},
		{"ExporterZipkin", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false, "OTEL_TRACES_EXPORTER"},
		{"ProtocolHTTP", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, true, ""},
		{"ProtocolGRPC", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"TracesProtocolWins", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, true, ""},
		{"GRPCIgnoredWhenOff", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			on, err := tracing.Enabled(func(k string) string { return c.env[k] })
			if c.field != "" {
				if norn.CodeOf(err) != norn.CodeInvalidArgument || err.(*norn.Error).Field != c.field {
					t.Fatalf("error %v, want one naming %s", err, c.field)
				}
				return
			}
			if err != nil || on != c.on {
				t.Fatalf("Enabled = %v, %v; want %v", on, err, c.on)
			}
		})
	}
}

// TestFromEnvExportsOverOTLP configures tracing only through the standard
// environment variables and checks that an OTLP/HTTP receiver on a
// loopback port gets the span, under the service name of OTEL_SERVICE_NAME.
func TestFromEnvExportsOverOTLP(t *testing.T) {
	var (
		mu    sync.Mutex
		names []string
		svc   string
		ctype string
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		ctype = r.Header.Get("Content-Type")
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					svc = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_SERVICE_NAME", "billing")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	t.Setenv("OTEL_SDK_DISABLED", "")
	p, err := tracing.FromEnv(context.Background(), "norn")
	if err != nil || p == nil {
		t.Fatalf("FromEnv = %v, %v; want a provider", p, err)
	}
	_, span := p.TracerProvider().Tracer("test").Start(context.Background(), "exported")
	span.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(names) != 1 || names[0] != "exported" || svc != "billing" || ctype != "application/x-protobuf" {
		t.Fatalf("receiver got spans %q of service %q (content type %q); want [exported] of billing", names, svc, ctype)
	}
}

// TestFromEnvOff: without the variables there is no provider, and its nil
// value is safe to use.
func TestFromEnvOff(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER"} {
		t.Setenv(k, "")
	}
	p, err := tracing.FromEnv(context.Background(), "norn")
	if err != nil || p != nil {
		t.Fatalf("FromEnv = %v, %v; want nil, nil", p, err)
	}
	if p.TracerProvider() != nil || p.Shutdown(context.Background()) != nil {
		t.Fatal("nil provider is not inert")
	}
	p.Install()
}
