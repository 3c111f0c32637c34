"""Per-key rate limits against a real norn server: a queue's
key_rate_limit and a key's own rate_limit through update_queue, a snooze
with scope "key" from the client and from a worker's handler, and the
refusals."""

from __future__ import annotations

import threading
import unittest
from typing import List

import norn

from .server import Server, unique_queue as q, wait_for
from .test_worker import running

server: Server


def setUpModule() -> None:
    global server
    server = Server()


def tearDownModule() -> None:
    server.stop()


class KeyRateTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = norn.Client(server.url)
        self.addCleanup(self.c.close)

    def claim(self, queue: str, n: int = 10) -> List[norn.Task]:
        wid = self.c.register_worker("keyrate", [queue])
        return self.c.claim(wid, queue, n=n)

    def test_update_queue_sets_key_rates(self) -> None:
        queue = q("kr")
        info = self.c.update_queue(queue, key_rate_limit={"per_second": 0.5, "burst": 2},
                                   keys={"vip": {"rate_limit": {"per_second": 50}}})
        self.assertEqual(info.key_rate_limit, {"per_second": 0.5, "burst": 2})
        self.assertEqual([(k["key"], k.get("rate_limit")) for k in info["keys"]], [("vip", {"per_second": 50, "burst": 50})])
        # Only what the patch names changes: a key's limit keeps its rate.
        info = self.c.update_queue(queue, keys={"vip": {"limit": 3}})
        self.assertEqual([(k["key"], k.get("limit"), k.get("rate_limit")) for k in info["keys"]],
                         [("vip", 3, {"per_second": 50, "burst": 50})])
        # Each key has its own bucket of burst 2: a claim takes two of each
        # key, and the task without a key, and no more.
        for key in ("a", "b"):
            for _ in range(3):
                self.c.submit(queue, None, concurrency_key=key)
        self.c.submit(queue, None)
        got = self.claim(queue)
        self.assertEqual(sorted(t.get("concurrency_key") or "" for t in got), ["", "a", "a", "b", "b"])
        self.assertEqual(self.claim(queue), [])
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.update_queue(queue, fair_by="label:tenant")
        self.assertEqual(cm.exception.field, "fair_by")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.update_queue(queue, key_rate_limit={"per_second": -1})
        self.assertEqual(cm.exception.field, "key_rate_limit.per_second")
        info = self.c.update_queue(queue, key_rate_limit={"per_second": 0}, keys={"vip": {"rate_limit": {"per_second": 0}}})
        self.assertIsNone(info.get("key_rate_limit"))
        # a and b are listed too now: they have running tasks.
        self.assertEqual([(k["key"], k.get("limit"), k.get("rate_limit")) for k in info["keys"] if k["key"] == "vip"], [("vip", 3, None)])

    def test_snooze_with_key_scope(self) -> None:
        queue = q("krsnooze")
        self.c.update_queue(queue, key_rate_limit={"per_second": 100, "burst": 5})
        a0 = self.c.submit(queue, None, concurrency_key="a")
        wid = self.c.register_worker("keyrate", [queue])
        (got,) = self.c.claim(wid, queue, n=1)
        self.assertEqual(got.id, a0.id)
        self.c.snooze(a0.id, wid, got.lease, delay=3600, scope="key")
        self.c.submit(queue, None, concurrency_key="a")
        b0 = self.c.submit(queue, None, concurrency_key="b")
        self.assertEqual([t.id for t in self.c.claim(wid, queue, n=10)], [b0.id], "key a is held back for the hour")
        self.assertEqual(self.c.get(a0.id).status, "scheduled")

    def test_snooze_with_key_scope_refused_without_a_rate(self) -> None:
        queue = q("krnone")
        t = self.c.submit(queue, None, concurrency_key="a")
        wid = self.c.register_worker("keyrate", [queue])
        (got,) = self.c.claim(wid, queue, n=1)
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.snooze(t.id, wid, got.lease, delay=60, scope="key")
        self.assertEqual(cm.exception.field, "scope")
        self.assertEqual(self.c.get(t.id).status, "running", "a refused snooze changes nothing")

    def test_worker_snooze_holds_the_key_back(self) -> None:
        queue = q("krworker")
        self.c.update_queue(queue, key_rate_limit={"per_second": 100, "burst": 5})
        ran: List[str] = []
        lock = threading.Lock()
        first = self.c.submit(queue, None, concurrency_key="a")

        def handle(task: norn.ActiveTask):
            with lock:
                ran.append(task.id)
            if task.id == first.id:
                raise norn.Snooze(3600, scope="key")
            return "ok"

        with running(norn.Worker(self.c, {queue: handle}, concurrency=2, wait=1)):
            self.assertEqual(self._wait_status(first.id, "scheduled").attempts, 0)
            # One submit: the claim that takes b's task sees a's as well.
            a1, b0 = self.c.submit_batch([{"queue": queue, "concurrency_key": "a"}, {"queue": queue, "concurrency_key": "b"}])
            self._wait_status(b0.id, "completed")
            self.assertEqual(self.c.get(a1.id).status, "ready")
        with lock:
            self.assertNotIn(a1.id, ran)

    def test_worker_snooze_without_a_key_rate_snoozes_the_task(self) -> None:
        queue = q("krfallback")
        t = self.c.submit(queue, None, concurrency_key="a")

        def handle(task: norn.ActiveTask):
            raise norn.Snooze(3600, scope="key")

        with running(norn.Worker(self.c, {queue: handle}, concurrency=1, wait=1)):
            s = self._wait_status(t.id, "scheduled")
        self.assertEqual((s.attempts, s.get("errors")), (0, None))
        self.assertGreater((s.time("run_at") - s.time("updated")).total_seconds(), 3500)

    def test_snooze_scope_refused_locally(self) -> None:
        with self.assertRaises(norn.InvalidArgument) as cm:
            norn.Snooze(30, scope="queue")
        self.assertEqual(cm.exception.field, "scope")
        with self.assertRaises(norn.InvalidArgument) as cm:
            norn.Snooze(until_signal="go", scope="key")
        self.assertEqual(cm.exception.field, "scope")

    def _wait_status(self, tid: str, *statuses: str):
        def check():
            t = self.c.get(tid)
            return t if t.status in statuses else None

        return wait_for(check, what=f"task {tid} to be {'/'.join(statuses)}")


if __name__ == "__main__":
    unittest.main()
