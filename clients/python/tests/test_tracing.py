"""Trace context: the traceparent helpers, the fields against a real server,
and the worker's spans (the built-in Recorder, and OpenTelemetry's SDK when
it is importable) linked end to end from the submit to the handler."""

from __future__ import annotations

import importlib.util
import threading
import unittest

import norn
from norn.tracing import Recorder, Span, TraceParent, child_traceparent, format_traceparent, new_traceparent, parse_traceparent

from .server import Server, unique_queue as q, wait_for
from .test_worker import running

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"

server: Server


def setUpModule() -> None:
    global server
    server = Server()


def tearDownModule() -> None:
    server.stop()


class HelpersTest(unittest.TestCase):
    def test_parse(self) -> None:
        self.assertEqual(parse_traceparent(TP), TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1))
        self.assertTrue(parse_traceparent(TP).sampled)
        self.assertFalse(parse_traceparent(TP[:-2] + "00").sampled)
        self.assertIsNotNone(parse_traceparent("01" + TP[2:] + "-later-fields"))
        for bad in (None, "", "hello", TP.upper(), "ff" + TP[2:], TP + "-x",
                    "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",
                    TP.replace("-", "_", 1), "01" + TP[2:] + "x"):
            self.assertIsNone(parse_traceparent(bad), bad)

    def test_produce(self) -> None:
        self.assertEqual(format_traceparent(parse_traceparent(TP)), TP)
        self.assertEqual(str(parse_traceparent(TP)), TP)
        fresh = parse_traceparent(new_traceparent())
        self.assertIsNotNone(fresh)
        self.assertTrue(fresh.sampled)
        self.assertFalse(parse_traceparent(new_traceparent(sampled=False)).sampled)
        self.assertNotEqual(new_traceparent(), new_traceparent())
        child = parse_traceparent(child_traceparent(TP))
        self.assertEqual((child.trace_id, child.flags), ("4bf92f3577b34da6a3ce929d0e0e4736", 1))
        self.assertNotEqual(child.parent_id, "00f067aa0ba902b7")
        self.assertIsNone(child_traceparent(None))
        self.assertIsNone(child_traceparent("garbage"))


class ServerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = norn.Client(server.url)
        self.addCleanup(self.c.close)

    def test_stored_and_handed_to_the_worker(self) -> None:
        queue = q("trace")
        t = self.c.submit(queue, {"n": 1}, traceparent=TP, tracestate="congo=t61rcWkgMzE")
        self.assertEqual((t.traceparent, t.tracestate), (TP, "congo=t61rcWkgMzE"))
        [b] = self.c.submit_batch([{"queue": queue, "traceparent": new_traceparent()}])
        self.assertIsNotNone(parse_traceparent(b.traceparent))
        seen = {}

        def handle(task: norn.ActiveTask):
            seen[task.id] = (task.traceparent, task.tracestate)

        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            wait_for(lambda: len(seen) == 2 or None, what="both tasks to run")
        self.assertEqual(seen[t.id], (TP, "congo=t61rcWkgMzE"))
        self.assertEqual(seen[b.id], (b.traceparent, None))
        self.assertEqual(self.c.get(t.id).traceparent, TP)

    def test_invalid_is_refused_naming_the_field(self) -> None:
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit(q("trace"), None, traceparent="hello")
        self.assertEqual(cm.exception.field, "traceparent")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit_batch([{"queue": q("trace")}, {"queue": q("trace"), "tracestate": "a=b"}])
        self.assertEqual(cm.exception.field, "tasks[1].tracestate")


