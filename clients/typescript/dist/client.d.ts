import type { components } from "./openapi.js";
import { NornError } from "./errors.js";
import { type Duration, type Time } from "./wire.js";
type Schemas = components["schemas"];
/** A task as the API returns it (field names as on the wire). */
export type Task = Schemas["Task"];
export type Status = Schemas["Status"];
export type LogEntry = Schemas["LogEntry"];
export type QueueInfo = Schemas["QueueInfo"];
export type Stats = Schemas["Stats"];
export type GroupCount = Schemas["GroupCount"];
export type WorkerInfo = Schemas["WorkerInfo"];
export type TxnResult = Schemas["TxnResult"];
export type SweepReport = Schemas["SweepReport"];
export type TaskEvent = Schemas["Event"];
export type Whoami = Schemas["WhoamiResponse"];
export type ErrorInfo = Schemas["ErrorInfo"];
export type RetryPolicy = Schemas["RetryPolicy"];
export type Retention = Schemas["Retention"];
export type Schedule = Schemas["Schedule"];
export type Throughput = Schemas["Throughput"];
/** A batch: its state, callbacks and members' counts (see {@link Client.createBatch}). */
export type Batch = Schemas["Batch"];
export type BatchState = Schemas["BatchState"];
export type ThroughputPoint = Schemas["ThroughputPoint"];
/**
 * The outcome of one ended dependency (or awaited child), as a task's
 * `dependency_results` lists them in `depends_on` order: `status` is
 * completed (with `result`), aborted or cancelled (with `error`), or deleted.
 * Kept with the task even after the dependency is purged.
 */
export type DependencyResult = Schemas["DependencyResult"];
/** A signal a task received: `seq` (1, 2, … per task), `name`, `data` (any JSON) and `time`. */
export type Signal = Schemas["Signal"];
/**
 * A task's last wait for a signal: `name`, `until` (when it times out) and
 * `received` (false on a task running again: the wait timed out).
 */
export type SignalWait = Schemas["SignalWait"];
/**
 * The state of one sequence (see {@link Client.sequence}): `head` (the one
 * member that may run now; absent when there is none), `head_status`,
 * `halted` (the head ended aborted and the queue's `sequence_on_failure` is
 * halt: retry or delete the head to go on) and `waiting` (members waiting
 * their turn).
 */
export type SequenceInfo = Schemas["SequenceInfo"];
/**
 * A submitted task. `duplicate` is true when nothing was created: a task
 * with its id existed, or a task of the queue holds its `unique_key` (that
 * task is returned). `replaced` is true when such a submit (`on_duplicate:
 * "replace"`) replaced the holder in place: the task returned is the
 * holder with the submission's spec, labels, priority and run time.
 */
