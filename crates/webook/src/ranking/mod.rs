//! The hot list: the best N recently published articles, computed periodically in linear time
//! and served like a static file.
//!
//! Data flow: a job ([`jobs`]) asks [`RankingService::compute`] to scan candidates ([`store`]:
//! one streaming statement of numbers, counts joined), score them and keep the best N
//! ([`model`]), then publish the list ([`cache`]): the local snapshot, then the shared copy
//! (Redis in cluster mode, a SQL table when embedded), fenced by (fire time, token). Every instance serves
//! `GET /ranking/top` ([`http`]) from its local snapshot, loaded from the shared copy at start and
//! refreshed periodically, and keeps serving its last list when Redis or the database is down.

pub mod cache;
pub mod cli;
mod http;
pub mod jobs;
pub mod model;
pub mod service;
pub mod settings;
pub mod store;

pub use cache::RankedArticle;
pub use jobs::{RankingJob, RANKING_JOB};
pub use service::{HotListParams, RankingService};
pub use settings::{RankingMode, RankingSettings};

use std::time::Duration;

use scheduler::sql::{Misfire, NewJob, OverlapPolicy, SqlJobStore};

use async_trait::async_trait;
use clap::FromArgMatches;
use platform::{
    config::{Config, SettingsSpec},
    db::{Db, Migration},
    feature::{CliCommands, Feature, Platform, Registry, Service},
    redis::Redis,
    telemetry::MetricsSpec,
};
use scheduler::{sql::Executors, Guard, JobOptions};

/// The ranking feature: the hot list, computed by the durable `ranking` job (or an in-process
/// cron job under a long lock, `ranking_mode = "cron"`), served by every instance from its
/// local snapshot, refreshed from the shared copy, and cleared of withdrawn articles.
pub struct Ranking;

/// Time-to-live of the hot list's long lock (`ranking_mode = "cron"`).
const RANKING_LOCK_TTL: Duration = Duration::from_secs(30);

#[async_trait]
impl Feature for Ranking {
    fn name(&self) -> &'static str {
        "ranking"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<RankingService>()] }
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            6,
            "ranking",
            include_str!("../../migrations/0006_ranking.sql"),
        )];
        MIGRATIONS
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[service::METRICS]
    }

    fn offline_executors(
        &self,
        config: &Config,
        db: &Db,
        executors: &mut Executors,
    ) -> anyhow::Result<()> {
        // Only cfg checks, never a run: the shared copy is irrelevant, so no Redis is needed.
        executors.register(RankingJob::new(build(config, db, None)?));
        Ok(())
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<cli::RankCli>(|matches, context| {
            Box::pin(async move {
                let cli::RankCli::Rank(args) = cli::RankCli::from_arg_matches(&matches)?;
                cli::run(&context.config, context.schema, args.once).await
            })
        }))
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::RankingApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let config = &platform.config;
        let settings = config.settings::<RankingSettings>()?;
        let ranking = build(config, &platform.db, platform.redis.as_ref())?;
        registry.executor(RankingJob::new(ranking.clone()));
        if config.role.runs_work() {
            match settings.ranking_mode {
                RankingMode::Sql => {
                    ensure_job(&crate::jobs::store(&platform.db), settings).await?;
                }
                RankingMode::Cron => registry.periodic(
                    RankingJob::new(ranking.clone()),
                    JobOptions::new(settings.ranking_schedule()?)
                        .guard(Guard::LongLock {
                            ttl: RANKING_LOCK_TTL,
                        })
                        .timeout(RANKING_TIMEOUT),
                )?,
            }
        }
        let refresher = ranking.clone();
        registry.background("hot list refresher", move |background| {
            refresher.refresher(background.stop, background.runs_work)
        });
        let (consumer, events) = (ranking.clone(), platform.events.clone());
        registry.background("hot list withdrawals", move |background| {
            consumer.withdrawal_consumer(&events, background.subscription, background.stop)
        });
        let fast = ranking.clone();
        registry.fast_path("/ranking/top", move |headers| {
            http::top_from_memory(&fast, headers)
        });
        registry.routes(http::router(http::RankingRoutes {
            ranking: ranking.clone(),
        }));
        registry.provide(ranking);
        Ok(())
    }
}

/// The shared copy outlives this many computation intervals.
const EXPIRY_INTERVALS: u32 = 5;
/// The shared copy lives at least this long.
const MIN_EXPIRY: Duration = Duration::from_secs(60);
/// Longest a computation may run before the scheduler cancels it.
pub const RANKING_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The hot list of this config: the SQL store, the shared copy of the mode (Redis when given,
/// else the database), the configured score and sizes.
pub fn build(config: &Config, db: &Db, redis: Option<&Redis>) -> anyhow::Result<RankingService> {
    let settings = config.settings::<RankingSettings>()?;
    let schedule = settings.ranking_schedule()?;
    let now = chrono::Utc::now();
    let interval = schedule
        .next_after(now)
        .and_then(|first| Some((first, schedule.next_after(first)?)))
        .and_then(|(first, second)| (second - first).to_std().ok())
        .unwrap_or(MIN_EXPIRY);
    let shared = match redis {
        Some(redis) => cache::SharedCopy::redis(redis.clone(), &config.redis_prefix),
        None => cache::SharedCopy::Sql(store::RankingStore::new(db.clone())),
    };
    Ok(RankingService::new(
        store::RankingStore::new(db.clone()),
        shared,
        HotListParams {
            size: settings.ranking_size,
            window: settings.ranking_window,
            formula: settings.ranking_formula()?,
            expiry: (interval * EXPIRY_INTERVALS).max(MIN_EXPIRY),
            refresh: settings.ranking_refresh,
        },
    ))
}

/// Creates the durable `ranking` job on `ranking_schedule` unless a job of that name exists
/// (operators' changes to it are kept). Safe when several instances start at once.
pub async fn ensure_job(jobs: &SqlJobStore, settings: &RankingSettings) -> anyhow::Result<()> {
    crate::jobs::ensure_job(
        jobs,
        &NewJob {
            name: RANKING_JOB.to_owned(),
            cron: settings.ranking_schedule.clone(),
            timezone: "UTC".to_owned(),
            executor: RANKING_JOB.to_owned(),
            cfg: "{}".to_owned(),
            misfire: Misfire::FireOnce,
            overlap: OverlapPolicy::Forbid,
            timeout_ms: i64::try_from(RANKING_TIMEOUT.as_millis()).unwrap_or(i64::MAX),
        },
    )
    .await
}
