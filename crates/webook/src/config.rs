//! Layered configuration: built-in defaults → `webook.toml` → `WEBOOK_*` environment → flags.
//!
//! [`Config::load`] merges the layers with figment (later layers win, key by key), extracts one
//! [`Config`] and validates it, so every later stage can trust it. Keys are the same in every
//! layer: the TOML key `data_dir` is the env var `WEBOOK_DATA_DIR` and the flag `--data-dir`.
//! Errors name the setting and where its value came from, in one line. The flags layer is
//! [`ConfigArgs`], defined here and flattened into the command line by [`crate::cli`] (the
//! configuration does not depend on the command line).
//!
//! Mode follows from the settings: `redis_url` set means cluster mode (shared Redis, secrets
//! must be configured); absent means embedded mode (in-process cache/locks/queue, JWT secrets
//! generated once into the data dir by [`JwtSecrets::resolve`]).

use std::{
    fmt,
    io::Write,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context};
use figment::{
    providers::{Env, Format, Serialized, Toml},
    Figment,
};
use serde::{Deserialize, Deserializer, Serialize};

use crate::infra::redact_url;

/// Configuration flags, the highest-precedence layer. Every flag also has a `WEBOOK_*`
/// environment variable and a `webook.toml` key of the same name (see `docs/CONFIG.md`).
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct ConfigArgs {
    /// Config file (TOML). Default: `./webook.toml` when it exists. Env: WEBOOK_CONFIG.
    #[arg(long, global = true, env = "WEBOOK_CONFIG", value_name = "PATH")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to listen on, e.g. 0.0.0.0:8080. Env: WEBOOK_LISTEN. Default: 127.0.0.1:8080.
    #[arg(long, global = true, value_name = "ADDR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// Directory for the SQLite database and generated secrets. Env: WEBOOK_DATA_DIR.
    /// Default: ./data.
    #[arg(long, global = true, value_name = "DIR")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_dir: Option<PathBuf>,
    /// sqlite://PATH or postgres://USER@HOST/DB. Env: WEBOOK_DATABASE_URL.
    /// Default: SQLite file `webook.db` in the data dir.
    #[arg(long, global = true, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// redis://HOST:PORT/DB; setting it switches to cluster mode. Env: WEBOOK_REDIS_URL.
    #[arg(long, global = true, value_name = "URL")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
}

/// The config file read when neither `--config` nor `WEBOOK_CONFIG` names one (optional).
pub const DEFAULT_CONFIG_FILE: &str = "webook.toml";
/// Prefix of every environment variable the config reads.
pub const ENV_PREFIX: &str = "WEBOOK_";
/// File in the data dir holding the generated JWT secrets (embedded mode), mode 0600.
pub const SECRETS_FILE: &str = "jwt-secrets.toml";
/// Shortest JWT secret accepted, in bytes (HS256 wants at least its 256-bit output size).
pub const MIN_SECRET_LEN: usize = 32;
/// Smallest accepted `cache_memory_bytes`.
pub const MIN_CACHE_MEMORY_BYTES: u64 = 1024 * 1024;

