//! The SQL store: one connection pool for SQLite (embedded) or PostgreSQL (cluster), chosen by
//! the URL scheme, and the runner of the schema migrations the application hands in.
//!
//! Every query in webook is written once and runs on both engines through sqlx's `Any` driver:
//! `$N` placeholders, `INSERT … ON CONFLICT … DO UPDATE`, `RETURNING`, `BIGINT` milliseconds for
//! times. The one thing SQL cannot say portably is an auto-increment primary key, so migrations
//! write `{{id}}` and [`expand_dialect`] turns it into each engine's spelling before sqlx runs it.
//!
//! SQLite connections are set up for a server: WAL (readers never block the writer), a busy
//! timeout (writers queue instead of failing), foreign keys on, `synchronous=NORMAL` (durable
//! with WAL); the file (mode 0600) and its directory (0700) are created on first run.
//!
//! **A failed write never poisons the connection.** When a disk fills up, SQLite may roll a
//! whole transaction back by itself; sqlx's `ROLLBACK` then fails and sqlx still counts the
//! connection as inside a transaction, so its next `begin` becomes a `SAVEPOINT` nested in a
//! transaction that never commits — writes answered as committed that are not, and a write lock
//! held forever. So every SQLite connection coming back to a pool that still counts as inside a
//! transaction is checked again after its pending rollback ran, and closed if it still does;
//! the pool opens a fresh one. (PostgreSQL ends failed transactions itself and treats a
//! ROLLBACK of none as a warning, so its count cannot drift like this.) A
//! commit that fails therefore fails its caller, and every later write gets a clean connection
//! that either writes durably or fails too (until space is freed). `/readyz` probes the writer
//! with a real write ([`Db::probe_writer`]).
//!
//! **A write outside a transaction that returns rows (`RETURNING`) is read to its end**
//! (`fetch_all`), never with `fetch_one` or `fetch_optional`. Such a statement commits when it
//! finishes, and SQLite reports a commit that fails (a full disk) only then — after its first
//! row was already handed out; sqlx's `fetch_one`/`fetch_optional` stop at that row and reset
//! the statement, which loses the error: the caller sees the row of a write that was rolled
//! back (a refresh answered with new tokens while the session stayed at its old generation).
//! Inside a transaction the commit is its own statement, checked by its caller.
//!
//! Pools are [`DbPool`]s: while the database is unreachable they fail at once instead of each
//! query waiting out the acquire timeout ([`pool`]).

pub mod circuit;
pub mod direct;
pub mod locks;
pub mod pool;
mod route;

pub use circuit::{caused_by_unavailable_database, is_unavailable};
pub use pool::DbPool;
pub use route::{caused_by_fence, Paused, FENCED_MESSAGE};

use std::{
    borrow::Cow,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::Context;
use sqlx::{
    any::AnyPoolOptions,
    migrate::{MigrationType, Migrator},
    AnyConnection, Connection,
};

use circuit::Circuit;
use route::{Engine, PoolSide, Routing};

use crate::{
    config::{database_kind, Config, DatabaseKind},
    redact_url,
};

/// One schema migration. The application lists every feature's migrations in version order
/// and hands them to [`Db::migrate`]; the platform's own tables come as the constants below.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Position in the schema's history; strictly increasing over the list.
    pub version: i64,
    /// What it creates, for `_sqlx_migrations`.
    pub description: &'static str,
    /// Portable SQL with `{{…}}` dialect placeholders ([`expand_dialect`]).
    pub sql: &'static str,
    /// SQLite's own version of the migration, when SQLite cannot say it as `sql` does: changing
    /// a column's constraints means rebuilding the table, with foreign keys off, which SQLite
    /// only allows outside a transaction. So this SQL runs without sqlx's transaction and
    /// brings its own `BEGIN … COMMIT`.
    pub sqlite_without_transaction: Option<&'static str>,
}

impl Migration {
    /// Migration `version`, described as `description`, running `sql`.
    pub const fn new(version: i64, description: &'static str, sql: &'static str) -> Self {
        Self {
            version,
            description,
            sql,
            sqlite_without_transaction: None,
        }
    }

    /// Migration `version` running `postgres` on PostgreSQL and `sqlite` on SQLite, the latter
    /// outside sqlx's transaction (see [`Migration::sqlite_without_transaction`]).
    pub const fn per_engine(
        version: i64,
        description: &'static str,
        postgres: &'static str,
        sqlite: &'static str,
    ) -> Self {
        Self {
            version,
            description,
            sql: postgres,
            sqlite_without_transaction: Some(sqlite),
        }
    }

