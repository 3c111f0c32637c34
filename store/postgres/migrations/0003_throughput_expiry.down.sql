ALTER TABLE {{schema}}.queues DROP COLUMN IF EXISTS expire_in_ns;
DROP INDEX IF EXISTS {{schema}}.tasks_expiry;
ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS expires_at;
DROP TABLE IF EXISTS {{schema}}.throughput;
