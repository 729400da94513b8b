//! The screening every instance applies: the compiled matcher of the current word lists,
//! swapped in whole when the lists change, and what a write's text gets from it.
//!
//! Data flow: admins edit lists through [`crate::screening::http`] ([`Screening::put`],
//! [`Screening::delete`]), which write the database and bump its version; every instance's
//! [`Screening::follow`] task reads the version every poll (one point read), and on a change
//! loads the lists, compiles a new [`Screen`] off the async runtime and swaps it in — so an
//! edit applies everywhere within a poll, without a restart. Articles and comments ask
//! [`Screening::verdict`] before they write.

use std::{sync::Arc, time::Duration};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use platform::{
    cpu,
    db::now_millis,
    error::{AppError, Msg},
};

use crate::screening::{
    matcher::{Action, Hit, Screen},
    store::{ScreeningStore, StoredList},
};

/// Counter: texts screened, by `outcome` (clean, refused, held).
pub const SCREENING_CHECKS_TOTAL: &str = "screening_checks_total";
/// Gauge: words in the matcher this instance uses.
pub const SCREENING_WORDS: &str = "screening_words";
/// Gauge: the word-list version this instance applies.
pub const SCREENING_VERSION: &str = "screening_version";

/// The screening metrics.
pub const METRICS: platform::telemetry::MetricsSpec = platform::telemetry::MetricsSpec {
    histogram_buckets: &[],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_counter!(
        SCREENING_CHECKS_TOTAL,
        "Texts screened against the word lists, by outcome (clean, refused, held)"
    );
    metrics::describe_gauge!(SCREENING_WORDS, "Words in this instance's matcher");
    metrics::describe_gauge!(
        SCREENING_VERSION,
        "The word-list version this instance applies"
    );
}

/// What a write's text gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing matched.
    Clean,
    /// Held for review: the reason to show its author and the moderators.
    Held(String),
}

/// The matcher in use and where it comes from; cheap to clone.
#[derive(Clone)]
pub struct Screening {
    current: Arc<ArcSwap<(i64, Screen)>>,
    store: Option<ScreeningStore>,
}

impl std::fmt::Debug for Screening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Screening")
    }
}

impl Screening {
    /// Screening with no lists at all (services built outside an application, benches).
    pub fn none() -> Self {
        Self {
            current: Arc::new(ArcSwap::from_pointee((-1, Screen::empty()))),
            store: None,
        }
    }

    /// Screening by the lists in `store`, loaded now.
    pub async fn load(store: ScreeningStore) -> anyhow::Result<Self> {
        let screening = Self {
            current: Arc::new(ArcSwap::from_pointee((-1, Screen::empty()))),
            store: Some(store),
        };
        screening.reload().await?;
        Ok(screening)
    }

    /// Loads the lists again if their version changed; whether it did.
    pub async fn reload(&self) -> anyhow::Result<bool> {
        let Some(store) = &self.store else {
            return Ok(false);
        };
        let version = store.version().await?;
        if version == self.current.load().0 {
            return Ok(false);
        }
        let lists = store.word_lists().await?;
        let screen = cpu::run(move || Screen::new(&lists)).await?;
        if let Some(err) = screen.build_error() {
            tracing::error!(%err, "the word lists cannot be compiled; screening with none");
        }
        metrics::gauge!(SCREENING_WORDS).set(screen.word_count() as f64);
        metrics::gauge!(SCREENING_VERSION).set(version as f64);
        tracing::info!(version, words = screen.word_count(), "word lists applied");
        self.current.store(Arc::new((version, screen)));
        Ok(true)
    }

    /// Follows the lists' version every `poll` until `stop` (a failed read is retried).
    pub async fn follow(self, poll: Duration, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(poll) => {}
            }
            if let Err(err) = self.reload().await {
                tracing::warn!(error = format!("{err:#}"), "cannot read the word lists");
            }
        }
    }

    /// The verdict on a write of `title` (plain text) and `body` (HTML when `html`): refused
    /// (code 4 naming the list and the word) or held (the reason), else clean. Screening runs
    /// on the blocking pool: it is linear in the text but a 512 KiB article is milliseconds.
    pub async fn verdict(&self, title: &str, body: &str, html: bool) -> Result<Outcome, AppError> {
        let current = self.current.load_full();
        if current.1.word_count() == 0 {
            return Ok(Outcome::Clean);
        }
        let (title, body) = (title.to_owned(), body.to_owned());
        let hits: Vec<Hit> = cpu::run(move || {
            let screen = &current.1;
            let mut hits = screen.check(&title).hits;
            let body = if html {
                screen.check_html(&body)
            } else {
                screen.check(&body)
            };
            hits.extend(body.hits);
            hits
        })
        .await?;
        if let Some(hit) = hits.iter().find(|hit| hit.action == Action::Refuse) {
            metrics::counter!(SCREENING_CHECKS_TOTAL, "outcome" => "refused").increment(1);
            return Err(AppError::InvalidInput(Msg::owned(
                format!(
                    "content: contains \u{ab}{}\u{bb}, which this site does not allow (list \u{ab}{}\u{bb})",
                    hit.word, hit.list
                ),
                format!(
                    "content：包含本站不允许的内容\u{ab}{}\u{bb}（词表\u{ab}{}\u{bb}）",
                    hit.word, hit.list
                ),
            )));
        }
        if let Some(hit) = hits.iter().find(|hit| hit.action == Action::Hold) {
            metrics::counter!(SCREENING_CHECKS_TOTAL, "outcome" => "held").increment(1);
            return Ok(Outcome::Held(format!(
                "held for review: contains \u{ab}{}\u{bb} (list \u{ab}{}\u{bb})",
                hit.word, hit.list
            )));
        }
        metrics::counter!(SCREENING_CHECKS_TOTAL, "outcome" => "clean").increment(1);
        Ok(Outcome::Clean)
    }

    /// Every list.
    pub async fn lists(&self) -> Result<Vec<StoredList>, AppError> {
        Ok(self.store()?.lists().await?)
    }

    /// Creates or replaces list `name` (applied at every instance's next poll, at once here).
    pub async fn put(
        &self,
        admin: i64,
        name: &str,
        action: Action,
        words: &[String],
    ) -> Result<(), AppError> {
        self.store()?
            .put(name, action, words, admin, now_millis())
            .await?;
        self.reload().await?;
        Ok(())
    }

    /// Deletes list `name`; whether it existed.
    pub async fn delete(&self, name: &str) -> Result<bool, AppError> {
        let deleted = self.store()?.delete(name).await?;
        self.reload().await?;
        Ok(deleted)
    }

    fn store(&self) -> Result<&ScreeningStore, AppError> {
        self.store.as_ref().ok_or_else(|| {
            AppError::Internal(anyhow::anyhow!("screening was built without its store"))
        })
    }
}
