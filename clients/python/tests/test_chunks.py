"""Batch claims (claim min and linger) and the worker's chunk handler,
against a real norn server."""

from __future__ import annotations

import threading
import time
import unittest
from typing import Any, List, Tuple

import norn

from .server import Server, history_types, unique_queue as q, wait_for
from .test_worker import running

server: Server


def setUpModule() -> None:
    global server
    server = Server()


def tearDownModule() -> None:
    server.stop()


class RecordingClient(norn.Client):
    """Records every claim: when it was sent, its min and how many tasks
    it answered."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.claims: List[Tuple[float, Any, Any, int, int]] = []
        self._mu = threading.Lock()

    def claim(self, *args: Any, **kwargs: Any):  # type: ignore[override]
        sent = time.monotonic()
        out = super().claim(*args, **kwargs)
        with self._mu:
            self.claims.append((sent, kwargs.get("min"), kwargs.get("linger"), kwargs.get("n"), len(out)))
        return out

    def empty_claim_since(self, t: float) -> bool:
        with self._mu:
            return any(sent > t and got == 0 for sent, _, _, _, got in self.claims)


class ChunkTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = RecordingClient(server.url)
        self.addCleanup(self.c.close)

    def status_is(self, tid: str, *statuses: str):
        def check():
            t = self.c.get(tid)
            return t if t.status in statuses else None

        return wait_for(check, what=f"task {tid} to be {'/'.join(statuses)}")

    def test_claim_min_and_linger(self) -> None:
        queue = q("claimmin")
        wid = self.c.register_worker("chunks", [queue])
        self.c.submit(queue, 1)
        self.assertEqual(self.c.claim(wid, queue, n=5, min=2), [])
        self.c.submit(queue, 2)
        got = self.c.claim(wid, queue, n=5, min=2)
        self.assertEqual(sorted(t.spec for t in got), [1, 2])

        self.c.submit(queue, 3)
        start = time.monotonic()
        got = self.c.claim(wid, queue, n=5, min=3, linger=0.3, wait=10)
        self.assertEqual([t.spec for t in got], [3])
        self.assertGreaterEqual(time.monotonic() - start, 0.25, "answered before the linger")

        for kwargs, field in [({"n": 2, "min": 3}, "min"), ({"n": 2, "linger": 1}, "linger"), ({"n": 2, "min": 1, "linger": 1}, "linger")]:
            with self.assertRaises(norn.InvalidArgument, msg=kwargs) as cm:
                self.c.claim(wid, queue, **kwargs)
            self.assertEqual(cm.exception.field, field)

    def test_claim_group_by(self) -> None:
        queue = q("claimgroup")
        wid = self.c.register_worker("chunks", [queue])
        for spec, tenant in ((1, "acme"), (2, "bolt"), (3, "acme"), (4, "bolt"), (5, "bolt")):
            self.c.submit(queue, spec, labels={"tenant": tenant})
        # acme comes first but has two of three: bolt's three answer.
        got = self.c.claim(wid, queue, n=10, min=3, group_by="label:tenant")
        self.assertEqual(sorted(t.spec for t in got), [2, 4, 5])
        got = self.c.claim(wid, queue, n=10, group_by="label:tenant")
        self.assertEqual(sorted(t.spec for t in got), [1, 3])
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.claim(wid, queue, n=2, group_by="tenant")
        self.assertEqual(cm.exception.field, "group_by")

    def test_chunk_group_by(self) -> None:
        queue = q("chunkgroup")
        seen: List[List[str]] = []

        def handle(tasks: List[norn.ActiveTask]):
            seen.append(sorted(t.spec for t in tasks))

        w = norn.Worker(self.c, queues=[queue], chunk_handler=handle, chunk_min=2, chunk_group_by="concurrency_key",
                        concurrency=4, wait=0.2, poll_interval=0.05)
        with running(w):
            tasks = [self.c.submit(queue, spec, concurrency_key=spec[0]) for spec in ("x1", "y1", "x2", "y2")]
            for t in tasks:
                self.status_is(t.id, "completed")
        self.assertEqual(sorted(seen), [["x1", "x2"], ["y1", "y2"]])

    def test_chunk_of_min_arrives_in_one_call(self) -> None:
        queue = q("chunkmin")
        seen: List[List[int]] = []

        def handle(tasks: List[norn.ActiveTask]):
            seen.append(sorted(t.spec for t in tasks))

        w = norn.Worker(self.c, queues=[queue], chunk_handler=handle, chunk_min=3, concurrency=4, wait=0.2, poll_interval=0.05)
        with running(w):
            a, b = self.c.submit(queue, 1), self.c.submit(queue, 2)
            mark = time.monotonic()
            wait_for(lambda: self.c.empty_claim_since(mark), what="an empty claim with two of three ready")
            self.assertEqual(seen, [])
            c = self.c.submit(queue, 3)
            for t in (a, b, c):
                self.status_is(t.id, "completed")
        self.assertEqual(seen, [[1, 2, 3]])
        for _, mn, linger, n, _ in self.c.claims:
            if mn is None:
                continue  # a claim before the worker's
            self.assertEqual((mn, linger, n), (3, None, 4))

    def test_linger_hands_out_fewer(self) -> None:
        queue = q("chunklinger")
        seen: List[Tuple[float, List[int]]] = []

        def handle(tasks: List[norn.ActiveTask]):
            seen.append((time.monotonic(), sorted(t.spec for t in tasks)))

        w = norn.Worker(self.c, queues=[queue], chunk_handler=handle, chunk_min=5, chunk_linger=0.4, concurrency=5, wait=1)
        with running(w):
            before = time.monotonic()
            a, b = self.c.submit_batch([{"queue": queue, "spec": 1}, {"queue": queue, "spec": 2}])
            self.status_is(a.id, "completed")
            self.status_is(b.id, "completed")
        self.assertEqual([ids for _, ids in seen], [[1, 2]])
        self.assertGreaterEqual(seen[0][0] - before, 0.4, "the chunk ran before the linger")

    def test_outcomes_per_task(self) -> None:
        queue = q("chunkoutcomes")
        seen: List[List[str]] = []

        def handle(tasks: List[norn.ActiveTask]):
            seen.append(sorted(t.spec for t in tasks))
            out: List[Any] = []
            for t in tasks:
                if t.spec == "ok":
                    out.append({"done": t.spec})
                elif t.spec == "flaky" and t.attempts == 1:
                    out.append(norn.Fail("try again", code="upstream_down", retry_in="10ms"))
                elif t.spec == "flaky":
                    out.append(None)
                elif t.spec == "bad":
                    out.append(norn.Abort("bad input"))
                else:
                    out.append(norn.Snooze(3600))
            return out

        retry = {"max_retries": 3, "base": "1h"}
        ids = {s: self.c.submit(queue, s, retry=retry).id for s in ("ok", "flaky", "bad", "later")}
        w = norn.Worker(self.c, queues=[queue], chunk_handler=handle, chunk_min=4, chunk_linger=0.1, concurrency=4, wait=1)
        with running(w):
            ok = self.status_is(ids["ok"], "completed")
            flaky = self.status_is(ids["flaky"], "completed")
            bad = self.status_is(ids["bad"], "aborted")
            later = self.status_is(ids["later"], "scheduled")
        self.assertEqual(ok.result, {"done": "ok"})
        self.assertEqual((flaky.attempts, [e["code"] for e in flaky.errors]), (2, ["upstream_down"]))
        self.assertEqual((bad.attempts, bad.errors[0]["description"]), (1, "bad input"))
        self.assertEqual((later.attempts, later.errors or []), (0, []))
        self.assertIn("TaskSnooze", history_types(later))
        self.assertEqual(seen, [["bad", "flaky", "later", "ok"], ["flaky"]])

    def test_raise_and_wrong_count(self) -> None:
        queue = q("chunkraise")

        def handle(tasks: List[norn.ActiveTask]):
            if tasks[0].spec == "raise":
                raise norn.Abort("the whole chunk is bad", code="bad_chunk")
            return [None]  # one outcome for two tasks

        retry = {"max_retries": 3}
        w = norn.Worker(self.c, queues=[queue], chunk_handler=handle, chunk_min=2, concurrency=2, wait=1)
        with running(w):
            r = self.c.submit_batch([{"queue": queue, "spec": "raise", "retry": retry}] * 2)
            for t in r:
                got = self.status_is(t.id, "aborted")
                self.assertEqual(got.errors[0]["code"], "bad_chunk")
            r = self.c.submit_batch([{"queue": queue, "spec": "short", "retry": retry}] * 2)
            for t in r:
                got = self.status_is(t.id, "aborted")
                self.assertEqual(got.errors[0]["code"], "invalid_outcomes")
                self.assertIn("1 outcomes for 2 tasks", got.errors[0]["description"])

    def test_shutdown_waits_for_a_running_chunk(self) -> None:
        queue = q("chunkstop")
        started, release = threading.Event(), threading.Event()
        cancelled: List[bool] = []

        def handle(tasks: List[norn.ActiveTask]):
            started.set()
            release.wait(60)
            cancelled.extend(t.cancelled for t in tasks)

        w = norn.Worker(self.c, queues=[queue], chunk_handler=handle, chunk_min=2, concurrency=2, wait=1, shutdown_grace=60,
                        lease=0.6, heartbeat_interval=0.2)
        th = threading.Thread(target=lambda: w.run(handle_signals=False))
        th.start()
        r = self.c.submit_batch([{"queue": queue, "spec": i} for i in range(2)])
        self.assertTrue(started.wait(30))
        self.assertFalse(w.stop(timeout=1.5), "run() returned while a chunk was running")
        release.set()
        self.assertTrue(w.stop(timeout=30), "run() did not return")
        th.join(5)
        # Heartbeats held both leases through the drain, longer than a lease.
        self.assertEqual(cancelled, [False, False])
        for t in r:
            done = self.c.get(t.id)
            self.assertEqual((done.status, done.attempts), ("completed", 1))

    def test_options_are_checked(self) -> None:
        h = lambda tasks: None  # noqa: E731
        for kwargs, field in [
            ({"handlers": {"q": h}, "chunk_handler": h}, "chunk_handler"),
            ({"chunk_handler": 5}, "chunk_handler"),
            ({"chunk_handler": h, "queues": None}, "queues"),
            ({"chunk_handler": h, "concurrency": 4, "chunk_min": 5}, "chunk_min"),
            ({"chunk_handler": h, "concurrency": 4, "chunk_min": 3, "chunk_max": 2}, "chunk_min"),
            ({"chunk_handler": h, "chunk_min": -1}, "chunk_min"),
            ({"chunk_handler": h, "concurrency": 4, "chunk_max": 5}, "chunk_max"),
            ({"chunk_handler": h, "chunk_linger": 1}, "chunk_linger"),
            ({"chunk_handler": h, "chunk_min": 2, "chunk_linger": -1}, "chunk_linger"),
            ({"chunk_handler": h, "middleware": [lambda t, n: n(t)]}, "middleware"),
            ({"handlers": {"q": h}, "chunk_min": 2}, "chunk_min"),
            ({"chunk_handler": h, "chunk_group_by": "tenant"}, "chunk_group_by"),
            ({"handlers": {"q": h}, "chunk_group_by": "concurrency_key"}, "chunk_group_by"),
        ]:
            args = {"queues": ["q"], **kwargs}
            with self.assertRaises(norn.InvalidArgument, msg=kwargs) as cm:
                norn.Worker(self.c, **args)
            self.assertEqual(cm.exception.field, field, kwargs)
        w = norn.Worker(self.c, queues=["q"], chunk_handler=h, concurrency=6, chunk_min=2)
        self.assertEqual(w.chunk_max, 6)


if __name__ == "__main__":
    unittest.main()
