//! The tables a move carries and the rows in them, engine-neutral: which tables and columns
//! both databases have and their primary keys ([`Table`]), rows read as [`Value`]s by keyset
//! batches or by key, written as multi-row upserts, deleted by key — and the capture triggers
//! and sequence positions a move needs ([`Side`]).
//!
//! The mover's own connections ([`Side::connect`]) are not the application's: on PostgreSQL they
//! run with `session_replication_role = replica`, so neither foreign keys nor the capture
//! triggers fire for what the mover writes (rows arrive in any order, and a copy is not a
//! change to copy back); on SQLite foreign keys are off and a write batch removes the change
//! entries its own writes logged (`work::QuietWrite`).

use std::{fmt::Write as _, time::Duration};

use anyhow::Context;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use sqlx::{
    any::{AnyPoolOptions, AnyRow},
    AnyConnection, AnyPool, Column, Row, ValueRef,
};

use platform::{
    config::{database_kind, DatabaseKind},
    db::{placeholders, Db},
    redact_url,
};

/// Tables of the move itself and of the migration runner: never copied, never captured.
const NOT_MOVED: &[&str] = &[
    "_sqlx_migrations",
    "db_move",
    "db_move_acks",
    "db_move_changes",
    "db_move_fence",
    "db_move_findings",
];

/// The mover's SQLite connections: a long busy wait, no foreign keys (rows arrive in any order).
const SQLITE_SETUP: &str = "PRAGMA busy_timeout = 10000; PRAGMA foreign_keys = OFF;";
/// The busy wait of [`SQLITE_SETUP`], restored after a shorter one.
const SQLITE_BUSY_TIMEOUT: &str = "PRAGMA busy_timeout = 10000";
/// The `seq` of the marker entry the mover writes first in each SQLite write transaction: it
/// takes the write lock and lets the mover's writes pass a closed fence (`work::QuietWrite`).
pub const MOVER_MARKER: i64 = -1;

/// The largest number of bound values in one statement (SQLite allows 32 766).
const MAX_PARAMETERS: usize = 30_000;

/// One column value, as both engines store webook's columns.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// Any integer.
    Int(i64),
    /// A floating-point number.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
}

impl Value {
    fn read(row: &AnyRow, index: usize) -> anyhow::Result<Self> {
        if row.try_get_raw(index)?.is_null() {
            return Ok(Self::Null);
        }
        if let Ok(value) = row.try_get::<i64, _>(index) {
            return Ok(Self::Int(value));
        }
        if let Ok(value) = row.try_get::<i32, _>(index) {
            return Ok(Self::Int(value.into()));
        }
        if let Ok(value) = row.try_get::<i16, _>(index) {
            return Ok(Self::Int(value.into()));
        }
        if let Ok(value) = row.try_get::<bool, _>(index) {
            return Ok(Self::Int(value.into()));
        }
        if let Ok(value) = row.try_get::<f64, _>(index) {
            return Ok(Self::Real(value));
        }
        if let Ok(value) = row.try_get::<String, _>(index) {
            return Ok(Self::Text(value));
        }
        Ok(Self::Bytes(row.try_get::<Vec<u8>, _>(index).with_context(
            || {
                format!(
                    "column {} has a type the move does not carry",
                    row.column(index).name()
                )
            },
        )?))
    }

    pub fn bind<'q>(
        self,
        query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    ) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
        match self {
            Self::Null => query.bind(None::<i64>),
            Self::Int(value) => query.bind(value),
            Self::Real(value) => query.bind(value),
            Self::Text(value) => query.bind(value),
            Self::Bytes(value) => query.bind(value),
        }
    }

    /// The value as JSON (keys of findings and change entries).
    pub fn to_json(&self) -> Json {
        match self {
            Self::Null => Json::Null,
            Self::Int(value) => Json::from(*value),
            Self::Real(value) => Json::from(*value),
            Self::Text(value) => Json::from(value.as_str()),
            Self::Bytes(value) => Json::from(hex::encode(value)),
        }
    }

    /// A key value back from JSON.
    pub fn from_json(json: &Json) -> Self {
        match json {
            Json::Null => Self::Null,
            Json::Number(number) => number
                .as_i64()
                .map(Self::Int)
                .unwrap_or_else(|| Self::Real(number.as_f64().unwrap_or_default())),
            Json::String(text) => Self::Text(text.clone()),
            other => Self::Text(other.to_string()),
        }
    }
}

