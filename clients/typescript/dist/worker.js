import os from "node:os";
import { Client, } from "./client.js";
import { Cancelled, Conflict, Internal, InvalidArgument, LeaseLost, NornError, NotFound, PermissionDenied, Shutdown, Unauthenticated, Unavailable, InsufficientStorage, } from "./errors.js";
import { loadOtelApi, parseTraceparent, spanTraceparent } from "./tracing.js";
import { formatDuration, formatTime, parseDuration } from "./wire.js";
/** What Abort and Fail share: the error code and details to record. */
class HandlerOutcome extends Error {
    /** Recorded as the error's code; default handler_error. */
    code;
    /** Recorded as the error's args (a JSON object). */
    details;
    constructor(message, opts) {
        super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
        this.name = new.target.name;
        this.code = opts.code;
        this.details = opts.details;
    }
}
/** Throw it from a handler to abort the task for good (no retry). */
export class Abort extends HandlerOutcome {
    constructor(message = "", opts = {}) {
        super(message, opts);
    }
}
/**
 * Throw it from a handler to fail the attempt with a code of your own; the
 * task is retried per its policy. `retry_in` (ms or a Go duration string; a
 * 429's Retry-After) asks for that wait instead of the policy's backoff,
 * capped by its max; a bad value is refused here, in the handler.
 */
