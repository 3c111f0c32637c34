-- Norn schema version 19: ready batches and leases for queues with flow
-- limits (docs/postgres.md, "Ready batches and leases"). A queue with
-- count limits or a rate limit (not a fair one) gets ready rows too; their
-- keys column holds each task's concurrency key, aligned with ids, so the
-- keyed claim knows its candidates' keys without reading their rows. A
-- lease row written by a limited claim holds its tasks' keys the same way,
-- so a key's running tasks are its running rows plus its leased entries.
-- Rows written for a queue without limits have no keys (NULL); the flush
-- refuses such rows for a queue that got limits since (UpdateQueue
-- settles the queue's rows and leases then).
ALTER TABLE {{schema}}.ready ADD COLUMN keys text[] COLLATE "C";
ALTER TABLE {{schema}}.leases ADD COLUMN keys text[] COLLATE "C";
-- At least the most tasks of one key among ids, when the claim knew it
-- (keyed claims); NULL: unknown (cardinality(ids) bounds it).
ALTER TABLE {{schema}}.leases ADD COLUMN kmax integer;
-- The flow paths count and settle a queue's leases.
CREATE INDEX leases_queue ON {{schema}}.leases (queue);
-- The exclusive flow path reaches each key's first ready tasks through
-- tasks_key_ready, whichever form they are stored in (it settles the
-- queue's leases first, so a batched task it finds there is in a ready
-- row): a held-back key's backlog in ready rows must not hide the keys
-- behind it, nor must making the whole backlog ordinary rows first stall
-- the queue's claims.
DROP INDEX {{schema}}.tasks_key_ready;
CREATE INDEX tasks_key_ready ON {{schema}}.tasks (queue, concurrency_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND concurrency_key IS NOT NULL;
