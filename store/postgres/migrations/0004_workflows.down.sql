ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS signal_wait;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS signal_count;
DROP TABLE IF EXISTS {{schema}}.signals;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS dep_results;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS dep_run;
DROP INDEX IF EXISTS {{schema}}.tasks_batch;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS batch;
DROP TABLE IF EXISTS {{schema}}.batches;
