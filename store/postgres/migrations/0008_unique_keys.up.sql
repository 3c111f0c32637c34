-- Norn schema version 8: unique keys. A task submitted with a unique key
-- keeps it in unique_key (NULL: none); a submit with a key that a task of
-- the same queue holds returns that task instead of creating another.

ALTER TABLE {{schema}}.tasks ADD COLUMN unique_key text COLLATE "C";
-- At most one task per queue and key is not terminal. This, not a read
-- before the insert, is what makes concurrent submitters on any number of
-- nodes create one task: the insert of every other one conflicts here.
CREATE UNIQUE INDEX IF NOT EXISTS tasks_unique_live ON {{schema}}.tasks (queue, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('scheduled', 'blocked', 'ready', 'running');
-- Every holder of a key, ended ones too: the unique_for check (tasks of
-- the key that ended recently) and the unique_key filter.
CREATE INDEX IF NOT EXISTS tasks_unique_key ON {{schema}}.tasks (unique_key, queue, ended_at)
    WHERE unique_key IS NOT NULL;
