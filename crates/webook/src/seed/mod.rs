//! `webook seed`: a realistic dataset at scale, for benchmarks and for trying the product —
//! users, articles (Chinese and English, short posts to long reads, published over the last
//! days), Zipf-distributed reads, likes, collects and follows, and the feed the runtime would
//! have built from them — reproducible for a given `--seed`.
//!
//! Data flow: [`seed`] validates the [`Plan`], decides every article's status and every user's
//! follower count, hashes the one password all seeded users share, and reads the next free ids.
//! A generator thread then builds rows batch by batch and sends them through a bounded channel;
//! the async writer has the feature owning each batch's table insert it with multi-row
//! statements (that feature's `seed` module, e.g. [`crate::feed::insert_seeded_feed_items`])
//! while the generator builds the next, so the two cores overlap text generation and database
//! work.
//!
//! Phases, and what an interruption leaves behind (every state is consistent):
//!
//! 1. **users**, one transaction per batch — accounts;
//! 2. **articles**, one transaction per batch — the author's copies and reader copies, no
//!    counters yet (an article nobody has read) and no feed items yet (the state of a database
//!    whose feed was added after its articles);
//! 3. **interactions**, one transaction for all — counters (`interactives`), likes
//!    (`user_likes`) and collects (`user_collects`). Counters always match the like and collect
//!    rows: both commit together or not at all. Likes are written sorted by user (the order of
//!    `user_likes`' unique index) in passes over ranges of users, so the index grows at its end
//!    instead of being rewritten at random, and a pass holds about [`LIKES_PER_PASS`] likes in
//!    memory (8 bytes each);
//! 4. **follows and the feed**, one transaction for all — follows (`follows`, status 1), their
//!    counts (`follow_counts`), one item per published article (`feed_events`), the pull authors
//!    (`feed_pull_authors`) and the inboxes (`feed_inbox`). Counts always match the follow rows
//!    and the feed always agrees with the follows: all commit together or not at all (an
//!    interruption leaves the first three phases' dataset, no follows and no feed). Follows and
//!    inbox rows are written sorted by follower (the order of their unique index and primary
//!    key), in passes over ranges of users like the likes. The non-unique indexes of `follows`,
//!    `feed_events` and `feed_inbox` are dropped when the phase begins and built again, each in
//!    one sort, just before it commits ([`indexes::suspend_indexes`]): inboxes written user by
//!    user name their items in random order, and inserting millions of rows into those indexes
//!    one by one took most of the seed's time. (On PostgreSQL the drop locks those tables until
//!    the commit: seed before starting servers on the database, or expect their feeds to wait.)
//! 5. **comments**, one transaction for all — comment threads under the published articles
//!    with every counter the runtime keeps (see [`comments`]); an interruption leaves the first
//!    four phases' dataset and no comments. Comment notices are not seeded.
//! 6. **tags**, one transaction for all ([`tags`]) — `--tags-per-author` tags of each author's
//!    own, 0–3 of them on each published article.
//!
//! What the data looks like: popularity follows Zipf's law (rank r weighs r^-s, with noise) on a
//! random order of the published articles, and reads, likes and collects follow the same ranks;
//! each article's likers are distinct users (`start + k·step mod users` with a step coprime to
//! the number of users); authors are Zipf-distributed too (a few prolific ones). Nine in ten
//! articles are published, six in a hundred are drafts, four withdrawn. Users registered in the
//! 90 days before the first article; every like comes after its article.
//!
//! Follows: followers per user follow Zipf's law too (exponent `--zipf`) on the authors' order,
//! so the most prolific authors are the most followed and a few are above the feed's push
//! threshold (with `--follows` about 10× `--users`, the top author is followed by nearly
//! everyone); each user's followers are distinct other users (the likers' arithmetic over the
//! other users). Every follow is made after both users registered and before the first article
//! (at the latest when the article window opens), so each follower was there when each article
//! was published.
//!
//! The feed is what the feed's consumers leave after handling every publication in order
//! ([`crate::feed::service`]): each published article (status 2) is one item dated its
//! publication, **pulled** when its author has more than `feed_push_threshold` followers (the
//! author is then a pull author, since their first article published above it, withdrawn ones
//! included), else **pushed**: in the inbox of every follower — each inbox keeping only its
//! newest `feed_inbox_cap` items, as the prune job leaves it, so a large dataset is not billions
//! of rows. Withdrawn articles have no item (their withdrawal removed it). Like and follow
//! notices are not seeded.
//!
//! Reproducibility: each row draws from its own stream of [`random::Rng`] (`seed`, kind, index),
//! so the same plan, `--until` and starting ids give the same rows, whatever the batch sizes;
//! only the password hash's salt differs between runs.

pub mod cli;
pub mod comments;
mod indexes;
pub mod random;
pub mod tags;
pub mod text;

pub use cli::{run, SeedArgs};

use std::{collections::BinaryHeap, time::Instant};

use anyhow::Context;
use indicatif::ProgressBar;
use sqlx::{Any, Transaction};
use tokio::sync::mpsc;

use self::{
    random::{allocate, coprime_step, zipf_weights, Rng, Stream, WeightedPicker},
    text::Language,
};
use crate::{
    article::{self, SeededArticle},
    auth::PasswordHasher,
    comment::{self, SeededComment},
    feed::{
        self, Delivery, FeedSettings, SeededFeedItem, SeededFollow, SeededFollowCount,
        SeededInboxRow, SeededPullAuthor,
    },
    interactive::{self, LikeOrCollect, SeededCommentCount, SeededCounters, SeededInteraction},
    user::{self, SeededUser},
};
use platform::db::Db;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// Users registered over this many days before the first seeded article.
const REGISTRATION_DAYS: i64 = 90;
/// Rows per batch, and so per transaction in the first two phases.
const USERS_PER_BATCH: usize = 5_000;
const ARTICLES_PER_BATCH: usize = 2_000;
const INTERACTIONS_PER_BATCH: usize = 10_000;
/// About this many likes, collects or follows are gathered and sorted at once: 32 MB.
pub const LIKES_PER_PASS: u64 = 4_000_000;
/// Batches the generator may be ahead of the writer.
const CHANNEL_BATCHES: usize = 4;
/// Largest accepted counts: ids stay far inside i64 and likers' arithmetic inside u64.
const MAX_USERS: u64 = 1 << 30;
const MAX_ARTICLES: u64 = 1 << 31;
const MAX_COMMENTS: u64 = 1 << 33;

