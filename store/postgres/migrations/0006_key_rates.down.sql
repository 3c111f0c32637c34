DROP TABLE IF EXISTS {{schema}}.key_buckets;
ALTER TABLE {{schema}}.queue_keys DROP COLUMN IF EXISTS rate_burst;
ALTER TABLE {{schema}}.queue_keys DROP COLUMN IF EXISTS rate_per_second;
ALTER TABLE {{schema}}.queues DROP COLUMN IF EXISTS key_rated;
ALTER TABLE {{schema}}.queues DROP COLUMN IF EXISTS key_rate_burst;
ALTER TABLE {{schema}}.queues DROP COLUMN IF EXISTS key_rate_per_second;
