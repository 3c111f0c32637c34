// Batches against a real server: members join at submit, callbacks fire once
// the sealed batch's members have all ended; and the README's example,
// type-checked and run as a user would.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { Client, Conflict, InvalidArgument, NotFound, PermissionDenied } from "../dist/index.js";
import { eventually, here, startServer } from "./server.mjs";

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

/** Claims every ready task of queue and ends it through the worker API. */
async function runAll(queue, outcome = "complete") {
  const wid = await c.registerWorker("batch-test", [queue]);
  for (;;) {
    const got = await c.claim(wid, queue, { n: 10 });
    if (got.length === 0) return;
    for (const t of got) {
      if (outcome === "complete") await c.complete(t.id, wid, t.lease, { done: t.spec });
      else await c.abort(t.id, wid, t.lease, { code: "boom", description: "failed on purpose" });
    }
  }
}

/** Sweeps, then awaits the batch being done: the monitor may fire the callbacks itself first. */
async function fired(id) {
  await c.sweep();
  return eventually(async () => {
    const b = await c.getBatch(id);
    return b.state === "done" ? b : undefined;
  }, 20_000, `batch ${id} done`);
}

describe("batches", () => {
  test("callbacks fire once, after the seal and the members' end", async () => {
    const created = await c.createBatch({
      id: "report",
      labels: { kind: "report" },
      on_success: { queue: "after", spec: { notify: "ok" }, labels: { team: "a" }, priority: 2 },
      on_complete: { queue: "after", spec: { notify: "ended" }, timeout: 60_000 },
    });
    const b0 = created.batch;
    assert.deepEqual([b0.id, b0.state, b0.total, b0.labels], ["report", "open", 0, { kind: "report" }]);
    assert.deepEqual(created.tasks, []);
    assert.equal(b0.on_complete?.timeout, "1m0s");

    const t1 = await c.submit("work", 1, { batch: "report" });
    const more = await c.submitBatch([{ queue: "work", spec: 2, batch: "report" }, { queue: "work", spec: 3, batch: "report" }]);
    assert.deepEqual([t1, ...more].map((t) => t.batch), ["report", "report", "report"]);
    assert.equal((await c.get(t1.id)).batch, "report");
    let b = await c.getBatch("report");
    assert.deepEqual([b.state, b.total, b.counts.ready], ["open", 3, 3]);

    // Every member ended, but the batch is open (more may join): nothing fires.
    await runAll("work");
    assert.equal((await c.sweep()).callbacks, 0);
    b = await c.getBatch("report");
    assert.deepEqual([b.state, b.counts.completed, b.complete_task], ["open", 3, undefined]);
    assert.equal(await c.count({ queue: "after" }), 0);

    const sealed = await c.sealBatch("report");
    assert.ok(["sealed", "done"].includes(sealed.state));
    assert.ok(sealed.sealed);
    b = await fired("report");
    assert.equal(b.final?.completed, 3);
    assert.equal(b.complete_task, "norn:batch:report:complete");
    assert.equal(b.success_task, "norn:batch:report:success");

    const complete = await c.get(b.complete_task);
    assert.deepEqual([complete.queue, complete.spec, complete.timeout], ["after", { notify: "ended" }, "1m0s"]);
    assert.deepEqual(complete.labels, {
      "norn.batch": "report",
      "norn.callback": "complete",
      "norn.total": "3",
      "norn.completed": "3",
      "norn.aborted": "0",
      "norn.cancelled": "0",
    });
    const success = await c.get(b.success_task);
    assert.deepEqual([success.spec, success.priority, success.labels.team, success.labels["norn.callback"]], [{ notify: "ok" }, 2, "a", "success"]);

    // Once: another sweep or seal submits nothing more.
    assert.equal((await c.sweep()).callbacks, 0);
    assert.equal((await c.sealBatch("report")).state, "done");
    assert.equal(await c.count({ queue: "after" }), 2);
  });

  test("on_success does not fire when a member failed", async () => {
    await c.createBatch({ id: "mixed", on_success: { queue: "mixed-after", spec: "ok" }, on_complete: { queue: "mixed-after", spec: "ended" } });
    await c.submit("mixed-work", "good", { batch: "mixed" });
    await runAll("mixed-work");
    await c.submit("mixed-work", "bad", { batch: "mixed" });
    await runAll("mixed-work", "abort");
    await c.sealBatch("mixed");
    const b = await fired("mixed");
    assert.deepEqual([b.final?.completed, b.final?.aborted, b.success_task], [1, 1, undefined]);
    const complete = await c.get(b.complete_task);
    assert.deepEqual([complete.spec, complete.labels["norn.completed"], complete.labels["norn.aborted"]], ["ended", "1", "1"]);
    await assert.rejects(c.get("norn:batch:mixed:success"), NotFound);
    assert.equal(await c.count({ queue: "mixed-after" }), 1);
  });

  test("created sealed with its members; a sealed batch refuses joins", async () => {
    const created = await c.createBatch({
      id: "sealed",
      on_complete: { queue: "sealed-after" },
      seal: true,
      tasks: [0, 1, 2].map((i) => ({ queue: "sealed-work", spec: i, delay: i === 0 ? "1h" : undefined })),
    });
    assert.deepEqual([created.batch.state, created.batch.total], ["sealed", 3]);
    assert.deepEqual(created.tasks.map((t) => [t.spec, t.batch, t.duplicate]), [0, 1, 2].map((i) => [i, "sealed", undefined]));
    assert.equal(created.tasks[0].status, "scheduled");

    // The store names the refused member as in a batch submit, also for a
    // single submit (as it does for depends_on).
    await assert.rejects(c.submit("sealed-work", null, { batch: "sealed" }), (e) => e instanceof Conflict && e.status === 409 && e.field === "tasks[0].batch");
    await assert.rejects(
      c.submitBatch([{ queue: "sealed-work" }, { queue: "sealed-work", batch: "sealed" }]),
      (e) => e instanceof Conflict && e.field === "tasks[1].batch",
    );
    assert.equal((await c.getBatch("sealed")).total, 3, "a refused join adds nothing");

    // Sealed with a member pending: it waits for it.
    await runAll("sealed-work");
    await c.sweep();
    assert.equal((await c.getBatch("sealed")).state, "sealed");
    await c.update(created.tasks[0].id, { run_at: new Date(Date.now() - 60_000) });
    await c.sweep();
    await runAll("sealed-work");
    const b = await fired("sealed");
    assert.equal((await c.get(b.complete_task)).labels["norn.total"], "3");
  });

  test("batch filters every task route", async () => {
    await c.createBatch({ id: "filter" });
    await c.createBatch({ id: "filter-other" });
    const members = await Promise.all([0, 1, 2].map((i) => c.submit("fb", i, { batch: "filter" })));
    await c.submit("fb", "other", { batch: "filter-other" });
    await c.submit("fb", "none");
    const want = members.map((t) => t.id).sort();
    const listed = [];
    for await (const t of c.list({ batch: "filter", summary: true })) listed.push(t.id);
    assert.deepEqual(listed.sort(), want);
    assert.deepEqual((await c.listPage({ queue: "fb", batch: "filter", limit: 10 })).tasks.map((t) => t.id).sort(), want);
    assert.equal(await c.count({ batch: "filter" }), 3);
    assert.equal(await c.count({ queue: "fb" }), 5);
    assert.deepEqual((await c.countGroups({ batch: "filter" })).map((g) => g.count), [3]);
    assert.equal(await c.cancelMatching({ batch: "filter" }), 3);
    assert.equal(await c.retryMatching({ batch: "filter" }), 3);
    assert.equal(await c.count({ batch: "filter", status: "ready" }), 3);
    assert.equal(await c.deleteMatching({ batch: "filter" }), 3);
    assert.equal(await c.count({ queue: "fb" }), 2);
    assert.equal((await c.getBatch("filter")).total, 0);
    await assert.rejects(c.count({ batch: "x".repeat(200) }), (e) => e instanceof InvalidArgument && e.field === "batch");
  });

  test("listBatches: state, labels and pages in id order", async () => {
    const ids = ["list-a", "list-b", "list-c"];
    for (const [i, id] of ids.entries()) await c.createBatch({ id, labels: { suite: "list", n: String(i) }, seal: i === 1 });
    const listed = async (q) => (await c.listBatches(q)).map((b) => b.id);
    assert.deepEqual(await listed({ labels: { suite: "list" } }), ids);
    assert.deepEqual(await listed({ state: "open", labels: { suite: "list" } }), ["list-a", "list-c"]);
    // Sealed with no member: done as soon as the monitor sees it.
    await c.sweep();
    await eventually(async () => (await c.getBatch("list-b")).state === "done", 20_000, "the empty sealed batch done");
    assert.deepEqual(await listed({ state: "done", labels: { suite: "list" } }), ["list-b"]);
    assert.deepEqual(await listed({ labels: { suite: "list", n: "2" } }), ["list-c"]);
    const first = await c.listBatches({ labels: { suite: "list" }, limit: 2 });
    assert.deepEqual(first.map((b) => b.id), ["list-a", "list-b"]);
    assert.deepEqual(await listed({ labels: { suite: "list" }, limit: 2, after: first.at(-1).id }), ["list-c"]);
    assert.deepEqual(await listed({ labels: { suite: "list" }, after: "list-c" }), []);
    await assert.rejects(c.listBatches({ state: "closed" }), (e) => e instanceof InvalidArgument && e.field === "state");
    await assert.rejects(c.listBatches({ limit: 5000 }), (e) => e instanceof InvalidArgument && e.field === "limit");
  });

  test("deleteBatch, with and without its members", async () => {
    await c.createBatch({ id: "keep" });
    const kept = await c.submit("db", null, { batch: "keep" });
    assert.equal(await c.deleteBatch("keep"), 0);
    await assert.rejects(c.getBatch("keep"), NotFound);
    assert.equal((await c.get(kept.id)).batch, "keep", "the members stay");
    await assert.rejects(c.createBatch({ id: "keep" }), Conflict, "its remaining members still name it");

    await c.createBatch({ id: "drop", tasks: [{ queue: "db" }, { queue: "db" }] });
    assert.equal(await c.deleteBatch("drop", { members: true }), 2);
    assert.equal(await c.count({ batch: "drop" }), 0);
    assert.equal(await c.count({ queue: "db" }), 1);
    await assert.rejects(c.deleteBatch("drop"), NotFound);
  });

  test("errors name the field", async () => {
    await assert.rejects(c.submit("eb", null, { batch: "missing" }), (e) => e instanceof NotFound && e.status === 404 && e.field === "tasks[0].batch" && e.message.includes("missing"));
    await assert.rejects(c.submitBatch([{ queue: "eb" }, { queue: "eb", batch: "missing" }]), (e) => e instanceof NotFound && e.field === "tasks[1].batch");
    assert.equal(await c.count({ queue: "eb" }), 0, "a refused batch submit writes nothing");
    for (const call of [(id) => c.getBatch(id), (id) => c.sealBatch(id), (id) => c.deleteBatch(id)]) {
      await assert.rejects(call("missing"), NotFound);
      await assert.rejects(call(""), (e) => e instanceof InvalidArgument && e.field === "id");
    }
    await c.createBatch({ id: "dup" });
    await assert.rejects(c.createBatch({ id: "dup" }), Conflict);
    await assert.rejects(c.createBatch({ on_complete: { queue: "eb", id: "mine" } }), (e) => e instanceof InvalidArgument && e.field === "on_complete.id");
    await assert.rejects(c.createBatch({ on_success: { queue: "eb", labels: { "norn.batch": "x" } } }), (e) => e instanceof InvalidArgument && e.field === "on_success.labels");
    await assert.rejects(c.createBatch({ on_success: { queue: "eb", timeout: -1 } }), (e) => e instanceof InvalidArgument && e.field === "on_success.timeout");
    await assert.rejects(c.createBatch({ id: "bad", tasks: [{ queue: "eb", batch: "elsewhere" }] }), (e) => e instanceof InvalidArgument && e.field === "tasks[0].batch");
    await assert.rejects(c.createBatch({ on_complete: "not a task" }), (e) => e instanceof InvalidArgument && e.field === "on_complete");
    const b = (await c.createBatch()).batch;
    assert.ok(b.id, "the server picks the id");
    assert.equal((await c.getBatch(b.id)).created, b.created);
  });

  test("the README's example type-checks and runs", async () => {
    const readme = readFileSync(path.join(pkg, "README.md"), "utf8");
    const code = readme.split("### Batches")[1].split("```ts\n")[1].split("```")[0];
    const dir = mkdtempSync(path.join(os.tmpdir(), "norn-ts-readme-"));
    try {
      writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "readme", private: true, type: "module" }));
      mkdirSync(path.join(dir, "node_modules", "@nornq"), { recursive: true });
      symlinkSync(pkg, path.join(dir, "node_modules", "@nornq", "client"), "dir");
      writeFileSync(path.join(dir, "batch.ts"), code);
      execFileSync(
        path.join(pkg, "node_modules", ".bin", "tsc"),
        ["batch.ts", "--strict", "--module", "nodenext", "--target", "es2022", "--outDir", "build", "--typeRoots", path.join(pkg, "node_modules", "@types")],
        { cwd: dir, stdio: "pipe" },
      );
      const out = execFileSync(process.execPath, ["build/batch.js"], { cwd: dir, env: { ...process.env, NORN_SERVER: srv.url }, encoding: "utf8" });
      assert.equal(out, "sealed 3 3\n3\n");
      const [{ id }] = await c.listBatches({ labels: { report: "q3" } });
      await runAll("regions");
      const b = await fired(id);
      assert.deepEqual((await c.get(b.success_task)).spec, { publish: "q3" });
      const complete = await c.get(b.complete_task);
      assert.deepEqual([complete.queue, complete.priority, complete.labels["norn.completed"]], ["alerts", 5, "3"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("batches with a queue-scoped token", () => {
  let auth;
  before(async () => {
    auth = await startServer(["--auth-token", "adm:admin", "--auth-token", "cli:client:jobs"]);
  });
  after(async () => {
    await auth?.stop();
  });

  test("only the batches whose callbacks submit to its queues", async () => {
    const admin = new Client({ url: auth.url, token: "adm" });
    const cli = new Client({ url: auth.url, token: "cli" });
    await admin.createBatch({ id: "theirs", on_complete: { queue: "other" } });
    await admin.createBatch({ id: "ours", on_complete: { queue: "jobs" } });
    await admin.submit("other", null, { batch: "ours" });

    assert.deepEqual((await cli.listBatches()).map((b) => b.id), ["ours"]);
    for (const call of [(id) => cli.getBatch(id), (id) => cli.sealBatch(id), (id) => cli.deleteBatch(id)]) {
      await assert.rejects(call("theirs"), NotFound);
    }
    await assert.rejects(cli.createBatch({ on_complete: { queue: "other" } }), (e) => e instanceof PermissionDenied && e.status === 403);
    assert.equal((await cli.submit("jobs", null, { batch: "ours" })).batch, "ours");
    assert.equal((await cli.getBatch("ours")).total, 2);
    // With members, a scoped token deletes only those of its queues.
    assert.equal(await cli.deleteBatch("ours", { members: true }), 1);
    assert.equal(await admin.count({ batch: "ours" }), 1);
    assert.equal((await admin.getBatch("theirs")).state, "open");
  });
});
