package tracing_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/servertest"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/store/embedded"
	"github.com/nornq/norn/worker"
)

// stack is a real server on a loopback port over an embedded store, and a
// client of it; tp (when non-nil) is the server's tracer provider.
func stack(t *testing.T, tp trace.TracerProvider) (*client.Client, *embedded.Store) {
	t.Helper()
	ctx := context.Background()
	st, err := embedded.Open(ctx, embedded.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("embedded.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("store Close: %v", err)
		}
	})
	srv := servertest.Start(t, server.Config{Store: st, TracerProvider: tp})
	c, err := client.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, st
}

// runOne runs a worker with handler h until the task id has ended (polled:
// the outcome is reported after the handler returns), and returns it.
func runOne(t *testing.T, c *client.Client, tp trace.TracerProvider, h worker.Handler, queue, id string) *norn.Task {
	t.Helper()
	w, err := worker.New(c, worker.Config{Handler: h, Queues: []string{queue}, Concurrency: 1, Wait: 200 * time.Millisecond,
		TracerProvider: tp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker.Run: %v", err)
		}
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got, err := c.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Terminal() {
			return got
		}
		select {
		case <-tick.C:
		case <-t.Context().Done():
			t.Fatal("task did not end")
		}
	}
}

// find returns the one recorded span named name.
func find(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range rec.Ended() {
			names = append(names, s.Name())
		}
		t.Fatalf("%d spans named %q; ended spans: %q", len(found), name, names)
	}
	return found[0]
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

// TestTraceLinksSubmitToWorker follows one trace end to end: a span in the
// submitting program → the server's span for the submit (its child, through
// the client's traceparent header) → the traceparent stored with the task
// (the server span's) → the worker's span for the attempt (the server
// span's child) → a span the handler starts (the attempt's child).
func TestTraceLinksSubmitToWorker(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c, _ := stack(t, tp)

	ctx, app := tp.Tracer("app").Start(t.Context(), "checkout")
	subs, err := c.Submit(ctx, norn.NewTask{ID: "t1", Queue: "q"})
	app.End()
	if err != nil {
		t.Fatal(err)
	}
	srv := find(t, rec, "POST /v1/tasks/batch")
	if srv.Parent().SpanID() != app.SpanContext().SpanID() || srv.SpanContext().TraceID() != app.SpanContext().TraceID() {
		t.Fatalf("server span's parent %s, want the submitting span %s", srv.Parent().SpanID(), app.SpanContext().SpanID())
	}
	if srv.SpanKind() != trace.SpanKindServer || attr(srv, "http.route") != "/v1/tasks/batch" || attr(srv, "http.response.status_code") != "200" {
		t.Fatalf("server span kind %v attributes %v", srv.SpanKind(), srv.Attributes())
	}
	if want := norn.FormatTraceparent(srv.SpanContext()); subs[0].Task.Traceparent != want {
		t.Fatalf("stored traceparent %q, want the server span's %q", subs[0].Task.Traceparent, want)
	}

	got := runOne(t, c, tp, worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		_, s := tp.Tracer("handler").Start(ctx, "charge card")
		s.End()
		return nil
	}), "q", "t1")
	if got.Status != norn.StatusCompleted {
		t.Fatalf("task ended %s", got.Status)
	}
	attempt := find(t, rec, "process q")
	if attempt.Parent().SpanID() != srv.SpanContext().SpanID() || attempt.SpanContext().TraceID() != app.SpanContext().TraceID() {
		t.Fatalf("attempt span's parent %s, want the server span %s", attempt.Parent().SpanID(), srv.SpanContext().SpanID())
	}
	if !attempt.Parent().IsRemote() || attempt.SpanKind() != trace.SpanKindConsumer ||
		attr(attempt, "messaging.message.id") != "t1" || attr(attempt, "norn.task.outcome") != string(norn.OpComplete) {
		t.Fatalf("attempt span kind %v attributes %v", attempt.SpanKind(), attempt.Attributes())
	}
	if h := find(t, rec, "charge card"); h.Parent().SpanID() != attempt.SpanContext().SpanID() {
		t.Fatalf("handler span's parent %s, want the attempt span %s", h.Parent().SpanID(), attempt.SpanContext().SpanID())
	}
}

// TestTraceFailedAttemptIsAnError: a failing handler's attempt span has
// status Error and the error code.
func TestTraceFailedAttemptIsAnError(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c, _ := stack(t, nil)
	if _, err := c.Submit(t.Context(), norn.NewTask{ID: "t1", Queue: "q",
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}); err != nil {
		t.Fatal(err)
	}
	runOne(t, c, tp, worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		return worker.WithCode("card_declined", worker.Abort(io.ErrUnexpectedEOF))
	}), "q", "t1")
	attempt := find(t, rec, "process q")
	if attempt.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || attempt.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("attempt span's parent %v", attempt.Parent())
	}
	if attempt.Status().Code.String() != "Error" || attr(attempt, "error.type") != "card_declined" || attr(attempt, "norn.task.outcome") != "abort" {
		t.Fatalf("attempt span status %v attributes %v", attempt.Status(), attempt.Attributes())
	}
}

// TestTraceWithoutTracerProvider: with tracing off, the server stores the
// caller's traceparent header itself, and the handler's context carries
// the task's trace context (so a handler's own spans join the trace) and a
// Command (norn work) gets it as TRACEPARENT.
func TestTraceWithoutTracerProvider(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	app := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c, _ := stack(t, nil)
	ctx, span := app.Tracer("app").Start(t.Context(), "checkout")
	subs, err := c.Submit(ctx, norn.NewTask{ID: "t1", Queue: "q"}, norn.NewTask{ID: "t2", Queue: "cmd"})
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	want := norn.FormatTraceparent(span.SpanContext())
	if subs[0].Task.Traceparent != want {
		t.Fatalf("stored traceparent %q, want the submitting span's %q", subs[0].Task.Traceparent, want)
	}
	var seen string
	runOne(t, c, nil, worker.HandlerFunc(func(ctx context.Context, tk *worker.Task) error {
		seen, _ = norn.TraceFromContext(ctx)
		return nil
	}), "q", "t1")
	if seen != want {
		t.Fatalf("handler context's trace context %q, want %q", seen, want)
	}
	if runtime.GOOS == "windows" {
		return
	}
	got := runOne(t, c, nil, &worker.Command{Path: "/bin/sh", Args: []string{"-c", `printf %s "$TRACEPARENT"`}}, "cmd", "t2")
	var out string
	if err := json.Unmarshal(got.Result, &out); err != nil || out != want {
		t.Fatalf("command saw TRACEPARENT %s, want %q", got.Result, want)
	}
}