/// The effective configuration of one webook process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// HTTP listen address.
    pub listen: SocketAddr,
    /// Directory for the SQLite database and generated secrets.
    pub data_dir: PathBuf,
    /// `sqlite://PATH` or `postgres://…`; `None` means `sqlite://<data_dir>/webook.db`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url: Option<String>,
    /// Redis URL; set means cluster mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    /// Prefix of every Redis key webook writes, so deployments can share one Redis.
    pub redis_prefix: String,
    /// HS256 secret for access tokens (required in cluster mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt_access_secret: Option<Secret>,
    /// HS256 secret for refresh tokens (required in cluster mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt_refresh_secret: Option<Secret>,
    /// Origins allowed by CORS (a list, or comma-separated in the environment).
    #[serde(deserialize_with = "list_or_comma_separated")]
    pub cors_origins: Vec<String>,
    /// User ids of administrators (a list, or comma-separated in the environment). Admin rights
    /// are also granted with `webook admin grant`; never by email, which anyone can sign up with.
    #[serde(deserialize_with = "user_ids")]
    pub admins: Vec<i64>,
    /// Log filter in `tracing` EnvFilter syntax, e.g. `info` or `webook=debug,sqlx=warn`.
    pub log: String,
    /// Log line format.
    pub log_format: LogFormat,
    /// Largest request body accepted, in bytes.
    pub body_limit_bytes: usize,
    /// A request still running after this long is answered 503 and dropped.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// A client must send a request's whole header within this long of starting it (or of
    /// connecting), or the connection is closed: slow-header clients cannot hold sockets.
    #[serde(with = "humantime_serde")]
    pub http_header_timeout: Duration,
    /// A connection with no request in progress and no bytes moving for this long is closed.
    #[serde(with = "humantime_serde")]
    pub http_idle_timeout: Duration,
    /// Most client connections open at once; beyond it new connections wait in the listen
    /// backlog until one closes.
    pub http_max_connections: usize,
    /// Serve `/healthz`, `/readyz` and `/metrics` on this address instead of `listen` (which
    /// then no longer serves `/metrics`). Unset: everything on `listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_listen: Option<SocketAddr>,
    /// On SIGINT/SIGTERM, how long in-flight work may take to drain before the process exits.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// Size of the SQL connection pool.
    pub database_max_connections: u32,
    /// How long a query waits for a pooled connection before it fails (answered 503). While the
    /// database is unreachable, queries fail at once after the first such failure.
    #[serde(with = "humantime_serde")]
    pub database_acquire_timeout: Duration,
    /// Lifetime of access tokens.
    #[serde(with = "humantime_serde")]
    pub access_token_ttl: Duration,
    /// Lifetime of refresh tokens (and of a session that is never refreshed).
    #[serde(with = "humantime_serde")]
    pub refresh_token_ttl: Duration,
    /// Sign-up and login attempts allowed per client IP within `auth_rate_window`.
    pub auth_rate_limit: u32,
    /// The window of `auth_rate_limit`.
    #[serde(with = "humantime_serde")]
    pub auth_rate_window: Duration,
    /// Writes (publish, save, withdraw, like, collect, profile edits) allowed per user within
    /// `write_rate_window`; beyond it, 429001. 0 turns the limit off (load tests).
    pub write_rate_limit: u32,
    /// The window of `write_rate_limit`.
    #[serde(with = "humantime_serde")]
    pub write_rate_window: Duration,
    /// Proxies (IPs or CIDRs) whose `X-Forwarded-For` is believed when finding the client IP.
    #[serde(deserialize_with = "list_or_comma_separated")]
    pub trusted_proxies: Vec<String>,
    /// Mounts `/debug/*` routes (slow and panicking handlers) used by the process tests.
    /// Never enable in production.
    pub debug_endpoints: bool,
    /// When maintenance jobs purge expired sessions, old applied-event ids and old job runs: a cron
    /// expression (seconds first, e.g. `0 */10 * * * *`) or `@every 10m`, in UTC.
    pub purge_schedule: String,
    /// Memory for this process's in-process caches (reader copies, authors' first pages,
    /// counters, liked/collected flags), in bytes; each cache gets a fixed share.
    pub cache_memory_bytes: u64,
    /// What this process does: `all` (HTTP API, jobs and event consumers), `api` (HTTP API
    /// only; needs cluster mode so another process consumes its events) or `worker` (jobs and
    /// consumers; HTTP only for /healthz, /readyz and /metrics).
    pub role: Role,
    /// Most durable-job runs at once on this instance.
    pub job_permits: usize,
    /// How often a running durable job renews its claim.
    #[serde(with = "humantime_serde")]
    pub job_heartbeat: Duration,
    /// A running durable job whose last heartbeat is older than this is taken over.
    #[serde(with = "humantime_serde")]
    pub job_lease: Duration,
    /// Longest pause between polls of the `jobs` table when nothing is due.
    #[serde(with = "humantime_serde")]
    pub job_poll_max: Duration,
    /// Finished durable-job runs (`job_runs` rows) older than this are purged by the
    /// maintenance job `purge_job_runs`; `0s` keeps them forever.
    #[serde(with = "humantime_serde")]
    pub job_runs_retention: Duration,
    /// Networks (CIDRs or IPs) that `http` jobs may call although they are loopback, private,
    /// link-local or otherwise internal; every other internal address is refused.
    #[serde(deserialize_with = "list_or_comma_separated")]
    pub job_http_allowed_networks: Vec<String>,
    /// How many articles the hot list holds (and the most `GET /ranking/top` returns).
    pub ranking_size: usize,
    /// Only articles first published this recently are ranked.
    #[serde(with = "humantime_serde")]
    pub ranking_window: Duration,
    /// Score: `hacker_news` (alias `hn`), `reddit` or `weighted`.
    pub ranking_formula: String,
    /// Time decay exponent of `hacker_news` and `weighted`.
    pub ranking_gravity: f64,
    /// Weight of a like in `weighted`.
    pub ranking_weight_likes: f64,
    /// Weight of a collect in `weighted`.
    pub ranking_weight_collects: f64,
    /// Weight of a read in `weighted`.
    pub ranking_weight_reads: f64,
    /// When the list is computed: cron with seconds or `@every`, UTC. In `sql` mode this is the
    /// schedule the `ranking` job is created with (operators may change the job afterwards).
    pub ranking_schedule: String,
    /// Which scheduler computes the list: `sql` (the durable `ranking` job) or `cron` (an
    /// in-process job under a long lock).
    pub ranking_mode: RankingMode,
    /// How often every instance reloads the shared list.
    #[serde(with = "humantime_serde")]
    pub ranking_refresh: Duration,
}

/// Which scheduler computes the hot list (see [`Config::ranking_mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RankingMode {
    /// The durable `ranking` job of the SQL scheduler.
    Sql,
    /// An in-process cron job under a long lock.
    Cron,
}

/// What a process does (see [`Config::role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// HTTP API, jobs and consumers.
    All,
    /// HTTP API only.
    Api,
    /// Jobs and consumers only.
    Worker,
}

impl Role {
    /// Whether this process serves the API routes.
    pub fn serves_api(self) -> bool {
        matches!(self, Self::All | Self::Api)
    }

