//! Test support for every crate of the workspace, compiled only with the `test-support` feature.
//!
//! - [`TestDb`]: a fresh database per test, migrated with the schema the caller names, on either
//!   engine — a SQLite file in a temp dir, or a new PostgreSQL database (dropped afterwards) on
//!   the server named by `WEBOOK_TEST_DATABASE_URL`. [`backend_tests!`](crate::backend_tests)
//!   turns one test body into a SQLite and a PostgreSQL test, so every store test is written once.
//! - [`redis_url`]: the shared test Redis (`WEBOOK_TEST_REDIS_URL`); [`RedisServer`]: a private
//!   `redis-server` a test may stop and restart; [`TcpProxy`]: a link a test can cut.
//! - [`imports`]: the import graph of a crate's modules, for the tests that hold its structure
//!   (no circles, features reached only through their front door).
//!
//! `scripts/test.sh` starts the servers and exports the variables. A test that needs one when it
//! is missing panics with a message saying so: nothing skips silently.

#![allow(clippy::expect_used)] // test support fails loudly by design

pub mod imports;

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use sqlx::{Connection, Executor, PgConnection};
use tokio::task::JoinHandle;

use crate::{
    config::DatabaseKind,
    db::{Db, Migration},
};

/// PostgreSQL server for tests; each test creates its own database on it.
pub const TEST_DATABASE_URL_ENV: &str = "WEBOOK_TEST_DATABASE_URL";
/// Shared Redis for tests.
pub const TEST_REDIS_URL_ENV: &str = "WEBOOK_TEST_REDIS_URL";
/// Path of the `redis-server` binary, for tests that run their own.
pub const TEST_REDIS_SERVER_ENV: &str = "WEBOOK_TEST_REDIS_SERVER";

/// How long tests wait for a condition (a server starting, a state change) before failing: far
/// above what any condition takes on a quiet machine (seconds at most), so a machine whose
/// cores are busy with other work slows the suite down but does not fail it. A passing wait
/// returns as soon as its condition holds; only a failing one waits this long.
pub const WAIT_LIMIT: Duration = Duration::from_secs(60);

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests through scripts/test.sh, which starts PostgreSQL and Redis")
    })
}

/// Polls `condition` every 20 ms until it holds; panics with `what` after [`WAIT_LIMIT`].
pub async fn wait_until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + WAIT_LIMIT;
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A fresh, migrated database that disappears when dropped.
pub struct TestDb {
    /// The open, migrated pool.
    pub db: Db,
    /// Its URL, for starting processes against it.
    pub url: String,
    cleanup: Cleanup,
}

enum Cleanup {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres {
        admin_url: String,
        name: String,
    },
    /// Somebody else's database: left as it is.
    Nothing,
}

impl TestDb {
    /// A fresh database on `kind`, migrated with `schema`.
    pub async fn new(kind: DatabaseKind, schema: &[Migration]) -> Self {
        match kind {
            DatabaseKind::Sqlite => Self::sqlite(schema).await,
            DatabaseKind::Postgres => Self::postgres(schema).await,
        }
    }

    /// The database at `url`, as it is (not migrated, not removed when dropped): one a test
    /// holds elsewhere, e.g. the destination of a database move.
    pub async fn existing(url: &str) -> Self {
        Self {
            db: Db::connect_url(url, 5)
                .await
                .expect("connecting to the existing database"),
            url: url.to_owned(),
            cleanup: Cleanup::Nothing,
        }
    }

    /// A SQLite file in a new temp dir, migrated with `schema`.
    pub async fn sqlite(schema: &[Migration]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        Self::sqlite_in(dir, schema).await
    }

    /// A SQLite file in `dir` (removed with it, e.g. on a small filesystem), migrated with
    /// `schema`.
    pub async fn sqlite_in(dir: tempfile::TempDir, schema: &[Migration]) -> Self {
        let url = format!("sqlite://{}", dir.path().join("webook.db").display());
        let db = Db::connect_url(&url, 4).await.expect("open SQLite");
        db.migrate(schema).await.expect("migrate SQLite");
        Self {
            db,
            url,
            cleanup: Cleanup::Sqlite(dir),
        }
    }