class RecorderTest(unittest.TestCase):
    def test_child_of_the_traceparent_with_its_own_span_id(self) -> None:
        ended = []
        r = Recorder(on_end=ended.append)
        s = r.start_task_span("process q", traceparent=TP, tracestate="a=b", attributes={"k": 1})
        self.assertEqual((s.trace_id, s.parent_id, s.flags, s.tracestate), (TRACE_ID, PARENT_ID, 1, "a=b"))
        self.assertEqual(parse_traceparent(s.traceparent), TraceParent(TRACE_ID, s.span_id, 1))
        self.assertNotEqual(s.span_id, PARENT_ID)
        self.assertEqual((s.kind, s.attributes, s.status, s.ended), ("consumer", {"k": 1}, "unset", False))
        s.set_attribute("x", "y")
        s.set_error("boom")
        err = ValueError("e")
        s.record_exception(err)
        self.assertEqual(r.spans, [])
        s.end()
        s.end()  # once only
        self.assertEqual((ended, r.spans), ([s], [s]))
        self.assertTrue(s.ended and s.end_time >= s.start_time)
        self.assertEqual((s.attributes["x"], s.status, s.status_description, s.exceptions), ("y", "error", "boom", [err]))

    def test_a_task_without_trace_context_starts_a_trace(self) -> None:
        r = Recorder()
        for tp in (None, "", "garbage", TP.upper()):
            s = r.start_task_span("process q", traceparent=tp, tracestate="a=b", attributes={})
            self.assertIsNone(s.parent_id)
            self.assertIsNone(s.tracestate)
            self.assertIsNotNone(parse_traceparent(s.traceparent))
            self.assertNotEqual(s.trace_id, TRACE_ID)

    def test_keeps_the_last_spans_and_survives_a_failing_callback(self) -> None:
        def boom(span: Span) -> None:
            raise RuntimeError("callback bug")

        r = Recorder(on_end=boom, keep=2)
        spans = [r.start_task_span(f"s{i}", traceparent=TP, tracestate=None, attributes={}) for i in range(3)]
        with self.assertLogs("norn.tracing", "ERROR"):
            for sp in spans:
                sp.end()
        self.assertEqual(r.spans, spans[1:])


def _ended_span(spans, task_id: str):
    """The ended span of the last attempt at task_id, once there is one;
    spans() lists the ended spans."""

    def find():
        mine = [s for s in spans() if s.attributes.get("messaging.message.id") == task_id]
        return mine[-1] if mine else None

    return wait_for(find, what=f"the span of task {task_id} to end")


class _Traced(unittest.TestCase):
    """A client, and a worker running with a tracer until the test ends."""

    def setUp(self) -> None:
        self.c = norn.Client(server.url)
        self.addCleanup(self.c.close)

    def work(self, handlers, **options):
        ctx = running(norn.Worker(self.c, handlers, concurrency=options.pop("concurrency", 4), wait=1, heartbeat_interval=0.1, **options))
        w = ctx.__enter__()
        self.addCleanup(ctx.__exit__, None, None, None)
        return w


