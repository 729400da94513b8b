//! How a feature plugs itself into the application: one [`Feature`] value per feature, listed
//! once by the application.
//!
//! Start-up runs in two passes over the list. Before anything opens, the application collects
//! what each feature declares — its settings sections ([`Feature::settings`]), its tables
//! ([`Feature::migrations`]) and its metrics ([`Feature::metrics`]) — to load the configuration,
//! migrate the database and install the metrics recorder; the description of its routes
//! ([`Feature::openapi`]) goes into the API's OpenAPI document. Then, with the backends open
//! ([`Platform`]), it calls [`Feature::install`] on each in list order; a feature registers what it
//! runs into the [`Registry`]: routes (and [`crate::fast_path`]s), periodic jobs, durable-job
//! executors, background tasks (event consumers, refreshers), and the services later features build
//! on ([`Registry::provide`], [`Registry::get`]).
//!
//! Wiring between features is declared, not discovered: a feature names the services it offers
//! ([`Feature::provides`]) and those it builds on ([`Feature::needs`]), each a [`Service`] named
//! by its type. [`check_wiring`] checks the install list before anything opens (and the
//! application's tests check it without opening anything): every need is provided by a feature
//! earlier in the list. [`Registry::install`] then holds each feature to its declaration — it may
//! only take the services it declared it needs, and must have provided every one it declared —
//! so a missing or misordered service is a composition error naming both features, never a
//! look-up failing half-way through start-up. The feature that owns sign-in installs how
//! callers are resolved ([`Registry::resolve_callers`]); every route then finds it in its
//! requests' extensions ([`crate::caller`]), and composing routes without one is refused
//! ([`Registry::into_parts`]). The application then serves the merged routes and starts the jobs
//! and tasks; nothing outside the feature's folder names its parts.

use std::{
    any::{Any, TypeId},
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::Arc,
};

use anyhow::Context;
use axum::{http::HeaderMap, response::Response, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use scheduler::{
    sql::{Executor, Executors, SqlJobStore, WorkerOptions},
    Job, JobOptions,
};
use tokio_util::sync::CancellationToken;

use crate::{
    caller::{Callers, GatesWrites, ResolvesCallers},
    client_ip::TrustedProxies,
    config::{Config, SettingsSpec},
    db::{Db, Migration},
    events::{outbox::Outbox, EventStream, Subscription},
    fast_path::FastPath,
    idempotency::Idempotency,
    jobs::JobRegistry,
    redis::Redis,
    status::StatusBoard,
    telemetry::MetricsSpec,
};

/// One feature of the application.
#[async_trait::async_trait]
pub trait Feature: Send + Sync {
    /// Short name, for logs and errors.
    fn name(&self) -> &'static str;

    /// The settings sections it reads ([`Config::settings`]).
    fn settings(&self) -> &'static [SettingsSpec] {
        &[]
    }

    /// Its tables: migrations whose versions no other feature uses.
    fn migrations(&self) -> &'static [Migration] {
        &[]
    }

    /// Checks made before the database is opened, by the server (`command` `None`) and by every
    /// subcommand (`Some` of its name): a refusal stops the process before anything is read or
    /// written (the backup feature refuses a data dir that an interrupted restore left
    /// half-done).
    fn before_open(&self, _config: &Config, _command: Option<&str>) -> anyhow::Result<()> {
        Ok(())
    }

    /// Its histogram buckets and metric descriptions.
    fn metrics(&self) -> &'static [MetricsSpec] {
        &[]
    }

    /// Registers the durable-job executors it offers into `executors` for commands that check
    /// jobs without serving (`webook jobs add`): names and `cfg` checks must match what
    /// [`Feature::install`] registers.
    fn offline_executors(
        &self,
        _config: &Config,
        _db: &Db,
        _executors: &mut Executors,
    ) -> anyhow::Result<()> {
        Ok(())
    }

    /// Its subcommands of the application's command line, if any.
    fn cli(&self) -> Option<CliCommands> {
        None
    }

    /// The OpenAPI description of the routes it serves: a `utoipa::OpenApi` derive listing its
    /// handlers ([`crate::openapi`]); the application merges every feature's into one
    /// document. Empty for a feature without routes.
    fn openapi(&self) -> utoipa::openapi::OpenApi {
        utoipa::openapi::OpenApi::default()
    }

    /// The services it offers the features installed after it ([`Registry::provide`]); every one
    /// must be provided by [`Feature::install`].
    fn provides(&self) -> &'static [Service] {
        &[]
    }

    /// The services of earlier features it builds on: the only ones [`Registry::get`] gives it.
    fn needs(&self) -> &'static [Service] {
        &[]
    }

    /// Builds its services on `platform` and registers what it runs into `registry`.
    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()>;
}

