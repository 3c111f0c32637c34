ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS max_runtime_ns;
ALTER TABLE {{schema}}.queues DROP COLUMN IF EXISTS max_runtime_ns;
