import type { components } from "./openapi.js";
import { InvalidArgument, NornError, NotFound, Unavailable, errorFromWire } from "./errors.js";
import { type Duration, type Time, formatDuration, formatTime, parseDuration } from "./wire.js";

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
export type SubmittedTask = Task & { duplicate?: boolean; replaced?: boolean };

/** One submit's answer on the wire: the task and what the submit did. */
type SubmitAnswer = { task: Task; duplicate?: boolean; replaced?: boolean };

/** The task of a submit's answer, with its duplicate and replaced flags when set. */
function submitted(s: SubmitAnswer): SubmittedTask {
  if (!s.duplicate && !s.replaced) return s.task;
  const t: SubmittedTask = { ...s.task };
  if (s.duplicate) t.duplicate = true;
  if (s.replaced) t.replaced = true;
  return t;
}

/** How a failed task is retried: `base·2ⁿ` backoff capped at `max`. */
export type RetryOptions = Omit<RetryPolicy, "base" | "max"> & { base?: Duration; max?: Duration };

/** Per-call options every call takes. */
export interface CallOptions {
  /** Aborts the call; it then rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** The options of a new task, named as in the API. */
export type TaskOptions = Omit<
  Schemas["NewTask"],
  "queue" | "spec" | "run_at" | "delay" | "timeout" | "retry" | "unique_for" | "max_runtime" | "expires_at" | "expire_in" | "debounce_max"
> & {
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
export type NewTask = TaskOptions & { queue: string; spec?: unknown };

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

export type UpdateOptions = Omit<Schemas["Update"], "run_at"> & { run_at?: Time };

export type QueueSettings = Omit<Schemas["QueueUpdate"], "timeout" | "retry" | "retention" | "max_runtime"> & {
  timeout?: Duration;
  /** Default runtime limit of tasks submitted later (0: none). */
  max_runtime?: Duration;
  retry?: RetryOptions;
  retention?: { completed?: Duration; aborted?: Duration; cancelled?: Duration };
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
export type SnoozeTime =
  | { delay: Duration; run_at?: undefined; until_signal?: undefined; scope?: SnoozeScope }
  | { run_at: Time; delay?: undefined; until_signal?: undefined; scope?: SnoozeScope };

/** `"key"`: a snooze that also holds back the task's concurrency key. */
export type SnoozeScope = "key";

/**
 * A snooze until a signal named `until_signal` arrives (ready at once; one
 * sent before counts) or `timeout` passes (default 24h; ready, with
 * `signal_wait.received` false).
 */
export type SnoozeUntilSignal = { until_signal: string; timeout?: Duration; delay?: undefined; run_at?: undefined; scope?: undefined };

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
export type LeaseOp =
  | { op: "heartbeat"; id: string; worker: string; lease: number; progress?: number; extend?: Duration }
  | { op: "complete"; id: string; worker: string; lease: number; result?: unknown }
  | { op: "fail" | "abort"; id: string; worker: string; lease: number; error: TaskError }
  | { op: "yield"; id: string; worker: string; lease: number }
  | ({ op: "snooze"; id: string; worker: string; lease: number } & SnoozeTime);

/** The result of one lease batch operation: its answer, or its error. */
export type LeaseOpResult = { deadline?: string } | NornError;

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

export const DEFAULT_SERVER = "http://127.0.0.1:7070";
const USER_AGENT = "norn-typescript-client/0.1";
// Added to a claim's wait for its time limit, so a long poll ends on the
// server's schedule, not ours.
const CLAIM_SLACK_MS = 30_000;
// An error body is a small JSON object; a misbehaving proxy must not make us
// buffer more.
const MAX_ERROR_BODY = 64 << 10;

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  const v = p?.env?.[name];
  return v === "" ? undefined : v;
}

/** A response whose body is yet to be read; release() once it was. */
interface Stream {
  res: Response;
  release: () => void;
  signal: AbortSignal;
}

interface Request extends CallOptions {
  query?: URLSearchParams;
  body?: unknown;
  accept?: string;
  timeout?: number;
}

/**
 * A client of a Norn server's HTTP API. Every call returns a promise that
 * rejects with a {@link NornError} subclass per error code.
 */
export class Client {
  readonly url: string;
  readonly #token: string | undefined;
  readonly #timeout: number;
  readonly #fetch: typeof fetch;

  constructor(opts: ClientOptions = {}) {
    const url = opts.url ?? env("NORN_SERVER") ?? DEFAULT_SERVER;
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new InvalidArgument(`not a URL: ${JSON.stringify(url)}`, { field: "url" });
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new InvalidArgument(`must be an http or https URL, got ${JSON.stringify(url)}`, { field: "url" });
    }
    this.url = url.replace(/\/+$/, "");
    this.#token = opts.token ?? env("NORN_TOKEN");
    const timeout = opts.timeout ?? 30_000;
    if (!(timeout > 0)) throw new InvalidArgument("must be a positive number of milliseconds", { field: "timeout" });
    this.#timeout = timeout;
    const f = opts.fetch ?? globalThis.fetch;
    if (typeof f !== "function") {
      throw new InvalidArgument("no fetch: use Node.js 18 or later, or pass one", { field: "fetch" });
    }
    this.#fetch = f;
  }

  // ---- transport -------------------------------------------------------

  /**
   * Sends a request; rejects with the error of a non-2xx answer. `release`
   * must be called once the body was read: it stops the time limit (which a
   * stream drops once its headers arrived) and forgets the caller's signal.
   */
  async #send(method: string, path: string, req: Request = {}): Promise<Stream> {
    const qs = req.query?.toString();
    const url = this.url + path + (qs ? "?" + qs : "");
    const headers: Record<string, string> = { "User-Agent": USER_AGENT, Accept: req.accept ?? "application/json" };
    if (this.#token) headers["Authorization"] = `Bearer ${this.#token}`;
    let body: string | undefined;
    if (req.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(req.body);
    }
    const limit = req.timeout ?? this.#timeout;
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(new Unavailable(`${method} ${path}: no answer within ${limit} ms`, { status: 0 })), limit);
    const user = req.signal;
    const onAbort = () => ctl.abort(user!.reason);
    if (user) {
      if (user.aborted) ctl.abort(user.reason);
      else user.addEventListener("abort", onAbort, { once: true });
    }
    const release = () => {
      clearTimeout(timer);
      user?.removeEventListener("abort", onAbort);
    };
    let res: Response;
    try {
      res = await this.#fetch(url, { method, headers, body, signal: ctl.signal });
    } catch (e) {
      release();
      if (ctl.signal.aborted) throw ctl.signal.reason;
      throw new Unavailable(`${method} ${path}: ${describe(e)}`, { status: 0, cause: e });
    }
    if (!res.ok) {
      try {
        throw await this.#error(res);
      } finally {
        release();
      }
    }
    if (req.accept === "application/x-ndjson" || req.accept === "text/event-stream") clearTimeout(timer);
    return { res, release, signal: ctl.signal };
  }

