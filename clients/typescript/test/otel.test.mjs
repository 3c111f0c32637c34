// The worker's OpenTelemetry spans, end to end: a real @opentelemetry/api
// with the SDK's in-memory exporter and the async-hooks context manager, a
// real norn server, tasks submitted with a traceparent.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { Abort, Client, Fail, InvalidArgument, Snooze, Worker, parseTraceparent } from "../dist/index.js";
import { eventually, here, startServer } from "./server.mjs";

const TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID = "00f067aa0ba902b7";

let srv;
let c;
let exporter;
let tracer;
let n = 0;
const quiet = {};

before(async () => {
  srv = await startServer();
  c = new Client({ url: srv.url });
  exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  tracer = provider.getTracer("norn-test");
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});
after(async () => {
  context.disable();
  await srv?.stop();
});

/** A queue of one test alone. */
const queue = (name) => `${name}-${++n}-${process.pid}`;

function startWorker(handlers, opts = {}) {
  const w = new Worker(c, { handlers, logger: quiet, handleSignals: false, wait: 1000, pollInterval: 50, tracer, ...opts });
  return { w, done: w.run() };
}

/** The ended span of the attempt at task id (the latest, when there were several). */
function attemptSpan(id) {
  return eventually(
    () => exporter.getFinishedSpans().filter((s) => s.attributes["messaging.message.id"] === id).at(-1),
    15_000,
    `the span of task ${id} to end`,
  );
}

