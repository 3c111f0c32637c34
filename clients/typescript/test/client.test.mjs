import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  Cancelled,
  Client,
  Conflict,
  InvalidArgument,
  LeaseLost,
  NornError,
  NotFound,
  PermissionDenied,
  TooLarge,
  Unauthenticated,
  Unavailable,
  parseDuration,
} from "../dist/index.js";
import { startServer } from "./server.mjs";

let srv;
let c;

before(async () => {
  srv = await startServer();
  c = new Client({ url: srv.url });
});
after(async () => {
  await srv?.stop();
});

describe("client", () => {
  test("submit with every option, and a duplicate id", async () => {
    const runAt = new Date(Date.now() + 3_600_000);
    const t = await c.submit("cq", { to: "ada" }, {
      id: "sub-1",
      priority: 5,
      labels: { tenant: "acme" },
      run_at: runAt,
      max_attempts: 4,
      retry: { max_retries: 3, base: 1500, max: "1m" },
      timeout: 30_000,
    });
    assert.equal(t.id, "sub-1");
    assert.equal(t.queue, "cq");
    assert.deepEqual(t.spec, { to: "ada" });
    assert.equal(t.priority, 5);
    assert.deepEqual(t.labels, { tenant: "acme" });
    assert.equal(t.status, "scheduled");
    assert.equal(Date.parse(t.run_at), runAt.getTime());
    assert.equal(t.max_attempts, 4);
    assert.equal(parseDuration(t.timeout), 30_000);
    assert.equal(t.retry.max_retries, 3);
    assert.equal(parseDuration(t.retry.base), 1500);
    assert.equal(t.duplicate, undefined);

    const again = await c.submit("cq", { other: true }, { id: "sub-1" });
    assert.equal(again.duplicate, true);
    assert.deepEqual(again.spec, { to: "ada" }, "a duplicate returns the stored task");

    const delayed = await c.submit("cq", null, { delay: "1h" });
    assert.equal(delayed.status, "scheduled");
    const ready = await c.submit("cq");
    assert.equal(ready.status, "ready");
    assert.match(ready.id, /^[0-9a-f-]{36}$/);
  });

  test("submitBatch: all or nothing, dependencies, duplicates", async () => {
    const tasks = await c.submitBatch([
      { id: "b-1", queue: "bq", spec: 1 },
      { id: "b-2", queue: "bq", spec: 2, depends_on: ["b-1"] },
    ]);
    assert.deepEqual(tasks.map((t) => [t.id, t.status]), [["b-1", "ready"], ["b-2", "blocked"]]);
    const again = await c.submitBatch([{ id: "b-1", queue: "bq" }, { id: "b-3", queue: "bq" }]);
    assert.equal(again[0].duplicate, true);
    assert.equal(again[1].duplicate, undefined);
    await assert.rejects(
      c.submitBatch([{ id: "b-4", queue: "bq" }, { queue: "bq", priority: -1 }]),
      (e) => e instanceof InvalidArgument && e.field === "tasks[1].priority" && e.status === 400,
    );
    await assert.rejects(c.get("b-4"), NotFound, "a refused batch writes nothing");
  });

  test("get and getMany", async () => {
    await c.submit("gq", { n: 1 }, { id: "g-1" });
    const t = await c.get("g-1");
    assert.equal(t.id, "g-1");
    assert.equal(t.version, 1);
    await assert.rejects(c.get("g-nope"), (e) => e instanceof NotFound && e.code === "not_found" && e.status === 404);
    await c.submit("gq", null, { id: "g-2" });
    const many = await c.getMany(["g-1", "g-2", "g-nope"]);
    assert.deepEqual(many.tasks.map((t) => t.id).sort(), ["g-1", "g-2"]);
    assert.deepEqual(many.missing, ["g-nope"]);
    assert.deepEqual(await c.getMany(["g-nope"]), { tasks: [], missing: ["g-nope"] });
  });

  test("list streams every match; breaking early closes the stream", async () => {
    const n = 2500;
    const batch = [];
    for (let i = 0; i < n; i++) batch.push({ id: `l-${String(i).padStart(5, "0")}`, queue: "lq", labels: { k: i % 2 ? "odd" : "even" } });
    await c.submitBatch(batch);
    let seen = 0;
    let last = "";
    for await (const t of c.list({ queue: "lq" })) {
      assert.equal(t.queue, "lq");
      assert.ok(t.id > last, "ordered by id");
      last = t.id;
      seen++;
    }
    assert.equal(seen, n);
    let odd = 0;
    for await (const t of c.list({ queue: ["lq"], labels: { k: "odd" }, summary: true })) {
      assert.equal(t.labels.k, "odd");
      odd++;
    }
    assert.equal(odd, n / 2);
    let few = 0;
    for await (const t of c.list({ queue: "lq", order: "newest" })) {
      assert.ok(t);
      if (++few === 3) break;
    }
    assert.equal(few, 3);
    // The connection closed by the break does not disturb later calls.
    assert.equal(await c.count({ queue: "lq" }), n);
    const capped = [];
    for await (const t of c.list({ queue: "lq", limit: 7 })) capped.push(t.id);
    assert.equal(capped.length, 7);
  });

  test("list: a signal stops the stream", async () => {
    const ctl = new AbortController();
    const it = c.list({ queue: "lq", signal: ctl.signal });
    const first = await it.next();
    assert.equal(first.done, false);
    ctl.abort(new Error("enough"));
    await assert.rejects(async () => {
      for await (const _ of it);
    }, /enough/);
  });

  test("listPage walks pages with the cursor", async () => {
    const ids = [];
    let cursor;
    do {
      const page = await c.listPage({ queue: "lq", limit: 1000, cursor });
      ids.push(...page.tasks.map((t) => t.id));
      cursor = page.next_cursor;
    } while (cursor);
    assert.equal(ids.length, 2500);
    assert.equal(new Set(ids).size, 2500);
  });

  test("count and countGroups", async () => {
    await c.submitBatch([{ queue: "cnt-a" }, { queue: "cnt-a" }, { queue: "cnt-b", delay: "1h" }]);
    assert.equal(await c.count({ queue: "cnt-a,cnt-b" }), 3);
    assert.equal(await c.count({ queue: ["cnt-a", "cnt-b"], status: "pending" }), 3);
    assert.equal(await c.count({ queue: "cnt-b", status: ["ready"] }), 0);
    const groups = await c.countGroups({ queue: ["cnt-a", "cnt-b"] });
    assert.deepEqual(
      groups.map((g) => [g.queue, g.status, g.count]).sort(),
      [["cnt-a", "ready", 2], ["cnt-b", "scheduled", 1]],
    );
    const since = new Date(Date.now() - 60_000);
    assert.equal(await c.count({ queue: "cnt-a", created_after: since }), 2);
    assert.equal(await c.count({ queue: "cnt-a", created_before: since }), 0);
  });

  test("update, with if_version", async () => {
    const t = await c.submit("uq", null, { id: "u-1", delay: "1h" });
    const when = new Date(Date.now() + 7_200_000);
    const u = await c.update("u-1", { priority: 9, run_at: when, labels: { a: "b" }, if_version: t.version });
    assert.equal(u.priority, 9);
    assert.equal(Date.parse(u.run_at), when.getTime());
    assert.deepEqual(u.labels, { a: "b" });
    await assert.rejects(c.update("u-1", { priority: 1, if_version: t.version }), (e) => e instanceof Conflict && e.status === 409);
  });

  test("cancel and delete", async () => {
    await c.submit("dq", null, { id: "d-1" });
    const t = await c.cancel("d-1");
    assert.equal(t.status, "cancelled");
    await c.delete("d-1");
    await assert.rejects(c.get("d-1"), NotFound);
    await assert.rejects(c.delete("d-1"), NotFound);
    await c.submitBatch([{ queue: "dq2" }, { queue: "dq2" }, { queue: "dq3" }]);
    assert.equal(await c.deleteMatching({ queue: "dq2" }), 2);
    assert.equal(await c.count({ queue: "dq3" }), 1);
    await assert.rejects(c.deleteMatching({}), (e) => e instanceof InvalidArgument && e.field === "filter");
  });

  test("transact: all or nothing after requirements", async () => {
    const a = await c.submit("tq", null, { id: "t-a", delay: "1h" });
    await c.submit("tq", null, { id: "t-c" });
    await c.submit("tq", null, { id: "t-d" });
    const r = await c.transact({
      submit: [{ id: "t-new", queue: "tq", spec: { x: 1 } }],
      update: [{ id: "t-a", priority: 3, if_version: a.version }],
      cancel: ["t-c"],
      delete: ["t-d"],
      require: [{ id: "t-a", version: a.version }],
    });
    assert.deepEqual(r.submitted.map((s) => s.task.id), ["t-new"]);
    assert.equal(r.updated[0].priority, 3);
    assert.equal(r.cancelled[0].status, "cancelled");
    assert.equal(r.deleted, 1);
    await assert.rejects(
      c.transact({ submit: [{ id: "t-never", queue: "tq" }], require: [{ id: "t-a", version: a.version }] }),
      (e) => e instanceof Conflict,
    );
    await assert.rejects(c.get("t-never"), NotFound);
    await assert.rejects(
      c.transact({ update: [{ id: "t-a", priority: -2 }] }),
      (e) => e instanceof InvalidArgument && e.field === "update[0].priority",
    );
  });

  test("queues, queue, updateQueue, stats, workers, whoami, sweep", async () => {
    await c.submit("adm", null);
    const q = await c.updateQueue("adm", {
      paused: true,
      timeout: 20_000,
      max_attempts: 5,
      retry: { max_retries: 2, base: "1s", max: 10_000 },
      retention: { completed: "1h", aborted: 7_200_000, cancelled: 0 },
    });
    assert.equal(q.paused, true);
    assert.equal(parseDuration(q.defaults.timeout), 20_000);
    assert.equal(q.defaults.max_attempts, 5);
    assert.equal(parseDuration(q.defaults.retention.aborted), 7_200_000);
    assert.equal((await c.queue("adm")).counts.ready, 1);
    assert.ok((await c.queues()).some((x) => x.name === "adm" && x.paused));
    const st = await c.stats();
    assert.ok(st.total >= 1);
    assert.ok(st.counts.some((g) => g.queue === "adm"));
    const id = await c.registerWorker("stats-w", ["adm"]);
    assert.ok((await c.workers()).some((w) => w.id === id && w.name === "stats-w"));
    assert.deepEqual(await c.whoami(), { role: "admin", auth: false });
    const sw = await c.sweep();
    assert.equal(typeof sw, "object");
    await c.updateQueue("adm", { paused: false });
  });

  test("readLog, and every worker call", async () => {
    await c.submit("wq", { job: 1 }, { id: "w-1", retry: { max_retries: 1, base: 1 } });
    const wid = await c.registerWorker("w", ["wq"]);
    assert.match(wid, /^worker-\d+$/);
    let [t] = await c.claim(wid, "wq", { n: 1, timeout: "30s" });
    assert.equal(t.id, "w-1");
    assert.equal(t.lease, 1);
    assert.equal(t.status, "running");
    const deadline = await c.heartbeat("w-1", wid, t.lease, { progress: 0.25, extend: 60_000 });
    assert.ok(Date.parse(deadline) > Date.now() + 50_000);
    const e1 = await c.appendLog("w-1", wid, t.lease, { step: 1 });
    assert.equal(e1.seq, 1);
    const e2 = await c.appendLog("w-1", wid, t.lease, { step: 2 }, { seq: 2 });
    assert.equal(e2.seq, 2);
    await assert.rejects(c.appendLog("w-1", wid, t.lease, {}, { seq: 9 }), Conflict);
    assert.deepEqual((await c.readLog("w-1")).map((e) => e.data), [{ step: 1 }, { step: 2 }]);
    assert.deepEqual((await c.readLog("w-1", { after: 1 })).map((e) => e.seq), [2]);
    assert.deepEqual((await c.readLog("w-1", { limit: 1 })).map((e) => e.seq), [1]);
    assert.equal((await c.get("w-1")).progress, 0.25);

    await c.yield("w-1", wid, t.lease);
    await assert.rejects(c.complete("w-1", wid, t.lease), (e) => e instanceof LeaseLost && e.status === 409);
    [t] = await c.claim(wid, ["wq"], { wait: 5000 });
    assert.equal(t.lease, 2);
    assert.equal(t.attempts, 1, "a yield does not count as an attempt");
    await c.fail("w-1", wid, t.lease, { code: "boom", description: "it broke", args: { n: 1 } });
    let got = await c.get("w-1");
    assert.deepEqual(got.errors[0], { code: "boom", description: "it broke", args: { n: 1 } });
    [t] = await c.claim(wid, "wq", { wait: "10s" });
    assert.equal(t.id, "w-1");
    const res = await c.leaseBatch([
      { op: "heartbeat", id: "w-1", worker: wid, lease: t.lease, progress: 0.5, extend: 30_000 },
      { op: "heartbeat", id: "w-1", worker: wid, lease: 1 },
      { op: "complete", id: "w-1", worker: wid, lease: t.lease, result: { ok: true } },
    ]);
    assert.ok(typeof res[0].deadline === "string");
    assert.ok(res[1] instanceof LeaseLost);
    assert.deepEqual(res[2], {});
    got = await c.get("w-1");
    assert.equal(got.status, "completed");
    assert.deepEqual(got.result, { ok: true });

    await c.submit("wq", null, { id: "w-2" });
    [t] = await c.claim(wid, "wq");
    await c.abort("w-2", wid, t.lease, { code: "bad" });
    assert.equal((await c.get("w-2")).status, "aborted");

    await c.submit("wq", null, { id: "w-3" });
    [t] = await c.claim(wid, "wq");
    await c.cancel("w-3");
    await assert.rejects(c.heartbeat("w-3", wid, t.lease), (e) => e instanceof Cancelled && e.code === "cancelled");
    assert.deepEqual(await c.claim(wid, "wq", { wait: 50 }), []);
  });

  test("claim: a long poll answers when a task arrives, and a signal cuts it", async () => {
    const wid = await c.registerWorker("poller", ["pq"]);
    const started = Date.now();
    const p = c.claim(wid, "pq", { wait: "30s" });
    await new Promise((r) => setTimeout(r, 200));
    await c.submit("pq", null, { id: "p-1" });
    const tasks = await p;
    assert.deepEqual(tasks.map((t) => t.id), ["p-1"]);
    assert.ok(Date.now() - started < 20_000);
    const ctl = new AbortController();
    const cut = c.claim(wid, "pq", { wait: "30s", signal: ctl.signal });
    setTimeout(() => ctl.abort(new Error("stop polling")), 100);
    await assert.rejects(cut, /stop polling/);
  });

  test("events: task state changes as they happen", async () => {
    const ctl = new AbortController();
    const it = c.events({ queue: "evq", signal: ctl.signal });
    const first = it.next();
    // The subscription is in place once the response headers arrived; submit
    // until the first event shows up.
    let n = 0;
    const submitter = setInterval(() => void c.submit("evq", null, { id: `ev-${n++}` }).catch(() => {}), 100);
    try {
      const ev = await first;
      assert.equal(ev.done, false);
      assert.equal(ev.value.kind, "TaskSubmit");
      assert.equal(ev.value.queue, "evq");
      assert.match(ev.value.task_id, /^ev-\d+$/);
      assert.equal(ev.value.status, "ready");
    } finally {
      clearInterval(submitter);
      await it.return();
    }
  });

  test("wait follows a task's events until it finishes", async () => {
    await c.submit("waitq", null, { id: "wait-1" });
    const wid = await c.registerWorker("waiter", ["waitq"]);
    const waiting = c.wait("wait-1");
    const [t] = await c.claim(wid, "waitq");
    await new Promise((r) => setTimeout(r, 100));
    await c.complete(t.id, wid, t.lease, { done: true });
    const got = await waiting;
    assert.equal(got.status, "completed");
    assert.deepEqual(got.result, { done: true });
    assert.equal((await c.wait("wait-1")).status, "completed", "a finished task returns at once");

    await c.submit("waitq", null, { id: "wait-2", delay: "1h" });
    await assert.rejects(c.wait("wait-2", { timeout: 300 }), (e) => e.name === "TimeoutError");
    const deleted = assert.rejects(c.wait("wait-2"), NotFound);
    await new Promise((r) => setTimeout(r, 200));
    await c.delete("wait-2");
    await deleted;
    await assert.rejects(c.wait("wait-none"), NotFound);
  });

  test("errors are typed per code and carry the field", async () => {
    await assert.rejects(c.submit("q", null, { priority: -1 }), (e) => {
      assert.ok(e instanceof InvalidArgument);
      assert.ok(e instanceof NornError);
      assert.equal(e.code, "invalid_argument");
      assert.equal(e.field, "priority");
      assert.equal(e.status, 400);
      assert.match(e.message, /between 0 and 4294967295/);
      return true;
    });
    await assert.rejects(c.submit("bad queue!"), (e) => e instanceof InvalidArgument && e.field === "queue");
    await assert.rejects(c.submit("q", "x".repeat(1 << 20)), (e) => e instanceof TooLarge && e.field === "spec" && e.status === 413);
    await assert.rejects(c.submit("q", null, { delay: "soon" }), (e) => e instanceof InvalidArgument && e.field === "delay");
    await assert.rejects(c.submit("q", null, { run_at: "tomorrow" }), (e) => e instanceof InvalidArgument && e.field === "run_at");
    await assert.rejects(c.get(""), (e) => e instanceof InvalidArgument && e.field === "id");
    await assert.rejects(c.heartbeat("nope", "worker-1", 1, { progress: 2 }), (e) => e instanceof InvalidArgument && e.field === "progress");
  });

  test("no server: Unavailable with status 0", async () => {
    const dead = new Client({ url: "http://127.0.0.1:1", timeout: 5000 });
    await assert.rejects(dead.get("x"), (e) => e instanceof Unavailable && e.status === 0 && e.code === "unavailable");
    assert.throws(() => new Client({ url: "ftp://x" }), (e) => e instanceof InvalidArgument && e.field === "url");
  });

  test("NORN_SERVER and NORN_TOKEN are the defaults", () => {
    const saved = [process.env.NORN_SERVER, process.env.NORN_TOKEN];
    try {
      process.env.NORN_SERVER = "http://example.invalid:1234/";
      const cl = new Client();
      assert.equal(cl.url, "http://example.invalid:1234");
      delete process.env.NORN_SERVER;
      assert.equal(new Client().url, "http://127.0.0.1:7070");
    } finally {
      if (saved[0] === undefined) delete process.env.NORN_SERVER;
      else process.env.NORN_SERVER = saved[0];
    }
  });
});

