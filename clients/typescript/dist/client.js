import { InvalidArgument, NornError, NotFound, Unavailable, errorFromWire } from "./errors.js";
import { formatDuration, formatTime, parseDuration } from "./wire.js";
/** The task of a submit's answer, with its duplicate and replaced flags when set. */
function submitted(s) {
    if (!s.duplicate && !s.replaced)
        return s.task;
    const t = { ...s.task };
    if (s.duplicate)
        t.duplicate = true;
    if (s.replaced)
        t.replaced = true;
    return t;
}
export const DEFAULT_SERVER = "http://127.0.0.1:7070";
const USER_AGENT = "norn-typescript-client/0.1";
// Added to a claim's wait for its time limit, so a long poll ends on the
// server's schedule, not ours.
const CLAIM_SLACK_MS = 30_000;
// An error body is a small JSON object; a misbehaving proxy must not make us
// buffer more.
const MAX_ERROR_BODY = 64 << 10;
function env(name) {
    const p = globalThis.process;
    const v = p?.env?.[name];
    return v === "" ? undefined : v;
}
/**
 * A client of a Norn server's HTTP API. Every call returns a promise that
 * rejects with a {@link NornError} subclass per error code.
 */
export class Client {
    url;
    #token;
    #timeout;
    #fetch;
    constructor(opts = {}) {
        const url = opts.url ?? env("NORN_SERVER") ?? DEFAULT_SERVER;
        let parsed;
        try {
            parsed = new URL(url);
        }
        catch {
            throw new InvalidArgument(`not a URL: ${JSON.stringify(url)}`, { field: "url" });
        }
        if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
            throw new InvalidArgument(`must be an http or https URL, got ${JSON.stringify(url)}`, { field: "url" });
        }
        this.url = url.replace(/\/+$/, "");
        this.#token = opts.token ?? env("NORN_TOKEN");
        const timeout = opts.timeout ?? 30_000;
        if (!(timeout > 0))
            throw new InvalidArgument("must be a positive number of milliseconds", { field: "timeout" });
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
    async #send(method, path, req = {}) {
        const qs = req.query?.toString();
        const url = this.url + path + (qs ? "?" + qs : "");
        const headers = { "User-Agent": USER_AGENT, Accept: req.accept ?? "application/json" };
        if (this.#token)
            headers["Authorization"] = `Bearer ${this.#token}`;
        let body;
        if (req.body !== undefined) {
            headers["Content-Type"] = "application/json";
            body = JSON.stringify(req.body);
        }
        const limit = req.timeout ?? this.#timeout;
        const ctl = new AbortController();
        const timer = setTimeout(() => ctl.abort(new Unavailable(`${method} ${path}: no answer within ${limit} ms`, { status: 0 })), limit);
        const user = req.signal;
        const onAbort = () => ctl.abort(user.reason);
        if (user) {
            if (user.aborted)
                ctl.abort(user.reason);
            else
                user.addEventListener("abort", onAbort, { once: true });
        }
        const release = () => {
            clearTimeout(timer);
            user?.removeEventListener("abort", onAbort);
        };
        let res;
        try {
            res = await this.#fetch(url, { method, headers, body, signal: ctl.signal });
        }
        catch (e) {
            release();
            if (ctl.signal.aborted)
                throw ctl.signal.reason;
            throw new Unavailable(`${method} ${path}: ${describe(e)}`, { status: 0, cause: e });
        }
        if (!res.ok) {
            try {
                throw await this.#error(res);
            }
            finally {
                release();
            }
        }
        if (req.accept === "application/x-ndjson" || req.accept === "text/event-stream")
            clearTimeout(timer);
        return { res, release, signal: ctl.signal };
    }
    async #error(res) {
        let text = "";
        try {
            text = await readLimited(res, MAX_ERROR_BODY);
        }
        catch {
            // The status alone still says what happened.
        }
        try {
            const body = JSON.parse(text);
            if (body && typeof body.error === "object" && body.error !== null)
                return errorFromWire(body.error, res.status);
        }
        catch {
            // Not our JSON: a proxy's page, say.
        }
        const code = res.status === 400 ? "invalid_argument"
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
    async #call(method, path, req = {}) {
        const { res, release, signal } = await this.#send(method, path, req);
        let text;
        try {
            text = await res.text();
        }
        catch (e) {
            if (signal.aborted)
                throw signal.reason;
            throw new Unavailable(`${method} ${path}: reading the response: ${describe(e)}`, { status: 0, cause: e });
        }
        finally {
            release();
        }
        try {
            return JSON.parse(text);
        }
        catch (e) {
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
    async submit(queue, spec, options = {}) {
        const { signal, ...rest } = options;
        const body = newTask({ ...rest, queue, spec }, "");
        return submitted(await this.#call("POST", "/v1/tasks", { body, signal }));
    }
    /** Submits tasks all or nothing, in order; a task may depend on an earlier one of the batch. `duplicate` and `replaced` are set as for {@link Client.submit}. */
    async submitBatch(tasks, opts = {}) {
        if (!Array.isArray(tasks))
            throw new InvalidArgument("must be an array of tasks", { field: "tasks" });
        const body = { tasks: tasks.map((t, i) => newTask(t, `tasks[${i}].`)) };
        const r = await this.#call("POST", "/v1/tasks/batch", { body, signal: opts.signal });
        const dup = new Set(r.duplicates ?? []);
        const replaced = new Set(r.replaced ?? []);
        return r.tasks.map((t, i) => submitted({ task: t, duplicate: dup.has(t.id), replaced: replaced.has(i) }));
    }
    /** The task with this id; NotFound if there is none. */
    async get(id, opts = {}) {
        const r = await this.#call("GET", `/v1/tasks/${taskID(id)}`, opts);
        return r.task;
    }
    /** The tasks of these ids that exist, and the ids that do not. */
    async getMany(ids, opts = {}) {
        if (!Array.isArray(ids) || ids.length === 0)
            throw new InvalidArgument("give at least one id", { field: "ids" });
        if (ids.length === 1) {
            try {
                return { tasks: [await this.get(ids[0], opts)], missing: [] };
            }
            catch (e) {
                if (e instanceof NornError && e.code === "not_found")
                    return { tasks: [], missing: [ids[0]] };
                throw e;
            }
        }
        const path = "/v1/tasks/" + ids.map((id, i) => taskID(id, `ids[${i}]`)).join(",");
        const r = await this.#call("GET", path, opts);
        return { tasks: r.tasks, missing: r.missing ?? [] };
    }
    /**
     * Every task matching the filter, streamed (NDJSON) in constant memory
     * however many match. Stop early with `break`; that closes the stream.
     */
    async *list(opts = {}) {
        const q = filterQuery(opts);
        listQuery(q, opts);
        const stream = await this.#send("GET", "/v1/tasks", { query: q, accept: "application/x-ndjson", signal: opts.signal });
        for await (const line of lines(stream)) {
            const v = parseLine(line);
            if (v.error !== undefined && v.id === undefined)
                throw errorFromWire(v.error, 500);
            yield v;
        }
    }
    /** One page of matching tasks; pass `next_cursor` as `cursor` for the next (absent on the last page). */
    async listPage(opts = {}) {
        const q = filterQuery(opts);
        listQuery(q, opts);
        if (opts.cursor)
            q.set("cursor", opts.cursor);
        const r = await this.#call("GET", "/v1/tasks", { query: q, signal: opts.signal });
        return r.next_cursor ? { tasks: r.tasks, next_cursor: r.next_cursor } : { tasks: r.tasks };
    }
    /** How many tasks match the filter. */
    async count(filter = {}) {
        const r = await this.#call("GET", "/v1/tasks/count", { query: filterQuery(filter), signal: filter.signal });
        return r.count;
    }
    /** Counts of the matching tasks per queue and status. */
    async countGroups(filter = {}) {
        const q = filterQuery(filter);
        q.set("group", "queue,status");
        const r = await this.#call("GET", "/v1/tasks/count", { query: q, signal: filter.signal });
        return r.groups ?? [];
    }
    /** Changes a task that is not running (priority, run_at, labels), optionally only at `if_version`. */
    async update(id, changes, opts = {}) {
        const body = { ...changes };
        if (changes.run_at !== undefined)
            body["run_at"] = formatTime(changes.run_at, "run_at");
        const r = await this.#call("PATCH", `/v1/tasks/${taskID(id)}`, { body, signal: opts.signal });
        return r.task;
    }
    /** Cancels a task; a worker running it learns it at its next heartbeat. */
    async cancel(id, opts = {}) {
        const r = await this.#call("POST", `/v1/tasks/${taskID(id)}/cancel`, opts);
        return r.task;
    }
    /** Deletes a task; NotFound if there is none. */
    async delete(id, opts = {}) {
        await this.#call("DELETE", `/v1/tasks/${taskID(id)}`, opts);
    }
    /** Deletes every matching task (at least one filter is required); how many were deleted. */
    async deleteMatching(filter) {
        const r = await this.#call("DELETE", "/v1/tasks", { query: filterQuery(filter), signal: filter.signal });
        return r.deleted;
    }
    /**
     * Runs again a task that ended without success (aborted or cancelled):
     * ready at once, or scheduled until `run_at`; attempts restart at 0.
     * `with_dependents` also brings back, transitively, the tasks aborted
     * because this one failed.
     */
    async retry(id, opts = {}) {
        const body = {};
        if (opts.run_at !== undefined)
            body["run_at"] = formatTime(opts.run_at, "run_at");
        if (opts.with_dependents)
            body["with_dependents"] = true;
        return (await this.#call("POST", `/v1/tasks/${taskID(id)}/retry`, { body, signal: opts.signal })).task;
    }
    /** Retries every aborted or cancelled task matching the filter (at least one condition); returns how many. */
    async retryMatching(filter) {
        const query = filterQuery(filter);
        if ([...query.keys()].length === 0)
            throw new InvalidArgument("retrying by filter needs at least one condition", { field: "filter" });
        const r = await this.#call("POST", "/v1/tasks/retry", { query, body: {}, signal: filter.signal });
        return r.retried;
    }
    /** Cancels every pending task matching the filter (at least one condition), as cancel does each; returns how many. */
    async cancelMatching(filter) {
        const query = filterQuery(filter);
        if ([...query.keys()].length === 0)
            throw new InvalidArgument("cancelling by filter needs at least one condition", { field: "filter" });
        const r = await this.#call("POST", "/v1/tasks/cancel", { query, body: {}, signal: filter.signal });
        return r.cancelled;
    }
    /** The task's update log after sequence number `after` (at most `limit` entries, 0: all). */
    async readLog(id, opts = {}) {
        const q = new URLSearchParams();
        if (opts.after)
            q.set("after", String(opts.after));
        if (opts.limit)
            q.set("limit", String(opts.limit));
        const r = await this.#call("GET", `/v1/tasks/${taskID(id)}/log`, { query: q, signal: opts.signal });
        return r.entries;
    }
    /**
     * Sends the task a signal named `name` with optional JSON `data`; a task
     * waiting for that name (a snooze with `until_signal`) becomes ready. The
     * task keeps every signal, in order. Resolves with the signal as stored.
     * NotFound for a missing task, Conflict for one that ended.
     */
    async sendSignal(id, name, data, opts = {}) {
        const body = { name };
        if (data !== undefined)
            body["data"] = data;
        const r = await this.#call("POST", `/v1/tasks/${taskID(id)}/signals`, { body, signal: opts.signal });
        return r.signal;
    }
    /** The task's signals with a sequence number above `after` (default 0: all), in order. */
    async listSignals(id, opts = {}) {
        const q = new URLSearchParams();
        if (opts.after)
            q.set("after", String(opts.after));
        const r = await this.#call("GET", `/v1/tasks/${taskID(id)}/signals`, { query: q, signal: opts.signal });
        return r.signals;
    }
    /** Submits, updates, cancels and deletes all or nothing, once every requirement (`{id, version}`) holds. */
    async transact(txn, opts = {}) {
        const body = {};
        if (txn.submit)
            body["submit"] = txn.submit.map((t, i) => newTask(t, `submit[${i}].`));
        if (txn.update) {
            body["update"] = txn.update.map((u, i) => u.run_at === undefined ? { ...u } : { ...u, run_at: formatTime(u.run_at, `update[${i}].run_at`) });
        }
        if (txn.cancel)
            body["cancel"] = [...txn.cancel];
        if (txn.delete)
            body["delete"] = [...txn.delete];
        if (txn.require)
            body["require"] = [...txn.require];
        return this.#call("POST", "/v1/transactions", { body, signal: opts.signal });
    }
    // ---- queues and administration -----------------------------------------
    async queues(opts = {}) {
        return (await this.#call("GET", "/v1/queues", opts)).queues;
    }
    /** A queue's settings and counts (an unused queue reads as empty, with defaults). */
    async queue(name, opts = {}) {
        return (await this.#call("GET", `/v1/queues/${encodeURIComponent(name)}`, opts)).queue;
    }
    /**
     * Pauses or resumes a queue and sets its defaults and flow limits (role
     * admin). Only what `settings` names changes, nested settings included:
     * `{ key_rate_limit: { per_second: 5, burst: 10 } }` gives every
     * concurrency key its own bucket (`{ per_second: 0 }` removes it), and
     * `{ keys: { acme: { rate_limit: { per_second: 50 } } } }` gives one key
     * its own rate and keeps its other settings (`acme: null` removes them).
     */
    async updateQueue(name, settings, opts = {}) {
        const body = { ...settings };
        if (settings.timeout !== undefined)
            body["timeout"] = formatDuration(settings.timeout, "timeout");
        if (settings.max_runtime !== undefined)
            body["max_runtime"] = formatDuration(settings.max_runtime, "max_runtime");
        if (settings.retry !== undefined)
            body["retry"] = retryPolicy(settings.retry, "retry");
        if (settings.retention !== undefined) {
            const ret = {};
            for (const [k, v] of Object.entries(settings.retention)) {
                if (v !== undefined)
                    ret[k] = formatDuration(v, `retention.${k}`);
            }
            body["retention"] = ret;
        }
        const path = `/v1/queues/${encodeURIComponent(name)}`;
        return (await this.#call("PATCH", path, { body, signal: opts.signal })).queue;
    }
    /**
     * The state of the sequence of `queue` and `key`: the tasks submitted to
     * the queue with `sequence_key: key` run one at a time in submit order. A
     * sequence nobody used reads as empty.
     */
    async sequence(queue, key, opts = {}) {
        if (!queue)
            throw new InvalidArgument("queue is required", { field: "queue" });
        if (!key)
            throw new InvalidArgument("key is required", { field: "key" });
        const path = `/v1/queues/${encodeURIComponent(queue)}/sequences/${encodeURIComponent(key)}`;
        return (await this.#call("GET", path, opts)).sequence;
    }
    /**
     * The sequences of `queue` that have a head, by key, each as `sequence`
     * returns it; `halted: true` lists only the halted ones (the ones waiting
     * for an operator). `after` (a key) and `limit` (default 100, max 1000) page.
     */
    async sequences(queue, opts = {}) {
        if (!queue)
            throw new InvalidArgument("queue is required", { field: "queue" });
        const query = new URLSearchParams();
        if (opts.halted)
            query.set("halted", "true");
        if (opts.after)
            query.set("after", opts.after);
        if (opts.limit !== undefined)
            query.set("limit", String(opts.limit));
        const path = `/v1/queues/${encodeURIComponent(queue)}/sequences`;
        return (await this.#call("GET", path, { query, signal: opts.signal })).sequences;
    }
    async stats(opts = {}) {
        return this.#call("GET", "/v1/stats", opts);
    }
    /**
     * The server's per-minute counts of submitted, completed and failed tasks
     * (at most the last 24 hours, from `since`; of the given queues summed, or
     * all). A server counts from its start and keeps the history in memory.
     */
    async throughput(opts = {}) {
        const q = new URLSearchParams();
        const queue = csv(opts.queue);
        if (queue)
            q.set("queue", queue);
        if (opts.since !== undefined)
            q.set("since", sinceParam(opts.since));
        return this.#call("GET", "/v1/stats/throughput", { query: q, signal: opts.signal });
    }
    async workers(opts = {}) {
        return (await this.#call("GET", "/v1/workers", opts)).workers;
    }
    /** What the caller's token may do. */
    async whoami(opts = {}) {
        return this.#call("GET", "/v1/whoami", opts);
    }
    /** Runs the monitor's duties due now (role admin). */
    async sweep(opts = {}) {
        return this.#call("POST", "/v1/sweep", opts);
    }
    // ---- schedules ----------------------------------------------------------
    /**
     * Creates or replaces the schedule `name` (role admin): a task submitted to
     * `queue` on every tick of `cron` (5 fields, 6 with seconds, or `@hourly`,
     * `@every 30s`…), read in `timezone` (default UTC).
     */
    async setSchedule(name, schedule, opts = {}) {
        const body = scheduleBody(schedule);
        return (await this.#call("PUT", schedulePath(name), { body, signal: opts.signal })).schedule;
    }
    /** Every schedule, with its next_fire, last_fire and last_task. */
    async schedules(opts = {}) {
        return (await this.#call("GET", "/v1/schedules", opts)).schedules;
    }
    /** One schedule; NotFound if there is none. */
    async schedule(name, opts = {}) {
        return (await this.#call("GET", schedulePath(name), opts)).schedule;
    }
    /** Changes some settings of a schedule (`{ paused: true }` pauses it; role admin). */
    async updateSchedule(name, changes, opts = {}) {
        const body = scheduleBody(changes);
        return (await this.#call("PATCH", schedulePath(name), { body, signal: opts.signal })).schedule;
    }
    /** Deletes a schedule; the tasks it submitted stay (role admin). */
    async deleteSchedule(name, opts = {}) {
        await this.#call("DELETE", schedulePath(name), opts);
    }
    /** Submits the schedule's task now, outside its cadence (role admin). */
    async triggerSchedule(name, opts = {}) {
        return (await this.#call("POST", `${schedulePath(name)}/trigger`, opts)).task;
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
    async createBatch(batch = {}, opts = {}) {
        if (batch === null || typeof batch !== "object")
            throw new InvalidArgument("must be a batch object", { field: "batch" });
        const body = {};
        for (const [k, v] of Object.entries(batch)) {
            if (v === undefined)
                continue;
            if (k === "on_success" || k === "on_complete")
                body[k] = newTask(v, `${k}.`);
            else if (k === "tasks") {
                if (!Array.isArray(v))
                    throw new InvalidArgument("must be an array of tasks", { field: "tasks" });
                body[k] = v.map((t, i) => newTask(t, `tasks[${i}].`));
            }
            else
                body[k] = v;
        }
        const r = await this.#call("POST", "/v1/batches", { body, signal: opts.signal });
        const tasks = (r.tasks ?? []).map((s) => submitted(s));
        return { batch: r.batch, tasks };
    }
    /** A batch with its members' counts; NotFound if there is none. */
    async getBatch(id, opts = {}) {
        return (await this.#call("GET", batchPath(id), opts)).batch;
    }
    /** One page of batches in id order; pass the last id as `after` for the next. */
    async listBatches(query = {}) {
        const q = new URLSearchParams();
        if (query.state)
            q.set("state", query.state);
        for (const [k, v] of Object.entries(query.labels ?? {}))
            q.append("label", `${k}:${v}`);
        if (query.after)
            q.set("after", query.after);
        if (query.limit !== undefined)
            q.set("limit", String(query.limit));
        return (await this.#call("GET", "/v1/batches", { query: q, signal: query.signal })).batches;
    }
    /** Closes a batch to new members, so its callbacks can fire; sealing a sealed or done batch changes nothing. */
    async sealBatch(id, opts = {}) {
        return (await this.#call("POST", `${batchPath(id)}/seal`, { body: {}, signal: opts.signal })).batch;
    }
    /** Deletes a batch; its members stay unless `members` is true. How many members were deleted. */
    async deleteBatch(id, opts = {}) {
        const q = new URLSearchParams();
        if (opts.members)
            q.set("members", "true");
        return (await this.#call("DELETE", batchPath(id), { query: q, signal: opts.signal })).deleted;
    }
    /**
     * Task state changes as they happen (server-sent events); stop with
     * `break` or the signal. The subscription starts with the first `next()`.
     */
    async *events(opts = {}) {
        const q = new URLSearchParams();
        const queue = csv(opts.queue);
        if (queue)
            q.set("queue", queue);
        if (opts.task)
            q.set("task", opts.task);
        const stream = await this.#send("GET", "/v1/events", { query: q, accept: "text/event-stream", signal: opts.signal });
        yield* serverEvents(lines(stream));
    }
    /**
     * Waits until the task finishes (completed, aborted or cancelled) and
     * returns it, following its state changes as server-sent events rather
     * than polling. Rejects with a TimeoutError after `timeout` ms (default: no
     * limit) and with NotFound if the task is deleted.
     */
    async wait(id, opts = {}) {
        taskID(id);
        const ctl = new AbortController();
        const user = opts.signal;
        const onAbort = () => ctl.abort(user.reason);
        if (user?.aborted)
            throw user.reason;
        user?.addEventListener("abort", onAbort, { once: true });
        const timer = opts.timeout === undefined ? undefined
            : setTimeout(() => ctl.abort(new DOMException(`task ${JSON.stringify(id)} did not finish within ${opts.timeout} ms`, "TimeoutError")), opts.timeout);
        let stream;
        try {
            // Subscribe first, then read: a change between the two is not missed.
            stream = await this.#send("GET", "/v1/events", {
                query: new URLSearchParams({ task: id }),
                accept: "text/event-stream",
                signal: ctl.signal,
            });
            let task = await this.get(id, { signal: ctl.signal });
            if (isTerminal(task.status))
                return task;
            for await (const ev of serverEvents(lines(stream))) {
                if (ev.kind === "TaskDelete")
                    throw new NotFound(`task ${JSON.stringify(id)} was deleted`);
                if (ev.kind === "Lagged" || (ev.status !== undefined && isTerminal(ev.status))) {
                    task = await this.get(id, { signal: ctl.signal });
                    if (isTerminal(task.status))
                        return task;
                }
            }
            throw new Unavailable(`the event stream ended before task ${JSON.stringify(id)} finished`, { status: 0 });
        }
        finally {
            clearTimeout(timer);
            user?.removeEventListener("abort", onAbort);
            // Closes the stream if it is still open (a return before reading it).
            if (!ctl.signal.aborted)
                ctl.abort();
            stream?.release();
        }
    }
    // ---- worker calls ------------------------------------------------------
    /** Registers a worker; its id names it in claims and lease calls. */
    async registerWorker(name, queues, opts = {}) {
        const r = await this.#call("POST", "/v1/workers", { body: { name, queues }, signal: opts.signal });
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
    async claim(worker, queues, opts = {}) {
        const body = { worker, queues: typeof queues === "string" ? [queues] : [...queues] };
        // Shares claims between the queues by weight instead of their order.
        if (opts.weights !== undefined)
            body["weights"] = { ...opts.weights };
        if (opts.n !== undefined)
            body["n"] = opts.n;
        if (opts.min !== undefined)
            body["min"] = opts.min;
        if (opts.linger !== undefined)
            body["linger"] = formatDuration(opts.linger, "linger");
        if (opts.groupBy)
            body["group_by"] = opts.groupBy;
        if (opts.timeout !== undefined)
            body["timeout"] = formatDuration(opts.timeout, "timeout");
        let limit = this.#timeout;
        if (opts.wait !== undefined) {
            body["wait"] = formatDuration(opts.wait, "wait");
            limit = Math.max(limit, (typeof opts.wait === "number" ? opts.wait : parseDuration(opts.wait, "wait")) + CLAIM_SLACK_MS);
        }
        const r = await this.#call("POST", "/v1/claim", { body, signal: opts.signal, timeout: limit });
        return r.tasks;
    }
    /** Extends the lease (by `extend`, else the task's timeout) and records progress; the new deadline. */
    async heartbeat(id, worker, lease, opts = {}) {
        const body = { worker, lease };
        if (opts.progress !== undefined)
            body["progress"] = opts.progress;
        if (opts.extend !== undefined)
            body["extend"] = formatDuration(opts.extend, "extend");
        const r = await this.#call("POST", `/v1/tasks/${taskID(id)}/heartbeat`, { body, signal: opts.signal });
        return r.deadline;
    }
    /**
     * A {@link heartbeat} that also answers with the task's signals after
     * sequence number `after` (0: all), in order: the new deadline and those
     * signals.
     */
    async heartbeatSignals(id, worker, lease, after = 0, opts = {}) {
        const body = { worker, lease, signals_after: after };
        if (opts.progress !== undefined)
            body["progress"] = opts.progress;
        if (opts.extend !== undefined)
            body["extend"] = formatDuration(opts.extend, "extend");
        const r = await this.#call("POST", `/v1/tasks/${taskID(id)}/heartbeat`, { body, signal: opts.signal });
        return { deadline: r.deadline, signals: r.signals ?? [] };
    }
    /** Appends to the task's update log; `seq`, when given, must be the next number (Conflict otherwise). */
    async appendLog(id, worker, lease, data, opts = {}) {
        const body = { worker, lease, data };
        if (opts.seq !== undefined)
            body["seq"] = opts.seq;
        const r = await this.#call("POST", `/v1/tasks/${taskID(id)}/log`, { body, signal: opts.signal });
        return r.entry;
    }
    /** Completes the task with an optional JSON result. */
    async complete(id, worker, lease, result, opts = {}) {
        const body = { worker, lease };
        if (result !== undefined)
            body["result"] = result;
        await this.#call("POST", `/v1/tasks/${taskID(id)}/complete`, { body, signal: opts.signal });
    }
    /** Fails the attempt: retried per the task's policy, else aborted. */
    async fail(id, worker, lease, error, opts = {}) {
        const e = error.retry_in === undefined ? error : { ...error, retry_in: formatDuration(error.retry_in, "retry_in") };
        await this.#call("POST", `/v1/tasks/${taskID(id)}/fail`, { body: { worker, lease, error: e }, signal: opts.signal });
    }
    /** Aborts the task for good. */
    async abort(id, worker, lease, error, opts = {}) {
        await this.#call("POST", `/v1/tasks/${taskID(id)}/abort`, { body: { worker, lease, error }, signal: opts.signal });
    }
    /** Gives the task back: ready again at once, the attempt does not count. */
    async yield(id, worker, lease, opts = {}) {
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
    async awaitChildren(id, worker, lease, tasks, opts = {}) {
        if (!Array.isArray(tasks))
            throw new InvalidArgument("must be an array of tasks", { field: "tasks" });
        const body = { worker, lease, tasks: tasks.map((t, i) => newTask(t, `tasks[${i}].`)) };
        if (opts.on_child_failure !== undefined)
            body["on_child_failure"] = opts.on_child_failure;
        const r = await this.#call("POST", `/v1/tasks/${taskID(id)}/await`, { body, signal: opts.signal });
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
    async snooze(id, worker, lease, until, opts = {}) {
        const body = { worker, lease, ...snoozeBody(until, "") };
        await this.#call("POST", `/v1/tasks/${taskID(id)}/snooze`, { body, signal: opts.signal });
    }
    /** Runs lease operations in one call; each gets its own result or error, in order. */
    async leaseBatch(ops, opts = {}) {
        const wire = ops.map((op, i) => {
            if (op.op === "heartbeat" && op.extend !== undefined)
                return { ...op, extend: formatDuration(op.extend, `ops[${i}].extend`) };
            if (op.op === "snooze") {
                const { delay: _d, run_at: _r, until_signal: _s, scope: _c, ...rest } = op;
                return { ...rest, ...snoozeBody(op, `ops[${i}].`) };
            }
            return op;
        });
        const r = await this.#call("POST", "/v1/leases/batch", { body: { ops: wire }, signal: opts.signal });
        return r.results.map((res) => (res.error ? errorFromWire(res.error, 200) : res));
    }
}
// ---- helpers ---------------------------------------------------------------
function describe(e) {
    if (e instanceof Error) {
        const cause = e.cause;
        return cause instanceof Error ? `${e.message}: ${cause.message}` : e.message;
    }
    return String(e);
}
function taskID(id, field = "id") {
    if (typeof id !== "string" || id === "")
        throw new InvalidArgument("must be a non-empty task id", { field });
    return encodeURIComponent(id);
}
function csv(v) {
    if (v === undefined)
        return undefined;
    return typeof v === "string" ? v : v.join(",");
}
function retryPolicy(r, field) {
    const out = { ...r };
    if (r.base !== undefined)
        out["base"] = formatDuration(r.base, `${field}.base`);
    if (r.max !== undefined)
        out["max"] = formatDuration(r.max, `${field}.max`);
    return out;
}
// A number is milliseconds ago; a string a Go duration or an RFC 3339 time.
function sinceParam(v) {
    if (typeof v === "number")
        return formatDuration(v, "since");
    if (typeof v === "string") {
        try {
            return formatDuration(v, "since");
        }
        catch {
            // not a duration: a time
        }
    }
    return formatTime(v, "since");
}
function batchPath(id) {
    if (typeof id !== "string" || id === "")
        throw new InvalidArgument("must be a non-empty batch id", { field: "id" });
    return `/v1/batches/${encodeURIComponent(id)}`;
}
function schedulePath(name) {
    if (typeof name !== "string" || name === "")
        throw new InvalidArgument("must be a non-empty schedule name", { field: "name" });
    return `/v1/schedules/${encodeURIComponent(name)}`;
}
function scheduleBody(s) {
    const out = {};
    for (const [k, v] of Object.entries(s)) {
        if (v === undefined)
            continue;
        if (k === "timeout" || k === "max_runtime")
            out[k] = formatDuration(v, k);
        else if (k === "retry")
            out[k] = retryPolicy(v, k);
        else
            out[k] = v;
    }
    return out;
}
function snoozeBody(u, prefix) {
    const scope = u !== null && typeof u === "object" ? u.scope : undefined;
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
        const out = { until_signal: u.until_signal };
        if (u.timeout !== undefined)
            out["timeout"] = formatDuration(u.timeout, prefix + "timeout");
        return out;
    }
    if (u !== null && typeof u === "object" && u.timeout !== undefined) {
        throw new InvalidArgument("is the longest wait for until_signal; it needs one", { field: prefix + "timeout" });
    }
    if (u === null || typeof u !== "object" || (u.delay === undefined) === (u.run_at === undefined)) {
        throw new InvalidArgument("give exactly one of delay and run_at", { field: prefix + "delay" });
    }
    const out = u.delay !== undefined ? { delay: formatDuration(u.delay, prefix + "delay") } : { run_at: formatTime(u.run_at, prefix + "run_at") };
    if (scope !== undefined)
        out["scope"] = scope;
    return out;
}
function newTask(t, prefix) {
    if (t === null || typeof t !== "object")
        throw new InvalidArgument("must be a task object", { field: prefix.replace(/\.$/, "") || "task" });
    const out = {};
    for (const [k, v] of Object.entries(t)) {
        if (v === undefined)
            continue;
        if (k === "run_at" || k === "expires_at")
            out[k] = formatTime(v, prefix + k);
        else if (k === "delay" || k === "timeout" || k === "unique_for" || k === "max_runtime" || k === "expire_in" || k === "debounce_max")
            out[k] = formatDuration(v, prefix + k);
        else if (k === "retry")
            out[k] = retryPolicy(v, prefix + k);
        else
            out[k] = v;
    }
    return out;
}
function filterQuery(f) {
    const q = new URLSearchParams();
    const queue = csv(f.queue);
    if (queue)
        q.set("queue", queue);
    const status = csv(f.status);
    if (status)
        q.set("status", status);
    for (const [k, v] of Object.entries(f.labels ?? {}))
        q.append("label", `${k}:${v}`);
    if (f.owner)
        q.set("owner", f.owner);
    if (f.id_contains)
        q.set("id_contains", f.id_contains);
    if (f.depends_on)
        q.set("depends_on", f.depends_on);
    if (f.unique_key)
        q.set("unique_key", f.unique_key);
    if (f.batch)
        q.set("batch", f.batch);
    for (const k of ["created_after", "created_before", "updated_after", "updated_before"]) {
        const v = f[k];
        if (v !== undefined)
            q.set(k, formatTime(v, k));
    }
    return q;
}
function listQuery(q, o) {
    if (o.limit)
        q.set("limit", String(o.limit));
    if (o.order)
        q.set("order", o.order);
    if (o.summary)
        q.set("view", "summary");
}
function parseLine(line) {
    try {
        return JSON.parse(line);
    }
    catch (e) {
        throw new NornError("internal", `cannot decode a streamed line: ${describe(e)}`);
    }
}
async function readLimited(res, max) {
    if (!res.body)
        return "";
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let out = "";
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done)
                break;
            out += dec.decode(value, { stream: true });
            if (out.length >= max)
                break;
        }
    }
    finally {
        await reader.cancel().catch(() => { });
    }
    return out.slice(0, max);
}
function isTerminal(s) {
    return s === "completed" || s === "aborted" || s === "cancelled";
}
/** The events of a server-sent event stream's lines. */
async function* serverEvents(src) {
    let data = [];
    for await (const line of src) {
        if (line === "") {
            if (data.length > 0)
                yield parseLine(data.join("\n"));
            data = [];
        }
        else if (line.startsWith("data:")) {
            data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
        }
        // "event:" repeats the data's kind; ":" lines are keep-alive comments.
    }
}
/** The lines of a streamed body, read as they arrive; leaving the loop closes the stream. */
async function* lines(stream) {
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
            let chunk;
            try {
                chunk = await reader.read();
            }
            catch (e) {
                if (signal.aborted)
                    throw signal.reason;
                throw new Unavailable(`the stream broke: ${describe(e)}`, { status: 0, cause: e });
            }
            if (chunk.done)
                break;
            buf += dec.decode(chunk.value, { stream: true });
            let nl;
            while ((nl = buf.indexOf("\n")) >= 0) {
                const line = buf.slice(0, nl).replace(/\r$/, "");
                buf = buf.slice(nl + 1);
                yield line;
            }
        }
        buf += dec.decode();
        if (buf !== "")
            yield buf;
    }
    finally {
        await reader.cancel().catch(() => { });
        release();
    }
}