    /// Whether this process runs jobs and event consumers.
    pub fn runs_work(self) -> bool {
        matches!(self, Self::All | Self::Worker)
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("./data"),
            database_url: None,
            redis_url: None,
            redis_prefix: "webook".to_owned(),
            jwt_access_secret: None,
            jwt_refresh_secret: None,
            cors_origins: vec!["http://localhost:3000".to_owned()],
            admins: Vec::new(),
            log: "info".to_owned(),
            log_format: LogFormat::Text,
            body_limit_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(30),
            http_header_timeout: Duration::from_secs(10),
            http_idle_timeout: Duration::from_secs(60),
            http_max_connections: 10_000,
            ops_listen: None,
            shutdown_timeout: Duration::from_secs(30),
            database_max_connections: 16,
            database_acquire_timeout: crate::infra::db::DEFAULT_ACQUIRE_TIMEOUT,
            access_token_ttl: Duration::from_secs(30 * 60),
            refresh_token_ttl: Duration::from_secs(7 * 24 * 3600),
            auth_rate_limit: 10,
            auth_rate_window: Duration::from_secs(60),
            write_rate_limit: 120,
            write_rate_window: Duration::from_secs(60),
            trusted_proxies: Vec::new(),
            debug_endpoints: false,
            purge_schedule: "@every 10m".to_owned(),
            cache_memory_bytes: 32 * 1024 * 1024,
            role: Role::All,
            job_permits: 16,
            job_heartbeat: Duration::from_secs(2),
            job_lease: Duration::from_secs(10),
            job_poll_max: Duration::from_secs(1),
            job_runs_retention: Duration::from_secs(30 * 24 * 3600),
            job_http_allowed_networks: Vec::new(),
            ranking_size: 100,
            ranking_window: Duration::from_secs(7 * 24 * 3600),
            ranking_formula: "hacker_news".to_owned(),
            ranking_gravity: 1.5,
            ranking_weight_likes: 1.0,
            ranking_weight_collects: 2.0,
            ranking_weight_reads: 0.05,
            ranking_schedule: "@every 1m".to_owned(),
            ranking_mode: RankingMode::Sql,
            ranking_refresh: Duration::from_secs(5),
        }
    }
}

/// Every key of [`Config`]: the env vars read are exactly `WEBOOK_<KEY>` for these, so unrelated
/// `WEBOOK_*` variables (such as the test harness's) are not mistaken for settings.
pub const KEYS: &[&str] = &[
    "listen",
    "data_dir",
    "database_url",
    "redis_url",
    "redis_prefix",
    "jwt_access_secret",
    "jwt_refresh_secret",
    "cors_origins",
    "admins",
    "log",
    "log_format",
    "body_limit_bytes",
    "request_timeout",
    "http_header_timeout",
    "http_idle_timeout",
    "http_max_connections",
    "ops_listen",
    "shutdown_timeout",
    "database_max_connections",
    "database_acquire_timeout",
    "access_token_ttl",
    "refresh_token_ttl",
    "auth_rate_limit",
    "auth_rate_window",
    "write_rate_limit",
    "write_rate_window",
    "trusted_proxies",
    "debug_endpoints",
    "purge_schedule",
    "cache_memory_bytes",
    "role",
    "job_permits",
    "job_heartbeat",
    "job_lease",
    "job_poll_max",
    "job_runs_retention",
    "job_http_allowed_networks",
    "ranking_size",
    "ranking_window",
    "ranking_formula",
    "ranking_gravity",
    "ranking_weight_likes",
    "ranking_weight_collects",
    "ranking_weight_reads",
    "ranking_schedule",
    "ranking_mode",
    "ranking_refresh",
];

/// Format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Which SQL engine a database URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseKind {
    /// A SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

