//! Keeping the index in step with the database: rebuilds from a keyset scan, then follows the
//! outbox events of everything a document is made of.
//!
//! Events are only a signal of *which* objects changed: the feeder reads their current rows
//! and writes their documents as they are now (a withdrawn or vanished article is removed).
//! Applying a batch is therefore idempotent and order-free — a late or repeated event writes
//! the same document — and a batch touching an article a hundred times (likes) writes it once.
//! Each batch is one commit carrying the stream positions it reached
//! ([`IndexState::positions`]), so a restarted instance resumes after the last commit.
//!
//! Start: [`SearchIndex::open`] tells whether the index is complete; if not, or if the stream
//! no longer holds everything after its positions ([`EventStream::can_resume`]), the feeder
//! takes the stream's heads, rebuilds (articles then users, 1000 rows a page, with progress on
//! `/readyz` and in the log), commits with those heads and follows from them. In-process the
//! follower runs from the start (its groups must exist before the outbox relays), and while a
//! rebuild runs it only remembers what changed, applied once the rebuild is done.

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicU64, AtomicU8, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use anyhow::Context;
use platform::{
    db::now_millis,
    events::{follow::Positions, Event, EventStream},
    ops::StatusBoard,
};
use tokio_util::sync::CancellationToken;

use super::{
    index::{self, ArticleDoc, Change, IndexState, SearchIndex, UserDoc, SCHEMA_VERSION},
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
/// Events per applied batch.
const BATCH: usize = 1000;
/// In-process, how long the follower gathers the events of a relay pass. The relay hands a
/// pass's rows to every group and waits until all have handled them, so a longer wait would
/// hold every consumer's events back; one pass is one commit.
const IN_PROCESS_GATHER: Duration = Duration::from_millis(20);
/// Rows per page of a rebuild.
const REBUILD_PAGE: i64 = 1000;
/// A rebuild commits (as incomplete) every this many rows: the writer's bookkeeping of
/// uncommitted segments grows with the documents written since the last commit.
const REBUILD_COMMIT_ROWS: u64 = 10_000;

/// Counter: events applied to the index.
pub const SEARCH_EVENTS_APPLIED_TOTAL: &str = "search_events_applied_total";
/// Counter: documents written (put or removed), by `kind` of change.
pub const SEARCH_DOCUMENTS_WRITTEN_TOTAL: &str = "search_documents_written_total";
/// Gauge: age of the newest event applied at its commit (s): how far behind the index runs.
pub const SEARCH_INDEX_LAG_SECONDS: &str = "search_index_lag_seconds";

// Phase 0: opening (before the first check of the index).
const REBUILDING: u8 = 1;
const READY: u8 = 2;

/// Whether queries may be served, and a rebuild's progress; shared with the service.
#[derive(Debug, Default)]
pub struct Readiness {
    phase: AtomicU8,
    rebuilt: AtomicU64,
    total: AtomicU64,
}

impl Readiness {
    /// Whether the index is complete and followed.
    pub fn is_ready(&self) -> bool {
        self.phase.load(Ordering::Acquire) == READY
    }

    fn describe(&self) -> String {
        match self.phase.load(Ordering::Acquire) {
            READY => "ready".to_owned(),
            REBUILDING => format!(
                "rebuilding: {} of {} rows",
                self.rebuilt.load(Ordering::Relaxed),
                self.total.load(Ordering::Relaxed)
            ),
            _ => "opening".to_owned(),
        }
    }
}

/// Objects changed by a batch of events.
#[derive(Debug, Default)]
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
}