class WorkerRecorderTest(_Traced):
    def ended_span(self, rec: Recorder, task_id: str) -> Span:
        return _ended_span(lambda: rec.spans, task_id)

    def test_the_attempt_is_a_child_of_the_submitted_traceparent(self) -> None:
        rec = Recorder()
        queue = q("rec-link")
        seen = {}

        def handle(task: norn.ActiveTask):
            seen["span"] = task.span
            seen["tp"] = task.span_traceparent
            child = self.c.submit(queue + "-next", None, traceparent=task.span_traceparent, tracestate=task.tracestate)
            return {"child": child.id}

        w = self.work({queue: handle}, tracer=rec)
        t = self.c.submit(queue, {"n": 1}, traceparent=TP, tracestate="congo=t61rcWkgMzE")
        span = self.ended_span(rec, t.id)
        self.assertIs(seen["span"], span)
        self.assertEqual(span.name, f"process {queue}")
        self.assertEqual((span.trace_id, span.parent_id, span.flags, span.tracestate), (TRACE_ID, PARENT_ID, 1, "congo=t61rcWkgMzE"))
        self.assertEqual(span.attributes, {
            "messaging.system": "norn",
            "messaging.operation.type": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": t.id,
            "norn.worker": w.id,
            "norn.task.lease": 1,
            "norn.task.attempt": 1,
            "norn.task.outcome": "complete",
        })
        self.assertEqual(span.status, "unset")
        # What the handler submitted is stored under the attempt's span.
        self.assertEqual(seen["tp"], span.traceparent)
        self.assertEqual(parse_traceparent(seen["tp"]), TraceParent(TRACE_ID, span.span_id, 1))
        done = self.c.get(t.id)
        self.assertEqual(done.status, "completed")
        child = self.c.get(done.result["child"])
        self.assertEqual((child.traceparent, child.tracestate), (span.traceparent, "congo=t61rcWkgMzE"))

    def test_every_outcome_ends_the_span_and_is_recorded(self) -> None:
        rec = Recorder()
        queue = q("rec-outcomes")
        started = set()
        lock = threading.Lock()

        def handle(task: norn.ActiveTask):
            with lock:
                started.add(task.id)
            kind = task.spec["kind"]
            if kind == "fail":
                raise norn.Fail("rate limited", code="rate_limited")
            if kind == "raise":
                raise ValueError("handler bug")
            if kind == "abort":
                raise norn.Abort("spec is bad", code="bad_spec")
            if kind == "snooze":
                raise norn.Snooze(3600)
            if kind == "cancel":
                task.sleep(60)  # raises norn.Cancelled
            return "fine"

        self.work({queue: handle}, tracer=rec, concurrency=6)
        ids = {kind: self.c.submit(queue, {"kind": kind}, retry={"max_retries": 0}).id
               for kind in ("ok", "fail", "raise", "abort", "snooze", "cancel")}
        wait_for(lambda: ids["cancel"] in started, what="the cancel task to start")
        self.c.cancel(ids["cancel"])
        want = {
            "ok": ("complete", "unset", None, None, ""),
            "fail": ("fail", "error", "rate_limited", norn.Fail, "rate limited"),
            "raise": ("fail", "error", "handler_error", ValueError, "ValueError: handler bug"),
            "abort": ("abort", "error", "bad_spec", norn.Abort, "spec is bad"),
            "snooze": ("snooze", "unset", None, None, ""),
            "cancel": (None, "unset", None, None, ""),  # nothing reported: the task is cancelled
        }
        for kind, (outcome, status, error_type, exc_type, description) in want.items():
            with self.subTest(kind=kind):
                span = self.ended_span(rec, ids[kind])
                self.assertTrue(span.ended)
                self.assertIsNone(span.parent_id, "a task without a traceparent starts a trace")
                self.assertEqual(span.attributes.get("norn.task.outcome"), outcome)
                self.assertEqual(span.attributes.get("error.type"), error_type)
                self.assertEqual((span.status, span.status_description), (status, description))
                self.assertEqual([type(e) for e in span.exceptions], [exc_type] if exc_type else [])
        self.assertEqual(self.c.get(ids["snooze"]).status, "scheduled")
        self.assertEqual(self.c.get(ids["cancel"]).status, "cancelled")

    def test_a_task_yielded_at_shutdown_ends_its_span(self) -> None:
        rec = Recorder()
        queue = q("rec-yield")
        running_ids = []

        def handle(task: norn.ActiveTask):
            running_ids.append(task.id)
            task.sleep(60)  # raises norn.Shutdown after the grace period

        # One slot: no claim in flight to take the yielded task again.
        w = norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1, shutdown_grace=0, tracer=rec)
        with running(w):
            t = self.c.submit(queue, None, traceparent=TP)
            wait_for(lambda: running_ids, what="the task to start")
        span = self.ended_span(rec, t.id)
        self.assertEqual(span.parent_id, PARENT_ID)
        self.assertNotIn("norn.task.outcome", span.attributes)
        self.assertEqual(self.c.get(t.id).status, "ready")

    def test_without_a_tracer_span_traceparent_is_the_tasks_own(self) -> None:
        queue = q("rec-none")
        seen = {}

        def handle(task: norn.ActiveTask):
            seen[task.id] = (task.span, task.span_traceparent, task.traceparent)

        self.work({queue: handle})
        a = self.c.submit(queue, None, traceparent=TP)
        b = self.c.submit(queue, None)
        wait_for(lambda: len(seen) == 2, what="both tasks to run")
        self.assertEqual(seen[a.id], (None, TP, TP))
        self.assertEqual(seen[b.id], (None, None, None))

    def test_a_tracer_that_is_none_of_the_kinds_is_refused_naming_the_field(self) -> None:
        for bad in (object(), "tracer", {"start_span": 1}):
            with self.assertRaises(norn.InvalidArgument) as cm:
                norn.Worker(self.c, {"q": lambda t: None}, tracer=bad)
            self.assertEqual(cm.exception.field, "tracer")

    def test_a_tracer_that_raises_costs_the_span_not_the_task(self) -> None:
        class Broken:
            def start_task_span(self, *a, **kw):
                raise RuntimeError("tracer bug")

        queue = q("rec-broken")
        with self.assertLogs("norn.worker", "ERROR"):
            self.work({queue: lambda task: {"span": task.span, "tp": task.span_traceparent}}, tracer=Broken())
            t = self.c.submit(queue, None, traceparent=TP)
            done = wait_for(lambda: (lambda x: x if x.status == "completed" else None)(self.c.get(t.id)), what="the task")
        self.assertEqual(done.result, {"span": None, "tp": TP})