    /// A new, migrated database on the test PostgreSQL server whose tables live in
    /// `tablespace` (which the test created).
    pub async fn postgres_in_tablespace(tablespace: &str, schema: &[Migration]) -> Self {
        let (url, cleanup) =
            Self::empty_postgres_database_with(&format!(" TABLESPACE {tablespace}")).await;
        let db = Db::connect_url(&url, 4).await.expect("open PostgreSQL");
        db.migrate(schema).await.expect("migrate PostgreSQL");
        Self { db, url, cleanup }
    }

    /// A new database on the test PostgreSQL server, migrated with `schema`.
    pub async fn postgres(schema: &[Migration]) -> Self {
        let (url, cleanup) = Self::empty_postgres_database().await;
        let db = Db::connect_url(&url, 4).await.expect("open PostgreSQL");
        db.migrate(schema).await.expect("migrate PostgreSQL");
        Self { db, url, cleanup }
    }

    /// Creates an empty database; returns its URL and what drops it.
    async fn empty_postgres_database() -> (String, Cleanup) {
        Self::empty_postgres_database_with("").await
    }

    /// [`TestDb::empty_postgres_database`] with `options` appended to `CREATE DATABASE`.
    async fn empty_postgres_database_with(options: &str) -> (String, Cleanup) {
        let admin_url = required_env(TEST_DATABASE_URL_ENV);
        let name = format!("webook_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = PgConnection::connect(&admin_url)
            .await
            .unwrap_or_else(|err| panic!("connect to {TEST_DATABASE_URL_ENV}: {err}"));
        admin
            .execute(format!("CREATE DATABASE {name}{options}").as_str())
            .await
            .expect("create test database");
        admin.close().await.ok();
        let mut url = url::Url::parse(&admin_url).expect("valid test database URL");
        url.set_path(&format!("/{name}"));
        (url.to_string(), Cleanup::Postgres { admin_url, name })
    }

    /// An empty (unmigrated) PostgreSQL database, dropped with the returned guard; for tests of
    /// migrations themselves and of processes that migrate on start.
    pub async fn empty_postgres() -> EmptyPostgres {
        let (url, cleanup) = Self::empty_postgres_database().await;
        EmptyPostgres { url, cleanup }
    }
}

/// An empty PostgreSQL database, dropped with this value.
pub struct EmptyPostgres {
    /// Its URL.
    pub url: String,
    cleanup: Cleanup,
}

impl Drop for EmptyPostgres {
    fn drop(&mut self) {
        self.cleanup.run();
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        self.cleanup.run();
    }
}

impl Cleanup {
    fn run(&self) {
        let Cleanup::Postgres { admin_url, name } = self else {
            return;
        };
        // Drop runs inside the test's runtime, which cannot block on async work: use a thread
        // with its own small runtime. WITH (FORCE) ends connections still held by pools.
        let (admin_url, name) = (admin_url.clone(), name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let mut admin = PgConnection::connect(&admin_url).await?;
                admin
                    .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await?;
                admin.close().await?;
                Ok::<_, anyhow::Error>(())
            })
        })
        .join();
        if let Ok(Err(err)) = dropped {
            eprintln!("warning: could not drop test database: {err:#}");
        }
    }
}

/// Writes one test body as a SQLite test and a PostgreSQL test. The body is an async fn taking
/// a [`TestDb`] migrated with the schema named first:
///
/// ```text
/// async fn counts_start_at_zero(db: TestDb) { /* … */ }
/// platform::backend_tests!(webook::schema::MIGRATIONS; counts_start_at_zero);
/// ```
#[macro_export]
macro_rules! backend_tests {
    ($schema:path; $($name:ident),+ $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::testing::TestDb::sqlite(&$schema).await).await
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::testing::TestDb::postgres(&$schema).await).await
                }
            )+
        }
    };
}

/// The shared test Redis URL.
pub fn redis_url() -> String {
    required_env(TEST_REDIS_URL_ENV)
}

/// A private `redis-server` on a Unix socket in a temp dir, for tests that stop Redis.
pub struct RedisServer {
    dir: tempfile::TempDir,
    child: Option<Child>,
    persistent: bool,
}

