DROP INDEX IF EXISTS {{schema}}.tasks_key_ready;