/// What to generate.
#[derive(Debug, Clone)]
pub struct Plan {
    /// New users.
    pub users: u64,
    /// New articles (published, drafts and withdrawn).
    pub articles: u64,
    /// Likes across the published articles (each a distinct user per article).
    pub likes: u64,
    /// Collects across the published articles (each a distinct user per article).
    pub collects: u64,
    /// Reads across the published articles.
    pub reads: u64,
    /// Follows between the users (each of another user, at most once per pair).
    pub follows: u64,
    /// Comments across the published articles, Zipf-distributed like the likes.
    pub comments: u64,
    /// The most popular articles that get `hot_thread_comments` more comments each.
    pub hot_threads: u64,
    /// Comments added to each hot thread.
    pub hot_thread_comments: u64,
    /// The feed's settings the dataset is made for: who pushes and who is pulled
    /// (`feed_push_threshold`), how much of each inbox is kept (`feed_inbox_cap`).
    pub feed: FeedSettings,
    /// Articles were created over this many days before `until`.
    pub days: u64,
    /// Seed of every random choice.
    pub seed: u64,
    /// The end of the time window (ms since the epoch); usually now.
    pub until: i64,
    /// Zipf exponent of popularity (1.0: the second most popular article gets half the first's).
    pub zipf_exponent: f64,
    /// The password of every seeded user.
    pub password: String,
    /// Likes, collects, follows or inbox keys gathered and sorted in memory at once, 8 bytes
    /// each: more take several passes over ranges of users. The data does not depend on it.
    pub likes_per_pass: u64,
    /// Tags of each author of a published article ([`tags`]); 0 for none.
    pub tags_per_author: u64,
}

impl Default for Plan {
    /// The `webook seed` defaults, ending now.
    fn default() -> Self {
        Self {
            users: 1_000,
            articles: 10_000,
            likes: 50_000,
            collects: 5_000,
            reads: 1_000_000,
            follows: 0,
            comments: 20_000,
            hot_threads: 0,
            hot_thread_comments: 100_000,
            feed: FeedSettings::default(),
            days: 30,
            seed: 1,
            until: platform::db::now_millis(),
            zipf_exponent: 1.0,
            password: "seed-Password-1!".to_owned(),
            likes_per_pass: LIKES_PER_PASS,
            tags_per_author: 5,
        }
    }
}

impl Plan {
    /// Rejects plans that cannot be carried out, before anything is written.
    pub fn validate(&self) -> Result<(), String> {
        if self.users > MAX_USERS {
            return Err(format!("--users: at most {MAX_USERS}"));
        }
        if self.articles > MAX_ARTICLES {
            return Err(format!("--articles: at most {MAX_ARTICLES}"));
        }
        if self.articles > 0 && self.users == 0 {
            return Err("--articles needs authors: --users must be at least 1".into());
        }
        let pairs = self.users * self.users.saturating_sub(1);
        if self.follows > pairs {
            return Err(format!(
                "--follows {}: more than users × (users − 1) = {pairs}; a user follows another \
                 at most once, and not themself",
                self.follows
            ));
        }
        if self.feed.feed_push_threshold < 0 {
            return Err("feed_push_threshold: at least 0".into());
        }
        if self.feed.feed_inbox_cap < 1 {
            return Err("feed_inbox_cap: at least 1".into());
        }
        if self.days == 0 || self.days > 36_500 {
            return Err("--days: from 1 to 36500".into());
        }
        if !(self.zipf_exponent > 0.0 && self.zipf_exponent <= 5.0) {
            return Err("--zipf: an exponent above 0 and at most 5".into());
        }
        let earliest = self.until - (self.days as i64 + REGISTRATION_DAYS) * DAY_MS;
        if earliest < 0 {
            return Err("--until: too early for --days (times before 1970)".into());
        }
        if self.likes_per_pass == 0 {
            return Err("likes per pass: at least 1".into());
        }
        if self
            .comments
            .saturating_add(self.hot_threads.saturating_mul(self.hot_thread_comments))
            > MAX_COMMENTS
        {
            return Err(format!(
                "--comments + --hot-threads × --hot-thread-comments: at most {MAX_COMMENTS}"
            ));
        }
        if self.password.is_empty() {
            return Err("--password: must not be empty".into());
        }
        if self.tags_per_author > tags::VOCABULARY.len() as u64 {
            return Err(format!(
                "--tags-per-author: at most {} (the names drawn from)",
                tags::VOCABULARY.len()
            ));
        }
        Ok(())
    }
}

/// What [`seed`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Id of the first seeded user (the rest follow without gaps).
    pub first_user_id: i64,
    /// Id of the first seeded article (the rest follow without gaps).
    pub first_article_id: i64,
    /// Users written.
    pub users: u64,
    /// Published articles (status 2).
    pub published: u64,
    /// Withdrawn articles (status 3; they have reader copies and counters).
    pub withdrawn: u64,
    /// Drafts (status 1, no reader copy).
    pub drafts: u64,
    /// `interactives` rows (articles with any read, like or collect).
    pub counters: u64,
    /// `user_likes` rows.
    pub likes: u64,
    /// `user_collects` rows.
    pub collects: u64,
    /// Sum of the read counters.
    pub reads: u64,
    /// `follows` rows.
    pub follows: u64,
    /// Id of the first feed item (the rest follow without gaps).
    pub first_feed_item_id: i64,
    /// Feed items: one per published article.
    pub feed_items: u64,
    /// Feed items pulled (their authors are above the push threshold); the rest are pushed.
    pub pulled: u64,
    /// `feed_pull_authors` rows.
    pub pull_authors: u64,
    /// `feed_inbox` rows.
    pub inbox_rows: u64,
    /// Id of the first comment (the rest follow without gaps).
    pub first_comment_id: i64,
    /// Comments written.
    pub comments: u64,
    /// Articles with comments.
    pub commented_articles: u64,
    /// Tags and the articles carrying them.
    pub tags: tags::TagReport,
}

