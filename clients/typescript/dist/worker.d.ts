import { Client, type DependencyResult, type LogEntry, type NewTask, type OnChildFailure, type Signal, type SignalWait, type SnoozeUntil, type SubmittedTask, type Task } from "./client.js";
import { NornError } from "./errors.js";
import { type OtelSpan, type OtelTracer } from "./tracing.js";
import { type Duration } from "./wire.js";
/**
 * Runs one task. What it does decides the outcome: resolving completes the
 * task with the value as its result (JSON; undefined: no result), throwing
 * {@link Abort} aborts it for good, throwing {@link Snooze} puts it back for
 * later without spending the attempt, throwing {@link Fail} or anything else
 * fails the attempt (retried per the task's policy, else aborted). After
 * {@link ActiveTask.awaitChildren} succeeded nothing is reported: the task
 * waits for its children.
 */
export type Handler = (task: ActiveTask) => unknown;
/**
 * Runs the tasks of one claim together ({@link WorkerOptions.chunkHandler}),
 * for work that is cheaper in bulk (one insert for many rows). It resolves
 * with one outcome per task, in order: a value completes that task with the
 * value as its result (undefined: no result); an Error instance
 * ({@link Abort}, {@link Fail}, {@link Snooze} or any other) is that task's
 * outcome as if a handler had thrown it. Resolving with undefined completes
 * every task; throwing gives every task that outcome; an array of the wrong
 * length aborts every task with code `invalid_outcomes`. Each task keeps
 * its own lease, heartbeats, `signal` and outcome.
 */
export type ChunkHandler = (tasks: ActiveTask[]) => unknown;
/**
 * Wraps every handler call: it sees the task before and the outcome after,
 * and decides the outcome by what it resolves with or throws. The place for
 * logging and metrics; with a {@link WorkerOptions.tracer} it runs inside
 * the attempt's span.
 */
