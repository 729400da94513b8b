-- The shared copy of computed rankings in embedded mode (cluster mode keeps it in Redis): every
-- process serves the newest list at its next refresh, and a restarted process serves its last
-- list at once. A write is applied only if its fence (fire time, then token) is not older than
-- the stored one, so a stale computation cannot overwrite a newer list.
CREATE TABLE ranking_snapshots (
    name        TEXT PRIMARY KEY,
    items       TEXT NOT NULL,
    computed_at BIGINT NOT NULL,
    fence_at    BIGINT NOT NULL,
    fence_token BIGINT NOT NULL
);