export type SubmittedTask = Task & {
    duplicate?: boolean;
    replaced?: boolean;
};
/** How a failed task is retried: `base·2ⁿ` backoff capped at `max`. */
export type RetryOptions = Omit<RetryPolicy, "base" | "max"> & {
    base?: Duration;
    max?: Duration;
};
/** Per-call options every call takes. */
export interface CallOptions {
    /** Aborts the call; it then rejects with the signal's reason. */
    signal?: AbortSignal;
}
/** The options of a new task, named as in the API. */
export type TaskOptions = Omit<Schemas["NewTask"], "queue" | "spec" | "run_at" | "delay" | "timeout" | "retry" | "unique_for" | "max_runtime" | "expires_at" | "expire_in" | "debounce_max"> & {
    /** When it becomes ready (at most one of run_at and delay). */
    run_at?: Time;
    /** How long after submission it becomes ready. */
    delay?: Duration;
    /** Its lease length (the queue's default otherwise). */
    timeout?: Duration;
    retry?: RetryOptions;
    /** With unique_key: also a duplicate of a task with the key that ended less than this long ago. */
    unique_for?: Duration;
    /** Runtime limit of each attempt, however often the worker heartbeats (the queue's default otherwise). */
    max_runtime?: Duration;
    /** The deadline by which it must have started, else it ends aborted with code expired (one of expires_at and expire_in). */
    expires_at?: Time;
    /** expires_at as a duration from when the task may first run. */
    expire_in?: Duration;
    /** With on_duplicate "replace": replacements move the holder's run time at most this long after it was first submitted. */
    debounce_max?: Duration;
};
/** What a failed awaited child does to the task awaiting it (see {@link Client.awaitChildren}). */
export type OnChildFailure = NonNullable<Schemas["AwaitRequest"]["on_child_failure"]>;
/** The answer to an await: the task as it now is (blocked, or ready when every child had ended) and the children in request order. */
export interface AwaitResult {
    task: Task;
    children: SubmittedTask[];
}
/** A task to submit in a batch or a transaction. */
export type NewTask = TaskOptions & {
    queue: string;
    spec?: unknown;
};
/** A batch callback: a task to submit once the batch is done; its id is the server's. */
export type BatchCallback = Omit<NewTask, "id" | "batch" | "depends_on">;
/** A new batch (see {@link Client.createBatch}). */
export interface NewBatch {
    /** The server picks one when absent; an existing id is a Conflict. */
    id?: string;
    labels?: Record<string, string>;
    /** Submitted once every member completed, with the id `norn:batch:<id>:success`. */
    on_success?: BatchCallback;
    /** Submitted once every member ended, whatever its outcome, with the id `norn:batch:<id>:complete`. */
    on_complete?: BatchCallback;
    /** Create the batch sealed: `tasks` are then its only members. */
    seal?: boolean;
    /** Members submitted with the batch, all or nothing. */
    tasks?: readonly NewTask[];
}
/** Which batches listBatches returns: one page in id order. */
export interface BatchQuery {
    state?: BatchState;
    /** Batches with every one of these labels. */
    labels?: Record<string, string>;
    /** Only batches whose id sorts after this one: the last id of the previous page. */
    after?: string;
    /** Page size (default 100, at most 1000). */
    limit?: number;
}
/** Which tasks a list, count or delete applies to; every given filter must match. */
export interface Filter {
    /** One queue, a comma list or an array. */
    queue?: string | readonly string[];
    /** Statuses, or the aliases pending, succeeded, failed, terminal. */
    status?: string | readonly string[];
    labels?: Record<string, string>;
    owner?: string;
    id_contains?: string;
    /** The tasks that list this id among their dependencies. */
    depends_on?: string;
    /** The tasks submitted with this unique key. */
    unique_key?: string;
    /** The members of this batch. */
    batch?: string;
    created_after?: Time;
    created_before?: Time;
    updated_after?: Time;
    updated_before?: Time;
}
export interface ListOptions extends Filter, CallOptions {
    /** Most tasks (a page's size for listPage); 0 or absent: every match for list. */
    limit?: number;
    order?: "id" | "newest" | "priority";
    /** Omit spec, result, errors and history. */
    summary?: boolean;
}
export interface PageOptions extends ListOptions {
    cursor?: string;
}
export type UpdateOptions = Omit<Schemas["Update"], "run_at"> & {
    run_at?: Time;
};
export type QueueSettings = Omit<Schemas["QueueUpdate"], "timeout" | "retry" | "retention" | "max_runtime"> & {
    timeout?: Duration;
    /** Default runtime limit of tasks submitted later (0: none). */
    max_runtime?: Duration;
    retry?: RetryOptions;
    retention?: {
        completed?: Duration;
        aborted?: Duration;
        cancelled?: Duration;
    };
};
/** The settings of a schedule, as in the API, with durations as numbers (ms) or strings. */
export type ScheduleOptions = Omit<Schemas["ScheduleUpdate"], "timeout" | "retry" | "max_runtime"> & {
    timeout?: Duration;
    retry?: RetryOptions;
    max_runtime?: Duration;
};
/**
 * When a snoozed task becomes ready again: after `delay`, or at `run_at`.
 * `scope: "key"` also holds back the task's concurrency key until then: the
 * key's rate-limit bucket is emptied, so no task of the key is claimed
 * before the snooze ends while other keys' tasks go on. The key needs a rate
 * limit (the queue's `key_rate_limit` or its own `rate_limit`); otherwise
 * the server refuses the snooze with `InvalidArgument` (field `scope`).
 */
