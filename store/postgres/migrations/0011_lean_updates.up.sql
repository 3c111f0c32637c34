-- Norn schema version 11: cheaper row versions on the hot paths.
-- tasks_depends_on indexed every row version, NULL dependencies included
-- (GIN keeps a placeholder entry for a NULL item): each claim and
-- completion wrote one more index entry and WAL record for nothing. Only
-- tasks with dependencies are indexed now; its readers (depends_on @> …,
-- depends_on && …) are strict, so the planner still proves the predicate.
DROP INDEX IF EXISTS {{schema}}.tasks_depends_on;
CREATE INDEX tasks_depends_on ON {{schema}}.tasks USING gin (depends_on) WHERE depends_on IS NOT NULL;
