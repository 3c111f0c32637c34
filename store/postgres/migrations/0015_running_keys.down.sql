DROP INDEX IF EXISTS {{schema}}.tasks_running_key;