export type SnoozeTime = {
    delay: Duration;
    run_at?: undefined;
    until_signal?: undefined;
    scope?: SnoozeScope;
} | {
    run_at: Time;
    delay?: undefined;
    until_signal?: undefined;
    scope?: SnoozeScope;
};
/** `"key"`: a snooze that also holds back the task's concurrency key. */
export type SnoozeScope = "key";
/**
 * A snooze until a signal named `until_signal` arrives (ready at once; one
 * sent before counts) or `timeout` passes (default 24h; ready, with
 * `signal_wait.received` false).
 */
export type SnoozeUntilSignal = {
    until_signal: string;
    timeout?: Duration;
    delay?: undefined;
    run_at?: undefined;
    scope?: undefined;
};
/** When a snoozed task becomes ready again: after `delay`, at `run_at`, or once a signal arrives. */
export type SnoozeUntil = SnoozeTime | SnoozeUntilSignal;
/** What a failing or aborting worker records. */
export interface TaskError {
    code: string;
    description?: string;
    args?: Record<string, unknown>;
    /**
     * On a fail only: the wait asked for before the retry (ms or a Go duration
     * string; a 429's Retry-After), instead of the policy's backoff, capped by
     * its max. It never adds a retry the policy does not allow.
     */
    retry_in?: Duration;
}
/** One operation of a lease batch. */
export type LeaseOp = {
    op: "heartbeat";
    id: string;
    worker: string;
    lease: number;
    progress?: number;
    extend?: Duration;
} | {
    op: "complete";
    id: string;
    worker: string;
    lease: number;
    result?: unknown;
} | {
    op: "fail" | "abort";
    id: string;
    worker: string;
    lease: number;
    error: TaskError;
} | {
    op: "yield";
    id: string;
    worker: string;
    lease: number;
} | ({
    op: "snooze";
    id: string;
    worker: string;
    lease: number;
} & SnoozeTime);
/** The result of one lease batch operation: its answer, or its error. */
export type LeaseOpResult = {
    deadline?: string;
} | NornError;
export interface ClientOptions {
    /** The server; default $NORN_SERVER, else http://127.0.0.1:7070. */
    url?: string;
    /** Bearer token; default $NORN_TOKEN. */
    token?: string;
    /** Time limit of one call in milliseconds (a claim's long poll gets its wait on top); default 30000. */
    timeout?: number;
    /** The fetch to use; default the global one. */
    fetch?: typeof fetch;
}
export declare const DEFAULT_SERVER = "http://127.0.0.1:7070";
/**
 * A client of a Norn server's HTTP API. Every call returns a promise that
 * rejects with a {@link NornError} subclass per error code.
 */
