-- Lists "tasks that depend on X" (the depends_on filter) by index whatever
-- their status; tasks_blocked_deps only covers blocked tasks.
CREATE INDEX IF NOT EXISTS tasks_depends_on ON {{schema}}.tasks USING gin (depends_on);
