//! `webook seed`: connects to the database the layered config names, applies migrations, runs
//! [`seed`](super::seed) with a progress bar on stderr (for the feed settings of that config:
//! push threshold and inbox cap), and prints what was written on stdout. Rows written by the
//! seed produce no events, so it marks this data dir's search index stale, rebuilt at the next start.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::feed::FeedSettings;
use platform::{config::Config, db::Db, redact_url};

/// Flags of `webook seed` (see `docs/PERFORMANCE.md` → Datasets).
#[derive(Debug, Args)]
pub struct SeedArgs {
    /// Users to create (seed1@example.com, seed2@example.com, …; they sign in with --password).
    #[arg(long, default_value_t = 1_000)]
    pub users: u64,
    /// Articles to create: 90 % published, 6 % drafts, 4 % withdrawn.
    #[arg(long, default_value_t = 10_000)]
    pub articles: u64,
    /// Likes across the published articles, Zipf-distributed (one per user and article).
    #[arg(long, default_value_t = 50_000)]
    pub likes: u64,
    /// Collects across the published articles, Zipf-distributed like the likes.
    #[arg(long, default_value_t = 5_000)]
    pub collects: u64,
    /// Reads across the published articles, Zipf-distributed (counters only).
    #[arg(long, default_value_t = 1_000_000)]
    pub reads: u64,
    /// Follows between the users, followers per user Zipf-distributed (the most prolific
    /// authors the most followed); the feed is built to match, for feed_push_threshold and
    /// feed_inbox_cap of the config.
    #[arg(long, default_value_t = 0)]
    pub follows: u64,
    /// Comments across the published articles, Zipf-distributed like the likes (threads of
    /// top-level comments and nested replies).
    #[arg(long, default_value_t = 20_000)]
    pub comments: u64,
    /// The N most popular articles get --hot-thread-comments more comments each (huge threads).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub hot_threads: u64,
    /// Comments added to each hot thread.
    #[arg(long, default_value_t = 100_000)]
    pub hot_thread_comments: u64,
    /// Articles were created over the last D days (before --until).
    #[arg(long, default_value_t = 30)]
    pub days: u64,
    /// Seed of every random choice: the same seed, sizes and --until give the same data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// End of the time window, RFC 3339 (e.g. 2026-11-30T00:00:00Z). Default: now.
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Zipf exponent of popularity: rank r gets a share proportional to r^-s.
    #[arg(long = "zipf", value_name = "S", default_value_t = 1.0)]
    pub zipf_exponent: f64,
    /// Password of every seeded user.
    #[arg(long, default_value = "seed-Password-1!", env = "WEBOOK_SEED_PASSWORD")]
    pub password: String,
    /// Tags of each author's own; each published article carries 0-3 of its author's.
    #[arg(long, default_value_t = 5)]
    pub tags_per_author: u64,
}

impl SeedArgs {
    /// The plan these flags describe.
    pub fn plan(&self) -> anyhow::Result<super::Plan> {
        let until = match &self.until {
            Some(text) => chrono::DateTime::parse_from_rfc3339(text)
                .with_context(|| format!("--until {text}: not an RFC 3339 time"))?
                .timestamp_millis(),
            None => platform::db::now_millis(),
        };
        Ok(super::Plan {
            users: self.users,
            articles: self.articles,
            likes: self.likes,
            collects: self.collects,
            reads: self.reads,
            follows: self.follows,
            comments: self.comments,
            hot_threads: self.hot_threads,
            hot_thread_comments: self.hot_thread_comments,
            // The config's (seed::cli::run); these are its defaults.
            feed: crate::feed::FeedSettings::default(),
            days: self.days,
            seed: self.seed,
            until,
            zipf_exponent: self.zipf_exponent,
            password: self.password.clone(),
            likes_per_pass: super::LIKES_PER_PASS,
            tags_per_author: self.tags_per_author,
        })
    }
}

/// Runs `webook seed`.
pub async fn run(config: &Config, args: &SeedArgs) -> anyhow::Result<()> {
    let mut plan = args.plan()?;
    plan.feed = config.settings::<FeedSettings>()?.clone();
    plan.validate().map_err(anyhow::Error::msg)?;
    let db = Db::connect(config).await?;
    let outcome = async {
        db.migrate(&crate::schema::MIGRATIONS)
            .await
            .context("applying migrations")?;
        let progress = ProgressBar::new(0);
        progress.set_style(
            ProgressStyle::with_template(
                "{msg:>9} [{bar:32}] {human_pos}/{human_len} {per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        progress.enable_steady_tick(Duration::from_millis(200));
        let started = Instant::now();
        let report = super::seed(&db, &plan, &progress).await;
        progress.finish_and_clear();
        let report = report?;
        print_report(config, &plan, &report, started.elapsed().as_secs_f64());
        // The seed writes behind the event stream: an index of this data dir no longer matches.
        if crate::search::mark_index_stale(config)? {
            println!("  search index of this data dir marked stale: rebuilt at the next start");
        }
        anyhow::Ok(())
    }
    .await;
    db.close().await;
    outcome
}

/// Prints what `report` says was written, `seconds` after the seed began.
fn print_report(config: &Config, plan: &super::Plan, report: &super::Report, seconds: f64) {
    let last_user = report.first_user_id + report.users as i64 - 1;
    let last_article = report.first_article_id + report.articles() as i64 - 1;
    println!(
        "seeded {} in {seconds:.1} s (seed {}):",
        redact_url(&config.database_url()),
        plan.seed
    );
    println!(
        "  users     {:>11}  ids {}–{last_user}, sign in as seed<id>@example.com",
        report.users, report.first_user_id
    );
    println!(
        "  articles  {:>11}  ids {}–{last_article}: {} published, {} withdrawn, {} drafts",
        report.articles(),
        report.first_article_id,
        report.published,
        report.withdrawn,
        report.drafts
    );
    println!(
        "  counters  {:>11}  {} reads in all",
        report.counters, report.reads
    );
    println!("  likes     {:>11}", report.likes);
    println!("  collects  {:>11}", report.collects);
    println!(
        "  follows   {:>11}  {} authors above feed_push_threshold {} are pulled",
        report.follows, report.pull_authors, plan.feed.feed_push_threshold
    );
    println!(
        "  feed      {:>11}  items: {} pushed, {} pulled; {} inbox rows (at most {} per user)",
        report.feed_items,
        report.feed_items - report.pulled,
        report.pulled,
        report.inbox_rows,
        plan.feed.feed_inbox_cap
    );
    println!(
        "  comments  {:>11}  on {} articles",
        report.comments, report.commented_articles
    );
    println!(
        "  tags      {:>11}  on {} articles ({} tag rows)",
        report.tags.tags, report.tags.tagged_articles, report.tags.tag_rows
    );
}
