-- The runtime limit of a task (0: none) and the queue default for it.
-- Adding a column with a constant default rewrites no rows. The start of
-- the current attempt is claimed_at, which a claim already writes.
ALTER TABLE {{schema}}.tasks ADD COLUMN IF NOT EXISTS max_runtime_ns bigint NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}.queues ADD COLUMN IF NOT EXISTS max_runtime_ns bigint NOT NULL DEFAULT 0;
