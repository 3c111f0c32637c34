ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS concurrency_key;
