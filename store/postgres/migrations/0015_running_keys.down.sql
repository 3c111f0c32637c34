DROP INDEX IF EXISTS {{schema}}.tasks_running_key;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS running_key;
