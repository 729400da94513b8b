//! Search: Chinese, English and mixed full text over published articles (title, text, author,
//! tags) and users' public profiles, served by every API instance from an index of its own — no
//! search server to run.
//!
//! Data flow: [`feeder`] rebuilds the [`index`] from the database when it is empty or outdated
//! and follows the outbox events of articles, tags, likes and profiles, writing each changed
//! object's current document and committing with the stream positions reached, so a restart
//! resumes where it left off. `GET /search` ([`http`], limited per client address) →
//! [`SearchService`] ([`service`]) parses and runs the query ([`query`]: text [`fold`]ed, single
//! characters and pairs from [`tokens`], compounds cut into pieces, prefixes and typos
//! [`expand`]ed by document frequency, pinyin, [`synonyms`], tiers of exactness, BM25 with
//! field weights, freshness and popularity nudges, keyset-style cursors that keep the time
//! their list is ranked at) on a blocking thread, then
//! shows the hits from the database ([`store`]) with [`highlight`]s, within one work budget
//! per request. A worker-only
//! instance has no index. While the first rebuild runs, `/search` answers 503 and `/readyz`
//! reports the progress under `details.search`; everything else is served. An index that
//! cannot be written makes `details.search` say `degraded: <reason>` while queries are
//! answered from its last good commit, until the feeder has opened the directory again (and
//! rebuilt it if need be) by itself.

mod cli;
pub mod expand;
pub mod feeder;
pub mod fold;
pub mod highlight;
mod homophones;
mod http;
pub mod index;
mod pruned;
pub mod query;
mod reading;
pub mod service;
pub mod settings;
pub mod store;
pub mod synonyms;
mod tiered;
pub mod tokens;

pub use cli::reindex;
pub use service::{SearchService, SearchType};
pub use settings::SearchSettings;

use std::sync::Arc;

use async_trait::async_trait;
use clap::FromArgMatches;
use platform::{
    config::SettingsSpec,
    feature::{CliCommands, Feature, Platform, Registry},
    live::LiveRateLimiter,
    telemetry::MetricsSpec,
};

/// The search feature.
pub struct Search;

/// Marks the index `config` names, if there is one, for a rebuild at its next start: for
/// writes made behind the event stream (`webook seed`). True if there was one.
pub fn mark_index_stale(config: &platform::config::Config) -> anyhow::Result<bool> {
    index::mark_stale(&index_dir(config)?)
}

/// The directory of `config`'s search index.
pub fn index_dir(config: &platform::config::Config) -> anyhow::Result<std::path::PathBuf> {
    Ok(config.settings::<SearchSettings>()?.dir(config))
}

const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[(
        service::SEARCH_QUERY_SECONDS,
        &[0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0],
    )],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_histogram!(
        service::SEARCH_QUERY_SECONDS,
        "Seconds per search request (query and hydration), by type"
    );
    metrics::describe_counter!(
        feeder::SEARCH_EVENTS_APPLIED_TOTAL,
        "Events applied to this instance's search index"
    );
    metrics::describe_counter!(
        feeder::SEARCH_DOCUMENTS_WRITTEN_TOTAL,
        "Search documents written, by kind (put, remove)"
    );
    metrics::describe_counter!(
        query::SEARCH_PAGES_TOTAL,
        "Pages of search hits, by how they were found (pruned: only documents that could make \
         the page scored; every_match) and by reading (as_typed; loose: typos, pinyin, slips)"
    );
    metrics::describe_counter!(
        synonyms::SEARCH_SYNONYMS_RELOAD_ERRORS_TOTAL,
        "Failed reads of the search synonyms file (the groups read last stay in force)"
    );
    metrics::describe_gauge!(
        tokens::SEARCH_DICTIONARY_BYTES,
        "Bytes of the Chinese word segmenter's dictionary in memory (0 until first needed)"
    );
    metrics::describe_gauge!(
        feeder::SEARCH_INDEX_LAG_SECONDS,
        "Age of the newest event applied, at its commit: how far behind the search index runs"
    );
}

#[async_trait]
impl Feature for Search {
    fn name(&self) -> &'static str {
        "search"
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[METRICS]
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<cli::SearchCli>(|matches, context| {
            Box::pin(async move {
                let cli::SearchCli::Search(command) = cli::SearchCli::from_arg_matches(&matches)?;
                match command {
                    cli::SearchCommand::Reindex => {
                        cli::reindex(&context.config, context.schema).await
                    }
                }
            })
        }))
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::SearchApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        if !platform.config.role.serves_api() {
            return Ok(());
        }
        let settings = platform.config.settings::<SearchSettings>()?;
        let dir = settings.dir(&platform.config);
        let heap = settings.search_writer_heap;
        tokens::report_dictionary();
        let (index, opened) = tokio::task::spawn_blocking(move || {
            let (index, opened) = index::SearchIndex::open(&dir, heap)?;
            // jieba's dictionary (a 3.5 MB map, ≈ 0.16 s to build) is for text to index or
            // search. An index with documents will be searched: load it now, not in a reader's
            // first query. An empty one (a new site, or one rebuilt from the database next)
            // leaves it to the first text that needs it, and idles without it.
            if index.reader().searcher().num_docs() > 0 {
                tokens::warm_up();
            }
            anyhow::Ok((index, opened))
        })
        .await??;
        let readiness = Arc::new(feeder::Readiness::default());
        let store = store::SearchStore::new(platform.db.clone());
        let feeder = feeder::Feeder::new(
            Arc::new(index),
            store.clone(),
            readiness.clone(),
            platform.status.clone(),
        )
        .with_commit_gap(settings.search_commit_gap);
        let synonyms = settings.synonyms();
        synonyms.load()?;
        let search = SearchService::new(feeder.index(), readiness, store, synonyms);
        let events = platform.events.clone();
        let interval = settings.search_commit_interval;
        registry.background("search feeder", move |background| {
            feeder.run(events, opened, interval, background.stop)
        });
        let limiter = LiveRateLimiter::new(
            "search",
            &platform.live,
            platform.redis_with_prefix(),
            |config| {
                let settings = config.settings::<SearchSettings>()?;
                Ok((settings.search_rate_limit, settings.search_rate_window))
            },
        )?;
        registry.routes(http::router(http::SearchRoutes {
            search: search.clone(),
            limiter,
            trusted_proxies: platform.trusted_proxies.clone(),
        }));
        registry.provide(search);
        Ok(())
    }
}
