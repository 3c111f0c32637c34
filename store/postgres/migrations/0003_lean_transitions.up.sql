-- Norn schema version 3: fewer rows and cheaper comparisons per task (see
-- docs/postgres.md, "Per-task cost").

-- Task ids and queue names compare byte by byte. The database's default
-- collation made every index comparison on the text keys a locale-aware
-- strcoll call; "C" is a plain memcmp and orders valid UTF-8 by code point,
-- the order the embedded store keeps. Only the indexes are rebuilt (the
-- type stays text), so the table is not rewritten.
ALTER TABLE {{schema}}.tasks ALTER COLUMN id TYPE text COLLATE "C", ALTER COLUMN queue TYPE text COLLATE "C";
ALTER TABLE {{schema}}.task_history ALTER COLUMN task_id TYPE text COLLATE "C";
ALTER TABLE {{schema}}.task_log ALTER COLUMN task_id TYPE text COLLATE "C";

-- The assignment written by a claim and the completion written by a
-- successful finish are kept in the row instead of as task_history rows:
-- the two transitions every task makes then write no history rows at all.
-- assign_seq / done_seq are the history sequence numbers of these entries
-- (0: none kept in the row). The assignment's time is claimed_at and its
-- worker and lease are the row's owner and lease; the completion's time is
-- ended_at. Any other transition of a task moves its in-row assignment into
-- task_history first, so owner and lease may change afterwards.
ALTER TABLE {{schema}}.tasks ADD COLUMN assign_seq integer NOT NULL DEFAULT 0,
    ADD COLUMN claimed_at timestamptz, ADD COLUMN done_seq integer NOT NULL DEFAULT 0;
-- The rows are task_history_rows now; task_history is a view of the whole
-- history, rows and in-row entries alike, for anyone who reads it with SQL
-- (history entries dropped by the cap may still show there while in the row).
ALTER TABLE {{schema}}.task_history RENAME TO task_history_rows;
CREATE VIEW {{schema}}.task_history AS
    SELECT task_id, seq, type, time, worker, lease, progress, error FROM {{schema}}.task_history_rows
    UNION ALL
    SELECT id, assign_seq, 'TaskAssignment', claimed_at, owner, lease, NULL, NULL FROM {{schema}}.tasks WHERE assign_seq > 0
    UNION ALL
    SELECT id, done_seq, 'TaskComplete', ended_at, owner, lease, 1, NULL FROM {{schema}}.tasks WHERE done_seq > 0;

-- Nodes with Subscribe streams. Per-task event lines are built and sent
-- with NOTIFY only while some node has a row here whose until lies ahead;
-- otherwise statements send a one-word wake-up ("wake": tasks became ready,
-- "sched": new delays) and nothing per task.
CREATE TABLE {{schema}}.event_subscribers (
    node  text PRIMARY KEY,
    until timestamptz NOT NULL
);
