package norn

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Trace context travels with a task so that the span a worker opens for an
// attempt is a child of the span that submitted it (W3C Trace Context,
// https://www.w3.org/TR/trace-context/). A task stores the two headers of
// that recommendation verbatim; norn never interprets them beyond checking
// their shape, and a task without them is simply not part of a trace.

// Limits of the trace context fields.
const (
	// MaxTraceparentLength bounds a traceparent: version 00 is exactly 55
	// bytes; later versions may append fields, which are kept.
	MaxTraceparentLength = 256
	// MaxTracestateLength is the recommendation's limit on tracestate.
	MaxTracestateLength = 512
	// MaxTracestateMembers is the recommendation's limit on its entries.
	MaxTracestateMembers = 32
)

// ValidateTraceparent returns an invalid_argument error naming field if s
// is not a W3C traceparent: "vv-<32 hex trace id>-<16 hex parent id>-<2 hex
// flags>", lowercase, neither id all zeros, version ff forbidden, and
// version 00 exactly that long. An empty s is valid (no trace context).
func ValidateTraceparent(field, s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxTraceparentLength {
		return Invalid(field, "is longer than %d bytes", MaxTraceparentLength)
	}
	bad := func(why string) error {
		return Invalid(field, "%q is not a W3C traceparent (%s; want 00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>)",
			truncate(s, 60), why)
	}
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return bad("wrong layout")
	}
	version, traceID, parentID, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	for _, part := range []string{version, traceID, parentID, flags} {
		if !lowerHex(part) {
			return bad("not lowercase hex")
		}
	}
	switch {
	case version == "ff":
		return bad("version ff is invalid")
	case version == "00" && len(s) != 55:
		return bad("version 00 has exactly four fields")
	case version == "00" && flags > "03":
		// Version 00 defines two flags, sampled (01) and random (02);
		// OpenTelemetry's propagator drops a traceparent with any other
		// bit set, and a worker's span would lose its parent.
		return bad("version 00 defines flags 00 to 03 only")
	case len(s) > 55 && s[55] != '-':
		return bad("wrong layout")
	case strings.Count(traceID, "0") == len(traceID):
		return bad("trace id is all zeros")
	case strings.Count(parentID, "0") == len(parentID):
		return bad("parent id is all zeros")
	}
	return nil
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// ValidateTracestate returns an invalid_argument error naming field if s is
// not a W3C tracestate: at most 512 bytes and 32 comma-separated key=value
// entries, keys of lowercase letters, digits and _-*/ (with an optional
// @vendor part), values of printable ASCII other than ',' and '='. An empty
// s is valid.
func ValidateTracestate(field, s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxTracestateLength {
		return Invalid(field, "is longer than %d bytes", MaxTracestateLength)
	}
	n := 0
	for member := range strings.SplitSeq(s, ",") {
		member = strings.Trim(member, " \t")
		if member == "" {
			continue
		}
		if n++; n > MaxTracestateMembers {
			return Invalid(field, "has more than %d entries", MaxTracestateMembers)
		}
		k, v, ok := strings.Cut(member, "=")
		if !ok || !tracestateKey(k) || !tracestateValue(v) {
			return Invalid(field, "entry %q is not a W3C tracestate key=value", truncate(member, 60))
		}
	}
	return nil
}

func tracestateKey(k string) bool {
	tenant, vendor, multi := strings.Cut(k, "@")
	if multi && (len(tenant) > 241 || len(vendor) > 14 || !keyChars(vendor)) {
		return false
	}
	return len(tenant) <= 256 && keyChars(tenant)
}

// keyChars: a lowercase letter or digit, then lowercase letters, digits and _-*/.
func keyChars(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*' || c == '/') {
			return false
		}
	}
	return true
}

func tracestateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// TraceFromContext returns the W3C traceparent and tracestate of the span in
// ctx (an OpenTelemetry span, or a remote span context a propagator
// extracted), or empty strings when ctx carries none.
func TraceFromContext(ctx context.Context) (traceparent, tracestate string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	return FormatTraceparent(sc), sc.TraceState().String()
}

// FormatTraceparent writes sc as a version 00 traceparent.
func FormatTraceparent(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	for _, c := range tid {
		b = append(b, hex[c>>4], hex[c&15])
	}
	b = append(b, '-')
	for _, c := range sid {
		b = append(b, hex[c>>4], hex[c&15])
	}
	f := byte(sc.TraceFlags())
	b = append(b, '-', hex[f>>4], hex[f&15])
	return string(b)
}

// WithTrace gives the tasks that carry no traceparent the trace context of
// ctx, so that a program submitting from inside a span links its tasks to it
// without setting the fields. It returns tasks itself (no copy) when ctx has
// no span or every task has its own trace context. Every store applies it on
// submit; the HTTP server applies the request's context the same way.
func WithTrace(ctx context.Context, tasks []NewTask) []NewTask {
	var tp, ts string
	var out []NewTask
	for i := range tasks {
		if tasks[i].Traceparent != "" {
			continue
		}
		if out == nil {
			if tp, ts = TraceFromContext(ctx); tp == "" {
				return tasks
			}
			out = append(make([]NewTask, 0, len(tasks)), tasks...)
		}
		out[i].Traceparent, out[i].Tracestate = tp, ts
	}
	if out == nil {
		return tasks
	}
	return out
}

// ContextWithTrace returns ctx carrying the trace context traceparent and
// tracestate as a remote parent, so that a span started from it is their
// child; ctx itself when traceparent is empty or not a W3C traceparent.
// Workers call it with a claimed task's fields.
func ContextWithTrace(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}
