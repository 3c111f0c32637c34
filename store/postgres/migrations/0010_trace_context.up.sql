-- Norn schema version 9: the W3C trace context a task was submitted in
-- (traceparent, and tracestate when the submitter had one), handed to the
-- worker that runs it. NULL when the submitter traced nothing; adding
-- nullable columns without a default does not rewrite the table.
ALTER TABLE {{schema}}.tasks ADD COLUMN IF NOT EXISTS traceparent text, ADD COLUMN IF NOT EXISTS tracestate text;
