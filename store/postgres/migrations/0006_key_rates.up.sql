-- Per-key rate limits: the queue's default for every concurrency key
-- (key_rate_*), a key's own (queue_keys.rate_*), and each key's token
-- bucket (key_buckets; no row: full). key_rated is set when either
-- applies: such a queue is flow_limited and claimed on the exclusive path,
-- which reads and writes the buckets under the queue's gate.
ALTER TABLE {{schema}}.queues ADD COLUMN key_rate_per_second double precision NOT NULL DEFAULT 0,
    ADD COLUMN key_rate_burst integer NOT NULL DEFAULT 0,
    ADD COLUMN key_rated boolean NOT NULL DEFAULT false;
ALTER TABLE {{schema}}.queue_keys ADD COLUMN rate_per_second double precision NOT NULL DEFAULT 0,
    ADD COLUMN rate_burst integer NOT NULL DEFAULT 0;
CREATE TABLE {{schema}}.key_buckets (
    queue  text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    tokens double precision NOT NULL,
    at     timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);
