package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/nornq/norn"
)

// The attempt's span follows OpenTelemetry's messaging conventions: a
// consumer span "process <queue>" whose parent is the trace context the
// task was submitted with, so a trace runs from the request that submitted
// the task through the server to every attempt at running it.

// tracerName is the instrumentation scope of the worker's spans.
const tracerName = "github.com/nornq/norn/worker"

// traceStart returns the context the attempt of nt runs in: the task's
// trace context as a remote parent and, with a tracer provider, the
// attempt's span started under it (kept in r.span).
func (w *Worker) traceStart(r *run, nt *norn.Task) context.Context {
	ctx := norn.ContextWithTrace(context.Background(), nt.Traceparent, nt.Tracestate)
	if w.cfg.TracerProvider == nil {
		return ctx
	}
	ctx, r.span = w.cfg.TracerProvider.Tracer(tracerName).Start(ctx, "process "+nt.Queue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "norn"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", nt.Queue),
			attribute.String("messaging.message.id", nt.ID),
			attribute.String("norn.worker", r.ref.Worker),
			attribute.Int64("norn.task.lease", int64(nt.Lease)),
			attribute.Int("norn.task.attempt", nt.Attempts),
		))
	return ctx
}

// traceOutcome records on the span the outcome the worker is about to
// report: failures and aborts set the span's status to Error.
func (r *run) traceOutcome(op norn.LeaseOpKind, info norn.ErrorInfo) {
	if r.span == nil {
		return
	}
	r.span.SetAttributes(attribute.String("norn.task.outcome", string(op)))
	if op == norn.OpFail || op == norn.OpAbort {
		r.span.SetAttributes(attribute.String("error.type", info.Code))
		r.span.SetStatus(codes.Error, info.Description)
	}
}

// traceEnd ends the attempt's span once its outcome is reported (or known
// not to be: the task was cancelled, its lease lost, or it was yielded).
func (r *run) traceEnd() {
	if r.span != nil {
		r.span.End()
	}
}
