//! The configuration core: built-in defaults → `webook.toml` → `WEBOOK_*` environment → flags.
//!
//! [`Config::load`] merges the layers with figment (later layers win, key by key) and extracts
//! the platform's keys into [`Config`] and each feature's own section ([`Settings`], handed in
//! as a [`SettingsSpec`]) from the same layers, validating each, so every later stage can trust
//! them. Keys are flat and the same in every layer: the TOML key `data_dir` is the env var
//! `WEBOOK_DATA_DIR` and the flag `--data-dir`. Errors name the setting and where its value came
//! from, in one line; a file key no section knows is refused. The flags layer is [`ConfigArgs`],
//! which the application's command line flattens in (the configuration does not depend on it).
//!
//! Mode follows from the settings: `redis_url` set means cluster mode (shared Redis); absent
//! means embedded mode (in-process cache/locks/queue).

use std::{any::Any, collections::BTreeMap, fmt, net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::{bail, Context};
use figment::{
    providers::{Env, Format, Serialized, Toml},
    Figment,
};
use serde::{de::DeserializeOwned, Deserialize, Deserializer, Serialize};

use crate::redact_url;

/// Default of `database_acquire_timeout`: how long a query waits for a pooled connection.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(500);
/// The default of `client_ipv6_prefix`: one subscriber's network.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

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
/// Smallest accepted `cache_memory_bytes`.
pub const MIN_CACHE_MEMORY_BYTES: u64 = 1024 * 1024;
/// Shortest accepted `metrics_token`, in bytes.
pub const MIN_METRICS_TOKEN_LEN: usize = 16;
/// Longest accepted `request_timeout`, `http_header_timeout` and `shutdown_timeout`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// Longest accepted `http_idle_timeout`.
pub const MAX_IDLE_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// The effective configuration of one webook process.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
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
    /// Origins allowed by CORS (a list, or comma-separated in the environment).
    #[serde(deserialize_with = "list_or_comma_separated")]
    pub cors_origins: Vec<String>,
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
    /// Most connections open at once from one client address (an IPv6 client is its /64); over
    /// it a new connection is closed at once. 0: no such cap. Trusted proxies are exempt.
    pub http_max_connections_per_client: usize,
    /// Serve `/healthz`, `/readyz` and `/metrics` on this address instead of `listen` (which
    /// then no longer serves `/metrics`). Unset: everything on `listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_listen: Option<SocketAddr>,
    /// Networks (IPs or CIDRs) whose clients may read `/metrics` on `listen`.
    #[serde(deserialize_with = "list_or_comma_separated")]
    pub metrics_allowed_networks: Vec<String>,
    /// A bearer token that opens `/metrics` on `listen` to any client presenting it; empty:
    /// none.
    pub metrics_token: Secret,
    /// On SIGINT/SIGTERM, how long in-flight work may take to drain before the process exits.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// Size of the SQL connection pool.
    pub database_max_connections: u32,
    /// How long a query waits for a pooled connection before it fails (answered 503). While the
    /// database is unreachable, queries fail at once after the first such failure.
    #[serde(with = "humantime_serde")]
    pub database_acquire_timeout: Duration,
    /// Proxies (IPs or CIDRs) whose `X-Forwarded-For` is believed when finding the client IP.
    #[serde(deserialize_with = "list_or_comma_separated")]
    pub trusted_proxies: Vec<String>,
    /// Leading bits of an IPv6 client address that name one client for rate limits (a
    /// subscriber holds a whole /64); IPv4 clients are their full address.
    pub client_ipv6_prefix: u8,
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
    /// Base URL of an OTLP/HTTP collector (e.g. `http://otel-collector:4318`); traces are posted
    /// to `{otlp_endpoint}/v1/traces` as protobuf. Unset: no tracing at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Share of new traces exported, 0 to 1 (parent-based: a trace continued from a caller's
    /// `traceparent` keeps the caller's decision).
    pub otlp_sampling_ratio: f64,
    /// `service.name` of the exported spans.
    pub otlp_service_name: String,
    /// The features' own sections ([`Settings`]), in the order they were loaded; read them
    /// with [`Config::settings`].
    #[serde(skip)]
    pub sections: Sections,
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
            cors_origins: vec!["http://localhost:3000".to_owned()],
            log: "info".to_owned(),
            log_format: LogFormat::Text,
            body_limit_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(30),
            http_header_timeout: Duration::from_secs(10),
            http_idle_timeout: Duration::from_secs(60),
            http_max_connections: 10_000,
            http_max_connections_per_client: 256,
            ops_listen: None,
            metrics_allowed_networks: vec!["127.0.0.0/8".to_owned(), "::1/128".to_owned()],
            metrics_token: Secret::default(),
            shutdown_timeout: Duration::from_secs(30),
            database_max_connections: 16,
            database_acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            trusted_proxies: Vec::new(),
            client_ipv6_prefix: DEFAULT_IPV6_PREFIX,
            debug_endpoints: false,
            purge_schedule: "@every 10m".to_owned(),
            cache_memory_bytes: 32 * 1024 * 1024,
            role: Role::All,
            otlp_endpoint: None,
            otlp_sampling_ratio: 1.0,
            otlp_service_name: "webook".to_owned(),
            sections: Sections::default(),
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
    "cors_origins",
    "log",
    "log_format",
    "body_limit_bytes",
    "request_timeout",
    "http_header_timeout",
    "http_idle_timeout",
    "http_max_connections",
    "http_max_connections_per_client",
    "ops_listen",
    "metrics_allowed_networks",
    "metrics_token",
    "shutdown_timeout",
    "database_max_connections",
    "database_acquire_timeout",
    "trusted_proxies",
    "client_ipv6_prefix",
    "debug_endpoints",
    "purge_schedule",
    "cache_memory_bytes",
    "role",
    "otlp_endpoint",
    "otlp_sampling_ratio",
    "otlp_service_name",
];

