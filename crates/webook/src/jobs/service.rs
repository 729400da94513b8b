//! The rules of job administration shared by the admin API and the CLI: what a new job may be
//! (defaults, policies, executor and `cfg`), checked before the store writes it. No HTTP, no SQL.

use scheduler::{
    sql::{check_name, Executors, NewJob, SqlJobStore, StoreError, NEVER},
    Schedule,
};

/// Time zone of a job created without one.
pub const DEFAULT_TIMEZONE: &str = "UTC";
/// Run timeout of a job created without one (10 minutes).
pub const DEFAULT_TIMEOUT_MS: i64 = 600_000;
/// Executor configuration of a job created without one.
pub const DEFAULT_CFG: &str = "{}";

/// A job as an operator asks for it; `None` fields take their defaults (time zone
/// [`DEFAULT_TIMEZONE`], misfire `fire_once`, overlap `forbid`, timeout [`DEFAULT_TIMEOUT_MS`],
/// `cfg` [`DEFAULT_CFG`]).
#[derive(Debug, Clone, Default)]
pub struct JobSpec {
    /// Unique name.
    pub name: String,
    /// Schedule expression (cron with seconds, `@every`, descriptors).
    pub cron: String,
    /// Executor name.
    pub executor: String,
    /// Executor configuration, JSON text of an object.
    pub cfg: Option<String>,
    /// IANA time zone the expression is read in.
    pub timezone: Option<String>,
    /// Misfire policy: `skip`, `fire_once` or `catch_up`.
    pub misfire: Option<String>,
    /// Overlap policy: `forbid`.
    pub overlap: Option<String>,
    /// Run timeout in ms (at least 1000).
    pub timeout_ms: Option<i64>,
}

impl JobSpec {
    /// Checks the job and fills in the defaults: the name, the schedule in its time zone, the
    /// policies, the executor and its `cfg`, in that order, so the first problem is the one
    /// reported (the store checks the timeout, and re-checks the name and schedule, when it
    /// creates the job). Errors are [`StoreError::Invalid`] with a message naming the problem.
    pub fn to_new_job(&self, executors: &Executors) -> Result<NewJob, StoreError> {
        check_name(&self.name)?;
        let timezone = self
            .timezone
            .clone()
            .unwrap_or_else(|| DEFAULT_TIMEZONE.to_owned());
        Schedule::parse_in(&self.cron, &timezone)
            .map_err(|err| StoreError::Invalid(err.to_string()))?;
        let misfire = self
            .misfire
            .as_deref()
            .unwrap_or("fire_once")
            .parse()
            .map_err(StoreError::Invalid)?;
        let overlap = self
            .overlap
            .as_deref()
            .unwrap_or("forbid")
            .parse()
            .map_err(StoreError::Invalid)?;
        let cfg = self.cfg.as_deref().unwrap_or(DEFAULT_CFG).trim();
        // A job's configuration is an object; text that is not JSON at all is reported by the
        // executor check below ("cfg is not valid JSON: …").
        if let Ok(value) = serde_json::from_str::<serde_json::Value>(cfg) {
            if !value.is_object() {
                return Err(StoreError::Invalid("cfg must be a JSON object".to_owned()));
            }
        }
        executors
            .check(&self.executor, cfg)
            .map_err(StoreError::Invalid)?;
        Ok(NewJob {
            name: self.name.clone(),
            cron: self.cron.clone(),
            timezone,
            executor: self.executor.clone(),
            cfg: cfg.to_owned(),
            misfire,
            overlap,
            timeout_ms: self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
        })
    }
}

/// Creates the job `spec` describes in `store`, after checking it against `executors`.
/// Returns its id.
pub async fn create(
    store: &SqlJobStore,
    executors: &Executors,
    spec: &JobSpec,
) -> Result<i64, StoreError> {
    store.create(&spec.to_new_job(executors)?).await
}

/// What an operator changes in an existing job; `None` fields stay as they are.
#[derive(Debug, Clone, Default)]
pub struct JobEdit {
    /// Schedule expression.
    pub cron: Option<String>,
    /// IANA time zone.
    pub timezone: Option<String>,
    /// Executor configuration, JSON text of an object.
    pub cfg: Option<String>,
    /// Misfire policy.
    pub misfire: Option<String>,
    /// Run timeout in ms.
    pub timeout_ms: Option<i64>,
}

