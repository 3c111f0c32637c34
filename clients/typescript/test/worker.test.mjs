import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { Abort, Cancelled, Client, Fail, InvalidArgument, LeaseLost, Shutdown, Worker } from "../dist/index.js";
import { eventually, here, startServer } from "./server.mjs";

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

/** Runs a worker until stop; returns it and the promise of run(). */
function startWorker(handlers, opts = {}) {
  const w = new Worker(c, { handlers, logger: quiet, handleSignals: false, wait: 1000, pollInterval: 50, ...opts });
  const done = w.run();
  return { w, done };
}

async function finished(id, ms = 15_000) {
  return eventually(async () => {
    const t = await c.get(id);
    return ["completed", "aborted", "cancelled"].includes(t.status) ? t : undefined;
  }, ms, `task ${id} to finish`);
}

describe("worker", () => {
  test("outcomes: return, Abort, Fail, any other error, a non-JSON result", async () => {
    const seen = new Map();
    const { w, done } = startWorker({
      out: async (task) => {
        seen.set(task.id, (seen.get(task.id) ?? 0) + 1);
        switch (task.spec.kind) {
          case "value":
            return { echo: task.spec.n, lease: task.lease, attempts: task.attempts };
          case "nothing":
            return undefined;
          case "abort":
            throw new Abort("spec is bad", { code: "bad_spec", details: { why: "no to" } });
          case "fail":
            if (task.attempts === 1) throw new Fail("rate limited", { code: "rate_limited" });
            return "second time lucky";
          case "throw":
            throw new TypeError("handler bug");
          case "bigint":
            return 10n;
        }
      },
    });
    try {
      await c.submitBatch([
        { id: "o-value", queue: "out", spec: { kind: "value", n: 7 }, labels: { a: "b" } },
        { id: "o-nothing", queue: "out", spec: { kind: "nothing" } },
        { id: "o-abort", queue: "out", spec: { kind: "abort" }, retry: { max_retries: 3, base: 1 } },
        { id: "o-fail", queue: "out", spec: { kind: "fail" }, retry: { max_retries: 3, base: 1 } },
        { id: "o-throw", queue: "out", spec: { kind: "throw" }, retry: { max_retries: 0 } },
        { id: "o-bigint", queue: "out", spec: { kind: "bigint" }, retry: { max_retries: 3, base: 1 } },
      ]);
      const v = await finished("o-value");
      assert.equal(v.status, "completed");
      assert.deepEqual(v.result, { echo: 7, lease: 1, attempts: 1 });
      assert.equal(v.progress, 1);
      const n = await finished("o-nothing");
      assert.equal(n.status, "completed");
      assert.equal(n.result, undefined);
      const a = await finished("o-abort");
      assert.equal(a.status, "aborted");
      assert.deepEqual(a.errors.map((e) => [e.code, e.description, e.args]), [["bad_spec", "spec is bad", { why: "no to" }]]);
      assert.equal(seen.get("o-abort"), 1, "an Abort is never retried");
      const f = await finished("o-fail");
      assert.equal(f.status, "completed");
      assert.equal(f.result, "second time lucky");
      assert.equal(f.attempts, 2);
      assert.equal(f.errors[0].code, "rate_limited");
      const t = await finished("o-throw");
      assert.equal(t.status, "aborted");
      assert.equal(t.errors[0].code, "handler_error");
      assert.match(t.errors[0].description, /TypeError: handler bug\n\s+at /, "an unexpected error records its stack");
      const b = await finished("o-bigint");
      assert.equal(b.status, "aborted");
      assert.equal(b.errors[0].code, "invalid_result");
      assert.equal(seen.get("o-bigint"), 1);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("Fail's retry_in replaces the policy's backoff; jitter travels with the policy", async () => {
    const { w, done } = startWorker({
      rin: async (task) => {
        if (task.attempts === 1) throw new Fail("busy", { code: "rate_limited", retry_in: "1ms" });
        return "done";
      },
    });
    try {
      await c.submitBatch([{ id: "rin-1", queue: "rin", retry: { max_retries: 2, base: "1h", jitter: "full" } }]);
      const t = await finished("rin-1");
      assert.equal(t.status, "completed");
      assert.equal(t.attempts, 2);
      assert.deepEqual(t.errors, [{ code: "rate_limited", description: "busy" }]);
      assert.equal(t.retry.jitter, "full");
      assert.throws(() => new Fail("x", { retry_in: "soon" }), (e) => e.field === "retry_in");
    } finally {
      await w.stop();
      await done;
    }
  });

  test("heartbeats keep a lease past three lease lengths; progress rides on them", async () => {
    let observed;
    const { w, done } = startWorker({
      hb: async (task) => {
        task.setProgress(0.4);
        await task.sleep(2000);
        observed = (await c.get(task.id)).progress;
        await task.progress(0.9);
        await task.sleep(3000);
        return "done";
      },
    });
    try {
      await c.submit("hb", null, { id: "hb-1", timeout: 1500 });
      const t = await finished("hb-1", 20_000);
      assert.equal(t.status, "completed", JSON.stringify(t.history));
      assert.equal(t.attempts, 1);
      assert.equal(t.lease, 1, "never lost its lease");
      assert.ok(!t.history.some((h) => h.type === "TaskTimeout"), JSON.stringify(t.history));
      assert.equal(observed, 0.4, "setProgress reached the server with a heartbeat");
    } finally {
      await w.stop();
      await done;
    }
  });

  test("the lease option sets the lease length of claims and heartbeats", async () => {
    let leftMs;
    const { w, done } = startWorker({
      lz: async (task) => {
        await task.sleep(2500);
        leftMs = Date.parse((await c.get(task.id)).deadline) - Date.now();
        await task.sleep(2500);
      },
    }, { lease: 1500 });
    try {
      await c.submit("lz", null, { id: "lz-1", timeout: "60s" });
      const t = await finished("lz-1", 20_000);
      assert.equal(t.status, "completed", JSON.stringify(t.history));
      assert.equal(t.lease, 1, "never lost its lease");
      assert.ok(leftMs > 0 && leftMs <= 1500, `deadline ${leftMs} ms ahead: the worker's lease, not the task's 60 s`);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("cancellation aborts the handler's signal within a heartbeat interval; its outcome is not reported", async () => {
    let reason;
    let started;
    let aborted;
    let checks;
    const { w, done } = startWorker({
      cx: async (task) => {
        started = Date.now();
        await new Promise((resolve) => task.signal.addEventListener("abort", resolve, { once: true }));
        aborted = Date.now();
        try {
          assert.throws(() => task.check(), Cancelled);
          await assert.rejects(task.sleep(10), Cancelled);
          await assert.rejects(task.log({ late: true }), Cancelled);
          await assert.rejects(task.progress(0.5), Cancelled);
          assert.ok(task.cancelled);
        } catch (e) {
          checks = e;
        }
        reason = task.reason;
        return "finished anyway";
      },
    }, { heartbeatInterval: 300 });
    try {
      await c.submit("cx", null, { id: "cx-1", timeout: "30s" });
      await eventually(() => started, 10_000, "the handler to start");
      const cancelledAt = Date.now();
      await c.cancel("cx-1");
      await eventually(() => reason, 10_000, "the handler to see the cancel");
      assert.ifError(checks);
      assert.ok(reason instanceof Cancelled);
      assert.ok(aborted - cancelledAt < 3000, `took ${aborted - cancelledAt} ms`);
      await eventually(() => w.running === 0, 5000, "the worker to let go of the task");
      const t = await c.get("cx-1");
      assert.equal(t.status, "cancelled");
      assert.equal(t.result, undefined);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("a deleted task is a lost lease", async () => {
    let reason;
    const { w, done } = startWorker({
      del: async (task) => {
        await new Promise((resolve) => task.signal.addEventListener("abort", resolve, { once: true }));
        reason = task.reason;
      },
    }, { heartbeatInterval: 200 });
    try {
      await c.submit("del", null, { id: "del-1", timeout: "30s" });
      await eventually(async () => (await c.get("del-1")).status === "running", 10_000, "the claim");
      await c.delete("del-1");
      await eventually(() => reason, 10_000, "the handler to learn");
      assert.ok(reason instanceof LeaseLost);
      assert.match(reason.message, /deleted/);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("no heartbeat succeeding for a whole lease (server gone) is a lost lease", async () => {
    const gone = await startServer();
    const gc = new Client({ url: gone.url, timeout: 2000 });
    let started = false;
    let reason;
    const w = new Worker(gc, {
      handlers: {
        lost: async (task) => {
          started = true;
          await new Promise((resolve) => task.signal.addEventListener("abort", resolve, { once: true }));
          reason = task.reason;
        },
      },
      logger: quiet,
      handleSignals: false,
      wait: 0,
      pollInterval: 50,
    });
    const done = w.run();
    try {
      await gc.submit("lost", null, { id: "lost-1", timeout: 1500 });
      await eventually(() => started, 10_000, "the claim");
      const t0 = Date.now();
      await gone.stop();
      await eventually(() => reason, 10_000, "the handler to learn");
      assert.ok(reason instanceof LeaseLost, String(reason));
      assert.match(reason.message, /no heartbeat succeeded for a whole lease/);
      assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms for a 1.5 s lease`);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("never more tasks at once than concurrency", async () => {
    let now = 0;
    let max = 0;
    let maxHeld = 0;
    let w;
    const started = startWorker({
      cc: async (task) => {
        now++;
        max = Math.max(max, now);
        maxHeld = Math.max(maxHeld, w.running);
        await task.sleep(100);
        now--;
      },
    }, { concurrency: 3, claimBatch: 10 });
    w = started.w;
    try {
      const batch = [];
      for (let i = 0; i < 12; i++) batch.push({ id: `cc-${i}`, queue: "cc" });
      await c.submitBatch(batch);
      await eventually(async () => (await c.count({ queue: "cc", status: "completed" })) === 12, 20_000, "all done");
      assert.equal(max, 3);
      assert.ok(maxHeld <= 3);
    } finally {
      await w.stop();
      await started.done;
    }
  });

  test("checkpoints: log, then previousLog on the next claim resumes", async () => {
    const { w, done } = startWorker({
      ck: async (task) => {
        const prev = await task.previousLog();
        if (task.attempts === 1) {
          assert.deepEqual(prev, []);
          await task.log({ step: 1 });
          await task.log({ step: 2 });
          throw new Fail("crash after step 2");
        }
        const last = prev[prev.length - 1].data.step;
        const e = await task.log({ step: last + 1 });
        return { resumedAfter: last, seq: e.seq, prevLeases: prev.map((p) => p.lease) };
      },
    });
    try {
      await c.submit("ck", null, { id: "ck-1", retry: { max_retries: 2, base: 1 } });
      const t = await finished("ck-1");
      assert.equal(t.status, "completed");
      assert.deepEqual(t.result, { resumedAfter: 2, seq: 3, prevLeases: [1, 1] });
    } finally {
      await w.stop();
      await done;
    }
  });

  test("shutdown: finishing handlers complete, the rest are told to stop and yielded", async () => {
    let quickDone = false;
    let slowReason;
    const { w, done } = startWorker({
      sd: async (task) => {
        if (task.spec === "quick") {
          await new Promise((r) => setTimeout(r, 300));
          quickDone = true;
          return "quick";
        }
        await new Promise((resolve) => task.signal.addEventListener("abort", resolve, { once: true }));
        slowReason = task.reason;
        return "ignored";
      },
    }, { shutdownGrace: 1000, concurrency: 2 });
    await c.submitBatch([
      { id: "sd-quick", queue: "sd", spec: "quick", timeout: "60s" },
      { id: "sd-slow", queue: "sd", spec: "slow", timeout: "60s" },
    ]);
    await eventually(() => w.running === 2, 10_000, "both claimed");
    await w.stop();
    await done;
    assert.ok(quickDone);
    assert.ok(slowReason instanceof Shutdown);
    assert.equal((await c.get("sd-quick")).status, "completed");
    const slow = await c.get("sd-slow");
    assert.equal(slow.status, "ready", "yielded: ready again at once, not after its 60 s lease");
    assert.ok(slow.history.some((h) => h.type === "TaskYield"));
    assert.equal(slow.result, undefined);
    const wid = await c.registerWorker("after", ["sd"]);
    const [again] = await c.claim(wid, "sd");
    assert.equal(again.id, "sd-slow");
    assert.equal(again.attempts, 1, "the yielded attempt does not count");
    await c.complete(again.id, wid, again.lease);
  });

  test("SIGTERM to a worker process yields its tasks to a waiting worker at once", async () => {
    await c.submitBatch([1, 2, 3].map((i) => ({ id: `sig-${i}`, queue: "sig", timeout: "60s" })));
    const proc = spawn(process.execPath, [path.join(here, "worker_proc.mjs"), srv.url], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    proc.stdout.on("data", (b) => (out += b));
    const exited = new Promise((r) => proc.once("exit", (code, sig) => r({ code, sig })));
    try {
      await eventually(() => out.includes("holding 3"), 15_000, "the worker process to hold three tasks");
      const wid = await c.registerWorker("taker", ["sig"]);
      const waiting = c.claim(wid, "sig", { n: 3, wait: "30s" });
      const t0 = Date.now();
      proc.kill("SIGTERM");
      const { code } = await exited;
      assert.equal(code, 0, out);
      assert.match(out, /yielded 3 unfinished task/);
      assert.equal(out.match(/stopped sig-\d Shutdown/g)?.length, 3, out);
      assert.match(out, /run returned/);
      let got = await waiting;
      while (got.length < 3) got = got.concat(await c.claim(wid, "sig", { n: 3 - got.length, wait: "5s" }));
      assert.deepEqual(got.map((t) => t.id).sort(), ["sig-1", "sig-2", "sig-3"]);
      assert.ok(Date.now() - t0 < 15_000, "taken long before the 60 s lease ran out");
      for (const t of got) {
        assert.equal(t.attempts, 1);
        await c.complete(t.id, wid, t.lease);
      }
    } finally {
      if (proc.exitCode === null) proc.kill("SIGKILL");
    }
  });

  test("middleware wraps every handler call, the first one outermost, and may change the outcome", async () => {
    const order = [];
    const outer = async (task, next) => {
      order.push(`outer>${task.id}`);
      try {
        return await next(task);
      } finally {
        order.push(`outer<${task.id}`);
      }
    };
    const inner = async (task, next) => {
      order.push(`inner>${task.id}`);
      try {
        const v = await next(task);
        return { wrapped: v };
      } catch (e) {
        throw new Abort(`inner saw: ${e.message}`, { code: "mw_abort" });
      }
    };
    const { w, done } = startWorker({
      mw: async (task) => {
        order.push(`handler ${task.id}`);
        if (task.spec === "bad") throw new Error("nope");
        return task.spec;
      },
    }, { middleware: [outer, inner], concurrency: 1 });
    try {
      await c.submit("mw", "good", { id: "mw-1" });
      const ok = await finished("mw-1");
      assert.deepEqual(ok.result, { wrapped: "good" });
      assert.deepEqual(order, ["outer>mw-1", "inner>mw-1", "handler mw-1", "outer<mw-1"]);
      await c.submit("mw", "bad", { id: "mw-2", retry: { max_retries: 3, base: 1 } });
      const bad = await finished("mw-2");
      assert.equal(bad.status, "aborted");
      assert.deepEqual(bad.errors.map((e) => [e.code, e.description]), [["mw_abort", "inner saw: nope"]]);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("capacity: nothing is claimed while it returns false", async () => {
    let open = false;
    let asked = 0;
    const { w, done } = startWorker({ cap: async () => "ran" }, {
      capacity: async () => {
        asked++;
        return open;
      },
      pollInterval: 50,
    });
    try {
      await c.submit("cap", null, { id: "cap-1" });
      await eventually(() => asked >= 5, 10_000, "capacity to be asked a few times");
      assert.equal((await c.get("cap-1")).status, "ready", "nothing claimed while capacity is false");
      open = true;
      assert.equal((await finished("cap-1")).result, "ran");
    } finally {
      await w.stop();
      await done;
    }
  });

  test("a worker refused for good rejects run(); bad options name their field", async () => {
    const bad = new Worker(c, { handlers: { "no spaces allowed": () => {} }, logger: quiet, handleSignals: false });
    await assert.rejects(bad.run(), (e) => e instanceof InvalidArgument);
    const h = { q: () => {} };
    for (const [opts, field] of [
      [{ handlers: {} }, "handlers"],
      [{ handlers: { q: 5 } }, "handlers.q"],
      [{ handlers: h, queues: ["other"] }, "queues[0]"],
      [{ handlers: h, concurrency: 0 }, "concurrency"],
      [{ handlers: h, lease: 1000, heartbeatInterval: 1000 }, "heartbeatInterval"],
      [{ handlers: h, claimBatch: 1001 }, "claimBatch"],
      [{ handlers: h, wait: 301_000 }, "wait"],
      [{ handlers: h, shutdownGrace: -1 }, "shutdownGrace"],
      [{ handlers: h, middleware: [null] }, "middleware[0]"],
      [{ handlers: h, capacity: true }, "capacity"],
    ]) {
      assert.throws(() => new Worker(c, opts), (e) => e instanceof InvalidArgument && e.field === field, field);
    }
    assert.throws(() => new Worker({}, { handlers: h }), (e) => e instanceof InvalidArgument && e.field === "client");
  });

  test("stop before run returns at once", async () => {
    const w = new Worker(c, { handlers: { q: () => {} }, logger: quiet, handleSignals: false });
    await w.stop();
    await w.run();
    assert.equal(w.id, undefined);
  });
});