export class Fail extends HandlerOutcome {
    retry_in;
    constructor(message = "", opts = {}) {
        if (opts.retry_in !== undefined)
            formatDuration(opts.retry_in, "retry_in");
        super(message, opts);
        this.retry_in = opts.retry_in;
    }
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
export class Snooze extends Error {
    until;
    constructor(until) {
        let what;
        const scope = until !== null && typeof until === "object" ? until.scope : undefined;
        if (scope !== undefined && scope !== "key") {
            throw new InvalidArgument(`must be "key" or absent, not ${JSON.stringify(scope)}`, { field: "scope" });
        }
        if (until !== null && typeof until === "object" && until.until_signal !== undefined) {
            if (scope !== undefined) {
                throw new InvalidArgument("holds a key back until a time: give delay or run_at, not until_signal", { field: "scope" });
            }
            if (until.delay !== undefined || until.run_at !== undefined) {
                throw new InvalidArgument("give until_signal, or delay or run_at, not both", { field: "until_signal" });
            }
            if (typeof until.until_signal !== "string" || until.until_signal === "") {
                throw new InvalidArgument("must be a non-empty string", { field: "until_signal" });
            }
            what = `until signal ${JSON.stringify(until.until_signal)}`;
            if (until.timeout !== undefined)
                what += `, at most ${formatDuration(until.timeout, "timeout")}`;
        }
        else {
            if (until === null || typeof until !== "object" || (until.delay === undefined) === (until.run_at === undefined)) {
                throw new InvalidArgument("give exactly one of delay and run_at", { field: "delay" });
            }
            if (until.timeout !== undefined) {
                throw new InvalidArgument("is the longest wait for until_signal; it needs one", { field: "timeout" });
            }
            what = until.delay !== undefined ? `for ${formatDuration(until.delay, "delay")}` : `until ${formatTime(until.run_at, "run_at")}`;
            if (scope !== undefined)
                what += " with its key";
        }
        super(`snoozed ${what}`);
        this.name = "Snooze";
        this.until = until;
    }
}
const DEFAULT_LEASE_MS = 10_000;
const DEFAULT_ERROR_CODE = "handler_error";
const MAX_CLAIM = 1000;
const MAX_WAIT_MS = 300_000;
// How long run() waits for handlers that ignore their signal after their
// tasks were yielded; their outcomes are discarded anyway.
const ABANDON_AFTER_MS = 5_000;
// Recorded error descriptions stay well inside the server's limits.
const MAX_DESCRIPTION = 8000;
/** The worker's bookkeeping of one claimed task. */
class Run {
    record;
    leaseLen;
    interval;
    id;
    worker;
    lease;
    ctl = new AbortController();
    state = "running";
    lastOk;
    nextBeat;
    inflight = false;
    progress;
    nextSeq = 0;
    prevLog;
    logQueue = Promise.resolve();
    /** The attempt's span, with a tracer. */
    span;
    constructor(record, workerID, leaseLen, interval, sent) {
        this.record = record;
        this.leaseLen = leaseLen;
        this.interval = interval;
        this.id = record.id;
        this.worker = record.owner ?? workerID;
        this.lease = record.lease;
        this.lastOk = sent;
        this.nextBeat = sent + interval;
    }
}
/**
 * The handler's view of one claimed task. `signal` aborts when the handler
 * should stop — the task was cancelled ({@link Cancelled}), its lease was
 * lost ({@link LeaseLost}) or a shutdown's grace period ended
 * ({@link Shutdown}) — with that error as its reason; pass it to fetch and
 * friends. Nothing a handler returns after that is reported.
 */
export class ActiveTask {
    id;
    queue;
    spec;
    labels;
    priority;
    /** 1 on the first claim. */
    attempts;
    /** The fencing token: it grows with every claim, never reused. Pass it to the systems you write to. */
    lease;
    /** The worker id holding the lease. */
    worker;
    dependsOn;
    /**
     * The outcomes of the dependencies and awaited children that ended, in
     * `dependsOn` order: `id`, `status` (completed, aborted, cancelled or
     * deleted), `result` (completed ones) and `error` (failed ones).
     */
    dependencyResults;
    /** The signals the task received before this claim, in order (see {@link newSignals}). */
    signals;
    /**
     * The task's last wait for a signal (`throw new Snooze({ until_signal })`):
     * `name`, `until` and `received` (false: the wait timed out); undefined if
     * it never waited.
     */
    signalWait;
    /** The whole claimed task. */
    record;
    signal;
    #w;
    #r;
    /** @internal */
    constructor(w, r) {
        this.#w = w;
        this.#r = r;
        const rec = r.record;
        this.record = rec;
        this.id = r.id;
        this.queue = rec.queue;
        this.spec = rec.spec;
        this.labels = { ...(rec.labels ?? {}) };
        this.priority = rec.priority;
        this.attempts = rec.attempts;
        this.lease = r.lease;
        this.worker = r.worker;
        this.dependsOn = [...(rec.depends_on ?? [])];
        this.dependencyResults = [...(rec.dependency_results ?? [])];
        this.signals = [...(rec.signals ?? [])];
        this.signalWait = rec.signal_wait;
        this.signal = r.ctl.signal;
    }
    /** The W3C traceparent the task carries, when the server records one. */
    get traceparent() {
        const rec = this.record;
        const tp = rec.traceparent ?? rec.trace?.traceparent;
        return typeof tp === "string" && tp !== "" ? tp : undefined;
    }
    /** The W3C tracestate that travels with traceparent, when the task has one. */
    get tracestate() {
        const ts = this.record.tracestate;
        return typeof ts === "string" && ts !== "" ? ts : undefined;
    }
    /**
     * The attempt's span when the worker has a tracer (an OpenTelemetry
     * Span), else undefined.
     */
    get span() {
        return this.#r.span;
    }
    /**
     * The traceparent to hand on: the attempt's span when the worker has a
     * tracer, else the task's own traceparent. Pass it (with `tracestate`) to
     * the tasks the handler submits and the requests it makes, so they join
     * the trace under this attempt:
     * `client.submit(q, spec, { traceparent: task.spanTraceparent, tracestate: task.tracestate })`.
     */
    get spanTraceparent() {
        return spanTraceparent(this.#r.span) ?? this.traceparent;
    }
    /** True once the handler should stop. */
    get cancelled() {
        return this.signal.aborted;
    }
    /** Why the handler should stop (Cancelled, LeaseLost or Shutdown), or undefined. */
    get reason() {
        return this.signal.aborted ? this.signal.reason : undefined;
    }
    /** Throws the reason to stop, if there is one. */
    check() {
        if (this.signal.aborted)
            throw this.signal.reason;
    }
    /** Resolves after `ms`, or rejects with the reason to stop as soon as there is one. */
    sleep(ms) {
        return new Promise((resolve, reject) => {
            if (this.signal.aborted)
                return reject(this.signal.reason);
            const onAbort = () => {
                clearTimeout(t);
                reject(this.signal.reason);
            };
            const t = setTimeout(() => {
                this.signal.removeEventListener("abort", onAbort);
                resolve();
            }, ms);
            this.signal.addEventListener("abort", onAbort, { once: true });
        });
    }
    /**
     * Records progress (0..1) right away with a heartbeat, which also extends
     * the lease. Prefer {@link setProgress} for frequent updates.
     */
    async progress(p) {
        if (typeof p !== "number" || !(p >= 0 && p <= 1)) {
            throw new InvalidArgument(`must be a number between 0 and 1, got ${String(p)}`, { field: "progress" });
        }
        this.check();
        await this.#w._progress(this.#r, p);
    }
    /** Records progress with the next automatic heartbeat: no call of its own. Clamped to 0..1. */
    setProgress(p) {
        if (typeof p !== "number" || Number.isNaN(p))
            return;
        this.#r.progress = Math.min(Math.max(p, 0), 1);
    }
    /**
     * Appends `data` (JSON) to the task's update log, a checkpoint the next
     * claimant reads with {@link previousLog}. Each append names the sequence
     * number it expects, so a retried append never lands twice.
     */
    log(data) {
        if (this.signal.aborted)
            return Promise.reject(this.signal.reason);
        const r = this.#r;
        const p = r.logQueue.then(() => this.#w._appendLog(r, data));
        r.logQueue = p.catch(() => { });
        return p;
    }
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
    awaitChildren(children, opts = {}) {
        return this.#w._await(this.#r, children, opts);
    }
    /**
     * The signals the task received after sequence number `after` (0: all),
     * in order, read from the server now: a long handler waiting on a person
     * or another system can poll for them ({@link signals} holds those
     * received before the claim).
     */
    newSignals(after = 0) {
        return this.#w._signals(this.#r, after);
    }
    /** The log entries written under earlier claims of this task, oldest first (read once). */
    previousLog() {
        const r = this.#r;
        const p = r.logQueue.then(() => this.#w._loadLog(r));
        r.logQueue = p.catch(() => { });
        return p;
    }
}
/** A promise that anyone can settle, and a way to wait for "something changed". */
class Changed {
    #waiters = [];
    notify() {
        const w = this.#waiters;
        this.#waiters = [];
        for (const f of w)
            f();
    }
    /** Resolves on the next notify or after ms (Infinity: no time limit). */
    wait(ms) {
        return new Promise((resolve) => {
            let t;
            const done = () => {
                if (t !== undefined)
                    clearTimeout(t);
                resolve();
            };
            this.#waiters.push(done);
            if (Number.isFinite(ms))
                t = setTimeout(done, Math.max(0, ms));
        });
    }
}
const now = () => performance.now();
function isGone(e) {
    return e instanceof Cancelled || e instanceof LeaseLost || e instanceof NotFound;
}
function isTransient(e) {
    return e instanceof Unavailable || e instanceof InsufficientStorage || e instanceof Internal;
}
/**
 * Claims tasks of the handlers' queues and runs them: long-polls claims into
 * free slots only, keeps every lease alive with batched background
 * heartbeats, reports each outcome, and shuts down gracefully — stops
 * claiming, lets running handlers finish within `shutdownGrace`, then aborts
 * the rest and yields their tasks so another worker takes them at once.
 */
export class Worker {
    client;
    queues;
    concurrency;
    name;
    #handlers;
    #lease;
    #leaseWire;
    #interval;
    #claimBatch;
    #weights;
    #wait;
    #poll;
    #grace;
    #log;
    #handleSignals;
    #chain;
    #capacity;
    #tracer;
    #chunk;
    #otel;
    #runs = new Map();
    #changed = new Changed();
    #stopCtl = new AbortController();
    #id;
    #started = false;
    #hbStop = false;
    #done;
    #resolveDone;
    constructor(client, opts) {
        if (!(client instanceof Client))
            throw new InvalidArgument("a Client is required", { field: "client" });
        const chunkHandler = opts?.chunkHandler;
        let handlers = opts?.handlers;
        if (chunkHandler !== undefined) {
            if (handlers !== undefined && handlers !== null && Object.keys(handlers).length > 0) {
                throw new InvalidArgument("a worker runs either handlers or a chunkHandler, not both", { field: "chunkHandler" });
            }
            if (typeof chunkHandler !== "function")
                throw new InvalidArgument("must be a function taking an array of tasks", { field: "chunkHandler" });
            handlers = {};
        }
        else {
            if (handlers === undefined || handlers === null || typeof handlers !== "object" || Object.keys(handlers).length === 0) {
                throw new InvalidArgument("map at least one queue to a handler", { field: "handlers" });
            }
            for (const f of ["chunkMin", "chunkLinger", "chunkMax", "chunkGroupBy"]) {
                if (opts[f])
                    throw new InvalidArgument("needs a chunkHandler", { field: f });
            }
        }
        for (const [q, fn] of Object.entries(handlers)) {
            if (typeof fn !== "function")
                throw new InvalidArgument(`the handler of queue ${JSON.stringify(q)} is not a function`, { field: `handlers.${q}` });
        }
        const queues = opts.queues ? [...opts.queues] : Object.keys(handlers);
        if (queues.length === 0)
            throw new InvalidArgument("at least one queue is required", { field: "queues" });
        queues.forEach((q, i) => {
            if (chunkHandler === undefined && !(q in handlers))
                throw new InvalidArgument(`no handler for queue ${JSON.stringify(q)}`, { field: `queues[${i}]` });
        });
        const concurrency = opts.concurrency ?? Math.max(1, os.cpus().length);
        if (!Number.isInteger(concurrency) || concurrency < 1)
            throw new InvalidArgument("must be a positive integer", { field: "concurrency" });
        if (chunkHandler !== undefined) {
            const max = opts.chunkMax ?? Math.min(concurrency, MAX_CLAIM);
            if (!Number.isInteger(max) || max < 1 || max > MAX_CLAIM)
                throw new InvalidArgument(`must be an integer between 1 and ${MAX_CLAIM}`, { field: "chunkMax" });
            if (max > concurrency)
                throw new InvalidArgument(`must be at most concurrency (${concurrency}), got ${max}`, { field: "chunkMax" });
            const min = opts.chunkMin ?? 0;
            if (!Number.isInteger(min) || min < 0)
                throw new InvalidArgument("must be a non-negative integer", { field: "chunkMin" });
            if (min > concurrency)
                throw new InvalidArgument(`must be at most concurrency (${concurrency}), got ${min}`, { field: "chunkMin" });
            if (min > max)
                throw new InvalidArgument(`must be at most chunkMax (${max}), got ${min}`, { field: "chunkMin" });
            const linger = opts.chunkLinger ?? 0;
            if (!(linger >= 0))
                throw new InvalidArgument("must not be negative", { field: "chunkLinger" });
            if (linger > 0 && min < 2)
                throw new InvalidArgument("needs a chunkMin of 2 or more", { field: "chunkLinger" });
            if (opts.middleware !== undefined && opts.middleware.length > 0) {
                throw new InvalidArgument("middleware wraps single-task handlers; a chunkHandler takes none", { field: "middleware" });
            }
            const groupBy = opts.chunkGroupBy || undefined;
            if (groupBy !== undefined && !/^(concurrency_key|label:[^:,]{1,128})$/.test(groupBy)) {
                throw new InvalidArgument('must be "concurrency_key" or "label:" followed by a label name', { field: "chunkGroupBy" });
            }
            this.#chunk = { handler: chunkHandler, min, linger, max, groupBy };
        }
        if (opts.lease !== undefined && !(opts.lease >= 1))
            throw new InvalidArgument("must be at least 1 (ms)", { field: "lease" });
        if (opts.heartbeatInterval !== undefined) {
            if (!(opts.heartbeatInterval > 0))
                throw new InvalidArgument("must be positive", { field: "heartbeatInterval" });
            if (opts.lease !== undefined && opts.heartbeatInterval >= opts.lease) {
                throw new InvalidArgument(`must be shorter than lease (${opts.lease} ms)`, { field: "heartbeatInterval" });
            }
        }
        const claimBatch = opts.claimBatch ?? 10;
        if (!Number.isInteger(claimBatch) || claimBatch < 1 || claimBatch > MAX_CLAIM) {
            throw new InvalidArgument(`must be between 1 and ${MAX_CLAIM}`, { field: "claimBatch" });
        }
        const wait = opts.wait ?? 10_000;
        if (!(wait >= 0 && wait <= MAX_WAIT_MS))
            throw new InvalidArgument(`must be between 0 and ${MAX_WAIT_MS} (ms)`, { field: "wait" });
        const poll = opts.pollInterval ?? 1000;
        if (!(poll >= 0))
            throw new InvalidArgument("must not be negative", { field: "pollInterval" });
        const grace = opts.shutdownGrace ?? 10_000;
        if (!(grace >= 0))
            throw new InvalidArgument("must not be negative", { field: "shutdownGrace" });
        const middleware = opts.middleware ?? [];
        if (!Array.isArray(middleware))
            throw new InvalidArgument("must be an array of functions", { field: "middleware" });
        middleware.forEach((mw, i) => {
            if (typeof mw !== "function")
                throw new InvalidArgument("is not a function", { field: `middleware[${i}]` });
        });
        if (opts.capacity !== undefined && typeof opts.capacity !== "function") {
            throw new InvalidArgument("must be a function returning a boolean", { field: "capacity" });
        }
        if (opts.tracer !== undefined && (opts.tracer === null || typeof opts.tracer.startSpan !== "function")) {
            throw new InvalidArgument("must be an OpenTelemetry Tracer (an object with startSpan)", { field: "tracer" });
        }
        this.client = client;
        this.#tracer = opts.tracer;
        this.#handlers = { ...handlers };
        this.queues = queues;
        for (const [q, w] of Object.entries(opts.weights ?? {})) {
            if (!queues.includes(q))
                throw new InvalidArgument(`${JSON.stringify(q)} is not a queue the worker claims from`, { field: `weights[${JSON.stringify(q)}]` });
            if (!Number.isInteger(w) || w < 1 || w > 1000)
                throw new InvalidArgument("must be an integer between 1 and 1000", { field: `weights[${JSON.stringify(q)}]` });
        }
        this.#weights = opts.weights ? { ...opts.weights } : undefined;
        this.concurrency = concurrency;
        this.#lease = opts.lease;
        this.#leaseWire = opts.lease === undefined ? undefined : formatDuration(opts.lease, "lease");
        this.#interval = opts.heartbeatInterval;
        this.#claimBatch = claimBatch;
        this.#wait = wait;
        this.#poll = poll;
        this.#grace = grace;
        this.name = opts.name ?? `${os.hostname()}:${process.pid}`;
        this.#log = opts.logger ?? { warn: (m) => console.warn(m), error: (m) => console.error(m) };
        this.#handleSignals = opts.handleSignals ?? true;
        this.#capacity = opts.capacity;
        let chain = async (task) => {
            const handler = this.#handlers[task.queue];
            if (!handler)
                throw new Abort(`no handler registered for queue ${JSON.stringify(task.queue)}`, { code: "no_handler" });
            return handler(task);
        };
        for (const mw of [...middleware].reverse()) {
            const next = chain;
            chain = async (task) => mw(task, next);
        }
        this.#chain = chain;
        this.#done = new Promise((resolve) => (this.#resolveDone = resolve));
    }
    /** The id the server assigned (`worker-<n>`), undefined before run() registered. */
    get id() {
        return this.#id;
    }
    /** How many tasks this worker holds right now. */
    get running() {
        return this.#runs.size;
    }
    /**
     * Registers, then claims and runs tasks until {@link stop} (or SIGTERM /
     * SIGINT), then shuts down gracefully. Rejects with the error that made
     * the worker unable to work (an invalid queue, a refused token).
     */
    async run() {
        if (this.#started)
            throw new Error("Worker.run called twice");
        this.#started = true;
        const onSignal = (sig) => {
            this.#log.info?.(`norn worker: ${sig}, shutting down`);
            void this.stop();
        };
        if (this.#handleSignals) {
            process.on("SIGTERM", onSignal);
            process.on("SIGINT", onSignal);
        }
        try {
            if (this.#tracer && !this.#otel) {
                try {
                    this.#otel = await loadOtelApi();
                }
                catch (e) {
                    throw new InvalidArgument(e.message, { field: "tracer", cause: e });
                }
            }
            if (!(await this.#register()))
                return;
            const hb = this.#heartbeats();
            let err;
            try {
                await this.#claimLoop();
            }
            catch (e) {
                err = e;
            }
            finally {
                this.#stopCtl.abort();
                await this.#drain();
                this.#hbStop = true;
                this.#changed.notify();
                await hb;
            }
            if (err !== undefined)
                throw err;
        }
        finally {
            if (this.#handleSignals) {
                process.off("SIGTERM", onSignal);
                process.off("SIGINT", onSignal);
            }
            this.#resolveDone();
        }
    }
    /**
     * Starts a graceful shutdown (also before run(): it then returns at once).
     * Resolves when run() has returned.
     */
    stop() {
        if (!this.#stopCtl.signal.aborted)
            this.#stopCtl.abort();
        this.#changed.notify();
        if (!this.#started)
            this.#resolveDone();
        return this.#done;
    }
    get #stopping() {
        return this.#stopCtl.signal.aborted;
    }
    /** Sleeps up to ms; returns early (true) when a shutdown starts. */
    async #pause(ms) {
        if (this.#stopping)
            return true;
        await new Promise((resolve) => {
            const t = setTimeout(done, Math.max(0, ms));
            const sig = this.#stopCtl.signal;
            function done() {
                clearTimeout(t);
                sig.removeEventListener("abort", done);
                resolve();
            }
            sig.addEventListener("abort", done, { once: true });
        });
        return this.#stopping;
    }
    async #register() {
        let delay = 100;
        while (!this.#stopping) {
            try {
                this.#id = await this.client.registerWorker(this.name, this.queues, { signal: this.#stopCtl.signal });
                this.#log.info?.(`norn worker ${this.#id} registered: queues ${this.queues.join(",")}, concurrency ${this.concurrency}`);
                return true;
            }
            catch (e) {
                if (this.#stopping)
                    return false;
                if (!isTransient(e))
                    throw e;
                this.#log.warn?.(`norn worker: registration failed, retrying in ${delay} ms: ${String(e)}`);
                await this.#pause(delay);
                delay = Math.min(delay * 2, 5000);
            }
        }
        return false;
    }
    async #claimLoop() {
        let backoff = 100;
        // A chunk worker claims only once a whole chunkMin fits: a batch
        // claim's min may not exceed its n.
        const chunk = this.#chunk;
        const need = chunk ? Math.max(chunk.min, 1) : 1;
        while (!this.#stopping) {
            while (this.concurrency - this.#runs.size < need && !this.#stopping)
                await this.#changed.wait(Infinity);
            if (this.#stopping)
                return;
            if (this.#capacity && !(await this.#hasCapacity())) {
                await this.#pause(Math.max(this.#poll, 10));
                continue;
            }
            const free = this.concurrency - this.#runs.size;
            const sent = now();
            let tasks;
            try {
                tasks = await this.client.claim(this.#id, this.queues, {
                    n: Math.min(free, chunk ? chunk.max : this.#claimBatch),
                    ...(chunk && chunk.min >= 2 ? { min: chunk.min } : {}),
                    ...(chunk && chunk.min >= 2 && chunk.linger > 0 ? { linger: chunk.linger } : {}),
                    ...(chunk?.groupBy ? { groupBy: chunk.groupBy } : {}),
                    ...(this.#leaseWire !== undefined ? { timeout: this.#leaseWire } : {}),
                    ...(this.#wait > 0 ? { wait: this.#wait } : {}),
                    ...(this.#weights ? { weights: this.#weights } : {}),
                    signal: this.#stopCtl.signal,
                });
            }
            catch (e) {
                if (this.#stopping)
                    return;
                if (e instanceof InvalidArgument || e instanceof Unauthenticated || e instanceof PermissionDenied)
                    throw e;
                this.#log.warn?.(`norn worker ${this.#id}: claim failed, retrying in ${backoff} ms: ${String(e)}`);
                await this.#pause(backoff);
                backoff = Math.min(backoff * 2, 5000);
                continue;
            }
            backoff = 100;
            if (chunk && tasks.length > 0)
                this.#startChunk(tasks, sent);
            else
                for (const rec of tasks)
                    this.#start(rec, sent);
            if (tasks.length === 0)
                await this.#pause(this.#poll - (now() - sent));
        }
    }
    async #hasCapacity() {
        try {
            return Boolean(await this.#capacity());
        }
        catch (e) {
            this.#log.error?.(`norn worker ${this.#id}: capacity callback failed; claiming nothing for now: ${String(e)}`);
            return false;
        }
    }
    #leaseLen(rec) {
        if (this.#lease !== undefined)
            return this.#lease;
        try {
            const ms = rec.timeout ? parseDuration(rec.timeout) : 0;
            if (ms > 0)
                return ms;
        }
        catch {
            // The server writes valid durations; fall back if it did not.
        }
        return DEFAULT_LEASE_MS;
    }
    #newRun(rec, sent) {
        const leaseLen = this.#leaseLen(rec);
        let interval = this.#interval;
        if (interval === undefined || interval >= leaseLen)
            interval = leaseLen / 3;
        return new Run(rec, this.#id, leaseLen, interval, sent);
    }
    #start(rec, sent) {
        const run = this.#newRun(rec, sent);
        const p = this.#serve(run, new ActiveTask(this, run)).finally(() => {
            this.#runs.delete(run);
            this.#changed.notify();
        });
        this.#runs.set(run, p);
        this.#changed.notify();
    }
    // ---- running a task ----------------------------------------------------
    async #serve(run, task) {
        const ctx = this.#traceStart(run, task);
        try {
            await this.#call(run, task, ctx);
        }
        finally {
            // Every attempt's span ends: after its outcome was reported, or once
            // it is known there is none to report (cancelled, lost, yielded).
            try {
                run.span?.end();
            }
            catch (e) {
                this.#log.error?.(`norn task ${run.id}: the tracer's span failed to end: ${String(e)}`);
            }
        }
    }
    async #call(run, task, ctx) {
        let o;
        try {
            o = returned(await (ctx === undefined ? this.#chain(task) : this.#otel.context.with(ctx, () => this.#chain(task))));
        }
        catch (e) {
            o = raised(e);
        }
        await this.#finish(run, o.op, o.result, o.code, o.desc, o.details, o.thrown);
    }
    // ---- running a chunk ---------------------------------------------------
    #startChunk(recs, sent) {
        const runs = recs.map((rec) => this.#newRun(rec, sent));
        const p = this.#serveChunk(runs).finally(() => {
            for (const run of runs)
                this.#runs.delete(run);
            this.#changed.notify();
        });
        for (const run of runs)
            this.#runs.set(run, p);
        this.#changed.notify();
    }
    async #serveChunk(runs) {
        const tasks = runs.map((run) => new ActiveTask(this, run));
        for (let i = 0; i < runs.length; i++)
            this.#traceStart(runs[i], tasks[i]);
        try {
            let verdicts;
            try {
                const out = await this.#chunk.handler([...tasks]);
                if (out === undefined)
                    verdicts = runs.map(() => returned(undefined));
                else if (!Array.isArray(out) || out.length !== runs.length) {
                    const n = Array.isArray(out) ? out.length : typeof out;
                    const bad = {
                        op: "abort",
                        result: undefined,
                        code: "invalid_outcomes",
                        desc: `the chunk handler returned ${n} outcomes for ${runs.length} tasks (an array, one per task, or undefined)`,
                    };
                    verdicts = runs.map(() => bad);
                }
                else
                    verdicts = out.map((o) => (o instanceof Error ? raised(o) : returned(o)));
            }
            catch (e) {
                const v = raised(e);
                verdicts = runs.map(() => v);
            }
            // Each task's outcome is its own, reported and retried on its own
            // while heartbeats keep the others' leases.
            await Promise.all(runs.map((run, i) => {
                const o = verdicts[i];
                return this.#finish(run, o.op, o.result, o.code, o.desc, o.details, o.thrown);
            }));
        }
        finally {
            for (const run of runs) {
                try {
                    run.span?.end();
                }
                catch (e) {
                    this.#log.error?.(`norn task ${run.id}: the tracer's span failed to end: ${String(e)}`);
                }
            }
        }
    }
    /**
     * Starts the attempt's span, a consumer span whose parent is the task's
     * traceparent (a new trace when it has none), with the attributes the Go
     * worker sets; returns the context to run the handler in, or undefined
     * without a tracer. A tracer that throws costs the span, not the task.
     */
    #traceStart(run, task) {
        const otel = this.#otel;
        if (!this.#tracer || !otel)
            return undefined;
        try {
            let ctx = otel.ROOT_CONTEXT;
            const parent = parseTraceparent(task.traceparent);
            if (parent) {
                const ts = task.tracestate;
                ctx = otel.trace.setSpanContext(ctx, {
                    traceId: parent.traceId,
                    spanId: parent.parentId,
                    traceFlags: parent.flags,
                    isRemote: true,
                    ...(ts !== undefined && otel.createTraceState ? { traceState: otel.createTraceState(ts) } : {}),
                });
            }
            run.span = this.#tracer.startSpan(`process ${task.queue}`, {
                kind: otel.SpanKind.CONSUMER,
                attributes: {
                    "messaging.system": "norn",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": task.queue,
                    "messaging.message.id": task.id,
                    "norn.worker": run.worker,
                    "norn.task.lease": run.lease,
                    "norn.task.attempt": task.attempts,
                },
            }, ctx);
            return otel.trace.setSpan(ctx, run.span);
        }
        catch (e) {
            run.span = undefined;
            this.#log.error?.(`norn task ${run.id}: the tracer failed to start a span; running untraced: ${String(e)}`);
            return undefined;
        }
    }
    /** Records on the attempt's span the outcome about to be reported; failures and aborts set its status to error. */
    #traceOutcome(run, op, code, desc, thrown) {
        const span = run.span;
        if (!span)
            return;
        try {
            span.setAttribute("norn.task.outcome", op);
            if (op === "fail" || op === "abort") {
                span.setAttribute("error.type", code);
                if (thrown instanceof Error)
                    span.recordException(thrown);
                span.setStatus({ code: this.#otel.SpanStatusCode.ERROR, message: desc.split("\n")[0] ?? "" });
            }
        }
        catch (e) {
            this.#log.error?.(`norn task ${run.id}: the tracer's span failed: ${String(e)}`);
        }
    }
    async #finish(run, op, result, code, desc, details, thrown) {
        if (run.state !== "running")
            return;
        run.state = "finishing";
        this.#traceOutcome(run, op, code, desc, thrown);
        if (op === "snooze")
            this.#log.info?.(`norn task ${run.id}: ${desc}`);
        else if (op !== "complete")
            this.#log.info?.(`norn task ${run.id}: ${op} (${code}): ${desc.split("\n")[0]}`);
        const retryIn = thrown instanceof Fail ? thrown.retry_in : undefined;
        let err = await this.#report(run, op, result, code, desc, details, retryIn);
        const until = result;
        if (err && op === "snooze" && until?.scope !== undefined && err instanceof InvalidArgument && err.field === "scope") {
            // The key has no rate limit to hold back (or the task no key): the
            // task's own snooze still stands, where the lease expiring instead
            // would run it again at once.
            this.#log.warn?.(`norn task ${run.id}: the key cannot be held back, snoozing the task alone: ${String(err)}`);
            err = await this.#report(run, op, { ...until, scope: undefined }, code, desc, details, retryIn);
        }
        if (err && op === "complete" && !isGone(err) && !isTransient(err)) {
            // The server refused the result itself (too large): the handler would
            // produce it again, so give up for good.
            this.#log.error?.(`norn task ${run.id}: result refused, aborting: ${String(err)}`);
            err = await this.#report(run, "abort", undefined, "invalid_result", String(err).slice(0, MAX_DESCRIPTION));
        }
        if (!err)
            return;
        if (isGone(err))
            this.#log.info?.(`norn task ${run.id}: outcome not recorded, the task was cancelled or the lease lost: ${String(err)}`);
        else
            this.#log.error?.(`norn task ${run.id}: could not report ${op}; the task runs again when its lease expires: ${String(err)}`);
    }
    // result is the snooze's SnoozeUntil for op "snooze".
    async #report(run, op, result, code, desc, details, retryIn) {
        const c = this.client;
        let delay = 100;
        const giveUp = now() + Math.max(run.leaseLen, 10_000);
        for (;;) {
            try {
                const error = { code, ...(desc ? { description: desc } : {}), ...(details ? { args: details } : {}) };
                if (op === "complete")
                    await c.complete(run.id, run.worker, run.lease, result);
                else if (op === "fail")
                    await c.fail(run.id, run.worker, run.lease, retryIn === undefined ? error : { ...error, retry_in: retryIn });
                else if (op === "snooze")
                    await c.snooze(run.id, run.worker, run.lease, result);
                else
                    await c.abort(run.id, run.worker, run.lease, error);
                return undefined;
            }
            catch (e) {
                const err = e instanceof NornError ? e : new Internal(String(e), { cause: e });
                if (!isTransient(err) || now() + delay > giveUp || run.state === "gone")
                    return err;
                await new Promise((r) => setTimeout(r, delay));
                delay = Math.min(delay * 2, 2000);
            }
        }
    }
    // ---- calls a task makes ------------------------------------------------
    /** @internal */
    async _await(run, children, opts) {
        if (run.state !== "running") {
            if (run.ctl.signal.aborted)
                throw run.ctl.signal.reason;
            throw new Error(`await: task ${JSON.stringify(run.id)} is no longer running in this worker (awaited already?)`);
        }
        // Heartbeats go on while the call is in flight; the handler's outcome
        // cannot be reported meanwhile.
        run.state = "finishing";
        let out;
        try {
            ({ children: out } = await this.client.awaitChildren(run.id, run.worker, run.lease, children, opts));
        }
        catch (e) {
            if (run.state === "finishing")
                run.state = "running";
            throw this.#check(run, e);
        }
        if (run.state === "finishing")
            run.state = "awaited";
        this.#log.info?.(`norn task ${run.id}: awaits ${out.length} children`);
        return out;
    }
    /** @internal */
    async _signals(run, after) {
        if (run.ctl.signal.aborted)
            throw run.ctl.signal.reason;
        try {
            return await this.client.listSignals(run.id, { after, signal: run.ctl.signal });
        }
        catch (e) {
            throw this.#check(run, e);
        }
    }
    /** @internal */
    async _progress(run, p) {
        const sent = now();
        try {
            await this.client.heartbeat(run.id, run.worker, run.lease, {
                progress: p,
                ...(this.#leaseWire !== undefined ? { extend: this.#leaseWire } : {}),
            });
        }
        catch (e) {
            throw this.#check(run, e);
        }
        this.#beaten(run, sent);
    }
    /** @internal */
    async _appendLog(run, data) {
        if (run.ctl.signal.aborted)
            throw run.ctl.signal.reason;
        if (run.nextSeq === 0) {
            // Lease 1 is the first claim ever, so the log is empty; later
            // claimants learn where the log ends by reading it once.
            if (run.lease === 1)
                run.nextSeq = 1;
            else
                await this._loadLog(run);
        }
        let delay = 50;
        for (let attempt = 0;; attempt++) {
            const seq = run.nextSeq;
            try {
                const entry = await this.client.appendLog(run.id, run.worker, run.lease, data, { seq });
                run.nextSeq = entry.seq + 1;
                return entry;
            }
            catch (e) {
                if (e instanceof Conflict) {
                    // Our number is behind: an earlier append whose reply was lost
                    // landed. If it is this very entry, that is success.
                    let entries;
                    try {
                        entries = await this.client.readLog(run.id, { after: seq - 1 });
                    }
                    catch (e2) {
                        throw this.#check(run, e2);
                    }
                    const first = entries[0];
                    if (first) {
                        run.nextSeq = entries[entries.length - 1].seq + 1;
                        if (first.seq === seq && first.lease === run.lease && JSON.stringify(first.data) === JSON.stringify(data))
                            return first;
                    }
                    if (attempt >= 3)
                        throw this.#check(run, e);
                }
                else if (isTransient(e)) {
                    if (attempt >= 3)
                        throw this.#check(run, e);
                    await new Promise((r) => setTimeout(r, delay));
                    if (run.ctl.signal.aborted)
                        throw run.ctl.signal.reason;
                    delay *= 2;
                }
                else {
                    throw this.#check(run, e);
                }
            }
        }
    }
    /** @internal */
    async _loadLog(run) {
        if (run.prevLog)
            return run.prevLog;
        const page = 1000;
        const prev = [];
        let after = 0;
        for (;;) {
            let entries;
            try {
                entries = await this.client.readLog(run.id, { after, limit: page });
            }
            catch (e) {
                throw this.#check(run, e);
            }
            for (const e of entries) {
                if (e.lease < run.lease)
                    prev.push(e);
                after = e.seq;
            }
            if (entries.length < page)
                break;
        }
        run.prevLog = prev;
        if (run.nextSeq <= after)
            run.nextSeq = after + 1;
        return prev;
    }
    // ---- heartbeats --------------------------------------------------------
    /**
     * Keeps every running task's lease alive. Whatever is due (or nearly)
     * goes out in one lease batch, so a worker running many tasks makes one
     * call per interval. A task with no successful heartbeat for a whole lease
     * is treated as lost: another worker may own it by now.
     */
    async #heartbeats() {
        const inflight = new Set();
        while (!this.#hbStop) {
            const t = now();
            let next = t + 3_600_000;
            const due = [];
            const expired = [];
            for (const r of this.#runs.keys()) {
                if (r.state !== "running" && r.state !== "finishing")
                    continue;
                const expiry = r.lastOk + r.leaseLen;
                if (t >= expiry) {
                    expired.push(r);
                    continue;
                }
                if (r.inflight)
                    continue;
                // Coalesce: what is due within a tenth of its interval goes out now,
                // so tasks claimed together stay together.
                if (r.nextBeat <= t + r.interval / 10) {
                    r.inflight = true;
                    due.push(r);
                    continue;
                }
                next = Math.min(next, r.nextBeat, expiry);
            }
            for (const r of expired) {
                this.#lose(r, new LeaseLost(`task ${JSON.stringify(r.id)}: no heartbeat succeeded for a whole lease; another worker may own it`));
            }
            if (due.length > 0) {
                const p = this.#beat(due).finally(() => {
                    inflight.delete(p);
                    this.#changed.notify();
                });
                inflight.add(p);
                continue;
            }
            if (expired.length === 0)
                await this.#changed.wait(next - t);
        }
        await Promise.all(inflight);
    }
    async #beat(due) {
        const ops = due.map((r) => {
            const op = { op: "heartbeat", id: r.id, worker: r.worker, lease: r.lease };
            if (r.progress !== undefined) {
                op.progress = r.progress;
                r.progress = undefined;
            }
            if (this.#leaseWire !== undefined)
                op.extend = this.#leaseWire;
            return op;
        });
        const sent = now();
        let batchErr;
        let results = [];
        try {
            results = await this.client.leaseBatch(ops);
        }
        catch (e) {
            batchErr = e instanceof NornError ? e : new Unavailable(String(e), { cause: e });
        }
        const t = now();
        due.forEach((r, i) => {
            r.inflight = false;
            const res = results[i];
            const err = batchErr ?? (res instanceof NornError ? res : undefined);
            if (!err) {
                if (sent > r.lastOk)
                    r.lastOk = sent;
                r.nextBeat = sent + r.interval;
            }
            else if (isGone(err)) {
                this.#lose(r, err);
            }
            else {
                // Transient: keep the unsent progress and retry soon.
                const op = ops[i];
                if (r.progress === undefined && op.progress !== undefined)
                    r.progress = op.progress;
                r.nextBeat = t + Math.min(r.interval, 500);
                this.#log.warn?.(`norn task ${r.id}: heartbeat failed, retrying: ${String(err)}`);
            }
        });
    }
    #beaten(run, sent) {
        if (sent > run.lastOk) {
            run.lastOk = sent;
            run.nextBeat = sent + run.interval;
            this.#changed.notify();
        }
    }
    /** Reacts to an error of a call made for run (one meaning the task is no longer ours stops the handler) and returns it. */
    #check(run, e) {
        if (isGone(e))
            this.#lose(run, e);
        return e;
    }
    #lose(run, err) {
        if (run.state !== "running" && run.state !== "finishing")
            return;
        run.state = "gone";
        const reason = err instanceof Cancelled ? new Cancelled(err.message, { status: err.status })
            : err instanceof NotFound ? new LeaseLost(`task ${JSON.stringify(run.id)} was deleted: ${err.message}`, { status: err.status })
                : new LeaseLost(err.message, { status: err.status });
        run.ctl.abort(reason);
        this.#changed.notify();
        this.#log.info?.(`norn task ${run.id}: lost (${err.message}), handler told to stop`);
    }
    // ---- shutdown ----------------------------------------------------------
    async #drain() {
        const deadline = now() + this.#grace;
        while (this.#runs.size > 0) {
            const left = deadline - now();
            if (left <= 0)
                break;
            await this.#changed.wait(left);
        }
        await this.#yieldAll();
        const pending = [...this.#runs.values()];
        if (pending.length === 0)
            return;
        let timer;
        const abandoned = await Promise.race([
            Promise.all(pending).then(() => false),
            new Promise((r) => (timer = setTimeout(() => r(true), ABANDON_AFTER_MS))),
        ]);
        clearTimeout(timer);
        if (abandoned)
            this.#log.warn?.(`norn worker ${this.#id}: abandoning handlers that ignore their signal`);
    }
    async #yieldAll() {
        const ops = [];
        for (const r of this.#runs.keys()) {
            if (r.state !== "running")
                continue;
            r.state = "yielded";
            r.ctl.abort(new Shutdown(`worker ${this.#id} is shutting down; task ${r.id} was yielded`));
            ops.push({ op: "yield", id: r.id, worker: r.worker, lease: r.lease });
        }
        if (ops.length === 0)
            return;
        let results;
        try {
            results = await this.client.leaseBatch(ops);
        }
        catch (e) {
            this.#log.error?.(`norn worker ${this.#id}: yield failed; the tasks run again when their leases expire: ${String(e)}`);
            return;
        }
        results.forEach((res, i) => {
            if (res instanceof NornError && !isGone(res))
                this.#log.warn?.(`norn task ${ops[i].id}: yield failed: ${String(res)}`);
        });
        this.#log.info?.(`norn worker ${this.#id}: yielded ${ops.length} unfinished task(s)`);
    }
}
/** The outcome of a handler that resolved with result. */
function returned(result) {
    if (result !== undefined) {
        try {
            if (JSON.stringify(result) === undefined)
                throw new TypeError(`a ${typeof result} is not JSON`);
        }
        catch (e) {
            return { op: "abort", result: undefined, code: "invalid_result", desc: `the handler's result is not JSON: ${e instanceof Error ? e.message : String(e)}` };
        }
    }
    return { op: "complete", result, code: "", desc: "" };
}
/** The outcome of a handler that threw e. */
function raised(e) {
    if (e instanceof Snooze)
        return { op: "snooze", result: e.until, code: "", desc: e.message, thrown: e };
    if (e instanceof HandlerOutcome) {
        return { op: e instanceof Abort ? "abort" : "fail", result: undefined, code: e.code || DEFAULT_ERROR_CODE, desc: describe(e, false), details: e.details, thrown: e };
    }
    return { op: "fail", result: undefined, code: DEFAULT_ERROR_CODE, desc: describe(e, true), thrown: e };
}
/** The recorded description of a handler's error: its message, and for unexpected errors the stack. */
function describe(e, withStack) {
    let text;
    if (e instanceof Error) {
        text = withStack && e.stack ? e.stack : e.message || e.name;
    }
    else {
        try {
            text = `thrown: ${typeof e === "string" ? e : JSON.stringify(e)}`;
        }
        catch {
            text = `thrown: ${String(e)}`;
        }
    }
    if (text.length > MAX_DESCRIPTION) {
        text = text.slice(0, MAX_DESCRIPTION / 4) + "\n…\n" + text.slice(text.length - (MAX_DESCRIPTION * 3) / 4);
    }
    return text;
}