    /// The SQL this migration runs on `kind`, placeholders not yet expanded, and whether it runs
    /// without a transaction of sqlx's.
    pub fn sql_for(&self, kind: DatabaseKind) -> (&'static str, bool) {
        match (kind, self.sqlite_without_transaction) {
            (DatabaseKind::Sqlite, Some(sql)) => (sql, true),
            _ => (self.sql, false),
        }
    }
}

/// The `meta` table (schema facts such as `last_migrated_by`); the first migration of a schema.
pub const META_MIGRATION: Migration =
    Migration::new(1, "meta", include_str!("../../migrations/0001_meta.sql"));

/// The transactional outbox of [`crate::events::outbox`].
pub const OUTBOX_MIGRATION: Migration = Migration::new(
    10,
    "event outbox",
    include_str!("../../migrations/0010_event_outbox.sql"),
);

/// The outbox rows' trace context ([`crate::tracing_otlp`]).
pub const OUTBOX_TRACE_MIGRATION: Migration = Migration::new(
    44,
    "event outbox trace context",
    include_str!("../../migrations/0044_outbox_traceparent.sql"),
);

/// Consumer groups' progress through the outbox and their parked events
/// ([`crate::events::delivery`], [`crate::events::parked`]).
pub const EVENT_GROUPS_MIGRATION: Migration = Migration::new(
    23,
    "event groups",
    include_str!("../../migrations/0023_event_groups.sql"),
);

const SQLITE_PRAGMAS: &str = "PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; \
     PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;";

/// The page cache of each SQLite read connection (KiB; SQLite's default is 2 000). In WAL
/// mode a connection's cache is emptied whenever another connection has written since its last
/// read, so under writes the readers' caches hold little, and the OS's page cache serves the
/// file either way; at the default, the 16 pooled readers' caches (up to 32 MB) were most of
/// the 30–50 MB they held after a burst (the search index build). The writer keeps the
/// default: nobody else writes under it.
const SQLITE_READER_CACHE: &str = "PRAGMA cache_size = -256;";

/// A pooled connection idle at least this long is pinged before it is handed out (a dead one is
/// closed and another taken). sqlx pings every connection when it comes back to the pool, and by
/// default again before handing it out — on PostgreSQL a round trip before every query
/// (docs/PERFORMANCE.md → HTTP → No ping before each query). A connection idle for less than
/// this was alive when it was returned; one that sat longer may have lost its server meanwhile
/// (a restart takes longer than this). The cost: a connection that lost its server and is used
/// again within this time fails that one query, and is dropped.
const PING_WHEN_IDLE_FOR: Duration = Duration::from_secs(1);

/// How long the first, direct connection at start-up may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub use crate::config::DEFAULT_ACQUIRE_TIMEOUT;
/// How long a write waits for SQLite's single writer connection: writers queue there by design
/// (see [`Db`]), so the wait is the queue, not an outage.
const SQLITE_WRITER_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// A pool of connections to the SQL store, cheap to clone.
///
/// SQLite allows one writer at a time; writers that collide wait in SQLite's busy handler,
/// which sleeps in growing steps (tens of milliseconds) — long tails under write load. So for
/// SQLite, writes go through a pool of exactly one connection ([`Db::writer`]): writers queue
/// fairly in the pool instead, and readers keep the other connections (WAL lets them read
/// while the writer writes). For PostgreSQL both are the same pool.
///
/// Both pools are routed ([`route`]): an online database move can send every later query to
/// another database while the process serves ([`Db::pause`]).
#[derive(Debug, Clone)]
pub struct Db {
    routing: Arc<Routing>,
    pool: DbPool,
    writer: DbPool,
}

/// Below this much free space on the SQLite file's filesystem, the writer counts as unable to
/// write: a commit may still fit into space the write-ahead log already holds, but the next
/// larger one will not.
pub const MIN_FREE_BYTES: u64 = 1024 * 1024;

impl Db {
    /// Connects to `config.database_url()`, creating the SQLite file and its directory if needed.
    pub async fn connect(config: &Config) -> anyhow::Result<Self> {
        Self::connect_with(
            &config.database_url(),
            config.database_max_connections,
            config.database_acquire_timeout,
        )
        .await
    }

    /// Connects to `url` with at most `max_connections` connections and the default acquire
    /// timeout.
    pub async fn connect_url(url: &str, max_connections: u32) -> anyhow::Result<Self> {
        Self::connect_with(url, max_connections, DEFAULT_ACQUIRE_TIMEOUT).await
    }

