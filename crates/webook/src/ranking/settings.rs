//! The settings of the hot list: its size and window, the score formula and weights, when and by
//! which scheduler it is computed, how often instances reload it. Loaded by the configuration
//! core ([`platform::config`]) with the rest; documented in `docs/CONFIG.md`.

use std::time::Duration;

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

use super::model::ScoreFormula;

/// How [`RankingSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<RankingSettings>();

/// Hot list settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct RankingSettings {
    /// How many articles the hot list holds (and the most `GET /ranking/top` returns).
    pub ranking_size: usize,
    /// Only articles first published this recently are ranked.
    #[serde(with = "humantime_serde")]
    pub ranking_window: Duration,
    /// Score: `hacker_news` (alias `hn`), `reddit` or `weighted`.
    pub ranking_formula: String,
    /// Time decay exponent of `hacker_news` and `weighted`.
    pub ranking_gravity: f64,
    /// Weight of a like in `weighted`.
    pub ranking_weight_likes: f64,
    /// Weight of a collect in `weighted`.
    pub ranking_weight_collects: f64,
    /// Weight of a read in `weighted`.
    pub ranking_weight_reads: f64,
    /// When the list is computed: cron with seconds or `@every`, UTC. In `sql` mode this is the
    /// schedule the `ranking` job is created with (operators may change the job afterwards).
    pub ranking_schedule: String,
    /// Which scheduler computes the list: `sql` (the durable `ranking` job) or `cron` (an
    /// in-process job under a long lock).
    pub ranking_mode: RankingMode,
    /// How often every instance reloads the shared list.
    #[serde(with = "humantime_serde")]
    pub ranking_refresh: Duration,
}

/// Which scheduler computes the hot list (see [`RankingSettings::ranking_mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RankingMode {
    /// The durable `ranking` job of the SQL scheduler.
    Sql,
    /// An in-process cron job under a long lock.
    Cron,
}

impl Default for RankingSettings {
    fn default() -> Self {
        Self {
            ranking_size: 100,
            ranking_window: Duration::from_secs(7 * 24 * 3600),
            ranking_formula: "hacker_news".to_owned(),
            ranking_gravity: 1.5,
            ranking_weight_likes: 1.0,
            ranking_weight_collects: 2.0,
            ranking_weight_reads: 0.05,
            ranking_schedule: "@every 1m".to_owned(),
            ranking_mode: RankingMode::Sql,
            ranking_refresh: Duration::from_secs(5),
        }
    }
}

impl RankingSettings {
    /// The hot list's score function from `ranking_formula`, `ranking_gravity` and the weights.
    pub fn ranking_formula(&self) -> anyhow::Result<ScoreFormula> {
        ScoreFormula::from_config(
            &self.ranking_formula,
            self.ranking_gravity,
            (
                self.ranking_weight_likes,
                self.ranking_weight_collects,
                self.ranking_weight_reads,
            ),
        )
        .map_err(|err| {
            anyhow::anyhow!(
                "invalid hot list score (ranking_formula, ranking_gravity, ranking_weight_*): {err}"
            )
        })
    }

    /// `ranking_schedule` parsed.
    pub fn ranking_schedule(&self) -> anyhow::Result<scheduler::Schedule> {
        scheduler::Schedule::parse(&self.ranking_schedule).map_err(|err| {
            anyhow::anyhow!("invalid ranking_schedule (WEBOOK_RANKING_SCHEDULE): {err}")
        })
    }
}

impl Settings for RankingSettings {
    const KEYS: &'static [&'static str] = &[
        "ranking_size",
        "ranking_window",
        "ranking_formula",
        "ranking_gravity",
        "ranking_weight_likes",
        "ranking_weight_collects",
        "ranking_weight_reads",
        "ranking_schedule",
        "ranking_mode",
        "ranking_refresh",
    ];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        self.ranking_formula()?;
        self.ranking_schedule()?;
        if !(1..=1000).contains(&self.ranking_size) {
            bail!("invalid ranking_size (WEBOOK_RANKING_SIZE): must be 1-1000");
        }
        if self.ranking_window.is_zero() || self.ranking_refresh.is_zero() {
            bail!(
                "invalid ranking_window / ranking_refresh (WEBOOK_RANKING_WINDOW, \
                 WEBOOK_RANKING_REFRESH): must be above 0"
            );
        }
        Ok(())
    }
}
