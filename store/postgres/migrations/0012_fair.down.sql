DROP TABLE IF EXISTS {{schema}}.queue_fair;
DROP INDEX IF EXISTS {{schema}}.tasks_fair;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS fair_key;
ALTER TABLE {{schema}}.queue_keys DROP COLUMN IF EXISTS weight;
ALTER TABLE {{schema}}.queues DROP COLUMN IF EXISTS fair_by, DROP COLUMN IF EXISTS fair_now;
