"""The client against a real norn server: every call, its errors, streaming."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import tracemalloc
import unittest
import uuid
from unittest import mock

import norn
from norn._wire import format_duration, parse_duration, parse_time

from .server import Server, history_types, unique_queue as q, wait_for

server: Server


def setUpModule() -> None:
    global server
    server = Server()


def tearDownModule() -> None:
    server.stop()




class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = norn.Client(server.url)
        self.addCleanup(self.c.close)

    def status_is(self, tid: str, *statuses: str):
        def check():
            t = self.c.get(tid)
            return t if t.status in statuses else None

        return wait_for(check, what=f"task {tid} to be {'/'.join(statuses)}")

    def claim_one(self, queue: str, **kw):
        wid = self.c.register_worker("test", [queue])
        tasks = self.c.claim(wid, queue, n=1, **kw)
        self.assertEqual(len(tasks), 1)
        return wid, tasks[0]

    # ---- construction ------------------------------------------------------

    def test_defaults_from_environment(self) -> None:
        with mock.patch.dict(os.environ, {"NORN_SERVER": server.url + "/", "NORN_TOKEN": "tok"}):
            c = norn.Client()
        self.assertEqual(c.url, server.url)
        self.assertEqual(c._token, "tok")
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(norn.Client().url, norn.DEFAULT_SERVER)

    def test_bad_url_names_the_field(self) -> None:
        for url in ("ftp://x", "http://", "127.0.0.1:7070"):
            with self.assertRaises(norn.InvalidArgument) as cm:
                norn.Client(url)
            self.assertEqual(cm.exception.field, "server")

    def test_unreachable_server_is_unavailable(self) -> None:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        c = norn.Client(f"http://127.0.0.1:{port}")
        self.addCleanup(c.close)
        with self.assertRaises(norn.Unavailable) as cm:
            c.get("x")
        self.assertIsNone(cm.exception.status)

    def test_closed_client_is_unavailable(self) -> None:
        c = norn.Client(server.url)
        c.close()
        with self.assertRaises(norn.Unavailable):
            c.stats()

    # ---- submit, get ---------------------------------------------------------

    def test_submit_with_every_option(self) -> None:
        queue = q("opts")
        dep = self.c.submit(queue, {"n": 0})
        run_at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        t = self.c.submit(
            queue,
            {"to": "ada@example.com", "n": [1, 2.5, None, True]},
            id="opt-" + uuid.uuid4().hex,
            priority=7,
            labels={"tenant": "acme"},
            run_at=run_at,
            depends_on=[dep.id],
            max_attempts=3,
            retry={"max_retries": 2, "base": 1.5, "max": dt.timedelta(minutes=1)},
            timeout=30,
        )
        self.assertIsInstance(t, norn.Task)
        self.assertFalse(t.duplicate)
        self.assertEqual(t.queue, queue)
        self.assertEqual(t.spec, {"to": "ada@example.com", "n": [1, 2.5, None, True]})
        self.assertEqual(t.priority, 7)
        self.assertEqual(t.labels, {"tenant": "acme"})
        self.assertEqual(t.depends_on, [dep.id])
        self.assertEqual(t.max_attempts, 3)
        self.assertEqual(parse_duration(t.retry["base"]), 1.5)
        self.assertEqual(parse_duration(t.retry["max"]), 60)
        self.assertEqual(t.timeout_seconds, 30)
        self.assertEqual(t.status, "blocked")
        self.assertLess(abs((t.time("run_at") - run_at).total_seconds()), 0.001)
        got = self.c.get(t.id)
        self.assertEqual(got.id, t.id)
        self.assertEqual(got["spec"], t.spec)

    def test_submit_delay_and_duplicate_id(self) -> None:
        queue = q("dup")
        tid = "dup-" + uuid.uuid4().hex
        t = self.c.submit(queue, "x", id=tid, delay="1h")
        self.assertEqual(t.status, "scheduled")
        self.assertGreater((t.time("run_at") - t.time("created")).total_seconds(), 3599)
        again = self.c.submit(queue, "y", id=tid)
        self.assertTrue(again.duplicate)
        self.assertEqual(again.spec, "x")

    def test_invalid_submit_names_the_field(self) -> None:
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit(q("bad"), {}, priority=-1)
        self.assertEqual(cm.exception.field, "priority")
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(cm.exception.code, "invalid_argument")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit("bad queue", {})
        self.assertEqual(cm.exception.field, "queue")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit(q("bad"), {}, delay=-1)
        self.assertEqual(cm.exception.field, "delay")

    def test_too_large_names_the_field(self) -> None:
        with self.assertRaises(norn.TooLarge) as cm:
            self.c.submit(q("big"), "x" * (1 << 20))
        self.assertEqual(cm.exception.field, "spec")
        self.assertEqual(cm.exception.status, 413)

    def test_submit_batch(self) -> None:
        queue = q("batch")
        a = "a-" + uuid.uuid4().hex
        tasks = self.c.submit_batch([
            {"id": a, "queue": queue, "spec": 1},
            {"queue": queue, "spec": 2, "depends_on": [a], "priority": 3},
        ])
        self.assertEqual([t.spec for t in tasks], [1, 2])
        self.assertEqual([t.status for t in tasks], ["ready", "blocked"])
        again = self.c.submit_batch([{"id": a, "queue": queue}, {"queue": queue}])
        self.assertEqual([t.duplicate for t in again], [True, False])
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit_batch([{"queue": queue}, {"queue": "no spaces"}])
        self.assertEqual(cm.exception.field, "tasks[1].queue")
        self.assertEqual(self.c.count(queue=queue), 3, "a refused batch writes nothing")

    def test_get_missing_is_not_found(self) -> None:
        with self.assertRaises(norn.NotFound) as cm:
            self.c.get("no-such-task")
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(norn.InvalidArgument):
            self.c.get("")

    def test_get_many(self) -> None:
        queue = q("many")
        a, b = self.c.submit(queue, 1), self.c.submit(queue, 2)
        tasks, missing = self.c.get_many([b.id, "nope", a.id])
        self.assertEqual([t.id for t in tasks], [b.id, a.id])
        self.assertEqual(missing, ["nope"])
        self.assertEqual(self.c.get_many(["nope"]), ([], ["nope"]))
        self.assertEqual(self.c.get_many([]), ([], []))
        one, missing = self.c.get_many([a.id])
        self.assertEqual(([t.id for t in one], missing), ([a.id], []))

    def test_ids_are_escaped(self) -> None:
        queue = q("esc")
        tid = "ü:é-" + uuid.uuid4().hex
        self.c.submit(queue, None, id=tid)
        self.assertEqual(self.c.get(tid).id, tid)

    # ---- list, count -----------------------------------------------------------

    def test_list_streams_every_match(self) -> None:
        queue = q("list")
        n = 2500  # more than two pages of the paged API
        for i in range(0, n, 500):
            self.c.submit_batch([{"queue": queue, "spec": {"i": j}, "labels": {"even": str(j % 2 == 0)}} for j in range(i, i + 500)])
        it = self.c.list(queue=queue)
        seen = [t.spec["i"] for t in it]
        self.assertEqual(seen, list(range(n)))
        self.assertEqual(len(list(self.c.list(queue=queue, labels={"even": "True"}))), n // 2)
        self.assertEqual(len(list(self.c.list(queue=queue, limit=10))), 10)
        with self.c.list(queue=queue, order="newest", summary=True) as it:
            newest = next(it)
        self.assertEqual(newest.get("spec"), None, "summary view omits the spec")
        self.assertEqual(newest.status, "ready")

    def test_list_memory_stays_constant(self) -> None:
        queue = q("mem")
        blob = "x" * 50_000
        for _ in range(4):
            self.c.submit_batch([{"queue": queue, "spec": {"blob": blob}} for _ in range(100)])
        del blob
        tracing = tracemalloc.is_tracing()
        if not tracing:
            tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            n = 0
            for t in self.c.list(queue=queue):
                n += len(t.spec["blob"])
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            if not tracing:
                tracemalloc.stop()
        self.assertEqual(n, 400 * 50_000)
        # 20 MB went by; holding them (or a page of them) would show here.
        self.assertLess(peak, 2_000_000, f"peak {peak} bytes while streaming 20 MB")

    def test_list_can_stop_early(self) -> None:
        queue = q("early")
        self.c.submit_batch([{"queue": queue, "spec": i} for i in range(50)])
        with self.c.list(queue=queue) as it:
            first = next(it)
        self.assertEqual(first.spec, 0)
        with self.assertRaises(StopIteration):
            next(it)
        self.assertEqual(self.c.count(queue=queue), 50, "the client is still usable")

    def test_list_filters(self) -> None:
        queue = q("filt")
        before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
        a = self.c.submit(queue, 1, id="filt-abc-" + uuid.uuid4().hex)
        self.c.submit(queue, 2, delay=3600)
        self.assertEqual([t.id for t in self.c.list(queue=queue, status="ready")], [a.id])
        self.assertEqual(len(list(self.c.list(queue=[queue], status=["ready", "scheduled"]))), 2)
        self.assertEqual([t.id for t in self.c.list(queue=queue, id_contains="filt-abc")], [a.id])
        self.assertEqual(len(list(self.c.list(queue=queue, created_after=before))), 2)
        self.assertEqual(len(list(self.c.list(queue=queue, created_before=before))), 0)
        self.assertEqual(len(list(self.c.list(queue=queue, status="pending", updated_after=before, updated_before="2199-01-01T00:00:00Z"))), 2)
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.list(queue=queue, status="bogus")
        self.assertEqual(cm.exception.field, "status")

    def test_list_page(self) -> None:
        queue = q("page")
        self.c.submit_batch([{"queue": queue, "spec": i} for i in range(5)])
        page, cursor = self.c.list_page(queue=queue, limit=3)
        self.assertEqual([t.spec for t in page], [0, 1, 2])
        self.assertIsNotNone(cursor)
        page, cursor = self.c.list_page(queue=queue, limit=3, cursor=cursor)
        self.assertEqual([t.spec for t in page], [3, 4])
        self.assertIsNone(cursor)

    def test_count_and_count_groups(self) -> None:
        queue = q("count")
        self.c.submit_batch([{"queue": queue} for _ in range(3)])
        self.c.submit(queue, None, delay=60)
        self.assertEqual(self.c.count(queue=queue), 4)
        self.assertEqual(self.c.count(queue=queue, status="ready"), 3)
        groups = self.c.count_groups(queue=queue)
        self.assertEqual({(g.queue, g.status): g.count for g in groups}, {(queue, "ready"): 3, (queue, "scheduled"): 1})

    # ---- update, cancel, delete, transactions ------------------------------------

    def test_update(self) -> None:
        queue = q("upd")
        t = self.c.submit(queue, None, delay=3600, labels={"a": "1"})
        u = self.c.update(t.id, priority=9, labels={"b": "2"}, run_at=dt.datetime(2000, 1, 1), if_version=t.version)
        self.assertEqual((u.priority, u.labels, u.status), (9, {"b": "2"}, "ready"))
        with self.assertRaises(norn.Conflict) as cm:
            self.c.update(t.id, priority=1, if_version=t.version)
        self.assertEqual(cm.exception.status, 409)
        cleared = self.c.update(t.id, labels={})
        self.assertFalse(cleared.labels)

    def test_cancel(self) -> None:
        queue = q("cancel")
        t = self.c.submit(queue, None)
        c = self.c.cancel(t.id)
        self.assertEqual(c.status, "cancelled")
        self.assertIn("TaskCancel", history_types(self.c.get(t.id)))
        queue2 = q("cancel2")
        self.c.submit(queue2, None)
        wid, task = self.claim_one(queue2)
        self.c.complete(task.id, wid, task.lease)
        with self.assertRaises(norn.Conflict):
            self.c.cancel(task.id)
        with self.assertRaises(norn.NotFound):
            self.c.cancel("no-such-task")

    def test_delete_and_delete_matching(self) -> None:
        queue = q("del")
        t = self.c.submit(queue, None)
        self.c.delete(t.id)
        with self.assertRaises(norn.NotFound):
            self.c.get(t.id)
        with self.assertRaises(norn.NotFound):
            self.c.delete(t.id)
        self.c.submit_batch([{"queue": queue, "labels": {"k": "v" if i < 3 else "w"}} for i in range(5)])
        self.assertEqual(self.c.delete_matching(queue=queue, labels={"k": "v"}), 3)
        self.assertEqual(self.c.count(queue=queue), 2)
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.delete_matching()
        self.assertEqual(cm.exception.field, "filter")

    def test_transact(self) -> None:
        queue = q("txn")
        a = self.c.submit(queue, "a", delay=60)
        b = self.c.submit(queue, "b")
        d = self.c.submit(queue, "d")
        res = self.c.transact(
            submit=[{"queue": queue, "spec": "new", "id": "txn-" + uuid.uuid4().hex}],
            update=[{"id": a.id, "priority": 4, "if_version": a.version}],
            cancel=[b.id],
            delete=[d.id],
            require=[{"id": a.id, "version": a.version}],
        )
        self.assertEqual(res.submitted[0].spec, "new")
        self.assertFalse(res.submitted[0].duplicate)
        self.assertEqual(res.updated[0].priority, 4)
        self.assertEqual(res.cancelled[0].status, "cancelled")
        self.assertEqual(res.deleted, 1)
        with self.assertRaises(norn.Conflict):
            self.c.transact(submit=[{"queue": queue}], require=[{"id": a.id, "version": a.version}])
        self.assertEqual(self.c.count(queue=queue), 3, "a refused transaction writes nothing")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.transact(update=[{"id": a.id, "priority": -5}])
        self.assertTrue(cm.exception.field.startswith("update[0]"), cm.exception.field)

    def test_unique_key(self) -> None:
        queue = q("unique")
        first = self.c.submit(queue, {"n": 1}, unique_key="invoice-7", unique_for="1h")
        again = self.c.submit(queue, {"n": 2}, unique_key="invoice-7")
        self.assertEqual((again.id, again.duplicate, again.unique_key), (first.id, True, "invoice-7"))
        self.assertFalse(first.duplicate)
        other = self.c.submit(q("unique-other"), None, unique_key="invoice-7")
        self.assertNotEqual(other.id, first.id, "keys are per queue")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit(queue, None, unique_key="x" * 300)
        self.assertEqual(cm.exception.field, "unique_key")

    def test_debounce_replaces_a_waiting_holder(self) -> None:
        queue = q("debounce")
        first = self.c.submit(queue, {"v": 1}, unique_key="k", delay="2s", labels={"a": "1"})
        got = self.c.submit(queue, {"v": 2}, unique_key="k", on_duplicate="replace", delay=3600,
                            labels={"b": "2"}, priority=5, debounce_max="1m")
        self.assertEqual((got.id, got.duplicate, got.replaced), (first.id, True, True))
        self.assertEqual((got.spec, got.labels, got.priority, got.version), ({"v": 2}, {"b": "2"}, 5, 2))
        # The hour of delay is capped at debounce_max after the first submit.
        self.assertEqual(got.time("run_at") - first.time("created"), dt.timedelta(minutes=1))
        self.assertEqual(history_types(self.c.get(first.id))[-1], "TaskReplace")
        kept = self.c.submit(queue, {"v": 3}, unique_key="k")
        self.assertEqual((kept.id, kept.duplicate, kept.replaced, kept.spec), (first.id, True, False, {"v": 2}))
        self.assertFalse(first.replaced)

    def test_debounce_gives_a_running_holder_one_successor(self) -> None:
        queue = q("debounce-run")
        holder = self.c.submit(queue, {"v": 1}, unique_key="k")
        wid, _ = self.claim_one(queue)
        succ = self.c.submit(queue, {"v": 2}, unique_key="k", on_duplicate="replace")
        self.assertNotEqual(succ.id, holder.id)
        self.assertEqual((succ.duplicate, succ.replaced, succ.status), (False, False, "blocked"))
        self.assertEqual((succ.depends_on, succ.on_dependency_failure, succ.unique_key), ([holder.id], "run", "k"))
        again = self.c.submit(queue, {"v": 3}, unique_key="k", on_duplicate="replace")
        self.assertEqual((again.id, again.replaced, again.spec), (succ.id, True, {"v": 3}))
        self.assertEqual(self.c.count(queue=queue), 2)

    def test_debounce_in_a_batch(self) -> None:
        queue = q("debounce-batch")
        holder = self.c.submit(queue, 1, unique_key="k", delay="1h")
        tasks = self.c.submit_batch([
            {"queue": queue, "spec": 0},
            {"queue": queue, "spec": 2, "unique_key": "k", "on_duplicate": "replace"},
            {"queue": queue, "spec": 3, "unique_key": "other"},
        ])
        self.assertEqual([t.replaced for t in tasks], [False, True, False])
        self.assertEqual([t.duplicate for t in tasks], [False, True, False])
        self.assertEqual((tasks[1].id, tasks[1].spec, tasks[1].status), (holder.id, 2, "ready"))
        rec = self.c.transact(submit=[{"queue": queue, "spec": 4, "unique_key": "other", "on_duplicate": "replace"}])
        self.assertEqual([(t.id, t.replaced, t.spec) for t in rec.submitted], [(tasks[2].id, True, 4)])

    def test_debounce_bad_input_names_the_field(self) -> None:
        queue = q("debounce-bad")
        for opts, field in (
            ({"on_duplicate": "replace"}, "on_duplicate"),
            ({"unique_key": "k", "on_duplicate": "merge"}, "on_duplicate"),
            ({"unique_key": "k", "debounce_max": "1m"}, "debounce_max"),
            ({"unique_key": "k", "on_duplicate": "replace", "debounce_max": -1}, "debounce_max"),
        ):
            with self.assertRaises(norn.InvalidArgument, msg=str(opts)) as cm:
                self.c.submit(queue, None, **opts)
            self.assertEqual(cm.exception.field, field, str(opts))
        self.assertEqual(self.c.count(queue=queue), 0)

    def test_depends_on_and_unique_key_filters(self) -> None:
        queue = q("filters")
        p = self.c.submit(queue, None)
        k1 = self.c.submit(queue, None, depends_on=[p.id])
        k2 = self.c.submit(queue, None, depends_on=[p.id], unique_key="uk-f")
        self.c.submit(queue, None)
        with self.c.list(depends_on=p.id) as tasks:
            self.assertEqual(sorted(t.id for t in tasks), sorted([k1.id, k2.id]))
        self.assertEqual(self.c.count(queue=queue, depends_on=p.id), 2)
        self.assertEqual([t.id for t in self.c.list_page(queue=queue, unique_key="uk-f")[0]], [k2.id])

    def test_max_runtime(self) -> None:
        queue = q("maxrt")
        t = self.c.submit(queue, None, max_runtime=30, delay="1h")
        self.assertEqual(t.max_runtime, "30s")
        self.assertEqual(self.c.update_queue(queue, max_runtime="2m").defaults["max_runtime"], "2m0s")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit(queue, None, max_runtime=-1)
        self.assertEqual(cm.exception.field, "max_runtime")

    def test_throughput(self) -> None:
        qa, qb = q("tp-a"), q("tp-b")
        self.c.submit_batch([{"queue": qa}, {"queue": qa}, {"queue": qb}])

        def submitted(h: norn.Record) -> int:
            return sum(p["submitted"] for p in h.points)

        wait_for(lambda: submitted(self.c.throughput(qa)) == 2, what="two submits of the queue counted")
        h = self.c.throughput([qa, qb], since="1h")
        self.assertEqual((submitted(h), h.queues), (3, [qa, qb]))
        self.assertEqual(submitted(self.c.throughput(qb, since=dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=10))), 1)
        self.assertEqual(submitted(self.c.throughput(qb, since=600)), 1)
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.throughput(since="yesterday")
        self.assertEqual(cm.exception.field, "since")

    def test_retry(self) -> None:
        queue = q("retry")
        t = self.c.submit(queue, None)
        wid, got = self.claim_one(queue)
        self.c.abort(t.id, wid, got.lease, "broken")
        back = self.c.retry(t.id)
        self.assertEqual((back.status, back.attempts), ("ready", 0))
        self.assertIn("TaskRedrive", history_types(self.c.get(t.id)))
        _, again = self.claim_one(queue)
        self.assertGreater(again.lease, got.lease, "fencing stays monotonic")
        with self.assertRaises(norn.Conflict):
            self.c.retry(t.id)  # running: nothing to retry
        c1, c2 = self.c.submit(queue, None), self.c.submit(queue, None)
        self.c.cancel(c1.id)
        self.c.cancel(c2.id)
        later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        self.assertEqual(self.c.retry(c1.id, run_at=later).status, "scheduled")
        self.assertEqual(self.c.retry_matching(queue=queue, status="cancelled"), 1)
        self.assertEqual(self.c.get(c2.id).status, "ready")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.retry_matching()
        self.assertEqual(cm.exception.field, "filter")
        self.assertEqual(self.c.cancel_matching(queue=queue, status="ready,scheduled"), 2)
        self.assertEqual((self.c.get(c1.id).status, self.c.get(c2.id).status), ("cancelled", "cancelled"))
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.cancel_matching()
        self.assertEqual(cm.exception.field, "filter")

    def test_snooze(self) -> None:
        queue = q("snooze")
        t = self.c.submit(queue, None)
        wid, got = self.claim_one(queue)
        self.c.snooze(t.id, wid, got.lease, delay=3600)
        s = self.c.get(t.id)
        self.assertEqual((s.status, s.attempts), ("scheduled", 0))
        self.assertGreater((s.time("run_at") - s.time("updated")).total_seconds(), 3500)
        self.assertIn("TaskSnooze", history_types(s))
        with self.assertRaises(norn.LeaseLost):
            self.c.snooze(t.id, wid, got.lease, delay=1)

    def test_signals(self) -> None:
        queue = q("signals")
        t = self.c.submit(queue, None)
        first = self.c.send_signal(t.id, "approval", {"by": "ada"})
        self.assertEqual((first.seq, first.name, first.data), (1, "approval", {"by": "ada"}))
        self.assertIsNotNone(parse_time(first.time))
        second = self.c.send_signal(t.id, "note")
        self.assertEqual((second.seq, second.name, second.data), (2, "note", None))
        self.assertEqual([(s.seq, s.name) for s in self.c.list_signals(t.id)], [(1, "approval"), (2, "note")])
        self.assertEqual([s.seq for s in self.c.list_signals(t.id, after=1)], [2])
        self.assertEqual(self.c.list_signals(t.id, after=2), [])
        self.assertEqual([s.name for s in self.c.get(t.id).signals], ["approval", "note"])

        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.send_signal(t.id, "")
        self.assertEqual(cm.exception.field, "name")
        with self.assertRaises(norn.NotFound):
            self.c.send_signal("no-such-task-" + uuid.uuid4().hex, "approval")
        with self.assertRaises(norn.NotFound):
            self.c.list_signals("no-such-task-" + uuid.uuid4().hex)
        self.c.cancel(t.id)
        with self.assertRaises(norn.Conflict):
            self.c.send_signal(t.id, "approval")
        self.assertEqual(len(self.c.list_signals(t.id)), 2, "a refused signal changes nothing")

    def test_snooze_until_signal(self) -> None:
        queue = q("sigwait")
        t = self.c.submit(queue, None)
        wid, got = self.claim_one(queue)
        self.assertIsNone(got.signal_wait)
        for kw, field in (({"until_signal": "go", "delay": 5}, "until_signal"),
                          ({"until_signal": "go", "timeout": -1}, "timeout"),
                          ({"delay": 5, "timeout": "1h"}, "timeout"),
                          ({"until_signal": "x" * 129}, "until_signal")):
            with self.subTest(kw=kw), self.assertRaises(norn.InvalidArgument) as cm:
                self.c.snooze(t.id, wid, got.lease, **kw)
            self.assertEqual(cm.exception.field, field)
        self.c.snooze(t.id, wid, got.lease, until_signal="go", timeout="1h")
        s = self.c.get(t.id)
        self.assertEqual((s.status, s.attempts, s.signal_wait.name, s.signal_wait.received), ("scheduled", 0, "go", False))
        self.assertGreater((s.time("run_at") - s.time("updated")).total_seconds(), 3500)
        self.c.send_signal(t.id, "other")
        self.assertEqual(self.c.get(t.id).status, "scheduled", "another name does not end the wait")
        self.c.send_signal(t.id, "go", 7)
        self.assertEqual(self.c.get(t.id).status, "ready")
        _, again = self.claim_one(queue)
        self.assertEqual((again.id, again.signal_wait.name, again.signal_wait.received), (t.id, "go", True))
        self.assertEqual([(x.name, x.data) for x in again.signals], [("other", None), ("go", 7)])

    def test_heartbeat_signals(self) -> None:
        queue = q("sigbeat")
        t = self.c.submit(queue, None)
        wid, got = self.claim_one(queue)
        deadline, sigs = self.c.heartbeat_signals(t.id, wid, got.lease)
        self.assertEqual(sigs, [])
        self.assertIsNotNone(parse_time(deadline))
        self.c.send_signal(t.id, "a", 1)
        self.c.send_signal(t.id, "b", 2)
        self.assertEqual([(x.seq, x.data) for x in self.c.heartbeat_signals(t.id, wid, got.lease, progress=0.5)[1]], [(1, 1), (2, 2)])
        self.assertEqual([x.name for x in self.c.heartbeat_signals(t.id, wid, got.lease, 1)[1]], ["b"])
        self.assertEqual(self.c.get(t.id).progress, 0.5)

    def test_snooze_until_signal_times_out(self) -> None:
        queue = q("sigtimeout")
        t = self.c.submit(queue, None)
        wid, got = self.claim_one(queue)
        self.c.snooze(t.id, wid, got.lease, until_signal="go", timeout="1s")
        self.assertEqual(self.c.get(t.id).status, "scheduled")
        claimed = wait_for(lambda: self.c.claim(wid, queue), what="the wait to time out")
        self.assertEqual((claimed[0].id, claimed[0].signal_wait.name, claimed[0].signal_wait.received), (t.id, "go", False))
        self.assertEqual(claimed[0].signals, [])

    def test_schedules(self) -> None:
        queue = q("sched")
        name = q("nightly")
        s = self.c.set_schedule(name, queue=queue, cron="0 3 * * *", spec={"report": True}, timezone="Europe/Paris", labels={"k": "v"}, timeout=30)
        self.assertEqual((s.name, s.queue, s.cron, s.timezone), (name, queue, "0 3 * * *", "Europe/Paris"))
        self.assertTrue(s.next_fire)
        self.assertEqual(self.c.schedule(name).spec, {"report": True})
        self.assertIn(name, [x.name for x in self.c.schedules()])
        self.assertTrue(self.c.update_schedule(name, paused=True).paused)
        t = self.c.trigger_schedule(name)
        self.assertEqual((t.queue, t.spec, t.labels.get("norn.schedule")), (queue, {"report": True}, name))
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.set_schedule(name, queue=queue, cron="not cron")
        self.assertEqual(cm.exception.field, "cron")
        self.c.delete_schedule(name)
        with self.assertRaises(norn.NotFound):
            self.c.schedule(name)

    def test_schedule_fires(self) -> None:
        queue = q("tick")
        name = q("every-second")
        self.c.set_schedule(name, queue=queue, cron="@every 1s", spec="tick", overlap="skip", catch_up="none")
        self.addCleanup(self.c.delete_schedule, name)
        wait_for(lambda: self.c.count(queue=queue, labels={"norn.schedule": name}) >= 1, what="the schedule's first tick")
        first = next(iter(self.c.list(queue=queue, limit=1)))
        self.assertTrue(first.id.startswith(f"schedule:{name}:"), first.id)
        self.assertEqual(first.spec, "tick")

    def test_sequence(self) -> None:
        queue = q("seq")
        key = "account/7"  # a slash: the key is one escaped path segment
        a = self.c.submit(queue, 1, sequence_key=key, priority=1)
        b = self.c.submit(queue, 2, sequence_key=key, priority=9)
        self.assertEqual((a.sequence_key, a.status), (key, "ready"))
        self.assertEqual((b.sequence_key, b.status), (key, "blocked"))
        seq = self.c.sequence(queue, key)
        self.assertEqual((seq.queue, seq.key, seq.head, seq.head_status, seq.halted, seq.waiting), (queue, key, a.id, "ready", False, 1))
        # The head runs first though the waiting member's priority is higher.
        wid, got = self.claim_one(queue)
        self.assertEqual(got.id, a.id)
        self.assertEqual(self.c.claim(wid, queue, n=1), [])
        self.c.abort(a.id, wid, got.lease, "broken")
        seq = self.c.sequence(queue, key)
        self.assertEqual((seq.head, seq.head_status, seq.halted, seq.waiting), (a.id, "aborted", True, 1))
        with self.assertRaises(norn.Conflict):
            self.c.retry(b.id)
        halted = self.c.sequences(queue, halted=True)
        self.assertEqual([(x.key, x.head, x.halted, x.waiting) for x in halted], [(key, a.id, True, 1)])
        self.c.delete(a.id)
        self.assertEqual(self.c.sequences(queue, halted=True), [])
        self.assertEqual([x.head for x in self.c.sequences(queue, limit=10)], [b.id])
        self.assertEqual(self.status_is(b.id, "ready").sequence_key, key)
        self.assertEqual(self.c.sequence(queue, key).head, b.id)
        empty = self.c.sequence(queue, "never-used")
        self.assertEqual((empty.head, empty.halted, empty.waiting), (None, False, 0))
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit(queue, None, sequence_key=key, depends_on=[b.id])
        self.assertEqual(cm.exception.field, "sequence_key")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.sequence(queue, "")
        self.assertEqual(cm.exception.field, "key")

    def test_sequence_on_failure_continue(self) -> None:
        queue = q("seqc")
        updated = self.c.update_queue(queue, sequence_on_failure="continue")
        self.assertEqual(updated.defaults.get("sequence_on_failure"), "continue")
        a = self.c.submit(queue, None, sequence_key="k")
        b = self.c.submit(queue, None, sequence_key="k")
        wid, got = self.claim_one(queue)
        self.c.abort(a.id, wid, got.lease, "broken")
        self.status_is(b.id, "ready")
        seq = self.c.sequence(queue, "k")
        self.assertEqual((seq.head, seq.halted, seq.waiting), (b.id, False, 0))
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.update_queue(queue, sequence_on_failure="skip")
        self.assertEqual(cm.exception.field, "sequence_on_failure")
        back = self.c.update_queue(queue, sequence_on_failure="halt")
        self.assertIsNone(back.defaults.get("sequence_on_failure"), "halt is the default, shown as absent")

    # ---- queues and administration -----------------------------------------------

    def test_queues_stats_workers_whoami_sweep(self) -> None:
        queue = q("adm")
        self.c.submit(queue, None)
        self.assertIn(queue, [x.name for x in self.c.queues()])
        info = self.c.queue(queue)
        self.assertEqual(info.counts.get("ready"), 1)
        updated = self.c.update_queue(queue, paused=True, timeout=45, max_attempts=4, retry={"max_retries": 1, "base": 2}, retention={"completed": 3600})
        self.assertTrue(updated.paused)
        self.assertTrue(self.c.queue(queue).paused)
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.update_queue(queue, nonsense=True)
        self.assertTrue(cm.exception.field)
        stats = self.c.stats()
        self.assertGreaterEqual(stats.total, 1)
        wid = self.c.register_worker("adm-worker", [queue])
        self.assertIn(wid, [w.id for w in self.c.workers()])
        me = self.c.whoami()
        self.assertEqual((me.role, me.auth), ("admin", False))
        swept = self.c.sweep()
        self.assertIn("timed_out", swept)

    def test_events(self) -> None:
        queue = q("ev")
        events = self.c.events(queue=queue)
        got = []
        done = threading.Event()

        def follow() -> None:
            for e in events:
                got.append(e)
                if e.kind == "TaskCancel":
                    done.set()
                    return

        th = threading.Thread(target=follow, daemon=True)
        th.start()
        t = self.c.submit(queue, None)
        self.c.cancel(t.id)
        self.assertTrue(done.wait(60), got)
        th.join(5)
        events.close()
        self.assertEqual([e.kind for e in got], ["TaskSubmit", "TaskCancel"])
        self.assertTrue(all(e.task_id == t.id and e.queue == queue for e in got))

    def test_wait(self) -> None:
        queue = q("wait")
        t = self.c.submit(queue, None)
        wid, got = self.claim_one(queue)
        with self.assertRaises(TimeoutError):
            self.c.wait(t.id, timeout=0.3)
        th = threading.Thread(target=lambda: self.c.complete(t.id, wid, got.lease, "result"))
        result = []
        waiter = threading.Thread(target=lambda: result.append(self.c.wait(t.id, timeout=30)))
        waiter.start()
        th.start()
        waiter.join(30)
        th.join()
        self.assertEqual((result[0].status, result[0].result), ("completed", "result"))
        self.assertEqual(self.c.wait(t.id, timeout=1).status, "completed", "a finished task returns at once")
        d = self.c.submit(queue, None, delay=3600)
        deleter = threading.Timer(0.2, self.c.delete, args=(d.id,))
        deleter.start()
        with self.assertRaises(norn.NotFound):
            self.c.wait(d.id, timeout=30)
        deleter.join()

    def test_close_a_stream_from_another_thread(self) -> None:
        queue = q("quiet")
        stream = self.c.events(queue=queue)
        got, ended = [], threading.Event()

        def read() -> None:
            for e in stream:
                got.append(e)
            ended.set()

        th = threading.Thread(target=read, daemon=True)
        th.start()
        self.c.submit(queue, None)
        # After its one event the reader waits for the next, which never comes.
        wait_for(lambda: got, what="the first event")
        stream.close()
        self.assertTrue(ended.wait(60), "close did not end the blocked reader")
        self.assertEqual([e.kind for e in got], ["TaskSubmit"])

    # ---- worker calls ------------------------------------------------------------

    def test_claim_heartbeat_log_complete(self) -> None:
        queue = q("lease")
        t = self.c.submit(queue, {"x": 1}, timeout=5)
        wid, got = self.claim_one(queue, timeout=20, wait=1)
        self.assertEqual((got.id, got.status, got.lease, got.owner, got.attempts), (t.id, "running", 1, wid, 1))
        first = got.time("deadline")
        deadline = self.c.heartbeat(t.id, wid, 1, progress=0.5, extend=dt.timedelta(seconds=60))
        self.assertGreater(parse_time(deadline), first)
        self.assertEqual(self.c.get(t.id).progress, 0.5)
        e1 = self.c.append_log(t.id, wid, 1, {"step": 1})
        e2 = self.c.append_log(t.id, wid, 1, {"step": 2}, seq=2)
        self.assertEqual((e1.seq, e2.seq, e2.lease), (1, 2, 1))
        with self.assertRaises(norn.Conflict):
            self.c.append_log(t.id, wid, 1, {"step": "other"}, seq=2)  # seq 2 holds other data
        self.assertEqual([e.data for e in self.c.read_log(t.id)], [{"step": 1}, {"step": 2}])
        self.assertEqual([e.seq for e in self.c.read_log(t.id, after=1, limit=5)], [2])
        self.c.complete(t.id, wid, 1, {"ok": True})
        done = self.c.get(t.id)
        self.assertEqual((done.status, done.result, done.progress), ("completed", {"ok": True}, 1))
        self.assertTrue(done.terminal)

    def test_on_dependency_failure_run(self) -> None:
        # A run-policy dependent runs after one dependency completed and one
        # failed, and reads both outcomes in depends_on order; an abort-policy
        # dependent of the failed one is aborted.
        deps, dependents = q("deps"), q("dependents")
        ok = self.c.submit(deps, None)
        bad = self.c.submit(deps, None, max_attempts=1)
        runs = self.c.submit(dependents, None, depends_on=[ok.id, bad.id], on_dependency_failure="run")
        aborts = self.c.submit(dependents, None, depends_on=bad.id)
        self.assertEqual((runs.status, runs.on_dependency_failure), ("blocked", "run"))
        wid = self.c.register_worker("test", [deps])
        for got in self.c.claim(wid, deps, n=2):
            if got.id == ok.id:
                self.c.complete(got.id, wid, got.lease, {"n": 1})
            else:
                self.c.abort(got.id, wid, got.lease, "broken", "no luck")
        self.assertEqual(self.status_is(aborts.id, "aborted").errors[-1]["code"], "dependency_failed")
        _, got = self.claim_one(dependents)
        self.assertEqual(got.id, runs.id)
        self.assertEqual([(r.id, r.status) for r in got.dependency_results], [(ok.id, "completed"), (bad.id, "aborted")])
        self.assertEqual(got.dependency_results[0].result, {"n": 1})
        self.assertIsNone(got.dependency_results[0].error)
        self.assertEqual(got.dependency_results[1].error["code"], "broken")
        self.assertEqual(self.c.get(runs.id).dependency_results, got.dependency_results)
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit(dependents, None, depends_on=ok.id, on_dependency_failure="ignore")
        self.assertEqual(cm.exception.field, "on_dependency_failure")

    def test_await_children(self) -> None:
        parents, kids = q("parents"), q("kids")
        p = self.c.submit(parents, None)
        wid, got = self.claim_one(parents)
        cid = "kid-" + uuid.uuid4().hex
        task, children = self.c.await_children(p.id, wid, got.lease, [
            {"queue": kids, "spec": 1, "id": cid},
            {"queue": kids, "spec": 2, "priority": 5},
        ])
        self.assertEqual((task.id, task.status, task.attempts), (p.id, "blocked", 0))
        self.assertIn("TaskAwait", history_types(task))
        self.assertEqual([c.spec for c in children], [1, 2])
        self.assertEqual(children[0].id, cid)
        self.assertFalse(children[0].duplicate)
        self.assertEqual(task.depends_on, [c.id for c in children])
        with self.assertRaises(norn.LeaseLost):
            self.c.heartbeat(p.id, wid, got.lease)  # the await ended the lease
        kw = self.c.register_worker("kid", [kids])
        for k in self.c.claim(kw, kids, n=2):
            self.c.complete(k.id, kw, k.lease, k.spec * 10)
        self.status_is(p.id, "ready")
        _, again = self.claim_one(parents)
        self.assertEqual((again.id, again.attempts), (p.id, 1))
        self.assertEqual([(r.id, r.status, r.result) for r in again.dependency_results],
                         [(children[0].id, "completed", 10), (children[1].id, "completed", 20)])

    def test_await_child_failure(self) -> None:
        # abort (default): a failed child aborts the parent; continue: the
        # parent runs and sees the failure.
        parents, kids = q("parents"), q("kids")
        aborted = self.c.submit(parents, None)
        continued = self.c.submit(parents, None)
        wid = self.c.register_worker("test", [parents])
        got = {t.id: t for t in self.c.claim(wid, parents, n=2)}
        self.c.await_children(aborted.id, wid, got[aborted.id].lease, [{"queue": kids, "max_attempts": 1}])
        self.c.await_children(continued.id, wid, got[continued.id].lease, [{"queue": kids, "max_attempts": 1}],
                              on_child_failure="continue")
        kw = self.c.register_worker("kid", [kids])
        for k in self.c.claim(kw, kids, n=2):
            self.c.abort(k.id, kw, k.lease, "kid_broke")
        self.assertEqual(self.status_is(aborted.id, "aborted").errors[-1]["code"], "dependency_failed")
        _, again = self.claim_one(parents)
        self.assertEqual(again.id, continued.id)
        self.assertEqual([(r.status, r.error["code"]) for r in again.dependency_results], [("aborted", "kid_broke")])

    def test_await_stale_lease_changes_nothing(self) -> None:
        parents, kids = q("parents"), q("kids")
        p = self.c.submit(parents, None)
        wid, old = self.claim_one(parents)
        self.c.yield_(p.id, wid, old.lease)
        wid2, cur = self.claim_one(parents)
        cid = "kid-" + uuid.uuid4().hex
        with self.assertRaises(norn.LeaseLost) as cm:
            self.c.await_children(p.id, wid, old.lease, [{"queue": kids, "id": cid}])
        self.assertEqual((cm.exception.code, cm.exception.status), ("lease_lost", 409))
        with self.assertRaises(norn.NotFound):
            self.c.get(cid)
        now = self.c.get(p.id)
        self.assertEqual((now.status, now.lease, now.owner, now.depends_on), ("running", cur.lease, wid2, None))
        self.assertNotIn("TaskAwait", history_types(now))
        self.c.complete(p.id, wid2, cur.lease, "fine")

    def test_await_invalid_names_the_field(self) -> None:
        parents, kids = q("parents"), q("kids")
        p = self.c.submit(parents, None)
        wid, got = self.claim_one(parents)
        cases = [
            ({"tasks": [{"queue": kids}], "on_child_failure": "ignore"}, "on_child_failure"),
            ({"tasks": []}, "tasks"),
            ({"tasks": [{"queue": "bad queue"}]}, "tasks[0].queue"),
        ]
        for kw, field in cases:
            with self.subTest(field=field):
                with self.assertRaises(norn.InvalidArgument) as cm:
                    self.c.await_children(p.id, wid, got.lease, **kw)
                self.assertEqual(cm.exception.field, field)
        now = self.c.get(p.id)
        self.assertEqual((now.status, now.lease, now.depends_on), ("running", got.lease, None))
        self.c.complete(p.id, wid, got.lease)

    def test_expiry(self) -> None:
        queue = q("expiry")
        t = self.c.submit(queue, None, expire_in=0.05)
        self.assertIsNotNone(t.get("expires_at"))
        done = wait_for(lambda: (lambda g: g if g.status == "aborted" else None)(self.c.get(t.id)), what="the task to expire")
        self.assertEqual(done.errors[-1]["code"], "expired")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.submit(queue, None, expires_at="2001-01-01T00:00:00Z")
        self.assertEqual(cm.exception.field, "tasks[0].expires_at")

    def test_claim_weights(self) -> None:
        a, b = q("wa"), q("wb")
        self.c.submit_batch([{"queue": a} for _ in range(30)] + [{"queue": b} for _ in range(30)])
        wid = self.c.register_worker("weighted", [a, b])
        got = [self.c.claim(wid, [a, b], weights={b: 1000})[0].queue for _ in range(20)]
        # b first with probability 1000/1001 per claim, though a is listed first.
        self.assertGreaterEqual(got.count(b), 18)
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.claim(wid, [a], weights={b: 2})
        self.assertEqual(cm.exception.field, f'weights["{b}"]')
        with self.assertRaises(norn.InvalidArgument) as cm:
            norn.Worker(self.c, {a: lambda t: None}, weights={a: 0})
        self.assertEqual(cm.exception.field, f"weights[{a!r}]")

    def test_claim_long_poll_wakes_on_submit(self) -> None:
        queue = q("poll")
        wid = self.c.register_worker("poller", [queue])
        result = []
        th = threading.Thread(target=lambda: result.extend(self.c.claim(wid, [queue], n=5, wait=120)))
        th.start()
        # The API does not show that a claim is waiting, so submit and
        # require the answer well before the 120 s wait would end on its own.
        self.c.submit(queue, "wake")
        th.join(60)
        self.assertFalse(th.is_alive(), "long poll did not answer the submit")
        self.assertEqual([t.spec for t in result], ["wake"])
        self.assertEqual(self.c.claim(wid, queue, n=1), [])

    def test_fail_retries_then_abort(self) -> None:
        queue = q("fail")
        t = self.c.submit(queue, None, retry={"max_retries": 1, "base": "1ms"})
        wid, got = self.claim_one(queue)
        self.c.fail(t.id, wid, got.lease, "boom", "first try", {"n": 1})
        after = wait_for(lambda: (lambda x: x if x.status == "ready" else None)(self.c.get(t.id)), what="retry to be ready")
        self.assertEqual(after.errors[-1]["code"], "boom")
        self.assertEqual(after.errors[-1]["args"], {"n": 1})
        wid2, got2 = self.claim_one(queue)
        self.assertEqual((got2.lease, got2.attempts), (2, 2))
        self.c.abort(t.id, wid2, got2.lease, "fatal", "no more")
        self.assertEqual(self.c.get(t.id).status, "aborted")

    def test_yield_and_lease_lost(self) -> None:
        queue = q("yield")
        t = self.c.submit(queue, None)
        wid, got = self.claim_one(queue)
        self.c.yield_(t.id, wid, got.lease)
        back = self.c.get(t.id)
        self.assertEqual((back.status, back.attempts), ("ready", 0))
        self.assertIn("TaskYield", history_types(back))
        wid2, got2 = self.claim_one(queue)
        with self.assertRaises(norn.LeaseLost) as cm:
            self.c.heartbeat(t.id, wid, got.lease)
        self.assertEqual((cm.exception.code, cm.exception.status), ("lease_lost", 409))
        with self.assertRaises(norn.LeaseLost):
            self.c.complete(t.id, wid, got.lease)
        self.c.complete(t.id, wid2, got2.lease)

    def test_cancelled_task_refuses_its_worker(self) -> None:
        queue = q("cw")
        t = self.c.submit(queue, None)
        wid, got = self.claim_one(queue)
        self.c.cancel(t.id)
        with self.assertRaises(norn.Cancelled) as cm:
            self.c.heartbeat(t.id, wid, got.lease)
        self.assertEqual(cm.exception.code, "cancelled")
        with self.assertRaises(norn.Cancelled):
            self.c.append_log(t.id, wid, got.lease, "x")

    def test_lease_batch(self) -> None:
        queue = q("lb")
        self.c.submit_batch([{"queue": queue} for _ in range(3)])
        wid = self.c.register_worker("lb", [queue])
        a, b, c = self.c.claim(wid, queue, n=3)
        res = self.c.lease_batch([
            {"op": "heartbeat", "id": a.id, "worker": wid, "lease": a.lease, "progress": 0.25, "extend": 30},
            {"op": "complete", "id": b.id, "worker": wid, "lease": b.lease, "result": {"r": 1}},
            {"op": "heartbeat", "id": c.id, "worker": wid, "lease": c.lease + 5},
            {"op": "yield", "id": c.id, "worker": wid, "lease": c.lease},
            {"op": "fail", "id": a.id, "worker": wid, "lease": a.lease, "error": {"code": "x"}},
        ])
        self.assertIsInstance(res[0], norn.Record)
        self.assertTrue(parse_time(res[0].deadline))
        self.assertEqual(res[1], {})
        self.assertIsInstance(res[2], norn.LeaseLost)
        self.assertEqual(res[3], {})
        self.assertEqual(self.c.get(b.id).result, {"r": 1})
        self.assertEqual(self.c.get(c.id).status, "ready")

    def test_claim_errors(self) -> None:
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.claim("worker-1", ["ok"], n=5000)
        self.assertEqual(cm.exception.field, "n")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.claim("worker-1", ["ok"], wait=600)
        self.assertEqual(cm.exception.field, "wait")

    # ---- connections ---------------------------------------------------------------

    def test_concurrent_calls_share_the_client(self) -> None:
        queue = q("conc")
        errs = []

        def submit(i: int) -> None:
            try:
                for j in range(20):
                    self.c.submit(queue, {"i": i, "j": j})
            except Exception as e:  # pragma: no cover - reported below
                errs.append(e)

        threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(errs, [])
        self.assertEqual(self.c.count(queue=queue), 160)

    def test_error_bodies_from_elsewhere(self) -> None:
        e = norn.errors.from_response(502, b"<html>bad gateway</html>")
        self.assertIsInstance(e, norn.Unavailable)
        self.assertIn("502", str(e))
        e = norn.errors.from_response(418, b"")
        self.assertIsInstance(e, norn.Internal)
        e = norn.errors.from_response(409, b'{"error":{"code":"new_code","message":"m","field":"f"}}')
        self.assertEqual((type(e), e.code, e.field), (norn.NornError, "new_code", "f"))


class AuthTest(unittest.TestCase):
    """Tokens: unauthenticated and permission_denied, and NORN_TOKEN."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server("--auth-token", "adm1n:admin", "--auth-token", "cl1ent:client:jobs")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def test_roles(self) -> None:
        with norn.Client(self.server.url) as anonymous, self.assertRaises(norn.Unauthenticated) as cm:
            anonymous.stats()
        self.assertEqual(cm.exception.status, 401)
        with norn.Client(self.server.url, "wrong") as wrong, self.assertRaises(norn.Unauthenticated):
            wrong.stats()
        client = norn.Client(self.server.url, "cl1ent")
        self.addCleanup(client.close)
        client.submit("jobs", None)
        with self.assertRaises(norn.PermissionDenied) as cm:
            client.submit("other", None)
        self.assertEqual(cm.exception.status, 403)
        with self.assertRaises(norn.PermissionDenied):
            client.sweep()
        with mock.patch.dict(os.environ, {"NORN_SERVER": self.server.url, "NORN_TOKEN": "adm1n"}):
            admin = norn.Client()
        self.addCleanup(admin.close)
        self.assertEqual(admin.whoami().role, "admin")
        self.assertEqual(admin.count(queue="jobs"), 1)


