//! `webook seed`: connects to the database the layered config names, applies migrations, runs
//! [`seed`](super::seed) with a progress bar on stderr (for the feed settings of that config:
//! push threshold and inbox cap), and prints what was written on stdout. Rows written by the
//! seed produce no events, so it marks this data dir's search index stale, rebuilt at the next start.

use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::{cli::SeedArgs, feed::FeedSettings};
use platform::{config::Config, db::Db, redact_url};

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
        let seconds = started.elapsed().as_secs_f64();
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
