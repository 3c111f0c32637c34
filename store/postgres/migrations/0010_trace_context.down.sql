ALTER TABLE {{schema}}.tasks DROP COLUMN IF EXISTS traceparent, DROP COLUMN IF EXISTS tracestate;