impl Report {
    /// All articles written.
    pub fn articles(&self) -> u64 {
        self.published + self.withdrawn + self.drafts
    }
}

/// Article statuses as stored (`articles.status`).
const DRAFT: u8 = 1;
const PUBLISHED: u8 = 2;
const WITHDRAWN: u8 = 3;

/// One unit of work for the writer.
enum Batch {
    /// The next phase starts; `rows` is its size (for the progress bar).
    Phase {
        name: &'static str,
        rows: u64,
    },
    Users(Vec<SeededUser>),
    Articles(Vec<SeededArticle>),
    Counters(Vec<SeededCounters>),
    Interactions(LikeOrCollect, Vec<SeededInteraction>),
    Follows(Vec<SeededFollow>),
    FollowCounts(Vec<SeededFollowCount>),
    FeedItems(Vec<SeededFeedItem>),
    PullAuthors(Vec<SeededPullAuthor>),
    Inbox(Vec<SeededInboxRow>),
    Comments(Vec<SeededComment>),
    CommentCounts(Vec<SeededCommentCount>),
}

/// The open transaction of a phase whose batches share one, with the statements that create the
/// indexes it suspended (run before it commits).
struct OpenTransaction {
    phase: Spanning,
    tx: Transaction<'static, Any>,
    suspended: Vec<String>,
}

impl OpenTransaction {
    /// Builds the suspended indexes and commits.
    async fn commit(mut self, progress: &ProgressBar) -> anyhow::Result<()> {
        if !self.suspended.is_empty() {
            progress.set_message("indexing");
            indexes::restore_indexes(&mut self.tx, &self.suspended)
                .await
                .context("building the feed tables' indexes")?;
        }
        progress.set_message("committing");
        self.tx.commit().await.context(self.phase.committing())
    }
}

/// The phases whose batches share one transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spanning {
    /// Counters, likes and collects.
    Interactions,
    /// Follows, their counts and the feed.
    Feed,
    /// Comments and the articles' comment counts.
    Comments,
}

impl Spanning {
    fn committing(self) -> &'static str {
        match self {
            Self::Interactions => "committing counters, likes and collects",
            Self::Feed => "committing follows and the feed",
            Self::Comments => "committing comments",
        }
    }
}

