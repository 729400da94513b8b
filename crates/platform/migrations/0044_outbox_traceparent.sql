-- The W3C trace context of the span that recorded an outbox event (NULL when traces are not
-- exported), carried to the stream so the consumer's span continues the publisher's trace
-- (platform::tracing_otlp).
ALTER TABLE event_outbox ADD COLUMN traceparent TEXT;
