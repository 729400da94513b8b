//! The settings of articles: how often a visitor's reads of one article count. Loaded by the
//! configuration core ([`platform::config`]) with the rest; documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`ArticleSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<ArticleSettings>();

/// Article settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct ArticleSettings {
    /// A visitor without an account counts one read of an article per this window
    /// ([`super::visitors`]).
    #[serde(with = "humantime_serde")]
    pub anonymous_read_window: Duration,
}

impl Default for ArticleSettings {
    fn default() -> Self {
        Self {
            anonymous_read_window: Duration::from_secs(24 * 3600),
        }
    }
}

impl Settings for ArticleSettings {
    const KEYS: &'static [&'static str] = &["anonymous_read_window"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if self.anonymous_read_window < Duration::from_secs(1) {
            bail!(
                "invalid anonymous_read_window (WEBOOK_ANONYMOUS_READ_WINDOW): must be at least 1s"
            );
        }
        Ok(())
    }
}
