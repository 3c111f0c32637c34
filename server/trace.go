package server

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// submitContext is the context a submit runs in: the request's, carrying
// the caller's W3C trace context from its traceparent header when no server
// span carries it already (tracing off), so the store records the caller's
// trace context either way. An invalid header is ignored, as the W3C
// recommendation asks; an invalid traceparent member in the body is an
// error instead (the caller asked for it explicitly).
func submitContext(r *http.Request) context.Context {
	ctx := r.Context()
	if len(r.Header["Traceparent"]) == 0 || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
}
