// Per-key rate limits against a real server: a queue's key_rate_limit and
// a key's own rate_limit through updateQueue, a snooze with scope "key"
// from the client, a lease batch and a worker's handler, and the refusals.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, InvalidArgument, Snooze, Worker } from "../dist/index.js";
import { claimOne as claimOneFrom, startServer, waitStatus } from "./server.mjs";

let srv;
let c;

before(async () => {
  srv = await startServer();
  c = new Client({ url: srv.url });
});
after(async () => {
  await srv?.stop();
});

const claimOne = (queue) => claimOneFrom(c, queue, "keyrate-test");
const status = (id, ...want) => waitStatus(c, id, ...want);
const invalid = (field) => (e) => e instanceof InvalidArgument && e.code === "invalid_argument" && e.field === field;

async function claimAll(queue) {
  const wid = await c.registerWorker("keyrate-test", [queue]);
  return c.claim(wid, queue, { n: 20 });
}

describe("per-key rate limits (client)", () => {
  test("updateQueue sets key_rate_limit and a key's own rate_limit; each key gets its own bucket", async () => {
    const q = "kr-set";
    let info = await c.updateQueue(q, { key_rate_limit: { per_second: 0.5, burst: 2 }, keys: { vip: { rate_limit: { per_second: 50 } } } });
    assert.deepEqual(info.key_rate_limit, { per_second: 0.5, burst: 2 });
    assert.deepEqual(info.keys?.map((k) => [k.key, k.rate_limit]), [["vip", { per_second: 50, burst: 50 }]]);
    // Only what the update names changes: a key's limit keeps its rate.
    info = await c.updateQueue(q, { keys: { vip: { limit: 3 } } });
    assert.deepEqual(info.keys?.map((k) => [k.key, k.limit, k.rate_limit]), [["vip", 3, { per_second: 50, burst: 50 }]]);
    for (const key of ["a", "b"]) for (let i = 0; i < 3; i++) await c.submit(q, null, { concurrency_key: key });
    await c.submit(q, null);
    const got = await claimAll(q);
    assert.deepEqual(got.map((t) => t.concurrency_key ?? "").sort(), ["", "a", "a", "b", "b"], "two of each key's three, and the task without a key");
    assert.deepEqual(await claimAll(q), []);

    await assert.rejects(c.updateQueue(q, { fair_by: "label:tenant" }), invalid("fair_by"));
    await assert.rejects(c.updateQueue(q, { key_rate_limit: { per_second: -1 } }), invalid("key_rate_limit.per_second"));
    info = await c.updateQueue(q, { key_rate_limit: { per_second: 0 }, keys: { vip: { rate_limit: { per_second: 0 } } } });
    assert.equal(info.key_rate_limit, undefined);
    // a and b are listed too now: they have running tasks.
    assert.deepEqual(info.keys?.filter((k) => k.key === "vip").map((k) => [k.key, k.limit, k.rate_limit]), [["vip", 3, undefined]]);
  });

  test("snooze with scope key holds the key back; without a key rate it is refused and changes nothing", async () => {
    const q = "kr-snooze";
    await c.updateQueue(q, { key_rate_limit: { per_second: 100, burst: 5 } });
    const a0 = await c.submit(q, null, { concurrency_key: "a" });
    const [wid, got] = await claimOne(q);
    assert.equal(got.id, a0.id);
    await c.snooze(a0.id, wid, got.lease, { delay: "1h", scope: "key" });
    await c.submit(q, null, { concurrency_key: "a" });
    const b0 = await c.submit(q, null, { concurrency_key: "b" });
    assert.deepEqual((await c.claim(wid, q, { n: 10 })).map((t) => t.id), [b0.id], "key a is held back for the hour");
    assert.equal((await c.get(a0.id)).status, "scheduled");

    const plain = await c.submit("kr-plain", null, { concurrency_key: "a" });
    const [pw, pg] = await claimOne("kr-plain");
    await assert.rejects(c.snooze(plain.id, pw, pg.lease, { delay: 60_000, scope: "key" }), invalid("scope"));
    assert.equal((await c.get(plain.id)).status, "running", "a refused snooze changes nothing");
    await assert.rejects(c.snooze(plain.id, pw, pg.lease, { until_signal: "go", scope: "key" }), invalid("scope"));
    await assert.rejects(c.snooze(plain.id, pw, pg.lease, { delay: 1000, scope: "queue" }), invalid("scope"));
  });

  test("a lease batch carries the snooze's scope", async () => {
    const q = "kr-batch";
    await c.updateQueue(q, { key_rate_limit: { per_second: 100, burst: 5 } });
    const a0 = await c.submit(q, null, { concurrency_key: "a" });
    const [wid, got] = await claimOne(q);
    const [res] = await c.leaseBatch([{ op: "snooze", id: a0.id, worker: wid, lease: got.lease, delay: "1h", scope: "key" }]);
    assert.ok(!(res instanceof Error), String(res));
    await c.submit(q, null, { concurrency_key: "a" });
    assert.deepEqual(await c.claim(wid, q, { n: 10 }), [], "key a is held back for the hour");
  });
});

function newWorker(handlers, opts = {}) {
  return new Worker(c, { handlers, logger: {}, handleSignals: false, wait: 1000, pollInterval: 50, ...opts });
}

async function withWorker(w, body) {
  const done = w.run();
  try {
    return await body();
  } finally {
    await w.stop();
    await done;
  }
}

describe("per-key rate limits (worker)", () => {
  test("throw new Snooze({ delay, scope: 'key' }) holds back the key's other tasks while other keys go on", async () => {
    const q = "kr-worker";
    await c.updateQueue(q, { key_rate_limit: { per_second: 100, burst: 5 } });
    const first = await c.submit(q, null, { concurrency_key: "a" });
    const ran = [];
    const w = newWorker({
      [q]: (task) => {
        ran.push(task.id);
        if (task.id === first.id) throw new Snooze({ delay: "1h", scope: "key" });
        return "ok";
      },
    });
    await withWorker(w, async () => {
      assert.equal((await status(first.id, "scheduled")).attempts, 0);
      // One submit: the claim that takes b's task sees a's as well.
      const [a1, b0] = await c.submitBatch([{ queue: q, concurrency_key: "a" }, { queue: q, concurrency_key: "b" }]);
      await status(b0.id, "completed");
      assert.equal((await c.get(a1.id)).status, "ready");
      assert.ok(!ran.includes(a1.id), `ran ${ran}: a1 ran while its key was held back`);
    });
  });

  test("without a key rate the worker snoozes the task alone", async () => {
    const q = "kr-worker-plain";
    const t = await c.submit(q, null, { concurrency_key: "a" });
    const w = newWorker({ [q]: () => { throw new Snooze({ delay: "1h", scope: "key" }); } });
    const s = await withWorker(w, () => status(t.id, "scheduled"));
    assert.equal(s.attempts, 0);
    assert.equal(s.errors, undefined);
    assert.ok(Date.parse(s.run_at) - Date.parse(s.updated) > 3500_000);
  });

  test("a bad scope is refused in the handler", () => {
    assert.throws(() => new Snooze({ delay: 1000, scope: "queue" }), invalid("scope"));
    assert.throws(() => new Snooze({ until_signal: "go", scope: "key" }), invalid("scope"));
  });
});
