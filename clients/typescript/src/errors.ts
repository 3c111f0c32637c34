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
export class NornError extends Error {
  /** The API's error code; a code this client does not know yet is kept as is. */
  readonly code: string;
  /** The offending input, when the server named one. */
  readonly field?: string;
  /** The HTTP status, 0 when no response arrived. */
  readonly status: number;

  constructor(code: string, message: string, opts: NornErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = code;
    if (opts.field !== undefined) this.field = opts.field;
    this.status = opts.status ?? 0;
  }
}

/** `invalid_argument` (400): bad input; `field` names it. Nothing was written. */
export class InvalidArgument extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("invalid_argument", message, { status: 400, ...opts });
  }
}
/** `unauthenticated` (401): missing or unknown bearer token. */
export class Unauthenticated extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("unauthenticated", message, { status: 401, ...opts });
  }
}
/** `permission_denied` (403): the token's role or queue scope does not allow the call. */
export class PermissionDenied extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("permission_denied", message, { status: 403, ...opts });
  }
}
/** `not_found` (404): no such task (or route). */
export class NotFound extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("not_found", message, { status: 404, ...opts });
  }
}
/** `conflict` (409): wrong state, `if_version` mismatch, log `seq` mismatch. */
export class Conflict extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("conflict", message, { status: 409, ...opts });
  }
}
/** `lease_lost` (409): the worker's lease is not the current one; stop working on the task. */
export class LeaseLost extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("lease_lost", message, { status: 409, ...opts });
  }
}
/** `cancelled` (409): the task was cancelled; stop working on it. */
export class Cancelled extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("cancelled", message, { status: 409, ...opts });
  }
}
/** `too_large` (413): a size limit was exceeded; `field` says which. */
export class TooLarge extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("too_large", message, { status: 413, ...opts });
  }
}
/** `unavailable` (503), or no answer at all (status 0): retry later. */
export class Unavailable extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("unavailable", message, { status: 503, ...opts });
  }
}
/**
 * `insufficient_storage` (507): the server's disk is full; the write changed
 * nothing. Writes resume by themselves once space is freed: retry later.
 */
export class InsufficientStorage extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("insufficient_storage", message, { status: 507, ...opts });
  }
}
/** `internal` (500): a server bug; the details are in the server's log. */
export class Internal extends NornError {
  constructor(message: string, opts: NornErrorOptions = {}) {
    super("internal", message, { status: 500, ...opts });
  }
}
/**
 * The reason a worker gives a handler whose task it yields at shutdown
 * (never sent by the server).
 */
export class Shutdown extends NornError {
  constructor(message: string) {
    super("shutdown", message, { status: 0 });
  }
}

type ErrorClass = new (message: string, opts?: NornErrorOptions) => NornError;

const byCode: Record<string, ErrorClass> = {
  invalid_argument: InvalidArgument,
  unauthenticated: Unauthenticated,
  permission_denied: PermissionDenied,
  not_found: NotFound,
  conflict: Conflict,
  lease_lost: LeaseLost,
  cancelled: Cancelled,
  too_large: TooLarge,
  unavailable: Unavailable,
  insufficient_storage: InsufficientStorage,
  internal: Internal,
};

/** The error of a wire error body `{"code","message","field"}`. */
export function errorFromWire(
  wire: { code?: unknown; message?: unknown; field?: unknown },
  status: number,
): NornError {
  const code = typeof wire.code === "string" && wire.code !== "" ? wire.code : "internal";
  const message = typeof wire.message === "string" ? wire.message : "";
  const opts: { field?: string; status: number } = { status };
  if (typeof wire.field === "string" && wire.field !== "") opts.field = wire.field;
  const cls = byCode[code];
  return cls ? new cls(message, opts) : new NornError(code, message, opts);
}
