//! The settings of live settings: how often each instance looks for changed values. Loaded by
//! the configuration core ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`LiveSettingsSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<LiveSettingsSettings>();

/// Live settings' own settings (restart-only).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct LiveSettingsSettings {
    /// How often each instance checks whether a live setting changed (one point read).
    #[serde(with = "humantime_serde")]
    pub live_settings_poll: Duration,
}

impl Default for LiveSettingsSettings {
    fn default() -> Self {
        Self {
            live_settings_poll: Duration::from_secs(2),
        }
    }
}

impl Settings for LiveSettingsSettings {
    const KEYS: &'static [&'static str] = &["live_settings_poll"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if self.live_settings_poll < Duration::from_millis(100) {
            bail!("invalid live_settings_poll (WEBOOK_LIVE_SETTINGS_POLL): must be at least 100ms");
        }
        if self.live_settings_poll > Duration::from_secs(60) {
            bail!("invalid live_settings_poll (WEBOOK_LIVE_SETTINGS_POLL): at most 1m");
        }
        Ok(())
    }
}
