-- Settle every lease (its tasks written as running, as the claim would have)
-- and every ready batch (its tasks stay ready), then drop the tables.
UPDATE {{schema}}.tasks t SET status = 'running', owner = l.worker, lease = t.lease + 1, attempts = t.attempts + 1,
    deadline = l.created + (CASE WHEN t.max_runtime_ns > 0
        THEN least(coalesce(l.timeout_ns, t.timeout_ns), (t.max_runtime_ns + 999) / 1000 * 1000)
        ELSE coalesce(l.timeout_ns, t.timeout_ns) END / 1000) * interval '1 microsecond',
    updated = l.created, version = t.version + 1, history_count = t.history_count + 1,
    assign_seq = t.history_count + 1, claimed_at = l.created, ready_batch = NULL
FROM {{schema}}.leases l, unnest(l.ids) u(id)
WHERE t.id = u.id AND t.status = 'ready' AND t.ready_batch IS NOT NULL;
DROP INDEX {{schema}}.tasks_claim;
DROP INDEX {{schema}}.tasks_key_ready;
DROP INDEX {{schema}}.tasks_fair;
ALTER TABLE {{schema}}.tasks DROP COLUMN ready_batch;
CREATE INDEX tasks_claim ON {{schema}}.tasks (queue, priority DESC, ready_at, id) WHERE status = 'ready';
CREATE INDEX tasks_key_ready ON {{schema}}.tasks (queue, concurrency_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND concurrency_key IS NOT NULL;
CREATE INDEX tasks_fair ON {{schema}}.tasks (queue, fair_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND fair_key IS NOT NULL;
DROP TABLE {{schema}}.leases;
DROP TABLE {{schema}}.ready;
DROP SEQUENCE {{schema}}.ready_seq;