/// The platform's keys that change while the process runs ([`Config::with_live`]): an admin
/// sets them in the database and every instance applies them within seconds.
pub const LIVE_KEYS: &[&str] = &["log", "otlp_sampling_ratio"];

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
    /// Loads and validates the layered configuration: the platform's keys and those of every
    /// feature section in `sections`; `flags` is the top layer.
    pub fn load(flags: &ConfigArgs, sections: &[SettingsSpec]) -> anyhow::Result<Self> {
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
        let known: Vec<&str> = KEYS
            .iter()
            .chain(sections.iter().flat_map(|spec| spec.keys))
            .copied()
            .collect();
        let mut figment = Figment::new();
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        let figment = figment
            .merge(Env::prefixed(ENV_PREFIX).only(&known))
            .merge(Serialized::defaults(flags));
        refuse_unknown_keys(&figment, &known)?;
        let mut config: Config = figment.extract().map_err(describe_figment_error)?;
        config.validate()?;
        for spec in sections {
            let section = (spec.load)(&figment)?;
            section.validate(&config)?;
            config.sections.0.push(section);
        }
        Ok(config)
    }

    /// The defaults of the platform and of every section in `sections` (tests start from here).
    pub fn with_defaults(sections: &[SettingsSpec]) -> Self {
        let mut config = Self::default();
        config.sections.0 = sections.iter().map(|spec| (spec.default)()).collect();
        config
    }

    /// The settings section `T` of a feature.
    pub fn settings<T: Settings>(&self) -> anyhow::Result<&T> {
        self.sections
            .0
            .iter()
            .find_map(|section| section.as_any().downcast_ref::<T>())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the settings {} were not loaded: their feature is not installed",
                    std::any::type_name::<T>()
                )
            })
    }

    /// The settings section `T`, to change it (tests); added with its defaults when missing.
    pub fn settings_mut<T: Settings>(&mut self) -> &mut T {
        let position = self
            .sections
            .0
            .iter()
            .position(|section| section.as_any().is::<T>());
        let index = position.unwrap_or_else(|| {
            self.sections.0.push(Box::new(T::default()));
            self.sections.0.len() - 1
        });
        match self.sections.0[index].as_any_mut().downcast_mut::<T>() {
            Some(settings) => settings,
            None => unreachable!("the section at {index} was just found or inserted as T"),
        }
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

    /// `trusted_proxies` parsed; a bare IP is a single-address network. A network of every
    /// address (`0.0.0.0/0`, `::/0`) is refused: any client could then name its own address.
    pub fn trusted_proxy_networks(&self) -> anyhow::Result<Vec<ipnet::IpNet>> {
        let parsed = networks("trusted_proxies", &self.trusted_proxies)?;
        if let Some(every) = parsed.iter().find(|net| net.prefix_len() == 0) {
            bail!(
                "invalid trusted_proxies (WEBOOK_TRUSTED_PROXIES) entry \"{every}\": it trusts \
                 every address, so any client could forge X-Forwarded-For and choose the address \
                 its rate limits count against; list your proxies' addresses or networks"
            );
        }
        Ok(parsed)
    }

    /// `metrics_allowed_networks` parsed; a bare IP is a single-address network.
    pub fn metrics_networks(&self) -> anyhow::Result<Vec<ipnet::IpNet>> {
        networks("metrics_allowed_networks", &self.metrics_allowed_networks)
    }

    /// `purge_schedule` parsed.
    pub fn purge_schedule(&self) -> anyhow::Result<scheduler::Schedule> {
        scheduler::Schedule::parse(&self.purge_schedule)
            .map_err(|err| anyhow::anyhow!("invalid purge_schedule (WEBOOK_PURGE_SCHEDULE): {err}"))
    }

    /// Checks what the type system cannot in the platform's keys: URL schemes, the log filter,
    /// timeouts. Each feature section checks its own keys ([`Settings::validate`]).
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
        if !(32..=128).contains(&self.client_ipv6_prefix) {
            bail!(
                "invalid client_ipv6_prefix (WEBOOK_CLIENT_IPV6_PREFIX): 32 to 128 (the leading \
                 bits of an IPv6 address that name one client; 64 is one subscriber)"
            );
        }
        tracing_subscriber::EnvFilter::try_new(&self.log)
            .map_err(|err| anyhow::anyhow!("invalid log (WEBOOK_LOG) {:?}: {err}", self.log))?;
        if self.cache_memory_bytes < MIN_CACHE_MEMORY_BYTES {
            bail!(
                "invalid cache_memory_bytes (WEBOOK_CACHE_MEMORY_BYTES): at least {MIN_CACHE_MEMORY_BYTES} (1 MiB)"
            );
        }
        for (name, value, max, max_text) in [
            ("request_timeout", self.request_timeout, MAX_TIMEOUT, "1h"),
            (
                "http_header_timeout",
                self.http_header_timeout,
                MAX_TIMEOUT,
                "1h",
            ),
            (
                "http_idle_timeout",
                self.http_idle_timeout,
                MAX_IDLE_TIMEOUT,
                "1d",
            ),
            // Bounded by request_timeout below.
            (
                "database_acquire_timeout",
                self.database_acquire_timeout,
                MAX_TIMEOUT,
                "1h",
            ),
            ("shutdown_timeout", self.shutdown_timeout, MAX_TIMEOUT, "1h"),
        ] {
            if value.is_zero() {
                bail!(
                    "invalid {name} (WEBOOK_{}): must be above 0",
                    name.to_uppercase()
                );
            }
            if value > max {
                bail!(
                    "invalid {name} (WEBOOK_{}): at most {max_text}",
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
        crate::cors::CorsPolicy::new(&self.cors_origins)?;
        if self.body_limit_bytes == 0 {
            bail!("invalid body_limit_bytes (WEBOOK_BODY_LIMIT_BYTES): must be above 0");
        }
        if self.database_max_connections == 0 {
            bail!(
                "invalid database_max_connections (WEBOOK_DATABASE_MAX_CONNECTIONS): must be above 0"
            );
        }
        self.trusted_proxy_networks()?;
        self.metrics_networks()?;
        let token = self.metrics_token.expose();
        if !token.is_empty() && token.len() < MIN_METRICS_TOKEN_LEN {
            bail!(
                "invalid metrics_token (WEBOOK_METRICS_TOKEN): use at least \
                 {MIN_METRICS_TOKEN_LEN} bytes"
            );
        }
        self.purge_schedule()?;
        if let Some(endpoint) = &self.otlp_endpoint {
            let parsed = url::Url::parse(endpoint).map_err(|err| {
                anyhow::anyhow!("invalid otlp_endpoint (WEBOOK_OTLP_ENDPOINT) {endpoint:?}: {err}")
            })?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.query().is_some() {
                bail!("invalid otlp_endpoint (WEBOOK_OTLP_ENDPOINT) {endpoint:?}: expected an http:// or https:// base URL such as http://collector:4318");
            }
        }
        if !(0.0..=1.0).contains(&self.otlp_sampling_ratio) {
            bail!("invalid otlp_sampling_ratio (WEBOOK_OTLP_SAMPLING_RATIO): 0 to 1 (the share of new traces exported)");
        }
        if self.otlp_service_name.trim().is_empty() {
            bail!("invalid otlp_service_name (WEBOOK_OTLP_SERVICE_NAME): must not be empty");
        }
        if self.role == Role::Api && !self.is_cluster() {
            bail!(
                "invalid role (WEBOOK_ROLE / --role) api: an API-only process needs cluster mode \
                 (redis_url), so a worker process consumes the events it publishes"
            );
        }
        Ok(())
    }

    /// The effective configuration as TOML (the platform's keys, then each section's), with
    /// secrets and URL passwords redacted, under a comment naming the mode.
    pub fn to_redacted_toml(&self) -> anyhow::Result<String> {
        let mut shown = self.clone();
        shown.database_url = Some(redact_url(&self.database_url()));
        shown.redis_url = self.redis_url.as_deref().map(redact_url);
        shown.otlp_endpoint = self.otlp_endpoint.as_deref().map(redact_url);
        let mut table = toml::Table::try_from(&shown).context("rendering the configuration")?;
        let mut notes = Vec::new();
        for section in &self.sections.0 {
            table.extend(section.to_toml()?);
            notes.extend(section.mode_note(self));
        }
        let body = toml::to_string_pretty(&table).context("rendering the configuration")?;
        let mut mode = if self.is_cluster() {
            "cluster (PostgreSQL/SQLite + Redis)".to_owned()
        } else {
            "embedded (in-process cache, locks and queue)".to_owned()
        };
        for note in notes {
            mode.push_str("; ");
            mode.push_str(&note);
        }
        Ok(format!("# mode: {mode}\n{body}"))
    }
}

impl Config {
    /// This configuration with the live settings `overrides` (key → value, as an admin set
    /// them) on top, validated as at start-up: the same one-line errors, their origin
    /// `live setting`. `self` is the start-up configuration (defaults → file → environment →
    /// flags), so removing an override brings the key back to it. A key no section knows, or one
    /// that needs a restart, is refused naming it.
    pub fn with_live(
        &self,
        overrides: &BTreeMap<String, serde_json::Value>,
    ) -> anyhow::Result<Config> {
        for key in overrides.keys() {
            self.check_live_key(key)?;
        }
        let live = LiveLayer(overrides.clone());
        let mut config = if LIVE_KEYS.iter().any(|key| overrides.contains_key(*key)) {
            let exposed = exposing_secrets(|| serde_json::to_value(self))
                .context("rendering the configuration")?;
            let config: Config = live.over(exposed, KEYS)?;
            config.validate()?;
            config
        } else {
            let mut config = self.clone();
            config.sections = Sections::default();
            config
        };
        for section in &self.sections.0 {
            let touched = section
                .live_keys()
                .iter()
                .any(|key| overrides.contains_key(*key));
            config.sections.0.push(if touched {
                section.relayered(&live, &config)?
            } else {
                section.clone_box()
            });
        }
        Ok(config)
    }

    /// Whether `key` is a setting, and one that changes without a restart: an error naming the
    /// key and what to do otherwise.
    pub fn check_live_key(&self, key: &str) -> anyhow::Result<()> {
        if LIVE_KEYS.contains(&key)
            || self
                .sections
                .0
                .iter()
                .any(|section| section.live_keys().contains(&key))
        {
            return Ok(());
        }
        let known = KEYS.contains(&key)
            || self
                .sections
                .0
                .iter()
                .any(|section| section.keys().contains(&key));
        if known {
            bail!(
                "{key} needs a restart: set it in webook.toml, WEBOOK_{} or --{}, then restart \
                 the instances",
                key.to_uppercase(),
                key.replace('_', "-")
            );
        }
        bail!("unknown setting {key:?}; the settings are listed in docs/CONFIG.md")
    }

    /// Every setting with its value, secrets and URL passwords redacted (`"<redacted>"`, or
    /// `""` when unset), and whether it is live: the platform's keys, then each section's.
    pub fn entries(&self) -> anyhow::Result<Vec<(&'static str, serde_json::Value, bool)>> {
        let mut entries = Vec::new();
        let mut shown = self.clone();
        shown.sections = Sections::default();
        shown.database_url = self.database_url.as_deref().map(redact_url);
        shown.redis_url = self.redis_url.as_deref().map(redact_url);
        shown.otlp_endpoint = self.otlp_endpoint.as_deref().map(redact_url);
        let platform = serde_json::to_value(&shown).context("rendering the configuration")?;
        for key in KEYS {
            let value = platform
                .get(*key)
                .cloned()
                .unwrap_or(serde_json::Value::Null);
            entries.push((*key, value, LIVE_KEYS.contains(key)));
        }
        for section in &self.sections.0 {
            let table = section.to_toml()?;
            let values = serde_json::to_value(&table).context("rendering the configuration")?;
            for key in section.keys() {
                let value = values.get(*key).cloned().unwrap_or(serde_json::Value::Null);
                entries.push((*key, value, section.live_keys().contains(key)));
            }
        }
        Ok(entries)
    }
}

/// The name of the live-settings layer in error messages.
const LIVE_LAYER: &str = "live setting";

/// The live settings as the top configuration layer.
#[derive(Debug, Clone)]
struct LiveLayer(BTreeMap<String, serde_json::Value>);

impl LiveLayer {
    /// `T` read from `base` (a whole section or the platform's keys, secrets exposed) with this
    /// layer's values of `keys` in place of the base's.
    fn over<T: DeserializeOwned>(
        &self,
        mut base: serde_json::Value,
        keys: &[&str],
    ) -> anyhow::Result<T> {
        let mine: BTreeMap<&String, &serde_json::Value> = self
            .0
            .iter()
            .filter(|(key, _)| keys.contains(&key.as_str()))
            .collect();
        if let Some(table) = base.as_object_mut() {
            // Replaced, not merged: a table value (a rollout) must not keep the base's entries.
            for key in mine.keys() {
                table.remove(key.as_str());
            }
        }
        Figment::from(Serialized::defaults(base))
            .merge(LiveProvider(mine))
            .extract()
            .map_err(describe_figment_error)
    }
}

struct LiveProvider<'a>(BTreeMap<&'a String, &'a serde_json::Value>);

impl figment::Provider for LiveProvider<'_> {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named(LIVE_LAYER)
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        Serialized::defaults(&self.0).data()
    }
}

