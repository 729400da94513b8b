//! Test support of the webook crate, compiled only with the `test-support` feature (this crate's
//! dev-dependency on itself turns it on for its tests). The databases, Redis servers and proxies
//! are the platform's ([`platform::testing`]); this module adds what needs the application:
//!
//! - [`test_config`]: a config for a test app with every feature's settings;
//! - [`TestApp`]: the real app, served on port 0 in this process.

#![allow(clippy::expect_used)] // test support fails loudly by design

use std::{net::SocketAddr, path::Path, sync::Arc};

use platform::{
    config::{Config, DatabaseKind, Secret},
    feature::{Platform, Services},
    testing::TestDb,
};
use tokio::{sync::oneshot, task::JoinHandle};

use crate::{
    app::App,
    auth::AuthSettings,
    jobs::JobSettings,
    payment::{PaymentSettings, ProviderName},
    schema::MIGRATIONS,
    search::SearchSettings,
};

/// A config for a test app: port 0, data dir `data_dir`, the given database, fixed secrets (so
/// several apps in one test accept each other's tokens), `http` jobs allowed to call loopback.
pub fn test_config(data_dir: &Path, database_url: &str) -> Config {
    let mut config = Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        data_dir: data_dir.to_path_buf(),
        database_url: Some(database_url.to_owned()),
        log: "warn".to_owned(),
        ..Config::with_defaults(&crate::app::settings())
    };
    let auth = config.settings_mut::<AuthSettings>();
    auth.jwt_access_secret = Some(Secret::new("test-access-secret-0123456789abcdef"));
    auth.jwt_refresh_secret = Some(Secret::new("test-refresh-secret-0123456789abcdef"));
    // Tests write in bursts from one user; the write limit has a test of its own.
    auth.write_rate_limit = 1_000_000;
    // New accounts too (every test's accounts are new); that limit has a test of its own.
    config
        .settings_mut::<crate::moderation::ModerationSettings>()
        .moderation_new_account_period = std::time::Duration::ZERO;
    // Tests poll search until a change shows; the search limit has a test of its own.
    config.settings_mut::<SearchSettings>().search_rate_limit = 0;
    // ... and need not wait a second between commits (the gap has a test of its own).
    config.settings_mut::<SearchSettings>().search_commit_gap = std::time::Duration::ZERO;
    // Tests' job receivers listen on loopback, which production refuses by default.
    config
        .settings_mut::<JobSettings>()
        .job_http_allowed_networks = vec!["127.0.0.0/8".to_owned()];
    config
}

/// Turns `config` into cluster mode on `redis_url`, under a Redis key prefix of its own so
/// tests sharing one Redis never see each other's keys.
pub fn make_cluster(config: &mut Config, redis_url: String) {
    config.redis_url = Some(redis_url);
    config.redis_prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    // Tests pay through the fake provider in cluster mode too.
    let payments = config.settings_mut::<PaymentSettings>();
    payments.pay_provider = Some(ProviderName::Fake);
    payments.pay_allow_fake = true;
}

/// The real app serving on an ephemeral port in this process.
pub struct TestApp {
    /// The bound address.
    pub addr: SocketAddr,
    /// The operations address, when the config sets `ops_listen`.
    pub ops_addr: Option<SocketAddr>,
    /// An HTTP client for it.
    pub client: reqwest::Client,
    /// The app's backends (database, config, events, …).
    pub platform: Platform,
    /// What its features provided, for tests that call a service directly.
    pub services: Arc<Services>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<anyhow::Result<()>>>,
    _data_dir: tempfile::TempDir,
    _db: Arc<TestDb>,
}

impl TestApp {
    /// An embedded app on a fresh database of `kind`.
    pub async fn spawn(kind: DatabaseKind) -> Self {
        Self::spawn_with(TestDb::new(kind, &MIGRATIONS).await, |_| {}).await
    }

    /// An app on `db`, after `configure` has adjusted its config.
    pub async fn spawn_with(db: TestDb, configure: impl FnOnce(&mut Config)) -> Self {
        Self::spawn_shared(Arc::new(db), configure).await
    }

    /// An app on a database other apps of the test may use too (several instances, restarts).
    pub async fn spawn_shared(db: Arc<TestDb>, configure: impl FnOnce(&mut Config)) -> Self {
        let data_dir = tempfile::tempdir().expect("temp dir");
        let mut config = test_config(data_dir.path(), &db.url);
        configure(&mut config);
        platform::telemetry::init_logging(&config).expect("logging");
        let app = App::build(config).await.expect("build test app");
        let addr = app.local_addr().expect("bound address");
        let ops_addr = app.ops_addr().expect("bound operations address");
        let platform = app.platform().clone();
        let services = app.services().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(app.run_until(async {
            stopped.await.ok();
        }));
        Self {
            addr,
            ops_addr,
            client: reqwest::Client::new(),
            platform,
            services,
            stop: Some(stop),
            server: Some(server),
            _data_dir: data_dir,
            _db: db,
        }
    }

    /// The service of type `T` a feature provided (panics when none did).
    pub fn service<T: Clone + Send + Sync + 'static>(&self) -> T {
        self.services
            .get::<T>()
            .expect("a feature provides this service")
    }

    /// Absolute URL of `path` on this app.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// GET `path`; returns the status and the body parsed as JSON.
    pub async fn get_json(&self, path: &str) -> (reqwest::StatusCode, serde_json::Value) {
        let response = self.client.get(self.url(path)).send().await.expect("GET");
        let status = response.status();
        (status, response.json().await.expect("JSON body"))
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics_text(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// Stops the app gracefully and returns how its server ended.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(stop) = self.stop.take() {
            stop.send(()).ok();
        }
        match self.server.take() {
            Some(server) => server.await?,
            None => Ok(()),
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send(()).ok();
        }
    }
}

/// The comments' service on `db` alone, as benches and statement-counting tests use it: no app,
/// events recorded for the consumers of `events` (through an `Outbox` nobody relays), no caches
/// in Redis, no rate limit.
pub fn comment_service(
    db: &platform::db::Db,
    events: platform::events::EventStream,
) -> crate::comment::CommentService {
    use crate::{comment, interactive};
    use platform::events::outbox::Outbox;
    let outbox = Outbox::new(db.clone(), events.clone());
    let interactive = interactive::InteractiveService::new(
        interactive::store::InteractiveStore::new(db.clone()),
        events,
        outbox.clone(),
        None,
        32 << 20,
    );
    let mut config = platform::config::Config::with_defaults(&[comment::settings::SETTINGS]);
    config
        .settings_mut::<comment::CommentSettings>()
        .comment_rate_limit = 0;
    let live = platform::live::LiveConfig::new(std::sync::Arc::new(config));
    let limiter = platform::live::LiveRateLimiter::new(
        "comment",
        &live,
        None,
        comment::settings::comment_limit,
    )
    .expect("a comment limiter that is off");
    comment::CommentService::new(
        comment::CommentStore::new(db.clone()),
        interactive,
        outbox,
        limiter,
    )
    .expect("a comment service without a rate limit")
}
