package norn

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func TestValidateTraceparent(t *testing.T) {
	t.Parallel()
	const ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		name, in string
		valid    bool
	}{
		{"Empty", "", true},
		{"W3CExample", ok, true},
		{"NotSampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true},
		{"LaterVersionWithMoreFields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true},
		{"LaterVersionExactLength", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"SampledAndRandom", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", true},
		{"Version00UnknownFlag", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-07", false},
		{"Version00HighFlag", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-80", false},
		{"Version00WithMoreFields", ok + "-x", false},
		{"VersionFF", "ff" + ok[2:], false},
		{"Uppercase", strings.ToUpper(ok), false},
		{"ZeroTraceID", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"ZeroParentID", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"ShortTraceID", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false},
		{"WrongSeparator", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"NotHex", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", false},
		{"LaterVersionBadTail", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false},
		{"TooLong", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", 300), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateTraceparent("traceparent", c.in)
			if (err == nil) != c.valid {
				t.Fatalf("ValidateTraceparent(%q) = %v, want valid %v", c.in, err, c.valid)
			}
			var ne *Error
			if err != nil && (!errors.As(err, &ne) || ne.Field != "traceparent") {
				t.Fatalf("error %v does not name field traceparent", err)
			}
		})
	}
}

func TestValidateTracestate(t *testing.T) {
	t.Parallel()
	many := strings.Repeat("k=v,", MaxTracestateMembers) + "z=1"
	for _, c := range []struct {
		name, in string
		valid    bool
	}{
		{"Empty", "", true},
		{"W3CExample", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", true},
		{"SpacesAndEmptyMembers", " rojo=1 , ,congo=2", true},
		{"MultiTenantKey", "fw529a3039@dt=0", true},
		{"ValueWithSpaceInside", "a=b c", true},
		{"UppercaseKey", "Rojo=1", false},
		{"NoValue", "rojo", false},
		{"EmptyValue", "rojo=", false},
		{"EqualsInValue", "rojo=a=b", false},
		{"TrailingSpaceInValue", "rojo=a \t", true}, // trimmed as optional whitespace
		{"NonASCII", "rojo=é", false},
		{"TooManyMembers", many, false},
		{"TooLong", "a=" + strings.Repeat("v", MaxTracestateLength), false},
		{"LongVendor", "t@" + strings.Repeat("v", 15) + "=1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := ValidateTracestate("tracestate", c.in)
			if (err == nil) != c.valid {
				t.Fatalf("ValidateTracestate(%q) = %v, want valid %v", c.in, err, c.valid)
			}
		})
	}
}

// TraceFromContext and FormatTraceparent agree with OpenTelemetry's own
// W3C propagator, and WithTrace copies only when it fills something in.
func TestTraceFromContext(t *testing.T) {
	t.Parallel()
	if tp, ts := TraceFromContext(context.Background()); tp != "" || ts != "" {
		t.Fatalf("no span: %q %q", tp, ts)
	}
	carrier := propagation.MapCarrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate": "rojo=00f067aa0ba902b7"}
	ctx := propagation.TraceContext{}.Extract(context.Background(), carrier)
	if !trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("propagator extracted nothing")
	}
	tp, ts := TraceFromContext(ctx)
	if tp != carrier["traceparent"] || ts != carrier["tracestate"] {
		t.Fatalf("TraceFromContext = %q %q, want %q %q", tp, ts, carrier["traceparent"], carrier["tracestate"])
	}
	tasks := []NewTask{{Queue: "q"}, {Queue: "q", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}}
	got := WithTrace(ctx, tasks)
	if got[0].Traceparent != tp || got[0].Tracestate != ts || got[1].Traceparent != tasks[1].Traceparent || got[1].Tracestate != "" {
		t.Fatalf("WithTrace: %+v", got)
	}
	if tasks[0].Traceparent != "" {
		t.Fatal("WithTrace changed the caller's slice")
	}
	if same := WithTrace(context.Background(), tasks); &same[0] != &tasks[0] {
		t.Fatal("WithTrace copied without a span")
	}
}

// FuzzValidateTraceparent: whatever the validator accepts, OpenTelemetry's
// W3C propagator reads as a valid span context (workers parent their spans
// on what the store kept).
func FuzzValidateTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=1")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", "")
	f.Add("hello", "a=b,c")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		if ValidateTraceparent("traceparent", tp) != nil || tp == "" {
			return
		}
		ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsValid() {
			t.Fatalf("accepted %q, which OpenTelemetry does not read", tp)
		}
		if FormatTraceparent(sc)[3:52] != tp[3:52] {
			t.Fatalf("ids of %q read as %q", tp, FormatTraceparent(sc))
		}
		_ = ValidateTracestate("tracestate", ts)
	})
}
