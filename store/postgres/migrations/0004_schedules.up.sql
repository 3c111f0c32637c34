-- Periodic schedules. The whole schedule is one JSON document (json, not
-- jsonb: the spec inside must come back byte for byte; few rows,
-- read and written whole); next_fire and paused are columns so the monitor
-- finds due schedules by index, and a firing locks the row and advances
-- next_fire in the transaction that inserts the tick's task.
CREATE TABLE IF NOT EXISTS {{schema}}.schedules (
    name      text PRIMARY KEY,
    doc       json NOT NULL,
    next_fire timestamptz,
    paused    boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS schedules_due ON {{schema}}.schedules (next_fire) WHERE NOT paused;
