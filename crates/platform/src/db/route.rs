//! Where a [`super::Db`]'s queries go, and how that changes while the process serves: the
//! routing below the stores that an online database move uses ([`super::Db::pause`]).
//!
//! A `Db` and its two [`super::DbPool`]s share one [`Routing`]: the [`Engine`] (the reads and
//! writes pools of one database, its circuit and its kind) that every query, transaction and
//! connection is taken from at the moment it starts. Re-routing swaps the engine, so stores,
//! which only ever hold a `Db`, follow without knowing.
//!
//! **The barrier.** A swap must not leave a write behind on the old database. So it happens
//! while the routing is *paused*: new acquisitions wait (they do not fail) until it opens
//! again, and the swap waits until every connection of the old engine is back in its pool —
//! each transaction begun before the pause has committed or rolled back. A connection that was
//! granted while the pause began is handed back and taken again after it, from the new
//! engine. Paused, no statement of this process runs on either database through the stores,
//! so an operator can drain what is left to copy and carry sequences over before the swap.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use arc_swap::ArcSwap;
use sqlx::AnyPool;
use tokio::sync::watch;

use super::circuit::Circuit;
use crate::config::DatabaseKind;

/// How a database fenced by an online move refuses an application write (the move's capture
/// triggers raise it): the write reached the database that no longer serves — an instance that
/// had not yet seen the switch. Answered 503 like an unavailable database, so the client
/// retries and reaches the new authority ([`caused_by_fence`]).
pub const FENCED_MESSAGE: &str =
    "database move: this database is fenced, it is not the authority now";

/// Whether `err`, or anything in its cause chain, is a write refused by a fence
/// ([`FENCED_MESSAGE`]).
pub fn caused_by_fence(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<sqlx::Error>()
            .and_then(sqlx::Error::as_database_error)
            .is_some_and(|db| db.message().contains(FENCED_MESSAGE))
    })
}

/// Which of an engine's pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PoolSide {
    /// The pool for reads.
    Reads,
    /// The pool for writes (SQLite's single writer; the same pool on PostgreSQL).
    Writes,
}

/// The pools of one database.
#[derive(Debug)]
pub(super) struct Engine {
    pub(super) pool: AnyPool,
    pub(super) writer: AnyPool,
    pub(super) circuit: Arc<Circuit>,
    pub(super) kind: DatabaseKind,
    /// The SQLite database file (`None` on PostgreSQL or for `:memory:`).
    pub(super) sqlite_file: Option<PathBuf>,
}

impl Engine {
    pub(super) fn pool(&self, side: PoolSide) -> &AnyPool {
        match side {
            PoolSide::Reads => &self.pool,
            PoolSide::Writes => &self.writer,
        }
    }

    /// Whether no connection of either pool is checked out.
    fn idle(&self) -> bool {
        let idle = |pool: &AnyPool| pool.is_closed() || pool.num_idle() as u32 == pool.size();
        idle(&self.pool) && idle(&self.writer)
    }
}

/// The engine queries go to now, and the pause gate (module docs).
#[derive(Debug)]
pub(super) struct Routing {
    engine: ArcSwap<Engine>,
    paused: watch::Sender<bool>,
}

impl Routing {
    pub(super) fn new(engine: Engine) -> Self {
        Self::from_engine(Arc::new(engine))
    }

    pub(super) fn from_engine(engine: Arc<Engine>) -> Self {
        Self {
            engine: ArcSwap::new(engine),
            paused: watch::Sender::new(false),
        }
    }

    pub(super) fn engine(&self) -> Arc<Engine> {
        self.engine.load_full()
    }

    /// Waits while the routing is paused.
    pub(super) async fn wait_until_open(&self) {
        // A pause that begins right after this check is caught by `still_routes_to`.
        if !*self.paused.borrow() {
            return;
        }
        let mut paused = self.paused.subscribe();
        // Only fails when the sender is gone, and `self` holds it.
        let _ = paused.wait_for(|paused| !paused).await;
    }

    /// Whether a connection taken from `engine` may be used: not paused since, not re-routed.
    pub(super) fn still_routes_to(&self, engine: &Arc<Engine>) -> bool {
        !*self.paused.borrow() && Arc::ptr_eq(&self.engine.load(), engine)
    }

    /// Pauses, then waits until every connection of the current engine is back; gives up (and
    /// opens again) after `within`.
    pub(super) async fn pause(self: &Arc<Self>, within: Duration) -> anyhow::Result<Paused> {
        if self.paused.send_replace(true) {
            anyhow::bail!("the database routing is already paused by another switch");
        }
        let paused = Paused {
            routing: self.clone(),
        };
        let deadline = Instant::now() + within;
        while !self.engine.load().idle() {
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "connections still in use after {within:?}: the switch was not made, \
                     nothing changed; try again"
                );
            }
            // Connections come back when their owners finish; there is no event to await.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(paused)
    }
}

/// The routing is paused (every connection back) until this is dropped.
#[derive(Debug)]
#[must_use = "the routing opens again when this is dropped"]
pub struct Paused {
    routing: Arc<Routing>,
}

impl Paused {
    /// Routes every later query to `engine`'s database (the caller has made it hold what the
    /// current one holds).
    pub(super) fn route_to(&self, engine: Arc<Engine>) {
        self.routing.engine.store(engine);
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        self.routing.paused.send_replace(false);
    }
}
