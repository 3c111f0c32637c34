-- Who registered each worker (a key derived from the calling token), so
-- the server lets only that token claim and make lease calls as it.
ALTER TABLE {{schema}}.workers ADD COLUMN registrar text;
