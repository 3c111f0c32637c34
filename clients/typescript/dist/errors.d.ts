import type { components } from "./openapi.js";
/** An error code of the API (`invalid_argument`, `lease_lost`, …). */
export type ErrorCode = components["schemas"]["WireError"]["code"];
/** What an error carries besides its message. */
export interface NornErrorOptions {
    field?: string;
    status?: number;
    cause?: unknown;
}
/**
 * Every error the server answers, and every failure to reach it, is a
 * NornError: `code` says what went wrong, `field` names the input the server
 * refused (`tasks[3].priority`), `status` is the HTTP status (0 when there was
 * no answer at all). Catch the subclass of the code you handle:
 *
 * ```ts
 * try { await client.submit("emails", spec, { priority: -1 }); }
 * catch (e) { if (e instanceof InvalidArgument) console.log(e.field, e.message); }
 * ```
 */
export declare class NornError extends Error {
    /** The API's error code; a code this client does not know yet is kept as is. */
    readonly code: string;
    /** The offending input, when the server named one. */
    readonly field?: string;
    /** The HTTP status, 0 when no response arrived. */
    readonly status: number;
    constructor(code: string, message: string, opts?: NornErrorOptions);
}
/** `invalid_argument` (400): bad input; `field` names it. Nothing was written. */
export declare class InvalidArgument extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/** `unauthenticated` (401): missing or unknown bearer token. */
export declare class Unauthenticated extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/** `permission_denied` (403): the token's role or queue scope does not allow the call. */
export declare class PermissionDenied extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/** `not_found` (404): no such task (or route). */
export declare class NotFound extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/** `conflict` (409): wrong state, `if_version` mismatch, log `seq` mismatch. */
export declare class Conflict extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/** `lease_lost` (409): the worker's lease is not the current one; stop working on the task. */
export declare class LeaseLost extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/** `cancelled` (409): the task was cancelled; stop working on it. */
export declare class Cancelled extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/** `too_large` (413): a size limit was exceeded; `field` says which. */
export declare class TooLarge extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/** `unavailable` (503), or no answer at all (status 0): retry later. */
export declare class Unavailable extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/**
 * `insufficient_storage` (507): the server's disk is full; the write changed
 * nothing. Writes resume by themselves once space is freed: retry later.
 */
export declare class InsufficientStorage extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/** `internal` (500): a server bug; the details are in the server's log. */
export declare class Internal extends NornError {
    constructor(message: string, opts?: NornErrorOptions);
}
/**
 * The reason a worker gives a handler whose task it yields at shutdown
 * (never sent by the server).
 */
export declare class Shutdown extends NornError {
    constructor(message: string);
}
/** The error of a wire error body `{"code","message","field"}`. */
export declare function errorFromWire(wire: {
    code?: unknown;
    message?: unknown;
    field?: unknown;
}, status: number): NornError;