impl Config {
    /// Loads and validates the layered configuration; `flags` is the top layer.
    pub fn load(flags: &ConfigArgs) -> anyhow::Result<Self> {
        let file = match &flags.config {
            Some(path) if !path.is_file() => {
                bail!(
                    "config file {} (--config / WEBOOK_CONFIG) does not exist",
                    path.display()
                )
            }
            Some(path) => Some(path.clone()),
            None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|path| path.is_file()),
        };
        let mut figment = Figment::new();
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        let config: Config = figment
            .merge(Env::prefixed(ENV_PREFIX).only(KEYS))
            .merge(Serialized::defaults(flags))
            .extract()
            .map_err(describe_figment_error)?;
        config.validate()?;
        Ok(config)
    }

    /// True when Redis is configured: shared cache, locks, streams and session revocation.
    pub fn is_cluster(&self) -> bool {
        self.redis_url.is_some()
    }

    /// The database URL in effect: the configured one, or the SQLite file in the data dir.
    pub fn database_url(&self) -> String {
        match &self.database_url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}", self.data_dir.join("webook.db").display()),
        }
    }

    /// The engine behind [`Config::database_url`].
    pub fn database_kind(&self) -> anyhow::Result<DatabaseKind> {
        database_kind(&self.database_url())
    }

    /// `trusted_proxies` parsed; a bare IP is a single-address network.
    pub fn trusted_proxy_networks(&self) -> anyhow::Result<Vec<ipnet::IpNet>> {
        networks("trusted_proxies", &self.trusted_proxies)
    }

    /// `job_http_allowed_networks` parsed; a bare IP is a single-address network.
    pub fn job_http_allowed_networks(&self) -> anyhow::Result<Vec<ipnet::IpNet>> {
        networks("job_http_allowed_networks", &self.job_http_allowed_networks)
    }

    /// The hot list's score function from `ranking_formula`, `ranking_gravity` and the weights.
    pub fn ranking_formula(&self) -> anyhow::Result<crate::ranking::model::ScoreFormula> {
        crate::ranking::model::ScoreFormula::from_config(
            &self.ranking_formula,
            self.ranking_gravity,
            (
                self.ranking_weight_likes,
                self.ranking_weight_collects,
                self.ranking_weight_reads,
            ),
        )
        .map_err(|err| anyhow::anyhow!("invalid hot list score (ranking_formula, ranking_gravity, ranking_weight_*): {err}"))
    }

    /// `ranking_schedule` parsed.
    pub fn ranking_schedule(&self) -> anyhow::Result<scheduler::Schedule> {
        scheduler::Schedule::parse(&self.ranking_schedule).map_err(|err| {
            anyhow::anyhow!("invalid ranking_schedule (WEBOOK_RANKING_SCHEDULE): {err}")
        })
    }

    /// `purge_schedule` parsed.
    pub fn purge_schedule(&self) -> anyhow::Result<scheduler::Schedule> {
        scheduler::Schedule::parse(&self.purge_schedule)
            .map_err(|err| anyhow::anyhow!("invalid purge_schedule (WEBOOK_PURGE_SCHEDULE): {err}"))
    }

    /// Checks what the type system cannot: URL schemes, the log filter, cluster secrets.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.database_kind()?;
        if let Some(url) = &self.redis_url {
            let parsed = url::Url::parse(url).map_err(|err| {
                anyhow::anyhow!(
                    "invalid redis_url (WEBOOK_REDIS_URL / --redis-url) {:?}: {err}",
                    redact_url(url)
                )
            })?;
            if !matches!(parsed.scheme(), "redis" | "rediss" | "redis+unix" | "unix") {
                bail!(
                    "invalid redis_url (WEBOOK_REDIS_URL / --redis-url): unsupported scheme {:?}; \
                     expected redis://, rediss:// or redis+unix://",
                    parsed.scheme()
                );
            }
        }
        tracing_subscriber::EnvFilter::try_new(&self.log)
            .map_err(|err| anyhow::anyhow!("invalid log (WEBOOK_LOG) {:?}: {err}", self.log))?;
        if self.cache_memory_bytes < MIN_CACHE_MEMORY_BYTES {
            bail!(
                "invalid cache_memory_bytes (WEBOOK_CACHE_MEMORY_BYTES): at least {MIN_CACHE_MEMORY_BYTES} (1 MiB)"
            );
        }
        for (name, value) in [
            ("request_timeout", self.request_timeout),
            ("http_header_timeout", self.http_header_timeout),
            ("http_idle_timeout", self.http_idle_timeout),
            ("database_acquire_timeout", self.database_acquire_timeout),
            ("shutdown_timeout", self.shutdown_timeout),
        ] {
            if value.is_zero() {
                bail!(
                    "invalid {name} (WEBOOK_{}): must be above 0",
                    name.to_uppercase()
                );
            }
        }
        if self.database_acquire_timeout >= self.request_timeout {
            bail!(
                "invalid database_acquire_timeout (WEBOOK_DATABASE_ACQUIRE_TIMEOUT): must be \
                 shorter than request_timeout, so a request waiting for the database still gets \
                 its own answer"
            );
        }
        if self.http_max_connections == 0 {
            bail!("invalid http_max_connections (WEBOOK_HTTP_MAX_CONNECTIONS): must be above 0");
        }
        if self.ops_listen == Some(self.listen) {
            bail!(
                "invalid ops_listen (WEBOOK_OPS_LISTEN): must differ from listen, or be left unset \
                 to serve the operations endpoints on listen"
            );
        }
        crate::infra::cors::CorsPolicy::new(&self.cors_origins)?;
        if self.write_rate_window.is_zero() {
            bail!("invalid write_rate_window (WEBOOK_WRITE_RATE_WINDOW): must be above 0");
        }
        self.job_http_allowed_networks()?;
        if self.body_limit_bytes == 0 {
            bail!("invalid body_limit_bytes (WEBOOK_BODY_LIMIT_BYTES): must be above 0");
        }
        if self.database_max_connections == 0 {
            bail!(
                "invalid database_max_connections (WEBOOK_DATABASE_MAX_CONNECTIONS): must be above 0"
            );
        }
        if self.auth_rate_limit == 0 || self.auth_rate_window.is_zero() {
            bail!(
                "invalid auth_rate_limit / auth_rate_window (WEBOOK_AUTH_RATE_LIMIT, \
                 WEBOOK_AUTH_RATE_WINDOW): both must be above 0"
            );
        }
        if self.access_token_ttl < Duration::from_secs(1)
            || self.refresh_token_ttl <= self.access_token_ttl
        {
            bail!(
                "invalid access_token_ttl / refresh_token_ttl: access tokens must live at least \
                 1s and refresh tokens longer than access tokens"
            );
        }
        self.trusted_proxy_networks()?;
        self.purge_schedule()?;
        if self.role == Role::Api && !self.is_cluster() {
            bail!(
                "invalid role (WEBOOK_ROLE / --role) api: an API-only process needs cluster mode \
                 (redis_url), so a worker process consumes the events it publishes"
            );
        }
        if self.job_permits == 0 {
            bail!("invalid job_permits (WEBOOK_JOB_PERMITS): must be above 0");
        }
        if self.job_heartbeat.is_zero() || self.job_lease < self.job_heartbeat * 3 {
            bail!(
                "invalid job_heartbeat / job_lease (WEBOOK_JOB_HEARTBEAT, WEBOOK_JOB_LEASE): the \
                 lease must be at least three heartbeats, so one late heartbeat is not a takeover"
            );
        }
        self.ranking_formula()?;
        self.ranking_schedule()?;
        if !(1..=1000).contains(&self.ranking_size) {
            bail!("invalid ranking_size (WEBOOK_RANKING_SIZE): must be 1-1000");
        }
        if self.ranking_window.is_zero() || self.ranking_refresh.is_zero() {
            bail!(
                "invalid ranking_window / ranking_refresh (WEBOOK_RANKING_WINDOW, \
                 WEBOOK_RANKING_REFRESH): must be above 0"
            );
        }
        if self.job_poll_max.is_zero() {
            bail!("invalid job_poll_max (WEBOOK_JOB_POLL_MAX): must be above 0");
        }
        for (name, secret) in [
            ("jwt_access_secret", &self.jwt_access_secret),
            ("jwt_refresh_secret", &self.jwt_refresh_secret),
        ] {
            match secret {
                None if self.is_cluster() => bail!(
                    "{name} (WEBOOK_{}) is required in cluster mode (redis_url is set): every \
                     instance must sign tokens with the same secret",
                    name.to_uppercase()
                ),
                Some(secret) if secret.expose().len() < MIN_SECRET_LEN => bail!(
                    "{name} (WEBOOK_{}) is too short: use at least {MIN_SECRET_LEN} bytes",
                    name.to_uppercase()
                ),
                _ => {}
            }
        }
        Ok(())
    }

    /// The effective configuration as TOML, with secrets and URL passwords redacted.
    pub fn to_redacted_toml(&self) -> anyhow::Result<String> {
        let mut shown = self.clone();
        shown.database_url = Some(redact_url(&self.database_url()));
        shown.redis_url = self.redis_url.as_deref().map(redact_url);
        let body = toml::to_string_pretty(&shown).context("rendering the configuration")?;
        let mode = if self.is_cluster() {
            "cluster (PostgreSQL/SQLite + Redis)".to_owned()
        } else {
            format!(
                "embedded (in-process cache, locks and queue); JWT secrets from {}",
                if self.jwt_access_secret.is_some() {
                    "the configuration".to_owned()
                } else {
                    self.data_dir.join(SECRETS_FILE).display().to_string()
                }
            )
        };
        Ok(format!("# mode: {mode}\n{body}"))
    }
}

