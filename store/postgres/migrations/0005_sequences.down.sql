DROP TRIGGER IF EXISTS tasks_sequence_delete ON {{schema}}.tasks;
DROP TRIGGER IF EXISTS tasks_sequence_update ON {{schema}}.tasks;
DROP FUNCTION IF EXISTS {{schema}}.sequence_moved();
DROP TABLE IF EXISTS {{schema}}.sequences;
ALTER TABLE {{schema}}.queues DROP COLUMN IF EXISTS sequence_on_failure;
DROP INDEX IF EXISTS {{schema}}.tasks_sequence_waiting;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS sequence_no;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS sequence_key;
