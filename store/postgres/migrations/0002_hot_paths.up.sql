-- Norn schema version 2: tuned for the hot paths (see docs/postgres.md, Performance).

-- The (queue, status) index was maintained on every insert and on every
-- transition (each changes status), and with fresh statistics the planner
-- preferred it for claims: it read every ready task of the queue and
-- sorted them instead of reading the head of tasks_claim. Counts by queue
-- and status now scan; claims always use the partial claim index.
DROP INDEX IF EXISTS {{schema}}.tasks_queue_status;

-- The tasks table is update-heavy and its claim index is read at the head:
-- vacuum and analyze it sooner than the defaults (20% / 10% of the table)
-- so dead index entries and stale statistics do not pile up on big queues.
ALTER TABLE {{schema}}.tasks SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.05);
ALTER TABLE {{schema}}.task_history SET (autovacuum_vacuum_scale_factor = 0.05);
