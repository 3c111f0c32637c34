"""Batches against a real norn server: members join at submit, callbacks
fire once the sealed batch's members have all ended."""

from __future__ import annotations

import contextlib
import io
import os
import unittest
import uuid
from unittest import mock

import norn

from .server import PYTHON_ROOT, Server, unique_queue as q, wait_for

server: Server


def setUpModule() -> None:
    global server
    server = Server()


def tearDownModule() -> None:
    server.stop()


def bid(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


class BatchTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = norn.Client(server.url)
        self.addCleanup(self.c.close)

    def run_all(self, queue: str, outcome: str = "complete") -> None:
        """Claims every ready task of queue and ends it through the worker
        API: complete, or abort."""
        wid = self.c.register_worker("batch-test", [queue])
        while True:
            got = self.c.claim(wid, queue, n=10)
            if not got:
                return
            for t in got:
                if outcome == "complete":
                    self.c.complete(t.id, wid, t.lease, {"done": t.spec})
                else:
                    self.c.abort(t.id, wid, t.lease, "boom", "failed on purpose")

    def fired(self, id: str) -> dict:
        """Sweeps, then awaits the batch being done: the monitor may fire
        the callbacks itself before the sweep gets to them."""
        self.c.sweep()

        def done():
            b = self.c.get_batch(id)
            return b if b.state == "done" else None

        return wait_for(done, what=f"batch {id} done")

    def test_callbacks_fire_once_after_seal_and_members_ended(self) -> None:
        work, after = q("bwork"), q("bafter")
        id = bid("report")
        created = self.c.create_batch(
            id=id,
            labels={"kind": "report"},
            on_success={"queue": after, "spec": {"notify": "ok"}, "labels": {"team": "a"}, "priority": 2},
            on_complete={"queue": after, "spec": {"notify": "ended"}, "timeout": 60},
        )
        b = created.batch
        self.assertEqual((b.id, b.state, b.total, b.labels), (id, "open", 0, {"kind": "report"}))
        self.assertEqual(created.tasks, [])
        self.assertEqual(b.on_success["queue"], after)
        self.assertEqual(b.on_complete["timeout"], "1m0s")

        t1 = self.c.submit(work, 1, batch=id)
        t2 = self.c.submit(work, 2, batch=id, id=bid("member"))
        more = self.c.submit_batch([{"queue": work, "spec": 3, "batch": id}])
        self.assertEqual([t.batch for t in (t1, t2, *more)], [id, id, id])
        self.assertEqual(self.c.get(t1.id).batch, id)
        b = self.c.get_batch(id)
        self.assertEqual((b.state, b.total, b.counts["ready"]), ("open", 3, 3))

        # Every member ends, but the batch is open: more may join, so
        # nothing fires.
        self.run_all(work)
        self.assertEqual(self.c.sweep().callbacks, 0)
        b = self.c.get_batch(id)
        self.assertEqual((b.state, b.counts["completed"], b.complete_task), ("open", 3, None))
        self.assertEqual(self.c.count(queue=after), 0)

        sealed = self.c.seal_batch(id)
        self.assertIn(sealed.state, ("sealed", "done"))
        self.assertTrue(sealed.sealed)
        b = self.fired(id)
        self.assertEqual(b.final["completed"], 3)
        self.assertEqual(b.complete_task, f"norn:batch:{id}:complete")
        self.assertEqual(b.success_task, f"norn:batch:{id}:success")

        complete = self.c.get(b.complete_task)
        self.assertEqual((complete.queue, complete.spec, complete.timeout), (after, {"notify": "ended"}, "1m0s"))
        self.assertEqual(complete.labels, {
            "norn.batch": id, "norn.callback": "complete", "norn.total": "3",
            "norn.completed": "3", "norn.aborted": "0", "norn.cancelled": "0",
        })
        success = self.c.get(b.success_task)
        self.assertEqual((success.queue, success.spec, success.priority), (after, {"notify": "ok"}, 2))
        self.assertEqual((success.labels["team"], success.labels["norn.callback"], success.labels["norn.batch"]), ("a", "success", id))

        # Once: sweeping again, or sealing again, submits nothing more.
        self.assertEqual(self.c.sweep().callbacks, 0)
        self.assertEqual(self.c.seal_batch(id).state, "done")
        self.assertEqual(self.c.count(queue=after), 2)
        self.assertEqual(self.c.count(labels={"norn.batch": id}), 2)

    def test_success_does_not_fire_when_a_member_failed(self) -> None:
        work, after = q("bfail"), q("bfail-after")
        id = bid("mixed")
        self.c.create_batch(id=id, on_success={"queue": after, "spec": "ok"}, on_complete={"queue": after, "spec": "ended"})
        self.c.submit(work, "good", batch=id)
        self.run_all(work)
        self.c.submit(work, "bad", batch=id)
        self.run_all(work, outcome="abort")
        self.c.seal_batch(id)
        b = self.fired(id)
        self.assertEqual((b.final["completed"], b.final["aborted"], b.success_task), (1, 1, None))
        complete = self.c.get(b.complete_task)
        self.assertEqual((complete.spec, complete.labels["norn.completed"], complete.labels["norn.aborted"]), ("ended", "1", "1"))
        with self.assertRaises(norn.NotFound):
            self.c.get(f"norn:batch:{id}:success")
        self.assertEqual(self.c.count(queue=after), 1)

    def test_create_sealed_with_members(self) -> None:
        work, after = q("bsealed"), q("bsealed-after")
        id = bid("sealed")
        created = self.c.create_batch(
            id=id,
            on_complete={"queue": after},
            seal=True,
            tasks=[{"queue": work, "spec": i, "delay": 3600 if i == 0 else None} for i in range(3)],
        )
        self.assertEqual((created.batch.state, created.batch.total), ("sealed", 3))
        self.assertEqual([t.spec for t in created.tasks], [0, 1, 2])
        self.assertEqual({t.batch for t in created.tasks}, {id})
        self.assertEqual([t.duplicate for t in created.tasks], [False, False, False])
        self.assertEqual(created.tasks[0].status, "scheduled")

        # Sealed: no task can join any more, alone or in a batch submit.
        # The store names the refused member as in a batch submit, also for
        # a single submit (as it does for depends_on).
        with self.assertRaises(norn.Conflict) as cm:
            self.c.submit(work, None, batch=id)
        self.assertEqual((cm.exception.status, cm.exception.field), (409, "tasks[0].batch"))
        self.assertIn("sealed", str(cm.exception))
        with self.assertRaises(norn.Conflict) as cm:
            self.c.submit_batch([{"queue": work}, {"queue": work, "batch": id}])
        self.assertEqual(cm.exception.field, "tasks[1].batch")
        self.assertEqual(self.c.get_batch(id).total, 3, "a refused join adds nothing")

        # A sealed batch with a pending member waits for it.
        self.run_all(work)
        self.c.sweep()
        self.assertEqual(self.c.get_batch(id).state, "sealed")
        self.c.update(created.tasks[0].id, run_at="2000-01-01T00:00:00Z")
        self.c.sweep()
        self.run_all(work)
        b = self.fired(id)
        self.assertEqual(self.c.get(b.complete_task).labels["norn.total"], "3")

    def test_task_filters(self) -> None:
        work = q("bfilter")
        id, other = bid("filter"), bid("filter-other")
        self.c.create_batch(id=id)
        self.c.create_batch(id=other)
        members = [self.c.submit(work, i, batch=id) for i in range(3)]
        self.c.submit(work, "other", batch=other)
        self.c.submit(work, "none")
        ids = sorted(t.id for t in members)

        with self.c.list(batch=id) as tasks:
            self.assertEqual(sorted(t.id for t in tasks), ids)
        page, _ = self.c.list_page(queue=work, batch=id, limit=10)
        self.assertEqual(sorted(t.id for t in page), ids)
        self.assertEqual(self.c.count(batch=id), 3)
        self.assertEqual(self.c.count(queue=work), 5)
        self.assertEqual(self.c.count_groups(batch=id)[0].count, 3)

        self.assertEqual(self.c.cancel_matching(batch=id), 3)
        self.assertEqual(self.c.count(batch=other, status="cancelled"), 0)
        self.assertEqual(self.c.retry_matching(batch=id), 3)
        self.assertEqual(self.c.count(batch=id, status="ready"), 3)
        self.assertEqual(self.c.delete_matching(batch=id), 3)
        self.assertEqual(self.c.count(queue=work), 2)
        self.assertEqual(self.c.get_batch(id).total, 0)

        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.count(batch="x" * 200)
        self.assertEqual(cm.exception.field, "batch")

    def test_list_batches(self) -> None:
        suite = uuid.uuid4().hex[:8]
        ids = sorted(bid(f"list-{i}") for i in range(3))
        for i, id in enumerate(ids):
            self.c.create_batch(id=id, labels={"suite": suite, "n": str(i)}, seal=(i == 1))
        self.assertEqual([b.id for b in self.c.list_batches(labels={"suite": suite})], ids)
        self.assertEqual([b.id for b in self.c.list_batches(state="open", labels={"suite": suite})], [ids[0], ids[2]])
        # Sealed with no member: done as soon as the monitor sees it.
        self.c.sweep()
        wait_for(lambda: self.c.get_batch(ids[1]).state == "done", what="the empty sealed batch done")
        self.assertEqual([b.id for b in self.c.list_batches(state="done", labels={"suite": suite})], [ids[1]])
        self.assertEqual([b.id for b in self.c.list_batches(labels={"suite": suite, "n": "2"})], [ids[2]])

        first = self.c.list_batches(labels={"suite": suite}, limit=2)
        self.assertEqual([b.id for b in first], ids[:2])
        rest = self.c.list_batches(labels={"suite": suite}, limit=2, after=first[-1].id)
        self.assertEqual([b.id for b in rest], ids[2:])
        self.assertEqual(self.c.list_batches(labels={"suite": suite}, after=ids[-1]), [])

        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.list_batches(state="closed")
        self.assertEqual(cm.exception.field, "state")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.list_batches(limit=5000)
        self.assertEqual(cm.exception.field, "limit")

    def test_delete_batch(self) -> None:
        work = q("bdelete")
        keep, drop = bid("keep"), bid("drop")
        self.c.create_batch(id=keep)
        kept = self.c.submit(work, None, batch=keep)
        self.assertEqual(self.c.delete_batch(keep), 0)
        with self.assertRaises(norn.NotFound):
            self.c.get_batch(keep)
        self.assertEqual(self.c.get(kept.id).batch, keep, "the members stay")
        with self.assertRaises(norn.Conflict):
            self.c.create_batch(id=keep)  # its remaining members still name it

        self.c.create_batch(id=drop, tasks=[{"queue": work}, {"queue": work}])
        self.assertEqual(self.c.delete_batch(drop, members=True), 2)
        self.assertEqual(self.c.count(batch=drop), 0)
        self.assertEqual(self.c.count(queue=work), 1)
        with self.assertRaises(norn.NotFound):
            self.c.delete_batch(drop)

    def test_errors(self) -> None:
        work = q("berr")
        missing = bid("missing")
        with self.assertRaises(norn.NotFound) as cm:
            self.c.submit(work, None, batch=missing)
        self.assertEqual((cm.exception.status, cm.exception.field), (404, "tasks[0].batch"))
        self.assertIn(missing, str(cm.exception))
        with self.assertRaises(norn.NotFound) as cm:
            self.c.submit_batch([{"queue": work}, {"queue": work, "batch": missing}])
        self.assertEqual(cm.exception.field, "tasks[1].batch")
        self.assertEqual(self.c.count(queue=work), 0, "a refused batch submit writes nothing")
        for call in (self.c.get_batch, self.c.seal_batch, self.c.delete_batch):
            with self.assertRaises(norn.NotFound):
                call(missing)
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.get_batch("")
        self.assertEqual(cm.exception.field, "id")

        id = bid("dup")
        self.c.create_batch(id=id)
        with self.assertRaises(norn.Conflict):
            self.c.create_batch(id=id)
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.create_batch(on_complete={"queue": work, "id": "mine"})
        self.assertEqual(cm.exception.field, "on_complete.id")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.create_batch(on_success={"queue": work, "labels": {"norn.batch": "x"}})
        self.assertEqual(cm.exception.field, "on_success.labels")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.create_batch(on_success={"queue": work, "timeout": -1})
        self.assertEqual(cm.exception.field, "on_success.timeout")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.create_batch(id=bid("bad"), tasks=[{"queue": work, "batch": "elsewhere"}])
        self.assertEqual(cm.exception.field, "tasks[0].batch")
        with self.assertRaises(norn.InvalidArgument) as cm:
            self.c.create_batch(on_complete="not a task")  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "on_complete")

    def test_readme_example(self) -> None:
        """The README's example runs as written, and its batch fires as the
        README says once the members complete."""
        with open(os.path.join(PYTHON_ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        section = readme.split("### Batches", 1)[1]
        code = section.split("```python\n", 1)[1].split("```", 1)[0]
        ns: dict = {}
        out = io.StringIO()
        with mock.patch.dict(os.environ, {"NORN_SERVER": server.url}), contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), ns)
        ns["client"].close()
        self.assertEqual(out.getvalue(), "sealed 3 3\n3\n")
        id = ns["batch"].id
        self.run_all("regions")
        b = self.fired(id)
        self.assertEqual(self.c.get(f"norn:batch:{id}:success").spec, {"publish": "q3"})
        complete = self.c.get(b.complete_task)
        self.assertEqual((complete.queue, complete.priority, complete.labels["norn.completed"]), ("alerts", 5, "3"))

    def test_server_picks_the_id(self) -> None:
        b = self.c.create_batch().batch
        self.assertTrue(b.id)
        self.assertEqual(self.c.get_batch(b.id).created, b.created)


