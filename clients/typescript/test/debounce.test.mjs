// Debounce: on_duplicate and debounce_max at submit, and the replaced flag
// of a submit's tasks, against a real server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, InvalidArgument } from "../dist/index.js";
import { claimOne, historyTypes, startServer } from "./server.mjs";

let srv;
let c;

before(async () => {
  srv = await startServer();
  c = new Client({ url: srv.url });
});
after(async () => {
  await srv?.stop();
});

describe("debounce", () => {
  test("replace takes over a holder that has not started, its run time capped by debounce_max", async () => {
    const first = await c.submit("deb", { v: 1 }, { unique_key: "k", delay: "2s", labels: { a: "1" } });
    assert.equal(first.replaced, undefined);
    const got = await c.submit("deb", { v: 2 }, {
      unique_key: "k", on_duplicate: "replace", delay: 3_600_000, debounce_max: 60_000, labels: { b: "2" }, priority: 5,
    });
    assert.deepEqual([got.id, got.duplicate, got.replaced], [first.id, true, true]);
    assert.deepEqual([got.spec, got.labels, got.priority, got.version], [{ v: 2 }, { b: "2" }, 5, 2]);
    // The hour of delay stops at debounce_max after the first submit.
    assert.equal(Date.parse(got.run_at) - Date.parse(first.created), 60_000);
    assert.equal(historyTypes(await c.get(first.id)).at(-1), "TaskReplace");
    const kept = await c.submit("deb", { v: 3 }, { unique_key: "k" });
    assert.deepEqual([kept.id, kept.duplicate, kept.replaced, kept.spec], [first.id, true, undefined, { v: 2 }]);
  });

  test("a running holder gets one successor, which later replaces update", async () => {
    const holder = await c.submit("deb-run", { v: 1 }, { unique_key: "k" });
    await claimOne(c, "deb-run");
    const succ = await c.submit("deb-run", { v: 2 }, { unique_key: "k", on_duplicate: "replace" });
    assert.notEqual(succ.id, holder.id);
    assert.deepEqual([succ.duplicate, succ.replaced, succ.status], [undefined, undefined, "blocked"]);
    assert.deepEqual([succ.depends_on, succ.on_dependency_failure, succ.unique_key], [[holder.id], "run", "k"]);
    const again = await c.submit("deb-run", { v: 3 }, { unique_key: "k", on_duplicate: "replace" });
    assert.deepEqual([again.id, again.replaced, again.spec], [succ.id, true, { v: 3 }]);
    assert.equal(await c.count({ queue: "deb-run" }), 2);
  });

  test("submitBatch marks the replacing positions", async () => {
    const holder = await c.submit("deb-batch", 1, { unique_key: "k", delay: "1h" });
    const tasks = await c.submitBatch([
      { queue: "deb-batch", spec: 0 },
      { queue: "deb-batch", spec: 2, unique_key: "k", on_duplicate: "replace" },
      { queue: "deb-batch", spec: 3, unique_key: "other" },
    ]);
    assert.deepEqual(tasks.map((t) => !!t.replaced), [false, true, false]);
    assert.deepEqual(tasks.map((t) => !!t.duplicate), [false, true, false]);
    assert.deepEqual([tasks[1].id, tasks[1].spec, tasks[1].status], [holder.id, 2, "ready"]);
  });

  test("bad input names the field and submits nothing", async () => {
    for (const [opts, field] of [
      [{ on_duplicate: "replace" }, "on_duplicate"],
      [{ unique_key: "k", on_duplicate: "merge" }, "on_duplicate"],
      [{ unique_key: "k", debounce_max: "1m" }, "debounce_max"],
      [{ unique_key: "k", on_duplicate: "replace", debounce_max: -1 }, "debounce_max"],
    ]) {
      await assert.rejects(c.submit("deb-bad", null, opts), (e) => e instanceof InvalidArgument && e.field === field, JSON.stringify(opts));
    }
    assert.equal(await c.count({ queue: "deb-bad" }), 0);
  });
});
