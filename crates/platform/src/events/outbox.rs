//! The transactional outbox: events that must follow a write are recorded in the write's own
//! transaction and published by a relay after the commit, so a committed change never loses its
//! event — not to a crash between the commit and the publish, nor to Redis being down then.
//!
//! Data flow:
//! 1. A store writes its change and, in the same transaction, [`record`]s the event as a row of
//!    `event_outbox` (topic, key, JSON payload, and the `traceparent` of the recording span
//!    when traces are exported). Rolled back, the event never existed.
//! 2. After the commit the service calls [`Outbox::committed`], which wakes this process's relay
//!    (every [`POLL_INTERVAL`] it also looks by itself: rows of other instances, rows left by a
//!    process that died, rows a failed pass kept).
//! 3. The relay takes the oldest rows (up to [`RELAY_BATCH`]) and publishes each with the event id
//!    `outbox-<row id>`, the same however often it is published:
//!    - **Redis Streams**: one pipelined `XADD` per batch; the rows are deleted once Redis took
//!      them (from then on the stream holds them, as durable as Redis is). If Redis refuses, the
//!      rows stay and the relay retries with a growing pause. On PostgreSQL a pass runs in a
//!      transaction holding an advisory lock, so one instance relays at a time and the stream
//!      gets the rows in id order.
//!    - **In-process**: the table itself is the durable queue, and each consumer group reads it
//!      on its own from a durable position ([`super::delivery`], `event_progress`): the relay
//!      only announces each topic's newest row to the topic's groups (one query per pass, at
//!      most one pass per [`ANNOUNCE_GAP`]), and every
//!      [`TRIM_INTERVAL`] deletes a topic's rows that all its groups have passed (rows of a topic
//!      no group consumes at once). A failing group therefore holds back only its own topic's
//!      rows, and no more than [`super::DeliveryPolicy::max_backlog`] of them; a process killed
//!      finds every group's rows again from its position when it restarts.
//! 4. Delivery is at-least-once (a crash between publishing and deleting publishes again), with
//!    a stable id: consumers that must apply an event once deduplicate by [`Event::id`]
//!    ([`super::dedup`]).
//!
//! Order: rows are published in id order. Two writes of the same object serialise on its row
//! lock and record their events after their change, so their ids follow their commits; events of
//! different objects may commit out of id order and are then published in the next pass.
//!
//! [`Event::id`]: super::Event::id

use std::{sync::Arc, time::Duration};

use serde::Serialize;
use sqlx::AnyConnection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

pub use super::outbox_row::event_id;
use super::{outbox_row::OutboxRow, Backend, EventStream, FIRST_RETRY_PAUSE, MAX_RETRY_PAUSE};
use crate::{
    config::DatabaseKind,
    db::{kind_of, now_millis, Db},
};

/// Counter: outbox rows published (handed over, in-process) by the relay, by `topic`.
pub const OUTBOX_RELAYED_TOTAL: &str = "outbox_relayed_total";
/// Counter: relay passes that failed (Redis or the database unreachable); the rows stay.
pub const OUTBOX_RELAY_FAILURES_TOTAL: &str = "outbox_relay_failures_total";
/// Gauge: age of the oldest event still waiting in the outbox (0 when empty), after each pass.
pub const OUTBOX_OLDEST_PENDING_SECONDS: &str = "outbox_oldest_pending_seconds";

/// Rows per relay pass.
pub const RELAY_BATCH: i64 = 500;
/// How often the relay looks for rows without being woken.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// Key of the PostgreSQL advisory lock that makes one instance relay at a time.
const RELAY_LOCK_KEY: i64 = crate::db::locks::OUTBOX_RELAY;
/// Key of the PostgreSQL advisory lock that transactions recording events hold from their
/// record to their commit in embedded mode ([`record_many`]).
const ORDER_LOCK_KEY: i64 = crate::db::locks::OUTBOX_ORDER;
/// Shortest time between two in-process relay passes (each announces new rows to the groups):
/// a group waits its batch's `max_wait` (20 ms for the feed) before reading anyway.
pub const ANNOUNCE_GAP: Duration = Duration::from_millis(10);
/// How often the in-process relay deletes the rows every group of their topic has passed.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(1);