/// What a feature's subcommand runs with: the loaded configuration (logging is set up), the
/// whole schema (every feature's migrations) and every feature's durable-job executors, for
/// commands that work on the database without serving.
pub struct CliContext {
    /// The layered configuration, with the command line's flags on top.
    pub config: Config,
    /// Every migration of the application.
    pub schema: &'static [Migration],
    /// Every feature's durable-job executors on a database (see [`Feature::offline_executors`]).
    pub executors: fn(&Config, &Db) -> anyhow::Result<Executors>,
}

/// What a feature's subcommand runs: the whole command line's matches and the context in, the
/// outcome out.
pub type CliRun =
    fn(clap::ArgMatches, CliContext) -> Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// A feature's subcommands: clap's derive output for a `Subcommand` enum, and the function that
/// runs the chosen one.
#[derive(Clone, Copy)]
pub struct CliCommands {
    /// Adds the subcommands to the application's command (`Subcommand::augment_subcommands`).
    pub augment: fn(clap::Command) -> clap::Command,
    /// Whether a subcommand name is one of them (`Subcommand::has_subcommand`).
    pub handles: fn(&str) -> bool,
    /// Runs the chosen one, given the whole command line's matches.
    pub run: CliRun,
}

impl CliCommands {
    /// The subcommands of the `Subcommand` enum `C`, run by `run`.
    pub fn of<C: clap::Subcommand>(run: CliRun) -> Self {
        Self {
            augment: C::augment_subcommands,
            handles: C::has_subcommand,
            run,
        }
    }
}

/// The opened backends every feature builds on; cheap to clone.
#[derive(Clone)]
pub struct Platform {
    /// The configuration at start-up (the platform's keys and every feature's section). Live
    /// settings are read from [`Platform::live`] instead, at the time of use.
    pub config: Arc<Config>,
    /// The configuration in effect: `config` with the live settings on top
    /// ([`crate::live`]).
    pub live: crate::live::LiveConfig,
    /// The SQL store.
    pub db: Db,
    /// Redis, in cluster mode only.
    pub redis: Option<Redis>,
    /// The event stream (in-process or Redis Streams).
    pub events: EventStream,
    /// Events recorded with the writes they report, relayed to `events`.
    pub outbox: Outbox,
    /// The Prometheus registry.
    pub metrics: PrometheusHandle,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: TrustedProxies,
    /// What features report on `/readyz`.
    pub status: StatusBoard,
    /// Every migration the database was brought to: the platform's and every feature's.
    pub schema: &'static [Migration],
    /// `Idempotency-Key` for creating routes ([`crate::idempotency`]).
    pub idempotency: Arc<Idempotency>,
    /// Cancelled when the process starts to drain (the shutdown signal), before in-flight
    /// requests are waited for: long-lived responses (event streams) end on it, so they never
    /// hold the drain for `shutdown_timeout`.
    pub draining: CancellationToken,
}

impl Platform {
    /// Redis with the key prefix of this deployment, in cluster mode.
    pub fn redis_with_prefix(&self) -> Option<(&Redis, &str)> {
        self.redis
            .as_ref()
            .map(|redis| (redis, self.config.redis_prefix.as_str()))
    }
}

/// What a background task is started with.
#[derive(Clone, Debug)]
pub struct Background {
    /// Cancelled when the process stops (after HTTP and jobs have drained).
    pub stop: CancellationToken,
    /// What event consumers take: the stream in roles `all` and `worker`, only the events this
    /// process could not publish in role `api`.
    pub subscription: Subscription,
    /// Whether this process runs jobs and consumers (roles `all` and `worker`).
    pub runs_work: bool,
}

