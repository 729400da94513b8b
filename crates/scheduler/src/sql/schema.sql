-- The SQL preemptive scheduler (crates/scheduler/src/sql). Every instance polls `jobs`, claims a
-- due job with a compare-and-swap on `version` (the new version is the run's fencing token),
-- heartbeats `utime` while running, and releases with the next fire time. All times are ms read
-- from the database's clock.
CREATE TABLE jobs (
    id           {{id}},
    name         TEXT NOT NULL UNIQUE,
    cron         TEXT NOT NULL,
    timezone     TEXT NOT NULL DEFAULT 'UTC',
    executor     TEXT NOT NULL,
    cfg          TEXT NOT NULL DEFAULT '{}',
    -- waiting | running | paused
    status       TEXT NOT NULL DEFAULT 'waiting',
    next_time    BIGINT NOT NULL,
    -- fire time of the current (running) or last claim
    scheduled_at BIGINT NOT NULL DEFAULT 0,
    -- a pending manual trigger: run once at this time without moving next_time (0 = none)
    trigger_at   BIGINT NOT NULL DEFAULT 0,
    utime        BIGINT NOT NULL,
    version      BIGINT NOT NULL DEFAULT 0,
    owner        TEXT NOT NULL DEFAULT '',
    -- skip | fire_once | catch_up
    misfire      TEXT NOT NULL DEFAULT 'fire_once',
    -- forbid
    overlap      TEXT NOT NULL DEFAULT 'forbid',
    timeout_ms   BIGINT NOT NULL DEFAULT 600000,
    ctime        BIGINT NOT NULL
);
CREATE INDEX jobs_status_next_time ON jobs (status, next_time);

-- One row per fire time of a job. token = the claim's version; a holder's final write is accepted
-- only while its token is still the job's version.
-- status: running | ok | failed | timeout | skipped | misfired | fenced
CREATE TABLE job_runs (
    id           {{id}},
    job_id       BIGINT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    scheduled_at BIGINT NOT NULL,
    token        BIGINT NOT NULL,
    owner        TEXT NOT NULL DEFAULT '',
    started_at   BIGINT,
    finished_at  BIGINT,
    status       TEXT NOT NULL,
    error        TEXT,
    UNIQUE (job_id, scheduled_at)
);
CREATE INDEX job_runs_job_id ON job_runs (job_id, id);
