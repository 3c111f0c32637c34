-- Throughput history shared by every node: per queue ('' for all queues
-- together), per step (60 seconds or 3600) and per step start, the counts
-- a server counted from the store's events. Nodes write closed minutes
-- keeping the larger of each count; old minutes are summed into hours.
CREATE TABLE {{schema}}.throughput (
    queue     text        NOT NULL,
    step      integer     NOT NULL CHECK (step IN (60, 3600)),
    at        timestamptz NOT NULL,
    submitted bigint      NOT NULL DEFAULT 0,
    completed bigint      NOT NULL DEFAULT 0,
    failed    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, step, at)
);

-- A task's expiry: past it, a task not running ends aborted (expired).
-- The index holds only the waiting tasks that have one, so the monitor
-- finds the next due without reading anything else.
ALTER TABLE {{schema}}.tasks ADD COLUMN expires_at timestamptz;
CREATE INDEX tasks_expiry ON {{schema}}.tasks (expires_at)
    WHERE expires_at IS NOT NULL AND status IN ('scheduled', 'blocked', 'ready');

-- A queue's default expire_in for tasks that give none (0: none).
ALTER TABLE {{schema}}.queues ADD COLUMN expire_in_ns bigint NOT NULL DEFAULT 0;