/// A task started after every feature is installed and run until [`Background::stop`].
pub type BackgroundTask =
    Box<dyn FnOnce(Background) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// A service one feature offers others, named by its type: what [`Feature::provides`] and
/// [`Feature::needs`] list.
#[derive(Clone, Copy)]
pub struct Service {
    id: fn() -> TypeId,
    type_name: fn() -> &'static str,
}

impl Service {
    /// The service of type `T`.
    pub const fn of<T: Clone + Send + Sync + 'static>() -> Self {
        Self {
            id: TypeId::of::<T>,
            type_name: std::any::type_name::<T>,
        }
    }

    /// Its type's name without the module path, for errors.
    pub fn name(&self) -> &'static str {
        let full = (self.type_name)();
        full.rsplit("::").next().unwrap_or(full)
    }

    fn is<T: 'static>(&self) -> bool {
        (self.id)() == TypeId::of::<T>()
    }
}

impl PartialEq for Service {
    fn eq(&self, other: &Self) -> bool {
        (self.id)() == (other.id)()
    }
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Checks the install list's wiring: every service a feature needs is provided by a feature
/// earlier in the list. The error names the feature, the service and, when a later feature
/// provides it, the order to fix.
pub fn check_wiring(features: &[&dyn Feature]) -> anyhow::Result<()> {
    for (position, feature) in features.iter().enumerate() {
        for need in feature.needs() {
            let earlier = features[..position]
                .iter()
                .any(|earlier| earlier.provides().contains(need));
            if earlier {
                continue;
            }
            let later = features[position..]
                .iter()
                .find(|other| other.provides().contains(need));
            match later {
                Some(provider) => anyhow::bail!(
                    "{} needs {}, which {} provides: install {} before {}",
                    feature.name(),
                    need.name(),
                    provider.name(),
                    provider.name(),
                    feature.name()
                ),
                None => anyhow::bail!(
                    "{} needs {}, which no feature in the list provides",
                    feature.name(),
                    need.name()
                ),
            }
        }
    }
    Ok(())
}

/// The feature being installed and the services it declared it needs.
struct Installing {
    name: &'static str,
    needs: &'static [Service],
}

/// What the installed features run, collected at start-up.
pub struct Registry {
    routes: Router,
    fast_paths: Vec<FastPath>,
    jobs: JobRegistry,
    executors: Executors,
    background: Vec<(&'static str, BackgroundTask)>,
    durable_jobs: Option<(SqlJobStore, WorkerOptions)>,
    services: Services,
    callers: Option<Callers>,
    write_gates: Vec<Arc<dyn GatesWrites>>,
    installing: Option<Installing>,
}

/// The services features provide to each other (and to tests), by type.
#[derive(Default)]
pub struct Services(HashMap<TypeId, Box<dyn Any + Send + Sync>>);

impl Services {
    /// Offers `service` under its type (replacing an earlier one of the same type).
    pub fn provide<T: Clone + Send + Sync + 'static>(&mut self, service: T) {
        self.0.insert(TypeId::of::<T>(), Box::new(service));
    }

    /// Whether `service` has been provided.
    fn has(&self, service: &Service) -> bool {
        self.0.contains_key(&(service.id)())
    }

    /// The provided service of type `T`; an error names the missing type.
    pub fn get<T: Clone + Send + Sync + 'static>(&self) -> anyhow::Result<T> {
        self.0
            .get(&TypeId::of::<T>())
            .and_then(|service| service.downcast_ref::<T>())
            .cloned()
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{} is not provided: install the feature that provides it earlier in the list",
                    std::any::type_name::<T>()
                )
            })
    }
}

impl Registry {
    /// An empty registry whose periodic jobs use `jobs`' lock backend.
    pub fn new(jobs: JobRegistry) -> Self {
        Self {
            routes: Router::new(),
            fast_paths: Vec::new(),
            jobs,
            executors: Executors::new(),
            background: Vec::new(),
            durable_jobs: None,
            services: Services::default(),
            callers: None,
            write_gates: Vec::new(),
            installing: None,
        }
    }

