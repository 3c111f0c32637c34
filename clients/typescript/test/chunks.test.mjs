// Batch claims (claim min and linger) and the worker's chunk handler,
// against a real norn server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Abort, Client, Fail, InvalidArgument, Snooze, Worker } from "../dist/index.js";
import { eventually, startServer } from "./server.mjs";

let srv;
let c;
const quiet = {};

before(async () => {
  srv = await startServer();
  c = new Client({ url: srv.url });
});
after(async () => {
  await srv?.stop();
});

/** A client that records every claim: when it was sent, its options and how many tasks it answered. */
class RecordingClient extends Client {
  claims = [];
  async claim(worker, queues, opts = {}) {
    const sent = Date.now();
    const out = await super.claim(worker, queues, opts);
    this.claims.push({ sent, min: opts.min, linger: opts.linger, n: opts.n, groupBy: opts.groupBy, got: out.length });
    return out;
  }
}

function startChunkWorker(client, chunkHandler, opts) {
  const w = new Worker(client, { chunkHandler, logger: quiet, handleSignals: false, wait: 1000, pollInterval: 50, ...opts });
  return { w, done: w.run() };
}

async function status(id, ...want) {
  return eventually(async () => {
    const t = await c.get(id);
    return want.includes(t.status) ? t : undefined;
  }, 15_000, `task ${id} to be ${want.join("/")}`);
}

