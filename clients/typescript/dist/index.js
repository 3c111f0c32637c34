export * from "./errors.js";
export * from "./client.js";
export { Worker, ActiveTask, Abort, Fail, Snooze } from "./worker.js";
export { parseDuration } from "./wire.js";
export { parseTraceparent, formatTraceparent, newTraceparent, childTraceparent, } from "./tracing.js";
