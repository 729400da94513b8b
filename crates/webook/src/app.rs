//! Wiring: turns a [`Config`] into a running service.
//!
//! [`App::build`] takes the embedded-mode instance lock ([`InstanceLock`]), opens the backends
//! (SQL pool + migrations, Redis in cluster mode), resolves the JWT secrets, binds the listeners
//! (the API, and the operations endpoints when `ops_listen` is set) and assembles the router from
//! every feature's `router()` behind the middleware of [`crate::infra::http`].
//! [`App::run_until`] serves ([`crate::infra::serve`]) until the shutdown future resolves, then
//! drains: it stops accepting, lets in-flight requests finish (bounded by `shutdown_timeout`),
//! stops the job scheduler (running jobs get `shutdown_timeout` too, then are cancelled), stops
//! background tasks, waits for writes whose callers left ([`crate::infra::detached`]) and closes
//! the pool.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use axum::{extract::FromRef, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::infra::{
    instance_lock::InstanceLock,
    serve::{self as http_server, ServeOptions},
};

use scheduler::{
    sql::{Executors, SqlJobStore, SqlScheduler, WorkerOptions},
    Guard, JobOptions,
};

use crate::{
    article::{self, cache::ArticleCache, store::ArticleStore, ArticleService},
    config::{Config, JwtSecrets, RankingMode},
    infra::events::{outbox::Outbox, EventStream, RedisStreamOptions, Subscription},
    infra::{
        client_ip::TrustedProxies, db::Db, http::with_middleware, jobs::JobRegistry,
        rate_limit::RateLimiter, redis::Redis, telemetry,
    },
    interactive::{store::InteractiveStore, InteractiveService},
    ops,
    ranking::{self, RankingJob, RankingService},
    user::{
        self, password::PasswordHasher, service::Limits, session::SessionStore, store::UserStore,
        token::Tokens, PurgeExpiredSessions, UserService,
    },
};

/// Time-to-live of the hot list's long lock (`ranking_mode = "cron"`).
const RANKING_LOCK_TTL: Duration = Duration::from_secs(30);

/// How often the metrics registry runs its upkeep (drains histogram buffers).
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Every feature's metrics, for the recorder: [`App::build`] installs it with these first, and
/// so should anything that serves [`with_middleware`] without an app (whoever installs the
/// process-wide recorder first sets its buckets).
pub const METRICS: &[telemetry::MetricsSpec] = &[ranking::service::METRICS];

/// What every handler can reach: one pointer to the [`Services`], so the per-request clone the
/// `State` extractor makes is a single reference-count increment (cloning every service handle
/// per request was a fifth of the CPU time of a cached read).
#[derive(Clone)]
pub struct AppState(Arc<Services>);

