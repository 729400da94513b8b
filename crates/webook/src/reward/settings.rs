//! The settings of rewards: the platform's share, how long a status request waits, and how many
//! rewards (each an order at the payment provider) a user may create per window.
//! Loaded by the configuration core ([`platform::config`]); documented in `docs/CONFIG.md`.
//!
//! The share is at most [`MAX_SHARE_BPS`], derived from the smallest reward ([`MIN_AMT`]): a
//! larger one would leave the author's ledger line of some reward at 0 fen, which the ledger
//! refuses, so the `rewards` consumer would fail on that payment forever.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

use super::service::{MAX_SHARE_BPS, MIN_AMT};

/// How [`RewardSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<RewardSettings>();

/// Reward settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RewardSettings {
    /// The platform's share of each reward in basis points (1 000 = 10 %), rounded down to fen;
    /// 0 to [`MAX_SHARE_BPS`].
    pub reward_share_bps: i64,
    /// Longest `POST /reward/detail` waits for a change (at most 30 s; within a second less
    /// than `request_timeout` in any case).
    #[serde(with = "humantime_serde")]
    pub reward_long_poll: Duration,
    /// Rewards a user may create per `reward_rate_window` (each creates an order at the payment
    /// provider), on top of `write_rate_limit`; 0 turns the limit off.
    pub reward_rate_limit: u32,
    /// The window of `reward_rate_limit`.
    #[serde(with = "humantime_serde")]
    pub reward_rate_window: Duration,
}

impl Default for RewardSettings {
    fn default() -> Self {
        Self {
            reward_share_bps: 1_000,
            reward_long_poll: Duration::from_secs(10),
            reward_rate_limit: 10,
            reward_rate_window: Duration::from_secs(60),
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
    const KEYS: &'static [&'static str] = &[
        "reward_share_bps",
        "reward_long_poll",
        "reward_rate_limit",
        "reward_rate_window",
    ];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if !(0..=MAX_SHARE_BPS).contains(&self.reward_share_bps) {
            bail!(
                "invalid reward_share_bps (WEBOOK_REWARD_SHARE_BPS): 0 to {MAX_SHARE_BPS}, so the \
                 author keeps at least 1 fen of the smallest reward ({MIN_AMT} fen)"
            );
        }
        if self.reward_long_poll > Duration::from_secs(30) {
            bail!("invalid reward_long_poll (WEBOOK_REWARD_LONG_POLL): at most 30s");
        }
        if self.reward_rate_limit > 0 && self.reward_rate_window < Duration::from_secs(1) {
            bail!("invalid reward_rate_window (WEBOOK_REWARD_RATE_WINDOW): at least 1s");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reward::{service::platform_share, MAX_AMT};

    fn validate(reward_share_bps: i64) -> anyhow::Result<()> {
        RewardSettings {
            reward_share_bps,
            ..RewardSettings::default()
        }
        .validate(&Config::default())
    }

    #[test]
    fn the_share_bound_leaves_every_author_line_at_least_one_fen_and_is_tight() {
        for amt in MIN_AMT..=MAX_AMT {
            let author = amt - platform_share(amt, MAX_SHARE_BPS);
            assert!(
                author >= 1,
                "{amt} fen at {MAX_SHARE_BPS} bps: author gets {author}"
            );
        }
        // One basis point more and the smallest reward's author line is empty.
        assert_eq!(MIN_AMT - platform_share(MIN_AMT, MAX_SHARE_BPS + 1), 0);
    }

    #[test]
    fn reward_share_bps_is_accepted_up_to_the_bound_and_refused_past_it() {
        validate(0).unwrap();
        validate(MAX_SHARE_BPS).unwrap();
        for refused in [MAX_SHARE_BPS + 1, 10_000, -1] {
            let err = validate(refused).unwrap_err().to_string();
            assert!(
                err.starts_with("invalid reward_share_bps (WEBOOK_REWARD_SHARE_BPS)"),
                "{refused}: {err}"
            );
            assert!(!err.contains('\n'), "one line: {err}");
        }
    }
}
