-- The trace context of the request that triggered a job (a W3C traceparent, '' for none): the
-- run that the trigger causes continues that trace. Cleared by the claim that runs the trigger.
ALTER TABLE jobs ADD COLUMN trigger_trace TEXT NOT NULL DEFAULT '';
