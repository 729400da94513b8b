//! The rules of the hot list: compute, publish, serve, refresh.
//!
//! **Compute** ([`RankingService::compute`]): scan the candidates (articles first published
//! within the window) in one streaming statement, score each ([`ScoreFormula`]) and keep the
//! best N in a bounded heap ([`TopN`]); then read the winners' titles and authors in one query
//! and serialise the list once. **Publish**: the local snapshot first (cannot fail), then the shared copy, both
//! fenced by (fire time, token) so a stale computation never replaces a newer list.
//!
//! **Serve** ([`RankingService::top`]): the local snapshot; when this instance has none yet, the
//! shared copy (which then becomes the local snapshot). The local snapshot never expires: if the
//! shared copy or the database is down, the last list is still served (counted as stale once it
//! is older than its expiry). **Refresh** ([`RankingService::refresher`]): every instance loads
//! the shared copy at start and then periodically, so a list computed elsewhere (another
//! instance, the CLI) is served everywhere within one refresh. An instance that runs jobs and
//! finds no list at all computes one at once, so a fresh install serves a (possibly empty) list
//! within moments of its first start instead of answering 503 until the first scheduled run.
//!
//! **Withdrawals** ([`RankingService::withdrawal_consumer`]): an article withdrawn after the list
//! was computed leaves it when the withdrawal event arrives, not at the next computation: the
//! consuming instance removes it from its snapshot and from the shared copy in place (same
//! fence, fewer items), and every other instance installs that copy at its next refresh. A
//! withdrawal that arrives after the article was published again (by its author, or restored
//! by a moderator) takes nothing off.

use std::{sync::Arc, time::Duration};

use arc_swap::ArcSwapOption;
use tokio_util::sync::CancellationToken;

use crate::{
    article::{ArticleEvent, TOPIC_WITHDRAWN},
    ranking::{
        cache::{RankedArticle, SharedCopy, Snapshot, TOP_LIST},
        model::{ScoreFormula, TopN},
        store::{Candidate, RankingStore, SharedList},
    },
    user::Person,
};
use platform::{
    db::{duration_millis, now_millis},
    events::{EventStream, Subscription},
    telemetry::{MetricsSpec, JOB_DURATION_BUCKETS},
};

/// Histogram: seconds one computation took.
pub const RANKING_COMPUTE_SECONDS: &str = "ranking_compute_duration_seconds";
/// Counter: candidates scanned by computations.
pub const RANKING_CANDIDATES: &str = "ranking_candidates_scanned_total";
/// Counter: `GET /ranking/top` answers by `source` (`local`, `shared`, `none`).
pub const RANKING_SERVES: &str = "ranking_serves_total";
/// Counter: answers from a snapshot older than its expiry (the shared copy could not refresh it).
pub const RANKING_STALE_SERVES: &str = "ranking_stale_serves_total";

/// The hot list's metrics, for the recorder: computations take seconds to minutes, so their
/// histogram uses the job-duration buckets.
pub const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[(RANKING_COMPUTE_SECONDS, JOB_DURATION_BUCKETS)],
    describe: describe_metrics,
};

/// Describes the hot list's metrics to the installed recorder.
pub fn describe_metrics() {
    metrics::describe_histogram!(
        RANKING_COMPUTE_SECONDS,
        metrics::Unit::Seconds,
        "Time to compute the hot list"
    );
    metrics::describe_counter!(
        RANKING_CANDIDATES,
        "Articles scanned by hot list computations"
    );
    metrics::describe_counter!(
        RANKING_SERVES,
        "GET /ranking/top answers by source: local snapshot, shared copy, none"
    );
    metrics::describe_counter!(
        RANKING_STALE_SERVES,
        "Hot list answers from a snapshot older than its expiry"
    );
}

