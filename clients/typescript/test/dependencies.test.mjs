// Dependency policy and results, and awaiting children (Client.awaitChildren
// and ActiveTask.awaitChildren), against a real server; and the README's
// examples of both, type-checked and run as a user would.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { Abort, Client, InvalidArgument, LeaseLost, NotFound, Worker } from "../dist/index.js";
import { claimOne as claimOneFrom, here, historyTypes, startServer, waitStatus } from "./server.mjs";

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

const claimOne = (queue) => claimOneFrom(c, queue, "deps-test");
const status = (id, ...want) => waitStatus(c, id, ...want);

describe("dependencies", () => {
  test("on_dependency_failure run: the dependent runs after a failed dependency and reads both outcomes", async () => {
    const ok = await c.submit("d-deps", null);
    const bad = await c.submit("d-deps", null, { max_attempts: 1 });
    const runs = await c.submit("d-dependents", null, { depends_on: [ok.id, bad.id], on_dependency_failure: "run" });
    const aborts = await c.submit("d-dependents", null, { depends_on: [bad.id] });
    assert.deepEqual([runs.status, runs.on_dependency_failure], ["blocked", "run"]);
    const wid = await c.registerWorker("deps-test", ["d-deps"]);
    for (const t of await c.claim(wid, "d-deps", { n: 2 })) {
      if (t.id === ok.id) await c.complete(t.id, wid, t.lease, { n: 1 });
      else await c.abort(t.id, wid, t.lease, { code: "broken", description: "no luck" });
    }
    assert.equal((await status(aborts.id, "aborted")).errors.at(-1).code, "dependency_failed");
    const [, got] = await claimOne("d-dependents");
    assert.equal(got.id, runs.id);
    assert.deepEqual(got.dependency_results, [
      { id: ok.id, status: "completed", result: { n: 1 } },
      { id: bad.id, status: "aborted", error: { code: "broken", description: "no luck" } },
    ]);
    assert.deepEqual((await c.get(runs.id)).dependency_results, got.dependency_results);
    await assert.rejects(
      c.submit("d-dependents", null, { depends_on: [ok.id], on_dependency_failure: "ignore" }),
      (e) => e instanceof InvalidArgument && e.field === "on_dependency_failure",
    );
  });
});

describe("await (client)", () => {
  test("children submitted, the lease ended uncounted, the next claim carries their results", async () => {
    const p = await c.submit("a-parents", null);
    const [wid, got] = await claimOne("a-parents");
    const { task, children } = await c.awaitChildren(p.id, wid, got.lease, [
      { queue: "a-kids", spec: 1, id: "a-kid-1" },
      { queue: "a-kids", spec: 2, priority: 5 },
    ]);
    assert.deepEqual([task.id, task.status, task.attempts], [p.id, "blocked", 0]);
    assert.ok(historyTypes(task).includes("TaskAwait"));
    assert.deepEqual(children.map((k) => k.spec), [1, 2]);
    assert.equal(children[0].id, "a-kid-1");
    assert.equal(children[0].duplicate, undefined);
    assert.deepEqual(task.depends_on, children.map((k) => k.id));
    await assert.rejects(c.heartbeat(p.id, wid, got.lease), LeaseLost, "the await ended the lease");
    const kw = await c.registerWorker("kid", ["a-kids"]);
    for (const k of await c.claim(kw, "a-kids", { n: 2 })) await c.complete(k.id, kw, k.lease, k.spec * 10);
    await status(p.id, "ready");
    const [, again] = await claimOne("a-parents");
    assert.deepEqual([again.id, again.attempts], [p.id, 1]);
    assert.deepEqual(again.dependency_results.map((r) => [r.id, r.status, r.result]), [
      [children[0].id, "completed", 10],
      [children[1].id, "completed", 20],
    ]);
  });

  test("a failed child aborts the parent, or with continue lets it run", async () => {
    const aborted = await c.submit("f-parents", null);
    const continued = await c.submit("f-parents", null);
    const wid = await c.registerWorker("deps-test", ["f-parents"]);
    const got = new Map((await c.claim(wid, "f-parents", { n: 2 })).map((t) => [t.id, t]));
    await c.awaitChildren(aborted.id, wid, got.get(aborted.id).lease, [{ queue: "f-kids", max_attempts: 1 }]);
    await c.awaitChildren(continued.id, wid, got.get(continued.id).lease, [{ queue: "f-kids", max_attempts: 1 }], {
      on_child_failure: "continue",
    });
    const kw = await c.registerWorker("kid", ["f-kids"]);
    for (const k of await c.claim(kw, "f-kids", { n: 2 })) await c.abort(k.id, kw, k.lease, { code: "kid_broke" });
    assert.equal((await status(aborted.id, "aborted")).errors.at(-1).code, "dependency_failed");
    const [, again] = await claimOne("f-parents");
    assert.equal(again.id, continued.id);
    assert.deepEqual(again.dependency_results.map((r) => [r.status, r.error.code]), [["aborted", "kid_broke"]]);
  });

  test("a stale lease is lease_lost and changes nothing", async () => {
    const p = await c.submit("s-parents", null);
    const [wid, old] = await claimOne("s-parents");
    await c.yield(p.id, wid, old.lease);
    const [wid2, cur] = await claimOne("s-parents");
    await assert.rejects(
      c.awaitChildren(p.id, wid, old.lease, [{ queue: "s-kids", id: "s-kid" }]),
      (e) => e instanceof LeaseLost && e.code === "lease_lost" && e.status === 409,
    );
    await assert.rejects(c.get("s-kid"), NotFound);
    const now = await c.get(p.id);
    assert.deepEqual([now.status, now.lease, now.owner, now.depends_on], ["running", cur.lease, wid2, undefined]);
    assert.ok(!historyTypes(now).includes("TaskAwait"));
    await c.complete(p.id, wid2, cur.lease, "fine");
  });

  test("a bad on_child_failure, no tasks or a bad child is invalid_argument naming the field", async () => {
    const p = await c.submit("i-parents", null);
    const [wid, got] = await claimOne("i-parents");
    const cases = [
      [[{ queue: "i-kids" }], { on_child_failure: "ignore" }, "on_child_failure"],
      [[], {}, "tasks"],
      [[{ queue: "bad queue" }], {}, "tasks[0].queue"],
    ];
    for (const [tasks, opts, field] of cases) {
      await assert.rejects(
        c.awaitChildren(p.id, wid, got.lease, tasks, opts),
        (e) => e instanceof InvalidArgument && e.code === "invalid_argument" && e.field === field,
        field,
      );
    }
    const now = await c.get(p.id);
    assert.deepEqual([now.status, now.lease, now.depends_on], ["running", got.lease, undefined]);
    await c.complete(p.id, wid, got.lease);
  });
});

