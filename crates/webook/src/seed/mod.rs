//! `webook seed`: a realistic dataset at scale, for benchmarks and for trying the product —
//! users, articles (Chinese and English, short posts to long reads, published over the last
//! days), Zipf-distributed reads, likes, collects and follows, and the feed the runtime would
//! have built from them — reproducible for a given `--seed`.
//!
//! Who writes what: this module and its files decide and generate the data; each feature that
//! owns seeded tables writes them — its `seed` module holds the row types and the bulk SQL of
//! its tables (multi-row `INSERT`s with explicit ids, PostgreSQL's sequences moved past them),
//! reached through its front door: [`crate::user::insert_seeded_users`],
//! [`crate::article::insert_seeded_articles`], [`crate::interactive::insert_seeded_counters`]
//! and the likes, collects and comment counts, [`crate::feed::insert_seeded_follows`] and the
//! rest of the feed, [`crate::comment::insert_seeded_comments`],
//! [`crate::tag::insert_seeded_tags`] and the tag rows. No SQL here names a feature's table
//! (only [`indexes`] has SQL, over the engine's catalog, for the tables the features name).
//!
//! Data flow: [`seed`] validates the [`Plan`], decides every article's status, the published
//! articles' popularity and every user's follower count ([`generator::Shape`]), hashes the one
//! password all seeded users share, and asks each feature for the next free id of its table. A
//! generator thread ([`generator::Generator`]) then runs phases 1–5, each a method in a file of
//! its own (`users`, `articles`, `interactions`, `follows`, `comments`), building rows batch by
//! batch and sending them through a bounded channel; the async [`writer::Writer`] hands each
//! batch to the feature owning its table, inside the transaction its phase calls for, while the
//! generator builds the next, so the two cores overlap text generation and database work.
//! Phase 6 (`tags`) runs after them, on its own, reading back the published articles.
//!
//! Phases — the file generating each, the features writing it — and what an interruption leaves
//! behind (every state is consistent):
//!
//! 1. **users** ([`users`]; the user feature), one transaction per batch — accounts;
//! 2. **articles** ([`articles`]; the article feature), one transaction per batch — the author's
//!    copies and reader copies, no counters yet (an article nobody has read) and no feed items
//!    yet (the state of a database whose feed was added after its articles);
//! 3. **interactions** ([`interactions`]; the interactive feature), one transaction for all —
//!    counters (`interactives`), likes (`user_likes`) and collects (`user_collects`). Counters
//!    always match the like and collect rows: both commit together or not at all. Likes are
//!    written sorted by user (the order of `user_likes`' unique index) in passes over ranges of
//!    users, so the index grows at its end instead of being rewritten at random, and a pass holds
//!    about [`LIKES_PER_PASS`] likes in memory (8 bytes each);
//! 4. **follows and the feed** ([`follows`]; the feed feature), one transaction for all —
//!    follows (`follows`, status 1), their counts (`follow_counts`), one item per published
//!    article (`feed_events`), the pull authors (`feed_pull_authors`) and the inboxes
//!    (`feed_inbox`). Counts always match the follow rows and the feed always agrees with the
//!    follows: all commit together or not at all (an interruption leaves the first three phases'
//!    dataset, no follows and no feed). Follows and inbox rows are written sorted by follower
//!    (the order of their unique index and primary key), in passes over ranges of users like the
//!    likes. The non-unique indexes of `follows`, `feed_events` and `feed_inbox` (as the feed
//!    names them: [`crate::feed::seeded_bulk_tables`]) are dropped when the phase begins and
//!    built again, each in one sort, just before it commits ([`indexes`]): inboxes written user
//!    by user name their items in random order, and inserting millions of rows into those
//!    indexes one by one took most of the seed's time. (On PostgreSQL the drop locks those tables
//!    until the commit: seed before starting servers on the database, or expect their feeds to
//!    wait.)
//! 5. **comments** ([`comments`]; the comment feature, and the interactive feature for the
//!    articles' `comment_cnt`), one transaction for all — comment threads under the published
//!    articles with every counter the runtime keeps; an interruption leaves the first four
//!    phases' dataset and no comments. Comment notices are not seeded.
//! 6. **tags** ([`tags`]; the tag feature, reading the published articles back from the article
//!    feature), one transaction for all — `--tags-per-author` tags of each author's own, 0–3 of
//!    them on each published article.
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
pub mod random;
pub mod tags;
pub mod text;

mod articles;
mod follows;
mod generator;
mod indexes;
mod interactions;
mod users;
mod writer;

pub use cli::{run, SeedArgs};

use anyhow::Context;
use indicatif::ProgressBar;
use tokio::sync::mpsc;

use self::{
    generator::{FirstIds, Generator, Shape},
    writer::Writer,
};
use crate::{article, auth::PasswordHasher, comment, feed, feed::FeedSettings, user};
use platform::db::Db;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// Users registered over this many days before the first seeded article.
const REGISTRATION_DAYS: i64 = 90;
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

/// Generates `plan`'s dataset into `db`, showing progress on `progress` (use
/// [`ProgressBar::hidden`] for none). Returns what was written.
///
/// The phases (module docs): what the plan decides up front ([`Shape`]), the generator thread
/// feeding the writer phases 1–5 through a bounded channel, then the tags phase.
pub async fn seed(db: &Db, plan: &Plan, progress: &ProgressBar) -> anyhow::Result<Report> {
    plan.validate().map_err(anyhow::Error::msg)?;
    let shape = Shape::of(plan)?;
    let password_hash = PasswordHasher::new()?
        .hash(plan.password.clone())
        .await
        .context("hashing the seeded users' password")?;
    let ids = first_ids(db).await?;
    let report = Report {
        first_user_id: ids.user,
        first_article_id: ids.article,
        first_feed_item_id: ids.feed_item,
        first_comment_id: ids.comment,
        ..Report::default()
    };
    let generator = Generator::new(plan, ids, shape);
    let (batches, mut incoming) = mpsc::channel(CHANNEL_BATCHES);
    let generating = tokio::task::spawn_blocking(move || generator.run(&batches));
    let mut writer = Writer::new(db, plan, progress, password_hash, report);
    while let Some(batch) = incoming.recv().await {
        writer.write(batch).await?;
    }
    // A generator that panicked ends the channel early: the open transaction then rolls back.
    generating.await.context("the seed generator failed")?;
    let mut report = writer.finish().await?;
    report.tags = tags::seed_tags(db, plan, &report, progress).await?;
    progress.finish_and_clear();
    Ok(report)
}

/// The first free ids of the tables whose ids the seed gives, each from the feature owning
/// the table.
async fn first_ids(db: &Db) -> anyhow::Result<FirstIds> {
    let mut conn = db.writer().acquire().await?;
    Ok(FirstIds {
        user: user::next_user_id(&mut conn).await?,
        article: article::next_article_id(&mut conn).await?,
        feed_item: feed::next_feed_item_id(&mut conn).await?,
        comment: comment::next_comment_id(&mut conn).await?,
    })
}
