// Type-checked by otel.test.mjs (tsc --noEmit --strict): a Tracer and Span of
// the real @opentelemetry/api fit the SDK's structural types, so a program
// passes `trace.getTracer(...)` as is and can read task.span as a Span.
import { type Span, type Tracer, trace } from "@opentelemetry/api";
import { Client, type OtelSpan, Worker, type WorkerOptions } from "../dist/index.js";

const tracer: Tracer = trace.getTracer("norn-types");
const opts: WorkerOptions = {
  handlers: {
    q: (task) => {
      const span = task.span as Span | undefined;
      span?.addEvent("typed");
      return task.spanTraceparent;
    },
  },
  tracer,
};
new Worker(new Client(), opts);
const span: OtelSpan = tracer.startSpan("fits");
span.end();
