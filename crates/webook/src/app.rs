//! Wiring: turning a [`Config`] into a running service, with every feature of [`FEATURES`].
//!
//! [`App::build`] takes the embedded-mode
//! instance lock ([`InstanceLock`]), opens the backends (SQL pool + every feature's migrations,
//! Redis in cluster mode, the event stream and its outbox), binds the listeners (the API, and
//! the operations endpoints when `ops_listen` is set) and installs each feature in list order
//! ([`Feature::install`]): routes, periodic jobs, durable-job executors, background tasks.
//! [`App::run_until`] serves ([`platform::serve`]) the features' fast paths
//! ([`platform::fast_path`]) and the merged routes behind the middleware of [`platform::http`]
//! until the shutdown future resolves, then drains: it stops accepting, lets in-flight requests
//! finish (bounded by `shutdown_timeout`), stops the job schedulers (running jobs get
//! `shutdown_timeout` too, then are cancelled), flushes the events still buffered for Redis, relays
//! what the last writes recorded in the outbox, stops background tasks, waits for writes whose
//! callers left ([`platform::detached`]) and closes the pool.

use std::{future::Future, net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context;
use metrics_exporter_prometheus::PrometheusHandle;
use scheduler::sql::{Executors, SqlScheduler};
use tokio::net::TcpListener;
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use platform::{
    client_ip::TrustedProxies,
    config::{Config, ConfigArgs, SettingsSpec},
    db::Db,
    events::{outbox::Outbox, EventStream, RedisStreamOptions, Subscription},
    fast_path::Served,
    feature::{Background, Installed, Platform, Registry, Services},
    http::with_middleware,
    idempotency::{Idempotency, PurgeIdempotencyKeys},
    instance_lock::InstanceLock,
    jobs::JobRegistry,
    ops,
    redis::Redis,
    serve::{self as http_server, ServeOptions},
    telemetry::{self, MetricsSpec},
};

use crate::features::FEATURES;

/// Every feature's settings sections.
pub fn settings() -> Vec<SettingsSpec> {
    FEATURES
        .iter()
        .flat_map(|feature| feature.settings().iter().copied())
        .collect()
}

/// Loads the layered configuration: the platform's keys and every feature's section.
pub fn load_config(flags: &ConfigArgs) -> anyhow::Result<Config> {
    Config::load(flags, &settings())
}

/// Every feature's metric specs.
pub fn metrics() -> Vec<MetricsSpec> {
    FEATURES
        .iter()
        .flat_map(|feature| feature.metrics().iter().copied())
        .collect()
}

/// The OpenAPI document of the API, as JSON: the platform's operations routes and every
/// feature's ([`crate::openapi`]).
pub fn openapi() -> anyhow::Result<serde_json::Value> {
    crate::openapi::document(FEATURES)
}

/// The durable-job executors every feature offers, for commands that check jobs without
/// serving (`webook jobs add`).
pub fn offline_executors(config: &Config, db: &Db) -> anyhow::Result<Executors> {
    let mut executors = Executors::new();
    for feature in FEATURES {
        feature.offline_executors(config, db, &mut executors)?;
    }
    Ok(executors)
}

/// Every feature's checks before the database is opened ([`platform::feature::Feature::before_open`]),
/// for the server (`command` `None`) or the subcommand `command`.
pub fn before_open(config: &Config, command: Option<&str>) -> anyhow::Result<()> {
    for feature in FEATURES {
        feature.before_open(config, command)?;
    }
    Ok(())
}

/// How often the metrics registry runs its upkeep (drains histogram buffers).
const METRICS_UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// A built service: backends open, features installed, listeners bound, not yet serving.
pub struct App {
    platform: Platform,
    installed: Installed,
    listener: TcpListener,
    ops_listener: Option<TcpListener>,
    /// Held while serving (embedded mode): no second embedded server on this database.
    _instance_lock: Option<InstanceLock>,
}

impl App {
    /// Opens every backend the config names, installs the features and binds the listen
    /// address. Fails with one clear error naming the setting when a backend cannot be reached.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        platform::feature::check_wiring(FEATURES)?;
        // First, so the recorder takes every feature's buckets.
        let metrics = telemetry::install_metrics(&metrics())?;
        before_open(&config, None)?;
        let db = Db::connect(&config).await?;
        // Before the first write. Worker-only processes share nothing user-facing in-process,
        // so several may run.
        let instance_lock = if config.role.serves_api() {
            InstanceLock::acquire(&config, "webook serve").await?
        } else {
            None
        };
        let applied = db
            .migrate(&crate::schema::MIGRATIONS)
            .await
            .context("applying migrations")?;
        if applied > 0 {
            tracing::info!(applied, "database migrated");
        }
        let redis = match &config.redis_url {
            Some(url) => Some(Redis::connect(url).await?),
            None => None,
        };
        let trusted_proxies =
            TrustedProxies::new(config.trusted_proxy_networks()?, config.client_ipv6_prefix);
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
        let (db_for_keys, body_limit) = (db.clone(), config.body_limit_bytes);
        let config = Arc::new(config);
        let platform = Platform {
            live: platform::live::LiveConfig::new(config.clone()),
            config,
            db,
            redis,
            events,
            outbox,
            metrics,
            trusted_proxies,
            status: platform::status::StatusBoard::default(),
            schema: &crate::schema::MIGRATIONS,
            idempotency: Idempotency::new(db_for_keys, body_limit),
            draining: CancellationToken::new(),
        };
        // The platform's live keys act on the process: its log filter and trace sampling.
        platform.live.on_change(|old, new| {
            if old.log != new.log {
                match platform::telemetry::set_log_filter(&new.log) {
                    Ok(()) => tracing::info!(log = %new.log, "log filter changed"),
                    Err(err) => tracing::warn!(error = %err, "the log filter is unchanged"),
                }
            }
            if old.otlp_sampling_ratio != new.otlp_sampling_ratio {
                platform::telemetry::set_trace_sampling_ratio(new.otlp_sampling_ratio);
            }
        });
        let mut registry = Registry::new(JobRegistry::for_mode(
            &platform.config,
            platform.redis.as_ref(),
        ));
        registry.maintenance(
            &platform.config,
            platform::events::dedup::PurgeConsumedEvents::new(platform.db.clone()),
        )?;
        registry.maintenance(
            &platform.config,
            PurgeIdempotencyKeys::new(platform.db.clone()),
        )?;
        for feature in FEATURES {
            registry.install(*feature, &platform).await?;
        }
        let config = &platform.config;
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
            platform,
            installed: registry.into_parts()?,
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

    /// The opened backends.
    pub fn platform(&self) -> &Platform {
        &self.platform
    }

    /// What the features provided (their services, by type).
    pub fn services(&self) -> &Arc<Services> {
        &self.installed.services
    }

    /// Serves until `shutdown` resolves, then drains gracefully (see the module docs).
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Self {
            platform,
            installed,
            listener,
            ops_listener,
            _instance_lock,
        } = self;
        let Installed {
            routes,
            fast_paths,
            jobs,
            executors,
            background: tasks,
            durable_jobs,
            services: _,
        } = installed;
        let config = platform.config.clone();
        let role = config.role;
        let (served, ops_served) =
            what_listeners_serve(&platform, routes, fast_paths, ops_listener.is_some())?;
        // Two stages: `stopping` ends HTTP (no new requests, in-flight ones finish); only then
        // `background_stop` ends background work, so the events those last requests published
        // are still consumed and flushed.
        let stopping = CancellationToken::new();
        let background_stop = CancellationToken::new();
        let background = start_background(&platform, tasks, &background_stop);
        let mut cron_jobs = None;
        let mut durable = None;
        if role.runs_work() {
            cron_jobs = Some(jobs.start());
            durable = durable_jobs
                .map(|(store, options)| SqlScheduler::new(store, executors, options).start());
        }

        let addr = listener.local_addr()?;
        tracing::info!(
            mode = if config.is_cluster() { "cluster" } else { "embedded" },
            role = ?role,
            database = %platform::redact_url(&config.database_url()),
            "listening on http://{addr}"
        );
        let options = ServeOptions::from_config(&config);
        // Every client behind a trusted proxy shares its address: not held to the per-client cap.
        let proxies = platform.trusted_proxies.clone();
        let ops_server = ops_listener.map(|ops_listener| {
            if let Ok(ops_addr) = ops_listener.local_addr() {
                tracing::info!("operations endpoints on http://{ops_addr}");
            }
            tokio::spawn(http_server::serve(
                ops_listener,
                ops_served,
                options,
                proxies.clone(),
                stopping.clone(),
            ))
        });
        let server = http_server::serve(listener, served, options, proxies, stopping.clone());
        tokio::pin!(server);

        tokio::select! {
            () = &mut server => anyhow::bail!("the HTTP server stopped by itself"),
            () = shutdown => {
                tracing::info!(grace = ?config.shutdown_timeout, "shutting down: draining in-flight requests");
                platform.draining.cancel();
                stopping.cancel();
                bounded(config.shutdown_timeout, "in-flight requests", "abandoning them", &mut server).await;
            }
        }
        stopping.cancel();
        Draining {
            limit: config.shutdown_timeout,
            ops_server,
            durable,
            cron_jobs,
            platform: &platform,
            background,
            background_stop,
        }
        .drain()
        .await;
        tracing::info!("stopped");
        Ok(())
    }
}

