export * from "./errors.js";
export * from "./client.js";
export { Worker, ActiveTask, Abort, Fail, Snooze, type Handler, type ChunkHandler, type Logger, type Middleware, type WorkerOptions } from "./worker.js";
export { type Duration, type Time, parseDuration } from "./wire.js";
export type { components, paths, operations } from "./openapi.js";
export { type TraceParent, type OtelTracer, type OtelSpan, type OtelSpanContext, parseTraceparent, formatTraceparent, newTraceparent, childTraceparent, } from "./tracing.js";