/// Generates `plan`'s dataset into `db`, showing progress on `progress` (use
/// [`ProgressBar::hidden`] for none). Returns what was written.
pub async fn seed(db: &Db, plan: &Plan, progress: &ProgressBar) -> anyhow::Result<Report> {
    plan.validate().map_err(anyhow::Error::msg)?;
    let statuses = article_statuses(plan);
    // Published-article index p → article index (the articles with a reader copy).
    let published: Vec<u64> = (0..plan.articles)
        .filter(|&i| statuses[i as usize] != DRAFT)
        .collect();
    let published_count = published.len() as u64;
    for (flag, wanted) in [("--likes", plan.likes), ("--collects", plan.collects)] {
        let room = plan.users.saturating_mul(published_count);
        if wanted > room {
            anyhow::bail!(
                "{flag} {wanted}: more than users × published articles ({} × {published_count} \
                 = {room}); a user likes or collects an article at most once",
                plan.users
            );
        }
    }
    if (plan.comments > 0 || plan.hot_threads > 0) && published_count == 0 {
        anyhow::bail!("--comments: there are no published articles to comment on");
    }
    if plan.reads > 0 && published_count == 0 {
        anyhow::bail!(
            "--reads {}: there are no published articles to read",
            plan.reads
        );
    }
    let popularity = Popularity::new(plan, published.len())?;
    let author_weights = author_weights(plan);
    let followers = follower_counts(plan, &author_weights).context("--follows")?;
    let password_hash = PasswordHasher::new()?
        .hash(plan.password.clone())
        .await
        .context("hashing the seeded users' password")?;
    let (first_user_id, first_article_id, first_feed_item_id, first_comment_id) = {
        let mut conn = db.writer().acquire().await?;
        (
            user::next_user_id(&mut conn).await?,
            article::next_article_id(&mut conn).await?,
            feed::next_feed_item_id(&mut conn).await?,
            comment::next_comment_id(&mut conn).await?,
        )
    };
    let comment_counts = popularity.comment_counts(plan);
    let generator = Generator {
        plan: plan.clone(),
        first_user_id,
        first_article_id,
        first_feed_item_id,
        first_comment_id,
        comment_counts,
        statuses,
        published,
        popularity,
        author_weights,
        followers,
    };
    let (batches, mut incoming) = mpsc::channel(CHANNEL_BATCHES);
    let generating = tokio::task::spawn_blocking(move || generator.run(&batches));

    let mut report = Report {
        first_user_id,
        first_article_id,
        first_feed_item_id,
        first_comment_id,
        ..Report::default()
    };
    let mut spans = Spans {
        db,
        progress,
        feed_tables: feed::seeded_bulk_tables(plan.follows > 0),
        open: None,
    };
    let mut phase_started = Instant::now();
    while let Some(batch) = incoming.recv().await {
        match batch {
            Batch::Phase { name, rows } => {
                progress.set_message(name);
                progress.set_length(rows);
                progress.set_position(0);
                progress.reset_eta();
                tracing::debug!(
                    phase = name,
                    rows,
                    previous_secs = phase_started.elapsed().as_secs_f64(),
                    "seed phase"
                );
                phase_started = Instant::now();
            }
            Batch::Users(rows) => {
                let mut tx = db.writer().begin().await?;
                user::insert_seeded_users(&mut tx, db.kind(), &rows, &password_hash)
                    .await
                    .with_context(|| describe("users", rows.first().map(|r| r.id), rows.len()))?;
                tx.commit().await?;
                report.users += rows.len() as u64;
                progress.inc(rows.len() as u64);
            }
            Batch::Articles(rows) => {
                let mut tx = db.writer().begin().await?;
                article::insert_seeded_articles(&mut tx, db.kind(), &rows)
                    .await
                    .with_context(|| {
                        describe("articles", rows.first().map(|r| r.id), rows.len())
                    })?;
                tx.commit().await?;
                for row in &rows {
                    match row.status {
                        1 => report.drafts += 1,
                        3 => report.withdrawn += 1,
                        _ => report.published += 1,
                    }
                }
                progress.inc(rows.len() as u64);
            }
            Batch::Counters(rows) => {
                let tx = spans.tx(Spanning::Interactions).await?;
                interactive::insert_seeded_counters(tx, db.kind(), &rows)
                    .await
                    .context("writing article counters")?;
                report.counters += rows.len() as u64;
                report.reads += rows.iter().map(|r| r.reads as u64).sum::<u64>();
                progress.inc(rows.len() as u64);
            }
            Batch::Interactions(kind, rows) => {
                let tx = spans.tx(Spanning::Interactions).await?;
                interactive::insert_seeded_interactions(tx, db.kind(), kind, &rows)
                    .await
                    .with_context(|| format!("writing {kind:?}s"))?;
                match kind {
                    LikeOrCollect::Like => report.likes += rows.len() as u64,
                    LikeOrCollect::Collect => report.collects += rows.len() as u64,
                }
                progress.inc(rows.len() as u64);
            }
            Batch::Follows(rows) => {
                let tx = spans.tx(Spanning::Feed).await?;
                feed::insert_seeded_follows(tx, db.kind(), &rows)
                    .await
                    .context("writing follows")?;
                report.follows += rows.len() as u64;
                progress.inc(rows.len() as u64);
            }
            Batch::FollowCounts(rows) => {
                let tx = spans.tx(Spanning::Feed).await?;
                feed::insert_seeded_follow_counts(tx, db.kind(), &rows)
                    .await
                    .context("writing follow counts")?;
                progress.inc(rows.len() as u64);
            }
            Batch::FeedItems(rows) => {
                let tx = spans.tx(Spanning::Feed).await?;
                feed::insert_seeded_feed_items(tx, db.kind(), &rows)
                    .await
                    .with_context(|| {
                        describe("feed items", rows.first().map(|r| r.id), rows.len())
                    })?;
                report.feed_items += rows.len() as u64;
                report.pulled += rows
                    .iter()
                    .filter(|r| r.delivery == Delivery::Pulled)
                    .count() as u64;
                progress.inc(rows.len() as u64);
            }
            Batch::PullAuthors(rows) => {
                let tx = spans.tx(Spanning::Feed).await?;
                feed::insert_seeded_pull_authors(tx, db.kind(), &rows)
                    .await
                    .context("writing pull authors")?;
                report.pull_authors += rows.len() as u64;
                progress.inc(rows.len() as u64);
            }
            Batch::Inbox(rows) => {
                let tx = spans.tx(Spanning::Feed).await?;
                feed::insert_seeded_inbox_rows(tx, db.kind(), &rows)
                    .await
                    .context("writing inboxes")?;
                report.inbox_rows += rows.len() as u64;
                progress.inc(rows.len() as u64);
            }
            Batch::Comments(rows) => {
                let tx = spans.tx(Spanning::Comments).await?;
                comment::insert_seeded_comments(tx, db.kind(), &rows)
                    .await
                    .with_context(|| {
                        describe("comments", rows.first().map(|r| r.id), rows.len())
                    })?;
                report.comments += rows.len() as u64;
                progress.inc(rows.len() as u64);
            }
            Batch::CommentCounts(rows) => {
                let tx = spans.tx(Spanning::Comments).await?;
                interactive::add_seeded_comment_counts(tx, db.kind(), &rows, plan.until)
                    .await
                    .context("writing comment counts")?;
                report.commented_articles += rows.len() as u64;
            }
        }
    }
    // A generator that panicked ends the channel early: the open transaction then rolls back.
    generating.await.context("the seed generator failed")?;
    spans.commit().await?;
    report.tags = tags::seed_tags(db, plan, &report, progress).await?;
    progress.finish_and_clear();
    Ok(report)
}

/// The transactions of the phases whose batches share one, begun at their first batch.
struct Spans<'a> {
    db: &'a Db,
    progress: &'a ProgressBar,
    /// The tables whose indexes the feed's transaction suspends.
    feed_tables: &'static [&'static str],
    open: Option<OpenTransaction>,
}

impl Spans<'_> {
    /// The transaction of `phase`: the open one, or a new one once the previous phase's is
    /// committed (the writer has one connection on SQLite). The feed's suspends the indexes of
    /// `feed_tables` first.
    async fn tx(&mut self, phase: Spanning) -> anyhow::Result<&mut Transaction<'static, Any>> {
        if let Some(previous) = self.open.take_if(|open| open.phase != phase) {
            let shown = self.progress.message();
            previous.commit(self.progress).await?;
            self.progress.set_message(shown);
        }
        let open = match self.open.take() {
            Some(open) => open,
            None => {
                let mut tx = self.db.writer().begin().await?;
                let suspended = match phase {
                    Spanning::Interactions | Spanning::Comments => Vec::new(),
                    Spanning::Feed => {
                        indexes::suspend_indexes(&mut tx, self.db.kind(), self.feed_tables)
                            .await
                            .context("suspending the feed tables' indexes")?
                    }
                };
                OpenTransaction {
                    phase,
                    tx,
                    suspended,
                }
            }
        };
        Ok(&mut self.open.insert(open).tx)
    }

    /// Commits the open transaction, if any.
    async fn commit(self) -> anyhow::Result<()> {
        match self.open {
            Some(open) => open.commit(self.progress).await,
            None => Ok(()),
        }
    }
}