/// What the API listener serves (the operations routes, and in roles that serve the API every
/// feature's routes and fast paths, behind the middleware) and what the operations listener
/// serves when `ops_listen` is set (metrics to anyone who reaches it, no debug routes).
fn what_listeners_serve(
    platform: &Platform,
    routes: axum::Router,
    fast_paths: Vec<platform::fast_path::FastPath>,
    separate_ops: bool,
) -> anyhow::Result<(Served, Served)> {
    let config = &platform.config;
    let shared = Arc::new(platform.clone());
    let ops_routes = ops::router(
        ops::Endpoints {
            metrics: if separate_ops {
                ops::MetricsAccess::Off
            } else {
                ops::MetricsAccess::guarded(config)?
            },
            debug: config.debug_endpoints,
        },
        shared.clone(),
    );
    let served = if config.role.serves_api() {
        let document = crate::openapi::router(crate::openapi::render(&openapi()?)?);
        Served::new(
            with_middleware(ops_routes.merge(routes).merge(document), config)?,
            fast_paths,
            config,
        )?
    } else {
        Served::new(with_middleware(ops_routes, config)?, Vec::new(), config)?
    };
    let ops_served = Served::new(
        with_middleware(
            ops::router(
                ops::Endpoints {
                    metrics: ops::MetricsAccess::Anyone,
                    debug: false,
                },
                shared,
            ),
            config,
        )?,
        Vec::new(),
        config,
    )?;
    Ok((served, ops_served))
}

