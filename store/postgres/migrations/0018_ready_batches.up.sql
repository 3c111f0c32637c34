-- Norn schema version 18: ready batches and leases (docs/postgres.md,
-- "Ready batches and leases"). A batch of tasks submitted by COPY into a
-- queue without flow limits is also one row of ready (its ids in claim
-- order), and its tasks name that row in ready_batch. The plain claim takes
-- ids from ready rows and writes one lease row per claim instead of
-- writing every claimed task: such a task's row still says ready while a
-- lease row names it. Every other path first settles the tasks it touches
-- (a lease's tasks are written as running, a ready batch's tasks become
-- ordinary ready tasks), so only the submit, the plain claim and the
-- completion know about the two tables.
ALTER TABLE {{schema}}.tasks ADD COLUMN ready_batch bigint;

-- Nodes take ready row ids in blocks of 1024 (one nextval per block).
CREATE SEQUENCE {{schema}}.ready_seq INCREMENT BY 1024;

CREATE TABLE {{schema}}.ready (
    rid      bigint PRIMARY KEY,
    queue    text COLLATE "C" NOT NULL,
    priority bigint NOT NULL,
    ready_at timestamptz NOT NULL,
    first_id text COLLATE "C" NOT NULL,
    -- ids in claim order; a claim takes a prefix and writes back the rest
    ids      text[] COLLATE "C" NOT NULL
);
CREATE INDEX ready_claim ON {{schema}}.ready (queue, priority DESC, ready_at, first_id);

CREATE TABLE {{schema}}.leases (
    id         bigserial PRIMARY KEY,
    queue      text COLLATE "C" NOT NULL,
    worker     text NOT NULL,
    created    timestamptz NOT NULL,
    -- the claim's lease length override (NULL: each task's timeout)
    timeout_ns bigint,
    -- the earliest deadline of its tasks: the monitor settles it then
    deadline   timestamptz NOT NULL,
    -- tasks of it completed so far; the row goes when all are
    done       integer NOT NULL DEFAULT 0,
    ids        text[] COLLATE "C" NOT NULL,
    -- the ready rows its tasks came from: a task finds its lease by its ready_batch
    batches    bigint[] NOT NULL
);
CREATE INDEX leases_worker ON {{schema}}.leases (worker);
CREATE INDEX leases_batches ON {{schema}}.leases USING gin (batches);
CREATE INDEX leases_deadline ON {{schema}}.leases (deadline);

-- Tasks of a ready batch are claimed through ready, not through the ready
-- tasks' indexes (queues with flow limits have no ready rows; the limited
-- paths read ordinary rows only).
DROP INDEX {{schema}}.tasks_claim;
CREATE INDEX tasks_claim ON {{schema}}.tasks (queue, priority DESC, ready_at, id)
    WHERE status = 'ready' AND ready_batch IS NULL;
DROP INDEX {{schema}}.tasks_key_ready;
CREATE INDEX tasks_key_ready ON {{schema}}.tasks (queue, concurrency_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND ready_batch IS NULL AND concurrency_key IS NOT NULL;
DROP INDEX {{schema}}.tasks_fair;
CREATE INDEX tasks_fair ON {{schema}}.tasks (queue, fair_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND ready_batch IS NULL AND fair_key IS NOT NULL;