/// IPs or CIDRs of the setting `name`; a bare IP is a single-address network.
fn networks(name: &str, entries: &[String]) -> anyhow::Result<Vec<ipnet::IpNet>> {
    entries
        .iter()
        .map(|entry| {
            entry
                .parse::<ipnet::IpNet>()
                .or_else(|_| entry.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    anyhow::anyhow!(
                        "invalid {name} (WEBOOK_{}) entry {entry:?}: expected an IP or a CIDR \
                         such as 10.0.0.0/8",
                        name.to_uppercase()
                    )
                })
        })
        .collect()
}

/// One line naming the setting, where its value came from and what is wrong with it.
fn describe_figment_error(err: figment::Error) -> anyhow::Error {
    let key = err.path.join(".").to_lowercase();
    if key.is_empty() {
        // A file that is not TOML at all: the parser's report spans several lines (a snippet
        // with a caret); keep its sentences on one line.
        let origin = match err.metadata.as_ref().and_then(|m| m.source.as_ref()) {
            Some(figment::Source::File(path)) => format!(" {}", path.display()),
            _ => String::new(),
        };
        return anyhow::anyhow!(
            "invalid configuration{origin}: {}",
            one_line(&err.kind.to_string())
        );
    }
    let origin = match err.metadata.as_ref() {
        Some(metadata) => match &metadata.source {
            Some(figment::Source::File(path)) => format!("in {}", path.display()),
            _ if metadata.name.contains("environment") => {
                format!("from env {ENV_PREFIX}{}", key.to_uppercase())
            }
            _ => format!("from --{}", key.replace('_', "-")),
        },
        None => "default".to_owned(),
    };
    anyhow::anyhow!("invalid {key} ({origin}): {}", err.kind)
}

