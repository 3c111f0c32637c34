// Sequences: sequence_key at submit, sequence_on_failure on a queue and
// Client.sequence, against a real server.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Client, Conflict, InvalidArgument } from "../dist/index.js";
import { claimOne, startServer, waitStatus } from "./server.mjs";

let srv;
let c;

before(async () => {
  srv = await startServer();
  c = new Client({ url: srv.url });
});
after(async () => {
  await srv?.stop();
});

const state = (s) => [s.head, s.head_status, s.halted, s.waiting];

describe("sequences", () => {
  test("members run one at a time in submit order; an aborted head halts the sequence", async () => {
    const key = "account/7"; // a slash: the key is one escaped path segment
    const a = await c.submit("seq", 1, { sequence_key: key, priority: 1 });
    const b = await c.submit("seq", 2, { sequence_key: key, priority: 9 });
    assert.deepEqual([a.sequence_key, a.status, b.sequence_key, b.status], [key, "ready", key, "blocked"]);
    const s = await c.sequence("seq", key);
    assert.deepEqual([s.queue, s.key, ...state(s)], ["seq", key, a.id, "ready", false, 1]);

    // The head goes first though the waiting member's priority is higher.
    const [wid, got] = await claimOne(c, "seq");
    assert.equal(got.id, a.id);
    assert.deepEqual(await c.claim(wid, "seq", { n: 1 }), []);
    await c.abort(a.id, wid, got.lease, { code: "broken" });
    assert.deepEqual(state(await c.sequence("seq", key)), [a.id, "aborted", true, 1]);
    await assert.rejects(c.retry(b.id), Conflict);
    assert.deepEqual((await c.sequences("seq", { halted: true })).map((x) => [x.key, x.head, x.halted, x.waiting]), [[key, a.id, true, 1]]);

    await c.delete(a.id);
    assert.equal((await waitStatus(c, b.id, "ready")).sequence_key, key);
    assert.deepEqual(state(await c.sequence("seq", key)), [b.id, "ready", false, 0]);
    assert.deepEqual(await c.sequences("seq", { halted: true }), []);
    assert.deepEqual((await c.sequences("seq", { limit: 10 })).map((x) => x.head), [b.id]);
    assert.deepEqual(state(await c.sequence("seq", "never-used")), [undefined, undefined, false, 0]);

    await assert.rejects(c.submit("seq", null, { sequence_key: key, depends_on: [b.id] }), (e) => e instanceof InvalidArgument && e.field === "sequence_key");
    await assert.rejects(c.sequence("seq", ""), (e) => e instanceof InvalidArgument && e.field === "key");
  });

  test("a queue with sequence_on_failure continue moves on past an aborted head", async () => {
    const q = await c.updateQueue("seqc", { sequence_on_failure: "continue" });
    assert.equal(q.defaults.sequence_on_failure, "continue");
    const a = await c.submit("seqc", null, { sequence_key: "k" });
    const b = await c.submit("seqc", null, { sequence_key: "k" });
    const [wid, got] = await claimOne(c, "seqc");
    await c.abort(a.id, wid, got.lease, { code: "broken" });
    await waitStatus(c, b.id, "ready");
    assert.deepEqual(state(await c.sequence("seqc", "k")), [b.id, "ready", false, 0]);
    await assert.rejects(c.updateQueue("seqc", { sequence_on_failure: "skip" }), (e) => e instanceof InvalidArgument && e.field === "sequence_on_failure");
    assert.equal((await c.updateQueue("seqc", { sequence_on_failure: "halt" })).defaults.sequence_on_failure, undefined);
  });
});