    /// Installs `feature` on `platform`, holding it to its declared wiring: while it installs,
    /// [`Registry::get`] gives only the services it [`Feature::needs`], and afterwards every
    /// service it [`Feature::provides`] must have been provided.
    pub async fn install(
        &mut self,
        feature: &dyn Feature,
        platform: &Platform,
    ) -> anyhow::Result<()> {
        self.begin_install(feature);
        let installed = feature.install(platform, self).await;
        self.installing = None;
        installed.with_context(|| format!("installing {}", feature.name()))?;
        self.check_provided(feature)
    }

    /// Holds [`Registry::get`] to `feature`'s declared needs until the install ends.
    fn begin_install(&mut self, feature: &dyn Feature) {
        self.installing = Some(Installing {
            name: feature.name(),
            needs: feature.needs(),
        });
    }

    /// An error when `feature` did not provide a service it declared.
    fn check_provided(&self, feature: &dyn Feature) -> anyhow::Result<()> {
        match feature
            .provides()
            .iter()
            .find(|service| !self.services.has(service))
        {
            Some(missing) => anyhow::bail!(
                "installing {}: it declares it provides {} but did not provide it",
                feature.name(),
                missing.name()
            ),
            None => Ok(()),
        }
    }

    /// How every route's callers are resolved ([`crate::caller`]); installed once, by the
    /// feature that owns sign-in.
    pub fn resolve_callers(&mut self, resolver: Arc<dyn ResolvesCallers>) {
        self.callers = Some(Callers::new(resolver));
    }

    /// Checks `gate` on every write ([`crate::caller::Writer`]) after the write limit and the
    /// gates installed before it.
    pub fn gate_writes(&mut self, gate: Arc<dyn GatesWrites>) {
        self.write_gates.push(gate);
    }

    /// Serves `routes` (with their state already given) beside the other features' routes.
    pub fn routes(&mut self, routes: Router) {
        self.routes = std::mem::take(&mut self.routes).merge(routes);
    }

    /// Answers `GET path` (no query string) from memory ahead of the middleware whenever
    /// `answer` gives a response ([`crate::fast_path`]); `None`, and every other request to
    /// `path`, goes to the routes, which must serve `path` too.
    pub fn fast_path(
        &mut self,
        path: &'static str,
        answer: impl Fn(&HeaderMap) -> Option<Response> + Send + Sync + 'static,
    ) {
        self.fast_paths.push(FastPath {
            path,
            answer: Arc::new(answer),
        });
    }

    /// Runs `job` on `options`' schedule, on instances that run work.
    pub fn periodic(&mut self, job: impl Job, options: JobOptions) -> anyhow::Result<()> {
        self.jobs.add(job, options)
    }

    /// Runs the maintenance `job` on `purge_schedule`, one instance per fire time.
    pub fn maintenance(&mut self, config: &Config, job: impl Job) -> anyhow::Result<()> {
        self.jobs.add_maintenance(config, job)
    }

    /// Lets durable jobs name `executor`.
    pub fn executor(&mut self, executor: impl Executor) {
        self.executors.register(executor);
    }

    /// Runs the durable jobs of `store` with every registered executor, on instances that run
    /// work (one feature owns the `jobs` table).
    pub fn durable_jobs(&mut self, store: SqlJobStore, options: WorkerOptions) {
        self.durable_jobs = Some((store, options));
    }

    /// The executors registered so far (a feature installed after the others sees them all).
    pub fn executors(&self) -> &Executors {
        &self.executors
    }

    /// Starts `task` once every feature is installed (consumers before the outbox relay).
    pub fn background<F, Fut>(&mut self, name: &'static str, task: F)
    where
        F: FnOnce(Background) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.background
            .push((name, Box::new(move |context| Box::pin(task(context)))));
    }