/// A multi-line parser report as one line: the snippet lines (`  |`, `3 | key = …`) are dropped,
/// the sentences joined with "; ".
fn one_line(report: &str) -> String {
    report
        .lines()
        .map(str::trim)
        .filter(|line| {
            let snippet = line
                .split_once('|')
                .is_some_and(|(gutter, _)| gutter.trim().chars().all(|c| c.is_ascii_digit()));
            !line.is_empty() && !snippet
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The engine a database URL points at, or an error naming the setting.
pub fn database_kind(url: &str) -> anyhow::Result<DatabaseKind> {
    let scheme = url.split_once(':').map(|(scheme, _)| scheme).unwrap_or("");
    match scheme {
        "sqlite" => Ok(DatabaseKind::Sqlite),
        "postgres" | "postgresql" => {
            url::Url::parse(url).map_err(|err| {
                anyhow::anyhow!(
                    "invalid database_url (WEBOOK_DATABASE_URL / --database-url) {:?}: {err}",
                    redact_url(url)
                )
            })?;
            Ok(DatabaseKind::Postgres)
        }
        _ => bail!(
            "invalid database_url (WEBOOK_DATABASE_URL / --database-url) {:?}: expected \
             sqlite://PATH or postgres://USER@HOST/DB",
            redact_url(url)
        ),
    }
}

/// A secret value: never printed by `Debug` and serialised only as `"<redacted>"`.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for signing; never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("<redacted>")
    }
}

/// The two token-signing secrets in effect.
#[derive(Debug, Clone)]
pub struct JwtSecrets {
    /// Signs access tokens.
    pub access: Secret,
    /// Signs refresh tokens (a different key, so one kind can never pass as the other).
    pub refresh: Secret,
}

#[derive(Serialize, Deserialize)]
struct SecretsFile {
    access: String,
    refresh: String,
}

impl JwtSecrets {
    /// The configured secrets, or (embedded mode) the ones generated once into
    /// `<data_dir>/jwt-secrets.toml` with mode 0600. Concurrent first starts agree on one file.
    pub fn resolve(config: &Config) -> anyhow::Result<Self> {
        match (&config.jwt_access_secret, &config.jwt_refresh_secret) {
            (Some(access), Some(refresh)) => Ok(Self {
                access: access.clone(),
                refresh: refresh.clone(),
            }),
            (None, None) => Self::load_or_generate(&config.data_dir),
            _ => bail!(
                "set both jwt_access_secret and jwt_refresh_secret (WEBOOK_JWT_ACCESS_SECRET, \
                 WEBOOK_JWT_REFRESH_SECRET), or neither to use generated ones"
            ),
        }
    }

    fn load_or_generate(data_dir: &Path) -> anyhow::Result<Self> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

        crate::infra::db::create_private_dir(data_dir)
            .with_context(|| format!("creating data_dir {}", data_dir.display()))?;
        let path = data_dir.join(SECRETS_FILE);
        if !path.exists() {
            // Write a private temp file, then hard-link it into place: the link fails if another
            // process won the race, and nobody ever reads a half-written file.
            let generated = SecretsFile {
                access: random_hex(64)?,
                refresh: random_hex(64)?,
            };
            let tmp = data_dir.join(format!(".{SECRETS_FILE}.{}", uuid::Uuid::new_v4()));
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)
                .with_context(|| format!("creating {}", tmp.display()))?;
            file.write_all(toml::to_string(&generated)?.as_bytes())?;
            file.sync_all()?;
            let linked = std::fs::hard_link(&tmp, &path);
            std::fs::remove_file(&tmp)?;
            match linked {
                Ok(()) => tracing::info!(path = %path.display(), "generated JWT secrets"),
                Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(err).context(format!("writing {}", path.display())),
            }
        }
        let mode = std::fs::metadata(&path)?.permissions().mode();
        if mode & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "JWT secrets file was readable by others; set to 0600");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let stored: SecretsFile = toml::from_str(&text).with_context(|| {
            format!(
                "{} is corrupt (delete it to generate new secrets; this signs everybody out)",
                path.display()
            )
        })?;
        Ok(Self {
            access: Secret(stored.access),
            refresh: Secret(stored.refresh),
        })
    }
}

fn random_hex(bytes: usize) -> anyhow::Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|err| anyhow::anyhow!("no OS randomness: {err}"))?;
    Ok(hex::encode(buf))
}

/// User ids: `[1, 2]` (TOML) or `"1, 2"` (environment variables). An email is refused with the
/// way to grant rights by email instead: an unregistered admin email could be claimed by
/// whoever signs up with it first.
fn user_ids<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Number(i64),
        Text(String),
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum IdsOrString {
        Ids(Vec<Id>),
        // An environment value of one number arrives as a number.
        One(i64),
        String(String),
    }
    let entries: Vec<Id> = match IdsOrString::deserialize(de)? {
        IdsOrString::Ids(ids) => ids,
        IdsOrString::One(id) => vec![Id::Number(id)],
        IdsOrString::String(joined) => joined
            .split(',')
            .map(|part| Id::Text(part.trim().to_owned()))
            .filter(|id| !matches!(id, Id::Text(text) if text.is_empty()))
            .collect(),
    };
    entries
        .into_iter()
        .map(|entry| {
            let id = match entry {
                Id::Number(id) => Ok(id),
                Id::Text(text) if text.contains('@') => Err(format!(
                    "{text:?} is an email: admins are user ids now (an email could be claimed by \
                     whoever signs up with it); grant rights with `webook admin grant {text}`"
                )),
                Id::Text(text) => text
                    .parse::<i64>()
                    .map_err(|_| format!("{text:?} is not a user id")),
            }?;
            if id > 0 {
                Ok(id)
            } else {
                Err(format!("{id} is not a user id (ids are positive)"))
            }
        })
        .collect::<Result<Vec<i64>, String>>()
        .map_err(serde::de::Error::custom)
}

/// Accepts `["a", "b"]` (TOML, flags) or `"a, b"` (environment variables).
fn list_or_comma_separated<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ListOrString {
        List(Vec<String>),
        String(String),
    }
    let items = match ListOrString::deserialize(de)? {
        ListOrString::List(items) => items,
        ListOrString::String(joined) => joined.split(',').map(str::to_owned).collect(),
    };
    Ok(items
        .into_iter()
        .map(|item| item.trim().to_owned())
        .filter(|item| !item.is_empty())
        .collect())
}