/// The feeder of one index.
#[derive(Clone)]
pub struct Feeder {
    index: Arc<SearchIndex>,
    store: SearchStore,
    readiness: Arc<Readiness>,
    status: StatusBoard,
    /// Positions of the last commit.
    positions: Arc<Mutex<Positions>>,
    /// What changed while a rebuild ran (in-process), applied after it.
    pending: Arc<Mutex<Option<Dirty>>>,
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
        Self {
            index,
            store,
            readiness,
            status,
            positions: Arc::default(),
            pending: Arc::default(),
        }
    }

    fn report(&self) {
        self.status.set("search", self.readiness.describe());
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
                platform::events::outbox::RELAY_BATCH as usize,
                IN_PROCESS_GATHER.min(commit_interval),
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
                    tokio::join!(follow, self.start_until_ready(&events, opened, &stop));
                }
                None => {
                    let Some(from) = self.start_until_ready(&events, opened, &stop).await else {
                        return;
                    };
                    let feeder = self.clone();
                    events
                        .follow(
                            TOPICS,
                            GROUP,
                            from,
                            BATCH,
                            commit_interval,
                            stop,
                            move |batch, reached| {
                                let feeder = feeder.clone();
                                async move { feeder.apply_events(batch, reached).await }
                            },
                        )
                        .await
                }
            }
        }
    }

    /// [`Feeder::start`], retried every 5 s until it succeeds; `None` if stopped first.
    async fn start_until_ready(
        &self,
        events: &EventStream,
        opened: Option<IndexState>,
        stop: &CancellationToken,
    ) -> Option<Positions> {
        loop {
            match self.start(events, opened.clone(), stop).await {
                Ok(from) => return from,
                Err(err) => {
                    tracing::error!(
                        error = format!("{err:#}"),
                        "search index rebuild failed; retrying in 5 s"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(5)) => {},
                        () = stop.cancelled() => return None,
                    }
                }
            }
        }
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Option<Dirty>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Rebuilds when needed; the positions to follow from (`None`: stopped meanwhile).
    async fn start(
        &self,
        events: &EventStream,
        opened: Option<IndexState>,
        stop: &CancellationToken,
    ) -> anyhow::Result<Option<Positions>> {
        let resumable = match &opened {
            Some(state) => events.can_resume(TOPICS, &state.positions).await?,
            None => false,
        };
        let from = match opened {
            Some(state) if resumable => {
                tracing::info!(positions = ?state.positions, "search index resumes");
                state.positions
            }
            _ => {
                let heads = events.heads(TOPICS).await?;
                self.readiness.phase.store(REBUILDING, Ordering::Release);
                self.report();
                let status = self.clone();
                let rows = self
                    .rebuild(heads.clone(), stop, move |done, total| {
                        status.readiness.rebuilt.store(done, Ordering::Relaxed);
                        status.readiness.total.store(total, Ordering::Relaxed);
                        status.report();
                    })
                    .await?;
                let Some(rows) = rows else { return Ok(None) };
                tracing::info!(rows, "search index rebuilt");
                heads
            }
        };
        *self.lock_positions() = from.clone();
        // Changes noted while rebuilding (in-process) are applied before queries are served.
        let pending = self.lock_pending().take();
        if let Some(dirty) = pending.filter(|dirty| !dirty.is_empty()) {
            self.apply(dirty, Positions::default(), 0).await?;
        }
        self.readiness.phase.store(READY, Ordering::Release);
        self.report();
        Ok(Some(from))
    }

    fn lock_positions(&self) -> std::sync::MutexGuard<'_, Positions> {
        self.positions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Empties the index and writes every published article and every user with a profile,
    /// reporting (rows done, rows in all) as it goes; commits with `heads` as the positions.
    /// `None` if stopped first (nothing committed as complete).
    pub async fn rebuild(
        &self,
        heads: Positions,
        stop: &CancellationToken,
        progress: impl Fn(u64, u64),
    ) -> anyhow::Result<Option<u64>> {
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || index.clear()).await??;
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
            self.write(changes).await?;
            progress(done, total);
            if done % REBUILD_COMMIT_ROWS < REBUILD_PAGE as u64 {
                self.commit(IndexState {
                    schema: SCHEMA_VERSION,
                    complete: false,
                    positions: Positions::default(),
                })
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
            self.write(rows.into_iter().map(user_change).collect())
                .await?;
            progress(done, total);
        }
        self.commit(IndexState {
            schema: SCHEMA_VERSION,
            complete: true,
            positions: heads,
        })
        .await?;
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || index.mark_fresh()).await??;
        Ok(Some(done))
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

    async fn write(&self, changes: Vec<Change>) -> anyhow::Result<()> {
        let removed = changes
            .iter()
            .filter(|change| matches!(change, Change::Remove(_)))
            .count() as u64;
        let put = changes.len() as u64 - removed;
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || index.write(changes)).await??;
        metrics::counter!(SEARCH_DOCUMENTS_WRITTEN_TOTAL, "kind" => "remove").increment(removed);
        metrics::counter!(SEARCH_DOCUMENTS_WRITTEN_TOTAL, "kind" => "put").increment(put);
        Ok(())
    }

    async fn commit(&self, state: IndexState) -> anyhow::Result<()> {
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || index.commit(&state)).await?
    }

    /// One followed batch: noted while a rebuild runs, else applied.
    async fn apply_events(&self, events: Vec<Event>, reached: Positions) -> anyhow::Result<()> {
        let mut dirty = Dirty::default();
        dirty.note(&events);
        {
            let mut pending = self.lock_pending();
            if let Some(pending) = pending.as_mut() {
                pending.articles.extend(dirty.articles);
                pending.users.extend(dirty.users);
                return Ok(());
            }
        }
        let newest = events.iter().map(|event| event.time).max().unwrap_or(0);
        self.apply(dirty, reached, newest).await?;
        metrics::counter!(SEARCH_EVENTS_APPLIED_TOTAL).increment(events.len() as u64);
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
            let mut positions = self.lock_positions();
            positions.advance(&reached);
            IndexState {
                schema: SCHEMA_VERSION,
                complete: true,
                positions: positions.clone(),
            }
        };
        self.write(changes).await?;
        self.commit(state).await?;
        if newest > 0 {
            metrics::gauge!(SEARCH_INDEX_LAG_SECONDS)
                .set(now_millis().saturating_sub(newest) as f64 / 1000.0);
        }
        Ok(())
    }
}
