//! The settings of comments: how many a user may write in a window. Loaded by the configuration
//! core ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`CommentSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<CommentSettings>();

/// Comment settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct CommentSettings {
    /// Comments a user may write within `comment_rate_window`; beyond it, 429001 (on top of the
    /// general `write_rate_limit`). 0 turns the limit off (load tests).
    pub comment_rate_limit: u32,
    /// The window of `comment_rate_limit`.
    #[serde(with = "humantime_serde")]
    pub comment_rate_window: Duration,
}

impl Default for CommentSettings {
    fn default() -> Self {
        Self {
            comment_rate_limit: 20,
            comment_rate_window: Duration::from_secs(60),
        }
    }
}

impl Settings for CommentSettings {
    const KEYS: &'static [&'static str] = &["comment_rate_limit", "comment_rate_window"];
    const LIVE: &'static [&'static str] = Self::KEYS;

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if self.comment_rate_window.is_zero() {
            bail!("invalid comment_rate_window (WEBOOK_COMMENT_RATE_WINDOW): must be above 0");
        }
        Ok(())
    }
}

/// The comment limit and its window in `config` (read live by the comment service's limiter).
pub fn comment_limit(config: &Config) -> anyhow::Result<(u32, std::time::Duration)> {
    let settings = config.settings::<CommentSettings>()?;
    Ok((settings.comment_rate_limit, settings.comment_rate_window))
}
