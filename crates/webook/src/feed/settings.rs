//! The settings of follows and the feed: where push ends and pull begins, and how much of each
//! inbox is kept. Loaded by the configuration core ([`platform::config`]); documented in
//! `docs/CONFIG.md`.

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`FeedSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<FeedSettings>();

/// Feed settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct FeedSettings {
    /// Authors with at most this many followers push each article to every follower's inbox;
    /// above it, the article stays in the author's outbox and followers merge it when reading.
    pub feed_push_threshold: i64,
    /// Items kept per inbox; older ones are deleted by the `prune_feed_inboxes` maintenance job.
    pub feed_inbox_cap: i64,
}

impl Default for FeedSettings {
    fn default() -> Self {
        Self {
            feed_push_threshold: 1000,
            feed_inbox_cap: 1000,
        }
    }
}

impl Settings for FeedSettings {
    const KEYS: &'static [&'static str] = &["feed_push_threshold", "feed_inbox_cap"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if !(0..=10_000_000).contains(&self.feed_push_threshold) {
            bail!("invalid feed_push_threshold (WEBOOK_FEED_PUSH_THRESHOLD): must be 0-10000000");
        }
        if !(100..=100_000).contains(&self.feed_inbox_cap) {
            bail!("invalid feed_inbox_cap (WEBOOK_FEED_INBOX_CAP): must be 100-100000");
        }
        Ok(())
    }
}