thread_local! {
    /// Set while [`exposing_secrets`] runs: [`Secret`]s serialise as themselves.
    static EXPOSE_SECRETS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `render` with [`Secret`]s serialising as their values, to re-read a configuration in
/// memory ([`Config::with_live`]); what it renders must never be shown.
fn exposing_secrets<R>(render: impl FnOnce() -> R) -> R {
    /// Hides them again however `render` ends.
    struct Hide;
    impl Drop for Hide {
        fn drop(&mut self) {
            EXPOSE_SECRETS.with(|flag| flag.set(false));
        }
    }
    EXPOSE_SECRETS.with(|flag| flag.set(true));
    let _hide = Hide;
    render()
}

/// A feature's own settings: a section of flat keys in the same layers as the platform's (the
/// TOML key `k` is the env var `WEBOOK_K`), loaded by [`Config::load`] and read with
/// [`Config::settings`].
pub trait Settings:
    Serialize + DeserializeOwned + Default + Clone + fmt::Debug + Send + Sync + 'static
{
    /// Every key of the section (serde field names); env vars outside every section's keys are
    /// ignored, file keys outside them are refused.
    const KEYS: &'static [&'static str];

    /// The keys among [`Settings::KEYS`] that change while the process runs: live settings
    /// ([`Config::with_live`]). Whoever reads one reads it from the live configuration
    /// (`platform::live`) at the time of use, never once at start-up.
    const LIVE: &'static [&'static str] = &[];

    /// Checks what the type system cannot; `config` holds the platform's validated keys.
    /// Errors name the key and its env var, in one line.
    fn validate(&self, config: &Config) -> anyhow::Result<()>;

    /// A note for the mode line of `--print-config` (e.g. where secrets come from).
    fn mode_note(&self, _config: &Config) -> Option<String> {
        None
    }
}