/// A row's primary key values, in key column order.
pub type Key = Vec<Value>;

/// A row: its values in the table's column order.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRow {
    pub values: Vec<Value>,
}

impl TableRow {
    /// The key of this row in `table`.
    pub fn key(&self, table: &Table) -> Key {
        table
            .key_columns
            .iter()
            .map(|&index| self.values[index].clone())
            .collect()
    }

    /// A digest of every value: what the fixer compares to know a row has not changed since it
    /// was validated.
    pub fn fingerprint(&self) -> String {
        let json = Json::Array(self.values.iter().map(Value::to_json).collect());
        hex::encode(Sha256::digest(json.to_string().as_bytes()))
    }
}

/// The canonical JSON text of a key.
pub fn key_text(key: &Key) -> String {
    Json::Array(key.iter().map(Value::to_json).collect()).to_string()
}

/// A key from its JSON text ([`key_text`], or a capture trigger's array).
pub fn parse_key(text: &str) -> anyhow::Result<Key> {
    let json: Json = serde_json::from_str(text).with_context(|| format!("key {text:?}"))?;
    let Json::Array(values) = json else {
        anyhow::bail!("key {text:?} is not an array");
    };
    Ok(values.iter().map(Value::from_json).collect())
}

/// A table both databases have, with the columns both have.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    pub columns: Vec<String>,
    /// Positions in `columns` of the primary key's columns, in key order.
    pub key_columns: Vec<usize>,
    /// Whether it has a `utime` column (incremental validation).
    pub has_utime: bool,
}

impl Table {
    fn column_list(&self) -> String {
        self.columns.join(", ")
    }

    fn key_list(&self) -> String {
        self.key_names().collect::<Vec<_>>().join(", ")
    }

    fn key_names(&self) -> impl Iterator<Item = &str> {
        self.key_columns
            .iter()
            .map(|&index| self.columns[index].as_str())
    }

    /// `(k1, k2)` or `k1`.
    fn key_tuple(&self) -> String {
        if self.key_columns.len() == 1 {
            self.key_list()
        } else {
            format!("({})", self.key_list())
        }
    }

    /// `WHERE key IN (…)` for `count` keys, placeholders from `$first`.
    fn key_in(&self, first: usize, count: usize) -> String {
        let width = self.key_columns.len();
        if width == 1 {
            return format!("{} IN ({})", self.key_list(), placeholders(first, count));
        }
        let rows = (0..count)
            .map(|row| format!("({})", placeholders(first + row * width, width)))
            .collect::<Vec<_>>()
            .join(", ");
        format!("{} IN (VALUES {rows})", self.key_tuple())
    }

    /// Rows per batch so one statement stays under the parameter limit.
    pub fn batch_rows(&self, wanted: usize) -> usize {
        (MAX_PARAMETERS / self.columns.len().max(1)).clamp(1, wanted)
    }
}

/// One database as the mover sees it: its own small pool (module docs).
#[derive(Debug, Clone)]
pub struct Side {
    pub pool: AnyPool,
    pub kind: DatabaseKind,
    /// SQLite only: the writer pool of the process's own `Db` on this file (its one writer
    /// connection). The mover holds a connection of it while it writes here ([`Side::turn`]),
    /// so the application's writers queue for their turn in that pool instead of sleeping in
    /// SQLite's busy handler, whose growing steps made the tail of every write long.
    pub gate: Option<AnyPool>,
}

/// A turn at writing to a SQLite side ([`Side::turn`]); nothing on PostgreSQL.
pub type Turn = Option<sqlx::pool::PoolConnection<sqlx::Any>>;

/// Keyset batch reading: rows after `after` (or from the start), at most `limit`, optionally
/// only those with `utime >= since`.
pub struct Batch<'a> {
    pub after: Option<&'a Key>,
    pub limit: usize,
    pub since: Option<i64>,
}

