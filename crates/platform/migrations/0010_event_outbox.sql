-- The transactional outbox (infra::events::outbox): events recorded in the transaction of the
-- change they report, published by the relay after the commit and deleted once published (Redis)
-- or handled by every in-process consumer group. Normally near empty; rows that stay mean the
-- relay cannot publish (the `outbox_oldest_pending_seconds` gauge says for how long).
CREATE TABLE event_outbox (
    id         {{id}},
    topic      TEXT NOT NULL,
    event_key  TEXT NOT NULL,
    payload    TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