fn describe(what: &str, first_id: Option<i64>, rows: usize) -> String {
    match first_id {
        Some(first) => format!("writing {what} {first}–{}", first + rows as i64 - 1),
        None => format!("writing {what}"),
    }
}

/// Every article's status, by article index: 90 % published, 6 % drafts, 4 % withdrawn.
fn article_statuses(plan: &Plan) -> Vec<u8> {
    (0..plan.articles)
        .map(
            |index| match Rng::new(plan.seed, Stream::ArticleStatus, index).below(100) {
                0..90 => PUBLISHED,
                90..96 => DRAFT,
                _ => WITHDRAWN,
            },
        )
        .collect()
}

/// Builds the rows (on a blocking thread: this is CPU work) and hands them to the writer.
struct Generator {
    plan: Plan,
    first_user_id: i64,
    first_article_id: i64,
    first_feed_item_id: i64,
    first_comment_id: i64,
    /// Comments of each published article, by published-article index.
    comment_counts: Vec<u64>,
    statuses: Vec<u8>,
    /// Published-article index → article index (articles with a reader copy).
    published: Vec<u64>,
    popularity: Popularity,
    /// How prolific each user is as an author, by user index.
    author_weights: Vec<f64>,
    /// Followers of each user, by user index.
    followers: Vec<u64>,
}

/// The writer stopped (it failed; its error is the one reported).
struct WriterGone;

impl Generator {
    /// Generates everything; stops early, quietly, when the writer has gone (it reports why).
    fn run(&self, out: &mpsc::Sender<Batch>) {
        let send = |batch| out.blocking_send(batch).map_err(|_| WriterGone);
        let _ = self.generate(&send);
    }

    fn generate(&self, send: &dyn Fn(Batch) -> Result<(), WriterGone>) -> Result<(), WriterGone> {
        let plan = &self.plan;
        send(Batch::Phase {
            name: "users",
            rows: plan.users,
        })?;
        for start in (0..plan.users).step_by(USERS_PER_BATCH) {
            let end = (start + USERS_PER_BATCH as u64).min(plan.users);
            send(Batch::Users((start..end).map(|u| self.user(u)).collect()))?;
        }

        send(Batch::Phase {
            name: "articles",
            rows: plan.articles,
        })?;
        let authors = WeightedPicker::new(&self.author_weights);
        // Article index → author's user index, for the feed.
        let mut article_authors: Vec<u32> = Vec::with_capacity(plan.articles as usize);
        for start in (0..plan.articles).step_by(ARTICLES_PER_BATCH) {
            let end = (start + ARTICLES_PER_BATCH as u64).min(plan.articles);
            let rows: Vec<SeededArticle> =
                (start..end).map(|i| self.article(i, &authors)).collect();
            article_authors.extend(
                rows.iter()
                    .map(|row| (row.author_id - self.first_user_id) as u32),
            );
            send(Batch::Articles(rows))?;
        }

        let (published, popularity) = (&self.published, &self.popularity);
        let counted =
            |p: usize| popularity.reads[p] + popularity.likes[p] + popularity.collects[p] > 0;
        send(Batch::Phase {
            name: "counters",
            rows: (0..published.len()).filter(|&p| counted(p)).count() as u64,
        })?;
        let mut batch = Vec::with_capacity(INTERACTIONS_PER_BATCH);
        for (p, &i) in published.iter().enumerate() {
            if !counted(p) {
                continue;
            }
            let (ctime, _) = self.article_times(i);
            batch.push(SeededCounters {
                biz_id: self.first_article_id + i as i64,
                reads: popularity.reads[p] as i64,
                likes: popularity.likes[p] as i64,
                collects: popularity.collects[p] as i64,
                ctime,
                utime: plan.until,
            });
            if batch.len() == INTERACTIONS_PER_BATCH {
                send(Batch::Counters(std::mem::take(&mut batch)))?;
            }
        }
        if !batch.is_empty() {
            send(Batch::Counters(batch))?;
        }

        for (kind, counts, total) in [
            (LikeOrCollect::Like, &popularity.likes, plan.likes),
            (LikeOrCollect::Collect, &popularity.collects, plan.collects),
        ] {
            if total == 0 {
                continue;
            }
            send(Batch::Phase {
                name: match kind {
                    LikeOrCollect::Like => "likes",
                    LikeOrCollect::Collect => "collects",
                },
                rows: total,
            })?;
            self.interactions(kind, counts, published, total, send)?;
        }

        self.follows_and_feed(&article_authors, send)?;
        self.comments(send)
    }

    /// User `index`: registered over the 90 days before the article window.
    fn user(&self, index: u64) -> SeededUser {
        let mut rng = Rng::new(self.plan.seed, Stream::User, index);
        let ctime = self.registration(index, &mut rng);
        let id = self.first_user_id + index as i64;
        SeededUser {
            id,
            email: format!("seed{id}@example.com"),
            nickname: text::nickname(&mut rng),
            about_me: text::about_me(&mut rng),
            ctime,
        }
    }

    /// When user `index` registered: the first draw of its stream (`rng`), before the window.
    fn registration(&self, index: u64, rng: &mut Rng) -> i64 {
        let plan = &self.plan;
        let window_start = self.window_start();
        let span = REGISTRATION_DAYS * DAY_MS;
        let slot = span / plan.users.max(1) as i64;
        let ctime = window_start - span
            + (i128::from(span) * i128::from(index) / i128::from(plan.users.max(1))) as i64
            + rng.below(slot.max(1) as u64) as i64;
        ctime.min(window_start - 1)
    }

    /// The start of the article window: `--days` before `--until`.
    fn window_start(&self) -> i64 {
        self.plan.until - self.plan.days as i64 * DAY_MS
    }