describe("worker with an OpenTelemetry tracer", () => {
  test("the attempt's span is a child of the submitted traceparent, and the parent of what the handler does", async () => {
    const q = queue("otel-link");
    const seen = {};
    const { w, done } = startWorker({
      [q]: async (task) => {
        const inner = tracer.startSpan("send mail"); // context.active(): the attempt's span
        inner.end();
        seen.active = trace.getSpan(context.active())?.spanContext().spanId;
        seen.span = task.span.spanContext();
        seen.spanTraceparent = task.spanTraceparent;
        const child = await c.submit(`${q}-next`, null, { traceparent: task.spanTraceparent, tracestate: task.tracestate });
        return { child: child.id };
      },
    });
    let t;
    try {
      t = await c.submit(q, { n: 1 }, { traceparent: TP, tracestate: "congo=t61rcWkgMzE" });
      const span = await attemptSpan(t.id);
      assert.equal(span.name, `process ${q}`);
      assert.equal(span.kind, SpanKind.CONSUMER);
      assert.equal(span.spanContext().traceId, TRACE_ID);
      assert.equal(span.parentSpanContext?.spanId, PARENT_ID);
      assert.equal(span.parentSpanContext?.isRemote, true);
      assert.equal(span.spanContext().traceState?.serialize(), "congo=t61rcWkgMzE");
      assert.deepEqual(span.attributes, {
        "messaging.system": "norn",
        "messaging.operation.type": "process",
        "messaging.destination.name": q,
        "messaging.message.id": t.id,
        "norn.worker": w.id,
        "norn.task.lease": 1,
        "norn.task.attempt": 1,
        "norn.task.outcome": "complete",
      });
      assert.equal(span.status.code, SpanStatusCode.UNSET);

      // The handler ran inside the span, and saw it.
      assert.deepEqual(seen.span, span.spanContext());
      assert.equal(seen.active, span.spanContext().spanId);
      const inner = exporter.getFinishedSpans().find((s) => s.name === "send mail");
      assert.equal(inner.spanContext().traceId, TRACE_ID);
      assert.equal(inner.parentSpanContext?.spanId, span.spanContext().spanId);

      // What it submitted is stored under the attempt's span: the trace goes on.
      assert.deepEqual(parseTraceparent(seen.spanTraceparent), { traceId: TRACE_ID, parentId: span.spanContext().spanId, flags: 1 });
      const done1 = await c.get(t.id);
      assert.equal(done1.status, "completed");
      const child = await c.get(done1.result.child);
      assert.equal(child.traceparent, seen.spanTraceparent);
      assert.equal(child.tracestate, "congo=t61rcWkgMzE");
    } finally {
      await w.stop();
      await done;
    }
  });

  test("every outcome ends the span and is recorded on it", async () => {
    const q = queue("otel-outcomes");
    const started = new Set();
    const { w, done } = startWorker({
      [q]: async (task) => {
        started.add(task.id);
        switch (task.spec.kind) {
          case "ok":
            return "fine";
          case "fail":
            throw new Fail("rate limited", { code: "rate_limited" });
          case "throw":
            throw new TypeError("handler bug");
          case "abort":
            throw new Abort("spec is bad", { code: "bad_spec" });
          case "snooze":
            throw new Snooze({ delay: "1h" });
          case "cancel":
            await task.sleep(60_000); // rejects with Cancelled
        }
      },
    }, { heartbeatInterval: 100 });
    try {
      const ids = {};
      for (const kind of ["ok", "fail", "throw", "abort", "snooze", "cancel"]) {
        ids[kind] = (await c.submit(q, { kind }, { retry: { max_retries: 0 } })).id;
      }
      await eventually(() => started.has(ids.cancel), 15_000, "the cancel task to start");
      await c.cancel(ids.cancel);

      const want = {
        ok: { outcome: "complete", status: SpanStatusCode.UNSET },
        fail: { outcome: "fail", status: SpanStatusCode.ERROR, errorType: "rate_limited", message: "rate limited", exception: "rate_limited" },
        throw: { outcome: "fail", status: SpanStatusCode.ERROR, errorType: "handler_error", exception: "TypeError" },
        abort: { outcome: "abort", status: SpanStatusCode.ERROR, errorType: "bad_spec", message: "spec is bad", exception: "bad_spec" },
        snooze: { outcome: "snooze", status: SpanStatusCode.UNSET },
        cancel: { outcome: undefined, status: SpanStatusCode.UNSET }, // nothing reported: the task is cancelled
      };
      for (const [kind, exp] of Object.entries(want)) {
        const span = await attemptSpan(ids[kind]);
        assert.equal(span.ended, true, kind);
        assert.equal(span.parentSpanContext, undefined, `${kind}: a task without a traceparent starts a trace`);
        assert.equal(span.attributes["norn.task.outcome"], exp.outcome, kind);
        assert.equal(span.status.code, exp.status, kind);
        assert.equal(span.attributes["error.type"], exp.errorType, kind);
        if (exp.message) assert.equal(span.status.message, exp.message, kind);
        // recordException names an error with a code by its code.
        const exceptions = span.events.filter((e) => e.name === "exception").map((e) => e.attributes["exception.type"]);
        assert.deepEqual(exceptions, exp.exception ? [exp.exception] : [], kind);
      }
      assert.equal((await c.get(ids.snooze)).status, "scheduled");
      assert.equal((await c.get(ids.cancel)).status, "cancelled");
    } finally {
      await w.stop();
      await done;
    }
  });

  test("a task yielded at shutdown ends its span too", async () => {
    const q = queue("otel-yield");
    let running;
    const { w, done } = startWorker({
      [q]: async (task) => {
        running = task.id;
        await task.sleep(60_000); // rejects with Shutdown after the grace period
      },
    }, { shutdownGrace: 0, concurrency: 1 }); // no claim in flight to take the yielded task again
    const t = await c.submit(q, null, { traceparent: TP });
    await eventually(() => running === t.id, 15_000, "the task to start");
    await w.stop();
    await done;
    const span = await attemptSpan(t.id);
    assert.equal(span.parentSpanContext?.spanId, PARENT_ID);
    assert.equal(span.attributes["norn.task.outcome"], undefined);
    assert.equal((await c.get(t.id)).status, "ready");
  });

  test("without a tracer there is no span, and spanTraceparent is the task's own", async () => {
    const q = queue("otel-none");
    const seen = [];
    const before = exporter.getFinishedSpans().length;
    const { w, done } = startWorker({ [q]: (task) => void seen.push([task.span, task.spanTraceparent, task.traceparent]) }, { tracer: undefined });
    try {
      const a = await c.submit(q, null, { traceparent: TP });
      const b = await c.submit(q, null);
      await eventually(async () => (await c.get(b.id)).status === "completed" && (await c.get(a.id)).status === "completed", 15_000, "both tasks");
      assert.deepEqual(seen, [[undefined, TP, TP], [undefined, undefined, undefined]]);
      assert.equal(exporter.getFinishedSpans().length, before);
    } finally {
      await w.stop();
      await done;
    }
  });

  test("a tracer that is not one is refused naming the field", () => {
    for (const bad of [null, {}, { startSpan: 1 }]) {
      assert.throws(() => new Worker(c, { handlers: { q: () => {} }, tracer: bad }), (e) => e instanceof InvalidArgument && e.field === "tracer");
    }
  });

  test("a tracer that throws costs the span, not the task", async () => {
    const q = queue("otel-broken");
    const broken = { startSpan() { throw new Error("tracer bug"); } };
    const { w, done } = startWorker({ [q]: (task) => ({ span: task.span === undefined, tp: task.spanTraceparent }) }, { tracer: broken });
    try {
      const t = await c.submit(q, null, { traceparent: TP });
      const got = await eventually(async () => { const x = await c.get(t.id); return x.status === "completed" ? x : undefined; }, 15_000, "task");
      assert.deepEqual(got.result, { span: true, tp: TP });
    } finally {
      await w.stop();
      await done;
    }
  });
});

// ROOT_CONTEXT is imported so a change of the API's root (the worker parents
// on it, not on whatever context run() was called in) shows up here.
test("the attempt's span does not inherit the context run() was called in", async () => {
  const q = queue("otel-root");
  const outer = tracer.startSpan("outer");
  let w;
  const done = context.with(trace.setSpan(ROOT_CONTEXT, outer), () => {
    w = new Worker(c, { handlers: { [q]: () => {} }, logger: quiet, handleSignals: false, wait: 1000, pollInterval: 50, tracer });
    return w.run();
  });
  try {
    const t = await c.submit(q, null);
    const span = await attemptSpan(t.id);
    assert.equal(span.parentSpanContext, undefined);
    assert.notEqual(span.spanContext().traceId, outer.spanContext().traceId);
  } finally {
    outer.end();
    await w.stop();
    await done;
  }
});

test("a Tracer and Span of @opentelemetry/api fit the SDK's types (tsc --strict)", () => {
  const pkg = path.resolve(here, "..");
  execFileSync(
    path.join(pkg, "node_modules", ".bin", "tsc"),
    ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--types", "node", "test/otel-types.check.ts"],
    { cwd: pkg, stdio: "pipe" },
  );
});
