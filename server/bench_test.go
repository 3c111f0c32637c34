package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/embedded"
)

// benchHandler is a server's handler over an embedded store (no fsync per write, no
// network: what is measured is the server's own path) and a registered
// worker's id; mod adjusts the configuration.
func benchHandler(b *testing.B, mod func(*Config)) (http.Handler, string) {
	b.Helper()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: b.TempDir(), Durability: embedded.Opportunistic})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	cfg := Config{Addr: "127.0.0.1:0", Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.ln.Close(); s.startDrain() })
	id, err := st.RegisterWorker(context.Background(), norn.WorkerInfo{Name: "bench", Queues: []string{"q"}})
	if err != nil {
		b.Fatal(err)
	}
	return s.Handler(), id
}

func serve(b *testing.B, h http.Handler, method, path, body string, header http.Header, want int) {
	req := httptest.NewRequest(method, "http://127.0.0.1"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != want {
		b.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
	}
}

// BenchmarkSubmitClaim is one task's way through the server's hot paths:
// a single submit, then a claim of it. "plain" sends no trace context;
// "traceparent" sends a traceparent header, which the server stores with
// the task whether it traces or not.
func BenchmarkSubmitClaim(b *testing.B) {
	benchSubmitClaim(b, nil)
}

func benchSubmitClaim(b *testing.B, mod func(*Config)) {
	for _, c := range []struct {
		name   string
		header http.Header
	}{
		{"plain", nil},
		{"traceparent", http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h, worker := benchHandler(b, mod)
			claim := `{"worker":"` + worker + `","queues":["q"],"n":1}`
			b.ReportAllocs()
			for b.Loop() {
				serve(b, h, "POST", "/v1/tasks", `{"queue":"q","spec":{"n":1}}`, c.header, http.StatusCreated)
				serve(b, h, "POST", "/v1/claim", claim, nil, http.StatusOK)
			}
		})
	}
}

// BenchmarkSubmitClaimTraced is BenchmarkSubmitClaim with server spans on
// (recorded by an SDK provider, exported nowhere): the cost of a span per
// call, for comparison with tracing off.
func BenchmarkSubmitClaimTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	benchSubmitClaim(b, func(c *Config) { c.TracerProvider = tp })
}
