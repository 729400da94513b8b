-- Consumer groups on their own (platform::events::delivery): each group's progress through the
-- outbox (embedded mode), and the events a group gave up on (both modes).

-- Embedded mode: per (topic, group), every outbox row of the topic with id <= last_id has been
-- handled (or parked) by the group. The relay trims a topic's rows below its slowest group.
CREATE TABLE event_progress (
    topic      TEXT NOT NULL,
    group_name TEXT NOT NULL,
    last_id    BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (topic, group_name)
);
CREATE INDEX event_outbox_topic_id ON event_outbox (topic, id);

-- The dead-letter store: an event one group could not apply, parked so the group goes on.
-- state: parked -> replay (an operator asked) -> replaying (a consumer claimed it until
-- claimed_until) -> replayed; or parked -> discarded (resolved_by says who, note why).
CREATE TABLE event_parked (
    id             {{id}},
    topic          TEXT NOT NULL,
    group_name     TEXT NOT NULL,
    event_id       TEXT NOT NULL,
    event_key      TEXT NOT NULL,
    payload        TEXT NOT NULL,
    published_at   BIGINT NOT NULL,
    failure        TEXT NOT NULL,
    attempts       BIGINT NOT NULL,
    first_error    TEXT NOT NULL,
    last_error     TEXT NOT NULL,
    first_failed_at BIGINT NOT NULL,
    last_failed_at BIGINT NOT NULL,
    parked_at      BIGINT NOT NULL,
    state          TEXT NOT NULL,
    claimed_until  BIGINT NOT NULL DEFAULT 0,
    resolved_at    BIGINT,
    resolved_by    TEXT,
    note           TEXT,
    UNIQUE (group_name, topic, event_id)
);
CREATE INDEX event_parked_group_state ON event_parked (group_name, topic, state);
