-- Finished runs older than the retention are purged by fire time (SqlJobStore::purge_runs_before).
CREATE INDEX job_runs_scheduled_at ON job_runs (scheduled_at);