describe("batch claims", () => {
  test("claim with min waits for min; linger hands out fewer; bad input names the field", async () => {
    const wid = await c.registerWorker("chunks", ["cl-min"]);
    await c.submit("cl-min", 1);
    assert.deepEqual(await c.claim(wid, "cl-min", { n: 5, min: 2 }), []);
    await c.submit("cl-min", 2);
    const got = await c.claim(wid, "cl-min", { n: 5, min: 2 });
    assert.deepEqual(got.map((t) => t.spec).sort(), [1, 2]);

    await c.submit("cl-min", 3);
    const start = Date.now();
    const late = await c.claim(wid, "cl-min", { n: 5, min: 3, linger: 300, wait: 10_000 });
    assert.deepEqual(late.map((t) => t.spec), [3]);
    assert.ok(Date.now() - start >= 250, "answered before the linger");

    for (const [opts, field] of [
      [{ n: 2, min: 3 }, "min"],
      [{ n: 2, linger: 1000 }, "linger"],
    ]) {
      await assert.rejects(c.claim(wid, "cl-min", opts), (e) => e instanceof InvalidArgument && e.field === field, field);
    }
  });

  test("claim with groupBy answers one group; a bad groupBy names the field", async () => {
    const wid = await c.registerWorker("chunks", ["cl-group"]);
    for (const [spec, tenant] of [[1, "acme"], [2, "bolt"], [3, "acme"], [4, "bolt"], [5, "bolt"]]) {
      await c.submit("cl-group", spec, { labels: { tenant } });
    }
    // acme comes first but has two of three: bolt's three answer.
    const bolt = await c.claim(wid, "cl-group", { n: 10, min: 3, groupBy: "label:tenant" });
    assert.deepEqual(bolt.map((t) => t.spec).sort(), [2, 4, 5]);
    const acme = await c.claim(wid, "cl-group", { n: 10, groupBy: "label:tenant" });
    assert.deepEqual(acme.map((t) => t.spec).sort(), [1, 3]);
    await assert.rejects(c.claim(wid, "cl-group", { groupBy: "tenant" }), (e) => e instanceof InvalidArgument && e.field === "group_by");
  });

  test("chunkGroupBy: every chunk holds one key", async () => {
    const rc = new RecordingClient({ url: srv.url });
    const seen = [];
    const { w, done } = startChunkWorker(rc, (tasks) => void seen.push(tasks.map((t) => t.spec).sort()), {
      queues: ["ch-group"],
      chunkMin: 2,
      chunkGroupBy: "concurrency_key",
      concurrency: 4,
      wait: 200,
    });
    try {
      const tasks = [];
      for (const spec of ["x1", "y1", "x2", "y2"]) tasks.push(await c.submit("ch-group", spec, { concurrency_key: spec[0] }));
      for (const t of tasks) await status(t.id, "completed");
      assert.deepEqual(seen.sort(), [["x1", "x2"], ["y1", "y2"]]);
      for (const cl of rc.claims) assert.equal(cl.groupBy, "concurrency_key");
    } finally {
      await w.stop();
      await done;
    }
  });

  test("a chunk of min arrives in one call", async () => {
    const rc = new RecordingClient({ url: srv.url });
    const seen = [];
    const { w, done } = startChunkWorker(rc, (tasks) => void seen.push(tasks.map((t) => t.spec).sort()), {
      queues: ["ch-min"],
      chunkMin: 3,
      concurrency: 4,
      wait: 200,
    });
    try {
      const a = await c.submit("ch-min", 1);
      const b = await c.submit("ch-min", 2);
      const mark = Date.now();
      await eventually(() => rc.claims.some((cl) => cl.sent > mark && cl.got === 0), 10_000, "an empty claim with two of three ready");
      assert.deepEqual(seen, []);
      const d = await c.submit("ch-min", 3);
      for (const t of [a, b, d]) await status(t.id, "completed");
      assert.deepEqual(seen, [[1, 2, 3]]);
      for (const cl of rc.claims) assert.deepEqual([cl.min, cl.linger, cl.n], [3, undefined, 4]);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("linger hands out fewer than min", async () => {
    const seen = [];
    const { w, done } = startChunkWorker(c, (tasks) => void seen.push({ at: Date.now(), specs: tasks.map((t) => t.spec).sort() }), {
      queues: ["ch-linger"],
      chunkMin: 5,
      chunkLinger: 400,
      concurrency: 5,
    });
    try {
      const before = Date.now();
      const [a, b] = await c.submitBatch([{ queue: "ch-linger", spec: 1 }, { queue: "ch-linger", spec: 2 }]);
      await status(a.id, "completed");
      await status(b.id, "completed");
      assert.deepEqual(seen.map((s) => s.specs), [[1, 2]]);
      assert.ok(seen[0].at - before >= 400, `the chunk ran ${seen[0].at - before} ms after submit, before the linger`);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("outcomes per task: a value, Fail then retry, Abort, Snooze", async () => {
    const seen = [];
    const { w, done } = startChunkWorker(
      c,
      (tasks) => {
        seen.push(tasks.map((t) => t.spec).sort());
        return tasks.map((t) => {
          switch (t.spec) {
            case "ok":
              return { done: t.spec };
            case "flaky":
              return t.attempts === 1 ? new Fail("try again", { code: "upstream_down", retry_in: "10ms" }) : undefined;
            case "bad":
              return new Abort("bad input");
            default:
              return new Snooze({ delay: "1h" });
          }
        });
      },
      { queues: ["ch-out"], chunkMin: 4, chunkLinger: 100, concurrency: 4 },
    );
    try {
      const retry = { max_retries: 3, base: "1h" };
      const ids = {};
      for (const s of ["ok", "flaky", "bad", "later"]) ids[s] = (await c.submit("ch-out", s, { retry })).id;
      const ok = await status(ids.ok, "completed");
      const flaky = await status(ids.flaky, "completed");
      const bad = await status(ids.bad, "aborted");
      const later = await status(ids.later, "scheduled");
      assert.deepEqual(ok.result, { done: "ok" });
      assert.deepEqual([flaky.attempts, flaky.errors.map((e) => e.code)], [2, ["upstream_down"]]);
      assert.deepEqual([bad.attempts, bad.errors[0].description], [1, "bad input"]);
      assert.deepEqual([later.attempts, later.errors ?? []], [0, []]);
      assert.deepEqual(seen, [["bad", "flaky", "later", "ok"], ["flaky"]]);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("throwing gives every task that outcome; a wrong count aborts them", async () => {
    const { w, done } = startChunkWorker(
      c,
      (tasks) => {
        if (tasks[0].spec === "throw") throw new Abort("the whole chunk is bad", { code: "bad_chunk" });
        return [undefined]; // one outcome for two tasks
      },
      { queues: ["ch-throw"], chunkMin: 2, concurrency: 2 },
    );
    try {
      const retry = { max_retries: 3 };
      for (const t of await c.submitBatch([{ queue: "ch-throw", spec: "throw", retry }, { queue: "ch-throw", spec: "throw", retry }])) {
        assert.equal((await status(t.id, "aborted")).errors[0].code, "bad_chunk");
      }
      for (const t of await c.submitBatch([{ queue: "ch-throw", spec: "short", retry }, { queue: "ch-throw", spec: "short", retry }])) {
        const e = (await status(t.id, "aborted")).errors[0];
        assert.equal(e.code, "invalid_outcomes");
        assert.match(e.description, /1 outcomes for 2 tasks/);
      }
    } finally {
      await w.stop();
      await done;
    }
  });

  test("a shutdown waits for a running chunk, its leases held by heartbeats", async () => {
    let release;
    const released = new Promise((r) => (release = r));
    let started;
    const running = new Promise((r) => (started = r));
    const cancelled = [];
    const { w, done } = startChunkWorker(
      c,
      async (tasks) => {
        started();
        await released;
        cancelled.push(...tasks.map((t) => t.cancelled));
      },
      { queues: ["ch-stop"], chunkMin: 2, concurrency: 2, shutdownGrace: 60_000, lease: 600, heartbeatInterval: 200 },
    );
    const tasks = await c.submitBatch([{ queue: "ch-stop", spec: 1 }, { queue: "ch-stop", spec: 2 }]);
    await running;
    let stopped = false;
    const stopping = w.stop().then(() => (stopped = true));
    await new Promise((r) => setTimeout(r, 1500)); // longer than a lease: only heartbeats keep them
    assert.equal(stopped, false, "stop() resolved while a chunk was running");
    release();
    await stopping;
    await done;
    assert.deepEqual(cancelled, [false, false]);
    for (const t of tasks) {
      const got = await c.get(t.id);
      assert.deepEqual([got.status, got.attempts], ["completed", 1]);
    }
  });

  test("chunk options name their field", () => {
    const h = () => undefined;
    for (const [opts, field] of [
      [{ handlers: { q: h }, chunkHandler: h }, "chunkHandler"],
      [{ chunkHandler: 5 }, "chunkHandler"],
      [{ chunkHandler: h, queues: [] }, "queues"],
      [{ chunkHandler: h, concurrency: 4, chunkMin: 5 }, "chunkMin"],
      [{ chunkHandler: h, concurrency: 4, chunkMin: 3, chunkMax: 2 }, "chunkMin"],
      [{ chunkHandler: h, chunkMin: -1 }, "chunkMin"],
      [{ chunkHandler: h, concurrency: 4, chunkMax: 5 }, "chunkMax"],
      [{ chunkHandler: h, chunkLinger: 1000 }, "chunkLinger"],
      [{ chunkHandler: h, chunkMin: 2, chunkLinger: -1 }, "chunkLinger"],
      [{ chunkHandler: h, middleware: [(t, next) => next(t)] }, "middleware"],
      [{ handlers: { q: h }, chunkMin: 2 }, "chunkMin"],
      [{ chunkHandler: h, chunkGroupBy: "tenant" }, "chunkGroupBy"],
      [{ handlers: { q: h }, chunkGroupBy: "concurrency_key" }, "chunkGroupBy"],
    ]) {
      assert.throws(() => new Worker(c, { queues: ["q"], ...opts }), (e) => e instanceof InvalidArgument && e.field === field, field);
    }
  });
});