class ScopedBatchTest(unittest.TestCase):
    """A queue-scoped token uses the batches whose callbacks submit to its
    queues; the others look like batches that do not exist."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = Server("--auth-token", "adm1n:admin", "--auth-token", "cl1ent:client:jobs")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def test_scope(self) -> None:
        admin = norn.Client(self.server.url, "adm1n")
        client = norn.Client(self.server.url, "cl1ent")
        self.addCleanup(admin.close)
        self.addCleanup(client.close)
        admin.create_batch(id="theirs", on_complete={"queue": "other"})
        admin.create_batch(id="ours", on_complete={"queue": "jobs"})
        admin.submit("other", None, batch="ours")

        self.assertEqual([b.id for b in client.list_batches()], ["ours"])
        for call in (client.get_batch, client.seal_batch, client.delete_batch):
            with self.assertRaises(norn.NotFound):
                call("theirs")
        with self.assertRaises(norn.PermissionDenied) as cm:
            client.create_batch(on_complete={"queue": "other"})
        self.assertEqual(cm.exception.status, 403)
        self.assertEqual(client.submit("jobs", None, batch="ours").batch, "ours")
        self.assertEqual(client.get_batch("ours").total, 2)
        # With members, a scoped token deletes only those of its queues.
        self.assertEqual(client.delete_batch("ours", members=True), 1)
        self.assertEqual(admin.count(batch="ours"), 1)
        self.assertEqual(admin.get_batch("theirs").state, "open")


if __name__ == "__main__":
    unittest.main()
