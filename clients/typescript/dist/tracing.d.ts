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
