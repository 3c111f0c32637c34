-- Norn schema version 15: the running tasks of each concurrency key, for
-- the keyed claim path (a queue whose key limits are small), which counts,
-- for each key among its candidates, that key's running tasks. Only the
-- keyed and exclusive flow paths' claims write running_key (the task's
-- concurrency key), and UpdateQueue writes it for a queue's running tasks
-- when the queue gets key limits: the tasks of other queues never enter
-- this index, and pay nothing for it (docs/postgres.md, Flow control).
ALTER TABLE {{schema}}.tasks ADD COLUMN running_key text COLLATE "C";
CREATE INDEX tasks_running_key ON {{schema}}.tasks (queue, running_key)
    WHERE status = 'running' AND running_key IS NOT NULL;
