-- Ids of events a consumer group already applied (platform::events::dedup): a redelivered event
-- is recognised and not applied twice. Purged after a day, far longer than any redelivery takes.
--
-- The platform's own, so a consumer needs no feature's schema. Databases migrated before this
-- version got the table from migration 4 (released migrations never change): hence IF NOT
-- EXISTS, which leaves theirs as it is.
CREATE TABLE IF NOT EXISTS consumed_events (
    group_name TEXT NOT NULL,
    event_id   TEXT NOT NULL,
    ctime      BIGINT NOT NULL,
    PRIMARY KEY (group_name, event_id)
);
CREATE INDEX IF NOT EXISTS consumed_events_ctime ON consumed_events (ctime);