/// Set once an in-process stream has an outbox in this process: its groups read the table by
/// position, so on PostgreSQL rows must become visible in id order ([`record_many`]).
static ORDERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records one event of `topic` per `(key, payload)` in the caller's transaction, in one
/// statement per few hundred rows (a batch of likes is one write, not one per like). Record
/// events last in a transaction: in embedded mode on PostgreSQL it first takes a
/// transaction-scoped advisory lock, held until the commit, so that outbox ids become visible in
/// id order (each group reads the outbox by position; SQLite's single writer gives that order
/// by itself).
pub async fn record_many<P: Serialize>(
    tx: &mut AnyConnection,
    topic: &str,
    events: &[(String, P)],
    now: i64,
) -> sqlx::Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    // Traced, the rows carry the context of their producer span (module docs of `events`).
    let span = crate::tracing_otlp::producer_span(topic, events.len());
    let traceparent = crate::tracing_otlp::traceparent_of(&span);
    tracing::Instrument::instrument(insert_rows(tx, topic, events, now, traceparent), span).await
}

async fn insert_rows<P: Serialize>(
    tx: &mut AnyConnection,
    topic: &str,
    events: &[(String, P)],
    now: i64,
    traceparent: Option<String>,
) -> sqlx::Result<()> {
    if ORDERED.load(std::sync::atomic::Ordering::Acquire) && tx.backend_name() == "PostgreSQL" {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(ORDER_LOCK_KEY)
            .execute(&mut *tx)
            .await?;
    }
    // Chunks keep every statement under SQLite's bound-parameter limit.
    for chunk in events.chunks(RECORD_CHUNK) {
        let sql = format!(
            "INSERT INTO event_outbox (topic, event_key, payload, created_at, traceparent) \
             VALUES {}",
            crate::db::row_placeholders(chunk.len(), 5)
        );
        let mut query = sqlx::query(&sql);
        for (key, payload) in chunk {
            let payload =
                serde_json::to_string(payload).map_err(|err| sqlx::Error::Encode(Box::new(err)))?;
            query = query
                .bind(topic)
                .bind(key.clone())
                .bind(payload)
                .bind(now)
                .bind(traceparent.clone());
        }
        query.execute(&mut *tx).await?;
    }
    Ok(())
}

/// Rows of one [`record_many`] statement.
const RECORD_CHUNK: usize = 190;

/// Records `payload` as an event of `topic` about `key`, in the caller's transaction.
pub async fn record(
    tx: &mut AnyConnection,
    topic: &str,
    key: &str,
    payload: &impl Serialize,
    now: i64,
) -> sqlx::Result<()> {
    record_many(tx, topic, &[(key.to_owned(), payload)], now).await
}

/// What the in-process relay remembers between passes.
#[derive(Debug, Default)]
struct Announced {
    /// The newest row id announced.
    newest: i64,
    /// When rows were last trimmed.
    trimmed_at: Option<tokio::time::Instant>,
    /// Per topic, the position its rows were trimmed to.
    trimmed: std::collections::HashMap<String, i64>,
    /// Rows of unconsumed topics were deleted up to this id.
    unconsumed_trimmed: i64,
}

const SELECT_BATCH: &str = "SELECT id, topic, event_key, payload, created_at, traceparent \
     FROM event_outbox ORDER BY id LIMIT $1";

/// What [`Outbox::relay`] did.
struct Relayed {
    /// Rows relayed.
    count: u64,
    /// Whether its last pass found the outbox empty after it (fewer rows than a batch, all
    /// relayed), so no row is waiting.
    drained: bool,
}