def _otel_importable() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.sdk.trace") is not None
    except ImportError:
        return False


@unittest.skipUnless(_otel_importable(), "opentelemetry-api and -sdk are not installed (PyPI is out of reach here)")
class WorkerOpenTelemetryTest(_Traced):
    """The same links with OpenTelemetry's own SDK and in-memory exporter."""

    def setUp(self) -> None:
        super().setUp()
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = provider.get_tracer("norn-test")

    def ended_span(self, task_id: str):
        return _ended_span(self.exporter.get_finished_spans, task_id)

    def test_parent_link_nesting_and_outcome(self) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, StatusCode

        queue = q("otel-link")
        seen = {}

        def handle(task: norn.ActiveTask):
            with self.tracer.start_as_current_span("send mail"):  # nests under the attempt's span
                pass
            seen["current"] = trace.get_current_span().get_span_context().span_id
            seen["tp"] = task.span_traceparent
            if task.spec["kind"] == "fail":
                raise norn.Fail("rate limited", code="rate_limited")
            return self.c.submit(queue + "-next", None, traceparent=task.span_traceparent).id

        w = self.work({queue: handle}, tracer=self.tracer)
        t = self.c.submit(queue, {"kind": "ok"}, traceparent=TP, tracestate="congo=t61rcWkgMzE")
        span = self.ended_span(t.id)
        sc = span.get_span_context()
        self.assertEqual(span.name, f"process {queue}")
        self.assertEqual(span.kind, SpanKind.CONSUMER)
        self.assertEqual(f"{sc.trace_id:032x}", TRACE_ID)
        self.assertEqual(f"{span.parent.span_id:016x}", PARENT_ID)
        self.assertTrue(span.parent.is_remote)
        self.assertEqual(sc.trace_state.to_header(), "congo=t61rcWkgMzE")
        self.assertEqual(dict(span.attributes), {
            "messaging.system": "norn",
            "messaging.operation.type": "process",
            "messaging.destination.name": queue,
            "messaging.message.id": t.id,
            "norn.worker": w.id,
            "norn.task.lease": 1,
            "norn.task.attempt": 1,
            "norn.task.outcome": "complete",
        })
        self.assertEqual(span.status.status_code, StatusCode.UNSET)
        self.assertEqual(seen["current"], sc.span_id)
        inner = [s for s in self.exporter.get_finished_spans() if s.name == "send mail"][-1]
        self.assertEqual(inner.parent.span_id, sc.span_id)
        self.assertEqual(parse_traceparent(seen["tp"]), TraceParent(TRACE_ID, f"{sc.span_id:016x}", 1))
        child = self.c.get(self.c.get(t.id).result)
        self.assertEqual(child.traceparent, seen["tp"])

        f = self.c.submit(queue, {"kind": "fail"}, retry={"max_retries": 0})
        span = self.ended_span(f.id)
        self.assertIsNone(span.parent)
        self.assertEqual(span.attributes["norn.task.outcome"], "fail")
        self.assertEqual(span.attributes["error.type"], "rate_limited")
        self.assertEqual((span.status.status_code, span.status.description), (StatusCode.ERROR, "rate limited"))
        self.assertEqual([e.name for e in span.events], ["exception"])
