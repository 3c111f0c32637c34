ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS dep_results;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS dep_run;
DROP INDEX IF EXISTS {{schema}}.tasks_batch;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS batch;
DROP TABLE IF EXISTS {{schema}}.batches;
