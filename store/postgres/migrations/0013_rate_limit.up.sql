-- Norn schema version 13: rate limits. A queue's rate limit (0: none), and
-- one token bucket per rate-limited queue, updated by the claims of the
-- queue inside their transaction (they hold the queue's advisory lock, so
-- the bucket is read and written by one claim at a time, cluster-wide).
-- A rate-limited queue is flow_limited, so its claims take the limited path.
ALTER TABLE {{schema}}.queues ADD COLUMN rate_per_second double precision NOT NULL DEFAULT 0,
    ADD COLUMN rate_burst integer NOT NULL DEFAULT 0;
CREATE TABLE {{schema}}.queue_buckets (
    queue text COLLATE "C" PRIMARY KEY,
    tokens double precision NOT NULL,
    at timestamptz NOT NULL
);
