// W3C trace context for tasks, without dependencies. A task carries the
// traceparent (and optional tracestate) it was submitted in; the span a
// worker opens for an attempt should be its child. The SDK starts no spans
// itself: these helpers read and write traceparent strings, so a program
// continues the trace with whatever tracer it uses (with OpenTelemetry JS:
// `propagation.extract(context.active(), { traceparent: task.traceparent })`)
// or hands a child context on (childTraceparent).
import { randomBytes } from "node:crypto";
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
/**
 * Reads a W3C traceparent; undefined when value is not one (wrong layout,
 * uppercase, all-zero ids, version ff, extra fields on version 00): the
 * rules the server applies.
 */
export function parseTraceparent(value) {
    if (!value || value.length > 256)
        return undefined;
    const m = TRACEPARENT.exec(value);
    if (!m)
        return undefined;
    const [, version, traceId, parentId, flags, rest] = m;
    if (version === "ff" || (version === "00" && rest !== undefined))
        return undefined;
    if (/^0+$/.test(traceId) || /^0+$/.test(parentId))
        return undefined;
    return { traceId: traceId, parentId: parentId, flags: parseInt(flags, 16) };
}
/** Writes tp as a version 00 traceparent. */
export function formatTraceparent(tp) {
    return `00-${tp.traceId}-${tp.parentId}-${(tp.flags & 0xff).toString(16).padStart(2, "0")}`;
}
function randomHex(bytes) {
    for (;;) {
        const h = randomBytes(bytes).toString("hex");
        if (!/^0+$/.test(h))
            return h;
    }
}
/** Starts a new trace: a traceparent with random trace and span ids. */
export function newTraceparent(sampled = true) {
    return formatTraceparent({ traceId: randomHex(16), parentId: randomHex(8), flags: sampled ? 1 : 0 });
}
/**
 * A traceparent for a new span whose parent is `parent`: the same trace
 * and flags, a new random span id; undefined when parent is not a
 * traceparent (the task is in no trace).
 */
export function childTraceparent(parent) {
    const p = parseTraceparent(parent);
    return p ? formatTraceparent({ ...p, parentId: randomHex(8) }) : undefined;
}
/** The traceparent of a span, or undefined when its context is not valid (a no-op tracer's root). */
export function spanTraceparent(span) {
    const sc = span?.spanContext();
    if (!sc)
        return undefined;
    const tp = formatTraceparent({ traceId: sc.traceId, parentId: sc.spanId, flags: sc.traceFlags });
    return parseTraceparent(tp) ? tp : undefined;
}
/**
 * Loads `@opentelemetry/api`, the optional peer dependency a traced worker
 * needs; the error names the `tracer` option when it is not installed.
 */
export async function loadOtelApi() {
    let mod;
    try {
        mod = (await import("@opentelemetry/api"));
    }
    catch (e) {
        throw Object.assign(new Error("a tracer needs the package @opentelemetry/api (npm install @opentelemetry/api)"), { cause: e });
    }
    const api = (mod.trace ? mod : mod.default);
    if (!api?.trace || !api.context || api.ROOT_CONTEXT === undefined) {
        throw new Error("@opentelemetry/api loaded, but it has no trace, context or ROOT_CONTEXT");
    }
    return api;
}