#[cfg(test)]
#[allow(clippy::result_large_err)] // figment's Jail API returns figment::Error by value
mod tests {
    use super::*;
    use figment::Jail;

    fn load_in_jail(flags: &ConfigArgs) -> Result<Config, figment::Error> {
        Config::load(flags).map_err(|err| err.to_string().into())
    }

    #[test]
    fn keys_name_every_setting() {
        let config = Config {
            database_url: Some("sqlite://x.db".into()),
            redis_url: Some("redis://127.0.0.1/".into()),
            jwt_access_secret: Some(Secret::new("a")),
            jwt_refresh_secret: Some(Secret::new("r")),
            ops_listen: Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
            ..Config::default()
        };
        let value = serde_json::to_value(&config).unwrap();
        let mut serialized: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        serialized.sort_unstable();
        let mut listed = KEYS.to_vec();
        listed.sort_unstable();
        assert_eq!(serialized, listed, "KEYS must list every Config field");
    }

    #[test]
    fn defaults_apply_without_any_layer() {
        Jail::expect_with(|_jail| {
            let config = load_in_jail(&ConfigArgs::default())?;
            assert_eq!(config.listen.to_string(), "127.0.0.1:8080");
            assert_eq!(config.data_dir, PathBuf::from("./data"));
            assert_eq!(config.database_url(), "sqlite://./data/webook.db");
            assert!(!config.is_cluster());
            assert_eq!(config.cors_origins, vec!["http://localhost:3000"]);
            Ok(())
        });
    }

    #[test]
    fn each_layer_overrides_the_one_below() {
        Jail::expect_with(|jail| {
            jail.create_file(
                "webook.toml",
                r#"
                listen = "127.0.0.1:9001"
                data_dir = "/from-file"
                log = "debug"
                admins = [7]
                request_timeout = "5s"
                "#,
            )?;
            // File only.
            let config = load_in_jail(&ConfigArgs::default())?;
            assert_eq!(config.listen.to_string(), "127.0.0.1:9001");
            assert_eq!(config.log, "debug");
            assert_eq!(config.request_timeout, Duration::from_secs(5));

            // Env beats file.
            jail.set_env("WEBOOK_LISTEN", "127.0.0.1:9002");
            jail.set_env("WEBOOK_DATA_DIR", "/from-env");
            jail.set_env("WEBOOK_ADMINS", "7");
            assert_eq!(load_in_jail(&ConfigArgs::default())?.admins, vec![7]);
            jail.set_env("WEBOOK_ADMINS", "3, 4");
            let config = load_in_jail(&ConfigArgs::default())?;
            assert_eq!(config.listen.to_string(), "127.0.0.1:9002");
            assert_eq!(config.data_dir, PathBuf::from("/from-env"));
            assert_eq!(config.admins, vec![3, 4]);
            assert_eq!(config.log, "debug", "untouched keys keep the file's value");

            // Flags beat env.
            let flags = ConfigArgs {
                listen: Some("127.0.0.1:9003".into()),
                ..ConfigArgs::default()
            };
            let config = load_in_jail(&flags)?;
            assert_eq!(config.listen.to_string(), "127.0.0.1:9003");
            assert_eq!(config.data_dir, PathBuf::from("/from-env"));
            Ok(())
        });
    }

