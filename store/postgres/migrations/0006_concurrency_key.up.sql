-- Norn schema version 6: a task's concurrency key (flow control groups
-- tasks by it). NULL for tasks without one; "C" collation like ids and
-- queue names, so keys compare byte by byte in both stores.
ALTER TABLE {{schema}}.tasks ADD COLUMN concurrency_key text COLLATE "C";