impl Side {
    /// Connects the mover to `url`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let kind = database_kind(url)?;
        if kind == DatabaseKind::Sqlite {
            // Creates the file and sets it up like the application does.
            Db::connect_url(url, 1).await?.close().await;
        }
        let pool = AnyPoolOptions::new()
            .max_connections(4)
            .after_connect(move |connection, _meta| {
                Box::pin(async move {
                    let setup = match kind {
                        DatabaseKind::Sqlite => SQLITE_SETUP,
                        DatabaseKind::Postgres => "SET session_replication_role = replica",
                    };
                    sqlx::Executor::execute(&mut *connection, setup).await?;
                    Ok(())
                })
            })
            .connect(&platform::db::connect_url(url)?)
            .await
            .with_context(|| format!("connecting to {}", redact_url(url)))?;
        Ok(Self {
            pool,
            kind,
            gate: None,
        })
    }

    /// The tables of this database (less the move's own), with columns and keys.
    pub async fn tables(&self) -> anyhow::Result<Vec<Table>> {
        let names: Vec<String> = match self.kind {
            DatabaseKind::Sqlite => sqlx::query_scalar(
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                 AND name NOT LIKE 'sqlite_%' ORDER BY name",
            ),
            DatabaseKind::Postgres => sqlx::query_scalar(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
                 ORDER BY table_name",
            ),
        }
        .fetch_all(&self.pool)
        .await?;
        let mut tables = Vec::new();
        for name in names
            .into_iter()
            .filter(|name| !NOT_MOVED.contains(&name.as_str()))
        {
            let columns: Vec<(String, i64)> = match self.kind {
                DatabaseKind::Sqlite => sqlx::query_as(
                    "SELECT name, CAST(pk AS BIGINT) FROM pragma_table_info($1) ORDER BY cid",
                ),
                DatabaseKind::Postgres => sqlx::query_as(
                    "SELECT c.column_name::text, CAST(COALESCE(k.ordinal_position, 0) AS BIGINT) \
                     FROM information_schema.columns c \
                     LEFT JOIN information_schema.table_constraints t \
                       ON t.table_schema = c.table_schema AND t.table_name = c.table_name \
                      AND t.constraint_type = 'PRIMARY KEY' \
                     LEFT JOIN information_schema.key_column_usage k \
                       ON k.constraint_name = t.constraint_name \
                      AND k.table_schema = c.table_schema AND k.table_name = c.table_name \
                      AND k.column_name = c.column_name \
                     WHERE c.table_schema = current_schema() AND c.table_name = $1 \
                     ORDER BY c.ordinal_position",
                ),
            }
            .bind(&name)
            .fetch_all(&self.pool)
            .await?;
            let mut keyed: Vec<(i64, usize)> = columns
                .iter()
                .enumerate()
                .filter(|(_, (_, position))| *position > 0)
                .map(|(index, (_, position))| (*position, index))
                .collect();
            keyed.sort_unstable();
            tables.push(Table {
                has_utime: columns.iter().any(|(column, _)| column == "utime"),
                columns: columns.into_iter().map(|(column, _)| column).collect(),
                key_columns: keyed.into_iter().map(|(_, index)| index).collect(),
                name,
            });
        }
        Ok(tables)
    }

    /// Rows of `table` in key order after a key (module docs of [`Batch`]).
    pub async fn batch(&self, table: &Table, batch: Batch<'_>) -> anyhow::Result<Vec<TableRow>> {
        self.batch_on(&mut *self.pool.acquire().await?, table, batch, false)
            .await
    }

    /// [`Side::batch`] on `connection`; with `lock` (PostgreSQL) the rows read stay share-locked
    /// until its transaction ends, so none of them changes or goes meanwhile (the bulk copy:
    /// [`super::work::Mover::copy`]).
    pub async fn batch_on(
        &self,
        connection: &mut AnyConnection,
        table: &Table,
        batch: Batch<'_>,
        lock: bool,
    ) -> anyhow::Result<Vec<TableRow>> {
        let mut sql = format!("SELECT {} FROM {}", table.column_list(), table.name);
        let mut conditions = Vec::new();
        let mut next = 1;
        if let Some(after) = batch.after {
            let tuple = if after.len() == 1 {
                format!("${next}")
            } else {
                format!("({})", placeholders(next, after.len()))
            };
            conditions.push(format!("{} > {tuple}", table.key_tuple()));
            next += after.len();
        }
        if batch.since.is_some() {
            conditions.push(format!("utime >= ${next}"));
        }
        if !conditions.is_empty() {
            write!(sql, " WHERE {}", conditions.join(" AND "))?;
        }
        write!(sql, " ORDER BY {} LIMIT {}", table.key_list(), batch.limit)?;
        if lock && self.kind == DatabaseKind::Postgres {
            sql.push_str(" FOR SHARE");
        }
        let mut query = sqlx::query(&sql);
        for value in batch.after.into_iter().flatten() {
            query = value.clone().bind(query);
        }
        if let Some(since) = batch.since {
            query = query.bind(since);
        }
        read_rows(query.fetch_all(connection).await?)
    }

    /// The rows of `table` with these keys (any order; absent keys have no row), on
    /// `connection` or a connection of the pool.
    pub async fn rows_by_key(
        &self,
        connection: Option<&mut AnyConnection>,
        table: &Table,
        keys: &[Key],
    ) -> anyhow::Result<Vec<TableRow>> {
        match connection {
            Some(connection) => rows_by_key_on(connection, table, keys).await,
            None => rows_by_key_on(&mut *self.pool.acquire().await?, table, keys).await,
        }
    }

    /// How many rows `table` has.
    pub async fn count(&self, table: &Table) -> anyhow::Result<i64> {
        Ok(
            sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {}", table.name))
                .fetch_one(&self.pool)
                .await?,
        )
    }
}