export declare class Client {
    #private;
    readonly url: string;
    constructor(opts?: ClientOptions);
    /**
     * Submits one task. An existing id or a held `unique_key` is not an
     * error: the stored task comes back with `duplicate: true`. With
     * `on_duplicate: "replace"` (debounce), a holder that has not started
     * takes this task's spec, labels, priority and run time and comes back
     * with `replaced: true`; a holder already running or waiting for a retry
     * gets this task as its successor (a new task that waits for it, whatever
     * its outcome, and takes the key).
     */
    submit(queue: string, spec?: unknown, options?: TaskOptions & CallOptions): Promise<SubmittedTask>;
    /** Submits tasks all or nothing, in order; a task may depend on an earlier one of the batch. `duplicate` and `replaced` are set as for {@link Client.submit}. */
    submitBatch(tasks: readonly NewTask[], opts?: CallOptions): Promise<SubmittedTask[]>;
    /** The task with this id; NotFound if there is none. */
    get(id: string, opts?: CallOptions): Promise<Task>;
    /** The tasks of these ids that exist, and the ids that do not. */
    getMany(ids: readonly string[], opts?: CallOptions): Promise<{
        tasks: Task[];
        missing: string[];
    }>;
    /**
     * Every task matching the filter, streamed (NDJSON) in constant memory
     * however many match. Stop early with `break`; that closes the stream.
     */
    list(opts?: ListOptions): AsyncGenerator<Task, void, undefined>;
    /** One page of matching tasks; pass `next_cursor` as `cursor` for the next (absent on the last page). */
    listPage(opts?: PageOptions): Promise<{
        tasks: Task[];
        next_cursor?: string;
    }>;
    /** How many tasks match the filter. */
    count(filter?: Filter & CallOptions): Promise<number>;
    /** Counts of the matching tasks per queue and status. */
    countGroups(filter?: Filter & CallOptions): Promise<GroupCount[]>;
    /** Changes a task that is not running (priority, run_at, labels), optionally only at `if_version`. */
    update(id: string, changes: UpdateOptions, opts?: CallOptions): Promise<Task>;
    /** Cancels a task; a worker running it learns it at its next heartbeat. */
    cancel(id: string, opts?: CallOptions): Promise<Task>;
    /** Deletes a task; NotFound if there is none. */
    delete(id: string, opts?: CallOptions): Promise<void>;
    /** Deletes every matching task (at least one filter is required); how many were deleted. */
    deleteMatching(filter: Filter & CallOptions): Promise<number>;
    /**
     * Runs again a task that ended without success (aborted or cancelled):
     * ready at once, or scheduled until `run_at`; attempts restart at 0.
     * `with_dependents` also brings back, transitively, the tasks aborted
     * because this one failed.
     */
    retry(id: string, opts?: {
        run_at?: Time;
        with_dependents?: boolean;
    } & CallOptions): Promise<Task>;
    /** Retries every aborted or cancelled task matching the filter (at least one condition); returns how many. */
    retryMatching(filter: Filter & CallOptions): Promise<number>;
    /** Cancels every pending task matching the filter (at least one condition), as cancel does each; returns how many. */
    cancelMatching(filter: Filter & CallOptions): Promise<number>;
    /** The task's update log after sequence number `after` (at most `limit` entries, 0: all). */
    readLog(id: string, opts?: {
        after?: number;
        limit?: number;
    } & CallOptions): Promise<LogEntry[]>;
    /**
     * Sends the task a signal named `name` with optional JSON `data`; a task
     * waiting for that name (a snooze with `until_signal`) becomes ready. The
     * task keeps every signal, in order. Resolves with the signal as stored.
     * NotFound for a missing task, Conflict for one that ended.
     */
    sendSignal(id: string, name: string, data?: unknown, opts?: CallOptions): Promise<Signal>;
    /** The task's signals with a sequence number above `after` (default 0: all), in order. */
    listSignals(id: string, opts?: {
        after?: number;
    } & CallOptions): Promise<Signal[]>;
    /** Submits, updates, cancels and deletes all or nothing, once every requirement (`{id, version}`) holds. */
    transact(txn: {
        submit?: readonly NewTask[];
        update?: readonly (UpdateOptions & {
            id: string;
        })[];
        cancel?: readonly string[];
        delete?: readonly string[];
        require?: readonly {
            id: string;
            version?: number;
        }[];
    }, opts?: CallOptions): Promise<TxnResult>;
    queues(opts?: CallOptions): Promise<QueueInfo[]>;
    /** A queue's settings and counts (an unused queue reads as empty, with defaults). */
    queue(name: string, opts?: CallOptions): Promise<QueueInfo>;
    /**
     * Pauses or resumes a queue and sets its defaults and flow limits (role
     * admin). Only what `settings` names changes, nested settings included:
     * `{ key_rate_limit: { per_second: 5, burst: 10 } }` gives every
     * concurrency key its own bucket (`{ per_second: 0 }` removes it), and
     * `{ keys: { acme: { rate_limit: { per_second: 50 } } } }` gives one key
     * its own rate and keeps its other settings (`acme: null` removes them).
     */
    updateQueue(name: string, settings: QueueSettings, opts?: CallOptions): Promise<QueueInfo>;
    /**
     * The state of the sequence of `queue` and `key`: the tasks submitted to
     * the queue with `sequence_key: key` run one at a time in submit order. A
     * sequence nobody used reads as empty.
     */
    sequence(queue: string, key: string, opts?: CallOptions): Promise<SequenceInfo>;
    /**
     * The sequences of `queue` that have a head, by key, each as `sequence`
     * returns it; `halted: true` lists only the halted ones (the ones waiting
     * for an operator). `after` (a key) and `limit` (default 100, max 1000) page.
     */
    sequences(queue: string, opts?: CallOptions & {
        halted?: boolean;
        after?: string;
        limit?: number;
    }): Promise<SequenceInfo[]>;
    stats(opts?: CallOptions): Promise<Stats>;
    /**
     * The server's per-minute counts of submitted, completed and failed tasks
     * (at most the last 24 hours, from `since`; of the given queues summed, or
     * all). A server counts from its start and keeps the history in memory.
     */
    throughput(opts?: {
        queue?: string | readonly string[];
        since?: Time | Duration;
    } & CallOptions): Promise<Throughput>;
    workers(opts?: CallOptions): Promise<WorkerInfo[]>;
    /** What the caller's token may do. */
    whoami(opts?: CallOptions): Promise<Whoami>;
    /** Runs the monitor's duties due now (role admin). */
    sweep(opts?: CallOptions): Promise<SweepReport>;
    /**
     * Creates or replaces the schedule `name` (role admin): a task submitted to
     * `queue` on every tick of `cron` (5 fields, 6 with seconds, or `@hourly`,
     * `@every 30s`…), read in `timezone` (default UTC).
     */
    setSchedule(name: string, schedule: ScheduleOptions & {
        queue: string;
        cron: string;
    }, opts?: CallOptions): Promise<Schedule>;
    /** Every schedule, with its next_fire, last_fire and last_task. */
    schedules(opts?: CallOptions): Promise<Schedule[]>;
    /** One schedule; NotFound if there is none. */
    schedule(name: string, opts?: CallOptions): Promise<Schedule>;
    /** Changes some settings of a schedule (`{ paused: true }` pauses it; role admin). */
    updateSchedule(name: string, changes: ScheduleOptions, opts?: CallOptions): Promise<Schedule>;
    /** Deletes a schedule; the tasks it submitted stay (role admin). */
    deleteSchedule(name: string, opts?: CallOptions): Promise<void>;
    /** Submits the schedule's task now, outside its cadence (role admin). */
    triggerSchedule(name: string, opts?: CallOptions): Promise<Task>;
    /**
     * Creates a batch. Tasks join it by naming it at submit (`{ batch: id }`)
     * until it is sealed. Once sealed and every member ended, `on_complete` is
     * submitted (id `norn:batch:<id>:complete`), and `on_success` too if every
     * member completed; each carries the labels norn.batch, norn.callback,
     * norn.total, norn.completed, norn.aborted and norn.cancelled. `tasks` are
     * members submitted with it, all or nothing; `seal` creates it sealed.
     */
    createBatch(batch?: NewBatch, opts?: CallOptions): Promise<{
        batch: Batch;
        tasks: SubmittedTask[];
    }>;
    /** A batch with its members' counts; NotFound if there is none. */
    getBatch(id: string, opts?: CallOptions): Promise<Batch>;
    /** One page of batches in id order; pass the last id as `after` for the next. */
    listBatches(query?: BatchQuery & CallOptions): Promise<Batch[]>;
    /** Closes a batch to new members, so its callbacks can fire; sealing a sealed or done batch changes nothing. */
    sealBatch(id: string, opts?: CallOptions): Promise<Batch>;
    /** Deletes a batch; its members stay unless `members` is true. How many members were deleted. */
    deleteBatch(id: string, opts?: {
        members?: boolean;
    } & CallOptions): Promise<number>;
    /**
     * Task state changes as they happen (server-sent events); stop with
     * `break` or the signal. The subscription starts with the first `next()`.
     */
    events(opts?: {
        queue?: string | readonly string[];
        task?: string;
    } & CallOptions): AsyncGenerator<TaskEvent, void, undefined>;
    /**
     * Waits until the task finishes (completed, aborted or cancelled) and
     * returns it, following its state changes as server-sent events rather
     * than polling. Rejects with a TimeoutError after `timeout` ms (default: no
     * limit) and with NotFound if the task is deleted.
     */
    wait(id: string, opts?: {
        timeout?: number;
    } & CallOptions): Promise<Task>;
    /** Registers a worker; its id names it in claims and lease calls. */
    registerWorker(name: string, queues: readonly string[], opts?: CallOptions): Promise<string>;
    /**
     * Claims up to `n` ready tasks of the queues, in preference order. With
     * `wait` and nothing ready it long-polls; it answers [] when the wait
     * passes or the server shuts down. `timeout` is the lease length.
     *
     * `min` makes a batch claim: it answers only once at least `min` tasks
     * are ready in the queues (at most `n`), or once the one ready longest
     * has waited `linger` (which needs a `min` of 2 or more); until then it
     * waits within `wait`, and answers [] when the wait ends first.
     *
     * `groupBy` (`"concurrency_key"` or `"label:NAME"`) makes every task of
     * the answer share that value: the answer is the group of the first
     * task in claim order that has `min` ready tasks, or whose task ready
     * longest has waited `linger`.
     */
    claim(worker: string, queues: string | readonly string[], opts?: {
        n?: number;
        timeout?: Duration;
        wait?: Duration;
        weights?: Record<string, number>;
        min?: number;
        linger?: Duration;
        groupBy?: string;
    } & CallOptions): Promise<Task[]>;
    /** Extends the lease (by `extend`, else the task's timeout) and records progress; the new deadline. */
    heartbeat(id: string, worker: string, lease: number, opts?: {
        progress?: number;
        extend?: Duration;
    } & CallOptions): Promise<string>;
    /**
     * A {@link heartbeat} that also answers with the task's signals after
     * sequence number `after` (0: all), in order: the new deadline and those
     * signals.
     */
    heartbeatSignals(id: string, worker: string, lease: number, after?: number, opts?: {
        progress?: number;
        extend?: Duration;
    } & CallOptions): Promise<{
        deadline: string;
        signals: Signal[];
    }>;
    /** Appends to the task's update log; `seq`, when given, must be the next number (Conflict otherwise). */
    appendLog(id: string, worker: string, lease: number, data: unknown, opts?: {
        seq?: number;
    } & CallOptions): Promise<LogEntry>;
    /** Completes the task with an optional JSON result. */
    complete(id: string, worker: string, lease: number, result?: unknown, opts?: CallOptions): Promise<void>;
    /** Fails the attempt: retried per the task's policy, else aborted. */
    fail(id: string, worker: string, lease: number, error: TaskError, opts?: CallOptions): Promise<void>;
    /** Aborts the task for good. */
    abort(id: string, worker: string, lease: number, error: TaskError, opts?: CallOptions): Promise<void>;
    /** Gives the task back: ready again at once, the attempt does not count. */
    yield(id: string, worker: string, lease: number, opts?: CallOptions): Promise<void>;
    /**
     * Submits `tasks` as children of the leased task, atomically, and makes
     * the task wait for them: its lease ends without counting an attempt, it
     * is blocked (history TaskAwait) until every child ended, then ready
     * again, and its next claim carries the children's outcomes in
     * `dependency_results`. A failed child aborts it with dependency_failed
     * unless `on_child_failure` is "continue". Awaiting again from a later
     * attempt adds more children.
     */
    awaitChildren(id: string, worker: string, lease: number, tasks: readonly NewTask[], opts?: {
        on_child_failure?: OnChildFailure;
    } & CallOptions): Promise<AwaitResult>;
    /**
     * Puts the task back until `delay` from now (or `run_at`) without spending
     * the attempt. With `until_signal` it stays scheduled until a signal of
     * that name arrives (then ready at once; one sent before counts) or
     * `timeout` passes (default 24h; then ready with `signal_wait.received`
     * false). With `scope: "key"` (and `delay` or `run_at`) it also holds back
     * the task's concurrency key until then (see {@link SnoozeTime}).
     */
    snooze(id: string, worker: string, lease: number, until: SnoozeUntil, opts?: CallOptions): Promise<void>;
    /** Runs lease operations in one call; each gets its own result or error, in order. */
    leaseBatch(ops: readonly LeaseOp[], opts?: CallOptions): Promise<LeaseOpResult[]>;
}
export {};
