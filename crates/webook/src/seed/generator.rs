//! The generating side of `webook seed` ([`super`]): what is decided before a row is written
//! ([`Shape`]: every article's status, the popularity of the published ones, how prolific and
//! how followed each user is), the [`Generator`] that turns it into rows on a blocking thread,
//! and the [`Batch`]es it sends the writer ([`super::writer`]) through a bounded channel.
//!
//! [`Generator::generate`] runs the phases in order; each phase is a method in a module of its
//! own (`users`, `articles`, `interactions`, `follows`, `comments`) that sends a
//! [`Batch::Phase`] (its size, for the progress bar) and then its rows. This module keeps what
//! several phases share: each user's registration and each article's times, drawn from their
//! own streams ([`Rng`]) so any phase can recompute them.

use anyhow::Context;
use tokio::sync::mpsc;

use super::{
    random::{allocate, zipf_weights, Rng, Stream},
    Plan, DAY_MS, REGISTRATION_DAYS,
};
use crate::{
    article::SeededArticle,
    comment::SeededComment,
    feed::{SeededFeedItem, SeededFollow, SeededFollowCount, SeededInboxRow, SeededPullAuthor},
    interactive::{LikeOrCollect, SeededCommentCount, SeededCounters, SeededInteraction},
    user::SeededUser,
};

/// Article statuses as stored (`articles.status`).
pub(super) const DRAFT: u8 = 1;
pub(super) const PUBLISHED: u8 = 2;
pub(super) const WITHDRAWN: u8 = 3;

/// One unit of work for the writer: a phase's start, or rows of one feature's table.
pub(super) enum Batch {
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

/// The writer stopped (it failed; its error is the one reported).
pub(super) struct WriterGone;

/// Where a phase sends its batches: the channel to the writer.
pub(super) type Sink<'a> = &'a dyn Fn(Batch) -> Result<(), WriterGone>;

/// The ids the seeded rows start from: one past the largest of each table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FirstIds {
    pub(super) user: i64,
    pub(super) article: i64,
    pub(super) feed_item: i64,
    pub(super) comment: i64,
}

/// What is decided before anything is written, from the plan alone.
pub(super) struct Shape {
    statuses: Vec<u8>,
    published: Vec<u64>,
    popularity: Popularity,
    author_weights: Vec<f64>,
    followers: Vec<u64>,
    comment_counts: Vec<u64>,
}

impl Shape {
    /// Decides every article's status, the popularity of the published ones and every user's
    /// followers; refuses what the statuses make impossible (more likes than users × published
    /// articles, comments or reads without a published article).
    pub(super) fn of(plan: &Plan) -> anyhow::Result<Self> {
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
                    "{flag} {wanted}: more than users × published articles ({} × \
                     {published_count} = {room}); a user likes or collects an article at most \
                     once",
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
        let comment_counts = popularity.comment_counts(plan);
        Ok(Self {
            statuses,
            published,
            popularity,
            author_weights,
            followers,
            comment_counts,
        })
    }
}

/// Builds the rows (on a blocking thread: this is CPU work) and hands them to the writer.
pub(super) struct Generator {
    pub(super) plan: Plan,
    pub(super) first_user_id: i64,
    pub(super) first_article_id: i64,
    pub(super) first_feed_item_id: i64,
    pub(super) first_comment_id: i64,
    /// Comments of each published article, by published-article index.
    pub(super) comment_counts: Vec<u64>,
    pub(super) statuses: Vec<u8>,
    /// Published-article index → article index (articles with a reader copy).
    pub(super) published: Vec<u64>,
    pub(super) popularity: Popularity,
    /// How prolific each user is as an author, by user index.
    pub(super) author_weights: Vec<f64>,
    /// Followers of each user, by user index.
    pub(super) followers: Vec<u64>,
}

impl Generator {
    /// The generator of `plan`'s rows, numbered from `ids`.
    pub(super) fn new(plan: &Plan, ids: FirstIds, shape: Shape) -> Self {
        Self {
            plan: plan.clone(),
            first_user_id: ids.user,
            first_article_id: ids.article,
            first_feed_item_id: ids.feed_item,
            first_comment_id: ids.comment,
            comment_counts: shape.comment_counts,
            statuses: shape.statuses,
            published: shape.published,
            popularity: shape.popularity,
            author_weights: shape.author_weights,
            followers: shape.followers,
        }
    }

    /// Generates everything; stops early, quietly, when the writer has gone (it reports why).
    pub(super) fn run(&self, out: &mpsc::Sender<Batch>) {
        let send = |batch| out.blocking_send(batch).map_err(|_| WriterGone);
        let _ = self.generate(&send);
    }

    /// The phases in order (module docs of [`super`]).
    fn generate(&self, send: Sink<'_>) -> Result<(), WriterGone> {
        self.users(send)?;
        let article_authors = self.articles(send)?;
        self.counters(send)?;
        self.likes_and_collects(send)?;
        self.follows_and_feed(&article_authors, send)?;
        self.comments(send)
    }

    /// When user `index` registered: the first draw of its stream (`rng`), before the window.
    pub(super) fn registration(&self, index: u64, rng: &mut Rng) -> i64 {
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
    pub(super) fn window_start(&self) -> i64 {
        self.plan.until - self.plan.days as i64 * DAY_MS
    }

    /// Article `index`'s creation (= first publication) and last change: creation times spread
    /// evenly over the window in id order, with jitter inside each article's slot.
    pub(super) fn article_times(&self, index: u64) -> (i64, i64) {
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
pub(super) struct Popularity {
    pub(super) reads: Vec<u64>,
    pub(super) likes: Vec<u64>,
    pub(super) collects: Vec<u64>,
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
