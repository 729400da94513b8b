-- Every running process's last report (the console's instance overview): written by the
-- instance itself every 10 s, deleted when it stops.
CREATE TABLE instances (
    id             TEXT PRIMARY KEY,
    role           TEXT NOT NULL,
    mode           TEXT NOT NULL,
    version        TEXT NOT NULL,
    started_at     BIGINT NOT NULL,
    seen_at        BIGINT NOT NULL,
    database_state TEXT NOT NULL,
    redis_state    TEXT NOT NULL,
    details        TEXT NOT NULL
);
CREATE INDEX instances_seen_at ON instances (seen_at);