impl AppState {
    /// Shares `services` with every handler.
    pub fn new(services: Services) -> Self {
        Self(Arc::new(services))
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

/// The backends and services of one instance, built once at start-up.
pub struct Services {
    /// The effective configuration.
    pub config: Arc<Config>,
    /// The SQL store.
    pub db: Db,
    /// Redis, in cluster mode only.
    pub redis: Option<Redis>,
    /// The Prometheus registry, rendered by `/metrics`.
    pub metrics: PrometheusHandle,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: TrustedProxies,
    /// Accounts and sessions.
    pub users: UserService,
    /// Articles.
    pub articles: ArticleService,
    /// Domain events (article published, withdrawn, …).
    pub events: EventStream,
    /// Events recorded with the writes they report, and their relay to `events`.
    pub outbox: Outbox,
    /// Reads, likes and collects.
    pub interactive: InteractiveService,
    /// Durable jobs (`jobs`, `job_runs`), for the admin API.
    pub job_store: SqlJobStore,
    /// The executors durable jobs may name.
    pub job_executors: Executors,
    /// The hot list.
    pub ranking: RankingService,
}

impl FromRef<AppState> for TrustedProxies {
    fn from_ref(state: &AppState) -> Self {
        state.trusted_proxies.clone()
    }
}

/// A built service: backends open, jobs registered, listeners bound, not yet serving.
pub struct App {
    state: AppState,
    jobs: JobRegistry,
    listener: TcpListener,
    ops_listener: Option<TcpListener>,
    /// Held while serving (embedded mode): no second embedded server on this database.
    _instance_lock: Option<InstanceLock>,
}

impl App {
    /// Opens every backend the config names and binds the listen address. Fails with one clear
    /// error naming the setting when a backend cannot be reached.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        // First, so the recorder takes every feature's buckets.
        let metrics = telemetry::install_metrics(METRICS)?;
        let jwt = JwtSecrets::resolve(&config)?;
        let db = Db::connect(&config).await?;
        // Before the first write. Worker-only processes share nothing user-facing in-process,
        // so several may run.
        let instance_lock = if config.role.serves_api() {
            InstanceLock::acquire(&config, "webook serve").await?
        } else {
            None
        };
        let applied = db.migrate().await.context("applying migrations")?;
        if applied > 0 {
            tracing::info!(applied, "database migrated");
        }
        let redis = match &config.redis_url {
            Some(url) => Some(Redis::connect(url).await?),
            None => None,
        };
        let users = build_user_service(&config, &jwt, &db, redis.as_ref()).await?;
        let trusted_proxies = TrustedProxies(config.trusted_proxy_networks()?);
        let events = match (&redis, &config.redis_url) {
            (Some(redis), Some(url)) => EventStream::redis(
                redis.clone(),
                url,
                &config.redis_prefix,
                RedisStreamOptions::default(),
            )?,
            _ => EventStream::in_process(),
        };
        let outbox = Outbox::new(db.clone(), events.clone());
        let articles = ArticleService::new(
            ArticleStore::new(db.clone()),
            ArticleCache::new(
                redis
                    .as_ref()
                    .map(|redis| (redis, config.redis_prefix.as_str())),
                config.cache_memory_bytes,
            ),
            outbox.clone(),
        );
        let interactive = InteractiveService::new(
            InteractiveStore::new(db.clone()),
            events.clone(),
            redis
                .as_ref()
                .map(|redis| (redis, config.redis_prefix.as_str())),
            config.cache_memory_bytes,
        );
        let mut jobs = JobRegistry::for_mode(&config, redis.as_ref());
        jobs.add_maintenance(&config, PurgeExpiredSessions::new(users.clone()))?;
        jobs.add_maintenance(
            &config,
            crate::infra::events::dedup::PurgeConsumedEvents::new(db.clone()),
        )?;
        jobs.add_maintenance(
            &config,
            crate::idempotency::PurgeIdempotencyKeys::new(db.clone()),
        )?;
        let ranking = ranking::build(&config, &db, redis.as_ref())?;
        let job_store = crate::jobs::store(&db);
        if !config.job_runs_retention.is_zero() {
            jobs.add_maintenance(
                &config,
                crate::jobs::PurgeJobRuns::new(job_store.clone(), config.job_runs_retention),
            )?;
        }
        let job_executors =
            crate::jobs::executors(Some(ranking.clone()), config.job_http_allowed_networks()?)?;
        if config.role.runs_work() {
            match config.ranking_mode {
                RankingMode::Sql => ranking::ensure_job(&job_store, &config).await?,
                RankingMode::Cron => jobs.add(
                    RankingJob::new(ranking.clone()),
                    JobOptions::new(config.ranking_schedule()?)
                        .guard(Guard::LongLock {
                            ttl: RANKING_LOCK_TTL,
                        })
                        .timeout(ranking::RANKING_TIMEOUT),
                )?,
            }
        }
        let listener = TcpListener::bind(config.listen).await.with_context(|| {
            format!(
                "cannot listen on listen (WEBOOK_LISTEN / --listen) {}",
                config.listen
            )
        })?;
        let ops_listener = match config.ops_listen {
            Some(address) => Some(TcpListener::bind(address).await.with_context(|| {
                format!("cannot listen on ops_listen (WEBOOK_OPS_LISTEN) {address}")
            })?),
            None => None,
        };
        Ok(Self {
            state: AppState::new(Services {
                config: Arc::new(config),
                db,
                redis,
                metrics,
                trusted_proxies,
                users,
                articles,
                events,
                outbox,
                interactive,
                job_store,
                job_executors,
                ranking,
            }),
            jobs,
            listener,
            ops_listener,
            _instance_lock: instance_lock,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> anyhow::Result<SocketAddr> {
        Ok(self.listener.local_addr()?)
    }

    /// The operations address actually bound, when `ops_listen` is set.
    pub fn ops_addr(&self) -> anyhow::Result<Option<SocketAddr>> {
        Ok(self
            .ops_listener
            .as_ref()
            .map(TcpListener::local_addr)
            .transpose()?)
    }

    /// The shared state handlers see.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves until `shutdown` resolves, then drains gracefully (see the module docs).
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Self {
            state,
            jobs,
            listener,
            ops_listener,
            _instance_lock,
        } = self;
        let config = state.config.clone();
        let role = config.role;
        let separate_ops = ops_listener.is_some();
        let router = if role.serves_api() {
            router(state.clone())?
        } else {
            with_middleware(
                ops::router(ops::Endpoints {
                    metrics: !separate_ops,
                    debug: config.debug_endpoints,
                })
                .with_state(state.clone()),
                &config,
            )?
        };
        let ops_router = with_middleware(
            ops::router(ops::Endpoints {
                metrics: true,
                debug: false,
            })
            .with_state(state.clone()),
            &config,
        )?;
        // Two stages: `stopping` ends HTTP (no new requests, in-flight ones finish); only then
        // `background_stop` ends background work, so the events those last requests published
        // are still consumed and flushed.
        let stopping = CancellationToken::new();
        let background = TaskTracker::new();
        let background_stop = CancellationToken::new();
        background.spawn(metrics_upkeep(
            state.metrics.clone(),
            background_stop.clone(),
        ));
        background.spawn(
            state
                .ranking
                .clone()
                .refresher(background_stop.clone(), role.runs_work()),
        );
        let mut cron_jobs = None;
        let mut durable_jobs = None;
        // A process that does not consume the streams still takes what it published to its
        // own in-process queues while Redis refused it (infra::events).
        let subscription = if role.runs_work() {
            Subscription::Stream
        } else {
            Subscription::FallbackOnly
        };
        background.spawn(
            state
                .interactive
                .read_counter(subscription, background_stop.clone()),
        );
        background.spawn(state.ranking.withdrawal_consumer(
            &state.events,
            subscription,
            background_stop.clone(),
        ));
        // After the consumers above registered: in-process, the relay hands each row to the
        // groups that exist when it relays it.
        background.spawn(state.outbox.clone().run(background_stop.clone()));
        if role.runs_work() {
            cron_jobs = Some(jobs.start());
            durable_jobs = Some(
                SqlScheduler::new(
                    state.job_store.clone(),
                    state.job_executors.clone(),
                    worker_options(&config),
                )
                .start(),
            );
        }

        let addr = listener.local_addr()?;
        tracing::info!(
            mode = if config.is_cluster() { "cluster" } else { "embedded" },
            role = ?role,
            database = %crate::infra::redact_url(&config.database_url()),
            "listening on http://{addr}"
        );
        let options = ServeOptions::from_config(&config);
        let ops_server = ops_listener.map(|ops_listener| {
            if let Ok(ops_addr) = ops_listener.local_addr() {
                tracing::info!("operations endpoints on http://{ops_addr}");
            }
            tokio::spawn(http_server::serve(
                ops_listener,
                ops_router,
                options,
                stopping.clone(),
            ))
        });
        let server = http_server::serve(listener, router, options, stopping.clone());
        tokio::pin!(server);

        tokio::select! {
            () = &mut server => anyhow::bail!("the HTTP server stopped by itself"),
            () = shutdown => {
                tracing::info!(grace = ?config.shutdown_timeout, "shutting down: draining in-flight requests");
                stopping.cancel();
                if tokio::time::timeout(config.shutdown_timeout, &mut server).await.is_err() {
                    tracing::warn!("in-flight requests outlived shutdown_timeout; abandoning them");
                }
            }
        }
        stopping.cancel();
        if let Some(ops_server) = ops_server {
            if tokio::time::timeout(config.shutdown_timeout, ops_server)
                .await
                .is_err()
            {
                tracing::warn!("operations requests outlived shutdown_timeout; abandoning them");
            }
        }
        // Jobs next: they may still publish events, which the consumers below then flush.
        if let Some(durable_jobs) = durable_jobs {
            durable_jobs.stop(config.shutdown_timeout).await;
        }
        if let Some(cron_jobs) = cron_jobs {
            let interrupted = cron_jobs.stop(config.shutdown_timeout).await;
            if interrupted > 0 {
                tracing::warn!(
                    interrupted,
                    "job runs outlived shutdown_timeout and were cancelled"
                );
            }
        }
        // What the last writes recorded in the outbox goes out while the consumers still run
        // (in-process, they must handle it before its rows go); anything left waits for the
        // next start.
        match tokio::time::timeout(
            config.shutdown_timeout,
            state.outbox.relay_pending(&CancellationToken::new()),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => tracing::warn!(
                error = format!("{err:#}"),
                "cannot relay the outbox before stopping; its events wait for the next start"
            ),
            Err(_) => tracing::warn!(
                "the outbox relay outlived shutdown_timeout; the rest waits for the next start"
            ),
        }
        background_stop.cancel();
        background.close();
        if tokio::time::timeout(config.shutdown_timeout, background.wait())
            .await
            .is_err()
        {
            tracing::warn!("background tasks outlived shutdown_timeout; abandoning them");
        }
        // Writes whose callers left (timeouts, disconnects) finish before the pool closes.
        if !crate::infra::detached::drain(config.shutdown_timeout).await {
            tracing::warn!("detached writes outlived shutdown_timeout; abandoning them");
        }
        state.db.close().await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// The full router: every feature's routes behind the shared middleware.
pub fn router(state: AppState) -> anyhow::Result<Router> {
    let config = state.config.clone();
    let routes = Router::new()
        .merge(ops::router(ops::Endpoints {
            metrics: config.ops_listen.is_none(),
            debug: config.debug_endpoints,
        }))
        .merge(user::router())
        .merge(article::router(state.clone()))
        .merge(ranking::router())
        .merge(crate::jobs::router(state.clone()))
        .with_state(state);
    with_middleware(routes, &config)
}

/// Tuning of this instance's durable-job worker, from the config.
fn worker_options(config: &Config) -> WorkerOptions {
    WorkerOptions {
        permits: config.job_permits,
        heartbeat: config.job_heartbeat,
        lease: config.job_lease,
        max_idle_poll: config.job_poll_max,
        ..WorkerOptions::default()
    }
}

/// Accounts and sessions, with the session store and rate limiter of the mode.
async fn build_user_service(
    config: &Config,
    jwt: &JwtSecrets,
    db: &Db,
    redis: Option<&Redis>,
) -> anyhow::Result<UserService> {
    let tokens = Tokens::new(jwt, config.access_token_ttl, config.refresh_token_ttl)?;
    let (sessions, auth_limiter, write_limiter) = match redis {
        Some(redis) => (
            SessionStore::cluster(
                db.clone(),
                redis.clone(),
                &config.redis_prefix,
                config.refresh_token_ttl,
            ),
            RateLimiter::redis(
                "auth",
                redis.clone(),
                &config.redis_prefix,
                config.auth_rate_limit,
                config.auth_rate_window,
            ),
            (config.write_rate_limit > 0).then(|| {
                RateLimiter::redis(
                    "write",
                    redis.clone(),
                    &config.redis_prefix,
                    config.write_rate_limit,
                    config.write_rate_window,
                )
            }),
        ),
        None => (
            SessionStore::local(db.clone(), config.refresh_token_ttl).await?,
            RateLimiter::local("auth", config.auth_rate_limit, config.auth_rate_window)?,
            (config.write_rate_limit > 0)
                .then(|| {
                    RateLimiter::local("write", config.write_rate_limit, config.write_rate_window)
                })
                .transpose()?,
        ),
    };
    Ok(UserService::new(
        UserStore::new(db.clone()),
        PasswordHasher::new()?,
        tokens,
        sessions,
        Limits {
            auth: auth_limiter,
            writes: write_limiter,
        },
    ))
}

/// Builds and serves `config` until SIGINT or SIGTERM.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    // Before anything else: a signal that arrives while the app starts is then a graceful stop
    // once it runs, never the default action (death by the signal).
    let shutdown = shutdown_signal();
    App::build(config).await?.run_until(shutdown).await
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM. The handlers are installed when this is called, not
/// when the future is first polled.
pub fn shutdown_signal() -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind: SignalKind, name: &'static str| {
        let registered = signal(kind);
        async move {
            match registered {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(err) => {
                    tracing::error!(%err, "cannot listen for {name}");
                    std::future::pending::<()>().await;
                }
            }
        }
    };
    let interrupt = listen(SignalKind::interrupt(), "SIGINT");
    let terminate = listen(SignalKind::terminate(), "SIGTERM");
    async move {
        tokio::select! {
            () = interrupt => tracing::info!("received SIGINT"),
            () = terminate => tracing::info!("received SIGTERM"),
        }
    }
}

async fn metrics_upkeep(handle: PrometheusHandle, stopping: CancellationToken) {
    let mut ticks = tokio::time::interval(METRICS_UPKEEP_INTERVAL);
    loop {
        tokio::select! {
            _ = ticks.tick() => handle.run_upkeep(),
            () = stopping.cancelled() => return,
        }
    }
}
