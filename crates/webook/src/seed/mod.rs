//! `webook seed`: a realistic dataset at scale, for benchmarks and for trying the product —
//! users, articles (Chinese and English, short posts to long reads, published over the last
//! days), and Zipf-distributed reads, likes and collects — reproducible for a given `--seed`.
//!
//! Data flow: [`seed`] validates the [`Plan`], decides every article's status, hashes the one
//! password all seeded users share, and reads the next free ids. A generator thread then builds
//! rows batch by batch and sends them through a bounded channel; the async writer inserts each
//! batch with multi-row statements ([`store`]) while the generator builds the next, so the two
//! cores overlap text generation and database work.
//!
//! Phases, and what an interruption leaves behind (every state is consistent):
//!
//! 1. **users**, one transaction per batch — accounts;
//! 2. **articles**, one transaction per batch — the author's copies and reader copies, no
//!    counters yet (an article nobody has read);
//! 3. **interactions**, one transaction for all — counters (`interactives`), likes
//!    (`user_likes`) and collects (`user_collects`). Counters always match the like and collect
//!    rows: both commit together or not at all. Likes are written sorted by user (the order of
//!    `user_likes`' unique index) in passes over ranges of users, so the index grows at its end
//!    instead of being rewritten at random, and a pass holds about [`LIKES_PER_PASS`] likes in
//!    memory (8 bytes each).
//!
//! What the data looks like: popularity follows Zipf's law (rank r weighs r^-s, with noise) on a
//! random order of the published articles, and reads, likes and collects follow the same ranks;
//! each article's likers are distinct users (`start + k·step mod users` with a step coprime to
//! the number of users); authors are Zipf-distributed too (a few prolific ones). Nine in ten
//! articles are published, six in a hundred are drafts, four withdrawn. Users registered in the
//! 90 days before the first article; every like comes after its article.
//!
//! Reproducibility: each row draws from its own stream of [`random::Rng`] (`seed`, kind, index),
//! so the same plan, `--until` and starting ids give the same rows, whatever the batch sizes;
//! only the password hash's salt differs between runs.

pub mod cli;
pub mod random;
pub mod store;
pub mod text;

use std::time::Instant;

use anyhow::Context;
use indicatif::ProgressBar;
use sqlx::{Any, Transaction};
use tokio::sync::mpsc;

use self::{
    random::{allocate, coprime_step, zipf_weights, Rng, Stream, WeightedPicker},
    store::{ArticleRow, CounterRow, Interaction, InteractionRow, UserRow},
    text::Language,
};
use crate::auth::PasswordHasher;
use platform::db::Db;

const DAY_MS: i64 = 24 * 3600 * 1000;
/// Users registered over this many days before the first seeded article.
const REGISTRATION_DAYS: i64 = 90;
/// Rows per batch, and so per transaction in the first two phases.
const USERS_PER_BATCH: usize = 5_000;
const ARTICLES_PER_BATCH: usize = 2_000;
const INTERACTIONS_PER_BATCH: usize = 10_000;
/// About this many likes (or collects) are gathered and sorted at once: 32 MB.
pub const LIKES_PER_PASS: u64 = 4_000_000;
/// Batches the generator may be ahead of the writer.
const CHANNEL_BATCHES: usize = 4;
/// Largest accepted counts: ids stay far inside i64 and likers' arithmetic inside u64.
const MAX_USERS: u64 = 1 << 30;
const MAX_ARTICLES: u64 = 1 << 31;

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
    /// Likes (or collects) gathered and sorted in memory at once, 8 bytes each: more take
    /// several passes over ranges of users. The data does not depend on it.
    pub likes_per_pass: u64,
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
            days: 30,
            seed: 1,
            until: platform::db::now_millis(),
            zipf_exponent: 1.0,
            password: "seed-Password-1!".to_owned(),
            likes_per_pass: LIKES_PER_PASS,
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
        if self.password.is_empty() {
            return Err("--password: must not be empty".into());
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
    Users(Vec<UserRow>),
    Articles(Vec<ArticleRow>),
    Counters(Vec<CounterRow>),
    Interactions(Interaction, Vec<InteractionRow>),
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
    if plan.reads > 0 && published_count == 0 {
        anyhow::bail!(
            "--reads {}: there are no published articles to read",
            plan.reads
        );
    }
    let popularity = Popularity::new(plan, published.len())?;
    let password_hash = PasswordHasher::new()?
        .hash(plan.password.clone())
        .await
        .context("hashing the seeded users' password")?;
    let (first_user_id, first_article_id) = {
        let mut conn = db.writer().acquire().await?;
        store::next_ids(&mut conn).await?
    };
    let generator = Generator {
        plan: plan.clone(),
        first_user_id,
        first_article_id,
        statuses,
        published,
        popularity,
    };
    let (batches, mut incoming) = mpsc::channel(CHANNEL_BATCHES);
    let generating = tokio::task::spawn_blocking(move || generator.run(&batches));

    let mut report = Report {
        first_user_id,
        first_article_id,
        ..Report::default()
    };
    let mut interactions: Option<Transaction<'static, Any>> = None;
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
                store::insert_users(&mut tx, db.kind(), &rows, &password_hash)
                    .await
                    .with_context(|| describe("users", rows.first().map(|r| r.id), rows.len()))?;
                tx.commit().await?;
                report.users += rows.len() as u64;
                progress.inc(rows.len() as u64);
            }
            Batch::Articles(rows) => {
                let mut tx = db.writer().begin().await?;
                store::insert_articles(&mut tx, db.kind(), &rows)
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
                let tx = interactions_transaction(&mut interactions, db).await?;
                store::insert_counters(tx, db.kind(), &rows)
                    .await
                    .context("writing article counters")?;
                report.counters += rows.len() as u64;
                report.reads += rows.iter().map(|r| r.reads as u64).sum::<u64>();
                progress.inc(rows.len() as u64);
            }
            Batch::Interactions(kind, rows) => {
                let tx = interactions_transaction(&mut interactions, db).await?;
                store::insert_interactions(tx, db.kind(), kind, &rows)
                    .await
                    .with_context(|| format!("writing {kind:?}s"))?;
                match kind {
                    Interaction::Like => report.likes += rows.len() as u64,
                    Interaction::Collect => report.collects += rows.len() as u64,
                }
                progress.inc(rows.len() as u64);
            }
        }
    }
    // A generator that panicked ends the channel early: the open transaction then rolls back.
    generating.await.context("the seed generator failed")?;
    if let Some(tx) = interactions {
        progress.set_message("committing");
        tx.commit()
            .await
            .context("committing counters, likes and collects")?;
    }
    progress.finish_and_clear();
    Ok(report)
}