export type Middleware = (task: ActiveTask, next: (task: ActiveTask) => Promise<unknown>) => unknown;
/** Where the worker logs; `console` fits. */
export interface Logger {
    debug?(msg: string): void;
    info?(msg: string): void;
    warn?(msg: string): void;
    error?(msg: string): void;
}
export interface WorkerOptions {
    /** The handler of each queue served. Required unless chunkHandler is given. */
    handlers?: Record<string, Handler>;
    /**
     * Instead of handlers: runs the tasks of each claim together (see
     * {@link ChunkHandler}). `queues` is then required and `middleware` not
     * allowed.
     */
    chunkHandler?: ChunkHandler;
    /**
     * With chunkHandler: the least number of tasks a chunk waits for. Every
     * claim is then a batch claim, answering once that many tasks are ready
     * (0 or 1, the default: as soon as one is). At most chunkMax.
     */
    chunkMin?: number;
    /**
     * With chunkHandler and a chunkMin of 2 or more: how long (ms) a ready
     * task waits for chunkMin to gather before the chunk is whatever is
     * ready; default 0, wait until chunkMin are ready.
     */
    chunkLinger?: number;
    /**
     * With chunkHandler: most tasks in one chunk; default concurrency (at
     * most 1000). Every task of a chunk takes a slot, and the worker claims
     * only when chunkMin slots are free.
     */
    chunkMax?: number;
    /**
     * With chunkHandler: `"concurrency_key"` or `"label:NAME"`. Every task of
     * a chunk shares that value, and chunkMin and chunkLinger count per
     * value (a group claim); default none.
     */
    chunkGroupBy?: string;
    /** Claim preference order; default the handlers' queues in their order. */
    queues?: readonly string[];
    /**
     * Shares claims between the queues by weight instead of their order
     * (`{ emails: 3, reports: 1 }`: emails about three claims in four while
     * both have work); a queue without a weight weighs 1.
     */
    weights?: Readonly<Record<string, number>>;
    /** Most tasks running (and leased) at once; default the number of CPUs. */
    concurrency?: number;
    /** Lease length in ms asked for on claim and heartbeat; default each task's own timeout (its queue's default, 10 s unless set). */
    lease?: number;
    /** Heartbeat interval in ms; default a third of the lease. Also bounds how late a handler learns of a cancel. */
    heartbeatInterval?: number;
    /** Most tasks per claim, never more than the free slots; default 10. */
    claimBatch?: number;
    /** Long-poll time of one claim in ms; default 10000, 0 disables long-polling. */
    wait?: number;
    /** Least time between two empty claims in ms; default 1000. */
    pollInterval?: number;
    /** After a shutdown starts, how long running handlers may finish (ms) before their tasks are yielded; default 10000. */
    shutdownGrace?: number;
    /** Shown to operators with the worker id; default host:pid. */
    name?: string;
    /** Default: warnings and errors to the console. */
    logger?: Logger;
    /** Stop gracefully on SIGTERM and SIGINT while running; default true. */
    handleSignals?: boolean;
    /** Wrap every handler call, the first one outermost. */
    middleware?: readonly Middleware[];
    /**
     * Asked before every claim; while it returns false nothing is claimed
     * (it is asked again every pollInterval). E.g. claim only while the
     * machine's load is low.
     */
    capacity?: () => boolean | Promise<boolean>;
    /**
     * An OpenTelemetry Tracer (`trace.getTracer("my-worker")` from
     * `@opentelemetry/api`, which must then be installed: it is an optional
     * peer dependency). Every attempt then runs in a consumer span
     * `process <queue>` whose parent is the task's traceparent, active for the
     * handler and middleware (`context.active()`), ended once the outcome is
     * reported. Default: no span; `task.spanTraceparent` is then the task's
     * own traceparent.
     */
    tracer?: OtelTracer;
}
/** What Abort and Fail share: the error code and details to record. */
declare abstract class HandlerOutcome extends Error {
    /** Recorded as the error's code; default handler_error. */
    readonly code: string | undefined;
    /** Recorded as the error's args (a JSON object). */
    readonly details: Record<string, unknown> | undefined;
    constructor(message: string, opts: {
        code?: string;
        details?: Record<string, unknown>;
        cause?: unknown;
    });
}
/** Throw it from a handler to abort the task for good (no retry). */
export declare class Abort extends HandlerOutcome {
    constructor(message?: string, opts?: {
        code?: string;
        details?: Record<string, unknown>;
        cause?: unknown;
    });
}
/**
 * Throw it from a handler to fail the attempt with a code of your own; the
 * task is retried per its policy. `retry_in` (ms or a Go duration string; a
 * 429's Retry-After) asks for that wait instead of the policy's backoff,
 * capped by its max; a bad value is refused here, in the handler.
 */
export declare class Fail extends HandlerOutcome {
    readonly retry_in: Duration | undefined;
    constructor(message?: string, opts?: {
        code?: string;
        details?: Record<string, unknown>;
        cause?: unknown;
        retry_in?: Duration;
    });
}
/**
 * Throw it from a handler to put the task back until `delay` from now (ms or
 * a Go duration string) or until `run_at`, without spending the attempt:
 * `throw new Snooze({ delay: "30s" })`. With `until_signal` the task waits
 * for a signal of that name instead (sent with {@link Client.sendSignal}),
 * at most `timeout` (default 24h): it is claimed again once the signal
 * arrives (at once if one came before) or the timeout passes, and
 * {@link ActiveTask.signalWait}`.received` tells which:
 * `throw new Snooze({ until_signal: "approval", timeout: "24h" })`. A bad
 * value is refused here, in the handler.
 *
 * With `scope: "key"` it also holds back the task's concurrency key: the
 * key's rate-limit bucket is emptied, so no task of the key is claimed, by
 * any worker, before the snooze ends, while other keys' tasks go on. It is
 * back-pressure from whatever serves the key (a tenant's API answering 429):
 * `throw new Snooze({ delay: "30s", scope: "key" })`. The key needs a rate
 * limit (the queue's `key_rate_limit` or its own `rate_limit`); when the
 * server refuses the scope (no rate limit, or a task without a key), the
 * worker snoozes the task alone and logs a warning.
 */