    /// Article `index`'s creation (= first publication) and last change: creation times spread
    /// evenly over the window in id order, with jitter inside each article's slot.
    fn article_times(&self, index: u64) -> (i64, i64) {
        let plan = &self.plan;
        let mut rng = Rng::new(plan.seed, Stream::ArticleTime, index);
        let span = plan.days as i64 * DAY_MS;
        let start = plan.until - span;
        let slot = span / plan.articles.max(1) as i64;
        let ctime = (start
            + (i128::from(span) * i128::from(index) / i128::from(plan.articles)) as i64
            + rng.below(slot.max(1) as u64) as i64)
            .min(plan.until - 1);
        let remaining = (plan.until - ctime) as u64;
        let utime = if self.statuses[index as usize] == WITHDRAWN {
            ctime + rng.below(remaining) as i64
        } else if rng.chance(0.2) {
            ctime + rng.below(remaining.min(2 * DAY_MS as u64)) as i64
        } else {
            ctime
        };
        (ctime, utime)
    }

    fn article(&self, index: u64, authors: &WeightedPicker) -> SeededArticle {
        let mut rng = Rng::new(self.plan.seed, Stream::ArticleText, index);
        let author = authors.pick(&mut rng) as i64;
        let language = Language::draw(&mut rng);
        let text = text::article(&mut rng, language);
        let (ctime, utime) = self.article_times(index);
        SeededArticle {
            id: self.first_article_id + index as i64,
            author_id: self.first_user_id + author,
            title: text.title,
            content: text.content,
            abstract_text: text.abstract_text,
            status: i64::from(self.statuses[index as usize]),
            ctime,
            utime,
        }
    }

    /// The likes (or collects) of every published article, sorted by user, in passes over
    /// ranges of users of at most about [`LIKES_PER_PASS`] rows each.
    fn interactions(
        &self,
        kind: LikeOrCollect,
        counts: &[u64],
        published: &[u64],
        total: u64,
        send: &dyn Fn(Batch) -> Result<(), WriterGone>,
    ) -> Result<(), WriterGone> {
        let plan = &self.plan;
        let users = plan.users;
        let passes = total.div_ceil(plan.likes_per_pass).max(1);
        let users_per_pass = users.div_ceil(passes);
        let stream = match kind {
            LikeOrCollect::Like => Stream::Likers,
            LikeOrCollect::Collect => Stream::Collectors,
        };
        let time_salt = match kind {
            LikeOrCollect::Like => 0,
            LikeOrCollect::Collect => 1u64 << 62,
        };
        let mut keys: Vec<u64> = Vec::new();
        for pass in 0..passes {
            let (low, high) = (
                pass * users_per_pass,
                ((pass + 1) * users_per_pass).min(users),
            );
            keys.clear();
            for (p, &count) in counts.iter().enumerate() {
                if count == 0 {
                    continue;
                }
                let mut rng = Rng::new(plan.seed, stream, p as u64);
                let step = coprime_step(users, &mut rng);
                let start = rng.below(users);
                for k in 0..count {
                    let user = (start + k * step) % users;
                    if (low..high).contains(&user) {
                        keys.push((user << 32) | p as u64);
                    }
                }
            }
            keys.sort_unstable();
            for chunk in keys.chunks(INTERACTIONS_PER_BATCH) {
                let rows = chunk
                    .iter()
                    .map(|&key| {
                        let (user, p) = (key >> 32, key & 0xffff_ffff);
                        let index = published[p as usize];
                        let (ctime, _) = self.article_times(index);
                        let after = Rng::new(plan.seed, Stream::InteractionTime, key ^ time_salt)
                            .below((plan.until - ctime).max(1) as u64);
                        SeededInteraction {
                            uid: self.first_user_id + user as i64,
                            biz_id: self.first_article_id + index as i64,
                            time: ctime + after as i64,
                        }
                    })
                    .collect();
                send(Batch::Interactions(kind, rows))?;
            }
        }
        Ok(())
    }

