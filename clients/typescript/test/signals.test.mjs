// Signals (Client.sendSignal, listSignals, snooze until_signal) and a
// worker's handler waiting for one (Snooze with until_signal, signals,
// signalWait, newSignals), against a real server; and the README's example,
// type-checked and run as a user would.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { Abort, Client, Conflict, InvalidArgument, NotFound, Snooze, Worker } from "../dist/index.js";
import { claimOne as claimOneFrom, eventually, here, historyTypes, startServer, waitStatus } from "./server.mjs";

const pkg = path.resolve(here, "..");
let srv;
let c;

before(async () => {
  srv = await startServer();
  c = new Client({ url: srv.url });
});
after(async () => {
  await srv?.stop();
});

const claimOne = (queue) => claimOneFrom(c, queue, "signals-test");
const status = (id, ...want) => waitStatus(c, id, ...want);
const invalid = (field) => (e) => e instanceof InvalidArgument && e.code === "invalid_argument" && e.field === field;

describe("signals (client)", () => {
  test("sent in order, listed after a sequence number; 400, 404 and 409 refused", async () => {
    const t = await c.submit("sg-list", null);
    const first = await c.sendSignal(t.id, "approval", { by: "ada" });
    assert.deepEqual([first.seq, first.name, first.data], [1, "approval", { by: "ada" }]);
    assert.ok(!Number.isNaN(Date.parse(first.time)));
    const second = await c.sendSignal(t.id, "note");
    assert.deepEqual([second.seq, second.name, second.data], [2, "note", undefined]);
    assert.deepEqual((await c.listSignals(t.id)).map((s) => [s.seq, s.name]), [[1, "approval"], [2, "note"]]);
    assert.deepEqual((await c.listSignals(t.id, { after: 1 })).map((s) => s.seq), [2]);
    assert.deepEqual(await c.listSignals(t.id, { after: 2 }), []);
    assert.deepEqual((await c.get(t.id)).signals.map((s) => s.name), ["approval", "note"]);

    await assert.rejects(c.sendSignal(t.id, ""), invalid("name"));
    await assert.rejects(c.sendSignal("sg-no-such-task", "approval"), (e) => e instanceof NotFound && e.status === 404);
    await assert.rejects(c.listSignals("sg-no-such-task"), NotFound);
    await c.cancel(t.id);
    await assert.rejects(c.sendSignal(t.id, "approval"), (e) => e instanceof Conflict && e.status === 409);
    assert.equal((await c.listSignals(t.id)).length, 2, "a refused signal changes nothing");
  });

  test("snooze until_signal: scheduled until that name arrives, then ready; the claim carries signals and signal_wait", async () => {
    const t = await c.submit("sg-wait", null);
    const [wid, got] = await claimOne("sg-wait");
    assert.equal(got.signal_wait, undefined);
    const cases = [
      [{ until_signal: "go", delay: 5000 }, "until_signal"],
      [{ until_signal: "go", timeout: "soon" }, "timeout"],
      [{ delay: 5000, timeout: "1h" }, "timeout"],
      [{ until_signal: "x".repeat(129) }, "until_signal"],
    ];
    for (const [until, field] of cases) await assert.rejects(c.snooze(t.id, wid, got.lease, until), invalid(field), field);
    await c.snooze(t.id, wid, got.lease, { until_signal: "go", timeout: "1h" });
    const s = await c.get(t.id);
    assert.deepEqual([s.status, s.attempts, s.signal_wait.name, s.signal_wait.received], ["scheduled", 0, "go", false]);
    assert.ok(Date.parse(s.run_at) - Date.parse(s.updated) > 3500_000);
    await c.sendSignal(t.id, "other");
    assert.equal((await c.get(t.id)).status, "scheduled", "another name does not end the wait");
    await c.sendSignal(t.id, "go", 7);
    assert.equal((await c.get(t.id)).status, "ready");
    const [, again] = await claimOne("sg-wait");
    assert.deepEqual([again.id, again.signal_wait.name, again.signal_wait.received], [t.id, "go", true]);
    assert.deepEqual(again.signals.map((x) => [x.name, x.data]), [["other", undefined], ["go", 7]]);
  });

  test("snooze until_signal times out: ready with received false", async () => {
    const t = await c.submit("sg-timeout", null);
    const [wid, got] = await claimOne("sg-timeout");
    await c.snooze(t.id, wid, got.lease, { until_signal: "go", timeout: "1s" });
    assert.equal((await c.get(t.id)).status, "scheduled");
    const [claimed] = await eventually(async () => {
      const r = await c.claim(wid, "sg-timeout");
      return r.length ? r : undefined;
    }, 15_000, "the wait to time out");
    assert.deepEqual([claimed.id, claimed.signal_wait.name, claimed.signal_wait.received], [t.id, "go", false]);
  });

  test("heartbeatSignals answers with the signals after a sequence number", async () => {
    const t = await c.submit("sg-beat", null);
    const [wid, got] = await claimOne("sg-beat");
    const first = await c.heartbeatSignals(t.id, wid, got.lease);
    assert.deepEqual(first.signals, []);
    assert.ok(!Number.isNaN(Date.parse(first.deadline)));
    await c.sendSignal(t.id, "a", 1);
    await c.sendSignal(t.id, "b", 2);
    const all = await c.heartbeatSignals(t.id, wid, got.lease, 0, { progress: 0.5 });
    assert.deepEqual(all.signals.map((x) => [x.seq, x.data]), [[1, 1], [2, 2]]);
    assert.deepEqual((await c.heartbeatSignals(t.id, wid, got.lease, 1)).signals.map((x) => x.name), ["b"]);
    assert.equal((await c.get(t.id)).progress, 0.5);
  });

  test("a lease batch refuses until_signal", async () => {
    const t = await c.submit("sg-batch", null);
    const [wid, got] = await claimOne("sg-batch");
    let field;
    await assert.rejects(c.leaseBatch([{ op: "snooze", id: t.id, worker: wid, lease: got.lease, until_signal: "go" }]), (e) => {
      field = e.field;
      return e instanceof InvalidArgument && /until_signal$/.test(e.field);
    });
    assert.ok(field, "the refusal names its field");
    assert.equal((await c.get(t.id)).status, "running");
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

describe("signals (worker)", () => {
  test("a handler waits for approval, the signal arrives, it runs again and completes with its data", async () => {
    const runs = [];
    const w = newWorker({
      "sw-approve": async (task) => {
        runs.push(task.signalWait);
        if (task.signalWait === undefined) throw new Snooze({ until_signal: "approval", timeout: "1h" });
        if (!task.signalWait.received) throw new Abort("not approved in time");
        return { approved_by: task.signals.filter((s) => s.name === "approval").at(-1).data, attempts: task.attempts };
      },
    });
    await withWorker(w, async () => {
      const t = await c.submit("sw-approve", null);
      const waiting = await eventually(async () => {
        const x = await c.get(t.id);
        return x.status === "scheduled" && x.signal_wait ? x : undefined;
      }, 15_000, "the task to wait for its signal");
      assert.deepEqual([waiting.signal_wait.name, waiting.signal_wait.received, waiting.attempts], ["approval", false, 0]);
      await c.sendSignal(t.id, "approval", "ada");
      const end = await status(t.id, "completed", "aborted");
      assert.deepEqual([end.status, end.result], ["completed", { approved_by: "ada", attempts: 1 }]);
      assert.equal(runs.length, 2);
      assert.deepEqual([end.signal_wait.name, end.signal_wait.received], ["approval", true]);
      assert.ok(historyTypes(end).includes("TaskSnooze"));
    });
  });

  test("a signal sent before the wait makes it ready at once", async () => {
    // With an hour's timeout the task completes only because the signal counted.
    const w = newWorker({
      "sw-early": async (task) => {
        if (task.signalWait === undefined) throw new Snooze({ until_signal: "go", timeout: "1h" });
        return [task.signalWait.received, task.signals.map((s) => s.data)];
      },
    });
    const t = await c.submit("sw-early", null);
    await c.sendSignal(t.id, "go", 42);
    await withWorker(w, async () => {
      const end = await status(t.id, "completed", "aborted");
      assert.deepEqual([end.status, end.result], ["completed", [true, [42]]]);
      assert.ok(historyTypes(end).includes("TaskSnooze"));
    });
  });

  test("the wait times out: the handler runs again with received false", async () => {
    const w = newWorker({
      "sw-late": async (task) => {
        if (task.signalWait === undefined) throw new Snooze({ until_signal: "approval", timeout: "1s" });
        return { received: task.signalWait.received, signals: task.signals };
      },
    });
    await withWorker(w, async () => {
      const t = await c.submit("sw-late", null);
      const end = await status(t.id, "completed", "aborted");
      assert.deepEqual([end.status, end.result], ["completed", { received: false, signals: [] }]);
    });
  });

  test("a running handler polls newSignals for signals sent meanwhile", async () => {
    let started;
    const isStarted = new Promise((r) => (started = r));
    const w = newWorker({
      "sw-poll": async (task) => {
        started();
        let seen = 0;
        const got = [];
        for (;;) {
          for (const s of await task.newSignals(seen)) {
            seen = s.seq;
            got.push(s.data);
            if (s.name === "stop") return got;
          }
          await task.sleep(20);
        }
      },
    });
    await withWorker(w, async () => {
      const t = await c.submit("sw-poll", null);
      await isStarted;
      await c.sendSignal(t.id, "more", 1);
      await c.sendSignal(t.id, "stop", 2);
      const end = await status(t.id, "completed", "aborted");
      assert.deepEqual([end.status, end.result], ["completed", [1, 2]]);
    });
  });

  test("Snooze refuses a bad wait in the handler, naming the field", () => {
    const cases = [
      [{ until_signal: "" }, "until_signal"],
      [{ until_signal: "go", delay: 1000 }, "until_signal"],
      [{ delay: 1000, timeout: "1h" }, "timeout"],
      [{ until_signal: "go", timeout: "soon" }, "timeout"],
    ];
    for (const [until, field] of cases) assert.throws(() => new Snooze(until), invalid(field), field);
  });
});

/** Type-checks and runs the first ts block of a README section; returns its output. */
function runReadme(section) {
  const readme = readFileSync(path.join(pkg, "README.md"), "utf8");
  const code = readme.split(`\n### ${section}\n`)[1].split("```ts\n")[1].split("```")[0];
  const dir = mkdtempSync(path.join(os.tmpdir(), "norn-ts-readme-"));
  try {
    writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "readme", private: true, type: "module" }));
    mkdirSync(path.join(dir, "node_modules", "@nornq"), { recursive: true });
    symlinkSync(pkg, path.join(dir, "node_modules", "@nornq", "client"), "dir");
    writeFileSync(path.join(dir, "example.ts"), code);
    execFileSync(
      path.join(pkg, "node_modules", ".bin", "tsc"),
      ["example.ts", "--strict", "--module", "nodenext", "--target", "es2022", "--outDir", "build", "--typeRoots", path.join(pkg, "node_modules", "@types")],
      { cwd: dir, stdio: "pipe" },
    );
    return execFileSync(process.execPath, ["build/example.js"], { cwd: dir, env: { ...process.env, NORN_SERVER: srv.url }, encoding: "utf8" });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("the README's example type-checks and runs", () => {
  test("signals", async () => {
    assert.equal(runReadme("Signals"), '{"paid":40,"approved_by":"ada"}\n');
    const [job] = await c.listPage({ queue: "payouts" }).then((p) => p.tasks);
    const t = await c.get(job.id);
    assert.deepEqual([t.signal_wait.received, historyTypes(t).includes("TaskSnooze")], [true, true]);
  });
});