/// The rows of `table` with these keys, read on `connection`.
pub async fn rows_by_key_on(
    connection: &mut AnyConnection,
    table: &Table,
    keys: &[Key],
) -> anyhow::Result<Vec<TableRow>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {} FROM {} WHERE {}",
        table.column_list(),
        table.name,
        table.key_in(1, keys.len())
    );
    let mut query = sqlx::query(&sql);
    for value in keys.iter().flatten() {
        query = value.clone().bind(query);
    }
    read_rows(query.fetch_all(connection).await?)
}

fn read_rows(rows: Vec<AnyRow>) -> anyhow::Result<Vec<TableRow>> {
    rows.iter()
        .map(|row| {
            Ok(TableRow {
                values: (0..row.len())
                    .map(|index| Value::read(row, index))
                    .collect::<anyhow::Result<_>>()?,
            })
        })
        .collect()
}

/// How rows already there are treated by [`write_rows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnConflict {
    /// Left as they are (the bulk copy: what the change log brings is newer).
    Keep,
    /// Overwritten (replication and fixes: the row read last is the truth).
    Overwrite,
}

/// Writes `rows` of `table` on `connection` (multi-row statements within the parameter limit).
pub async fn write_rows(
    connection: &mut AnyConnection,
    table: &Table,
    rows: Vec<TableRow>,
    on_conflict: OnConflict,
) -> anyhow::Result<()> {
    let width = table.columns.len();
    let per_statement = table.batch_rows(1_000);
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<TableRow> = rows.by_ref().take(per_statement).collect();
        let updates: Vec<String> = table
            .columns
            .iter()
            .enumerate()
            .filter(|(index, _)| !table.key_columns.contains(index))
            .map(|(_, column)| format!("{column} = excluded.{column}"))
            .collect();
        let action = if on_conflict == OnConflict::Keep || updates.is_empty() {
            "DO NOTHING".to_owned()
        } else {
            format!("DO UPDATE SET {}", updates.join(", "))
        };
        let sql = format!(
            "INSERT INTO {} ({}) VALUES {} ON CONFLICT ({}) {action}",
            table.name,
            table.column_list(),
            platform::db::row_placeholders(chunk.len(), width),
            table.key_list()
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            for value in row.values {
                query = value.bind(query);
            }
        }
        query
            .execute(&mut *connection)
            .await
            .with_context(|| format!("writing rows of {}", table.name))?;
    }
    Ok(())
}

/// Deletes the rows of `table` with these keys on `connection`.
pub async fn delete_rows(
    connection: &mut AnyConnection,
    table: &Table,
    keys: &[Key],
) -> anyhow::Result<()> {
    for chunk in keys.chunks(table.batch_rows(500)) {
        let sql = format!(
            "DELETE FROM {} WHERE {}",
            table.name,
            table.key_in(1, chunk.len())
        );
        let mut query = sqlx::query(&sql);
        for value in chunk.iter().flatten() {
            query = value.clone().bind(query);
        }
        query.execute(&mut *connection).await?;
    }
    Ok(())
}

