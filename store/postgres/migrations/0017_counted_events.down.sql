ALTER TABLE {{schema}}.event_subscribers DROP COLUMN IF EXISTS counts_only;