export declare class Snooze extends Error {
    readonly until: SnoozeUntil;
    constructor(until: SnoozeUntil);
}
type RunState = "running" | "finishing" | "gone" | "yielded" | "awaited";
/** The worker's bookkeeping of one claimed task. */
declare class Run {
    readonly record: Task;
    readonly leaseLen: number;
    readonly interval: number;
    readonly id: string;
    readonly worker: string;
    readonly lease: number;
    readonly ctl: AbortController;
    state: RunState;
    lastOk: number;
    nextBeat: number;
    inflight: boolean;
    progress: number | undefined;
    nextSeq: number;
    prevLog: LogEntry[] | undefined;
    logQueue: Promise<unknown>;
    /** The attempt's span, with a tracer. */
    span: OtelSpan | undefined;
    constructor(record: Task, workerID: string, leaseLen: number, interval: number, sent: number);
}
/**
 * The handler's view of one claimed task. `signal` aborts when the handler
 * should stop — the task was cancelled ({@link Cancelled}), its lease was
 * lost ({@link LeaseLost}) or a shutdown's grace period ended
 * ({@link Shutdown}) — with that error as its reason; pass it to fetch and
 * friends. Nothing a handler returns after that is reported.
 */
export declare class ActiveTask {
    #private;
    readonly id: string;
    readonly queue: string;
    readonly spec: unknown;
    readonly labels: Record<string, string>;
    readonly priority: number;
    /** 1 on the first claim. */
    readonly attempts: number;
    /** The fencing token: it grows with every claim, never reused. Pass it to the systems you write to. */
    readonly lease: number;
    /** The worker id holding the lease. */
    readonly worker: string;
    readonly dependsOn: string[];
    /**
     * The outcomes of the dependencies and awaited children that ended, in
     * `dependsOn` order: `id`, `status` (completed, aborted, cancelled or
     * deleted), `result` (completed ones) and `error` (failed ones).
     */
    readonly dependencyResults: DependencyResult[];
    /** The signals the task received before this claim, in order (see {@link newSignals}). */
    readonly signals: Signal[];
    /**
     * The task's last wait for a signal (`throw new Snooze({ until_signal })`):
     * `name`, `until` and `received` (false: the wait timed out); undefined if
     * it never waited.
     */
    readonly signalWait: SignalWait | undefined;
    /** The whole claimed task. */
    readonly record: Task;
    readonly signal: AbortSignal;
    /** @internal */
    constructor(w: Worker, r: Run);
    /** The W3C traceparent the task carries, when the server records one. */
    get traceparent(): string | undefined;
    /** The W3C tracestate that travels with traceparent, when the task has one. */
    get tracestate(): string | undefined;
    /**
     * The attempt's span when the worker has a tracer (an OpenTelemetry
     * Span), else undefined.
     */
    get span(): OtelSpan | undefined;
    /**
     * The traceparent to hand on: the attempt's span when the worker has a
     * tracer, else the task's own traceparent. Pass it (with `tracestate`) to
     * the tasks the handler submits and the requests it makes, so they join
     * the trace under this attempt:
     * `client.submit(q, spec, { traceparent: task.spanTraceparent, tracestate: task.tracestate })`.
     */
    get spanTraceparent(): string | undefined;
    /** True once the handler should stop. */
    get cancelled(): boolean;
    /** Why the handler should stop (Cancelled, LeaseLost or Shutdown), or undefined. */
    get reason(): NornError | undefined;
    /** Throws the reason to stop, if there is one. */
    check(): void;
    /** Resolves after `ms`, or rejects with the reason to stop as soon as there is one. */
    sleep(ms: number): Promise<void>;
    /**
     * Records progress (0..1) right away with a heartbeat, which also extends
     * the lease. Prefer {@link setProgress} for frequent updates.
     */
    progress(p: number): Promise<void>;
    /** Records progress with the next automatic heartbeat: no call of its own. Clamped to 0..1. */
    setProgress(p: number): void;
    /**
     * Appends `data` (JSON) to the task's update log, a checkpoint the next
     * claimant reads with {@link previousLog}. Each append names the sequence
     * number it expects, so a retried append never lands twice.
     */
    log(data: unknown): Promise<LogEntry>;
    /**
     * Submits `children` and makes this task wait for them, atomically; then
     * return from the handler: the attempt ends without counting and nothing
     * more is reported for it (what the handler resolves with or throws is
     * ignored). Once every child ended the task is claimed again, its
     * {@link dependencyResults} holding their outcomes. A failed child aborts
     * the task (dependency_failed) unless `on_child_failure` is "continue".
     * Resolves with the children as submitted, in order. A later attempt may
     * await again (a fan-out in stages):
     *
     * ```ts
     * if (task.dependencyResults.length === 0) {
     *   return task.awaitChildren([{ queue: "resize", spec: small }, { queue: "resize", spec: large }]);
     * }
     * // claimed again: every child ended
     * return task.dependencyResults.map((r) => r.result);
     * ```
     *
     * Rejects with InvalidArgument (nothing changed, the handler goes on),
     * LeaseLost or Cancelled (the task is no longer this worker's), or a
     * transport error; the handler's outcome is then reported as usual.
     */
    awaitChildren(children: readonly NewTask[], opts?: {
        on_child_failure?: OnChildFailure;
    }): Promise<SubmittedTask[]>;
    /**
     * The signals the task received after sequence number `after` (0: all),
     * in order, read from the server now: a long handler waiting on a person
     * or another system can poll for them ({@link signals} holds those
     * received before the claim).
     */
    newSignals(after?: number): Promise<Signal[]>;
    /** The log entries written under earlier claims of this task, oldest first (read once). */
    previousLog(): Promise<LogEntry[]>;
}
/**
 * Claims tasks of the handlers' queues and runs them: long-polls claims into
 * free slots only, keeps every lease alive with batched background
 * heartbeats, reports each outcome, and shuts down gracefully — stops
 * claiming, lets running handlers finish within `shutdownGrace`, then aborts
 * the rest and yields their tasks so another worker takes them at once.
 */