/// Changes job `id` as `edit` says, checked like a new job (schedule in its time zone,
/// policies, the executor's `cfg`) before the store writes it ([`SqlJobStore::update`]).
pub async fn edit(
    store: &SqlJobStore,
    executors: &Executors,
    id: i64,
    edit: JobEdit,
) -> Result<(), StoreError> {
    let job = store.get(id).await?.ok_or(StoreError::NotFound)?;
    let spec = JobSpec {
        name: job.name,
        cron: edit.cron.unwrap_or(job.cron),
        executor: job.executor,
        cfg: Some(edit.cfg.unwrap_or(job.cfg)),
        timezone: Some(edit.timezone.unwrap_or(job.timezone)),
        misfire: Some(
            edit.misfire
                .unwrap_or_else(|| job.misfire.as_str().to_owned()),
        ),
        overlap: Some(job.overlap.as_str().to_owned()),
        timeout_ms: Some(edit.timeout_ms.unwrap_or(job.timeout_ms)),
    };
    store.update(id, &spec.to_new_job(executors)?).await
}

/// A job's `next_time` as shown: `None` when its schedule never fires again.
pub fn next_time(next_time: i64) -> Option<i64> {
    (next_time < NEVER).then_some(next_time)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use scheduler::sql::{Misfire, OverlapPolicy};

    use super::*;

    fn executors() -> scheduler::sql::Executors {
        let mut executors = scheduler::sql::Executors::new();
        executors
            .register(crate::jobs::http_executor(vec!["127.0.0.0/8".parse().unwrap()]).unwrap());
        executors
    }

    fn spec() -> JobSpec {
        JobSpec {
            name: "ping".into(),
            cron: "@every 1m".into(),
            executor: "http".into(),
            cfg: Some(r#"{"url": "http://127.0.0.1:9/hook"}"#.into()),
            ..JobSpec::default()
        }
    }

    fn refusal(spec: JobSpec) -> String {
        match spec.to_new_job(&executors()) {
            Err(StoreError::Invalid(msg)) => msg,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_filled_in() {
        let job = spec().to_new_job(&executors()).unwrap();
        assert_eq!(job.timezone, "UTC");
        assert_eq!(job.misfire, Misfire::FireOnce);
        assert_eq!(job.overlap, OverlapPolicy::Forbid);
        assert_eq!(job.timeout_ms, 600_000);
        assert_eq!(job.cfg, r#"{"url": "http://127.0.0.1:9/hook"}"#);
    }

    #[test]
    fn each_invalid_part_is_named() {
        let cases: Vec<(JobSpec, &str)> = vec![
            (
                JobSpec {
                    name: "has space".into(),
                    ..spec()
                },
                "invalid job name",
            ),
            (
                JobSpec {
                    cron: "0 0 25 * * *".into(),
                    executor: "ranking".into(),
                    ..spec()
                },
                "hour field",
            ),
            (
                JobSpec {
                    timezone: Some("Mars/Olympus_Mons".into()),
                    ..spec()
                },
                "unknown time zone",
            ),
            (
                JobSpec {
                    misfire: Some("later".into()),
                    ..spec()
                },
                "unknown misfire policy",
            ),
            (
                JobSpec {
                    overlap: Some("allow".into()),
                    ..spec()
                },
                "unknown overlap policy",
            ),
            (
                JobSpec {
                    executor: "ranking".into(),
                    ..spec()
                },
                "unknown executor \"ranking\"",
            ),
            (
                JobSpec {
                    cfg: Some("[1]".into()),
                    ..spec()
                },
                "cfg must be a JSON object",
            ),
            (
                JobSpec {
                    cfg: Some("{".into()),
                    ..spec()
                },
                "cfg is not valid JSON",
            ),
            (
                JobSpec {
                    cfg: None,
                    ..spec()
                },
                "invalid http cfg",
            ),
        ];
        for (spec, expected) in cases {
            let msg = refusal(spec);
            assert!(
                msg.contains(expected),
                "{msg:?} should contain {expected:?}"
            );
        }
    }

    #[test]
    fn never_is_shown_as_none() {
        assert_eq!(next_time(1_000), Some(1_000));
        assert_eq!(next_time(NEVER), None);
    }
}