/// The message a fenced database answers an application write with.
pub const FENCED: &str = platform::db::FENCED_MESSAGE;

/// The PostgreSQL function every capture trigger calls. First the fence ([`Side::set_fence`]):
/// the shared advisory lock [`platform::db::locks::DB_MOVE_FENCE`], held to the commit, then
/// the fence row — a closed fence refuses the write. Then the changed row's key, as a JSON
/// array of the key columns named in the trigger's arguments, into `db_move_changes`.
fn postgres_capture_function() -> String {
    format!(
        "CREATE OR REPLACE FUNCTION db_move_capture() \
RETURNS trigger LANGUAGE plpgsql AS $$ \
DECLARE changed jsonb; previous jsonb; key_of_new jsonb := '[]'::jsonb; key_of_old jsonb := '[]'::jsonb; \
column_name text; \
BEGIN \
  PERFORM pg_advisory_xact_lock_shared({lock}); \
  IF EXISTS (SELECT 1 FROM db_move_fence WHERE id = 1 AND closed = 1) THEN \
    RAISE EXCEPTION '{FENCED}' USING ERRCODE = '55000'; \
  END IF; \
  IF TG_OP <> 'DELETE' THEN changed := to_jsonb(NEW); END IF; \
  IF TG_OP <> 'INSERT' THEN previous := to_jsonb(OLD); END IF; \
  FOREACH column_name IN ARRAY TG_ARGV LOOP \
    IF changed IS NOT NULL THEN key_of_new := key_of_new || jsonb_build_array(changed -> column_name); END IF; \
    IF previous IS NOT NULL THEN key_of_old := key_of_old || jsonb_build_array(previous -> column_name); END IF; \
  END LOOP; \
  IF changed IS NOT NULL THEN \
    INSERT INTO db_move_changes (tbl, pk) VALUES (TG_TABLE_NAME, key_of_new::text); \
  END IF; \
  IF previous IS NOT NULL AND (changed IS NULL OR key_of_old <> key_of_new) THEN \
    INSERT INTO db_move_changes (tbl, pk) VALUES (TG_TABLE_NAME, key_of_old::text); \
  END IF; \
  RETURN NULL; \
END $$",
        lock = platform::db::locks::DB_MOVE_FENCE
    )
}

impl Side {
    /// Installs the capture triggers on every table (idempotent).
    pub async fn install_capture(&self, tables: &[Table]) -> anyhow::Result<()> {
        let mut connection = self.pool.acquire().await?;
        if self.kind == DatabaseKind::Postgres {
            sqlx::Executor::execute(&mut *connection, postgres_capture_function().as_str()).await?;
        }
        for table in tables {
            for statement in capture_triggers(self.kind, table) {
                sqlx::Executor::execute(&mut *connection, statement.as_str())
                    .await
                    .with_context(|| format!("installing the capture trigger of {}", table.name))?;
            }
        }
        Ok(())
    }

    /// Removes the capture triggers (idempotent).
    pub async fn remove_capture(&self, tables: &[Table]) -> anyhow::Result<()> {
        let mut connection = self.pool.acquire().await?;
        for table in tables {
            let statements = match self.kind {
                DatabaseKind::Sqlite => ["insert", "update", "delete"]
                    .iter()
                    .map(|op| format!("DROP TRIGGER IF EXISTS db_move_{}_{op}", table.name))
                    .collect::<Vec<_>>(),
                DatabaseKind::Postgres => vec![format!(
                    "DROP TRIGGER IF EXISTS db_move_capture ON {}",
                    table.name
                )],
            };
            for statement in statements {
                sqlx::Executor::execute(&mut *connection, statement.as_str()).await?;
            }
        }
        Ok(())
    }

