-- Norn schema version 12: fair claiming. A queue's fair_by and the virtual
-- time of the key claimed last (fair_now); keys' weights; each task's fair
-- key, written at submit for tasks of fair queues only (NULL otherwise, so
-- the partial index costs other queues nothing); and the virtual time of
-- each key that may be claimed (docs/postgres.md).
ALTER TABLE {{schema}}.queues ADD COLUMN fair_by text NOT NULL DEFAULT '',
    ADD COLUMN fair_now bigint NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}.queue_keys ADD COLUMN weight integer NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}.tasks ADD COLUMN fair_key text COLLATE "C";
CREATE INDEX tasks_fair ON {{schema}}.tasks (queue, fair_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND fair_key IS NOT NULL;
CREATE TABLE {{schema}}.queue_fair (
    queue text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    vt bigint NOT NULL,
    PRIMARY KEY (queue, key)
);
