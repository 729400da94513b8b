//! The settings of screening: how often each instance looks for edited word lists. Loaded by
//! the configuration core ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`ScreeningSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<ScreeningSettings>();

/// Screening settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ScreeningSettings {
    /// How often each instance checks whether the word lists changed (one point read).
    #[serde(with = "humantime_serde")]
    pub screening_poll: Duration,
}

impl Default for ScreeningSettings {
    fn default() -> Self {
        Self {
            screening_poll: Duration::from_secs(2),
        }
    }
}

impl Settings for ScreeningSettings {
    const KEYS: &'static [&'static str] = &["screening_poll"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if self.screening_poll < Duration::from_millis(100) {
            bail!("invalid screening_poll (WEBOOK_SCREENING_POLL): must be at least 100ms");
        }
        Ok(())
    }
}
