//! The settings of the database move: how long a switch may hold an instance paused.
//! Loaded by the configuration core ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

/// How [`MoveSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<MoveSettings>();

/// The shortest and longest pause deadline accepted.
const SHORTEST: Duration = Duration::from_secs(1);
const LONGEST: Duration = Duration::from_secs(60);

/// Move settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct MoveSettings {
    /// How long an instance stays paused by a switch without seeing its outcome before it
    /// serves again on the phase it was in (and how long the switch has to flip: it aborts a
    /// margin earlier). 1 s to 60 s.
    #[serde(with = "humantime_serde")]
    pub db_move_pause_deadline: Duration,
}

impl Default for MoveSettings {
    fn default() -> Self {
        Self {
            db_move_pause_deadline: Duration::from_secs(5),
        }
    }
}

impl Settings for MoveSettings {
    const KEYS: &'static [&'static str] = &["db_move_pause_deadline"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if !(SHORTEST..=LONGEST).contains(&self.db_move_pause_deadline) {
            bail!("invalid db_move_pause_deadline (WEBOOK_DB_MOVE_PAUSE_DEADLINE): 1s to 60s");
        }
        Ok(())
    }
}
