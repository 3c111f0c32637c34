DROP TABLE IF EXISTS {{schema}}.event_subscribers;
-- Entries kept in the row become task_history rows again.
DROP VIEW IF EXISTS {{schema}}.task_history;
ALTER TABLE {{schema}}.task_history_rows RENAME TO task_history;
INSERT INTO {{schema}}.task_history (task_id, seq, type, time, worker, lease)
    SELECT id, assign_seq, 'TaskAssignment', claimed_at, owner, lease FROM {{schema}}.tasks WHERE assign_seq > 0
    ON CONFLICT DO NOTHING;
INSERT INTO {{schema}}.task_history (task_id, seq, type, time, worker, lease, progress)
    SELECT id, done_seq, 'TaskComplete', ended_at, owner, lease, 1 FROM {{schema}}.tasks WHERE done_seq > 0
    ON CONFLICT DO NOTHING;
ALTER TABLE {{schema}}.tasks DROP COLUMN assign_seq, DROP COLUMN claimed_at, DROP COLUMN done_seq;
ALTER TABLE {{schema}}.task_log ALTER COLUMN task_id TYPE text COLLATE "default";
ALTER TABLE {{schema}}.task_history ALTER COLUMN task_id TYPE text COLLATE "default";
ALTER TABLE {{schema}}.tasks ALTER COLUMN id TYPE text COLLATE "default", ALTER COLUMN queue TYPE text COLLATE "default";