/// How to load one [`Settings`] section, without naming its type: what a feature hands to
/// [`Config::load`].
#[derive(Clone, Copy)]
pub struct SettingsSpec {
    keys: &'static [&'static str],
    load: fn(&Figment) -> anyhow::Result<Box<dyn Section>>,
    default: fn() -> Box<dyn Section>,
}

impl SettingsSpec {
    /// The spec of section `T`.
    pub const fn of<T: Settings>() -> Self {
        Self {
            keys: T::KEYS,
            load: load_section::<T>,
            default: default_section::<T>,
        }
    }

    /// The keys of the section.
    pub fn keys(&self) -> &'static [&'static str] {
        self.keys
    }
}

impl fmt::Debug for SettingsSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SettingsSpec")
            .field("keys", &self.keys)
            .finish()
    }
}

fn load_section<T: Settings>(figment: &Figment) -> anyhow::Result<Box<dyn Section>> {
    let section: T = figment.extract().map_err(describe_figment_error)?;
    Ok(Box::new(section))
}

fn default_section<T: Settings>() -> Box<dyn Section> {
    Box::new(T::default())
}

/// A loaded [`Settings`] section behind a type-erased box.
trait Section: Any + Send + Sync + fmt::Debug {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn clone_box(&self) -> Box<dyn Section>;
    fn to_toml(&self) -> anyhow::Result<toml::Table>;
    fn validate(&self, config: &Config) -> anyhow::Result<()>;
    fn mode_note(&self, config: &Config) -> Option<String>;
    fn keys(&self) -> &'static [&'static str];
    fn live_keys(&self) -> &'static [&'static str];
    fn exposed(&self) -> anyhow::Result<serde_json::Value>;
    fn relayered(&self, live: &LiveLayer, config: &Config) -> anyhow::Result<Box<dyn Section>>;
}