    /// Connects to `url` with at most `max_connections` connections, queries waiting at most
    /// `acquire_timeout` for one; fails with a message that names the setting when the database
    /// cannot be reached.
    pub async fn connect_with(
        url: &str,
        max_connections: u32,
        acquire_timeout: Duration,
    ) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let kind = database_kind(url)?;
        let (connect_url, sqlite_file) = match kind {
            DatabaseKind::Sqlite => (prepare_sqlite_url(url)?, sqlite_file(url)),
            DatabaseKind::Postgres => (url.to_owned(), None),
        };
        let describe = || {
            format!(
                "cannot connect to database_url (WEBOOK_DATABASE_URL) {}",
                redact_url(url)
            )
        };
        // One direct attempt first: the pool retries until its timeout and then reports only
        // "timed out", while this surfaces the real cause (refused, auth failed, no such db).
        let probe = tokio::time::timeout(CONNECT_TIMEOUT, AnyConnection::connect(&connect_url))
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {CONNECT_TIMEOUT:?}"))
            .and_then(|connected| connected.map_err(anyhow::Error::from))
            .with_context(describe)?;
        probe.close().await.ok();
        let pool_options = |size: u32, acquire_timeout: Duration, reader: bool| {
            AnyPoolOptions::new()
                .max_connections(size)
                .acquire_timeout(acquire_timeout)
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for < PING_WHEN_IDLE_FOR {
                            return Ok(true);
                        }
                        Ok(sqlx::Connection::ping(conn).await.is_ok())
                    })
                })
                .after_connect(move |conn, _meta| {
                    Box::pin(async move {
                        if kind == DatabaseKind::Sqlite {
                            sqlx::Executor::execute(&mut *conn, SQLITE_PRAGMAS).await?;
                            if reader {
                                sqlx::Executor::execute(&mut *conn, SQLITE_READER_CACHE).await?;
                            }
                        }
                        Ok(())
                    })
                })
        };
        // SQLite only: PostgreSQL ends a failed transaction on the server's side, and its
        // ROLLBACK of no transaction is a warning, so its count cannot go wrong this way.
        let pool_options = |size: u32, acquire_timeout: Duration, reader: bool| match kind {
            DatabaseKind::Sqlite => pool_options(size, acquire_timeout, reader)
                .after_release(|conn, _meta| Box::pin(release_if_clean(conn))),
            DatabaseKind::Postgres => pool_options(size, acquire_timeout, reader),
        };
        let pool = pool_options(max_connections, acquire_timeout, true)
            .connect_lazy(&connect_url)
            .with_context(describe)?;
        open_first_connection(&pool).await.with_context(describe)?;
        let writer = match kind {
            DatabaseKind::Sqlite => {
                let writer =
                    pool_options(1, SQLITE_WRITER_ACQUIRE_TIMEOUT.max(acquire_timeout), false)
                        .connect_lazy(&connect_url)
                        .with_context(describe)?;
                open_first_connection(&writer)
                    .await
                    .with_context(describe)?;
                writer
            }
            DatabaseKind::Postgres => pool.clone(),
        };
        let routing = Arc::new(Routing::new(Engine {
            pool,
            writer,
            circuit: Arc::new(Circuit::new(kind)),
            kind,
            sqlite_file,
        }));
        Ok(Self {
            pool: DbPool::new(routing.clone(), PoolSide::Reads),
            writer: DbPool::new(routing.clone(), PoolSide::Writes),
            routing,
        })
    }

    /// Pauses every query of this process through this `Db` and waits until each connection
    /// is back in its pool (at most `within`); while the returned guard lives, nothing runs
    /// through the stores and [`Db::route_to`] may send them elsewhere ([`route`]).
    pub async fn pause(&self, within: Duration) -> anyhow::Result<Paused> {
        self.routing.pause(within).await
    }

    /// Waits while this `Db` is paused (for code that takes raw pools, [`DbPool::any_pool`]).
    pub async fn wait_until_open(&self) {
        self.routing.wait_until_open().await;
    }

    /// Sends every later query to the database `other` is routed to now; allowed only while
    /// paused (`_paused` proves it).
    pub fn route_to(&self, _paused: &Paused, other: &Db) {
        _paused.route_to(other.routing.engine());
    }

    /// A `Db` on the database this one is routed to now that keeps going there whatever this
    /// one is routed to later.
    pub fn detached(&self) -> Db {
        let routing = Arc::new(Routing::from_engine(self.routing.engine()));
        Db {
            pool: DbPool::new(routing.clone(), PoolSide::Reads),
            writer: DbPool::new(routing.clone(), PoolSide::Writes),
            routing,
        }
    }

    /// Whether this and `other` are routed to the same database now.
    pub fn routes_like(&self, other: &Db) -> bool {
        Arc::ptr_eq(&self.routing.engine(), &other.routing.engine())
    }

    /// The pool for reads.
    pub fn pool(&self) -> &DbPool {
        &self.pool
    }

    /// The pool for writes and write transactions (one connection on SQLite; see [`Db`]).
    pub fn writer(&self) -> &DbPool {
        &self.writer
    }

    /// Which engine this is routed to now. An online move may re-route before a query that
    /// has not yet taken its connection runs: SQL written for an engine is chosen with
    /// [`kind_of`] on the connection or transaction it runs on, not with this.
    pub fn kind(&self) -> DatabaseKind {
        self.routing.engine().kind
    }

    /// The SQLite file this is routed to now (`None` on PostgreSQL or for an in-memory
    /// database): what [`direct::read`] opens.
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        self.routing.engine().sqlite_file.clone()
    }

    /// Runs the point read `read` inline on a SQLite file this is routed to now
    /// ([`direct::read_inline`]); `None` when that is not possible (PostgreSQL, an in-memory
    /// database) or the read failed (a lock, say), and the caller reads through the pools.
    pub fn read_inline<R>(
        &self,
        read: impl FnOnce(&direct::rusqlite::Connection) -> direct::rusqlite::Result<R>,
    ) -> Option<R> {
        let engine = self.routing.engine();
        let file = engine.sqlite_file.as_deref()?;
        match direct::read_inline(file, read) {
            Ok(value) => Some(value),
            Err(err) => {
                tracing::debug!(
                    error = format!("{err:#}"),
                    "inline read failed; using the pool"
                );
                None
            }
        }
    }

    /// Applies pending migrations (under the engine's migration lock, so concurrent starts are
    /// safe) and records the running version in `meta`. Returns how many were applied.
    pub async fn migrate(&self, migrations: &[Migration]) -> anyhow::Result<usize> {
        let kind = self.kind();
        let migrator = migrator(kind, migrations);
        let before = self.applied_versions().await?;
        if kind == DatabaseKind::Sqlite {
            self.apply_sqlite_without_transaction(&migrator).await?;
        }
        migrator
            .run(&self.pool.any_pool())
            .await
            .context("running migrations")?;
        let applied = migrator
            .iter()
            .filter(|m| !before.contains(&m.version))
            .count();
        let now = now_millis();
        let mut tx = self.writer.begin().await?;
        sqlx::query(
            "INSERT INTO meta (name, value, utime) VALUES ('schema_created_at', $1, $2) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(now.to_string())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO meta (name, value, utime) VALUES ('last_migrated_by', $1, $2) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, utime = excluded.utime",
        )
        .bind(env!("CARGO_PKG_VERSION"))
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(applied)
    }

    /// Applies the SQLite migrations that must run outside a transaction
    /// ([`Migration::sqlite_without_transaction`]): sqlx's SQLite driver wraps every migration
    /// in a transaction of its own whatever its `no_tx` flag says, which such a script (bringing
    /// its own `BEGIN … COMMIT`, with foreign keys off around it) cannot run in. Each one, in
    /// version order: the migrations before it through sqlx, then its script on one connection,
    /// then its `_sqlx_migrations` row with sqlx's checksum, so sqlx's own run afterwards counts
    /// it as applied. As with sqlx's `no_tx` migrations on PostgreSQL, the script and its row are
    /// not one transaction.
    async fn apply_sqlite_without_transaction(&self, migrator: &Migrator) -> anyhow::Result<()> {
        for migration in migrator.iter().filter(|migration| migration.no_tx) {
            let mut earlier = Migrator {
                migrations: Cow::Owned(
                    migrator
                        .iter()
                        .filter(|earlier| earlier.version < migration.version)
                        .cloned()
                        .collect(),
                ),
                ..Migrator::DEFAULT
            };
            // Later migrations may be applied already (a restart): not an error here.
            earlier.set_ignore_missing(true);
            earlier
                .run(&self.pool.any_pool())
                .await
                .context("running migrations")?;
            if self.applied_versions().await?.contains(&migration.version) {
                continue;
            }
            let mut connection = self.pool.any_pool().acquire().await?;
            let started = std::time::Instant::now();
            // Every statement of the script, on this one connection (a query without
            // arguments may hold several).
            let script: &str = &migration.sql;
            if let Err(err) = sqlx::Executor::execute(&mut *connection, script).await {
                // It may have stopped inside its transaction or with foreign keys off: the
                // connection does not go back to the pool.
                drop(connection.detach());
                return Err(err).with_context(|| {
                    format!(
                        "running migrations: while executing migration {} (outside a transaction)",
                        migration.version
                    )
                });
            }
            let elapsed = i64::try_from(started.elapsed().as_nanos()).unwrap_or(i64::MAX);
            sqlx::query(
                "INSERT INTO _sqlx_migrations \
                 (version, description, success, checksum, execution_time) \
                 VALUES ($1, $2, TRUE, $3, $4)",
            )
            .bind(migration.version)
            .bind(migration.description.to_string())
            .bind(migration.checksum.to_vec())
            .bind(elapsed)
            .execute(&mut *connection)
            .await
            .context("recording a migration run outside a transaction")?;
        }
        Ok(())
    }

    /// Versions of the migrations already applied (empty on a fresh database).
    pub async fn applied_versions(&self) -> anyhow::Result<Vec<i64>> {
        let table = match self.kind() {
            DatabaseKind::Sqlite => {
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'"
            }
            DatabaseKind::Postgres => {
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name = '_sqlx_migrations'"
            }
        };
        let exists: i64 = sqlx::query_scalar(table).fetch_one(&self.pool).await?;
        if exists == 0 {
            return Ok(Vec::new());
        }
        let versions = sqlx::query_scalar(
            "SELECT version FROM _sqlx_migrations WHERE success ORDER BY version",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(versions)
    }

    /// Checks that the database answers a trivial query within `timeout`.
    pub async fn ping(&self, timeout: Duration) -> anyhow::Result<()> {
        tokio::time::timeout(timeout, sqlx::query("SELECT 1").execute(&self.pool))
            .await
            .context("database did not answer in time")??;
        Ok(())
    }

    /// Checks that the writer can commit within `timeout`: on SQLite, that the file's
    /// filesystem has [`MIN_FREE_BYTES`] free; then one small upsert of `meta`, through the
    /// same connection and commit path as every write (a full disk fails it).
    pub async fn probe_writer(&self, timeout: Duration) -> anyhow::Result<()> {
        if let Some(file) = &self.routing.engine().sqlite_file {
            let dir = file.parent().filter(|dir| !dir.as_os_str().is_empty());
            let (free, _) = crate::health::space(dir.unwrap_or(Path::new(".")))
                .with_context(|| format!("checking free space beside {}", file.display()))?;
            if free < MIN_FREE_BYTES {
                anyhow::bail!(
                    "only {free} bytes free on the filesystem of {} (less than {MIN_FREE_BYTES})",
                    file.display()
                );
            }
        }
        let now = now_millis();
        let write = sqlx::query(
            "INSERT INTO meta (name, value, utime) VALUES ('writer_probe', $1, $2) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value, utime = excluded.utime",
        )
        .bind(now.to_string())
        .bind(now)
        .execute(&self.writer);
        tokio::time::timeout(timeout, write)
            .await
            .context("the writer did not commit in time")??;
        Ok(())
    }

    /// Closes the pools, waiting for checked-out connections to come back.
    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }
}

