-- Norn schema version 9: flow control. A queue's running limits, and
-- concurrency keys' own limits. flow_limited is true when any limit applies
-- (kept by UpdateQueue): the plain claim statement skips such queues, and
-- their claims take the limited path, serialized per queue by an advisory
-- transaction lock (docs/postgres.md).
ALTER TABLE {{schema}}.queues ADD COLUMN max_running integer NOT NULL DEFAULT 0,
    ADD COLUMN key_limit integer NOT NULL DEFAULT 0,
    ADD COLUMN flow_limited boolean NOT NULL DEFAULT false;
CREATE TABLE {{schema}}.queue_keys (
    queue text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    lim integer NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key)
);
