//! The settings of the durable-job worker and of `http` jobs: how many runs at once, heartbeats
//! and leases, polling, retention of finished runs, the internal networks `http` jobs may call.
//! Loaded by the configuration core ([`platform::config`]) with the rest; documented in
//! `docs/CONFIG.md`.
//!
//! Validation refuses what the worker cannot run with: more permits than a semaphore holds, a
//! lease under three heartbeats or below [`MIN_JOB_LEASE`] (every run would be taken over at
//! once), a poll pause below [`MIN_JOB_POLL_MAX`].

use std::time::Duration;

use anyhow::bail;
use platform::config::{list_or_comma_separated, networks, Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`JobSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<JobSettings>();

/// Most `job_permits`: the worker counts them with a [`tokio::sync::Semaphore`], which cannot
/// hold more (it panics at start-up).
pub const MAX_JOB_PERMITS: usize = tokio::sync::Semaphore::MAX_PERMITS;

/// Shortest `job_lease`. The database's clock counts whole milliseconds: a shorter lease is 0
/// there, so every running job looks abandoned from the next millisecond on and is taken over
/// (its run fenced) at the next poll, run after run.
pub const MIN_JOB_LEASE: Duration = Duration::from_millis(1);

/// Shortest `job_poll_max`. The worker sleeps whole milliseconds between polls, down to a fifth
/// of `job_poll_max`: shorter, that pause rounds to 0 and it polls the `jobs` table without
/// rest, and below 1 ms its poll loop panics (its sleep's bounds cross).
pub const MIN_JOB_POLL_MAX: Duration = Duration::from_millis(5);

/// Durable-job settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct JobSettings {
    /// Most durable-job runs at once on this instance.
    pub job_permits: usize,
    /// How often a running durable job renews its claim.
    #[serde(with = "humantime_serde")]
    pub job_heartbeat: Duration,
    /// A running durable job whose last heartbeat is older than this is taken over.
    #[serde(with = "humantime_serde")]
    pub job_lease: Duration,
    /// Longest pause between polls of the `jobs` table when nothing is due.
    #[serde(with = "humantime_serde")]
    pub job_poll_max: Duration,
    /// Finished durable-job runs (`job_runs` rows) older than this are purged by the
    /// maintenance job `purge_job_runs`; `0s` keeps them forever.
    #[serde(with = "humantime_serde")]
    pub job_runs_retention: Duration,
    /// Networks (CIDRs or IPs) that `http` jobs may call although they are loopback, private,
    /// link-local or otherwise internal; every other internal address is refused.
    #[serde(deserialize_with = "list_or_comma_separated")]
    pub job_http_allowed_networks: Vec<String>,
}

impl Default for JobSettings {
    fn default() -> Self {
        Self {
            job_permits: 16,
            job_heartbeat: Duration::from_secs(1),
            job_lease: Duration::from_secs(4),
            job_poll_max: Duration::from_secs(1),
            job_runs_retention: Duration::from_secs(30 * 24 * 3600),
            job_http_allowed_networks: Vec::new(),
        }
    }
}

impl JobSettings {
    /// `job_http_allowed_networks` parsed; a bare IP is a single-address network.
    pub fn job_http_allowed_networks(&self) -> anyhow::Result<Vec<ipnet::IpNet>> {
        networks("job_http_allowed_networks", &self.job_http_allowed_networks)
    }
}

impl Settings for JobSettings {
    const KEYS: &'static [&'static str] = &[
        "job_permits",
        "job_heartbeat",
        "job_lease",
        "job_poll_max",
        "job_runs_retention",
        "job_http_allowed_networks",
    ];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        self.job_http_allowed_networks()?;
        if !(1..=MAX_JOB_PERMITS).contains(&self.job_permits) {
            bail!("invalid job_permits (WEBOOK_JOB_PERMITS): 1 to {MAX_JOB_PERMITS}");
        }
        if self.job_lease < MIN_JOB_LEASE {
            bail!(
                "invalid job_lease (WEBOOK_JOB_LEASE): at least {MIN_JOB_LEASE:?} (the database \
                 counts whole milliseconds: a shorter lease is 0, and every run is taken over)"
            );
        }
        if self.job_heartbeat.is_zero() || self.job_lease < self.job_heartbeat * 3 {
            bail!(
                "invalid job_heartbeat / job_lease (WEBOOK_JOB_HEARTBEAT, WEBOOK_JOB_LEASE): the \
                 lease must be at least three heartbeats, so one late heartbeat is not a takeover"
            );
        }
        if self.job_poll_max < MIN_JOB_POLL_MAX {
            bail!(
                "invalid job_poll_max (WEBOOK_JOB_POLL_MAX): at least {MIN_JOB_POLL_MAX:?} (the \
                 worker pauses down to a fifth of it, in whole milliseconds)"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(settings: JobSettings, key: &str) {
        let err = settings
            .validate(&Config::default())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(&format!("invalid {key} (")), "{err}");
        assert!(
            err.contains(&format!("WEBOOK_{}", key.to_uppercase())),
            "{err}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
    }

    #[test]
    fn job_permits_are_bounded_by_what_a_semaphore_holds() {
        for accepted in [1, MAX_JOB_PERMITS] {
            JobSettings {
                job_permits: accepted,
                ..JobSettings::default()
            }
            .validate(&Config::default())
            .unwrap();
        }
        for permits in [0, MAX_JOB_PERMITS + 1] {
            refused(
                JobSettings {
                    job_permits: permits,
                    ..JobSettings::default()
                },
                "job_permits",
            );
        }
    }

    #[test]
    fn job_lease_is_at_least_a_millisecond() {
        JobSettings {
            job_heartbeat: MIN_JOB_LEASE / 3,
            job_lease: MIN_JOB_LEASE,
            ..JobSettings::default()
        }
        .validate(&Config::default())
        .unwrap();
        // Three heartbeats fit, so only the lease's own floor refuses it.
        let short = MIN_JOB_LEASE - Duration::from_nanos(1);
        refused(
            JobSettings {
                job_heartbeat: short / 3,
                job_lease: short,
                ..JobSettings::default()
            },
            "job_lease",
        );
    }

    #[test]
    fn job_poll_max_is_at_least_five_milliseconds() {
        JobSettings {
            job_poll_max: MIN_JOB_POLL_MAX,
            ..JobSettings::default()
        }
        .validate(&Config::default())
        .unwrap();
        // A fifth of the bound is the worker's shortest pause: still a whole millisecond.
        assert_eq!((MIN_JOB_POLL_MAX / 5).as_millis(), 1);
        for poll_max in [Duration::ZERO, MIN_JOB_POLL_MAX - Duration::from_nanos(1)] {
            refused(
                JobSettings {
                    job_poll_max: poll_max,
                    ..JobSettings::default()
                },
                "job_poll_max",
            );
        }
    }
}
