package storetest

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/nornq/norn"
)

// Trace contexts of the cases: W3C's own examples.
const (
	traceparentA = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tracestateA  = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
	traceparentB = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
)

// spanContext returns ctx carrying traceparentB as a remote span (what a
// propagator extracts from an incoming request) with tracestate ts.
func spanContext(t *testing.T, ctx context.Context, ts string) context.Context {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	state, err := trace.ParseTraceState(ts)
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceState: state, Remote: true})
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

func exerciseTrace(t *testing.T, setup setupFunc) {
	t.Run("Trace", func(t *testing.T) {
		t.Parallel()

		t.Run("IsStoredAndHandedToTheWorker", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			sub := b.submitOne(norn.NewTask{ID: "a", Queue: "q", Traceparent: traceparentA, Tracestate: tracestateA})
			plain := b.submitOne(norn.NewTask{ID: "b", Queue: "q"})
			if sub.Traceparent != traceparentA || sub.Tracestate != tracestateA {
				t.Fatalf("submit result traceparent %q tracestate %q", sub.Traceparent, sub.Tracestate)
			}
			if plain.Traceparent != "" || plain.Tracestate != "" {
				t.Fatalf("task submitted without trace context has traceparent %q tracestate %q", plain.Traceparent, plain.Tracestate)
			}
			c := b.claimID("w", "a", "q")
			if c.Traceparent != traceparentA || c.Tracestate != tracestateA {
				t.Fatalf("claimed task traceparent %q tracestate %q", c.Traceparent, c.Tracestate)
			}
			b.heartbeat(c, norn.Heartbeat{Progress: ptr(0.5)})
			b.complete(c, `1`)
			if g := b.get("a"); g.Traceparent != traceparentA || g.Tracestate != tracestateA {
				t.Fatalf("completed task traceparent %q tracestate %q", g.Traceparent, g.Tracestate)
			}
			summary := b.listAll(norn.Query{Filter: norn.Filter{Queues: []string{"q"}}, Summary: true})
			if len(summary) != 2 || summary[0].Traceparent != traceparentA || summary[1].Traceparent != "" {
				t.Fatalf("summary list: %d tasks, first traceparent %q", len(summary), summary[0].Traceparent)
			}
		})

		t.Run("IsTakenFromTheSubmittingContext", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			ctx := spanContext(t, b.ctx, "congo=t61rcWkgMzE")
			res, err := s.Submit(ctx, norn.NewTask{ID: "ctx", Queue: "q"},
				norn.NewTask{ID: "own", Queue: "q", Traceparent: traceparentA})
			b.must(err, "Submit")
			if got := res[0].Task; got.Traceparent != traceparentB || got.Tracestate != "congo=t61rcWkgMzE" {
				t.Fatalf("task without trace context submitted in a span: traceparent %q tracestate %q, want %q",
					got.Traceparent, got.Tracestate, traceparentB)
			}
			if got := res[1].Task; got.Traceparent != traceparentA || got.Tracestate != "" {
				t.Fatalf("task with its own traceparent: %q tracestate %q, want its own", got.Traceparent, got.Tracestate)
			}
			if g := b.get("ctx"); g.Traceparent != traceparentB {
				t.Fatalf("stored traceparent %q, want %q", g.Traceparent, traceparentB)
			}
			tx, err := s.Transact(spanContext(t, b.ctx, ""), norn.Txn{Submit: []norn.NewTask{{ID: "tx", Queue: "q"}}})
			b.must(err, "Transact")
			if got := tx.Submitted[0].Task; got.Traceparent != traceparentB {
				t.Fatalf("task submitted by a transaction in a span: traceparent %q", got.Traceparent)
			}
		})

		t.Run("InvalidIsRefusedNamingTheField", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			for _, c := range []struct {
				name  string
				nt    norn.NewTask
				field string
			}{
				{"Garbage", norn.NewTask{Queue: "q", Traceparent: "hello"}, "tasks[1].traceparent"},
				{"Uppercase", norn.NewTask{Queue: "q", Traceparent: "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}, "tasks[1].traceparent"},
				{"ZeroTraceID", norn.NewTask{Queue: "q", Traceparent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, "tasks[1].traceparent"},
				{"VersionFF", norn.NewTask{Queue: "q", Traceparent: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "tasks[1].traceparent"},
				{"BadTracestate", norn.NewTask{Queue: "q", Traceparent: traceparentA, Tracestate: "Not A Key=1"}, "tasks[1].tracestate"},
				{"TracestateAlone", norn.NewTask{Queue: "q", Tracestate: "a=b"}, "tasks[1].tracestate"},
			} {
				t.Run(c.name, func(t *testing.T) {
					_, err := s.Submit(b.ctx, norn.NewTask{Queue: "q"}, c.nt)
					wantErr(t, "Submit", err, norn.ErrInvalidArgument)
					var ne *norn.Error
					if !errors.As(err, &ne) || ne.Field != c.field {
						t.Fatalf("error %v names another field than %q", err, c.field)
					}
				})
			}
			b.count(norn.Filter{}, 0)
		})
	})
}
