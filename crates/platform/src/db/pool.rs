//! [`DbPool`]: a sqlx pool that fails fast while its database is unreachable — every
//! acquisition passes the database's circuit breaker first ([`super::circuit`]).
//!
//! Statements of a transaction run on its own connection, not through the gate; the gate sees
//! the acquisition that `begin` makes, which is where an unreachable server shows first.
//!
//! `DbPool` implements [`sqlx::Executor`] for `&DbPool`, so queries run on it exactly as on an
//! `AnyPool` (`query.execute(db.pool())`): each takes a connection through [`DbPool::acquire`],
//! which passes the gate and goes wherever the pool is routed now ([`super::route`]).

use std::sync::Arc;

use futures_util::{future::BoxFuture, stream::BoxStream, FutureExt, StreamExt};
use sqlx::{
    any::{AnyQueryResult, AnyRow, AnyStatement, AnyTypeInfo},
    pool::PoolConnection,
    Any, AnyPool, Describe, Either, Execute, Executor, Transaction,
};

use super::route::{PoolSide, Routing};
use crate::config::DatabaseKind;

/// A connection pool with a circuit breaker (module docs), routed ([`super::route`]); cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct DbPool {
    routing: Arc<Routing>,
    side: PoolSide,
}

impl DbPool {
    /// The reads (`Reads`) or writes pool of whatever database `routing` routes to.
    pub(super) fn new(routing: Arc<Routing>, side: PoolSide) -> Self {
        Self { routing, side }
    }

    /// The pool itself as it is now, for code that brings its own pool handling (the job store
    /// asks for it at every operation; [`super::route`]).
    pub fn any_pool(&self) -> AnyPool {
        self.routing.engine().pool(self.side).clone()
    }

    /// Starts a transaction on a connection of this pool.
    pub async fn begin(&self) -> Result<Transaction<'static, Any>, sqlx::Error> {
        loop {
            self.routing.wait_until_open().await;
            let engine = self.routing.engine();
            let pass = engine.circuit.pass()?;
            let pool = engine.pool(self.side);
            // SQLite's writer takes the write lock when it begins: a transaction that reads
            // before it writes could otherwise not turn into a writer after another process
            // (an operator's tool) committed, and would fail at once instead of waiting.
            let result = if self.side == PoolSide::Writes && engine.kind == DatabaseKind::Sqlite {
                pool.begin_with("BEGIN IMMEDIATE").await
            } else {
                pool.begin().await
            };
            pass.record(result.as_ref().err());
            let transaction = result?;
            if self.routing.still_routes_to(&engine) {
                return Ok(transaction);
            }
            // Paused or re-routed while waiting for the connection: not on this database.
            drop(transaction);
        }
    }

    /// Takes a connection of this pool.
    pub async fn acquire(&self) -> Result<PoolConnection<Any>, sqlx::Error> {
        loop {
            self.routing.wait_until_open().await;
            let engine = self.routing.engine();
            let pass = engine.circuit.pass()?;
            let result = engine.pool(self.side).acquire().await;
            pass.record(result.as_ref().err());
            let connection = result?;
            if self.routing.still_routes_to(&engine) {
                return Ok(connection);
            }
            drop(connection);
        }
    }

    /// Closes the pool, waiting for checked-out connections to come back.
    pub async fn close(&self) {
        self.routing.engine().pool(self.side).close().await;
    }
}

impl<'p> Executor<'p> for &'_ DbPool {
    type Database = Any;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<AnyQueryResult, AnyRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Any>,
    {
        let pool = self.clone();
        Box::pin(async_stream::stream! {
            let mut connection = match pool.acquire().await {
                Ok(connection) => connection,
                Err(err) => {
                    yield Err(err);
                    return;
                }
            };
            let mut items = connection.fetch_many(query);
            while let Some(item) = items.next().await {
                yield item;
            }
        })
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<AnyRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Any>,
    {
        let pool = self.clone();
        async move {
            let mut connection = pool.acquire().await?;
            connection.fetch_optional(query).await
        }
        .boxed()
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [AnyTypeInfo],
    ) -> BoxFuture<'e, Result<AnyStatement<'q>, sqlx::Error>>
    where
        'p: 'e,
    {
        let pool = self.clone();
        async move {
            let mut connection = pool.acquire().await?;
            connection.prepare_with(sql, parameters).await
        }
        .boxed()
    }

    fn describe<'e, 'q: 'e>(self, sql: &'q str) -> BoxFuture<'e, Result<Describe<Any>, sqlx::Error>>
    where
        'p: 'e,
    {
        let pool = self.clone();
        async move {
            let mut connection = pool.acquire().await?;
            connection.describe(sql).await
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    /// The writer's transactions go on while every read connection is taken and reads time
    /// out. (With one circuit opened by any pool timeout, the reads' timeout refused the next
    /// write at once, "the database is unreachable" — the publish of
    /// `articles::a_publish_whose_read_back_fails_is_still_a_publish_*` now and then.)
    #[tokio::test]
    async fn on_sqlite_reads_timing_out_do_not_refuse_writes() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("busy.db").display());
        let db = super::super::Db::connect_with(&url, 1, Duration::from_millis(50))
            .await
            .unwrap();
        sqlx::query("CREATE TABLE t (v BIGINT NOT NULL)")
            .execute(db.writer())
            .await
            .unwrap();
        let held = db.pool().any_pool().acquire().await.unwrap();
        let read = sqlx::query("SELECT count(*) FROM t")
            .fetch_one(db.pool())
            .await
            .map(|_| ());
        assert!(
            matches!(read, Err(sqlx::Error::PoolTimedOut)),
            "the read waits for the held connection and times out: {read:?}"
        );
        let mut transaction = db.writer().begin().await.unwrap();
        sqlx::query("INSERT INTO t (v) VALUES (1)")
            .execute(&mut *transaction)
            .await
            .unwrap();
        transaction.commit().await.unwrap();
        drop(held);
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
            .fetch_one(db.pool())
            .await
            .unwrap();
        assert_eq!(count, 1);
    }
}
