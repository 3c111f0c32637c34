DROP TABLE IF EXISTS {{schema}}.queue_keys;
ALTER TABLE {{schema}}.queues DROP COLUMN IF EXISTS max_running, DROP COLUMN IF EXISTS key_limit,
    DROP COLUMN IF EXISTS flow_limited;