    /// Sets every identity sequence to the table's largest id, so ids this database hands out
    /// next never collide with rows copied in (SQLite's AUTOINCREMENT follows by itself).
    pub async fn carry_sequences(&self, tables: &[Table]) -> anyhow::Result<()> {
        if self.kind != DatabaseKind::Postgres {
            return Ok(());
        }
        for table in tables {
            let [key] = table.key_columns.as_slice() else {
                continue;
            };
            let column = &table.columns[*key];
            let sequence: Option<String> =
                sqlx::query_scalar("SELECT pg_get_serial_sequence($1, $2)")
                    .bind(&table.name)
                    .bind(column)
                    .fetch_one(&self.pool)
                    .await?;
            let Some(sequence) = sequence else {
                continue;
            };
            // Never backwards: ids this side handed out earlier stay taken.
            sqlx::query(&format!(
                "SELECT setval('{sequence}', GREATEST((SELECT COALESCE(MAX({column}), 1) FROM {table}), \
                 (SELECT last_value FROM {sequence})))",
                table = table.name
            ))
            .execute(&self.pool)
            .await
            .with_context(|| format!("carrying the sequence of {}", table.name))?;
        }
        Ok(())
    }

    /// Waits for this process's turn to write to a SQLite side and holds it while the result
    /// lives ([`Side::gate`]).
    pub async fn turn(&self) -> anyhow::Result<Turn> {
        match &self.gate {
            Some(gate) => Ok(Some(gate.acquire().await?)),
            None => Ok(None),
        }
    }

