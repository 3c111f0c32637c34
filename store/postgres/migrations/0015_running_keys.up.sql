-- Norn schema version 15: the running tasks of each concurrency key. The
-- keyed claim path (a queue whose key limits are small) counts, for each
-- key among its candidates, that key's running tasks; with only
-- tasks_queue_status that count stepped over every running task of the
-- queue. Partial: tasks without a key, and every task not running, cost
-- nothing here (docs/postgres.md, Flow control).
CREATE INDEX IF NOT EXISTS tasks_running_key ON {{schema}}.tasks (queue, concurrency_key)
    WHERE status = 'running' AND concurrency_key IS NOT NULL;
