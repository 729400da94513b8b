//! The process's periodic jobs, on the generic engine of the `scheduler` crate.
//!
//! [`JobRegistry::for_mode`] picks the lock backend of the mode — Redis in cluster mode (so a
//! guarded job runs on one instance per fire time), in-process when embedded — and collects the
//! features' jobs (through [`crate::feature::Registry`]); the application starts the scheduler
//! after the listener and stops it after HTTP has drained, giving running jobs
//! `shutdown_timeout` to finish. Every job is instrumented by the engine: a span per run and the
//! `scheduler_job_*` metrics on `/metrics` (see `scheduler::describe_job_metrics`).
//!
//! Maintenance jobs ([`JobRegistry::add_maintenance`]) run on `purge_schedule`, each run guarded
//! by a short lock that claims its fire time (one instance runs it); a feature may add jobs on
//! its own schedule and guard ([`JobRegistry::add`]).

use std::{sync::Arc, time::Duration};

use scheduler::{
    Guard, InProcessLocks, Job, JobOptions, LockBackend, RedisLocks, RunningScheduler, Scheduler,
};

use crate::{config::Config, redis::Redis};

/// Longest a maintenance run may take before it is cancelled.
const MAINTENANCE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Jobs collected at start-up, not yet running.
#[derive(Debug)]
pub struct JobRegistry {
    scheduler: Scheduler,
}

impl JobRegistry {
    /// An empty registry with the lock backend of the mode (Redis keys `<redis_prefix>:lock:…`).
    pub fn for_mode(config: &Config, redis: Option<&Redis>) -> Self {
        let locks: Arc<dyn LockBackend> = match redis {
            Some(redis) => Arc::new(RedisLocks::new(
                redis.manager(),
                format!("{}:lock:", config.redis_prefix),
            )),
            None => Arc::new(InProcessLocks::new()),
        };
        Self {
            scheduler: Scheduler::new(locks),
        }
    }

    /// Registers a maintenance job: on `purge_schedule`, one instance per fire time.
    pub fn add_maintenance(&mut self, config: &Config, job: impl Job) -> anyhow::Result<()> {
        let options = JobOptions::new(config.purge_schedule()?)
            .guard(Guard::ShortLock)
            .timeout(MAINTENANCE_TIMEOUT);
        self.scheduler.add(job, options)?;
        Ok(())
    }

    /// Registers `job` with `options`.
    pub fn add(&mut self, job: impl Job, options: JobOptions) -> anyhow::Result<()> {
        self.scheduler.add(job, options)?;
        Ok(())
    }

    /// Starts every job.
    pub fn start(self) -> RunningScheduler {
        self.scheduler.start()
    }
}