  async #error(res: Response): Promise<NornError> {
    let text = "";
    try {
      text = await readLimited(res, MAX_ERROR_BODY);
    } catch {
      // The status alone still says what happened.
    }
    try {
      const body = JSON.parse(text) as { error?: { code?: unknown; message?: unknown; field?: unknown } };
      if (body && typeof body.error === "object" && body.error !== null) return errorFromWire(body.error, res.status);
    } catch {
      // Not our JSON: a proxy's page, say.
    }
    const code =
      res.status === 400 ? "invalid_argument"
      : res.status === 401 ? "unauthenticated"
      : res.status === 403 ? "permission_denied"
      : res.status === 404 ? "not_found"
      : res.status === 409 ? "conflict"
      : res.status === 413 ? "too_large"
      : res.status === 502 || res.status === 503 || res.status === 504 ? "unavailable"
      : res.status === 507 ? "insufficient_storage"
      : "internal";
    return errorFromWire({ code, message: `HTTP ${res.status}: ${text.slice(0, 200)}` }, res.status);
  }

  async #call<T>(method: string, path: string, req: Request = {}): Promise<T> {
    const { res, release, signal } = await this.#send(method, path, req);
    let text: string;
    try {
      text = await res.text();
    } catch (e) {
      if (signal.aborted) throw signal.reason;
      throw new Unavailable(`${method} ${path}: reading the response: ${describe(e)}`, { status: 0, cause: e });
    } finally {
      release();
    }
    try {
      return JSON.parse(text) as T;
    } catch (e) {
      throw new NornError("internal", `${method} ${path}: cannot decode the server's response: ${describe(e)}`, { status: res.status });
    }
  }

  // ---- tasks -----------------------------------------------------------

  /**
   * Submits one task. An existing id or a held `unique_key` is not an
   * error: the stored task comes back with `duplicate: true`. With
   * `on_duplicate: "replace"` (debounce), a holder that has not started
   * takes this task's spec, labels, priority and run time and comes back
   * with `replaced: true`; a holder already running or waiting for a retry
   * gets this task as its successor (a new task that waits for it, whatever
   * its outcome, and takes the key).
   */
  async submit(queue: string, spec?: unknown, options: TaskOptions & CallOptions = {}): Promise<SubmittedTask> {
    const { signal, ...rest } = options;
    const body = newTask({ ...rest, queue, spec }, "");
    return submitted(await this.#call<Schemas["SubmitResponse"]>("POST", "/v1/tasks", { body, signal }));
  }

  /** Submits tasks all or nothing, in order; a task may depend on an earlier one of the batch. `duplicate` and `replaced` are set as for {@link Client.submit}. */
  async submitBatch(tasks: readonly NewTask[], opts: CallOptions = {}): Promise<SubmittedTask[]> {
    if (!Array.isArray(tasks)) throw new InvalidArgument("must be an array of tasks", { field: "tasks" });
    const body = { tasks: tasks.map((t, i) => newTask(t, `tasks[${i}].`)) };
    const r = await this.#call<Schemas["BatchResponse"]>("POST", "/v1/tasks/batch", { body, signal: opts.signal });
    const dup = new Set(r.duplicates ?? []);
    const replaced = new Set(r.replaced ?? []);
    return r.tasks.map((t, i) => submitted({ task: t, duplicate: dup.has(t.id), replaced: replaced.has(i) }));
  }

  /** The task with this id; NotFound if there is none. */
  async get(id: string, opts: CallOptions = {}): Promise<Task> {
    const r = await this.#call<Schemas["TaskResponse"]>("GET", `/v1/tasks/${taskID(id)}`, opts);
    return r.task;
  }

  /** The tasks of these ids that exist, and the ids that do not. */
  async getMany(ids: readonly string[], opts: CallOptions = {}): Promise<{ tasks: Task[]; missing: string[] }> {
    if (!Array.isArray(ids) || ids.length === 0) throw new InvalidArgument("give at least one id", { field: "ids" });
    if (ids.length === 1) {
      try {
        return { tasks: [await this.get(ids[0]!, opts)], missing: [] };
      } catch (e) {
        if (e instanceof NornError && e.code === "not_found") return { tasks: [], missing: [ids[0]!] };
        throw e;
      }
    }
    const path = "/v1/tasks/" + ids.map((id, i) => taskID(id, `ids[${i}]`)).join(",");
    const r = await this.#call<Schemas["ManyResponse"]>("GET", path, opts);
    return { tasks: r.tasks, missing: r.missing ?? [] };
  }

  /**
   * Every task matching the filter, streamed (NDJSON) in constant memory
   * however many match. Stop early with `break`; that closes the stream.
   */
  async *list(opts: ListOptions = {}): AsyncGenerator<Task, void, undefined> {
    const q = filterQuery(opts);
    listQuery(q, opts);
    const stream = await this.#send("GET", "/v1/tasks", { query: q, accept: "application/x-ndjson", signal: opts.signal });
    for await (const line of lines(stream)) {
      const v = parseLine(line) as Task & { error?: Schemas["WireError"] };
      if (v.error !== undefined && v.id === undefined) throw errorFromWire(v.error, 500);
      yield v;
    }
  }

  /** One page of matching tasks; pass `next_cursor` as `cursor` for the next (absent on the last page). */
  async listPage(opts: PageOptions = {}): Promise<{ tasks: Task[]; next_cursor?: string }> {
    const q = filterQuery(opts);
    listQuery(q, opts);
    if (opts.cursor) q.set("cursor", opts.cursor);
    const r = await this.#call<Schemas["PageResponse"]>("GET", "/v1/tasks", { query: q, signal: opts.signal });
    return r.next_cursor ? { tasks: r.tasks, next_cursor: r.next_cursor } : { tasks: r.tasks };
  }

  /** How many tasks match the filter. */
  async count(filter: Filter & CallOptions = {}): Promise<number> {
    const r = await this.#call<Schemas["CountResponse"]>("GET", "/v1/tasks/count", { query: filterQuery(filter), signal: filter.signal });
    return r.count;
  }

  /** Counts of the matching tasks per queue and status. */
  async countGroups(filter: Filter & CallOptions = {}): Promise<GroupCount[]> {
    const q = filterQuery(filter);
    q.set("group", "queue,status");
    const r = await this.#call<Schemas["CountResponse"]>("GET", "/v1/tasks/count", { query: q, signal: filter.signal });
    return r.groups ?? [];
  }

  /** Changes a task that is not running (priority, run_at, labels), optionally only at `if_version`. */
  async update(id: string, changes: UpdateOptions, opts: CallOptions = {}): Promise<Task> {
    const body: Record<string, unknown> = { ...changes };
    if (changes.run_at !== undefined) body["run_at"] = formatTime(changes.run_at, "run_at");
    const r = await this.#call<Schemas["TaskResponse"]>("PATCH", `/v1/tasks/${taskID(id)}`, { body, signal: opts.signal });
    return r.task;
  }

  /** Cancels a task; a worker running it learns it at its next heartbeat. */
  async cancel(id: string, opts: CallOptions = {}): Promise<Task> {
    const r = await this.#call<Schemas["TaskResponse"]>("POST", `/v1/tasks/${taskID(id)}/cancel`, opts);
    return r.task;
  }

  /** Deletes a task; NotFound if there is none. */
  async delete(id: string, opts: CallOptions = {}): Promise<void> {
    await this.#call<Schemas["DeletedResponse"]>("DELETE", `/v1/tasks/${taskID(id)}`, opts);
  }

  /** Deletes every matching task (at least one filter is required); how many were deleted. */
  async deleteMatching(filter: Filter & CallOptions): Promise<number> {
    const r = await this.#call<Schemas["DeletedResponse"]>("DELETE", "/v1/tasks", { query: filterQuery(filter), signal: filter.signal });
    return r.deleted;
  }

  /**
   * Runs again a task that ended without success (aborted or cancelled):
   * ready at once, or scheduled until `run_at`; attempts restart at 0.
   * `with_dependents` also brings back, transitively, the tasks aborted
   * because this one failed.
   */
  async retry(id: string, opts: { run_at?: Time; with_dependents?: boolean } & CallOptions = {}): Promise<Task> {
    const body: Record<string, unknown> = {};
    if (opts.run_at !== undefined) body["run_at"] = formatTime(opts.run_at, "run_at");
    if (opts.with_dependents) body["with_dependents"] = true;
    return (await this.#call<Schemas["TaskResponse"]>("POST", `/v1/tasks/${taskID(id)}/retry`, { body, signal: opts.signal })).task;
  }

  /** Retries every aborted or cancelled task matching the filter (at least one condition); returns how many. */
  async retryMatching(filter: Filter & CallOptions): Promise<number> {
    const query = filterQuery(filter);
    if ([...query.keys()].length === 0) throw new InvalidArgument("retrying by filter needs at least one condition", { field: "filter" });
    const r = await this.#call<{ retried: number }>("POST", "/v1/tasks/retry", { query, body: {}, signal: filter.signal });
    return r.retried;
  }

  /** Cancels every pending task matching the filter (at least one condition), as cancel does each; returns how many. */
  async cancelMatching(filter: Filter & CallOptions): Promise<number> {
    const query = filterQuery(filter);
    if ([...query.keys()].length === 0) throw new InvalidArgument("cancelling by filter needs at least one condition", { field: "filter" });
    const r = await this.#call<{ cancelled: number }>("POST", "/v1/tasks/cancel", { query, body: {}, signal: filter.signal });
    return r.cancelled;
  }

  /** The task's update log after sequence number `after` (at most `limit` entries, 0: all). */
  async readLog(id: string, opts: { after?: number; limit?: number } & CallOptions = {}): Promise<LogEntry[]> {
    const q = new URLSearchParams();
    if (opts.after) q.set("after", String(opts.after));
    if (opts.limit) q.set("limit", String(opts.limit));
    const r = await this.#call<Schemas["LogResponse"]>("GET", `/v1/tasks/${taskID(id)}/log`, { query: q, signal: opts.signal });
    return r.entries;
  }

  /**
   * Sends the task a signal named `name` with optional JSON `data`; a task
   * waiting for that name (a snooze with `until_signal`) becomes ready. The
   * task keeps every signal, in order. Resolves with the signal as stored.
   * NotFound for a missing task, Conflict for one that ended.
   */
  async sendSignal(id: string, name: string, data?: unknown, opts: CallOptions = {}): Promise<Signal> {
    const body: Record<string, unknown> = { name };
    if (data !== undefined) body["data"] = data;
    const r = await this.#call<Schemas["SignalResponse"]>("POST", `/v1/tasks/${taskID(id)}/signals`, { body, signal: opts.signal });
    return r.signal;
  }

  /** The task's signals with a sequence number above `after` (default 0: all), in order. */
  async listSignals(id: string, opts: { after?: number } & CallOptions = {}): Promise<Signal[]> {
    const q = new URLSearchParams();
    if (opts.after) q.set("after", String(opts.after));
    const r = await this.#call<Schemas["SignalsResponse"]>("GET", `/v1/tasks/${taskID(id)}/signals`, { query: q, signal: opts.signal });
    return r.signals;
  }

  /** Submits, updates, cancels and deletes all or nothing, once every requirement (`{id, version}`) holds. */
  async transact(
    txn: {
      submit?: readonly NewTask[];
      update?: readonly (UpdateOptions & { id: string })[];
      cancel?: readonly string[];
      delete?: readonly string[];
      require?: readonly { id: string; version?: number }[];
    },
    opts: CallOptions = {},
  ): Promise<TxnResult> {
    const body: Record<string, unknown> = {};
    if (txn.submit) body["submit"] = txn.submit.map((t, i) => newTask(t, `submit[${i}].`));
    if (txn.update) {
      body["update"] = txn.update.map((u, i) =>
        u.run_at === undefined ? { ...u } : { ...u, run_at: formatTime(u.run_at, `update[${i}].run_at`) },
      );
    }
    if (txn.cancel) body["cancel"] = [...txn.cancel];
    if (txn.delete) body["delete"] = [...txn.delete];
    if (txn.require) body["require"] = [...txn.require];
    return this.#call<TxnResult>("POST", "/v1/transactions", { body, signal: opts.signal });
  }

  // ---- queues and administration -----------------------------------------

  async queues(opts: CallOptions = {}): Promise<QueueInfo[]> {
    return (await this.#call<Schemas["QueuesResponse"]>("GET", "/v1/queues", opts)).queues;
  }

  /** A queue's settings and counts (an unused queue reads as empty, with defaults). */
  async queue(name: string, opts: CallOptions = {}): Promise<QueueInfo> {
    return (await this.#call<Schemas["QueueResponse"]>("GET", `/v1/queues/${encodeURIComponent(name)}`, opts)).queue;
  }

  /**
   * Pauses or resumes a queue and sets its defaults and flow limits (role
   * admin). Only what `settings` names changes, nested settings included:
   * `{ key_rate_limit: { per_second: 5, burst: 10 } }` gives every
   * concurrency key its own bucket (`{ per_second: 0 }` removes it), and
   * `{ keys: { acme: { rate_limit: { per_second: 50 } } } }` gives one key
   * its own rate and keeps its other settings (`acme: null` removes them).
   */
  async updateQueue(name: string, settings: QueueSettings, opts: CallOptions = {}): Promise<QueueInfo> {
    const body: Record<string, unknown> = { ...settings };
    if (settings.timeout !== undefined) body["timeout"] = formatDuration(settings.timeout, "timeout");
    if (settings.max_runtime !== undefined) body["max_runtime"] = formatDuration(settings.max_runtime, "max_runtime");
    if (settings.retry !== undefined) body["retry"] = retryPolicy(settings.retry, "retry");
    if (settings.retention !== undefined) {
      const ret: Record<string, string> = {};
      for (const [k, v] of Object.entries(settings.retention)) {
        if (v !== undefined) ret[k] = formatDuration(v, `retention.${k}`);
      }
      body["retention"] = ret;
    }
    const path = `/v1/queues/${encodeURIComponent(name)}`;
    return (await this.#call<Schemas["QueueResponse"]>("PATCH", path, { body, signal: opts.signal })).queue;
  }

  /**
   * The state of the sequence of `queue` and `key`: the tasks submitted to
   * the queue with `sequence_key: key` run one at a time in submit order. A
   * sequence nobody used reads as empty.
   */
  async sequence(queue: string, key: string, opts: CallOptions = {}): Promise<SequenceInfo> {
    if (!queue) throw new InvalidArgument("queue is required", { field: "queue" });
    if (!key) throw new InvalidArgument("key is required", { field: "key" });
    const path = `/v1/queues/${encodeURIComponent(queue)}/sequences/${encodeURIComponent(key)}`;
    return (await this.#call<Schemas["SequenceResponse"]>("GET", path, opts)).sequence;
  }

  /**
   * The sequences of `queue` that have a head, by key, each as `sequence`
   * returns it; `halted: true` lists only the halted ones (the ones waiting
   * for an operator). `after` (a key) and `limit` (default 100, max 1000) page.
   */
  async sequences(queue: string, opts: CallOptions & { halted?: boolean; after?: string; limit?: number } = {}): Promise<SequenceInfo[]> {
    if (!queue) throw new InvalidArgument("queue is required", { field: "queue" });
    const query = new URLSearchParams();
    if (opts.halted) query.set("halted", "true");
    if (opts.after) query.set("after", opts.after);
    if (opts.limit !== undefined) query.set("limit", String(opts.limit));
    const path = `/v1/queues/${encodeURIComponent(queue)}/sequences`;
    return (await this.#call<Schemas["SequencesResponse"]>("GET", path, { query, signal: opts.signal })).sequences;
  }

  async stats(opts: CallOptions = {}): Promise<Stats> {
    return this.#call<Stats>("GET", "/v1/stats", opts);
  }

  /**
   * The server's per-minute counts of submitted, completed and failed tasks
   * (at most the last 24 hours, from `since`; of the given queues summed, or
   * all). A server counts from its start and keeps the history in memory.
   */
  async throughput(opts: { queue?: string | readonly string[]; since?: Time | Duration } & CallOptions = {}): Promise<Throughput> {
    const q = new URLSearchParams();
    const queue = csv(opts.queue);
    if (queue) q.set("queue", queue);
    if (opts.since !== undefined) q.set("since", sinceParam(opts.since));
    return this.#call<Throughput>("GET", "/v1/stats/throughput", { query: q, signal: opts.signal });
  }

  async workers(opts: CallOptions = {}): Promise<WorkerInfo[]> {
    return (await this.#call<Schemas["WorkersResponse"]>("GET", "/v1/workers", opts)).workers;
  }

  /** What the caller's token may do. */
  async whoami(opts: CallOptions = {}): Promise<Whoami> {
    return this.#call<Whoami>("GET", "/v1/whoami", opts);
  }

  /** Runs the monitor's duties due now (role admin). */
  async sweep(opts: CallOptions = {}): Promise<SweepReport> {
    return this.#call<SweepReport>("POST", "/v1/sweep", opts);
  }

  // ---- schedules ----------------------------------------------------------

  /**
   * Creates or replaces the schedule `name` (role admin): a task submitted to
   * `queue` on every tick of `cron` (5 fields, 6 with seconds, or `@hourly`,
   * `@every 30s`…), read in `timezone` (default UTC).
   */
  async setSchedule(name: string, schedule: ScheduleOptions & { queue: string; cron: string }, opts: CallOptions = {}): Promise<Schedule> {
    const body = scheduleBody(schedule);
    return (await this.#call<Schemas["ScheduleResponse"]>("PUT", schedulePath(name), { body, signal: opts.signal })).schedule;
  }

  /** Every schedule, with its next_fire, last_fire and last_task. */
  async schedules(opts: CallOptions = {}): Promise<Schedule[]> {
    return (await this.#call<Schemas["SchedulesResponse"]>("GET", "/v1/schedules", opts)).schedules;
  }

  /** One schedule; NotFound if there is none. */
  async schedule(name: string, opts: CallOptions = {}): Promise<Schedule> {
    return (await this.#call<Schemas["ScheduleResponse"]>("GET", schedulePath(name), opts)).schedule;
  }

  /** Changes some settings of a schedule (`{ paused: true }` pauses it; role admin). */
  async updateSchedule(name: string, changes: ScheduleOptions, opts: CallOptions = {}): Promise<Schedule> {
    const body = scheduleBody(changes);
    return (await this.#call<Schemas["ScheduleResponse"]>("PATCH", schedulePath(name), { body, signal: opts.signal })).schedule;
  }

  /** Deletes a schedule; the tasks it submitted stay (role admin). */
  async deleteSchedule(name: string, opts: CallOptions = {}): Promise<void> {
    await this.#call("DELETE", schedulePath(name), opts);
  }

  /** Submits the schedule's task now, outside its cadence (role admin). */
  async triggerSchedule(name: string, opts: CallOptions = {}): Promise<Task> {
    return (await this.#call<Schemas["TaskResponse"]>("POST", `${schedulePath(name)}/trigger`, opts)).task;
  }

  // ---- batches -------------------------------------------------------------

  /**
   * Creates a batch. Tasks join it by naming it at submit (`{ batch: id }`)
   * until it is sealed. Once sealed and every member ended, `on_complete` is
   * submitted (id `norn:batch:<id>:complete`), and `on_success` too if every
   * member completed; each carries the labels norn.batch, norn.callback,
   * norn.total, norn.completed, norn.aborted and norn.cancelled. `tasks` are
   * members submitted with it, all or nothing; `seal` creates it sealed.
   */
  async createBatch(batch: NewBatch = {}, opts: CallOptions = {}): Promise<{ batch: Batch; tasks: SubmittedTask[] }> {
    if (batch === null || typeof batch !== "object") throw new InvalidArgument("must be a batch object", { field: "batch" });
    const body: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(batch)) {
      if (v === undefined) continue;
      if (k === "on_success" || k === "on_complete") body[k] = newTask(v as NewTask, `${k}.`);
      else if (k === "tasks") {
        if (!Array.isArray(v)) throw new InvalidArgument("must be an array of tasks", { field: "tasks" });
        body[k] = (v as NewTask[]).map((t, i) => newTask(t, `tasks[${i}].`));
      } else body[k] = v;
    }
    const r = await this.#call<Schemas["BatchCreated"]>("POST", "/v1/batches", { body, signal: opts.signal });
    const tasks = (r.tasks ?? []).map((s) => submitted(s));
    return { batch: r.batch, tasks };
  }

  /** A batch with its members' counts; NotFound if there is none. */
  async getBatch(id: string, opts: CallOptions = {}): Promise<Batch> {
    return (await this.#call<Schemas["OneBatch"]>("GET", batchPath(id), opts)).batch;
  }

  /** One page of batches in id order; pass the last id as `after` for the next. */
  async listBatches(query: BatchQuery & CallOptions = {}): Promise<Batch[]> {
    const q = new URLSearchParams();
    if (query.state) q.set("state", query.state);
    for (const [k, v] of Object.entries(query.labels ?? {})) q.append("label", `${k}:${v}`);
    if (query.after) q.set("after", query.after);
    if (query.limit !== undefined) q.set("limit", String(query.limit));
    return (await this.#call<Schemas["BatchesResponse"]>("GET", "/v1/batches", { query: q, signal: query.signal })).batches;
  }

  /** Closes a batch to new members, so its callbacks can fire; sealing a sealed or done batch changes nothing. */
  async sealBatch(id: string, opts: CallOptions = {}): Promise<Batch> {
    return (await this.#call<Schemas["OneBatch"]>("POST", `${batchPath(id)}/seal`, { body: {}, signal: opts.signal })).batch;
  }

  /** Deletes a batch; its members stay unless `members` is true. How many members were deleted. */
  async deleteBatch(id: string, opts: { members?: boolean } & CallOptions = {}): Promise<number> {
    const q = new URLSearchParams();
    if (opts.members) q.set("members", "true");
    return (await this.#call<Schemas["BatchDeleted"]>("DELETE", batchPath(id), { query: q, signal: opts.signal })).deleted;
  }

  /**
   * Task state changes as they happen (server-sent events); stop with
   * `break` or the signal. The subscription starts with the first `next()`.
   */
  async *events(opts: { queue?: string | readonly string[]; task?: string } & CallOptions = {}): AsyncGenerator<TaskEvent, void, undefined> {
    const q = new URLSearchParams();
    const queue = csv(opts.queue);
    if (queue) q.set("queue", queue);
    if (opts.task) q.set("task", opts.task);
    const stream = await this.#send("GET", "/v1/events", { query: q, accept: "text/event-stream", signal: opts.signal });
    yield* serverEvents(lines(stream));
  }

  /**
   * Waits until the task finishes (completed, aborted or cancelled) and
   * returns it, following its state changes as server-sent events rather
   * than polling. Rejects with a TimeoutError after `timeout` ms (default: no
   * limit) and with NotFound if the task is deleted.
   */
  async wait(id: string, opts: { timeout?: number } & CallOptions = {}): Promise<Task> {
    taskID(id);
    const ctl = new AbortController();
    const user = opts.signal;
    const onAbort = () => ctl.abort(user!.reason);
    if (user?.aborted) throw user.reason;
    user?.addEventListener("abort", onAbort, { once: true });
    const timer =
      opts.timeout === undefined ? undefined
      : setTimeout(() => ctl.abort(new DOMException(`task ${JSON.stringify(id)} did not finish within ${opts.timeout} ms`, "TimeoutError")), opts.timeout);
    let stream: Stream | undefined;
    try {
      // Subscribe first, then read: a change between the two is not missed.
      stream = await this.#send("GET", "/v1/events", {
        query: new URLSearchParams({ task: id }),
        accept: "text/event-stream",
        signal: ctl.signal,
      });
      let task = await this.get(id, { signal: ctl.signal });
      if (isTerminal(task.status)) return task;
      for await (const ev of serverEvents(lines(stream))) {
        if (ev.kind === "TaskDelete") throw new NotFound(`task ${JSON.stringify(id)} was deleted`);
        if (ev.kind === "Lagged" || (ev.status !== undefined && isTerminal(ev.status))) {
          task = await this.get(id, { signal: ctl.signal });
          if (isTerminal(task.status)) return task;
        }
      }
      throw new Unavailable(`the event stream ended before task ${JSON.stringify(id)} finished`, { status: 0 });
    } finally {
      clearTimeout(timer);
      user?.removeEventListener("abort", onAbort);
      // Closes the stream if it is still open (a return before reading it).
      if (!ctl.signal.aborted) ctl.abort();
      stream?.release();
    }
  }

  // ---- worker calls ------------------------------------------------------

  /** Registers a worker; its id names it in claims and lease calls. */
  async registerWorker(name: string, queues: readonly string[], opts: CallOptions = {}): Promise<string> {
    const r = await this.#call<Schemas["WorkerIDResponse"]>("POST", "/v1/workers", { body: { name, queues }, signal: opts.signal });
    return r.id;
  }

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
  async claim(
    worker: string,
    queues: string | readonly string[],
    opts: { n?: number; timeout?: Duration; wait?: Duration; weights?: Record<string, number>; min?: number; linger?: Duration; groupBy?: string } & CallOptions = {},
  ): Promise<Task[]> {
    const body: Record<string, unknown> = { worker, queues: typeof queues === "string" ? [queues] : [...queues] };
    // Shares claims between the queues by weight instead of their order.
    if (opts.weights !== undefined) body["weights"] = { ...opts.weights };
    if (opts.n !== undefined) body["n"] = opts.n;
    if (opts.min !== undefined) body["min"] = opts.min;
    if (opts.linger !== undefined) body["linger"] = formatDuration(opts.linger, "linger");
    if (opts.groupBy) body["group_by"] = opts.groupBy;
    if (opts.timeout !== undefined) body["timeout"] = formatDuration(opts.timeout, "timeout");
    let limit = this.#timeout;
    if (opts.wait !== undefined) {
      body["wait"] = formatDuration(opts.wait, "wait");
      limit = Math.max(limit, (typeof opts.wait === "number" ? opts.wait : parseDuration(opts.wait, "wait")) + CLAIM_SLACK_MS);
    }
    const r = await this.#call<Schemas["TasksResponse"]>("POST", "/v1/claim", { body, signal: opts.signal, timeout: limit });
    return r.tasks;
  }

  /** Extends the lease (by `extend`, else the task's timeout) and records progress; the new deadline. */
  async heartbeat(
    id: string,
    worker: string,
    lease: number,
    opts: { progress?: number; extend?: Duration } & CallOptions = {},
  ): Promise<string> {
    const body: Record<string, unknown> = { worker, lease };
    if (opts.progress !== undefined) body["progress"] = opts.progress;
    if (opts.extend !== undefined) body["extend"] = formatDuration(opts.extend, "extend");
    const r = await this.#call<Schemas["DeadlineResponse"]>("POST", `/v1/tasks/${taskID(id)}/heartbeat`, { body, signal: opts.signal });
    return r.deadline;
  }

  /**
   * A {@link heartbeat} that also answers with the task's signals after
   * sequence number `after` (0: all), in order: the new deadline and those
   * signals.
   */
  async heartbeatSignals(
    id: string,
    worker: string,
    lease: number,
    after = 0,
    opts: { progress?: number; extend?: Duration } & CallOptions = {},
  ): Promise<{ deadline: string; signals: Signal[] }> {
    const body: Record<string, unknown> = { worker, lease, signals_after: after };
    if (opts.progress !== undefined) body["progress"] = opts.progress;
    if (opts.extend !== undefined) body["extend"] = formatDuration(opts.extend, "extend");
    const r = await this.#call<Schemas["DeadlineResponse"]>("POST", `/v1/tasks/${taskID(id)}/heartbeat`, { body, signal: opts.signal });
    return { deadline: r.deadline, signals: r.signals ?? [] };
  }

  /** Appends to the task's update log; `seq`, when given, must be the next number (Conflict otherwise). */
  async appendLog(id: string, worker: string, lease: number, data: unknown, opts: { seq?: number } & CallOptions = {}): Promise<LogEntry> {
    const body: Record<string, unknown> = { worker, lease, data };
    if (opts.seq !== undefined) body["seq"] = opts.seq;
    const r = await this.#call<Schemas["EntryResponse"]>("POST", `/v1/tasks/${taskID(id)}/log`, { body, signal: opts.signal });
    return r.entry;
  }

  /** Completes the task with an optional JSON result. */
  async complete(id: string, worker: string, lease: number, result?: unknown, opts: CallOptions = {}): Promise<void> {
    const body: Record<string, unknown> = { worker, lease };
    if (result !== undefined) body["result"] = result;
    await this.#call("POST", `/v1/tasks/${taskID(id)}/complete`, { body, signal: opts.signal });
  }

  /** Fails the attempt: retried per the task's policy, else aborted. */
  async fail(id: string, worker: string, lease: number, error: TaskError, opts: CallOptions = {}): Promise<void> {
    const e = error.retry_in === undefined ? error : { ...error, retry_in: formatDuration(error.retry_in, "retry_in") };
    await this.#call("POST", `/v1/tasks/${taskID(id)}/fail`, { body: { worker, lease, error: e }, signal: opts.signal });
  }

  /** Aborts the task for good. */
  async abort(id: string, worker: string, lease: number, error: TaskError, opts: CallOptions = {}): Promise<void> {
    await this.#call("POST", `/v1/tasks/${taskID(id)}/abort`, { body: { worker, lease, error }, signal: opts.signal });
  }

  /** Gives the task back: ready again at once, the attempt does not count. */
  async yield(id: string, worker: string, lease: number, opts: CallOptions = {}): Promise<void> {
    await this.#call("POST", `/v1/tasks/${taskID(id)}/yield`, { body: { worker, lease }, signal: opts.signal });
  }

  /**
   * Submits `tasks` as children of the leased task, atomically, and makes
   * the task wait for them: its lease ends without counting an attempt, it
   * is blocked (history TaskAwait) until every child ended, then ready
   * again, and its next claim carries the children's outcomes in
   * `dependency_results`. A failed child aborts it with dependency_failed
   * unless `on_child_failure` is "continue". Awaiting again from a later
   * attempt adds more children.
   */
  async awaitChildren(
    id: string,
    worker: string,
    lease: number,
    tasks: readonly NewTask[],
    opts: { on_child_failure?: OnChildFailure } & CallOptions = {},
  ): Promise<AwaitResult> {
    if (!Array.isArray(tasks)) throw new InvalidArgument("must be an array of tasks", { field: "tasks" });
    const body: Record<string, unknown> = { worker, lease, tasks: tasks.map((t, i) => newTask(t, `tasks[${i}].`)) };
    if (opts.on_child_failure !== undefined) body["on_child_failure"] = opts.on_child_failure;
    const r = await this.#call<Schemas["AwaitResult"]>("POST", `/v1/tasks/${taskID(id)}/await`, { body, signal: opts.signal });
    return { task: r.task, children: r.children.map((c) => submitted(c)) };
  }

  /**
   * Puts the task back until `delay` from now (or `run_at`) without spending
   * the attempt. With `until_signal` it stays scheduled until a signal of
   * that name arrives (then ready at once; one sent before counts) or
   * `timeout` passes (default 24h; then ready with `signal_wait.received`
   * false). With `scope: "key"` (and `delay` or `run_at`) it also holds back
   * the task's concurrency key until then (see {@link SnoozeTime}).
   */
  async snooze(id: string, worker: string, lease: number, until: SnoozeUntil, opts: CallOptions = {}): Promise<void> {
    const body = { worker, lease, ...snoozeBody(until, "") };
    await this.#call("POST", `/v1/tasks/${taskID(id)}/snooze`, { body, signal: opts.signal });
  }

  /** Runs lease operations in one call; each gets its own result or error, in order. */
  async leaseBatch(ops: readonly LeaseOp[], opts: CallOptions = {}): Promise<LeaseOpResult[]> {
    const wire = ops.map((op, i) => {
      if (op.op === "heartbeat" && op.extend !== undefined) return { ...op, extend: formatDuration(op.extend, `ops[${i}].extend`) };
      if (op.op === "snooze") {
        const { delay: _d, run_at: _r, until_signal: _s, scope: _c, ...rest } = op as typeof op & { until_signal?: string };
        return { ...rest, ...snoozeBody(op, `ops[${i}].`) };
      }
      return op;
    });
    const r = await this.#call<Schemas["LeaseBatchResponse"]>("POST", "/v1/leases/batch", { body: { ops: wire }, signal: opts.signal });
    return r.results.map((res) => (res.error ? errorFromWire(res.error, 200) : res));
  }
}

// ---- helpers ---------------------------------------------------------------

function describe(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as Error & { cause?: unknown }).cause;
    return cause instanceof Error ? `${e.message}: ${cause.message}` : e.message;
  }
  return String(e);
}

function taskID(id: string, field = "id"): string {
  if (typeof id !== "string" || id === "") throw new InvalidArgument("must be a non-empty task id", { field });
  return encodeURIComponent(id);
}

function csv(v: string | readonly string[] | undefined): string | undefined {
  if (v === undefined) return undefined;
  return typeof v === "string" ? v : v.join(",");
}

function retryPolicy(r: RetryOptions, field: string): Record<string, unknown> {
  const out: Record<string, unknown> = { ...r };
  if (r.base !== undefined) out["base"] = formatDuration(r.base, `${field}.base`);
  if (r.max !== undefined) out["max"] = formatDuration(r.max, `${field}.max`);
  return out;
}

// A number is milliseconds ago; a string a Go duration or an RFC 3339 time.
function sinceParam(v: Time | Duration): string {
  if (typeof v === "number") return formatDuration(v, "since");
  if (typeof v === "string") {
    try {
      return formatDuration(v, "since");
    } catch {
      // not a duration: a time
    }
  }
  return formatTime(v, "since");
}

function batchPath(id: string): string {
  if (typeof id !== "string" || id === "") throw new InvalidArgument("must be a non-empty batch id", { field: "id" });
  return `/v1/batches/${encodeURIComponent(id)}`;
}

function schedulePath(name: string): string {
  if (typeof name !== "string" || name === "") throw new InvalidArgument("must be a non-empty schedule name", { field: "name" });
  return `/v1/schedules/${encodeURIComponent(name)}`;
}

function scheduleBody(s: ScheduleOptions): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(s)) {
    if (v === undefined) continue;
    if (k === "timeout" || k === "max_runtime") out[k] = formatDuration(v as Duration, k);
    else if (k === "retry") out[k] = retryPolicy(v as RetryOptions, k);
    else out[k] = v;
  }
  return out;
}

function snoozeBody(u: SnoozeUntil, prefix: string): Record<string, string> {
  const scope = u !== null && typeof u === "object" ? (u as { scope?: unknown }).scope : undefined;
  if (scope !== undefined && scope !== "key") {
    throw new InvalidArgument(`must be "key" or absent, not ${JSON.stringify(scope)}`, { field: prefix + "scope" });
  }
  if (u !== null && typeof u === "object" && u.until_signal !== undefined) {
    if (scope !== undefined) {
      throw new InvalidArgument("holds a key back until a time: give delay or run_at, not until_signal", { field: prefix + "scope" });
    }
    if (u.delay !== undefined || u.run_at !== undefined) {
      throw new InvalidArgument("give until_signal, or delay or run_at, not both", { field: prefix + "until_signal" });
    }
    if (typeof u.until_signal !== "string" || u.until_signal === "") {
      throw new InvalidArgument("must be a non-empty string", { field: prefix + "until_signal" });
    }
    const out: Record<string, string> = { until_signal: u.until_signal };
    if (u.timeout !== undefined) out["timeout"] = formatDuration(u.timeout, prefix + "timeout");
    return out;
  }
  if (u !== null && typeof u === "object" && (u as { timeout?: unknown }).timeout !== undefined) {
    throw new InvalidArgument("is the longest wait for until_signal; it needs one", { field: prefix + "timeout" });
  }
  if (u === null || typeof u !== "object" || (u.delay === undefined) === (u.run_at === undefined)) {
    throw new InvalidArgument("give exactly one of delay and run_at", { field: prefix + "delay" });
  }
  const out: Record<string, string> =
    u.delay !== undefined ? { delay: formatDuration(u.delay, prefix + "delay") } : { run_at: formatTime(u.run_at as Time, prefix + "run_at") };
  if (scope !== undefined) out["scope"] = scope;
  return out;
}

function newTask(t: NewTask, prefix: string): Record<string, unknown> {
  if (t === null || typeof t !== "object") throw new InvalidArgument("must be a task object", { field: prefix.replace(/\.$/, "") || "task" });
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(t)) {
    if (v === undefined) continue;
    if (k === "run_at" || k === "expires_at") out[k] = formatTime(v as Time, prefix + k);
    else if (k === "delay" || k === "timeout" || k === "unique_for" || k === "max_runtime" || k === "expire_in" || k === "debounce_max")
      out[k] = formatDuration(v as Duration, prefix + k);
    else if (k === "retry") out[k] = retryPolicy(v as RetryOptions, prefix + k);
    else out[k] = v;
  }
  return out;
}

function filterQuery(f: Filter): URLSearchParams {
  const q = new URLSearchParams();
  const queue = csv(f.queue);
  if (queue) q.set("queue", queue);
  const status = csv(f.status);
  if (status) q.set("status", status);
  for (const [k, v] of Object.entries(f.labels ?? {})) q.append("label", `${k}:${v}`);
  if (f.owner) q.set("owner", f.owner);
  if (f.id_contains) q.set("id_contains", f.id_contains);
  if (f.depends_on) q.set("depends_on", f.depends_on);
  if (f.unique_key) q.set("unique_key", f.unique_key);
  if (f.batch) q.set("batch", f.batch);
  for (const k of ["created_after", "created_before", "updated_after", "updated_before"] as const) {
    const v = f[k];
    if (v !== undefined) q.set(k, formatTime(v, k));
  }
  return q;
}

function listQuery(q: URLSearchParams, o: ListOptions): void {
  if (o.limit) q.set("limit", String(o.limit));
  if (o.order) q.set("order", o.order);
  if (o.summary) q.set("view", "summary");
}

function parseLine(line: string): unknown {
  try {
    return JSON.parse(line);
  } catch (e) {
    throw new NornError("internal", `cannot decode a streamed line: ${describe(e)}`);
  }
}

async function readLimited(res: Response, max: number): Promise<string> {
  if (!res.body) return "";
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let out = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      out += dec.decode(value, { stream: true });
      if (out.length >= max) break;
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
  return out.slice(0, max);
}

function isTerminal(s: Status): boolean {
  return s === "completed" || s === "aborted" || s === "cancelled";
}

/** The events of a server-sent event stream's lines. */
async function* serverEvents(src: AsyncGenerator<string, void, undefined>): AsyncGenerator<TaskEvent, void, undefined> {
  let data: string[] = [];
  for await (const line of src) {
    if (line === "") {
      if (data.length > 0) yield parseLine(data.join("\n")) as TaskEvent;
      data = [];
    } else if (line.startsWith("data:")) {
      data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
    }
    // "event:" repeats the data's kind; ":" lines are keep-alive comments.
  }
}

/** The lines of a streamed body, read as they arrive; leaving the loop closes the stream. */
async function* lines(stream: Stream): AsyncGenerator<string, void, undefined> {
  const { res, release, signal } = stream;
  if (!res.body) {
    release();
    return;
  }
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      let chunk: Awaited<ReturnType<typeof reader.read>>;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (signal.aborted) throw signal.reason;
        throw new Unavailable(`the stream broke: ${describe(e)}`, { status: 0, cause: e });
      }
      if (chunk.done) break;
      buf += dec.decode(chunk.value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        yield line;
      }
    }
    buf += dec.decode();
    if (buf !== "") yield buf;
  } finally {
    await reader.cancel().catch(() => {});
    release();
  }
}