    /// Creates this side's fence row, open or `closed`, unless it exists.
    pub async fn init_fence(&self, closed: bool) -> anyhow::Result<()> {
        sqlx::query(
            "INSERT INTO db_move_fence (id, closed, token) VALUES (1, $1, 0) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(i64::from(closed))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Whether this side's fence is closed.
    pub async fn fence_closed(&self) -> anyhow::Result<bool> {
        let closed: Option<i64> =
            sqlx::query_scalar("SELECT closed FROM db_move_fence WHERE id = 1")
                .fetch_optional(&self.pool)
                .await?;
        Ok(closed == Some(1))
    }

    /// Closes (or opens) this side's fence for application writes, with fence token `token`
    /// (a write carrying an older token than the fence's last one is refused: a deposed
    /// coordinator cannot undo its successor's fence). Closing waits for every application
    /// write transaction already past its first captured change to commit or roll back —
    /// PostgreSQL: the fence's advisory lock taken exclusively; SQLite: the write lock — but at
    /// most `within`, then fails (and nothing changed). Once closed, no application write
    /// commits here: the capture triggers refuse it ([`FENCED`]).
    ///
    /// Opening waits for nothing on PostgreSQL: no write in flight needs to end for later ones
    /// to be let in. (An exclusive request for the advisory lock would also queue every later
    /// application write behind the transaction it waits for — a long one would hold the whole
    /// site's writes for `within` each time an abort reopens the fence it could not close.)
    pub async fn set_fence(
        &self,
        closed: bool,
        token: i64,
        within: Duration,
    ) -> anyhow::Result<()> {
        let millis = within.as_millis().clamp(1, 60_000);
        let update =
            "UPDATE db_move_fence SET closed = $1, token = $2 WHERE id = 1 AND token <= $2";
        let written = match self.kind {
            DatabaseKind::Postgres => {
                let mut tx = self.pool.begin().await?;
                sqlx::Executor::execute(
                    &mut *tx,
                    format!("SET LOCAL lock_timeout = {millis}").as_str(),
                )
                .await?;
                if closed {
                    sqlx::query("SELECT pg_advisory_xact_lock($1)")
                        .bind(platform::db::locks::DB_MOVE_FENCE)
                        .execute(&mut *tx)
                        .await
                        .context("waiting for the writes in flight")?;
                }
                let written = sqlx::query(update)
                    .bind(i64::from(closed))
                    .bind(token)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                tx.commit().await?;
                written
            }
            DatabaseKind::Sqlite => {
                let _turn = self.turn().await?;
                let mut connection = self.pool.acquire().await?;
                sqlx::Executor::execute(
                    &mut *connection,
                    format!("PRAGMA busy_timeout = {millis}").as_str(),
                )
                .await?;
                let result = sqlx::query(update)
                    .bind(i64::from(closed))
                    .bind(token)
                    .execute(&mut *connection)
                    .await;
                sqlx::Executor::execute(&mut *connection, SQLITE_BUSY_TIMEOUT).await?;
                result
                    .context("waiting for the write in flight")?
                    .rows_affected()
            }
        };
        if written != 1 {
            anyhow::bail!("a newer coordinator has set this fence since: this one was deposed");
        }
        Ok(())
    }

    /// Change entries not yet replicated.
    pub async fn pending_changes(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM db_move_changes")
            .fetch_one(&self.pool)
            .await?)
    }
}

fn capture_triggers(kind: DatabaseKind, table: &Table) -> Vec<String> {
    let keys: Vec<&str> = table.key_names().collect();
    match kind {
        DatabaseKind::Sqlite => {
            let key_of = |row: &str| {
                format!(
                    "json_array({})",
                    keys.iter()
                        .map(|key| format!("{row}.{key}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            let name = &table.name;
            // The fence: refused while closed, unless the mover writes (its marker entry, seq
            // -1, exists only inside its own write transaction: SQLite has one writer).
            let fence = format!(
                "SELECT RAISE(ABORT, '{FENCED}') \
                 WHERE EXISTS (SELECT 1 FROM db_move_fence WHERE id = 1 AND closed = 1) \
                 AND NOT EXISTS (SELECT 1 FROM db_move_changes WHERE seq = {MOVER_MARKER});"
            );
            let log = |row: &str| {
                format!(
                    "{fence} INSERT INTO db_move_changes (tbl, pk) VALUES ('{name}', {});",
                    key_of(row)
                )
            };
            vec![
                format!("DROP TRIGGER IF EXISTS db_move_{name}_insert"),
                format!("DROP TRIGGER IF EXISTS db_move_{name}_update"),
                format!("DROP TRIGGER IF EXISTS db_move_{name}_delete"),
                format!(
                    "CREATE TRIGGER IF NOT EXISTS db_move_{name}_insert AFTER INSERT ON {name} \
                     BEGIN {} END",
                    log("NEW")
                ),
                format!(
                    "CREATE TRIGGER IF NOT EXISTS db_move_{name}_update AFTER UPDATE ON {name} \
                     BEGIN {} {} END",
                    log("NEW"),
                    format!(
                        "INSERT INTO db_move_changes (tbl, pk) SELECT '{name}', {} \
                         WHERE {} IS NOT {};",
                        key_of("OLD"),
                        key_of("OLD"),
                        key_of("NEW")
                    )
                ),
                format!(
                    "CREATE TRIGGER IF NOT EXISTS db_move_{name}_delete AFTER DELETE ON {name} \
                     BEGIN {} END",
                    log("OLD")
                ),
            ]
        }
        DatabaseKind::Postgres => {
            let arguments = keys
                .iter()
                .map(|key| format!("'{key}'"))
                .collect::<Vec<_>>()
                .join(", ");
            vec![
                format!("DROP TRIGGER IF EXISTS db_move_capture ON {}", table.name),
                format!(
                    "CREATE TRIGGER db_move_capture AFTER INSERT OR UPDATE OR DELETE ON {} \
                     FOR EACH ROW EXECUTE FUNCTION db_move_capture({arguments})",
                    table.name
                ),
            ]
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use platform::testing::TestDb;

    use super::Side;

    /// A fence write with an older token than the fence's last one is refused (a deposed
    /// coordinator cannot undo its successor's fence), on both engines.
    #[tokio::test]
    async fn a_fence_refuses_an_older_token() {
        let sqlite = TestDb::sqlite(&crate::schema::MIGRATIONS).await;
        let postgres = TestDb::postgres(&crate::schema::MIGRATIONS).await;
        for db in [&sqlite, &postgres] {
            let side = Side::connect(&db.url).await.unwrap();
            side.init_fence(false).await.unwrap();
            let within = Duration::from_secs(1);
            side.set_fence(true, 5, within).await.unwrap();
            assert!(side.fence_closed().await.unwrap());
            let deposed = side.set_fence(false, 4, within).await.unwrap_err();
            assert!(deposed.to_string().contains("deposed"), "{deposed}");
            assert!(side.fence_closed().await.unwrap(), "{}", db.url);
            side.set_fence(false, 6, within).await.unwrap();
            assert!(!side.fence_closed().await.unwrap());
        }
    }
}
