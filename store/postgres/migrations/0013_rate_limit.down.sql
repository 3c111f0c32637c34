UPDATE {{schema}}.queues q SET flow_limited = q.max_running > 0 OR q.key_limit > 0
    OR EXISTS (SELECT 1 FROM {{schema}}.queue_keys k WHERE k.queue = q.name AND k.lim > 0)
    WHERE q.rate_per_second > 0;
DROP TABLE IF EXISTS {{schema}}.queue_buckets;
ALTER TABLE {{schema}}.queues DROP COLUMN IF EXISTS rate_per_second, DROP COLUMN IF EXISTS rate_burst;