/// The relay of one process, and the handle services wake it with; cheap to clone.
#[derive(Clone)]
pub struct Outbox {
    inner: Arc<Inner>,
}

struct Inner {
    db: Db,
    events: EventStream,
    wake: Notify,
    /// In-process: the newest row announced, and per topic the position trimmed to.
    announced: std::sync::Mutex<Announced>,
    /// One pass at a time in this process (the relay task, and the final pass at shutdown).
    /// Held across the pass's awaits on purpose: it serialises the passes, nothing else waits.
    pass: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Outbox")
    }
}

impl Outbox {
    /// The outbox of `db`, relayed to `events`.
    pub fn new(db: Db, events: EventStream) -> Self {
        events.attach_store(db.clone());
        if matches!(events.backend, Backend::InProcess(_)) {
            ORDERED.store(true, std::sync::atomic::Ordering::Release);
        }
        Self {
            inner: Arc::new(Inner {
                db,
                events,
                wake: Notify::new(),
                announced: std::sync::Mutex::default(),
                pass: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Whether events of `topic` are worth recording ([`EventStream::is_consumed`]): in
    /// embedded mode, a topic nobody in this process consumes would have its rows relayed to
    /// no one and deleted, an extra write on SQLite's single writer for nothing.
    pub fn wants(&self, topic: &str) -> bool {
        self.inner.events.is_consumed(topic)
    }

    /// Wakes the relay: a transaction that [`record`]ed events has committed.
    pub fn committed(&self) {
        self.inner.wake.notify_one();
    }

    /// The relay: relays whatever is pending whenever woken, every [`POLL_INTERVAL`], and after a
    /// failure with a growing pause, until `stop`. Start it after this process's consumers are
    /// registered (in-process, a row is handed to the groups that exist when it is relayed).
    pub async fn run(self, stop: CancellationToken) {
        let mut pause = FIRST_RETRY_PAUSE;
        let mut age_read = None::<tokio::time::Instant>;
        loop {
            let (wait, drained) = match self.relay(&stop).await {
                Ok(relayed) => {
                    pause = FIRST_RETRY_PAUSE;
                    (POLL_INTERVAL, relayed.drained)
                }
                Err(err) => {
                    metrics::counter!(OUTBOX_RELAY_FAILURES_TOTAL).increment(1);
                    tracing::warn!(
                        error = format!("{err:#}"),
                        retry_in = ?pause,
                        "cannot relay outbox events; they stay in the outbox"
                    );
                    let wait = pause;
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                    (wait, false)
                }
            };
            // A drained outbox is known empty without asking; rows left behind are looked up,
            // at most once a second (in-process a pass follows every commit).
            let age = if drained {
                Some(Ok(None))
            } else if age_read.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                age_read = Some(tokio::time::Instant::now());
                Some(oldest_pending_age(&self.inner.db).await)
            } else {
                None
            };
            if let Some(Ok(age)) = age {
                metrics::gauge!(OUTBOX_OLDEST_PENDING_SECONDS)
                    .set(age.unwrap_or(0) as f64 / 1000.0);
            }
            if matches!(self.inner.events.backend, Backend::InProcess(_)) {
                // An announcing pass is one query on the writer; under a stream of commits
                // (likes) one per commit queued ahead of the writes themselves (measured: likes
                // at 0.49x). One pass per gap at most: commits within it are announced together.
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(ANNOUNCE_GAP) => {},
                }
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = self.inner.wake.notified() => {},
                () = tokio::time::sleep(wait) => {},
            }
        }
    }

    /// Relays every pending row (pass after pass until one finds fewer than a batch); returns how
    /// many were relayed. In-process, a pass waits until the consumers handled its rows, or
    /// `stop`.
    pub async fn relay_pending(&self, stop: &CancellationToken) -> anyhow::Result<u64> {
        Ok(self.relay(stop).await?.count)
    }

    async fn relay(&self, stop: &CancellationToken) -> anyhow::Result<Relayed> {
        if matches!(self.inner.events.backend, Backend::InProcess(_)) {
            // The groups read the rows themselves: one pass announces and trims; whether rows
            // wait is for the age gauge to ask.
            self.pass(stop).await?;
            return Ok(Relayed {
                count: 0,
                drained: false,
            });
        }
        let mut count = 0;
        loop {
            let (seen, done) = self.pass(stop).await?;
            count += done;
            let drained = seen < RELAY_BATCH as usize && done == seen as u64;
            if drained || done < seen as u64 || stop.is_cancelled() {
                return Ok(Relayed { count, drained });
            }
        }
    }

    /// One batch: (rows seen, rows relayed and deleted).
    async fn pass(&self, stop: &CancellationToken) -> anyhow::Result<(usize, u64)> {
        let _one_pass = self.inner.pass.lock().await;
        let db = &self.inner.db;
        let local = match &self.inner.events.backend {
            Backend::InProcess(local) => local,
            Backend::Redis(_) => return self.relay_pass(db).await,
        };
        // The groups read the rows themselves: announce what is new, trim what all have
        // passed. Nothing here waits for a group.
        let _ = stop;
        self.announce(local).await?;
        self.trim(local).await?;
        Ok((0, 0))
    }

    /// One batch to Redis: (rows seen, rows relayed and deleted). The engine is the one of the
    /// connection taken (an online move may re-route the `Db` before that).
    async fn relay_pass(&self, db: &Db) -> anyhow::Result<(usize, u64)> {
        let mut connection = db.writer().acquire().await?;
        match kind_of(&connection) {
            DatabaseKind::Postgres => {
                // One relaying instance at a time (the others find the lock taken and skip), so
                // the stream gets the rows in id order.
                let mut tx = sqlx::Connection::begin(&mut *connection).await?;
                let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
                    .bind(RELAY_LOCK_KEY)
                    .fetch_one(&mut *tx)
                    .await?;
                if !locked {
                    return Ok((0, 0));
                }
                let rows = select_batch(&mut tx).await?;
                let seen = rows.len();
                let published = self.publish(rows).await?;
                let deleted = delete(&mut tx, &published).await?;
                tx.commit().await?;
                Ok((seen, deleted))
            }
            DatabaseKind::Sqlite => {
                // SQLite has one writer: never hold it across the network. One process per
                // database file, so nothing else relays these rows. (Rows are read on the writer
                // too: the relay is write-side work and must not queue behind readers.)
                let rows = select_batch(&mut connection).await?;
                drop(connection);
                let seen = rows.len();
                let published = self.publish(rows).await?;
                let deleted = delete(&mut *db.writer().acquire().await?, &published).await?;
                Ok((seen, deleted))
            }
        }
    }

    /// In-process: tells each topic's groups its newest row id past the last announced one.
    async fn announce(&self, local: &super::in_process::InProcess) -> sqlx::Result<()> {
        let after = self.announced().newest;
        // On the readers, or the writer when every reader is taken (as the groups read).
        let heads = match heads_after(self.inner.db.pool(), after).await {
            Err(sqlx::Error::PoolTimedOut) => heads_after(self.inner.db.writer(), after).await,
            other => other,
        }?;
        let mut newest = after;
        for (topic, head) in heads {
            local.announce(&topic, head);
            newest = newest.max(head);
        }
        self.announced().newest = newest;
        Ok(())
    }

    fn announced(&self) -> std::sync::MutexGuard<'_, Announced> {
        self.inner
            .announced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// In-process, every [`TRIM_INTERVAL`]: deletes each topic's rows up to the position of
    /// its slowest group (a topic whose groups have not all loaded a position keeps its rows),
    /// and the rows of topics no group consumes.
    async fn trim(&self, local: &super::in_process::InProcess) -> sqlx::Result<()> {
        let (newest, trimmed_at) = {
            let announced = self.announced();
            (announced.newest, announced.trimmed_at)
        };
        if trimmed_at.is_some_and(|at| at.elapsed() < TRIM_INTERVAL) {
            return Ok(());
        }
        self.announced().trimmed_at = Some(tokio::time::Instant::now());
        let topics = local.topics();
        let healths = self.inner.events.group_healths();
        for topic in &topics {
            let positions = healths
                .iter()
                .filter(|health| health.topic == *topic)
                .map(|health| {
                    health
                        .outbox_position
                        .load(std::sync::atomic::Ordering::Acquire)
                });
            let Some(slowest) = positions.min().filter(|position| *position > 0) else {
                continue;
            };
            if self.announced().trimmed.get(topic).copied() >= Some(slowest) {
                continue;
            }
            sqlx::query("DELETE FROM event_outbox WHERE topic = $1 AND id <= $2")
                .bind(topic)
                .bind(slowest)
                .execute(self.inner.db.writer())
                .await?;
            self.announced().trimmed.insert(topic.clone(), slowest);
        }
        if newest > self.announced().unconsumed_trimmed {
            let placeholders = crate::db::placeholders(2, topics.len());
            let sql = if topics.is_empty() {
                "DELETE FROM event_outbox WHERE id <= $1".to_owned()
            } else {
                format!("DELETE FROM event_outbox WHERE id <= $1 AND topic NOT IN ({placeholders})")
            };
            let mut query = sqlx::query(&sql).bind(newest);
            for topic in &topics {
                query = query.bind(topic);
            }
            query.execute(self.inner.db.writer()).await?;
            self.announced().unconsumed_trimmed = newest;
        }
        Ok(())
    }

    /// Redis: `XADD`s the rows in one pipeline; returns their ids (all or an error).
    async fn publish(&self, rows: Vec<OutboxRow>) -> anyhow::Result<Vec<i64>> {
        let Backend::Redis(backend) = &self.inner.events.backend else {
            anyhow::bail!("publish is the Redis pass");
        };
        let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
        let topics: Vec<String> = rows.iter().map(|row| row.topic.clone()).collect();
        backend
            .publish_all(rows.into_iter().map(OutboxRow::into_event).collect())
            .await?;
        for topic in topics {
            metrics::counter!(OUTBOX_RELAYED_TOTAL, "topic" => topic).increment(1);
        }
        Ok(ids)
    }
}

async fn select_batch(connection: &mut AnyConnection) -> sqlx::Result<Vec<OutboxRow>> {
    sqlx::query_as(SELECT_BATCH)
        .bind(RELAY_BATCH)
        .fetch_all(connection)
        .await
}

async fn delete(connection: &mut AnyConnection, ids: &[i64]) -> sqlx::Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let placeholders: Vec<String> = (1..=ids.len()).map(|n| format!("${n}")).collect();
    let sql = format!(
        "DELETE FROM event_outbox WHERE id IN ({})",
        placeholders.join(", ")
    );
    let mut query = sqlx::query(&sql);
    for id in ids {
        query = query.bind(*id);
    }
    Ok(query.execute(connection).await?.rows_affected())
}

/// Each topic's newest outbox row after `after`, on `pool`.
async fn heads_after(pool: &crate::db::DbPool, after: i64) -> sqlx::Result<Vec<(String, i64)>> {
    sqlx::query_as("SELECT topic, MAX(id) FROM event_outbox WHERE id > $1 GROUP BY topic")
        .bind(after)
        .fetch_all(pool)
        .await
}

/// Age of the oldest row still in the outbox (ms), if any.
async fn oldest_pending_age(db: &Db) -> sqlx::Result<Option<i64>> {
    let oldest: Option<i64> =
        sqlx::query_scalar("SELECT created_at FROM event_outbox ORDER BY id LIMIT 1")
            .fetch_optional(db.pool())
            .await?;
    Ok(oldest.map(|created_at| now_millis().saturating_sub(created_at)))
}
