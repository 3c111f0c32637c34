package server

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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

// traced gives every call of the route pattern a server span when the
// server has a tracer provider: a child of the caller's traceparent header,
// carried in the request's context (so a submit stores it), named by the
// route, with the status code; 5xx answers mark it as an error. Without a
// provider it returns h itself: tracing off adds nothing to a request.
func (s *Server) traced(pattern string, h http.Handler) http.Handler {
	if s.cfg.TracerProvider == nil {
		return h
	}
	tracer := s.cfg.TracerProvider.Tracer("github.com/nornq/norn/server")
	method, route, ok := strings.Cut(pattern, " ")
	if !ok {
		route = pattern
	}
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		m := method
		if m == "" {
			m = r.Method
		}
		ctx, span := tracer.Start(ctx, pattern, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", m), attribute.String("http.route", route)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r.WithContext(ctx))
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", code))
		if code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(code))
		}
	})
}
