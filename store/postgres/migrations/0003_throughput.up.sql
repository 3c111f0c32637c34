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
