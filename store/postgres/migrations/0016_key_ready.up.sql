-- Norn schema version 16: the ready tasks of each concurrency key, in claim
-- order. A flow-limited claim whose first ready tasks are held back by keys
-- at their limits reaches the other keys' tasks through this index, one
-- probe per key, instead of stepping over the blocked keys' backlog
-- (docs/postgres.md, Flow control). Tasks without a concurrency key are not
-- in it, so queues that do not use keys pay nothing for it.
CREATE INDEX tasks_key_ready ON {{schema}}.tasks (queue, concurrency_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND concurrency_key IS NOT NULL;
