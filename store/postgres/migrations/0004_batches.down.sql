DROP INDEX IF EXISTS {{schema}}.tasks_batch;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS batch;
DROP TABLE IF EXISTS {{schema}}.batches;
