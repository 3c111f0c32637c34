"""Trace context: the traceparent helpers, and the fields against a real server."""

from __future__ import annotations

import unittest

import norn
from norn.tracing import TraceParent, child_traceparent, format_traceparent, new_traceparent, parse_traceparent

from .server import Server, unique_queue as q, wait_for
from .test_worker import running

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

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
