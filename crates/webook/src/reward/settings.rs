//! The settings of rewards: the platform's share and how long a status request waits.
//! Loaded by the configuration core ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`RewardSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<RewardSettings>();

/// Reward settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RewardSettings {
    /// The platform's share of each reward in basis points (1 000 = 10 %), rounded down to fen.
    pub reward_share_bps: i64,
    /// Longest `POST /reward/detail` waits for a change (at most 30 s; within a second less
    /// than `request_timeout` in any case).
    #[serde(with = "humantime_serde")]
    pub reward_long_poll: Duration,
}

impl Default for RewardSettings {
    fn default() -> Self {
        Self {
            reward_share_bps: 1_000,
            reward_long_poll: Duration::from_secs(10),
        }
    }
}

impl RewardSettings {
    /// How long a status request waits: `reward_long_poll`, kept a second within
    /// `request_timeout` so the answer always beats the request's own timeout.
    pub fn long_poll(&self, config: &Config) -> Duration {
        self.reward_long_poll.min(
            config
                .request_timeout
                .saturating_sub(Duration::from_secs(1)),
        )
    }
}

impl Settings for RewardSettings {
    const KEYS: &'static [&'static str] = &["reward_share_bps", "reward_long_poll"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if !(0..=10_000).contains(&self.reward_share_bps) {
            bail!("invalid reward_share_bps (WEBOOK_REWARD_SHARE_BPS): 0 to 10000");
        }
        if self.reward_long_poll > Duration::from_secs(30) {
            bail!("invalid reward_long_poll (WEBOOK_REWARD_LONG_POLL): at most 30s");
        }
        Ok(())
    }
}