/// `migrations` as sqlx's migrator, expanded for `kind`.
pub fn migrator(kind: DatabaseKind, migrations: &[Migration]) -> Migrator {
    let migrations = migrations
        .iter()
        .map(|migration| {
            let (sql, no_transaction) = migration.sql_for(kind);
            sqlx::migrate::Migration::new(
                migration.version,
                Cow::Borrowed(migration.description),
                MigrationType::Simple,
                Cow::Owned(expand_dialect(sql, kind)),
                no_transaction,
            )
        })
        .collect::<Vec<_>>();
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}

/// Replaces the dialect placeholders of portable SQL with `kind`'s spelling:
/// `{{id}}` is an auto-increment 64-bit primary key.
pub fn expand_dialect(sql: &str, kind: DatabaseKind) -> String {
    let id = match kind {
        // Exactly "INTEGER PRIMARY KEY" makes the column the rowid (64-bit); AUTOINCREMENT
        // stops ids of deleted rows from being handed out again.
        DatabaseKind::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
        DatabaseKind::Postgres => "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    };
    sql.replace("{{id}}", id)
}

/// `$first, $first+1, …`: `count` numbered placeholders, for `IN (…)` lists built at run time.
pub fn placeholders(first: usize, count: usize) -> String {
    (first..first + count)
        .map(|n| format!("${n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `($1, $2), ($3, $4), …`: `rows` rows of `columns` numbered placeholders, for multi-row
/// `VALUES`.
pub fn row_placeholders(rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|row| format!("({})", placeholders(row * columns + 1, columns)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One past the largest `id` in `table` (1 when empty): the id the next row given an explicit id
/// takes, read in the caller's transaction on `conn`. `table` is a name from the code.
pub async fn next_free_id(
    conn: &mut sqlx::AnyConnection,
    table: &'static str,
) -> sqlx::Result<i64> {
    let largest: i64 = sqlx::query_scalar(&format!("SELECT COALESCE(MAX(id), 0) FROM {table}"))
        .fetch_one(&mut *conn)
        .await?;
    Ok(largest + 1)
}

/// After rows were inserted into `table` with explicit ids: on PostgreSQL, moves the identity
/// sequence of its `id` column past the largest id, so rows inserted later get fresh ids (in
/// the caller's transaction on `conn`). SQLite's `AUTOINCREMENT` keeps track by itself:
/// nothing to do there. `table` is a name from the code, never from input.
pub async fn advance_id_sequence(
    conn: &mut sqlx::AnyConnection,
    table: &'static str,
) -> sqlx::Result<()> {
    if kind_of(conn) == DatabaseKind::Postgres {
        sqlx::query(&format!(
            "SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))"
        ))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// [`row_placeholders`] for statements with thousands of values: anonymous `?` on SQLite, whose
/// lookup of a numbered parameter's name scans every parameter before it (sqlx asks for each
/// one's name, so `$N` binding is quadratic and dominated bulk loads; docs/PERFORMANCE.md →
/// Datasets); `$N` on PostgreSQL, which knows no `?`.
pub fn bulk_row_placeholders(kind: DatabaseKind, rows: usize, columns: usize) -> String {
    match kind {
        DatabaseKind::Postgres => row_placeholders(rows, columns),
        DatabaseKind::Sqlite => {
            let row = format!("({})", vec!["?"; columns].join(", "));
            vec![row.as_str(); rows].join(", ")
        }
    }
}

/// SQL for the set of ids bound as the one parameter `$param`, for `… IN ({id_set})`: a JSON
/// array read by `json_each` on SQLite, an array literal cast to `bigint[]` and unnested on
/// PostgreSQL (bind [`id_set_value`]). The statement's text is the same whatever the number of
/// ids, so it is prepared once and kept in the connection's statement cache, where an `IN` list
/// of one placeholder per id is a statement of its own for every length — and on SQLite, bound
/// through sqlx, costs a parameter-name scan per id (see [`bulk_row_placeholders`]). Nor does it
/// meet the limits on parameters per statement (SQLite's `too many SQL variables`, sqlx's 65 535
/// on PostgreSQL).
pub fn id_set(kind: DatabaseKind, param: usize) -> String {
    match kind {
        DatabaseKind::Sqlite => format!("SELECT value FROM json_each(${param})"),
        DatabaseKind::Postgres => format!("SELECT unnest(${param}::text::bigint[])"),
    }
}

/// The engine `connection` (or a transaction, through `Deref`) talks to: what SQL written for
/// one engine must be chosen by, since a routed [`Db`] may change engines between asking
/// [`Db::kind`] and taking a connection.
pub fn kind_of(connection: &sqlx::AnyConnection) -> DatabaseKind {
    if connection.backend_name() == "PostgreSQL" {
        DatabaseKind::Postgres
    } else {
        DatabaseKind::Sqlite
    }
}

/// The value to bind for [`id_set`]: `[1,2,3]` on SQLite, `{1,2,3}` on PostgreSQL.
pub fn id_set_value(kind: DatabaseKind, ids: &[i64]) -> String {
    use std::fmt::Write as _;
    let (open, close) = match kind {
        DatabaseKind::Sqlite => ('[', ']'),
        DatabaseKind::Postgres => ('{', '}'),
    };
    let mut value = String::with_capacity(2 + ids.len() * 8);
    value.push(open);
    for (index, id) in ids.iter().enumerate() {
        if index > 0 {
            value.push(',');
        }
        let _ = write!(value, "{id}");
    }
    value.push(close);
    value
}

/// `duration` in milliseconds, the unit of every time column (saturating).
pub fn duration_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Milliseconds since the Unix epoch, the unit of every time column.
pub fn now_millis() -> i64 {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX)
}

/// Whether a SQLite connection coming back to its pool may be used again: not if it still
/// counts as inside a transaction once its pending rollback ran (module docs). A committed or
/// transaction-less connection counts none and is released at once; otherwise a ping first lets
/// the rollback that dropping the transaction queued run (a connection's commands run in
/// order), so a successful rollback is not mistaken for a stuck one.
async fn release_if_clean(conn: &mut AnyConnection) -> Result<bool, sqlx::Error> {
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    conn.ping().await?;
    if conn.is_in_transaction() {
        tracing::warn!(
            "a database connection is stuck in a failed transaction (a commit or rollback \
             failed, e.g. on a full disk); closing it"
        );
        return Ok(false);
    }
    Ok(true)
}

/// Creates the directory of a SQLite URL's file (0700) and the file itself (0600) when they do
/// not exist (they hold emails and password hashes), unless the URL names its own `mode=`.
/// Opens `pool`'s first connection, allowing it [`CONNECT_TIMEOUT`] rather than the pool's
/// acquire timeout: on a loaded machine opening a SQLite file (WAL set-up included) can take
/// longer than a query may wait for a connection, and a start-up should not fail for that.
async fn open_first_connection(pool: &sqlx::AnyPool) -> Result<(), sqlx::Error> {
    let deadline = std::time::Instant::now() + CONNECT_TIMEOUT;
    loop {
        match pool.acquire().await {
            Ok(_) => return Ok(()),
            Err(sqlx::Error::PoolTimedOut) if std::time::Instant::now() < deadline => {}
            Err(err) => return Err(err),
        }
    }
}

/// The URL sqlx connects with for `url`: SQLite's file options added (its directory created),
/// PostgreSQL's as it is.
pub fn connect_url(url: &str) -> anyhow::Result<String> {
    match database_kind(url)? {
        DatabaseKind::Sqlite => prepare_sqlite_url(url),
        DatabaseKind::Postgres => Ok(url.to_owned()),
    }
}

fn prepare_sqlite_url(url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let explicit_mode = query.split('&').any(|kv| kv.starts_with("mode="));
    if path != ":memory:" && !path.is_empty() && !explicit_mode {
        if let Some(dir) = Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            create_private_dir(dir).with_context(|| {
                format!("creating the directory of database_url {}", dir.display())
            })?;
        }
        create_private_file(Path::new(path))
            .with_context(|| format!("creating the database file {path}"))?;
    }
    Ok(if explicit_mode {
        url.to_owned()
    } else if query.is_empty() {
        format!("sqlite://{path}?mode=rwc")
    } else {
        format!("sqlite://{path}?{query}&mode=rwc")
    })
}

/// The file of a `sqlite://` URL (`None` for an in-memory database).
pub fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let path = rest.split_once('?').map_or(rest, |(path, _)| path);
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

/// Creates `dir` and any missing parents with mode 0700 (existing ones are left as they are).
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Creates `path` as a new file with mode 0600, for writing (an error if it exists).
pub fn create_private_new(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// Flushes `path` to disk: a file's data, or a directory's entries (new names, renames).
pub fn sync_path(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// Creates an empty file with mode 0600 unless `path` exists; SQLite then creates its `-wal`
/// and `-shm` files with the database file's mode.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    match create_private_new(path) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's readers keep a small page cache, the writer SQLite's default.
    #[tokio::test]
    async fn sqlite_readers_keep_a_small_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("webook.db").display());
        let db = Db::connect_url(&url, 2).await.unwrap();
        let size = |pool: sqlx::AnyPool| async move {
            sqlx::query_scalar::<_, i64>("PRAGMA cache_size")
                .fetch_one(&pool)
                .await
                .unwrap()
        };
        assert_eq!(size(db.pool().any_pool()).await, -256);
        assert_eq!(size(db.writer().any_pool()).await, -2000);
    }

    /// A pooled PostgreSQL connection whose server process went away: used again at once (no
    /// ping before it, so no round trip before every query) its query fails and the connection
    /// is dropped, the next query gets a new one; left idle past [`PING_WHEN_IDLE_FOR`] it is
    /// pinged, found dead and replaced before the query, which succeeds.
    #[tokio::test]
    async fn a_pooled_connection_is_pinged_only_after_sitting_idle() {
        let test = crate::testing::TestDb::empty_postgres().await;
        let db = Db::connect_url(&test.url, 1).await.unwrap();
        let admin = Db::connect_url(&test.url, 1).await.unwrap();
        let backend = || async {
            sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()")
                .fetch_one(db.pool())
                .await
        };
        let kill = |pid: i32| {
            let admin = admin.clone();
            async move {
                // Waits (up to 5 s) until the backend is gone, so the next query cannot race it.
                let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
                    .bind(pid)
                    .fetch_one(admin.pool())
                    .await
                    .unwrap();
                assert!(killed);
            }
        };

        // A connection goes back to the pool in a task of its own (sqlx checks it on the way):
        // killed before it is back, that check finds it dead and the pool opens a new one, so
        // each kill waits for the connection to be idle in the pool.
        let back_in_pool = || {
            crate::testing::wait_until("the connection back in the pool", || async {
                db.pool().any_pool().num_idle() == 1
            })
        };
        // "At once" is within PING_WHEN_IDLE_FOR of the connection's return; a kill slower than
        // that on a loaded machine gets the connection pinged and replaced (as it should), so
        // the round does not count and is run again.
        let mut rounds = 0;
        let first = loop {
            rounds += 1;
            let first = backend().await.unwrap();
            back_in_pool().await;
            let returned = std::time::Instant::now();
            kill(first).await;
            let at_once = returned.elapsed() < PING_WHEN_IDLE_FOR / 2;
            let reused = backend().await;
            if at_once {
                assert!(
                    reused.is_err(),
                    "a connection used again at once is not pinged first"
                );
                break first;
            }
            assert!(
                rounds < 10,
                "no kill finished within {:?} of the connection's return in {rounds} rounds",
                PING_WHEN_IDLE_FOR / 2
            );
        };
        let second = backend().await.unwrap();
        assert_ne!(second, first, "the dead connection was dropped");

        back_in_pool().await;
        kill(second).await;
        // The idle time is what is under test, not a wait for something to happen.
        tokio::time::sleep(PING_WHEN_IDLE_FOR + Duration::from_millis(200)).await;
        let third = backend().await.unwrap();
        assert_ne!(
            third, second,
            "pinged, found dead, replaced before the query"
        );
    }

    /// The SQLite linked in (one library, under sqlx and the inline reads alike) is built by
    /// `.cargo/config.toml`'s flags: no page-cache group and no memory statistics shared by all
    /// connections, each behind a process-wide mutex the async workers slept on.
    #[tokio::test]
    async fn sqlite_is_built_without_process_wide_mutexes() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("webook.db").display());
        let db = Db::connect_url(&url, 2).await.unwrap();
        let through_sqlx: Vec<String> = sqlx::query_scalar("PRAGMA compile_options")
            .fetch_all(&db.pool().any_pool())
            .await
            .unwrap();
        let file = db.sqlite_file().unwrap();
        let inline: Vec<String> = db
            .read_inline(|connection| {
                let mut statement = connection.prepare("PRAGMA compile_options")?;
                let options = statement.query_map([], |row| row.get(0))?;
                options.collect()
            })
            .unwrap();
        assert_eq!(through_sqlx, inline, "one SQLite library ({file:?})");
        for option in ["DEFAULT_MEMSTATUS=0", "DISABLE_PAGECACHE_OVERFLOW_STATS"] {
            assert!(inline.iter().any(|o| o == option), "{option} in {inline:?}");
        }
        assert!(
            !inline.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "{inline:?}"
        );
    }

    #[test]
    fn dialect_placeholders_expand_for_each_engine() {
        let sql = "CREATE TABLE t (id {{id}}, name TEXT)";
        assert_eq!(
            expand_dialect(sql, DatabaseKind::Sqlite),
            "CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT)"
        );
        assert!(expand_dialect(sql, DatabaseKind::Postgres).contains("GENERATED BY DEFAULT"));
    }

    #[test]
    fn placeholders_number_from_where_they_are_told() {
        assert_eq!(placeholders(2, 3), "$2, $3, $4");
        assert_eq!(row_placeholders(2, 3), "($1, $2, $3), ($4, $5, $6)");
        assert_eq!(row_placeholders(0, 3), "");
    }

    #[test]
    fn id_sets_are_one_parameter_in_each_engines_literal() {
        assert_eq!(
            id_set_value(DatabaseKind::Sqlite, &[3, -1, 40]),
            "[3,-1,40]"
        );
        assert_eq!(
            id_set_value(DatabaseKind::Postgres, &[3, -1, 40]),
            "{3,-1,40}"
        );
        assert_eq!(id_set_value(DatabaseKind::Sqlite, &[]), "[]");
        assert_eq!(id_set_value(DatabaseKind::Postgres, &[]), "{}");
        assert_eq!(
            id_set(DatabaseKind::Sqlite, 2),
            "SELECT value FROM json_each($2)"
        );
        assert_eq!(
            id_set(DatabaseKind::Postgres, 2),
            "SELECT unnest($2::text::bigint[])"
        );
    }

    #[test]
    fn sqlite_urls_get_create_mode_and_private_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a/b/webook.db");
        let url = prepare_sqlite_url(&format!("sqlite://{}", file.display())).unwrap();
        assert_eq!(url, format!("sqlite://{}?mode=rwc", file.display()));
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(file.parent().unwrap()), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert_eq!(mode(&file), 0o600);
        let elsewhere = dir.path().join("c/read-only.db");
        let url = prepare_sqlite_url(&format!("sqlite://{}?mode=ro", elsewhere.display())).unwrap();
        assert_eq!(url, format!("sqlite://{}?mode=ro", elsewhere.display()));
        assert!(!elsewhere.exists(), "an explicit mode creates nothing");
    }
}