    /// Phase 4 (module docs): the follows and their counts, then one item per published
    /// article and the pull authors, then every follower's inbox of pushed items (its newest
    /// `feed_inbox_cap`). `article_authors` maps article index → author's user index.
    fn follows_and_feed(
        &self,
        article_authors: &[u32],
        send: &dyn Fn(Batch) -> Result<(), WriterGone>,
    ) -> Result<(), WriterGone> {
        let plan = &self.plan;
        let users = plan.users as usize;
        let followers = &self.followers;
        let threshold = plan.feed.feed_push_threshold;
        let pulled = |author: u32| followers[author as usize] as i64 > threshold;

        // Items: the published articles in id (= publication) order; item q has id
        // first_feed_item_id + q, so (time, id) order is item order.
        let items: Vec<Item> = (0..plan.articles)
            .filter(|&i| self.statuses[i as usize] == PUBLISHED)
            .map(|i| Item {
                article: i,
                author: article_authors[i as usize],
                ctime: self.article_times(i).0,
            })
            .collect();
        // The pushed items of each author, ascending: `pushed[starts[a]..starts[a + 1]]`.
        let mut starts = vec![0usize; users + 1];
        for item in items.iter().filter(|item| !pulled(item.author)) {
            starts[item.author as usize + 1] += 1;
        }
        for user in 0..users {
            starts[user + 1] += starts[user];
        }
        let mut pushed = vec![0u32; starts[users]];
        let mut next = starts.clone();
        for (q, item) in items.iter().enumerate() {
            if !pulled(item.author) {
                let slot = &mut next[item.author as usize];
                pushed[*slot] = q as u32;
                *slot += 1;
            }
        }
        let pushed_of = |author: usize| &pushed[starts[author]..starts[author + 1]];

        // One pass over every follow: followee counts, the last follow of each user, and how
        // many pushed items each follower's inbox would get before the cap.
        let registered: Vec<i64> = if plan.follows == 0 {
            Vec::new()
        } else {
            (0..plan.users)
                .map(|u| self.registration(u, &mut Rng::new(plan.seed, Stream::User, u)))
                .collect()
        };
        let mut followees = vec![0u64; users];
        let mut last_follow = vec![0i64; users];
        let mut inbox_wanted = vec![0u64; users];
        // Follows of authors with pushed items: the keys the inbox passes sort.
        let mut feeding = 0u64;
        for followee in 0..users {
            let count = followers[followee];
            if count == 0 {
                continue;
            }
            let items = pushed_of(followee).len() as u64;
            if items > 0 {
                feeding += count;
            }
            for follower in self.followers_of(followee as u64, count) {
                let time = self.follow_time(follower, followee as u64, &registered);
                let follower = follower as usize;
                followees[follower] += 1;
                inbox_wanted[follower] += items;
                last_follow[follower] = last_follow[follower].max(time);
                last_follow[followee] = last_follow[followee].max(time);
            }
        }

        if plan.follows > 0 {
            let counted = |u: usize| followers[u] + followees[u] > 0;
            send(Batch::Phase {
                name: "follows",
                rows: plan.follows + (0..users).filter(|&u| counted(u)).count() as u64,
            })?;
            self.follow_passes(
                plan.follows,
                |_| true,
                |keys| {
                    for chunk in keys.chunks(INTERACTIONS_PER_BATCH) {
                        let rows = chunk
                            .iter()
                            .map(|&key| {
                                let (follower, followee) = (key >> 32, key & 0xffff_ffff);
                                SeededFollow {
                                    follower: self.first_user_id + follower as i64,
                                    followee: self.first_user_id + followee as i64,
                                    time: self.follow_time(follower, followee, &registered),
                                }
                            })
                            .collect();
                        send(Batch::Follows(rows))?;
                    }
                    Ok(())
                },
            )?;
            let counts: Vec<SeededFollowCount> = (0..users)
                .filter(|&u| counted(u))
                .map(|u| SeededFollowCount {
                    uid: self.first_user_id + u as i64,
                    followers: followers[u] as i64,
                    followees: followees[u] as i64,
                    utime: last_follow[u],
                })
                .collect();
            for chunk in counts.chunks(INTERACTIONS_PER_BATCH) {
                send(Batch::FollowCounts(chunk.to_vec()))?;
            }
        }

        // Pull authors: since their first article published above the threshold (withdrawn
        // ones count: the consumer saw them published).
        let mut pull_authors = Vec::new();
        let mut joined = vec![false; users];
        for &i in &self.published {
            let author = article_authors[i as usize];
            if pulled(author) && !std::mem::replace(&mut joined[author as usize], true) {
                pull_authors.push(SeededPullAuthor {
                    uid: self.first_user_id + i64::from(author),
                    ctime: self.article_times(i).0,
                });
            }
        }
        pull_authors.sort_unstable_by_key(|row| row.uid);
        send(Batch::Phase {
            name: "feed",
            rows: (items.len() + pull_authors.len()) as u64,
        })?;
        for (chunk_index, chunk) in items.chunks(INTERACTIONS_PER_BATCH).enumerate() {
            let first = chunk_index * INTERACTIONS_PER_BATCH;
            let rows = chunk
                .iter()
                .enumerate()
                .map(|(k, item)| SeededFeedItem {
                    id: self.first_feed_item_id + (first + k) as i64,
                    article_id: self.first_article_id + item.article as i64,
                    actor: self.first_user_id + i64::from(item.author),
                    delivery: if pulled(item.author) {
                        Delivery::Pulled
                    } else {
                        Delivery::Pushed
                    },
                    ctime: item.ctime,
                })
                .collect();
            send(Batch::FeedItems(rows))?;
        }
        for chunk in pull_authors.chunks(INTERACTIONS_PER_BATCH) {
            send(Batch::PullAuthors(chunk.to_vec()))?;
        }

        let cap = plan.feed.feed_inbox_cap as u64;
        let inbox_rows: u64 = inbox_wanted.iter().map(|&wanted| wanted.min(cap)).sum();
        if inbox_rows == 0 {
            return Ok(());
        }
        send(Batch::Phase {
            name: "inboxes",
            rows: inbox_rows,
        })?;
        let mut batch = Vec::with_capacity(INTERACTIONS_PER_BATCH);
        let (mut heap, mut newest) = (BinaryHeap::new(), Vec::new());
        self.follow_passes(
            feeding,
            |followee| !pushed_of(followee).is_empty(),
            |keys| {
                for follows in keys.chunk_by(|a, b| a >> 32 == b >> 32) {
                    let follower = follows[0] >> 32;
                    let lists: Vec<&[u32]> = follows
                        .iter()
                        .map(|&key| pushed_of((key & 0xffff_ffff) as usize))
                        .collect();
                    newest_items(&lists, cap, &mut heap, &mut newest);
                    for &q in newest.iter().rev() {
                        let item = &items[q as usize];
                        batch.push(SeededInboxRow {
                            uid: self.first_user_id + follower as i64,
                            event_id: self.first_feed_item_id + i64::from(q),
                            actor: self.first_user_id + i64::from(item.author),
                            ctime: item.ctime,
                        });
                        if batch.len() == INTERACTIONS_PER_BATCH {
                            send(Batch::Inbox(std::mem::take(&mut batch)))?;
                        }
                    }
                }
                Ok(())
            },
        )?;
        if !batch.is_empty() {
            send(Batch::Inbox(batch))?;
        }
        Ok(())
    }

    /// The follows whose followee (user index) passes `wanted`, `total` of them, as keys
    /// `(follower << 32) | followee` sorted (by follower first), in passes over ranges of
    /// followers of about [`Plan::likes_per_pass`] follows each; `each` gets every pass's keys.
    fn follow_passes(
        &self,
        total: u64,
        wanted: impl Fn(usize) -> bool,
        mut each: impl FnMut(&[u64]) -> Result<(), WriterGone>,
    ) -> Result<(), WriterGone> {
        let users = self.plan.users;
        let passes = total.div_ceil(self.plan.likes_per_pass).max(1);
        let users_per_pass = users.div_ceil(passes);
        let mut keys: Vec<u64> = Vec::new();
        for pass in 0..passes {
            let range = pass * users_per_pass..((pass + 1) * users_per_pass).min(users);
            keys.clear();
            for followee in 0..users {
                let count = self.followers[followee as usize];
                if count == 0 || !wanted(followee as usize) {
                    continue;
                }
                keys.extend(
                    self.followers_of(followee, count)
                        .filter(|follower| range.contains(follower))
                        .map(|follower| (follower << 32) | followee),
                );
            }
            keys.sort_unstable();
            each(&keys)?;
        }
        Ok(())
    }