/** A client that records the outcomes the worker reports. */
class Spy extends Client {
  reported = [];
  async complete(id, ...rest) {
    this.reported.push([id, "complete"]);
    return super.complete(id, ...rest);
  }
  async fail(id, ...rest) {
    this.reported.push([id, "fail"]);
    return super.fail(id, ...rest);
  }
  async abort(id, ...rest) {
    this.reported.push([id, "abort"]);
    return super.abort(id, ...rest);
  }
}

describe("await (worker)", () => {
  test("a handler fans out in two stages and completes with the sum; awaited attempts report nothing", async () => {
    const spy = new Spy({ url: srv.url });
    const runs = [];
    const w = new Worker(spy, {
      handlers: {
        "w-parents": async (task) => {
          runs.push(task.dependencyResults.length);
          if (task.dependencyResults.length === 0) {
            await task.awaitChildren([{ queue: "w-kids", spec: 1 }, { queue: "w-kids", spec: 2 }]);
            return "ignored";
          }
          if (task.dependencyResults.length === 2) {
            await task.awaitChildren([{ queue: "w-kids", spec: 3 }]);
            throw new Error("ignored too: the attempt ended with the await");
          }
          if (task.attempts !== 1) throw new Abort(`attempts ${task.attempts} on the last run, want 1: awaits do not count`);
          return task.dependencyResults.reduce((s, r) => s + r.result, 0) * 10;
        },
        "w-kids": async (task) => task.spec,
      },
      logger: {},
      handleSignals: false,
      wait: 1000,
      pollInterval: 50,
      concurrency: 4,
    });
    const done = w.run();
    try {
      const t = await c.submit("w-parents", null);
      const end = await status(t.id, "completed", "aborted");
      assert.deepEqual([end.status, end.result, runs, end.depends_on.length], ["completed", 60, [0, 2, 3], 3]);
      assert.equal(historyTypes(end).filter((h) => h === "TaskAwait").length, 2);
      assert.equal(end.errors, undefined, "no attempt was failed");
      assert.deepEqual(spy.reported.filter(([id]) => id === t.id).map(([, op]) => op), ["complete"], "only the last run is reported");
    } finally {
      await w.stop();
      await done;
    }
  });

  test("a refused await changes nothing and the handler goes on", async () => {
    const seen = [];
    const w = new Worker(c, {
      handlers: {
        "r-bad": async (task) => {
          try {
            await task.awaitChildren([{ queue: "r-kids" }], { on_child_failure: "sometimes" });
          } catch (e) {
            seen.push(e instanceof InvalidArgument ? e.field : String(e));
          }
          return "went on";
        },
      },
      logger: {},
      handleSignals: false,
      wait: 1000,
      pollInterval: 50,
    });
    const done = w.run();
    try {
      const t = await c.submit("r-bad", null);
      const end = await status(t.id, "completed", "aborted");
      assert.deepEqual([end.status, end.result, seen], ["completed", "went on", ["on_child_failure"]]);
      assert.ok(!historyTypes(end).includes("TaskAwait"));
    } finally {
      await w.stop();
      await done;
    }
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

describe("the README's examples type-check and run", () => {
  test("dependencies", () => {
    assert.equal(runReadme("Dependencies and their results"), 'blocked run\n{"regions":["eu"],"missing":["down"]}\n');
  });
  test("awaiting children", async () => {
    assert.equal(runReadme("Awaiting children"), "5\n");
    const [job] = await c.listPage({ queue: "totals" }).then((p) => p.tasks);
    assert.equal(historyTypes(await c.get(job.id)).filter((h) => h === "TaskAwait").length, 1);
  });
});