impl RedisServer {
    /// Starts a server without persistence (a restart comes back empty) and waits until it
    /// answers.
    pub async fn start() -> Self {
        Self::start_with(false).await
    }

    /// Starts a server that persists every write (append-only file, fsync always), so a
    /// restart comes back with the data it had.
    pub async fn start_persistent() -> Self {
        Self::start_with(true).await
    }

    async fn start_with(persistent: bool) -> Self {
        let mut server = Self {
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
            persistent,
        };
        server.restart().await;
        server
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    /// `redis+unix://` URL of this server.
    pub fn url(&self) -> String {
        format!("redis+unix://{}", self.socket().display())
    }

    /// Starts the server again after [`RedisServer::stop`] (same socket; empty, or with its data
    /// when persistent).
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "redis-server already running");
        let binary = required_env(TEST_REDIS_SERVER_ENV);
        let child = Command::new(&binary)
            .args(["--port", "0", "--unixsocket"])
            .arg(self.socket())
            .args(["--unixsocketperm", "700", "--save", ""])
            .args(if self.persistent {
                ["--appendonly", "yes", "--appendfsync", "always"]
            } else {
                ["--appendonly", "no", "--appendfsync", "everysec"]
            })
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("start {binary}: {err}"));
        self.child = Some(child);
        let url = self.url();
        wait_until("private redis-server to answer PING", || {
            let url = url.clone();
            async move { ping(&url).await }
        })
        .await;
    }

    /// Makes the server refuse every write (`maxmemory 1`, `noeviction`: commands that add data
    /// fail with OOM, reads still work), or take writes again.
    pub async fn refuse_writes(&self, refuse: bool) {
        let mut connection = redis::Client::open(self.url())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect to the private redis-server");
        for (key, value) in [
            ("maxmemory-policy", "noeviction"),
            ("maxmemory", if refuse { "1" } else { "0" }),
        ] {
            let () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(key)
                .arg(value)
                .query_async(&mut connection)
                .await
                .expect("CONFIG SET");
        }
        if refuse {
            let refused: redis::RedisResult<()> = redis::cmd("SET")
                .arg("refuse-writes-probe")
                .arg("1")
                .query_async(&mut connection)
                .await;
            assert!(refused.is_err(), "redis-server still takes writes");
        }
    }

    /// Kills the server and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
        std::fs::remove_file(self.socket()).ok();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    redis::cmd("PING")
        .query_async::<String>(&mut connection)
        .await
        .is_ok()
}

/// A TCP proxy in front of a server, which a test can cut (the listener and every connection
/// dropped: new connections are refused, open ones end, as when the server stops) and restore
/// on the same address.
pub struct TcpProxy {
    /// Where clients connect.
    pub address: SocketAddr,
    target: SocketAddr,
    tasks: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

impl TcpProxy {
    /// Starts forwarding a free local port to `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let proxy = Self {
            address: listener.local_addr().expect("proxy address"),
            target,
            tasks: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    /// A proxy for the server of `url` (`scheme://user@host:port/…`); returns it and `url`
    /// pointing at the proxy instead.
    pub async fn for_url(url: &str) -> (Self, String) {
        let mut through = url::Url::parse(url).expect("a URL");
        let target: SocketAddr = format!(
            "{}:{}",
            through.host_str().expect("a host"),
            through.port().expect("a port")
        )
        .parse()
        .expect("an IP host");
        let proxy = Self::start(target).await;
        through
            .set_port(Some(proxy.address.port()))
            .expect("a port can be set");
        (proxy, through.to_string())
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let (target, tasks) = (self.target, self.tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let pipe = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                tasks.lock().expect("proxy tasks").push(pipe);
            }
        });
        self.tasks.lock().expect("proxy tasks").push(accept);
    }

    /// Drops the listener and every forwarded connection.
    pub fn cut(&self) {
        for task in self.tasks.lock().expect("proxy tasks").drain(..) {
            task.abort();
        }
    }

    /// Listens again on the same address.
    pub async fn restore(&self) {
        let listener = tokio::net::TcpListener::bind(self.address)
            .await
            .expect("bind the proxy again");
        self.serve(listener);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
    }
}
