//! Keeping the index in step with the database: rebuilds from a keyset scan, then follows the
//! outbox events of everything a document is made of.
//!
//! Events are only a signal of *which* objects changed: the feeder reads their current rows
//! and writes their documents as they are now (a withdrawn or vanished article is removed).
//! Applying a batch is therefore idempotent and order-free — a late or repeated event writes
//! the same document — and a batch touching an article a hundred times (likes) writes it once.
//! Each batch is one commit carrying the stream positions it reached
//! ([`IndexState::positions`]), so a restarted instance resumes after the last commit. A commit
//! costs tantivy a new segment whatever it holds, so commits are at least the commit gap
//! (`search_commit_gap`) apart: a batch that comes sooner waits for it, and what arrives
//! meanwhile makes the next batch — under a stream of likes, two commits a second by default.
//!
//! Start: [`SearchIndex::open`] tells whether the index is complete; if not, or if the stream
//! no longer holds everything after its positions ([`EventStream::can_resume`]), the feeder
//! takes the stream's heads, rebuilds (articles then users, 1000 rows a page, with progress on
//! `/readyz` and in the log), commits with those heads and follows from them. In-process the
//! follower runs from the start (its groups must exist before the outbox relays), and while a
//! rebuild runs it only remembers what changed, applied once the rebuild is done. An event
//! whose payload does not decode names no object: it is skipped (and logged), never retried.
//!
//! An index that cannot be written (its directory gone, the disk full): the failed batch's
//! error is marked [`transient`], so the event platform retries it with a growing pause and
//! never parks it, and `/readyz` reports `degraded: <reason>`. Queries go on being answered by
//! the reader already open (the last good commit). A failed writer is never used again: the
//! feeder's keeper ([`Feeder::run`]) closes it and, every 50 ms growing to 5 s, checks that the
//! directory exists — it never creates it (it may be a volume's mount point): the operator
//! restores or recreates it — then opens it anew. The new index is taken as it is when it
//! still holds exactly the last commit this process made (a full disk that freed up), or was
//! rebuilt from the database after that commit (`webook search reindex`); otherwise (empty,
//! incomplete, or a restored older copy) it is rebuilt from the database while events are
//! only noted, as at start, and the old reader keeps answering until the new index is swapped
//! in. Then the noted and retried batches are applied, and search reports `ready` once a
//! commit has succeeded — no restart needed.

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use anyhow::Context;
use arc_swap::ArcSwap;
use platform::{
    db::now_millis,
    events::{failure::transient, follow::Positions, Event, EventStream},
    ops::StatusBoard,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{
    index::{
        self, ArticleDoc, Change, CurrentIndex, IndexState, SearchIndex, UserDoc, SCHEMA_VERSION,
    },
    store::{ArticleRow, SearchStore, UserRow},
};
use crate::{
    article::{text_of, ArticleEvent, TOPIC_PUBLISHED, TOPIC_WITHDRAWN},
    biz::Biz,
    interactive::{InteractionEvent, TOPIC_LIKE_CHANGED},
    tag::{TagsEvent, TOPIC_TAGS_CHANGED},
    user::{display_name, TOPIC_PROFILE_CHANGED},
};

/// The topics documents are made of.
pub const TOPICS: &[&str] = &[
    TOPIC_PUBLISHED,
    TOPIC_WITHDRAWN,
    TOPIC_TAGS_CHANGED,
    TOPIC_LIKE_CHANGED,
    TOPIC_PROFILE_CHANGED,
];
/// In-process consumer group of the follower.
const GROUP: &str = "search";
/// Events per applied batch at most: one batch is one commit, and a batch's events shrink to
/// the objects they name (a hundred likes of an article write it once), so what piles up while
/// a batch waits for the commit gap is taken at once (at 10 000 likes a second, batches of the
/// outbox relay's 500 were 20 commits a second).
const BATCH: usize = 10_000;
/// Rows per page of a rebuild.
const REBUILD_PAGE: i64 = 1000;
/// A rebuild commits (as incomplete) every this many rows: the writer's bookkeeping of
/// uncommitted segments grows with the documents written since the last commit.
const REBUILD_COMMIT_ROWS: u64 = 10_000;
/// The first pause before the index is opened again after a failure, doubled up to
/// [`MAX_RETRY_PAUSE`] (the event platform's own retry pauses).
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(50);
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(5);
/// The longest reason `/readyz` shows after `degraded: `.
const MAX_REASON_CHARS: usize = 120;

/// Counter: events applied to the index.
pub const SEARCH_EVENTS_APPLIED_TOTAL: &str = "search_events_applied_total";
/// Counter: documents written (put or removed), by `kind` of change.
pub const SEARCH_DOCUMENTS_WRITTEN_TOTAL: &str = "search_documents_written_total";
/// Gauge: age of the newest event applied at its commit (s): how far behind the index runs.
pub const SEARCH_INDEX_LAG_SECONDS: &str = "search_index_lag_seconds";

// Phase 0: opening (before the first check of the index).
const REBUILDING: u8 = 1;
const READY: u8 = 2;
/// The index cannot be written, or is being reopened or rebuilt after it could not.
const DEGRADED: u8 = 3;

/// Whether queries may be served, and a rebuild's progress; shared with the service.
#[derive(Debug, Default)]
pub struct Readiness {
    phase: AtomicU8,
    rebuilt: AtomicU64,
    total: AtomicU64,
    /// A complete index has been served: it goes on answering while search is degraded.
    searchable: AtomicBool,
    /// Why search is degraded.
    reason: Mutex<String>,
}

impl Readiness {
    /// Whether the index is complete, followed and written.
    pub fn is_ready(&self) -> bool {
        self.phase.load(Ordering::Acquire) == READY
    }

    /// Whether queries are answered: once the index was complete, also while it cannot be
    /// written or is being rebuilt after that (from the last good commit).
    pub fn is_searchable(&self) -> bool {
        self.searchable.load(Ordering::Acquire)
    }

    fn lock_reason(&self) -> std::sync::MutexGuard<'_, String> {
        self.reason
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn describe(&self) -> String {
        match self.phase.load(Ordering::Acquire) {
            READY => "ready".to_owned(),
            REBUILDING => format!(
                "rebuilding: {} of {} rows",
                self.rebuilt.load(Ordering::Relaxed),
                self.total.load(Ordering::Relaxed)
            ),
            DEGRADED => format!("degraded: {}", self.lock_reason()),
            _ => "opening".to_owned(),
        }
    }
}

/// How the index's writer is doing; the keeper's side of [`Feeder`].
#[derive(Debug, Default)]
struct Health {
    /// A write or commit failed: batches are refused (transient) until the keeper has opened
    /// the index again.
    broken: AtomicBool,
    /// Wakes the keeper.
    trouble: Notify,
    /// When this process last committed (ms; at first, when it started): an index rebuilt
    /// from the database after this lacks nothing the failed one held.
    last_commit: AtomicI64,
}

/// `err` in a few words for `/readyz`: its outermost message and, if another, its root cause.
fn short_reason(err: &anyhow::Error) -> String {
    let (outer, root) = (err.to_string(), err.root_cause().to_string());
    let reason = if outer == root {
        outer
    } else {
        format!("{outer}: {root}")
    };
    match reason.char_indices().nth(MAX_REASON_CHARS) {
        Some((cut, _)) => format!("{}…", &reason[..cut]),
        None => reason,
    }
}

/// Objects changed by a batch of events.
#[derive(Debug, Default, Clone)]
struct Dirty {
    articles: BTreeSet<i64>,
    /// Users whose profile changed: their document and their articles' author name.
    users: BTreeSet<i64>,
}

impl Dirty {
    fn note(&mut self, events: &[Event]) {
        for event in events {
            match event.topic.as_str() {
                TOPIC_PUBLISHED | TOPIC_WITHDRAWN => {
                    if let Some(article) = event.payload_as::<ArticleEvent>() {
                        self.articles.insert(article.id);
                    }
                }
                TOPIC_TAGS_CHANGED => {
                    if let Some(tags) = event.payload_as::<TagsEvent>() {
                        if tags.biz == Biz::Article {
                            self.articles.insert(tags.biz_id);
                        }
                    }
                }
                TOPIC_LIKE_CHANGED => {
                    if let Some(like) = event.payload_as::<InteractionEvent>() {
                        if like.biz == Biz::Article {
                            self.articles.insert(like.biz_id);
                        }
                    }
                }
                TOPIC_PROFILE_CHANGED => {
                    if let Ok(uid) = event.key.parse::<i64>() {
                        self.users.insert(uid);
                    }
                }
                _ => {}
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.articles.is_empty() && self.users.is_empty()
    }

    fn extend(&mut self, other: Dirty) {
        self.articles.extend(other.articles);
        self.users.extend(other.users);
    }
}

/// The feeder of one index.
#[derive(Clone)]
pub struct Feeder {
    /// The index written and queried; replaced after a failure ([`Feeder::run`]).
    index: CurrentIndex,
    store: SearchStore,
    readiness: Arc<Readiness>,
    status: StatusBoard,
    /// What the next commit records: the positions reached, when the index was rebuilt.
    state: Arc<Mutex<IndexState>>,
    /// What changed while a rebuild ran, applied after it.
    pending: Arc<Mutex<Option<Dirty>>>,
    /// The least time between two commits of followed batches (module docs).
    commit_gap: Duration,
    health: Arc<Health>,
}

fn article_doc(row: ArticleRow, tags: Vec<String>) -> ArticleDoc {
    ArticleDoc {
        id: row.id,
        author: display_name(&row.author_nickname, row.author_id),
        text: text_of(&row.content),
        title: row.title,
        tags,
        ctime: row.ctime,
        likes: row.likes,
    }
}

fn user_change(row: UserRow) -> Change {
    if row.nickname.trim().is_empty() && row.about.trim().is_empty() {
        Change::Remove(index::user_key(row.id))
    } else {
        Change::User(UserDoc {
            id: row.id,
            nickname: row.nickname,
            about: row.about,
        })
    }
}

impl Feeder {
    /// The feeder of `index` over `store`, reporting on `readiness` and `status`.
    pub fn new(
        index: Arc<SearchIndex>,
        store: SearchStore,
        readiness: Arc<Readiness>,
        status: StatusBoard,
    ) -> Self {
        let health = Health::default();
        health.last_commit.store(now_millis(), Ordering::Relaxed);
        Self {
            index: Arc::new(ArcSwap::new(index)),
            store,
            readiness,
            status,
            state: Arc::default(),
            pending: Arc::default(),
            commit_gap: Duration::ZERO,
            health: Arc::new(health),
        }
    }

    /// The feeder with commits of followed batches at least `gap` apart (module docs).
    pub fn with_commit_gap(mut self, gap: Duration) -> Self {
        self.commit_gap = gap;
        self
    }

    /// Waits until the commit gap has passed since the last commit (at most the gap, whatever
    /// the clock did).
    async fn wait_for_commit_gap(&self) {
        let gap = platform::db::duration_millis(self.commit_gap);
        let since = now_millis().saturating_sub(self.health.last_commit.load(Ordering::Relaxed));
        let wait = gap.saturating_sub(since).clamp(0, gap);
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())).await;
        }
    }

    /// The index queries read: the one this feeder writes, swapped when it reopens it.
    pub fn index(&self) -> CurrentIndex {
        self.index.clone()
    }

    fn current(&self) -> Arc<SearchIndex> {
        self.index.load_full()
    }

    fn report(&self) {
        self.status.set("search", self.readiness.describe());
    }

    fn set_phase(&self, phase: u8) {
        self.readiness.phase.store(phase, Ordering::Release);
        self.report();
    }

    fn ready(&self) {
        self.readiness.searchable.store(true, Ordering::Release);
        self.set_phase(READY);
    }

    fn degrade(&self, reason: String) {
        *self.readiness.lock_reason() = reason;
        self.set_phase(DEGRADED);
    }

    /// A rebuild's progress: `rebuilding: …` at first, `degraded: rebuilding, …` while the
    /// last good index answers queries.
    fn rebuilding(&self, done: u64, total: u64) {
        self.readiness.rebuilt.store(done, Ordering::Relaxed);
        self.readiness.total.store(total, Ordering::Relaxed);
        if self.readiness.is_searchable() {
            self.degrade(format!("rebuilding, {done} of {total} rows"));
        } else {
            self.set_phase(REBUILDING);
        }
    }

    /// Reports `err` as why search is degraded.
    async fn failed(&self, err: &anyhow::Error) {
        let dir = self.current().dir().to_path_buf();
        let present = tokio::fs::metadata(&dir)
            .await
            .is_ok_and(|meta| meta.is_dir());
        self.degrade(if present {
            short_reason(err)
        } else {
            "index directory missing".to_owned()
        });
    }

    /// A write or commit of the current index failed: batches wait for the keeper, which
    /// opens the index again. Returns `err` marked transient.
    async fn index_failed(&self, err: anyhow::Error) -> anyhow::Error {
        if !self.health.broken.swap(true, Ordering::AcqRel) {
            tracing::error!(
                error = format!("{err:#}"),
                "the search index cannot be written; queries are answered from its last commit"
            );
        }
        self.failed(&err).await;
        self.health.trouble.notify_one();
        transient(err)
    }

    /// After a batch was written: a degraded search whose index was opened again is ready.
    fn healthy(&self) {
        if self.readiness.phase.load(Ordering::Acquire) == DEGRADED
            && !self.health.broken.load(Ordering::Acquire)
        {
            tracing::info!("the search index is written again");
            self.ready();
        }
    }

    /// Runs until `stop`: rebuilds if `opened` (the state [`SearchIndex::open`] found) says so,
    /// then follows `events`. Registers the in-process follower before returning the future.
    pub fn run(
        self,
        events: EventStream,
        opened: Option<IndexState>,
        commit_interval: Duration,
        stop: CancellationToken,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.report();
        let in_process = (!events.keeps_positions()).then(|| {
            *self.lock_pending() = Some(Dirty::default());
            let feeder = self.clone();
            events.follow(
                TOPICS,
                GROUP,
                Positions::default(),
                BATCH,
                commit_interval,
                stop.clone(),
                move |batch, reached| {
                    let feeder = feeder.clone();
                    async move { feeder.apply_events(batch, reached).await }
                },
            )
        });
        async move {
            match in_process {
                // The groups are consumed while the index is checked or rebuilt: what arrives
                // meanwhile is only noted (so the outbox relay, which waits for every group,
                // never waits for a rebuild), then applied once the index is complete.
                Some(follow) => {
                    let keep = async {
                        if self
                            .start_until_ready(&events, opened, &stop)
                            .await
                            .is_some()
                        {
                            self.keep_writable(&events, &stop).await;
                        }
                    };
                    tokio::join!(follow, keep);
                }
                None => {
                    let Some(from) = self.start_until_ready(&events, opened, &stop).await else {
                        return;
                    };
                    let feeder = self.clone();
                    let follow = events.follow(
                        TOPICS,
                        GROUP,
                        from,
                        BATCH,
                        commit_interval,
                        stop.clone(),
                        move |batch, reached| {
                            let feeder = feeder.clone();
                            async move { feeder.apply_events(batch, reached).await }
                        },
                    );
                    tokio::join!(follow, self.keep_writable(&events, &stop));
                }
            }
        }
    }

    /// Waits `pause` (`false`: stopped first) and doubles it up to [`MAX_RETRY_PAUSE`].
    async fn pause(pause: &mut Duration, stop: &CancellationToken) -> bool {
        let waited = tokio::select! {
            () = tokio::time::sleep(*pause) => true,
            () = stop.cancelled() => false,
        };
        *pause = (*pause * 2).min(MAX_RETRY_PAUSE);
        waited
    }

    /// Makes the index complete and ready to follow: the one [`SearchIndex::open`] gave
    /// (`opened`, its state) at first, the directory opened again after a failure; retried
    /// with a growing pause until it succeeds. The positions to follow from; `None` if
    /// stopped first.
    async fn start_until_ready(
        &self,
        events: &EventStream,
        opened: Option<IndexState>,
        stop: &CancellationToken,
    ) -> Option<Positions> {
        let mut opened = Some(opened);
        let mut pause = FIRST_RETRY_PAUSE;
        loop {
            match self.start(events, opened.take(), stop).await {
                Ok(from) => return from,
                Err(err) => {
                    tracing::error!(
                        error = format!("{err:#}"),
                        retry_in = ?pause,
                        "search index start failed"
                    );
                    self.failed(&err).await;
                    if !Self::pause(&mut pause, stop).await {
                        return None;
                    }
                }
            }
        }
    }

    /// The keeper: after a failed write ([`Feeder::index_failed`]), opens the index again
    /// ([`Feeder::recover`]), retried with a growing pause until it succeeds; until `stop`.
    async fn keep_writable(&self, events: &EventStream, stop: &CancellationToken) {
        loop {
            tokio::select! {
                () = self.health.trouble.notified() => {},
                () = stop.cancelled() => return,
            }
            if !self.health.broken.load(Ordering::Acquire) {
                continue;
            }
            let mut pause = FIRST_RETRY_PAUSE;
            loop {
                match self.recover(events, stop).await {
                    Ok(Some(())) => break,
                    Ok(None) => return,
                    Err(err) => {
                        tracing::warn!(
                            error = format!("{err:#}"),
                            retry_in = ?pause,
                            "the search index cannot be opened again yet"
                        );
                        self.failed(&err).await;
                        if !Self::pause(&mut pause, stop).await {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Closes the current index's writer and opens its directory again (the directory must
    /// exist: it is never created here).
    async fn reopen(&self) -> anyhow::Result<(Arc<SearchIndex>, Option<IndexState>)> {
        let current = self.current();
        tokio::task::spawn_blocking(move || {
            current.close_writer();
            let (index, state) = current.reopen()?;
            anyhow::Ok((Arc::new(index), state))
        })
        .await?
    }

    /// Opens the index again after a failed write and makes it the current one (module docs:
    /// when it is taken as it is, when rebuilt). `None` if stopped first.
    async fn recover(
        &self,
        events: &EventStream,
        stop: &CancellationToken,
    ) -> anyhow::Result<Option<()>> {
        let failed = self.current().committed();
        let (index, state) = self.reopen().await?;
        let unchanged = failed.is_some() && index.committed() == failed;
        let rebuilt_since = state
            .as_ref()
            .is_some_and(|state| state.built_at > self.health.last_commit.load(Ordering::Relaxed));
        let usable = unchanged || rebuilt_since;
        tracing::info!(
            unchanged,
            rebuilt_since,
            "the search index directory was opened again"
        );
        let Some((_, wrote)) = self.settle(index, state, usable, events, stop).await? else {
            return Ok(None);
        };
        if wrote {
            self.ready();
        } else {
            // Ready once the batch that failed has been written.
            self.degrade("index reopened, retrying the failed write".to_owned());
        }
        Ok(Some(()))
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Option<Dirty>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One attempt of [`Feeder::start_until_ready`]: `opened` at first (`Some`), the
    /// directory opened again after that (`None`).
    async fn start(
        &self,
        events: &EventStream,
        opened: Option<Option<IndexState>>,
        stop: &CancellationToken,
    ) -> anyhow::Result<Option<Positions>> {
        let (index, state) = match opened {
            Some(state) => (self.current(), state),
            None => self.reopen().await?,
        };
        let resumable = match &state {
            Some(state) => events.can_resume(TOPICS, &state.positions).await?,
            None => false,
        };
        let Some((from, _)) = self.settle(index, state, resumable, events, stop).await? else {
            return Ok(None);
        };
        self.ready();
        Ok(Some(from))
    }

    /// Makes `index` (opened with `state`) the current index: taken as it is if `usable`,
    /// else rebuilt from the database first — meanwhile followed batches are only noted, and
    /// queries keep the current index — then applies what was noted. The positions to follow
    /// from and whether anything was committed; `None` if stopped first.
    async fn settle(
        &self,
        index: Arc<SearchIndex>,
        state: Option<IndexState>,
        usable: bool,
        events: &EventStream,
        stop: &CancellationToken,
    ) -> anyhow::Result<Option<(Positions, bool)>> {
        let (state, mut wrote) = match state.filter(|_| usable) {
            Some(state) => {
                tracing::info!(positions = ?state.positions, "search index resumes");
                (state, false)
            }
            None => {
                let heads = events.heads(TOPICS).await?;
                self.begin_rebuild(&index).await?;
                self.lock_pending().get_or_insert_with(Dirty::default);
                let feeder = self.clone();
                let rebuilt = self
                    .rebuild_into(&index, heads, stop, move |done, total| {
                        feeder.rebuilding(done, total);
                    })
                    .await?;
                let Some((rows, state)) = rebuilt else {
                    return Ok(None);
                };
                tracing::info!(rows, "search index rebuilt");
                (state, true)
            }
        };
        let from = state.positions.clone();
        *self.lock_state() = state;
        self.index.store(index);
        self.health.broken.store(false, Ordering::Release);
        // Changes noted meanwhile are applied before queries see the new index as ready; if
        // that fails they are noted again for the next attempt.
        let pending = self.lock_pending().take();
        if let Some(dirty) = pending.filter(|dirty| !dirty.is_empty()) {
            if let Err(err) = self.apply(dirty.clone(), Positions::default(), 0).await {
                self.lock_pending()
                    .get_or_insert_with(Dirty::default)
                    .extend(dirty);
                return Err(err);
            }
            wrote = true;
        }
        Ok(Some((from, wrote)))
    }

    /// Empties `index` and commits it as incomplete before events are only noted: whatever
    /// it held (a complete but older copy), a crash from here on rebuilds it at the next start
    /// rather than resuming without what was noted.
    async fn begin_rebuild(&self, index: &Arc<SearchIndex>) -> anyhow::Result<()> {
        let cleared = index.clone();
        tokio::task::spawn_blocking(move || cleared.clear()).await??;
        self.commit(
            index,
            IndexState {
                schema: SCHEMA_VERSION,
                complete: false,
                positions: Positions::default(),
                built_at: 0,
            },
        )
        .await
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, IndexState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Empties the current index and writes every published article and every user with a
    /// profile, reporting (rows done, rows in all) as it goes; commits with `heads` as the
    /// positions. `None` if stopped first (nothing committed as complete).
    pub async fn rebuild(
        &self,
        heads: Positions,
        stop: &CancellationToken,
        progress: impl Fn(u64, u64),
    ) -> anyhow::Result<Option<u64>> {
        let rebuilt = self
            .rebuild_into(&self.current(), heads, stop, progress)
            .await?;
        Ok(rebuilt.map(|(rows, _)| rows))
    }

    /// [`Feeder::rebuild`] of `index`; the rows and the state committed.
    async fn rebuild_into(
        &self,
        index: &Arc<SearchIndex>,
        heads: Positions,
        stop: &CancellationToken,
        progress: impl Fn(u64, u64),
    ) -> anyhow::Result<Option<(u64, IndexState)>> {
        let cleared = index.clone();
        tokio::task::spawn_blocking(move || cleared.clear()).await??;
        // Every change committed before this is read below.
        let built_at = now_millis();
        let total = self
            .store
            .rebuild_total()
            .await
            .context("counting rows to index")?;
        let mut done = 0u64;
        progress(done, total);
        let mut after = 0;
        loop {
            if stop.is_cancelled() {
                return Ok(None);
            }
            let rows = self.store.article_page(after, REBUILD_PAGE).await?;
            let Some(last) = rows.last() else { break };
            after = last.id;
            done += rows.len() as u64;
            let changes = self.article_changes(rows).await?;
            self.write(index, changes).await?;
            progress(done, total);
            if done % REBUILD_COMMIT_ROWS < REBUILD_PAGE as u64 {
                self.commit(
                    index,
                    IndexState {
                        schema: SCHEMA_VERSION,
                        complete: false,
                        positions: Positions::default(),
                        built_at,
                    },
                )
                .await?;
            }
        }
        let mut after = 0;
        loop {
            if stop.is_cancelled() {
                return Ok(None);
            }
            let rows = self.store.user_page(after, REBUILD_PAGE).await?;
            let Some(last) = rows.last() else { break };
            after = last.id;
            done += rows.len() as u64;
            self.write(index, rows.into_iter().map(user_change).collect())
                .await?;
            progress(done, total);
        }
        let state = IndexState {
            schema: SCHEMA_VERSION,
            complete: true,
            positions: heads,
            built_at,
        };
        self.commit(index, state.clone()).await?;
        let fresh = index.clone();
        tokio::task::spawn_blocking(move || fresh.mark_fresh()).await??;
        Ok(Some((done, state)))
    }

    /// The documents of `rows` (published articles) with their tags; the text is extracted
    /// on a blocking thread.
    async fn article_changes(&self, rows: Vec<ArticleRow>) -> anyhow::Result<Vec<Change>> {
        let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
        let mut tags = self.store.tags(&ids).await?;
        let rows: Vec<(ArticleRow, Vec<String>)> = rows
            .into_iter()
            .map(|row| {
                let tags = tags.remove(&row.id).unwrap_or_default();
                (row, tags)
            })
            .collect();
        Ok(tokio::task::spawn_blocking(move || {
            rows.into_iter()
                .map(|(row, tags)| Change::Article(article_doc(row, tags)))
                .collect()
        })
        .await?)
    }

    async fn write(&self, index: &Arc<SearchIndex>, changes: Vec<Change>) -> anyhow::Result<()> {
        let removed = changes
            .iter()
            .filter(|change| matches!(change, Change::Remove(_)))
            .count() as u64;
        let put = changes.len() as u64 - removed;
        let index = index.clone();
        tokio::task::spawn_blocking(move || index.write(changes))
            .await?
            .context("writing the search index")?;
        metrics::counter!(SEARCH_DOCUMENTS_WRITTEN_TOTAL, "kind" => "remove").increment(removed);
        metrics::counter!(SEARCH_DOCUMENTS_WRITTEN_TOTAL, "kind" => "put").increment(put);
        Ok(())
    }

    async fn commit(&self, index: &Arc<SearchIndex>, state: IndexState) -> anyhow::Result<()> {
        let index = index.clone();
        tokio::task::spawn_blocking(move || index.commit(&state))
            .await?
            .context("committing the search index")?;
        self.health
            .last_commit
            .store(now_millis(), Ordering::Relaxed);
        Ok(())
    }

    /// One followed batch: noted while a rebuild runs, else applied; refused (transient)
    /// while the index waits to be opened again.
    async fn apply_events(&self, events: Vec<Event>, reached: Positions) -> anyhow::Result<()> {
        let mut dirty = Dirty::default();
        dirty.note(&events);
        {
            let mut pending = self.lock_pending();
            if let Some(pending) = pending.as_mut() {
                pending.extend(dirty);
                return Ok(());
            }
        }
        if self.health.broken.load(Ordering::Acquire) {
            return Err(transient(anyhow::anyhow!(
                "the search index is being opened again after a failed write"
            )));
        }
        self.wait_for_commit_gap().await;
        let newest = events.iter().map(|event| event.time).max().unwrap_or(0);
        self.apply(dirty, reached, newest).await?;
        metrics::counter!(SEARCH_EVENTS_APPLIED_TOTAL).increment(events.len() as u64);
        self.healthy();
        Ok(())
    }

    /// Writes the current documents of what `dirty` names and commits with `reached`.
    async fn apply(&self, dirty: Dirty, reached: Positions, newest: i64) -> anyhow::Result<()> {
        let mut changes = Vec::new();
        // A renamed author's articles carry the name: rewrite them too.
        let mut articles: BTreeSet<i64> = dirty.articles;
        for uid in &dirty.users {
            let mut after = 0;
            loop {
                let ids = self.store.article_ids_of(*uid, after, REBUILD_PAGE).await?;
                let Some(last) = ids.last() else { break };
                after = *last;
                articles.extend(ids);
            }
        }
        let ids: Vec<i64> = articles.into_iter().collect();
        for chunk in ids.chunks(REBUILD_PAGE as usize) {
            let rows = self.store.articles(chunk).await?;
            let published: BTreeSet<i64> = rows.iter().map(|row| row.id).collect();
            for id in chunk.iter().filter(|id| !published.contains(id)) {
                changes.push(Change::Remove(index::article_key(*id)));
            }
            changes.extend(self.article_changes(rows).await?);
        }
        let uids: Vec<i64> = dirty.users.into_iter().collect();
        let rows = self.store.users(&uids).await?;
        let found: BTreeSet<i64> = rows.iter().map(|row| row.id).collect();
        for uid in uids.iter().filter(|uid| !found.contains(uid)) {
            changes.push(Change::Remove(index::user_key(*uid)));
        }
        changes.extend(rows.into_iter().map(user_change));
        let state = {
            let mut state = self.lock_state();
            state.positions.advance(&reached);
            IndexState {
                schema: SCHEMA_VERSION,
                complete: true,
                positions: state.positions.clone(),
                built_at: state.built_at,
            }
        };
        // What cannot be written is retried (transient) once the keeper reopened the index.
        let index = self.current();
        let written = match self.write(&index, changes).await {
            Ok(()) => self.commit(&index, state).await,
            Err(err) => Err(err),
        };
        if let Err(err) = written {
            return Err(self.index_failed(err).await);
        }
        if newest > 0 {
            metrics::gauge!(SEARCH_INDEX_LAG_SECONDS)
                .set(now_millis().saturating_sub(newest) as f64 / 1000.0);
        }
        Ok(())
    }
}