    #[test]
    fn config_file_path_comes_from_env_or_flag() {
        Jail::expect_with(|jail| {
            jail.create_file("other.toml", "listen = \"127.0.0.1:7000\"")?;
            let flags = ConfigArgs {
                config: Some("other.toml".into()),
                ..ConfigArgs::default()
            };
            assert_eq!(load_in_jail(&flags)?.listen.to_string(), "127.0.0.1:7000");

            let missing = ConfigArgs {
                config: Some("missing.toml".into()),
                ..ConfigArgs::default()
            };
            let err = Config::load(&missing).unwrap_err().to_string();
            assert!(
                err.contains("missing.toml") && err.contains("does not exist"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn unrelated_webook_env_vars_are_ignored_but_unknown_file_keys_are_not() {
        Jail::expect_with(|jail| {
            jail.set_env("WEBOOK_TEST_DATABASE_URL", "postgres://x@y/z");
            load_in_jail(&ConfigArgs::default())?;

            jail.create_file("webook.toml", "lisen = \"127.0.0.1:1\"")?;
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("lisen"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn values_that_would_misbehave_at_run_time_are_refused_at_start() {
        Jail::expect_with(|jail| {
            let refused = |jail: &mut Jail, key: &str, value: &str, expected: &[&str]| {
                jail.set_env(key, value);
                let err = Config::load(&ConfigArgs::default())
                    .unwrap_err()
                    .to_string();
                for part in expected {
                    assert!(err.contains(part), "{key}={value}: {err}");
                }
                assert!(!err.contains('\n'), "one line: {err}");
                std::env::remove_var(key);
            };
            refused(
                jail,
                "WEBOOK_REQUEST_TIMEOUT",
                "0s",
                &["request_timeout", "above 0"],
            );
            refused(
                jail,
                "WEBOOK_HTTP_HEADER_TIMEOUT",
                "0s",
                &["http_header_timeout"],
            );
            refused(
                jail,
                "WEBOOK_DATABASE_ACQUIRE_TIMEOUT",
                "40s",
                &["database_acquire_timeout", "request_timeout"],
            );
            refused(
                jail,
                "WEBOOK_CORS_ORIGINS",
                "not a url",
                &["cors_origins", "not a URL"],
            );
            refused(
                jail,
                "WEBOOK_ADMINS",
                "ops@example.com",
                &["admins", "webook admin grant"],
            );
            refused(jail, "WEBOOK_ADMINS", "-1", &["admins", "positive"]);
            refused(
                jail,
                "WEBOOK_WRITE_RATE_WINDOW",
                "0s",
                &["write_rate_window"],
            );
            refused(
                jail,
                "WEBOOK_JOB_HTTP_ALLOWED_NETWORKS",
                "10.0.0.0/33",
                &["job_http_allowed_networks", "CIDR"],
            );
            refused(jail, "WEBOOK_OPS_LISTEN", "127.0.0.1:8080", &["ops_listen"]);

            jail.create_file("webook.toml", "listen = \"127.0.0.1:1\"\nlog = \n")?;
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert!(!err.contains('\n'), "one line: {err}");
            assert!(
                err.contains("webook.toml") && err.contains("line 2"),
                "{err}"
            );
            Ok(())
        });
    }

    #[test]
    fn bad_values_name_the_setting() {
        Jail::expect_with(|jail| {
            jail.set_env("WEBOOK_DATABASE_URL", "mysql://root@localhost/webook");
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("database_url") && err.contains("WEBOOK_DATABASE_URL"),
                "{err}"
            );

            jail.set_env("WEBOOK_DATABASE_URL", "postgres://u:hunter2@[bad/db");
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("database_url"), "{err}");
            assert!(!err.contains("hunter2"), "password leaked: {err}");

            jail.set_env("WEBOOK_DATABASE_URL", "sqlite://ok.db");
            jail.set_env("WEBOOK_LISTEN", "not-an-address");
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("listen"), "{err}");

            jail.set_env("WEBOOK_LISTEN", "127.0.0.1:0");
            jail.set_env("WEBOOK_PURGE_SCHEDULE", "0 0 25 * * *");
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert_eq!(
                err,
                "invalid purge_schedule (WEBOOK_PURGE_SCHEDULE): invalid cron expression \
                 \"0 0 25 * * *\": hour field \"25\": 25 is out of range 0-23"
            );

            jail.set_env("WEBOOK_PURGE_SCHEDULE", "@every 10m");
            jail.set_env("WEBOOK_ROLE", "api");
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("role") && err.contains("cluster mode"),
                "{err}"
            );
            jail.set_env("WEBOOK_ROLE", "worker");
            jail.set_env("WEBOOK_JOB_LEASE", "3s");
            jail.set_env("WEBOOK_JOB_HEARTBEAT", "2s");
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("job_lease"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn cluster_mode_requires_secrets() {
        Jail::expect_with(|jail| {
            jail.set_env("WEBOOK_REDIS_URL", "redis://127.0.0.1:6379/");
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("jwt_access_secret") && err.contains("cluster"),
                "{err}"
            );

            jail.set_env("WEBOOK_JWT_ACCESS_SECRET", "short");
            jail.set_env("WEBOOK_JWT_REFRESH_SECRET", "x".repeat(40));
            let err = Config::load(&ConfigArgs::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains("too short"), "{err}");

            jail.set_env("WEBOOK_JWT_ACCESS_SECRET", "y".repeat(40));
            let config = load_in_jail(&ConfigArgs::default())?;
            assert!(config.is_cluster());
            Ok(())
        });
    }

    #[test]
    fn redacted_config_hides_secrets_and_passwords() {
        Jail::expect_with(|jail| {
            jail.set_env("WEBOOK_REDIS_URL", "redis://:redispass@127.0.0.1:6379/");
            jail.set_env(
                "WEBOOK_DATABASE_URL",
                "postgres://u:dbpass@127.0.0.1/webook",
            );
            jail.set_env("WEBOOK_JWT_ACCESS_SECRET", "a".repeat(40));
            jail.set_env("WEBOOK_JWT_REFRESH_SECRET", "r".repeat(40));
            let shown = load_in_jail(&ConfigArgs::default())?
                .to_redacted_toml()
                .map_err(|err| err.to_string())?;
            for leaked in ["redispass", "dbpass", &"a".repeat(40), &"r".repeat(40)] {
                assert!(!shown.contains(leaked), "{leaked} leaked:\n{shown}");
            }
            assert!(shown.contains("<redacted>"), "{shown}");
            assert!(
                shown.contains("postgres://u:***@127.0.0.1/webook"),
                "{shown}"
            );
            Ok(())
        });
    }

    #[test]
    fn generated_secrets_are_private_and_stable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().join("nested"),
            ..Config::default()
        };
        let first = JwtSecrets::resolve(&config).unwrap();
        let second = JwtSecrets::resolve(&config).unwrap();
        assert_eq!(first.access, second.access);
        assert_ne!(first.access, first.refresh);
        assert!(first.access.expose().len() >= MIN_SECRET_LEN);
        let mode = std::fs::metadata(dir.path().join("nested").join(SECRETS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