/// The one transaction of the third phase, begun at its first batch.
async fn interactions_transaction<'a>(
    open: &'a mut Option<Transaction<'static, Any>>,
    db: &Db,
) -> sqlx::Result<&'a mut Transaction<'static, Any>> {
    Ok(match open {
        Some(tx) => tx,
        None => open.insert(db.writer().begin().await?),
    })
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
    statuses: Vec<u8>,
    /// Published-article index → article index (articles with a reader copy).
    published: Vec<u64>,
    popularity: Popularity,
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
        let authors = self.author_picker();
        for start in (0..plan.articles).step_by(ARTICLES_PER_BATCH) {
            let end = (start + ARTICLES_PER_BATCH as u64).min(plan.articles);
            send(Batch::Articles(
                (start..end).map(|i| self.article(i, &authors)).collect(),
            ))?;
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
            batch.push(CounterRow {
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
            (Interaction::Like, &popularity.likes, plan.likes),
            (Interaction::Collect, &popularity.collects, plan.collects),
        ] {
            if total == 0 {
                continue;
            }
            send(Batch::Phase {
                name: match kind {
                    Interaction::Like => "likes",
                    Interaction::Collect => "collects",
                },
                rows: total,
            })?;
            self.interactions(kind, counts, published, total, send)?;
        }
        Ok(())
    }

    /// User `index`: registered over the 90 days before the article window.
    fn user(&self, index: u64) -> UserRow {
        let plan = &self.plan;
        let mut rng = Rng::new(plan.seed, Stream::User, index);
        let window_start = plan.until - plan.days as i64 * DAY_MS;
        let span = REGISTRATION_DAYS * DAY_MS;
        let slot = span / plan.users.max(1) as i64;
        let ctime = window_start - span
            + (i128::from(span) * i128::from(index) / i128::from(plan.users.max(1))) as i64
            + rng.below(slot.max(1) as u64) as i64;
        let id = self.first_user_id + index as i64;
        UserRow {
            id,
            email: format!("seed{id}@example.com"),
            nickname: text::nickname(&mut rng),
            about_me: text::about_me(&mut rng),
            ctime: ctime.min(window_start - 1),
        }
    }

    /// Authors by Zipf's law over a random order of the users.
    fn author_picker(&self) -> WeightedPicker {
        let plan = &self.plan;
        let mut rng = Rng::new(plan.seed, Stream::Shuffle, 0);
        let mut weights = zipf_weights(plan.users as usize, 1.0, &mut rng);
        rng.shuffle(&mut weights);
        WeightedPicker::new(&weights)
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

    fn article(&self, index: u64, authors: &WeightedPicker) -> ArticleRow {
        let mut rng = Rng::new(self.plan.seed, Stream::ArticleText, index);
        let author = authors.pick(&mut rng) as i64;
        let language = Language::draw(&mut rng);
        let text = text::article(&mut rng, language);
        let (ctime, utime) = self.article_times(index);
        ArticleRow {
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
        kind: Interaction,
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
            Interaction::Like => Stream::Likers,
            Interaction::Collect => Stream::Collectors,
        };
        let time_salt = match kind {
            Interaction::Like => 0,
            Interaction::Collect => 1u64 << 62,
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
                        InteractionRow {
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
}

/// Reads, likes and collects per published article (by published index): one popularity
/// order, Zipf weights with separate noise per kind.
struct Popularity {
    reads: Vec<u64>,
    likes: Vec<u64>,
    collects: Vec<u64>,
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
        Ok(Self {
            reads,
            likes,
            collects,
        })
    }
}
