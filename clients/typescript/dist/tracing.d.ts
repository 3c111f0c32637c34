/** The fields of a traceparent. */
export interface TraceParent {
    /** 32 lowercase hex digits, not all zero. */
    traceId: string;
    /** 16 lowercase hex digits, not all zero: the span to parent on. */
    parentId: string;
    /** Trace flags; bit 0 is "sampled". */
    flags: number;
}
/**
 * Reads a W3C traceparent; undefined when value is not one (wrong layout,
 * uppercase, all-zero ids, version ff, extra fields on version 00): the
 * rules the server applies.
 */
export declare function parseTraceparent(value: string | undefined | null): TraceParent | undefined;
/** Writes tp as a version 00 traceparent. */
export declare function formatTraceparent(tp: TraceParent): string;
/** Starts a new trace: a traceparent with random trace and span ids. */
export declare function newTraceparent(sampled?: boolean): string;
/**
 * A traceparent for a new span whose parent is `parent`: the same trace
 * and flags, a new random span id; undefined when parent is not a
 * traceparent (the task is in no trace).
 */
export declare function childTraceparent(parent: string | undefined | null): string | undefined;
/** The parts of an OpenTelemetry SpanContext the worker reads. */
export interface OtelSpanContext {
    traceId: string;
    spanId: string;
    traceFlags: number;
}
/** The parts of an OpenTelemetry Span (`@opentelemetry/api`) the worker calls. */
export interface OtelSpan {
    spanContext(): OtelSpanContext;
    setAttribute(key: string, value: string | number | boolean): unknown;
    setStatus(status: {
        code: number;
        message?: string;
    }): unknown;
    recordException(exception: Error): void;
    end(): void;
}
/**
 * The parts of an OpenTelemetry Tracer (`@opentelemetry/api`) the worker
 * calls: `trace.getTracer("my-worker")` or a provider's `getTracer` fits.
 */
export interface OtelTracer {
    startSpan(name: string, options?: {
        kind?: number;
        attributes?: Record<string, string | number | boolean>;
    }, context?: any): OtelSpan;
}
/** The parts of the `@opentelemetry/api` module the worker uses to parent and activate spans. */
export interface OtelApi {
    ROOT_CONTEXT: unknown;
    SpanKind: {
        CONSUMER: number;
    };
    SpanStatusCode: {
        ERROR: number;
    };
    trace: {
        setSpanContext(ctx: any, sc: {
            traceId: string;
            spanId: string;
            traceFlags: number;
            isRemote?: boolean;
            traceState?: unknown;
        }): unknown;
        setSpan(ctx: any, span: any): unknown;
    };
    context: {
        with<R>(ctx: any, fn: () => R): R;
    };
    createTraceState?(raw?: string): unknown;
}
/** The traceparent of a span, or undefined when its context is not valid (a no-op tracer's root). */
export declare function spanTraceparent(span: OtelSpan | undefined): string | undefined;
/**
 * Loads `@opentelemetry/api`, the optional peer dependency a traced worker
 * needs; the error names the `tracer` option when it is not installed.
 */
export declare function loadOtelApi(): Promise<OtelApi>;
