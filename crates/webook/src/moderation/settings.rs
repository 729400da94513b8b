//! The settings of moderation: how many reports a reader may file per window, and the stricter
//! write limit of new accounts. Loaded by the configuration core ([`platform::config`]);
//! documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`ModerationSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<ModerationSettings>();

/// Moderation settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ModerationSettings {
    /// Reports a reader may file within `moderation_report_window`; beyond it, 429001.
    pub moderation_report_limit: u32,
    /// The window of `moderation_report_limit`.
    #[serde(with = "humantime_serde")]
    pub moderation_report_window: Duration,
    /// How long an account counts as new (0 s: no new-account limit).
    #[serde(with = "humantime_serde")]
    pub moderation_new_account_period: Duration,
    /// Writes a new account may make within `moderation_new_account_window` (on top of
    /// `write_rate_limit`); beyond it, 429001.
    pub moderation_new_account_write_limit: u32,
    /// The window of `moderation_new_account_write_limit`.
    #[serde(with = "humantime_serde")]
    pub moderation_new_account_window: Duration,
}

impl Default for ModerationSettings {
    fn default() -> Self {
        Self {
            moderation_report_limit: 20,
            moderation_report_window: Duration::from_secs(3600),
            moderation_new_account_period: Duration::from_secs(24 * 3600),
            moderation_new_account_write_limit: 60,
            moderation_new_account_window: Duration::from_secs(3600),
        }
    }
}

impl Settings for ModerationSettings {
    const KEYS: &'static [&'static str] = &[
        "moderation_report_limit",
        "moderation_report_window",
        "moderation_new_account_period",
        "moderation_new_account_write_limit",
        "moderation_new_account_window",
    ];
    const LIVE: &'static [&'static str] = &["moderation_report_limit", "moderation_report_window"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if self.moderation_report_limit == 0 {
            bail!(
                "invalid moderation_report_limit (WEBOOK_MODERATION_REPORT_LIMIT): must be above 0"
            );
        }
        if self.moderation_report_window.is_zero() {
            bail!(
                "invalid moderation_report_window (WEBOOK_MODERATION_REPORT_WINDOW): must be above 0"
            );
        }
        if self.moderation_new_account_window.is_zero() {
            bail!(
                "invalid moderation_new_account_window (WEBOOK_MODERATION_NEW_ACCOUNT_WINDOW): \
                 must be above 0"
            );
        }
        if !self.moderation_new_account_period.is_zero()
            && self.moderation_new_account_write_limit == 0
        {
            bail!(
                "invalid moderation_new_account_write_limit \
                 (WEBOOK_MODERATION_NEW_ACCOUNT_WRITE_LIMIT): must be above 0 while \
                 moderation_new_account_period is set (0s turns the new-account limit off)"
            );
        }
        Ok(())
    }
}
