ALTER TABLE {{schema}}.task_history RESET (autovacuum_vacuum_scale_factor);
ALTER TABLE {{schema}}.tasks RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor,
    autovacuum_vacuum_insert_scale_factor);
CREATE INDEX IF NOT EXISTS tasks_queue_status ON {{schema}}.tasks (queue, status);
