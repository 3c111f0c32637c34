ALTER TABLE {{schema}}.workers DROP COLUMN IF EXISTS registrar;
