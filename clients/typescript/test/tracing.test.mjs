import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, InvalidArgument, Worker, childTraceparent, formatTraceparent, newTraceparent, parseTraceparent } from "../dist/index.js";
import { eventually, startServer } from "./server.mjs";

const TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("traceparent helpers", () => {
  test("parse accepts the W3C format and refuses the rest", () => {
    assert.deepEqual(parseTraceparent(TP), { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", parentId: "00f067aa0ba902b7", flags: 1 });
    assert.ok(parseTraceparent("01" + TP.slice(2) + "-later-fields"));
    for (const bad of [undefined, null, "", "hello", TP.toUpperCase(), "ff" + TP.slice(2), TP + "-x",
      `00-${"0".repeat(32)}-00f067aa0ba902b7-01`, `00-4bf92f3577b34da6a3ce929d0e0e4736-${"0".repeat(16)}-01`, "01" + TP.slice(2) + "x"]) {
      assert.equal(parseTraceparent(bad), undefined, String(bad));
    }
  });
  test("produce round-trips and makes children of the same trace", () => {
    assert.equal(formatTraceparent(parseTraceparent(TP)), TP);
    const fresh = parseTraceparent(newTraceparent());
    assert.ok(fresh && fresh.flags === 1);
    assert.equal(parseTraceparent(newTraceparent(false)).flags, 0);
    assert.notEqual(newTraceparent(), newTraceparent());
    const child = parseTraceparent(childTraceparent(TP));
    assert.equal(child.traceId, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert.notEqual(child.parentId, "00f067aa0ba902b7");
    assert.equal(childTraceparent(undefined), undefined);
    assert.equal(childTraceparent("garbage"), undefined);
  });
});

describe("trace context against a server", () => {
  let srv;
  let c;
  before(async () => {
    srv = await startServer();
    c = new Client({ url: srv.url });
  });
  after(async () => {
    await srv?.stop();
  });

  test("is stored and handed to the worker", async () => {
    const t = await c.submit("trace", { n: 1 }, { traceparent: TP, tracestate: "congo=t61rcWkgMzE" });
    assert.equal(t.traceparent, TP);
    assert.equal(t.tracestate, "congo=t61rcWkgMzE");
    const seen = [];
    const w = new Worker(c, {
      handlers: { trace: (task) => { seen.push([task.traceparent, task.tracestate]); } },
      logger: {}, handleSignals: false, wait: 1000, pollInterval: 50,
    });
    const done = w.run();
    await eventually(async () => ((await c.get(t.id)).status === "completed" ? true : undefined), 15_000, "task to complete");
    await w.stop();
    await done;
    assert.deepEqual(seen, [[TP, "congo=t61rcWkgMzE"]]);
  });

  test("an invalid traceparent is refused naming the field", async () => {
    await assert.rejects(c.submit("trace", null, { traceparent: "hello" }), (e) => e instanceof InvalidArgument && e.field === "traceparent");
  });
});
