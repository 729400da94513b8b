//! `webook rank`: the hot list from the command line, on the database (and, in cluster mode, the
//! Redis) the layered config names. `--once` computes and stores the list — fenced by the
//! database's now (the clock scheduled runs use), so a later scheduled run supersedes it — and
//! every running instance serves it at its next refresh; without it, the shared list is printed.

use std::time::Duration;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use crate::ranking::cache::Snapshot;
use platform::{
    config::Config,
    db::{Db, Migration},
    redis::Redis,
};

/// The ranking feature's subcommand of `webook`.
#[derive(Debug, clap::Subcommand)]
pub enum RankCli {
    /// The hot list: print the shared list, or compute and store it now (`--once`).
    Rank(RankArgs),
}

/// Flags of `webook rank`.
#[derive(Debug, clap::Args)]
pub struct RankArgs {
    /// Compute the list now and store it where every instance picks it up at its next refresh.
    #[arg(long)]
    pub once: bool,
}

/// Runs `webook rank [--once]`; prints the outcome on stdout.
pub async fn run(config: &Config, schema: &[Migration], once: bool) -> anyhow::Result<()> {
    let db = Db::connect(config).await?;
    let result = async {
        db.migrate(schema).await.context("applying migrations")?;
        let redis = match &config.redis_url {
            Some(url) => Some(Redis::connect(url).await?),
            None => None,
        };
        let ranking = super::build(config, &db, redis.as_ref())?;
        if once {
            let progress = ProgressBar::new_spinner().with_message("scanning candidates");
            progress.set_style(
                ProgressStyle::with_template("{spinner} {msg}: {pos} scanned ({per_sec})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            progress.enable_steady_tick(Duration::from_millis(100));
            // The database's clock, as scheduled runs use: a CLI host whose clock runs ahead
            // would otherwise fence out every scheduled list until the database caught up.
            let now = crate::jobs::store(&db)
                .now()
                .await
                .context("reading the database clock")?;
            let report = ranking
                .compute(
                    (now, 0),
                    now,
                    {
                        let progress = progress.clone();
                        move |scanned| progress.set_position(scanned)
                    },
                    || true,
                )
                .await;
            progress.finish_and_clear();
            let report = report?;
            return anyhow::Ok(format!(
                "computed the hot list: {} candidates scanned, {} ranked{}\n",
                report.candidates,
                report.kept,
                if report.shared {
                    ""
                } else {
                    " (not stored: a newer list is already shared)"
                }
            ));
        }
        ranking.refresh().await?;
        anyhow::Ok(match ranking.top().await {
            Some(snapshot) => table(&snapshot),
            None => {
                "no hot list has been computed yet (webook rank --once computes one)\n".to_owned()
            }
        })
    }
    .await;
    db.close().await;
    print!("{}", result?);
    Ok(())
}

fn table(snapshot: &Snapshot) -> String {
    let mut out = format!(
        "computed at {} (fence {}:{})\n{:>4}  {:>10}  {:>8}  {:>6}  TITLE\n",
        chrono::DateTime::<chrono::Utc>::from_timestamp_millis(snapshot.computed_at)
            .map(|at| at.to_rfc3339())
            .unwrap_or_default(),
        snapshot.fence.0,
        snapshot.fence.1,
        "RANK",
        "ID",
        "SCORE",
        "LIKES"
    );
    for (rank, item) in snapshot.items.iter().enumerate() {
        out.push_str(&format!(
            "{:>4}  {:>10}  {:>8.3}  {:>6}  {}\n",
            rank + 1,
            item.id,
            item.score,
            item.like_cnt,
            item.title
        ));
    }
    out
}
