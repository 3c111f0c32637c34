"""norn.Worker against a real norn server: outcomes, progress and
checkpoints, heartbeats, cancellation, lease loss, concurrency, shutdown
(in process, and SIGTERM to a worker process)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import unittest
from typing import Iterator, List
from unittest import mock

import norn

from .server import PYTHON_ROOT, Server, history_types, unique_queue as q, wait_for

server: Server


def setUpModule() -> None:
    global server
    server = Server()


def tearDownModule() -> None:
    server.stop()




@contextlib.contextmanager
def running(worker: norn.Worker) -> Iterator[norn.Worker]:
    """Runs worker in a thread for the with block, then stops it and
    re-raises what run() raised."""
    errs: List[BaseException] = []

    def target() -> None:
        try:
            worker.run(handle_signals=False)
        except BaseException as e:  # reported by the test
            errs.append(e)

    th = threading.Thread(target=target, daemon=True)
    th.start()
    try:
        yield worker
    finally:
        worker.stop(timeout=60)
        th.join(60)
    if errs:
        raise errs[0]


class WorkerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = norn.Client(server.url)
        self.addCleanup(self.c.close)

    def status_is(self, tid: str, *statuses: str):
        def check():
            t = self.c.get(tid)
            return t if t.status in statuses else None

        return wait_for(check, what=f"task {tid} to be {'/'.join(statuses)}")

    def test_outcomes(self) -> None:
        queue = q("outcomes")

        def handle(task: norn.ActiveTask):
            kind = task.spec["kind"]
            if kind == "ok":
                return {"echo": task.spec, "attempt": task.attempts}
            if kind == "flaky" and task.attempts == 1:
                raise ValueError("first attempt fails")
            if kind == "flaky":
                return "second time lucky"
            if kind == "abort":
                raise norn.Abort("malformed spec", code="bad_spec", details={"why": "test"})
            if kind == "fail":
                raise norn.Fail("rate limited", code="rate_limited")
            if kind == "nojson":
                return object()
            return None

        ids = {}
        for kind in ("ok", "flaky", "abort", "fail", "nojson", "none"):
            ids[kind] = self.c.submit(queue, {"kind": kind}, retry={"max_retries": 1, "base": "1ms"} if kind == "flaky" else {"max_retries": 0}).id
        w = norn.Worker(self.c, {queue: handle}, concurrency=4, wait=1)
        with running(w):
            done = {k: self.status_is(i, "completed", "aborted") for k, i in ids.items()}
        self.assertEqual(done["ok"].status, "completed")
        self.assertEqual(done["ok"].result, {"echo": {"kind": "ok"}, "attempt": 1})
        self.assertEqual(done["ok"].progress, 1)
        self.assertEqual((done["flaky"].status, done["flaky"].result, done["flaky"].attempts), ("completed", "second time lucky", 2))
        err = done["flaky"].errors[0]
        self.assertEqual(err["code"], "handler_error")
        self.assertIn("ValueError: first attempt fails", err["description"])
        self.assertIn("Traceback", err["description"])
        self.assertIn("TaskRetry", history_types(done["flaky"]))
        self.assertEqual(done["abort"].status, "aborted")
        self.assertEqual(done["abort"].errors[-1], {"code": "bad_spec", "description": "malformed spec", "args": {"why": "test"}})
        self.assertEqual(done["fail"].status, "aborted", "no retries left")
        self.assertIn("rate_limited", [e["code"] for e in done["fail"].errors])
        self.assertEqual((done["nojson"].status, done["nojson"].errors[-1]["code"]), ("aborted", "invalid_result"))
        self.assertEqual((done["none"].status, done["none"].get("result")), ("completed", None))

    def test_fail_retry_in(self) -> None:
        # The policy would wait an hour; the handler asks for 1 ms, and the
        # jitter mode travels with the policy.
        queue = q("retryin")

        def handle(task: norn.ActiveTask):
            if task.attempts == 1:
                raise norn.Fail("busy", code="rate_limited", retry_in="1ms")
            return "done"

        t = self.c.submit(queue, None, retry={"max_retries": 2, "base": "1h", "jitter": "full"})
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            done = self.status_is(t.id, "completed", "aborted")
        self.assertEqual((done.status, done.attempts, done.result), ("completed", 2, "done"))
        self.assertEqual(done.errors, [{"code": "rate_limited", "description": "busy"}])
        self.assertEqual(done.retry["jitter"], "full")
        with self.assertRaises(norn.InvalidArgument):
            norn.Fail("x", retry_in="soon")

    def test_snooze(self) -> None:
        queue = q("snooze")
        seen = []

        def handle(task: norn.ActiveTask):
            seen.append(task.attempts)
            raise norn.Snooze(3600)

        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            s = self.status_is(t.id, "scheduled")
        self.assertEqual((seen, s.attempts), ([1], 0), "a snooze gives the attempt back")
        self.assertIn("TaskSnooze", history_types(s))
        self.assertGreater((s.time("run_at") - s.time("updated")).total_seconds(), 3500)
        with self.assertRaises(norn.InvalidArgument):
            norn.Snooze()
        with self.assertRaises(norn.InvalidArgument):
            norn.Snooze(-1)

    def test_await_children_in_two_stages(self) -> None:
        # Each await ends the attempt without counting it and without a
        # report (the handler's return is ignored), the children run, and
        # the parent's next run sees their results, until it completes with
        # their sum.
        parents, kids = q("parents"), q("kids")
        runs = []

        def parent(task: norn.ActiveTask):
            runs.append(len(task.dependency_results))
            if not task.dependency_results:
                task.await_children({"queue": kids, "spec": 1}, {"queue": kids, "spec": 2})
                return "ignored"
            if len(task.dependency_results) == 2:
                task.await_children({"queue": kids, "spec": 3})
                raise RuntimeError("ignored too: the attempt ended with the await")
            if task.attempts != 1:
                raise norn.Abort(f"attempts {task.attempts} on the last run, want 1: awaits do not count")
            return sum(r.result for r in task.dependency_results) * 10

        def kid(task: norn.ActiveTask):
            return task.spec

        reported = []

        class Spy(norn.Client):
            def complete(self, id, *a, **kw):
                reported.append((id, "complete"))
                return super().complete(id, *a, **kw)

            def fail(self, id, *a, **kw):
                reported.append((id, "fail"))
                return super().fail(id, *a, **kw)

            def abort(self, id, *a, **kw):
                reported.append((id, "abort"))
                return super().abort(id, *a, **kw)

        spy = Spy(server.url)
        self.addCleanup(spy.close)
        t = self.c.submit(parents, None)
        with running(norn.Worker(spy, {parents: parent, kids: kid}, concurrency=4, wait=1)):
            done = self.status_is(t.id, "completed", "aborted")
        self.assertEqual([op for tid, op in reported if tid == t.id], ["complete"], "only the last run is reported")
        self.assertEqual((done.status, done.result, runs, len(done.depends_on)), ("completed", 60, [0, 2, 3], 3))
        self.assertEqual(history_types(done).count("TaskAwait"), 2)
        self.assertEqual(done.get("errors"), None, "no attempt was failed")
        self.assertEqual(done.attempts, 1)

    def test_await_children_refused_lets_the_handler_go_on(self) -> None:
        queue = q("awaitbad")
        seen = []

        def handle(task: norn.ActiveTask):
            try:
                task.await_children({"queue": q("kids")}, on_child_failure="sometimes")
            except norn.InvalidArgument as e:
                seen.append(e.field)
            return "went on"

        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            done = self.status_is(t.id, "completed", "aborted")
        self.assertEqual((done.status, done.result, seen), ("completed", "went on", ["on_child_failure"]))
        self.assertNotIn("TaskAwait", history_types(done))

    def test_snooze_until_signal(self) -> None:
        # The handler waits for "approval"; the test sends it once the task
        # is waiting, and the next run completes with the signal's data.
        queue = q("approve")
        runs = []

        def handle(task: norn.ActiveTask):
            runs.append(task.signal_wait)
            if task.signal_wait is None:
                raise norn.Snooze(until_signal="approval", timeout="1h")
            if not task.signal_wait.received:
                raise norn.Abort("not approved in time")
            return {"approved_by": [s.data for s in task.signals if s.name == "approval"][-1], "attempts": task.attempts}

        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            waiting = wait_for(lambda: (lambda x: x if x.status == "scheduled" and x.signal_wait else None)(self.c.get(t.id)),
                               what="the task to wait for its signal")
            self.assertEqual((waiting.signal_wait.name, waiting.signal_wait.received, waiting.attempts), ("approval", False, 0))
            self.c.send_signal(t.id, "approval", "ada")
            done = self.status_is(t.id, "completed", "aborted")
        self.assertEqual((done.status, done.result), ("completed", {"approved_by": "ada", "attempts": 1}))
        self.assertEqual(len(runs), 2)
        self.assertEqual((done.signal_wait.name, done.signal_wait.received), ("approval", True))
        self.assertIn("TaskSnooze", history_types(done))

    def test_signal_sent_before_the_wait(self) -> None:
        # A signal already there makes the wait end at once: with an hour's
        # timeout, the task completes only because the signal counted.
        queue = q("early")

        def handle(task: norn.ActiveTask):
            if task.signal_wait is None:
                raise norn.Snooze(until_signal="go", timeout="1h")
            return [task.signal_wait.received, [s.data for s in task.signals]]

        t = self.c.submit(queue, None)
        self.c.send_signal(t.id, "go", 42)
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            done = self.status_is(t.id, "completed", "aborted")
        self.assertEqual((done.status, done.result), ("completed", [True, [42]]))
        self.assertIn("TaskSnooze", history_types(done))

    def test_signal_wait_times_out(self) -> None:
        queue = q("late")

        def handle(task: norn.ActiveTask):
            if task.signal_wait is None:
                raise norn.Snooze(until_signal="approval", timeout="1s")
            return {"received": task.signal_wait.received, "signals": task.signals}

        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            done = self.status_is(t.id, "completed", "aborted")
        self.assertEqual((done.status, done.result), ("completed", {"received": False, "signals": []}))

    def test_new_signals_while_running(self) -> None:
        # A handler that keeps running polls for signals sent meanwhile.
        queue = q("poll")
        started = threading.Event()

        def handle(task: norn.ActiveTask):
            started.set()
            seen = 0
            got = []
            while not task.cancelled:
                for sg in task.new_signals(seen):
                    seen = sg.seq
                    got.append(sg.data)
                    if sg.name == "stop":
                        return got
                task.sleep(0.02)

        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            self.assertTrue(started.wait(60))
            self.c.send_signal(t.id, "more", 1)
            self.c.send_signal(t.id, "stop", 2)
            done = self.status_is(t.id, "completed", "aborted")
        self.assertEqual((done.status, done.result), ("completed", [1, 2]))

    def test_snooze_until_signal_refused_locally(self) -> None:
        for kw, field in (({"until_signal": ""}, "until_signal"),
                          ({"until_signal": "go", "delay": 1}, "until_signal"),
                          ({}, "delay"),
                          ({"delay": 1, "timeout": "1h"}, "timeout"),
                          ({"until_signal": "go", "timeout": "soon"}, "timeout")):
            with self.subTest(kw=kw), self.assertRaises(norn.InvalidArgument) as cm:
                norn.Snooze(**kw)
            self.assertEqual(cm.exception.field, field)

    def test_middleware(self) -> None:
        queue = q("mw")
        trace = []

        def outer(task, call_next):
            trace.append(f"outer> {task.spec}")
            try:
                return call_next(task)
            finally:
                trace.append(f"<outer {task.spec}")

        def inner(task, call_next):
            trace.append(f"inner> {task.spec}")
            try:
                return {"wrapped": call_next(task)}
            except KeyError as e:
                raise norn.Abort(f"missing {e}", code="bad_spec") from e

        def handle(task):
            trace.append(f"handler {task.spec}")
            if task.spec == "bad":
                raise KeyError("field")
            return task.spec

        good, bad = self.c.submit(queue, "good"), self.c.submit(queue, "bad")
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1, middleware=[outer, inner])):
            g = self.status_is(good.id, "completed")
            b = self.status_is(bad.id, "aborted")
        self.assertEqual(g.result, {"wrapped": "good"})
        self.assertEqual(b.errors[-1]["code"], "bad_spec", "middleware decides the outcome")
        self.assertEqual(trace, [f"{step} {spec}" for spec in ("good", "bad") for step in ("outer>", "inner>", "handler", "<outer")])

    def test_progress_and_log(self) -> None:
        queue = q("progress")
        step = threading.Event()
        seen = {}

        def handle(task: norn.ActiveTask):
            task.progress(0.5)
            step.wait(30)
            step.clear()
            task.set_progress(0.75)  # rides on the next heartbeat
            task.log({"checkpoint": 1})
            task.log({"checkpoint": 2})
            seen["previous"] = task.previous_log()
            step.wait(30)
            return "done"

        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, lease=3.0, wait=1)):
            wait_for(lambda: self.c.get(t.id).progress == 0.5, what="progress 0.5")
            step.set()
            wait_for(lambda: self.c.get(t.id).progress == 0.75, what="progress 0.75 from a heartbeat")
            step.set()
            done = self.status_is(t.id, "completed")
        self.assertEqual(done.result, "done")
        self.assertEqual(seen["previous"], [])
        entries = self.c.read_log(t.id)
        self.assertEqual([(e.seq, e.lease, e.data) for e in entries], [(1, 1, {"checkpoint": 1}), (2, 1, {"checkpoint": 2})])

    def test_resume_from_previous_log(self) -> None:
        queue = q("resume")
        seen = []

        def handle(task: norn.ActiveTask):
            prev = task.previous_log()
            seen.append([e.data for e in prev])
            task.log({"attempt": task.attempts})
            if task.attempts == 1:
                raise RuntimeError("crash after the checkpoint")
            return [e.data for e in prev]

        t = self.c.submit(queue, None, retry={"max_retries": 1, "base": "1ms"})
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            done = self.status_is(t.id, "completed")
        self.assertEqual(seen, [[], [{"attempt": 1}]])
        self.assertEqual(done.result, [{"attempt": 1}])
        self.assertEqual([(e.seq, e.lease) for e in self.c.read_log(t.id)], [(1, 1), (2, 2)])

    def test_heartbeats_keep_the_lease(self) -> None:
        queue = q("hb")
        release = threading.Event()
        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: lambda task: release.wait(60) and "kept"}, concurrency=1, lease=3.0, wait=1)):
            claimed = self.status_is(t.id, "running")
            first = claimed.time("deadline")
            # A deadline 4.5 s past the first means a heartbeat was accepted
            # 1.5 leases after the claim: earlier ones had kept the lease.
            wait_for(lambda: (self.c.get(t.id).time("deadline") - first).total_seconds() > 4.5, what="heartbeats to extend the deadline")
            self.c.sweep()  # times out every expired lease now
            now = self.c.get(t.id)
            self.assertEqual((now.status, now.lease, now.attempts), ("running", 1, 1))
            release.set()
            done = self.status_is(t.id, "completed")
        self.assertEqual(done.result, "kept")
        self.assertNotIn("TaskTimeout", history_types(done))

    def test_cancellation_reaches_the_handler(self) -> None:
        queue = q("cancel")
        seen = {}

        def polls_the_flag(task: norn.ActiveTask):
            while not task.cancelled:
                task.wait(0.05)
            seen["flag"] = task.reason
            return "ignored"

        def sleeps(task: norn.ActiveTask):
            try:
                while True:
                    task.sleep(0.05)
            except norn.Cancelled as e:
                seen["raised"] = e
                raise

        a = self.c.submit(queue + "-a", None)
        b = self.c.submit(queue + "-b", None)
        w = norn.Worker(self.c, {queue + "-a": polls_the_flag, queue + "-b": sleeps}, concurrency=2, lease=3.0, wait=1)
        with running(w):
            self.status_is(a.id, "running")
            self.status_is(b.id, "running")
            self.c.cancel(a.id)
            self.c.cancel(b.id)
            wait_for(lambda: len(seen) == 2, what="both handlers to see the cancellation")
            wait_for(lambda: w.running == 0, what="the handlers to return")
        self.assertIsInstance(seen["flag"], norn.Cancelled)
        self.assertIsInstance(seen["raised"], norn.Cancelled)
        for tid in (a.id, b.id):
            t = self.c.get(tid)
            self.assertEqual(t.status, "cancelled")
            self.assertEqual(t.get("result"), None, "nothing is reported after a cancel")
            self.assertNotIn("TaskRetry", history_types(t))

    def test_deleted_task_is_a_lost_lease(self) -> None:
        queue = q("lost")
        seen = []

        def handle(task: norn.ActiveTask):
            try:
                while True:
                    task.sleep(0.05)
            except norn.LeaseLost as e:
                seen.append(e)
                with self.assertRaises(norn.LeaseLost):
                    task.log("too late")

        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, lease=3.0, wait=1)) as w:
            self.status_is(t.id, "running")
            self.c.delete(t.id)
            wait_for(lambda: seen, what="the handler to see the lost lease")
            wait_for(lambda: w.running == 0, what="the handler to return")
        self.assertIsInstance(seen[0], norn.LeaseLost)

    def test_concurrency_limit(self) -> None:
        queue = q("conc")
        lock = threading.Lock()
        now = [0, 0]  # running, most seen
        release = threading.Event()

        def handle(task: norn.ActiveTask):
            with lock:
                now[0] += 1
                now[1] = max(now[1], now[0])
            release.wait(60)
            with lock:
                now[0] -= 1

        self.c.submit_batch([{"queue": queue, "spec": i} for i in range(10)])
        with running(norn.Worker(self.c, {queue: handle}, concurrency=3, claim_batch=10, wait=1)) as w:
            wait_for(lambda: self.c.count(queue=queue, status="running") == 3, what="three tasks claimed")
            wait_for(lambda: now[0] == 3, what="three handlers running")
            self.assertEqual(w.running, 3)
            self.assertEqual(self.c.count(queue=queue, status="ready"), 7, "no claims beyond the free slots")
            release.set()
            wait_for(lambda: self.c.count(queue=queue, status="completed") == 10, what="every task to complete")
        self.assertEqual(now[1], 3)

    def test_capacity(self) -> None:
        queue = q("capacity")
        asked = []
        room = threading.Event()

        def capacity() -> bool:
            asked.append(room.is_set())
            return room.is_set()

        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: lambda task: "ran"}, concurrency=1, wait=1, poll_interval=0.05, capacity=capacity)):
            wait_for(lambda: len(asked) >= 3, what="capacity to be asked again")
            self.assertEqual(self.c.get(t.id).status, "ready", "nothing is claimed without capacity")
            room.set()
            self.assertEqual(self.status_is(t.id, "completed").result, "ran")

    def test_shutdown_finishes_within_grace_and_yields_the_rest(self) -> None:
        queue = q("shutdown")
        finish = threading.Event()
        seen = {}

        def handle(task: norn.ActiveTask):
            if task.spec == "quick":
                finish.wait(60)
                return "finished during the grace period"
            task.wait()  # until the grace period is over
            seen["reason"] = task.reason
            return "ignored: the task was yielded"

        quick = self.c.submit(queue, "quick")
        slow = self.c.submit(queue, "slow")
        # The grace is long enough for "quick" to finish on a loaded machine;
        # "slow" waits all of it.
        w = norn.Worker(self.c, {queue: handle}, concurrency=2, shutdown_grace=5.0, wait=5)
        errs = []
        th = threading.Thread(target=lambda: errs.extend([None]) if w.run(handle_signals=False) is None else None)
        th.start()
        self.status_is(quick.id, "running")
        self.status_is(slow.id, "running")
        self.assertFalse(w.stop(timeout=0))
        finish.set()
        self.assertTrue(w.stop(timeout=30), "run() did not return")
        th.join(5)
        self.assertEqual(errs, [None])
        # Finished within the grace period, so completed rather than yielded.
        # On a loaded machine its report may still be landing when run()
        # gives up waiting for it (grace + 5 s), hence wait_for.
        done = self.status_is(quick.id, "completed", "ready")
        self.assertEqual(done.status, "completed")
        self.assertNotIn("TaskYield", history_types(done))
        back = self.c.get(slow.id)
        self.assertEqual((back.status, back.attempts), ("ready", 0))
        self.assertIn("TaskYield", history_types(back))
        self.assertIsInstance(seen["reason"], norn.Shutdown)

    def test_stop_before_run_and_run_twice(self) -> None:
        w = norn.Worker(self.c, {q("x"): lambda t: None})
        w.stop()
        w.run(handle_signals=False)  # returns at once
        self.assertIsNone(w.id)
        with self.assertRaises(RuntimeError):
            w.run(handle_signals=False)

    def test_refused_worker_raises(self) -> None:
        w = norn.Worker(self.c, {"no spaces allowed": lambda t: None}, wait=1)
        with self.assertRaises(norn.InvalidArgument) as cm:
            w.run(handle_signals=False)
        self.assertTrue(cm.exception.field, cm.exception)

    def test_options_are_checked(self) -> None:
        ok = {"q": lambda t: None}
        for kwargs, field in [
            ({"handlers": {}}, "handlers"),
            ({"handlers": {"q": 5}}, "handlers['q']"),
            ({"queues": ["other"]}, "queues[0]"),
            ({"concurrency": 0}, "concurrency"),
            ({"lease": 0}, "lease"),
            ({"lease": 1, "heartbeat_interval": 2}, "heartbeat_interval"),
            ({"claim_batch": 0}, "claim_batch"),
            ({"wait": 301}, "wait"),
            ({"poll_interval": -1}, "poll_interval"),
            ({"shutdown_grace": -1}, "shutdown_grace"),
            ({"middleware": [None]}, "middleware[0]"),
            ({"capacity": True}, "capacity"),
        ]:
            args = {"handlers": ok, **kwargs}
            with self.assertRaises(norn.InvalidArgument, msg=kwargs) as cm:
                norn.Worker(self.c, **args)
            self.assertEqual(cm.exception.field, field)

    def test_trace_context_is_exposed(self) -> None:
        queue = q("trace")
        seen = []
        t = self.c.submit(queue, None)
        with running(norn.Worker(self.c, {queue: lambda task: seen.append(task.traceparent)}, concurrency=1, wait=1)):
            self.status_is(t.id, "completed")
        # A task submitted without trace context carries none.
        self.assertEqual(seen, [None])
        # One that carries it hands it to the handler as it is.
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        w = norn.Worker(self.c, {queue: lambda task: None})
        rec = norn.Task({"id": "t", "queue": queue, "lease": 1, "traceparent": tp})
        self.assertEqual(norn.ActiveTask(w, norn.worker._Run(rec, "worker-1", 10, 3, 0)).traceparent, tp)


class UnreachableServerTest(unittest.TestCase):
    """With the server gone, no heartbeat succeeds: after a whole lease the
    worker assumes the lease lost and tells the handler to stop."""

    def test_lease_assumed_lost(self) -> None:
        srv = Server()
        self.addCleanup(srv.stop)
        c = norn.Client(srv.url, timeout=2)
        self.addCleanup(c.close)
        queue = q("gone")
        started = threading.Event()
        seen = []

        def handle(task: norn.ActiveTask):
            started.set()
            try:
                while True:
                    task.sleep(0.05)
            except norn.LeaseLost as e:
                seen.append(e)

        c.submit(queue, None)
        w = norn.Worker(c, {queue: handle}, concurrency=1, lease=1.0, wait=1, shutdown_grace=0)
        with running(w):
            self.assertTrue(started.wait(30))
            srv.stop()
            wait_for(lambda: seen, what="the handler to be told its lease is lost")
        self.assertIn("no heartbeat succeeded", str(seen[0]))


class SignalTest(unittest.TestCase):
    """SIGTERM to a worker process yields its unfinished tasks, and a worker
    waiting in a long-poll claim takes them at once."""

    def test_sigterm_yields_unfinished_tasks(self) -> None:
        c = norn.Client(server.url)
        self.addCleanup(c.close)
        queue = q("sigterm")
        ids = [t.id for t in c.submit_batch([{"queue": queue, "spec": i, "timeout": "5m"} for i in range(2)])]
        env = dict(os.environ, PYTHONPATH=PYTHON_ROOT)
        proc = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "worker_proc.py"), server.url, queue],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        wait_for(lambda: c.count(queue=queue, status="running") == 2, what="the worker process to run both tasks")
        first = c.get(ids[0]).owner

        taken = []
        second = norn.Worker(c, {queue: lambda task: taken.append(task.worker) or "second"}, concurrency=2, wait=30)
        with running(second):
            wait_for(lambda: second.id is not None, what="the second worker to register")
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 0, err)
            self.assertIn("handler saw Shutdown", out)
            # The tasks' leases last 5 minutes: done now means yielded, not timed out.
            for tid in ids:
                done = wait_for(lambda tid=tid: (lambda t: t if t.status == "completed" else None)(c.get(tid)), what="the second worker to run the yielded task")
                self.assertEqual(done.result, "second")
                self.assertEqual(done.attempts, 1, "a yielded attempt does not count")
                types = history_types(done)
                self.assertIn("TaskYield", types)
                self.assertNotIn("TaskTimeout", types)
        self.assertEqual(sorted(taken), [second.id, second.id])
        self.assertNotEqual(first, second.id)


class ExampleTest(unittest.TestCase):
    """examples/python/worker.py does what its docstring says."""

    def test_example_worker(self) -> None:
        example = os.path.join(PYTHON_ROOT, "..", "..", "examples", "python", "worker.py")
        # The example serves fixed queue names: a fresh server keeps this
        # test apart from the others.
        srv = Server()
        self.addCleanup(srv.stop)
        c = norn.Client(srv.url)
        self.addCleanup(c.close)
        greet = c.submit("py-greetings", {"name": "Ada"})
        bad = c.submit("py-greetings", {})
        tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        steps = c.submit("py-steps", {"steps": 3}, traceparent=tp)
        env = dict(os.environ, PYTHONPATH=PYTHON_ROOT, NORN_SERVER=srv.url)
        proc = subprocess.Popen([sys.executable, example, "-c", "2", "--trace"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())

        def finished(tid: str):
            t = c.get(tid)
            return t if t.terminal else None

        self.assertEqual(wait_for(lambda: finished(greet.id), what="greeting").result, {"greeting": "Hello, Ada!"})
        aborted = wait_for(lambda: finished(bad.id), what="bad greeting")
        self.assertEqual((aborted.status, aborted.errors[-1]["code"]), ("aborted", "bad_spec"))
        done = wait_for(lambda: finished(steps.id), what="steps")
        self.assertEqual(done.result, {"steps": 3, "resumed_at": 0, "lease": 1})
        self.assertEqual([e.data for e in c.read_log(steps.id)], [{"done": 1}, {"done": 2}, {"done": 3}])
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        # --trace: the attempt's span is logged, a child of the submitted traceparent.
        self.assertRegex(err, r"span process py-steps trace=4bf92f3577b34da6a3ce929d0e0e4736 span=[0-9a-f]{16} "
                              r"parent=00f067aa0ba902b7 outcome=complete")


def readme_code(section: str) -> List[str]:
    """The Python code blocks of a README section, in order."""
    with open(os.path.join(PYTHON_ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read().split("\n### " + section + "\n", 1)[1].split("\n#", 1)[0]
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


class ReadmeTest(unittest.TestCase):
    """The README's examples of dependencies and awaits run as written and
    do what it says."""

    def setUp(self) -> None:
        self.c = norn.Client(server.url)
        self.addCleanup(self.c.close)

    def run_code(self, code: str, ns: dict) -> str:
        out = io.StringIO()
        with mock.patch.dict(os.environ, {"NORN_SERVER": server.url}), contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), ns)
        self.addCleanup(ns["client"].close)
        return out.getvalue()

    def test_dependencies(self) -> None:
        submit, handler = readme_code("Dependencies and their results")
        ns: dict = {}
        self.assertEqual(self.run_code(submit + handler, ns), "blocked run\n")

        def fetch(task: norn.ActiveTask):
            if task.spec["region"] == "us":
                raise norn.Abort("us is down", code="down")
            return task.spec["region"]

        w = norn.Worker(self.c, {"fetch": fetch, "report": ns["make_report"]}, concurrency=2, wait=1)
        with running(w):
            done = wait_for(lambda: (lambda t: t if t.terminal else None)(self.c.get(ns["report"].id)), what="the report")
        self.assertEqual((done.status, done.result), ("completed", {"regions": ["eu"], "missing": [ns["us"].id]}))
        self.assertEqual(done.dependency_results[1].error["code"], "down")

    def test_await(self) -> None:
        (code,) = readme_code("Awaiting children")
        setup, run = code.split("worker.run()", 1)
        ns: dict = {}
        self.run_code(setup, ns)
        with running(ns["worker"]):
            done = wait_for(lambda: (lambda t: t if t.terminal else None)(self.c.get(ns["job"].id)), what="the job")
        self.assertEqual((done.status, done.result, history_types(done).count("TaskAwait")), ("completed", 5, 1))


    def test_signals(self) -> None:
        (code,) = readme_code("Signals")
        setup, rest = code.split("worker.run()", 1)
        send = rest.split("\n", 1)[1]
        ns: dict = {}
        self.run_code(setup, ns)
        with running(ns["worker"]):
            wait_for(lambda: (lambda t: t.status == "scheduled" and t.signal_wait)(self.c.get(ns["job"].id)), what="the job to wait")
            self.run_code(send, ns)
            done = wait_for(lambda: (lambda t: t if t.terminal else None)(self.c.get(ns["job"].id)), what="the job")
        self.assertEqual((done.status, done.result), ("completed", {"paid": 40, "approved_by": "ada"}))


if __name__ == "__main__":
    unittest.main()