impl<T: Settings> Section for T {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn clone_box(&self) -> Box<dyn Section> {
        Box::new(self.clone())
    }

    fn to_toml(&self) -> anyhow::Result<toml::Table> {
        toml::Table::try_from(self).context("rendering the configuration")
    }

    fn validate(&self, config: &Config) -> anyhow::Result<()> {
        Settings::validate(self, config)
    }

    fn mode_note(&self, config: &Config) -> Option<String> {
        Settings::mode_note(self, config)
    }

    fn keys(&self) -> &'static [&'static str] {
        T::KEYS
    }

    fn live_keys(&self) -> &'static [&'static str] {
        T::LIVE
    }

    fn exposed(&self) -> anyhow::Result<serde_json::Value> {
        exposing_secrets(|| serde_json::to_value(self)).context("rendering the configuration")
    }

    fn relayered(&self, live: &LiveLayer, config: &Config) -> anyhow::Result<Box<dyn Section>> {
        let section: T = live.over(self.exposed()?, T::KEYS)?;
        Settings::validate(&section, config)?;
        Ok(Box::new(section))
    }
}

/// The feature sections of a [`Config`] (opaque: read through [`Config::settings`]).
#[derive(Debug, Default)]
pub struct Sections(Vec<Box<dyn Section>>);

