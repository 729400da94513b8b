//! The settings of search: where the index lives, how much memory its writer takes, how
//! quickly changes become searchable, how many searches a client address may make and which
//! words are synonyms. Loaded by the configuration core
//! ([`platform::config`]); documented in `docs/CONFIG.md`.

use std::{path::PathBuf, time::Duration};

use anyhow::bail;
use platform::config::{Config, Settings, SettingsSpec};
use serde::{Deserialize, Serialize};

use super::index::MIN_WRITER_HEAP;

/// How [`SearchSettings`] are loaded.
pub const SETTINGS: SettingsSpec = SettingsSpec::of::<SearchSettings>();

/// Search settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchSettings {
    /// Directory of this instance's index; empty means `<data_dir>/search`. One process per
    /// directory (tantivy locks it).
    pub search_dir: PathBuf,
    /// Bytes the index writer buffers before writing a segment (≥ 15 MB).
    pub search_writer_heap: usize,
    /// How long the feeder gathers events (after the first) before applying and committing
    /// them — the longest a change waits to become searchable beyond the outbox's own delay,
    /// when the index is not busy.
    #[serde(with = "humantime_serde")]
    pub search_commit_interval: Duration,
    /// The least time between two commits of the index: a commit costs tantivy a new segment
    /// (tens of ms of CPU) whatever it holds, so under a stream of writes (every like changes
    /// its article's popularity in the index) a batch waits for this since the last commit. A
    /// change after a quiet spell is committed after `search_commit_interval` only; under a
    /// stream, after at most two gaps and the interval (it may just miss a waiting batch).
    #[serde(with = "humantime_serde")]
    pub search_commit_gap: Duration,
    /// Searches a client address may make within `search_rate_window`; beyond it, 429001. 0
    /// turns the limit off (load tests).
    pub search_rate_limit: u32,
    /// The window of `search_rate_limit`.
    #[serde(with = "humantime_serde")]
    pub search_rate_window: Duration,
    /// A file of synonym groups (one per line, words separated by commas), read at start and
    /// again when it changes; empty: none beyond the built-in ones.
    pub search_synonyms: PathBuf,
    /// Whether the built-in synonym groups (`k8s, kubernetes`…) apply.
    pub search_synonyms_builtin: bool,
}

impl Default for SearchSettings {
    fn default() -> Self {
        Self {
            search_dir: PathBuf::new(),
            search_writer_heap: 32 * 1024 * 1024,
            search_commit_interval: Duration::from_millis(200),
            search_commit_gap: Duration::from_millis(500),
            search_rate_limit: 120,
            search_rate_window: Duration::from_secs(60),
            search_synonyms: PathBuf::new(),
            search_synonyms_builtin: true,
        }
    }
}

impl SearchSettings {
    /// The synonyms these settings name (the file not read yet).
    pub fn synonyms(&self) -> super::synonyms::Synonyms {
        let file =
            (!self.search_synonyms.as_os_str().is_empty()).then(|| self.search_synonyms.clone());
        super::synonyms::Synonyms::new(self.search_synonyms_builtin, file)
    }

    /// The index directory under `config`.
    pub fn dir(&self, config: &Config) -> PathBuf {
        if self.search_dir.as_os_str().is_empty() {
            config.data_dir.join("search")
        } else {
            self.search_dir.clone()
        }
    }
}

impl Settings for SearchSettings {
    const KEYS: &'static [&'static str] = &[
        "search_dir",
        "search_writer_heap",
        "search_commit_interval",
        "search_commit_gap",
        "search_rate_limit",
        "search_rate_window",
        "search_synonyms",
        "search_synonyms_builtin",
    ];
    const LIVE: &'static [&'static str] = &["search_rate_limit", "search_rate_window"];

    fn validate(&self, _config: &Config) -> anyhow::Result<()> {
        if self.search_writer_heap < MIN_WRITER_HEAP {
            bail!(
                "invalid search_writer_heap (WEBOOK_SEARCH_WRITER_HEAP): at least {MIN_WRITER_HEAP} bytes"
            );
        }
        if self.search_commit_interval.is_zero()
            || self.search_commit_interval > Duration::from_secs(1)
        {
            bail!(
                "invalid search_commit_interval (WEBOOK_SEARCH_COMMIT_INTERVAL): above 0 and at most 1s (changes must be searchable within a second)"
            );
        }
        if self.search_commit_gap > Duration::from_secs(1) {
            bail!("invalid search_commit_gap (WEBOOK_SEARCH_COMMIT_GAP): at most 1s");
        }
        if self.search_rate_window.is_zero() {
            bail!("invalid search_rate_window (WEBOOK_SEARCH_RATE_WINDOW): must be above 0");
        }
        Ok(())
    }
}
