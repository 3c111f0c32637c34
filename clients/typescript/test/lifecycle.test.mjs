// Schedules, snooze (client call, lease batch op and the worker's Snooze),
// unique keys and the throughput history, against a real server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, Conflict, InvalidArgument, LeaseLost, NotFound, Snooze, Worker, parseDuration } from "../dist/index.js";
import { eventually, startServer } from "./server.mjs";

let srv;
let c;

before(async () => {
  srv = await startServer();
  c = new Client({ url: srv.url });
});
after(async () => {
  await srv?.stop();
});

const hours = (t) => (Date.parse(t.run_at) - Date.parse(t.updated)) / 3_600_000;

describe("lifecycle", () => {
  test("schedules: set, get, list, pause, trigger, delete", async () => {
    const s = await c.setSchedule("nightly", {
      queue: "sq", cron: "0 3 * * *", timezone: "Europe/Paris", spec: { report: true }, labels: { k: "v" },
      timeout: 30_000, retry: { max_retries: 2, base: "1s" }, overlap: "skip", catch_up: "none",
    });
    assert.deepEqual([s.name, s.queue, s.cron, s.timezone, s.overlap, s.catch_up], ["nightly", "sq", "0 3 * * *", "Europe/Paris", "skip", "none"]);
    assert.equal(parseDuration(s.timeout), 30_000);
    assert.ok(Date.parse(s.next_fire) > Date.now(), "next_fire is ahead");
    assert.deepEqual((await c.schedule("nightly")).spec, { report: true });
    assert.ok((await c.schedules()).some((x) => x.name === "nightly"));
    const paused = await c.updateSchedule("nightly", { paused: true, priority: 3 });
    assert.equal(paused.paused, true);
    assert.equal(paused.priority, 3);
    const t = await c.triggerSchedule("nightly");
    assert.deepEqual([t.queue, t.labels["norn.schedule"], t.priority], ["sq", "nightly", 3]);
    assert.deepEqual(t.spec, { report: true });
    await assert.rejects(c.setSchedule("bad", { queue: "sq", cron: "not cron" }), (e) => e instanceof InvalidArgument && e.field === "cron");
    await assert.rejects(c.setSchedule("bad", { queue: "sq", cron: "@hourly", timeout: -1 }), (e) => e instanceof InvalidArgument && e.field === "timeout");
    await c.deleteSchedule("nightly");
    await assert.rejects(c.schedule("nightly"), NotFound);
  });

  test("a schedule fires on its own", async () => {
    await c.setSchedule("every-second", { queue: "tick", cron: "@every 1s", spec: "tick", overlap: "skip", catch_up: "none" });
    try {
      await eventually(async () => (await c.count({ queue: "tick", labels: { "norn.schedule": "every-second" } })) >= 1, 15_000, "the first tick");
    } finally {
      await c.deleteSchedule("every-second");
    }
  });

  test("snooze: the call and the lease batch op give the attempt back", async () => {
    await c.submit("snq", null, { id: "sn-1" });
    await c.submit("snq", null, { id: "sn-2" });
    const wid = await c.registerWorker("w", ["snq"]);
    const got = await c.claim(wid, "snq", { n: 2 });
    const one = got.find((t) => t.id === "sn-1");
    const two = got.find((t) => t.id === "sn-2");
    await c.snooze("sn-1", wid, one.lease, { delay: "1h" });
    let t = await c.get("sn-1");
    assert.deepEqual([t.status, t.attempts], ["scheduled", 0]);
    assert.ok(hours(t) > 0.99, `run_at ${t.run_at}`);
    assert.ok(t.history.some((h) => h.type === "TaskSnooze"));
    await assert.rejects(c.snooze("sn-1", wid, one.lease, { delay: 1000 }), LeaseLost);
    await assert.rejects(c.snooze("sn-1", wid, one.lease, {}), (e) => e instanceof InvalidArgument && e.field === "delay");
    const at = new Date(Date.now() + 2 * 3_600_000);
    const res = await c.leaseBatch([{ op: "snooze", id: "sn-2", worker: wid, lease: two.lease, run_at: at }]);
    assert.deepEqual(res, [{}]);
    t = await c.get("sn-2");
    assert.deepEqual([t.status, t.attempts, Date.parse(t.run_at)], ["scheduled", 0, at.getTime()]);
  });

  test("worker: throwing Snooze puts the task back without spending the attempt", async () => {
    const seen = [];
    const w = new Worker(c, {
      handlers: {
        wsn: async (task) => {
          seen.push(task.attempts);
          throw new Snooze({ delay: 3_600_000 });
        },
      },
      logger: {}, handleSignals: false, wait: 1000, pollInterval: 50,
    });
    const done = w.run();
    await c.submit("wsn", null, { id: "wsn-1" });
    const t = await eventually(async () => {
      const x = await c.get("wsn-1");
      return x.status === "scheduled" ? x : undefined;
    }, 15_000, "the snoozed task");
    await w.stop();
    await done;
    assert.deepEqual(seen, [1]);
    assert.equal(t.attempts, 0, "a snooze gives the attempt back");
    assert.ok(hours(t) > 0.99);
    assert.ok(t.history.some((h) => h.type === "TaskSnooze"));
    assert.throws(() => new Snooze({}), InvalidArgument);
    assert.throws(() => new Snooze({ delay: -1 }), (e) => e instanceof InvalidArgument && e.field === "delay");
    assert.throws(() => new Snooze({ run_at: "tomorrow" }), (e) => e instanceof InvalidArgument && e.field === "run_at");
  });

  test("unique keys: a second submit returns the first task", async () => {
    const first = await c.submit("uk", { n: 1 }, { unique_key: "invoice-7", unique_for: "1h" });
    const again = await c.submit("uk", { n: 2 }, { unique_key: "invoice-7" });
    assert.deepEqual([again.id, again.duplicate, again.unique_key], [first.id, true, "invoice-7"]);
    assert.equal(first.duplicate, undefined);
    assert.notEqual((await c.submit("uk-other", null, { unique_key: "invoice-7" })).id, first.id, "keys are per queue");
    await assert.rejects(c.submit("uk", null, { unique_key: "x".repeat(300) }), (e) => e instanceof InvalidArgument && e.field === "unique_key");
    await assert.rejects(c.submit("uk", null, { unique_key: "k", unique_for: "soon" }), (e) => e instanceof InvalidArgument && e.field === "unique_for");
  });

  test("filters: depends_on and unique_key", async () => {
    await c.submitBatch([
      { id: "f-p", queue: "fq" },
      { id: "f-k1", queue: "fq", depends_on: ["f-p"] },
      { id: "f-k2", queue: "fq", depends_on: ["f-p"], unique_key: "uk-f" },
      { id: "f-x", queue: "fq" },
    ]);
    const ids = async (f) => {
      const out = [];
      for await (const t of c.list({ ...f, summary: true })) out.push(t.id);
      return out.sort();
    };
    assert.deepEqual(await ids({ depends_on: "f-p" }), ["f-k1", "f-k2"]);
    assert.equal(await c.count({ depends_on: "f-p", queue: "fq" }), 2);
    assert.deepEqual(await ids({ unique_key: "uk-f" }), ["f-k2"]);
  });

  test("a task not started by its expires_at ends aborted, expired", async () => {
    const t = await c.submit("exq", null, { expire_in: 50 });
    assert.ok(t.expires_at, "expires_at is set");
    for (let i = 0; i < 200; i++) {
      if ((await c.get(t.id)).status === "aborted") break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const g = await c.get(t.id);
    assert.deepEqual([g.status, g.errors.at(-1).code], ["aborted", "expired"]);
    await assert.rejects(c.submit("exq", null, { expires_at: "2001-01-01T00:00:00Z" }), (e) => e instanceof InvalidArgument && e.field === "tasks[0].expires_at");
  });

  test("claim weights share claims between queues by weight", async () => {
    await c.submitBatch([...Array(30)].flatMap(() => [{ queue: "wa" }, { queue: "wb" }]));
    const wid = await c.registerWorker("w", ["wa", "wb"]);
    let b = 0;
    for (let i = 0; i < 20; i++) if ((await c.claim(wid, ["wa", "wb"], { weights: { wb: 1000 } }))[0].queue === "wb") b++;
    assert.ok(b >= 18, `wb got ${b} of 20 claims at weight 1000 against 1`);
    await assert.rejects(c.claim(wid, ["wa"], { weights: { wb: 2 } }), (e) => e instanceof InvalidArgument && e.field === 'weights["wb"]');
  });

  test("retry: an aborted or cancelled task runs again, by id or by filter", async () => {
    await c.submit("rq", null, { id: "r-1" });
    const wid = await c.registerWorker("w", ["rq"]);
    const [got] = await c.claim(wid, "rq");
    await c.abort("r-1", wid, got.lease, { code: "broken" });
    const back = await c.retry("r-1");
    assert.deepEqual([back.status, back.attempts], ["ready", 0]);
    assert.ok((await c.get("r-1")).history.some((h) => h.type === "TaskRedrive"));
    const [again] = await c.claim(wid, "rq");
    assert.ok(again.lease > got.lease, "fencing stays monotonic");
    await assert.rejects(c.retry("r-1"), Conflict);
    await c.submit("rq2", null, { id: "r-2" });
    await c.submit("rq2", null, { id: "r-3" });
    await c.cancel("r-2");
    await c.cancel("r-3");
    const later = new Date(Date.now() + 3_600_000);
    assert.equal((await c.retry("r-2", { run_at: later })).status, "scheduled");
    assert.equal(await c.retryMatching({ queue: "rq2", status: "cancelled" }), 1);
    assert.equal((await c.get("r-3")).status, "ready");
    await assert.rejects(c.retryMatching({}), (e) => e instanceof InvalidArgument && e.field === "filter");
    assert.equal(await c.cancelMatching({ queue: "rq2", status: ["ready", "scheduled"] }), 2);
    assert.deepEqual([(await c.get("r-2")).status, (await c.get("r-3")).status], ["cancelled", "cancelled"]);
    await assert.rejects(c.cancelMatching({}), (e) => e instanceof InvalidArgument && e.field === "filter");
  });

  test("max_runtime: on a task and as a queue default; a handler running past it is stopped", async () => {
    const t = await c.submit("mrq", null, { id: "mr-1", max_runtime: "30s", delay: "1h" });
    assert.equal(parseDuration(t.max_runtime), 30_000);
    const q = await c.updateQueue("mrq2", { max_runtime: 1000 });
    assert.equal(parseDuration(q.defaults.max_runtime), 1000);
    await assert.rejects(c.submit("mrq", null, { max_runtime: "forever" }), (e) => e instanceof InvalidArgument && e.field === "max_runtime");
    let reason;
    const w = new Worker(c, {
      handlers: {
        mrq2: (task) => new Promise((resolve) => task.signal.addEventListener("abort", () => { reason = task.signal.reason; resolve("late"); }, { once: true })),
      },
      logger: {}, handleSignals: false, wait: 1000, pollInterval: 50, lease: 600, heartbeatInterval: 200,
    });
    const done = w.run();
    await c.submit("mrq2", null, { id: "mr-2", retry: { max_retries: 0 } });
    const ended = await eventually(async () => {
      const x = await c.get("mr-2");
      return x.errors?.some((e) => e.code === "max_runtime") ? x : undefined;
    }, 20_000, "the attempt stopped at its runtime limit");
    await w.stop();
    await done;
    assert.ok(reason instanceof LeaseLost, `the handler was told to stop: ${reason}`);
    assert.notEqual(ended.status, "completed");
  });

  test("throughput: the server's per-minute history", async () => {
    await c.submitBatch([{ queue: "tp-a" }, { queue: "tp-a" }, { queue: "tp-b" }]);
    const submitted = (h) => h.points.reduce((n, p) => n + p.submitted, 0);
    await eventually(async () => submitted(await c.throughput({ queue: "tp-a" })) === 2, 10_000, "two submits of tp-a counted");
    const h = await c.throughput({ queue: ["tp-a", "tp-b"], since: "1h" });
    assert.equal(submitted(h), 3);
    assert.deepEqual(h.queues, ["tp-a", "tp-b"]);
    assert.ok(Date.parse(h.since) >= Date.now() - 3_660_000);
    assert.equal(submitted(await c.throughput({ queue: "tp-b", since: new Date(Date.now() - 600_000) })), 1);
    assert.equal(submitted(await c.throughput({ queue: "tp-b", since: 600_000 })), 1);
    await assert.rejects(c.throughput({ since: "yesterday" }), (e) => e instanceof InvalidArgument && e.field === "since");
  });
});