impl Clone for Sections {
    fn clone(&self) -> Self {
        Self(self.0.iter().map(|section| section.clone_box()).collect())
    }
}

/// Refuses a key no section knows (a typo in the file would otherwise be ignored silently),
/// naming where it came from.
fn refuse_unknown_keys(figment: &Figment, known: &[&str]) -> anyhow::Result<()> {
    let keys: BTreeMap<String, figment::value::Value> =
        figment.extract().map_err(describe_figment_error)?;
    if let Some(unknown) = keys.keys().find(|key| !known.contains(&key.as_str())) {
        let origin = match figment
            .find_metadata(unknown)
            .and_then(|metadata| metadata.source.as_ref())
        {
            Some(figment::Source::File(path)) => format!("in {}", path.display()),
            _ => "in the configuration".to_owned(),
        };
        bail!("invalid {unknown} ({origin}): unknown field `{unknown}`; the settings are listed in docs/CONFIG.md");
    }
    Ok(())
}

/// IPs or CIDRs of the setting `name`; a bare IP is a single-address network.
pub fn networks(name: &str, entries: &[String]) -> anyhow::Result<Vec<ipnet::IpNet>> {
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
            _ if metadata.name == LIVE_LAYER => LIVE_LAYER.to_owned(),
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

/// A secret value: never printed by `Debug` and serialised only as `"<redacted>"`. The default
/// is empty, meaning "not set".
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
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
    /// `"<redacted>"`, or `""` for an empty (unset) secret, so a printed configuration shows
    /// which secrets are set without showing any.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if EXPOSE_SECRETS.with(std::cell::Cell::get) {
            return serializer.serialize_str(&self.0);
        }
        serializer.serialize_str(if self.0.is_empty() { "" } else { "<redacted>" })
    }
}

/// A text setting that may look like a number (`1400123456`): environment variables and TOML
/// integers are read as text, not refused.
pub fn text_or_number<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        String(String),
        Integer(u64),
    }
    Ok(match Text::deserialize(de)? {
        Text::String(text) => text,
        Text::Integer(number) => number.to_string(),
    })
}

/// Accepts `["a", "b"]` (TOML, flags) or `"a, b"` (environment variables).
pub fn list_or_comma_separated<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<String>, D::Error> {
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