/// Starts the metrics upkeep, every feature's background task, the outbox relay, the event
/// groups' monitor and the health probe, all until `stop`.
fn start_background(
    platform: &Platform,
    tasks: Vec<(&'static str, platform::feature::BackgroundTask)>,
    stop: &CancellationToken,
) -> TaskTracker {
    let role = platform.config.role;
    let background = TaskTracker::new();
    background.spawn(metrics_upkeep(platform.metrics.clone(), stop.clone()));
    // A process that does not consume the streams still takes what it published to its
    // own in-process queues while Redis refused it (platform::events).
    let context = Background {
        stop: stop.clone(),
        subscription: if role.runs_work() {
            Subscription::Stream
        } else {
            Subscription::FallbackOnly
        },
        runs_work: role.runs_work(),
    };
    for (name, task) in tasks {
        tracing::debug!(task = name, "starting background task");
        background.spawn(task(context.clone()));
    }
    // After the consumers above registered: in-process, the relay hands each row to the
    // groups that exist when it relays it.
    background.spawn(platform.outbox.clone().run(stop.clone()));
    // Every group's lag, failures and parked events: metrics and `/readyz` details.
    background.spawn(
        platform
            .events
            .clone()
            .monitor(platform.status.clone(), stop.clone()),
    );
    // The database, Redis and the data directory's free space as gauges (platform::health).
    background.spawn(ops::watch_health(platform.clone(), stop.clone()));
    background
}

/// What is left to stop once HTTP stopped accepting, stopped in [`Draining::drain`]'s order.
struct Draining<'a> {
    /// How long each stage may take (`shutdown_timeout`).
    limit: Duration,
    ops_server: Option<tokio::task::JoinHandle<()>>,
    durable: Option<scheduler::sql::RunningSqlScheduler>,
    cron_jobs: Option<scheduler::RunningScheduler>,
    platform: &'a Platform,
    background: TaskTracker,
    background_stop: CancellationToken,
}

