//! `webook seed`: connects to the database the layered config names, applies migrations, runs
//! [`seed`](super::seed) with a progress bar on stderr, and prints what was written on stdout.

use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::SeedArgs;
use platform::{config::Config, db::Db, redact_url};

/// Runs `webook seed`.
pub async fn run(config: &Config, args: &SeedArgs) -> anyhow::Result<()> {
    let plan = args.plan()?;
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
        anyhow::Ok(())
    }
    .await;
    db.close().await;
    outcome
}