/// How the list is computed.
#[derive(Debug, Clone)]
pub struct HotListParams {
    /// How many articles the list holds.
    pub size: usize,
    /// Only articles first published this recently are candidates.
    pub window: Duration,
    /// The score.
    pub formula: ScoreFormula,
    /// How long the shared copy lives (several computation intervals).
    pub expiry: Duration,
    /// How often every instance reloads the shared copy.
    pub refresh: Duration,
}

/// What one computation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ComputeReport {
    /// Candidates scanned.
    pub candidates: u64,
    /// Articles in the list.
    pub kept: usize,
    /// When it was computed (ms).
    pub computed_at: i64,
    /// Whether the shared copy took it (false: a newer list was already there).
    pub shared: bool,
}

/// The hot list; cheap to clone.
#[derive(Debug, Clone)]
pub struct RankingService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: RankingStore,
    shared: SharedCopy,
    local: ArcSwapOption<Snapshot>,
    settings: HotListParams,
    serves: ServeCounters,
}

/// The read path's counters, looked up once instead of per request.
struct ServeCounters {
    local: metrics::Counter,
    shared: metrics::Counter,
    none: metrics::Counter,
    stale: metrics::Counter,
}

impl ServeCounters {
    fn new() -> Self {
        Self {
            local: metrics::counter!(RANKING_SERVES, "source" => "local"),
            shared: metrics::counter!(RANKING_SERVES, "source" => "shared"),
            none: metrics::counter!(RANKING_SERVES, "source" => "none"),
            stale: metrics::counter!(RANKING_STALE_SERVES),
        }
    }
}

impl std::fmt::Debug for ServeCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeCounters").finish_non_exhaustive()
    }
}

/// A computation reports its progress every this many candidates.
pub const PROGRESS_EVERY: u64 = 10_000;

/// Consumer group of the withdrawal events.
pub const WITHDRAWAL_GROUP: &str = "ranking";
const WITHDRAWAL_BATCH: usize = 100;
const WITHDRAWAL_MAX_WAIT: Duration = Duration::from_millis(50);

/// Whether `candidate` replaces `current`: a newer fence, or the same fence with fewer items
/// (articles withdrawn since its computation were taken off it; removal is the only change a
/// list undergoes after it was computed).
fn is_newer(candidate: &Snapshot, current: &Snapshot) -> bool {
    candidate.fence > current.fence
        || (candidate.fence == current.fence && candidate.items.len() < current.items.len())
}