    /// The `count` followers of user `followee` (indexes): distinct users other than itself,
    /// `start + k·step mod (users − 1)` over the other users (a step coprime to their number).
    fn followers_of(&self, followee: u64, count: u64) -> impl Iterator<Item = u64> {
        let others = self.plan.users.saturating_sub(1).max(1);
        let mut rng = Rng::new(self.plan.seed, Stream::Followers, followee);
        let step = coprime_step(others, &mut rng);
        let start = rng.below(others);
        (0..count).map(move |k| {
            let other = (start + k * step) % others;
            other + u64::from(other >= followee)
        })
    }

    /// When user `follower` followed `followee` (indexes): after both registered
    /// (`registered`, by index), before the first article (at the latest when the window opens).
    fn follow_time(&self, follower: u64, followee: u64, registered: &[i64]) -> i64 {
        let after = registered[follower as usize].max(registered[followee as usize]) + 1;
        let span = (self.window_start() - after + 1).max(1) as u64;
        let mut rng = Rng::new(
            self.plan.seed,
            Stream::FollowTime,
            (follower << 32) | followee,
        );
        after + rng.below(span) as i64
    }
}

/// A feed item being generated: a published article.
struct Item {
    /// Article index.
    article: u64,
    /// Author's user index.
    author: u32,
    /// Publication time.
    ctime: i64,
}

/// The newest `cap` items of `lists` (each ascending; no item in two), newest first, into
/// `out`: a k-way merge from the lists' ends.
fn newest_items(
    lists: &[&[u32]],
    cap: u64,
    heap: &mut BinaryHeap<(u32, usize, usize)>,
    out: &mut Vec<u32>,
) {
    heap.clear();
    out.clear();
    for (list, items) in lists.iter().enumerate() {
        if let Some(&last) = items.last() {
            heap.push((last, list, items.len() - 1));
        }
    }
    while (out.len() as u64) < cap {
        let Some((item, list, position)) = heap.pop() else {
            break;
        };
        out.push(item);
        if position > 0 {
            heap.push((lists[list][position - 1], list, position - 1));
        }
    }
}

/// How prolific each user is as an author (by user index): Zipf weights (exponent 1) over a
/// random order of the users.
fn author_weights(plan: &Plan) -> Vec<f64> {
    let mut rng = Rng::new(plan.seed, Stream::Shuffle, 0);
    let mut weights = zipf_weights(plan.users as usize, 1.0, &mut rng);
    rng.shuffle(&mut weights);
    weights
}

/// Followers of each user (by user index): `--follows` shared out by Zipf's law (exponent
/// `--zipf`, with noise) in the order of `author_weights`, heaviest first — the most prolific
/// authors are the most followed — at most every other user each.
fn follower_counts(plan: &Plan, author_weights: &[f64]) -> anyhow::Result<Vec<u64>> {
    let users = plan.users as usize;
    let mut counts = vec![0u64; users];
    if plan.follows == 0 {
        return Ok(counts);
    }
    // rank → user index
    let mut order: Vec<u32> = (0..users as u32).collect();
    order.sort_unstable_by(|&a, &b| {
        author_weights[b as usize]
            .total_cmp(&author_weights[a as usize])
            .then(a.cmp(&b))
    });
    let mut rng = Rng::new(plan.seed, Stream::Shuffle, 2);
    let weights = zipf_weights(users, plan.zipf_exponent, &mut rng);
    let by_rank = allocate(plan.follows, &weights, plan.users.saturating_sub(1))
        .map_err(anyhow::Error::msg)?;
    for (rank, &user) in order.iter().enumerate() {
        counts[user as usize] = by_rank[rank];
    }
    Ok(counts)
}

/// Reads, likes and collects per published article (by published index): one popularity
/// order, Zipf weights with separate noise per kind.
struct Popularity {
    reads: Vec<u64>,
    likes: Vec<u64>,
    collects: Vec<u64>,
    comments: Vec<u64>,
    /// Published-article indexes, most popular first.
    order: Vec<u32>,
}

impl Popularity {
    fn new(plan: &Plan, published: usize) -> anyhow::Result<Self> {
        let mut rng = Rng::new(plan.seed, Stream::Shuffle, 1);
        let base = zipf_weights(published, plan.zipf_exponent, &mut rng);
        // rank → published index
        let mut order: Vec<u32> = (0..published as u32).collect();
        rng.shuffle(&mut order);
        let mut by_article = |total: u64, cap: u64| {
            let weights: Vec<f64> = base.iter().map(|w| w * (0.75 + 0.5 * rng.unit())).collect();
            let by_rank = allocate(total, &weights, cap).map_err(anyhow::Error::msg)?;
            let mut counts = vec![0u64; published];
            for (rank, &p) in order.iter().enumerate() {
                counts[p as usize] = by_rank[rank];
            }
            anyhow::Ok(counts)
        };
        let reads = by_article(plan.reads, u64::MAX).context("--reads")?;
        let likes = by_article(plan.likes, plan.users).context("--likes")?;
        let collects = by_article(plan.collects, plan.users).context("--collects")?;
        let comments = by_article(plan.comments, u64::MAX).context("--comments")?;
        Ok(Self {
            reads,
            likes,
            collects,
            comments,
            order,
        })
    }

    /// Comments per published article: the Zipf share of `--comments`, plus
    /// `--hot-thread-comments` for each of the `--hot-threads` most popular.
    fn comment_counts(&self, plan: &Plan) -> Vec<u64> {
        let mut counts = self.comments.clone();
        for &p in self.order.iter().take(plan.hot_threads as usize) {
            counts[p as usize] += plan.hot_thread_comments;
        }
        counts
    }
}
