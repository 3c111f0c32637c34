DROP INDEX IF EXISTS {{schema}}.tasks_unique_key;
DROP INDEX IF EXISTS {{schema}}.tasks_unique_live;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS unique_key;