describe("client with tokens", () => {
  let auth;
  before(async () => {
    auth = await startServer(["--auth-token", "adm:admin", "--auth-token", "cli:client:emails", "--auth-token", "wrk:worker"]);
  });
  after(async () => {
    await auth?.stop();
  });

  test("bearer tokens, roles and queue scopes", async () => {
    await assert.rejects(new Client({ url: auth.url }).stats(), (e) => e instanceof Unauthenticated && e.status === 401);
    await assert.rejects(new Client({ url: auth.url, token: "wrong" }).stats(), Unauthenticated);
    const cli = new Client({ url: auth.url, token: "cli" });
    assert.deepEqual(await cli.whoami(), { role: "client", queues: ["emails"], auth: true });
    await cli.submit("emails", { to: "x" });
    await assert.rejects(cli.submit("other"), (e) => e instanceof PermissionDenied && e.status === 403);
    await assert.rejects(cli.sweep(), PermissionDenied);
    await assert.rejects(cli.registerWorker("w", ["emails"]), PermissionDenied);
    const saved = process.env.NORN_TOKEN;
    process.env.NORN_TOKEN = "wrk";
    try {
      const wrk = new Client({ url: auth.url });
      assert.match(await wrk.registerWorker("w", ["emails"]), /^worker-/);
    } finally {
      if (saved === undefined) delete process.env.NORN_TOKEN;
      else process.env.NORN_TOKEN = saved;
    }
    assert.equal((await new Client({ url: auth.url, token: "adm" }).whoami()).role, "admin");
  });
});

