//! The settings of notifications: how long they are kept, who gets the live stream. Loaded by the configuration core
//! ([`platform::config`]); documented in `docs/CONFIG.md`. The retention is applied by the
//! `purge_notifications` maintenance job ([`super::jobs`]).

use std::time::Duration;

use anyhow::bail;
use platform::{
    config::{Config, Settings, SettingsSpec},
    live::Rollout,
};
use serde::{Deserialize, Serialize};

/// How [`NotificationSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<NotificationSettings>();

/// Shortest accepted `notifications_retention`.
pub const MIN_RETENTION: Duration = Duration::from_secs(3600);

/// Notification settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct NotificationSettings {
    /// Notifications last changed longer ago than this are deleted (at least an hour).
    #[serde(with = "humantime_serde")]
    pub notifications_retention: Duration,
    /// Who gets the unread count as a live stream (`GET /notifications/stream`); the others
    /// get 204 and their console polls (a feature switch: `on`, `off`, `25%`, user ids).
    pub notifications_stream: Rollout,
}

impl Default for NotificationSettings {
    fn default() -> Self {
        Self {
            notifications_retention: Duration::from_secs(90 * 24 * 3600),
            notifications_stream: Rollout::everyone(),
        }
    }
}

impl Settings for NotificationSettings {
    const KEYS: &'static [&'static str] = &["notifications_retention", "notifications_stream"];
    const LIVE: &'static [&'static str] = &["notifications_stream"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if self.notifications_retention < MIN_RETENTION {
            bail!(
                "invalid notifications_retention (WEBOOK_NOTIFICATIONS_RETENTION): must be at least 1h"
            );
        }
        Ok(())
    }
}
