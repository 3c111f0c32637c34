DROP INDEX IF EXISTS {{schema}}.tasks_depends_on;
