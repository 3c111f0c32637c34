#!/usr/bin/env python3
"""A Norn worker written with the Python SDK (clients/python). It serves two
queues of a running norn server:

- "py-greetings": spec {"name": "Ada"} -> result {"greeting": "Hello, Ada!"};
  a spec without a name is aborted (retrying cannot fix it).
- "py-steps": spec {"steps": 5} does five slow steps, reporting progress,
  checkpointing each step to the task log and resuming after the last
  checkpoint when a previous attempt died; it stops early when the task is
  cancelled.

With --trace every attempt runs in a span that is a child of the task's
traceparent (norn.tracing.Recorder: no OpenTelemetry needed), logged when it
ends; with OpenTelemetry installed, pass tracer=trace.get_tracer(...) instead.

Run it (with `go run ./cmd/norn server` running elsewhere):

    pip install ./clients/python          # or: export PYTHONPATH=clients/python
    python3 examples/python/worker.py
    go run ./cmd/norn submit py-greetings '{"name":"Ada"}'
    go run ./cmd/norn submit py-steps '{"steps":5}'
    curl -s http://127.0.0.1:7070/v1/tasks --json '{"queue":"py-steps","spec":{"steps":2},
      "traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}'   # with --trace

Stop it with Ctrl-C or SIGTERM: running tasks get a few seconds to finish,
the rest are yielded back to their queues for another worker.
"""

import argparse
import logging

import norn

log = logging.getLogger("py-worker")


def greet(task: norn.ActiveTask) -> dict:
    name = task.spec.get("name") if isinstance(task.spec, dict) else None
    if not isinstance(name, str) or not name:
        # A malformed spec fails the same way every time: abort, never retry.
        raise norn.Abort('spec must be {"name": "..."}', code="bad_spec")
    return {"greeting": f"Hello, {name}!"}


def steps(task: norn.ActiveTask) -> dict:
    total = int(task.spec.get("steps", 3))
    if task.traceparent:
        # task.span_traceparent is the attempt's span (with --trace), else the
        # task's own: hand it on to what this task calls or submits.
        log.info("task %s continues trace %s as %s", task.id, task.traceparent, task.span_traceparent)
    # Resume after the last checkpoint an earlier attempt wrote.
    done = 0
    for entry in task.previous_log():
        done = max(done, entry.data.get("done", 0))
    for i in range(done, total):
        task.sleep(0.2)  # the work; raises norn.Cancelled if the task is cancelled
        task.log({"done": i + 1})  # checkpoint: a retry resumes from here
        task.set_progress((i + 1) / total)  # sent with the next heartbeat
    return {"steps": total, "resumed_at": done, "lease": task.lease}


def log_span(span: norn.tracing.Span) -> None:
    log.info(
        "span %s trace=%s span=%s parent=%s outcome=%s %.3fs",
        span.name, span.trace_id, span.span_id, span.parent_id,
        span.attributes.get("norn.task.outcome"), span.end_time - span.start_time,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", help="norn server URL (default $NORN_SERVER or http://127.0.0.1:7070)")
    p.add_argument("--token", help="bearer token (default $NORN_TOKEN)")
    p.add_argument("-c", "--concurrency", type=int, default=4, help="most tasks at once")
    p.add_argument("--trace", action="store_true", help="run every attempt in a span and log it when it ends")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    client = norn.Client(args.server, args.token)
    worker = norn.Worker(
        client,
        handlers={"py-greetings": greet, "py-steps": steps},
        concurrency=args.concurrency,
        shutdown_grace=5,
        tracer=norn.tracing.Recorder(on_end=log_span) if args.trace else None,
    )
    log.info("serving %s on %s", worker.queues, client.url)
    worker.run()  # returns after a graceful shutdown on SIGTERM or Ctrl-C
    client.close()


if __name__ == "__main__":
    main()
