DROP INDEX IF EXISTS {{schema}}.tasks_depends_on;
CREATE INDEX tasks_depends_on ON {{schema}}.tasks USING gin (depends_on);
