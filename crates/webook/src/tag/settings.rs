//! The settings of tags: how many tags one user may own. Loaded by the configuration core
//! ([`platform::config`]); documented in `docs/CONFIG.md`.

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`TagSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<TagSettings>();

/// Largest accepted `tag_max_per_user`: an owner's whole list is one cache entry.
pub const MAX_TAG_MAX_PER_USER: u32 = 100_000;

/// Tag settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct TagSettings {
    /// Most tags one user may own; creating another new one is code 4 (finding an existing one
    /// still works). 1–[`MAX_TAG_MAX_PER_USER`].
    pub tag_max_per_user: u32,
}

impl Default for TagSettings {
    fn default() -> Self {
        Self {
            tag_max_per_user: 1000,
        }
    }
}

impl Settings for TagSettings {
    const KEYS: &'static [&'static str] = &["tag_max_per_user"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if !(1..=MAX_TAG_MAX_PER_USER).contains(&self.tag_max_per_user) {
            bail!(
                "invalid tag_max_per_user (WEBOOK_TAG_MAX_PER_USER): must be 1-{MAX_TAG_MAX_PER_USER}"
            );
        }
        Ok(())
    }
}