export declare class Worker {
    #private;
    readonly client: Client;
    readonly queues: readonly string[];
    readonly concurrency: number;
    readonly name: string;
    constructor(client: Client, opts: WorkerOptions);
    /** The id the server assigned (`worker-<n>`), undefined before run() registered. */
    get id(): string | undefined;
    /** How many tasks this worker holds right now. */
    get running(): number;
    /**
     * Registers, then claims and runs tasks until {@link stop} (or SIGTERM /
     * SIGINT), then shuts down gracefully. Rejects with the error that made
     * the worker unable to work (an invalid queue, a refused token).
     */
    run(): Promise<void>;
    /**
     * Starts a graceful shutdown (also before run(): it then returns at once).
     * Resolves when run() has returned.
     */
    stop(): Promise<void>;
    /** @internal */
    _await(run: Run, children: readonly NewTask[], opts: {
        on_child_failure?: OnChildFailure;
    }): Promise<SubmittedTask[]>;
    /** @internal */
    _signals(run: Run, after: number): Promise<Signal[]>;
    /** @internal */
    _progress(run: Run, p: number): Promise<void>;
    /** @internal */
    _appendLog(run: Run, data: unknown): Promise<LogEntry>;
    /** @internal */
    _loadLog(run: Run): Promise<LogEntry[]>;
}
export {};