    /// Offers `service` to the features installed later.
    pub fn provide<T: Clone + Send + Sync + 'static>(&mut self, service: T) {
        self.services.provide(service);
    }

    /// A service an earlier feature provided; while a feature installs, only one it declared in
    /// [`Feature::needs`]. An error names the feature and the type.
    pub fn get<T: Clone + Send + Sync + 'static>(&self) -> anyhow::Result<T> {
        if let Some(installing) = &self.installing {
            if !installing.needs.iter().any(Service::is::<T>) {
                anyhow::bail!(
                    "{} takes {} without declaring it in Feature::needs",
                    installing.name,
                    std::any::type_name::<T>()
                );
            }
        }
        self.services.get()
    }

    /// Everything collected, the routes given the caller resolver; an error when no feature
    /// installed one (every authenticated request would otherwise fail).
    pub fn into_parts(self) -> anyhow::Result<Installed> {
        let callers = self.callers.ok_or_else(|| {
            anyhow::anyhow!(
                "no feature resolves callers (Registry::resolve_callers): install the sign-in \
                 feature"
            )
        })?;
        Ok(Installed {
            routes: self
                .routes
                .layer(axum::Extension(callers.with_gates(self.write_gates))),
            fast_paths: self.fast_paths,
            jobs: self.jobs,
            executors: self.executors,
            background: self.background,
            durable_jobs: self.durable_jobs,
            services: Arc::new(self.services),
        })
    }
}

/// What [`Registry::into_parts`] hands back to the application.
pub struct Installed {
    /// Every feature's routes, merged.
    pub routes: Router,
    /// The answers served ahead of the routes.
    pub fast_paths: Vec<FastPath>,
    /// The periodic jobs.
    pub jobs: JobRegistry,
    /// The durable-job executors.
    pub executors: Executors,
    /// The background tasks, in registration order, with their names.
    pub background: Vec<(&'static str, BackgroundTask)>,
    /// The durable-job store and worker tuning, when a feature runs durable jobs.
    pub durable_jobs: Option<(SqlJobStore, WorkerOptions)>,
    /// What the features provided.
    pub services: Arc<Services>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Clock;
    #[derive(Clone)]
    struct Mail;

    /// A feature with declared wiring and no install.
    struct Declared {
        name: &'static str,
        provides: &'static [Service],
        needs: &'static [Service],
    }

    #[async_trait::async_trait]
    impl Feature for Declared {
        fn name(&self) -> &'static str {
            self.name
        }
        fn provides(&self) -> &'static [Service] {
            self.provides
        }
        fn needs(&self) -> &'static [Service] {
            self.needs
        }
        async fn install(&self, _: &Platform, _: &mut Registry) -> anyhow::Result<()> {
            Ok(())
        }
    }

    const CLOCKS: Declared = Declared {
        name: "clocks",
        provides: const { &[Service::of::<Clock>()] },
        needs: &[],
    };
    const MAILER: Declared = Declared {
        name: "mailer",
        provides: const { &[Service::of::<Mail>()] },
        needs: const { &[Service::of::<Clock>()] },
    };

    fn registry() -> Registry {
        Registry::new(JobRegistry::for_mode(&Config::default(), None))
    }

    #[test]
    fn a_need_provided_earlier_is_wired() {
        assert!(check_wiring(&[&CLOCKS, &MAILER]).is_ok());
        assert!(check_wiring(&[]).is_ok());
    }

    #[test]
    fn a_need_provided_later_names_the_order_to_fix() {
        let error = check_wiring(&[&MAILER, &CLOCKS]).unwrap_err().to_string();
        assert_eq!(
            error,
            "mailer needs Clock, which clocks provides: install clocks before mailer"
        );
    }

    #[test]
    fn a_need_nobody_provides_is_refused() {
        let error = check_wiring(&[&MAILER]).unwrap_err().to_string();
        assert_eq!(
            error,
            "mailer needs Clock, which no feature in the list provides"
        );
    }

    #[test]
    fn an_installing_feature_gets_only_what_it_declared() {
        let mut registry = registry();
        registry.provide(Clock);
        registry.provide(Mail);
        registry.begin_install(&MAILER);
        assert!(registry.get::<Clock>().is_ok());
        let error = registry.get::<Mail>().err().map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.starts_with("mailer takes ")
                    && e.ends_with("Mail without declaring it in Feature::needs")),
            "{error:?}"
        );
        registry.installing = None;
        assert!(
            registry.get::<Mail>().is_ok(),
            "outside an install anything provided"
        );
    }

    #[test]
    fn a_declared_service_left_unprovided_fails_the_install() {
        let mut registry = registry();
        let error = registry.check_provided(&CLOCKS).unwrap_err().to_string();
        assert_eq!(
            error,
            "installing clocks: it declares it provides Clock but did not provide it"
        );
        registry.provide(Clock);
        assert!(registry.check_provided(&CLOCKS).is_ok());
    }
}