impl Draining<'_> {
    /// The drain, one stage after another, each bounded by `shutdown_timeout` (a stage that
    /// outlives it is logged with what that costs, and the next one starts):
    /// 1. the operations listener's requests;
    /// 2. jobs — they may still publish events, which the consumers below then flush;
    /// 3. the event publish buffer — while this process's consumers still run, since its
    ///    in-process fallback needs them;
    /// 4. the outbox — what the last writes recorded goes out while the consumers still run
    ///    (in-process, they must handle it before its rows go); anything left waits for the next
    ///    start;
    /// 5. background tasks (consumers, refreshers);
    /// 6. writes whose callers left (timeouts, disconnects), before the pool closes;
    /// 7. the pool.
    async fn drain(self) {
        let Self {
            limit,
            ops_server,
            durable,
            cron_jobs,
            platform,
            background,
            background_stop,
        } = self;
        if let Some(ops_server) = ops_server {
            bounded(limit, "operations requests", "abandoning them", ops_server).await;
        }
        if let Some(durable) = durable {
            durable.stop(limit).await;
        }
        if let Some(cron_jobs) = cron_jobs {
            let interrupted = cron_jobs.stop(limit).await;
            if interrupted > 0 {
                tracing::warn!(
                    interrupted,
                    "job runs outlived shutdown_timeout and were cancelled"
                );
            }
        }
        bounded(
            limit,
            "the event publish buffer",
            "its events are lost",
            platform.events.flush(),
        )
        .await;
        let relayed = bounded(
            limit,
            "the outbox relay",
            "the rest waits for the next start",
            platform.outbox.relay_pending(&CancellationToken::new()),
        )
        .await;
        if let Some(Err(err)) = relayed {
            tracing::warn!(
                error = format!("{err:#}"),
                "cannot relay the outbox before stopping; its events wait for the next start"
            );
        }
        background_stop.cancel();
        background.close();
        bounded(
            limit,
            "background tasks",
            "abandoning them",
            background.wait(),
        )
        .await;
        if !platform::detached::drain(limit).await {
            tracing::warn!("detached writes outlived shutdown_timeout; abandoning them");
        }
        platform.db.close().await;
    }
}

/// `stage`'s outcome, or `None` when it outlived `limit` — logged as "`what` outlived
/// shutdown_timeout; `cost`".
async fn bounded<T>(
    limit: Duration,
    what: &str,
    cost: &str,
    stage: impl Future<Output = T>,
) -> Option<T> {
    match tokio::time::timeout(limit, stage).await {
        Ok(outcome) => Some(outcome),
        Err(_) => {
            tracing::warn!("{what} outlived shutdown_timeout; {cost}");
            None
        }
    }
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