/** A fetch that answers every call with this body, cut into random chunks. */
function chunkedFetch(body, { status = 200, contentType = "application/x-ndjson", seed = 1 } = {}) {
  let x = seed;
  const rand = () => ((x = (x * 1103515245 + 12345) % 2147483648) / 2147483648);
  return async () => {
    const bytes = new TextEncoder().encode(body);
    const chunks = [];
    for (let i = 0; i < bytes.length; ) {
      const n = 1 + Math.floor(rand() * 7);
      chunks.push(bytes.slice(i, i + n));
      i += n;
    }
    const stream = new ReadableStream({
      pull(ctl) {
        const next = chunks.shift();
        if (next) ctl.enqueue(next);
        else ctl.close();
      },
    });
    return new Response(stream, { status, headers: { "Content-Type": contentType } });
  };
}

describe("decoding what the server streams", () => {
  test("NDJSON lines cut anywhere, multi-byte characters included", async () => {
    const tasks = [];
    for (let i = 0; i < 50; i++) tasks.push({ id: `t${i}`, queue: "q", spec: { s: "ünïcødé ✓ 𝄞".repeat(i % 4), n: i } });
    const body = tasks.map((t) => JSON.stringify(t)).join("\n") + "\n";
    for (let seed = 1; seed <= 20; seed++) {
      const cl = new Client({ url: "http://norn.invalid", fetch: chunkedFetch(body, { seed }) });
      const got = [];
      for await (const t of cl.list()) got.push(t);
      assert.deepEqual(got, tasks, `seed ${seed}`);
    }
    const noFinalNewline = new Client({ url: "http://norn.invalid", fetch: chunkedFetch(body.trimEnd()) });
    let n = 0;
    for await (const _ of noFinalNewline.list()) n++;
    assert.equal(n, 50);
  });

  test("a stream that fails says why in its last line", async () => {
    const body = JSON.stringify({ id: "a", queue: "q" }) + "\n" + JSON.stringify({ error: { code: "unavailable", message: "store went away" } }) + "\n";
    const cl = new Client({ url: "http://norn.invalid", fetch: chunkedFetch(body) });
    const got = [];
    await assert.rejects(async () => {
      for await (const t of cl.list()) got.push(t.id);
    }, (e) => e instanceof Unavailable && /store went away/.test(e.message));
    assert.deepEqual(got, ["a"]);
    const garbage = new Client({ url: "http://norn.invalid", fetch: chunkedFetch('{"id":"a"}\n{not json\n') });
    await assert.rejects(async () => {
      for await (const _ of garbage.list());
    }, (e) => e instanceof NornError && e.code === "internal");
  });

  test("server-sent events: comments, CRLF, data split over lines", async () => {
    const ev = { kind: "TaskSubmit", task_id: "a", queue: "q", status: "ready", version: 1, time: "2030-01-01T00:00:00Z" };
    const body = ": ping\r\n\r\nevent: TaskSubmit\r\ndata: " + JSON.stringify(ev) + "\r\n\r\n: ping\n\nevent: TaskUpdate\ndata: {\"kind\":\"TaskUpdate\",\ndata: \"time\":\"2030-01-01T00:00:00Z\"}\n\n";
    for (let seed = 1; seed <= 10; seed++) {
      const cl = new Client({ url: "http://norn.invalid", fetch: chunkedFetch(body, { seed, contentType: "text/event-stream" }) });
      const got = [];
      for await (const e of cl.events()) got.push(e);
      assert.deepEqual(got, [ev, { kind: "TaskUpdate", time: "2030-01-01T00:00:00Z" }], `seed ${seed}`);
    }
  });

  test("an error page that is not the API's JSON still maps by status", async () => {
    for (const [status, cls] of [[502, Unavailable], [404, NotFound], [401, Unauthenticated], [500, NornError]]) {
      const cl = new Client({ url: "http://norn.invalid", fetch: chunkedFetch("<html>proxy says no</html>", { status, contentType: "text/html" }) });
      await assert.rejects(cl.get("a"), (e) => e instanceof cls && e.status === status && /proxy says no/.test(e.message), String(status));
    }
    const unknown = new Client({
      url: "http://norn.invalid",
      fetch: chunkedFetch(JSON.stringify({ error: { code: "brand_new", message: "m", field: "f" } }), { status: 422, contentType: "application/json" }),
    });
    await assert.rejects(unknown.get("a"), (e) => e.constructor === NornError && e.code === "brand_new" && e.field === "f" && e.status === 422);
  });

  test("a call without an answer within the client's timeout is Unavailable", async () => {
    const hang = (_url, init) =>
      new Promise((_, reject) => init.signal.addEventListener("abort", () => reject(init.signal.reason), { once: true }));
    const cl = new Client({ url: "http://norn.invalid", timeout: 100, fetch: hang });
    await assert.rejects(cl.get("a"), (e) => e instanceof Unavailable && /no answer within 100 ms/.test(e.message));
  });
});
