//! `webook search reindex`: rebuilds this data dir's index from the database the layered
//! config names, with a progress bar, while no server uses the directory (tantivy's lock says
//! so if one does). The server would rebuild an empty or outdated index by itself at start;
//! this is for doing it ahead of time, or after writing to the database behind webook's back
//! (`webook seed`).

use std::{sync::Arc, time::Duration};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use platform::{
    config::Config,
    db::{Db, Migration},
    events::EventStream,
    redis::Redis,
};
use tokio_util::sync::CancellationToken;

use super::{
    feeder::{Feeder, Readiness, TOPICS},
    index::SearchIndex,
    settings::SearchSettings,
    store::SearchStore,
};

/// The search feature's subcommand of `webook`.
#[derive(Debug, clap::Subcommand)]
pub enum SearchCli {
    /// The search index of this data dir.
    #[command(subcommand)]
    Search(SearchCommand),
}

/// `webook search …`.
#[derive(Debug, clap::Subcommand)]
pub enum SearchCommand {
    /// Rebuild the index from the database (stop the server using this data dir first).
    Reindex,
}

/// Runs `webook search reindex`.
pub async fn reindex(config: &Config, schema: &[Migration]) -> anyhow::Result<()> {
    let settings = config.settings::<SearchSettings>()?;
    let db = Db::connect(config).await?;
    let result = async {
        db.migrate(schema).await.context("applying migrations")?;
        // Cluster mode: the index follows the streams from where they are now.
        let events = match &config.redis_url {
            Some(url) => EventStream::redis(
                Redis::connect(url).await?,
                url,
                &config.redis_prefix,
                Default::default(),
            )?,
            None => EventStream::in_process(),
        };
        let heads = events.heads(TOPICS).await?;
        let (dir, heap) = (settings.dir(config), settings.search_writer_heap);
        let index = tokio::task::spawn_blocking(move || SearchIndex::open(&dir, heap))
            .await??
            .0;
        let feeder = Feeder::new(
            Arc::new(index),
            SearchStore::new(db.clone()),
            Arc::new(Readiness::default()),
            Default::default(),
        );
        let progress = ProgressBar::new(0);
        progress.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} rows ({per_sec}, {eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        progress.enable_steady_tick(Duration::from_millis(200));
        let rows = feeder
            .rebuild(heads, &CancellationToken::new(), |done, total| {
                progress.set_length(total);
                progress.set_position(done);
            })
            .await;
        progress.finish_and_clear();
        let rows = rows?.unwrap_or(0);
        println!("search index rebuilt: {rows} rows");
        anyhow::Ok(())
    }
    .await;
    db.close().await;
    result
}
