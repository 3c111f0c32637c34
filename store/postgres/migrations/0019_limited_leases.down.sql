-- Schema 18 has no ready rows or leases in queues with flow limits:
-- settle the leases of such queues (their tasks written as running, as the
-- claim would have, with running_key for the keyed claims' counts) and
-- make their ready rows' tasks ordinary ready tasks.
WITH l AS (DELETE FROM {{schema}}.leases x USING {{schema}}.queues q
    WHERE q.name = x.queue AND (q.flow_limited OR x.keys IS NOT NULL) RETURNING x.*)
UPDATE {{schema}}.tasks t SET status = 'running', owner = l.worker, lease = t.lease + 1, attempts = t.attempts + 1,
    deadline = l.created + (CASE WHEN t.max_runtime_ns > 0
        THEN least(coalesce(l.timeout_ns, t.timeout_ns), (t.max_runtime_ns + 999) / 1000 * 1000)
        ELSE coalesce(l.timeout_ns, t.timeout_ns) END / 1000) * interval '1 microsecond',
    updated = l.created, version = t.version + 1, history_count = t.history_count + 1,
    assign_seq = t.history_count + 1, claimed_at = l.created, ready_batch = NULL,
    running_key = CASE WHEN l.keys IS NOT NULL THEN t.concurrency_key ELSE t.running_key END
FROM l, unnest(l.ids) u(id)
WHERE t.id = u.id AND t.status = 'ready' AND t.ready_batch IS NOT NULL;
WITH r AS (DELETE FROM {{schema}}.ready x USING {{schema}}.queues q
    WHERE q.name = x.queue AND (q.flow_limited OR x.keys IS NOT NULL) RETURNING x.rid, x.ids)
UPDATE {{schema}}.tasks t SET ready_batch = NULL FROM r, unnest(r.ids) u(id)
WHERE t.id = u.id AND t.ready_batch = r.rid;
DROP INDEX {{schema}}.tasks_key_ready;
CREATE INDEX tasks_key_ready ON {{schema}}.tasks (queue, concurrency_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND ready_batch IS NULL AND concurrency_key IS NOT NULL;
DROP INDEX {{schema}}.leases_queue;
ALTER TABLE {{schema}}.leases DROP COLUMN keys;
ALTER TABLE {{schema}}.leases DROP COLUMN kmax;
ALTER TABLE {{schema}}.ready DROP COLUMN keys;