impl RankingService {
    /// The service over `store`, sharing lists through `shared`.
    pub fn new(store: RankingStore, shared: SharedCopy, settings: HotListParams) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                shared,
                local: ArcSwapOption::empty(),
                settings,
                serves: ServeCounters::new(),
            }),
        }
    }

    /// The settings in effect.
    pub fn settings(&self) -> &HotListParams {
        &self.inner.settings
    }

    /// Computes the list at `now` (ms) for the computation fenced by `fence` = (fire time,
    /// token) and publishes it. `progress` is told the running count of scanned candidates
    /// every [`PROGRESS_EVERY`] (from the scan's thread) and the total once the scan is over;
    /// `still_owner` is asked right before publishing (a computation whose lock or claim was
    /// lost meanwhile publishes nothing).
    pub async fn compute(
        &self,
        fence: (i64, i64),
        now: i64,
        progress: impl Fn(u64) + Send + 'static,
        still_owner: impl Fn() -> bool + Send,
    ) -> anyhow::Result<ComputeReport> {
        let started = std::time::Instant::now();
        let settings = &self.inner.settings;
        let since = now.saturating_sub(duration_millis(settings.window));
        let formula = settings.formula;
        let (scanned, top, progress) = self
            .inner
            .store
            .fold_candidates(
                since,
                (0u64, TopN::<Candidate>::new(settings.size), progress),
                move |(scanned, top, progress), candidate| {
                    let score = formula.score(candidate.signals, candidate.first_published, now);
                    top.push(score, candidate.id, candidate);
                    *scanned += 1;
                    if *scanned % PROGRESS_EVERY == 0 {
                        progress(*scanned);
                    }
                },
            )
            .await?;
        progress(scanned);
        let ranked = top.into_sorted();
        let ids: Vec<i64> = ranked.iter().map(|entry| entry.id).collect();
        let mut details = self.inner.store.details(&ids).await?;
        let items: Vec<RankedArticle> = ranked
            .into_iter()
            .filter_map(|entry| {
                // An article withdrawn between the scan and this read is left out.
                let details = details.remove(&entry.id)?;
                let candidate = entry.item;
                Some(RankedArticle {
                    id: candidate.id,
                    title: details.title,
                    abstract_text: details.abstract_text,
                    author: Person::new(candidate.author_id, Some(&details.author_nickname)),
                    like_cnt: candidate.signals.likes,
                    score: entry.score,
                    ctime: candidate.first_published,
                    utime: candidate.utime,
                })
            })
            .collect();
        let scores: Vec<(i64, f64)> = items.iter().map(|item| (item.id, item.score)).collect();
        let list = SharedList {
            items: serde_json::to_string(&items)?,
            computed_at: now,
            fence_at: fence.0,
            fence_token: fence.1,
        };
        metrics::histogram!(RANKING_COMPUTE_SECONDS).record(started.elapsed().as_secs_f64());
        metrics::counter!(RANKING_CANDIDATES).increment(scanned);
        if !still_owner() {
            anyhow::bail!("lost ownership before publishing; the list was not published");
        }
        self.install(Snapshot::from_shared(&list)?);
        let shared = self
            .inner
            .shared
            .store(TOP_LIST, &list, &scores, settings.expiry)
            .await?;
        if !shared {
            tracing::warn!(
                ?fence,
                "a newer hot list is already shared; this one was not"
            );
        }
        Ok(ComputeReport {
            candidates: scanned,
            kept: items.len(),
            computed_at: now,
            shared,
        })
    }

    /// Makes `snapshot` the local one unless the current one is newer ([`is_newer`]).
    fn install(&self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        self.inner.local.rcu(|current| match current {
            Some(current) if !is_newer(&snapshot, current) => Some(current.clone()),
            _ => Some(snapshot.clone()),
        });
    }

    /// Loads the shared copy and installs it if it is newer than the local snapshot. Returns
    /// whether the local snapshot changed.
    pub async fn refresh(&self) -> anyhow::Result<bool> {
        let Some(list) = self.inner.shared.load(TOP_LIST).await? else {
            return Ok(false);
        };
        let current = self.inner.local.load_full();
        let fence = (list.fence_at, list.fence_token);
        if let Some(current) = &current {
            // Same fence and same content (the usual case every refresh): nothing to build.
            if current.fence > fence
                || (current.fence == fence && current.etag == Snapshot::etag_of(&list)?)
            {
                return Ok(false);
            }
        }
        let snapshot = Snapshot::from_shared(&list)?;
        let changed = current
            .as_ref()
            .is_none_or(|current| is_newer(&snapshot, current));
        self.install(snapshot);
        Ok(changed)
    }

    /// Takes the articles `ids` off the list at once: out of this instance's snapshot and out
    /// of the shared copy, so the other instances drop them at their next refresh.
    pub async fn forget(&self, ids: &[i64]) -> anyhow::Result<()> {
        if let Some(current) = self.inner.local.load_full() {
            if current.items.iter().any(|item| ids.contains(&item.id)) {
                let list = SharedList {
                    items: serde_json::to_string(&current.items)?,
                    computed_at: current.computed_at,
                    fence_at: current.fence.0,
                    fence_token: current.fence.1,
                };
                if let Some(filtered) = super::cache::without(&list, ids)? {
                    self.install(Snapshot::from_shared(&filtered)?);
                }
            }
        }
        if self.inner.shared.remove(TOP_LIST, ids).await? {
            tracing::info!(?ids, "withdrawn articles taken off the hot list");
        }
        Ok(())
    }

    /// Consumes article withdrawals (consumer group `ranking`) until `stop`, taking each
    /// withdrawn article off the list ([`RankingService::forget`]); a failure is retried.
    /// `subscription` as for the read counter
    /// ([`crate::interactive::InteractiveService::read_counter`]).
    pub fn withdrawal_consumer(
        &self,
        events: &EventStream,
        subscription: Subscription,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let service = self.clone();
        events.subscribe(
            subscription,
            TOPIC_WITHDRAWN,
            WITHDRAWAL_GROUP,
            WITHDRAWAL_BATCH,
            WITHDRAWAL_MAX_WAIT,
            stop,
            move |batch| {
                let service = service.clone();
                async move {
                    let mut ids: Vec<i64> = batch
                        .iter()
                        .map(|event| Ok(event.decode::<ArticleEvent>()?.id))
                        .collect::<anyhow::Result<_>>()?;
                    // An article published again since (a republish, a moderator's restore)
                    // stays: a late withdrawal must not take it off a list computed after it.
                    let back = service.inner.store.published_now(&ids).await?;
                    ids.retain(|id| !back.contains(id));
                    if ids.is_empty() {
                        return Ok(());
                    }
                    service.forget(&ids).await
                }
            },
        )
    }

    /// The list to serve: the local snapshot, else the shared copy; `None` if no list was ever
    /// computed (or none can be reached).
    pub async fn top(&self) -> Option<Arc<Snapshot>> {
        if let Some(snapshot) = self.top_local() {
            return Some(snapshot);
        }
        match self.refresh().await {
            Ok(_) => {}
            Err(err) => tracing::warn!(%err, "cannot load the shared hot list"),
        }
        let snapshot = self.inner.local.load_full();
        let served = if snapshot.is_some() {
            &self.inner.serves.shared
        } else {
            &self.inner.serves.none
        };
        served.increment(1);
        snapshot
    }

    /// The local snapshot, without looking for the shared copy when there is none.
    pub fn top_local(&self) -> Option<Arc<Snapshot>> {
        let snapshot = self.inner.local.load_full()?;
        self.inner.serves.local.increment(1);
        if now_millis() - snapshot.computed_at > duration_millis(self.inner.settings.expiry) {
            self.inner.serves.stale.increment(1);
        }
        Some(snapshot)
    }

    /// Reloads the shared copy at once and then every `refresh` until `stop`. With
    /// `compute_if_missing`, a first load that finds no list at all computes one (module docs).
    pub async fn refresher(self, stop: CancellationToken, compute_if_missing: bool) {
        let mut ticks = tokio::time::interval(self.inner.settings.refresh);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut first = true;
        loop {
            tokio::select! {
                _ = ticks.tick() => {
                    match self.refresh().await {
                        Err(err) => tracing::warn!(%err, "cannot refresh the hot list; serving the last one"),
                        Ok(_) if first && compute_if_missing && self.inner.local.load().is_none() => {
                            tokio::select! {
                                () = self.compute_first() => {}
                                () = stop.cancelled() => return,
                            }
                        }
                        Ok(_) => {}
                    }
                    first = false;
                }
                () = stop.cancelled() => return,
            }
        }
    }

    /// Computes a list now because there is none yet. It is fenced below every real
    /// computation, (0, 0), so that any scheduled run or `rank --once` supersedes it whatever
    /// its fire time.
    async fn compute_first(&self) {
        let now = now_millis();
        match self.compute((0, 0), now, |_| {}, || true).await {
            Ok(report) => tracing::info!(
                candidates = report.candidates,
                kept = report.kept,
                "computed a first hot list at start-up"
            ),
            Err(err) => tracing::warn!(
                error = format!("{err:#}"),
                "cannot compute a first hot list"
            ),
        }
    }
}