@unittest.skipUnless(shutil.which("openssl"), "openssl makes the test certificate")
class TLSTest(unittest.TestCase):
    """https: the server's certificate is verified against ssl_context."""

    def test_https(self) -> None:
        d = tempfile.mkdtemp(prefix="norn-py-tls-")
        self.addCleanup(shutil.rmtree, d, True)
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
            check=True, capture_output=True,
        )
        srv = Server("--tls-cert", cert, "--tls-key", key)
        self.addCleanup(srv.stop)
        self.assertTrue(srv.url.startswith("https://"), srv.url)
        with norn.Client(srv.url, ssl_context=ssl.create_default_context(cafile=cert)) as c:
            self.assertEqual(c.submit("tls", {"x": 1}).spec, {"x": 1})
        with norn.Client(srv.url) as untrusting, self.assertRaises(norn.Unavailable) as cm:
            untrusting.stats()
        self.assertIn("CERTIFICATE_VERIFY_FAILED", str(cm.exception))


class WireTest(unittest.TestCase):
    def test_durations(self) -> None:
        cases = [(10, "10s"), (1.5, "1500ms"), (0, "0h"), (90, "90s"), (3600, "1h"), (dt.timedelta(minutes=2), "2m"),
                 (0.000001, "1us"), (1e-9, "1ns"), ("1h30m", "1h30m")]
        for value, want in cases:
            self.assertEqual(format_duration(value, "f"), want, value)
            self.assertAlmostEqual(parse_duration(format_duration(value, "f")), parse_duration(want))
        for bad in (-1, float("nan"), "10", "abc", True, [1]):
            with self.assertRaises(norn.InvalidArgument) as cm:
                format_duration(bad, "timeout")
            self.assertEqual(cm.exception.field, "timeout")
        self.assertEqual(parse_duration("1h2m3.5s"), 3723.5)
        self.assertEqual(parse_duration("1m0s"), 60)

    def test_times(self) -> None:
        t = parse_time("2030-01-02T03:04:05.123456789Z")
        self.assertEqual(t, dt.datetime(2030, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc))
        self.assertEqual(parse_time("2030-01-02T03:04:05+02:00").utcoffset(), dt.timedelta(hours=2))
        self.assertIsNone(parse_time("0001-01-01T00:00:00Z"))
        with self.assertRaises(ValueError):
            parse_time("yesterday")


if __name__ == "__main__":
    unittest.main()

