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
