//! The settings of the durable-job worker and of `http` jobs: how many runs at once, heartbeats
//! and leases, polling, retention of finished runs, the internal networks `http` jobs may call.
//! Loaded by the configuration core ([`platform::config`]) with the rest; documented in
//! `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{list_or_comma_separated, networks, Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`JobSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<JobSettings>();

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
            job_heartbeat: Duration::from_secs(2),
            job_lease: Duration::from_secs(10),
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
        if self.job_permits == 0 {
            bail!("invalid job_permits (WEBOOK_JOB_PERMITS): must be above 0");
        }
        if self.job_heartbeat.is_zero() || self.job_lease < self.job_heartbeat * 3 {
            bail!(
                "invalid job_heartbeat / job_lease (WEBOOK_JOB_HEARTBEAT, WEBOOK_JOB_LEASE): the \
                 lease must be at least three heartbeats, so one late heartbeat is not a takeover"
            );
        }
        if self.job_poll_max.is_zero() {
            bail!("invalid job_poll_max (WEBOOK_JOB_POLL_MAX): must be above 0");
        }
        Ok(())
    }
}
