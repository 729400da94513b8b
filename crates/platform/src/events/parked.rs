//! The dead-letter store (`event_parked`): events a consumer group gave up on, kept with what
//! failed so that an operator can replay them (they are then applied as if they had arrived
//! late) or discard them (an audited act: who, when, why).
//!
//! Data flow: a consumer [`park`]s an event — in embedded mode in the same transaction as the
//! group's progress past it, so a crash leaves it either still to handle or parked, never both
//! nor neither; with Redis before it acknowledges the entry (parking again after a crash finds
//! the row already there: one row per group, topic and event id). An operator marks parked
//! events for replay ([`replay`]) or discards them ([`discard`]) from the console, the admin API
//! or `webook events` — with or without a server running. Every consumer of the group looks for
//! marked events every [`REPLAY_POLL`], claims some for [`CLAIM_LEASE`] ([`claim_replays`]; a
//! consumer that dies holding them lets the lease run out and another claims them), hands each
//! to its handler alone and records the outcome ([`replayed`], or [`parked_again`]).

use std::time::Duration;

use serde::Serialize;
use sqlx::{any::AnyRow, AnyConnection, FromRow};

use axum::body::Bytes;

use super::Event;
use crate::db::{now_millis, Db};

/// How often a consumer looks for events marked for replay.
pub const REPLAY_POLL: Duration = Duration::from_secs(2);
/// How long a consumer holds the replays it claimed before another may take them.
pub const CLAIM_LEASE: Duration = Duration::from_secs(60);
/// Replays one consumer claims at a time.
const CLAIM_BATCH: i64 = 100;

/// A parked event is waiting for an operator.
pub const PARKED: &str = "parked";
/// An operator asked for a replay; no consumer has it yet.
pub const REPLAY: &str = "replay";
/// A consumer claimed it for replay (until `claimed_until`).
pub const REPLAYING: &str = "replaying";
/// Replayed: its handler applied it.
pub const REPLAYED: &str = "replayed";
/// Discarded by an operator.
pub const DISCARDED: &str = "discarded";

/// What the consumer knew about an event's failures when it parked it.
#[derive(Debug, Clone)]
pub struct FailureRecord {
    /// `permanent`, `unclassified` or `overflow` ([`super::failure::Failure::as_str`]).
    pub failure: &'static str,
    /// Handler calls that failed for it.
    pub attempts: u32,
    /// The first error.
    pub first_error: String,
    /// The last error.
    pub last_error: String,
    /// When it first failed (ms).
    pub first_failed_at: i64,
    /// When it last failed (ms).
    pub last_failed_at: i64,
}

/// Longest error text kept (the rest is cut at a character boundary).
const MAX_ERROR: usize = 2_000;

fn clip(text: &str) -> String {
    if text.len() <= MAX_ERROR {
        return text.to_owned();
    }
    let mut end = MAX_ERROR;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Parks `event` for `group` and, when `progress` is given (embedded mode: the group's position
/// in the outbox), moves the group's progress to it, in one transaction. Parking an event the
/// group already parked changes nothing.
pub async fn park(
    db: &Db,
    group: &str,
    event: &Event,
    record: &FailureRecord,
    progress: Option<i64>,
) -> sqlx::Result<()> {
    let now = now_millis();
    let mut tx = db.writer().begin().await?;
    sqlx::query(
        "INSERT INTO event_parked (topic, group_name, event_id, event_key, payload, \
         published_at, failure, attempts, first_error, last_error, first_failed_at, \
         last_failed_at, parked_at, state) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
         ON CONFLICT (group_name, topic, event_id) DO NOTHING",
    )
    .bind(&event.topic)
    .bind(group)
    .bind(&event.id)
    .bind(&event.key)
    .bind(String::from_utf8_lossy(&event.payload).into_owned())
    .bind(event.time)
    .bind(record.failure)
    .bind(i64::from(record.attempts))
    .bind(clip(&record.first_error))
    .bind(clip(&record.last_error))
    .bind(record.first_failed_at)
    .bind(record.last_failed_at)
    .bind(now)
    .bind(PARKED)
    .execute(&mut *tx)
    .await?;
    if let Some(last_id) = progress {
        advance(&mut tx, &event.topic, group, last_id, now).await?;
    }
    tx.commit().await
}

/// Moves (`topic`, `group`)'s outbox progress forward to `last_id` (never back).
pub(super) async fn advance(
    connection: &mut AnyConnection,
    topic: &str,
    group: &str,
    last_id: i64,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE event_progress SET last_id = $1, updated_at = $2 \
         WHERE topic = $3 AND group_name = $4 AND last_id < $1",
    )
    .bind(last_id)
    .bind(now)
    .bind(topic)
    .bind(group)
    .execute(connection)
    .await?;
    Ok(())
}

/// One parked event, as the console, the admin API and the CLI show it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema, sqlx::FromRow)]
pub struct Parked {
    /// Row id in the store (what replay and discard take).
    pub id: i64,
    /// Topic of the event.
    pub topic: String,
    /// The consumer group that parked it.
    #[sqlx(rename = "group_name")]
    pub group: String,
    /// The event's id ([`Event::id`]).
    pub event_id: String,
    /// The event's key.
    #[sqlx(rename = "event_key")]
    pub key: String,
    /// The event's JSON payload.
    pub payload: String,
    /// When the event was published (ms).
    pub published_at: i64,
    /// `permanent`, `unclassified` or `overflow`.
    pub failure: String,
    /// Handler calls that failed for it (replays included).
    pub attempts: i64,
    /// The first error.
    pub first_error: String,
    /// The last error.
    pub last_error: String,
    /// When it first failed (ms).
    pub first_failed_at: i64,
    /// When it last failed (ms).
    pub last_failed_at: i64,
    /// When it was parked (ms).
    pub parked_at: i64,
    /// `parked`, `replay`, `replaying`, `replayed` or `discarded`.
    pub state: String,
    /// When it was replayed or discarded (ms).
    pub resolved_at: Option<i64>,
    /// Who asked for the replay or discarded it.
    pub resolved_by: Option<String>,
    /// Why it was discarded (or when a replay was asked for).
    pub note: Option<String>,
}

impl Parked {
    /// The event as it was published, for its handler.
    pub fn event(&self) -> Event {
        Event {
            id: self.event_id.clone(),
            topic: self.topic.clone(),
            key: self.key.clone(),
            payload: Bytes::from(self.payload.clone().into_bytes()),
            time: self.published_at,
            // A replay is an operator's act, not part of the publishing trace.
            traceparent: None,
        }
    }
}

const COLUMNS: &str = "id, topic, group_name, event_id, event_key, payload, published_at, \
     failure, attempts, first_error, last_error, first_failed_at, last_failed_at, parked_at, \
     state, resolved_at, resolved_by, note";

/// Which parked events an operation takes: every field given must match. `open` alone means
/// the unresolved ones (parked or marked for replay).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// These store ids (any, when empty).
    pub ids: Vec<i64>,
    /// This consumer group.
    pub group: Option<String>,
    /// This topic.
    pub topic: Option<String>,
    /// Only events still waiting for an operator or a replay (not replayed, not discarded).
    pub open: bool,
    /// Only events in this state.
    pub state: Option<String>,
}

impl Filter {
    /// `WHERE …` over `event_parked` with its parameters from `$first` on.
    fn clause(&self, first: usize) -> (String, Vec<FilterValue>) {
        let mut conditions = Vec::new();
        let mut values = Vec::new();
        let mut next = first;
        if !self.ids.is_empty() {
            let list: Vec<String> = (0..self.ids.len())
                .map(|offset| format!("${}", next + offset))
                .collect();
            next += self.ids.len();
            conditions.push(format!("id IN ({})", list.join(", ")));
            values.extend(self.ids.iter().copied().map(FilterValue::Int));
        }
        for (column, value) in [("group_name", &self.group), ("topic", &self.topic)] {
            if let Some(value) = value {
                conditions.push(format!("{column} = ${next}"));
                next += 1;
                values.push(FilterValue::Text(value.clone()));
            }
        }
        if let Some(state) = &self.state {
            conditions.push(format!("state = ${next}"));
            values.push(FilterValue::Text(state.clone()));
        } else if self.open {
            conditions.push(format!("state IN ('{PARKED}', '{REPLAY}', '{REPLAYING}')"));
        }
        if conditions.is_empty() {
            (String::new(), values)
        } else {
            (format!(" WHERE {}", conditions.join(" AND ")), values)
        }
    }
}

enum FilterValue {
    Int(i64),
    Text(String),
}

fn bind_all<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    values: Vec<FilterValue>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for value in values {
        query = match value {
            FilterValue::Int(value) => query.bind(value),
            FilterValue::Text(value) => query.bind(value),
        };
    }
    query
}

/// Parked events matching `filter`, newest first, at most `limit`.
pub async fn list(db: &Db, filter: &Filter, limit: i64) -> sqlx::Result<Vec<Parked>> {
    let (clause, values) = filter.clause(2);
    let sql = format!("SELECT {COLUMNS} FROM event_parked{clause} ORDER BY id DESC LIMIT $1");
    bind_all(sqlx::query(&sql).bind(limit), values)
        .try_map(|row: AnyRow| Parked::from_row(&row))
        .fetch_all(db.pool())
        .await
}

/// Marks the open events matching `filter` for replay; returns how many. Their consumers take
/// them within [`REPLAY_POLL`] (a running server's; none runs offline until one starts).
pub async fn replay(db: &Db, filter: &Filter, by: &str) -> sqlx::Result<u64> {
    let filter = Filter {
        state: Some(PARKED.to_owned()),
        ..filter.clone()
    };
    let (clause, values) = filter.clause(3);
    let sql =
        format!("UPDATE event_parked SET state = '{REPLAY}', resolved_by = $1, note = $2{clause}");
    let done = bind_all(sqlx::query(&sql).bind(by).bind("replay requested"), values)
        .execute(db.writer())
        .await?
        .rows_affected();
    if done > 0 {
        tracing::info!(count = done, by, "parked events marked for replay");
    }
    Ok(done)
}

/// Discards the parked events matching `filter` (those not marked for replay), recording who
/// and why; returns how many. They are kept as `discarded` (the audit), never applied.
pub async fn discard(db: &Db, filter: &Filter, by: &str, reason: &str) -> sqlx::Result<u64> {
    let filter = Filter {
        state: Some(PARKED.to_owned()),
        ..filter.clone()
    };
    let (clause, values) = filter.clause(5);
    let sql = format!(
        "UPDATE event_parked SET state = '{DISCARDED}', resolved_at = $1, resolved_by = $2, \
         note = $3, claimed_until = $4{clause}"
    );
    let now = now_millis();
    let done = bind_all(
        sqlx::query(&sql)
            .bind(now)
            .bind(by)
            .bind(reason)
            .bind(0_i64),
        values,
    )
    .execute(db.writer())
    .await?
    .rows_affected();
    if done > 0 {
        tracing::warn!(count = done, by, reason, "parked events discarded");
    }
    Ok(done)
}

/// Claims up to a batch of (`topic`, `group`)'s events marked for replay (or whose claim ran
/// out) for [`CLAIM_LEASE`]; returns them oldest first.
pub async fn claim_replays(db: &Db, topic: &str, group: &str) -> sqlx::Result<Vec<Parked>> {
    let now = now_millis();
    let until = now + i64::try_from(CLAIM_LEASE.as_millis()).unwrap_or(i64::MAX);
    // The outer conditions are checked again on each row after waiting for its lock
    // (PostgreSQL), so two consumers never both claim one row.
    let sql = format!(
        "UPDATE event_parked SET state = '{REPLAYING}', claimed_until = $1 \
         WHERE topic = $2 AND group_name = $3 \
           AND (state = '{REPLAY}' OR (state = '{REPLAYING}' AND claimed_until < $4)) \
           AND id IN (SELECT id FROM event_parked WHERE topic = $2 AND group_name = $3 \
                      AND (state = '{REPLAY}' OR (state = '{REPLAYING}' AND claimed_until < $4)) \
                      ORDER BY id LIMIT $5) \
         RETURNING {COLUMNS}"
    );
    let mut claimed: Vec<Parked> = sqlx::query_as(&sql)
        .bind(until)
        .bind(topic)
        .bind(group)
        .bind(now)
        .bind(CLAIM_BATCH)
        .fetch_all(db.writer())
        .await?;
    claimed.sort_by_key(|parked| parked.id);
    Ok(claimed)
}

/// Whether (`topic`, `group`) has events marked for replay or claimed (a cheap look before
/// [`claim_replays`]).
pub async fn has_replays(db: &Db, topic: &str, group: &str) -> sqlx::Result<bool> {
    let found: Option<i64> = sqlx::query_scalar(&format!(
        "SELECT id FROM event_parked WHERE group_name = $1 AND topic = $2 \
         AND state IN ('{REPLAY}', '{REPLAYING}') LIMIT 1"
    ))
    .bind(group)
    .bind(topic)
    .fetch_optional(db.pool())
    .await?;
    Ok(found.is_some())
}

/// Records that parked event `id` was replayed (its handler applied it).
pub async fn replayed(db: &Db, id: i64) -> sqlx::Result<()> {
    sqlx::query(&format!(
        "UPDATE event_parked SET state = '{REPLAYED}', resolved_at = $1, claimed_until = 0 \
         WHERE id = $2"
    ))
    .bind(now_millis())
    .bind(id)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// Records that replaying parked event `id` failed again: back to `parked` with the error, or,
/// for a transient failure, back to `replay` to be tried again.
pub async fn parked_again(db: &Db, id: i64, error: &str, transient: bool) -> sqlx::Result<()> {
    let state = if transient { REPLAY } else { PARKED };
    sqlx::query(
        "UPDATE event_parked SET state = $1, attempts = attempts + 1, last_error = $2, \
         last_failed_at = $3, claimed_until = 0, note = 'replay failed' WHERE id = $4",
    )
    .bind(state)
    .bind(clip(error))
    .bind(now_millis())
    .bind(id)
    .execute(db.writer())
    .await?;
    Ok(())
}

/// Per (topic, group), how many events are open (parked or on their way to a replay).
pub async fn open_counts(db: &Db) -> sqlx::Result<Vec<(String, String, i64)>> {
    sqlx::query_as(&format!(
        "SELECT topic, group_name, COUNT(*) AS open FROM event_parked \
         WHERE state IN ('{PARKED}', '{REPLAY}', '{REPLAYING}') GROUP BY topic, group_name"
    ))
    .fetch_all(db.pool())
    .await
}

/// How long resolved (replayed or discarded) events are kept before the maintenance job
/// deletes them: the audit trail of a month.
pub const RESOLVED_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// Deletes events resolved before `before` (ms); returns how many.
pub async fn purge_resolved_before(db: &Db, before: i64) -> sqlx::Result<u64> {
    Ok(sqlx::query(&format!(
        "DELETE FROM event_parked WHERE state IN ('{REPLAYED}', '{DISCARDED}') \
         AND resolved_at < $1"
    ))
    .bind(before)
    .execute(db.writer())
    .await?
    .rows_affected())
}

/// A consumer group as the database knows it, without a running process: its outbox position
/// and what waits behind it (embedded mode), and its parked events by state.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct StoredGroup {
    /// The topic.
    pub topic: String,
    /// The group.
    pub group: String,
    /// Embedded mode: every outbox row of the topic up to this id is handled or parked.
    pub position: Option<i64>,
    /// Embedded mode: outbox rows of the topic after the position (counted up to 100 000).
    pub waiting: Option<i64>,
    /// Embedded mode: age in seconds of the oldest of them.
    pub oldest_waiting_seconds: Option<f64>,
    /// Parked and waiting for an operator.
    pub parked: i64,
    /// Marked for replay or being replayed.
    pub replaying: i64,
    /// Replayed.
    pub replayed: i64,
    /// Discarded.
    pub discarded: i64,
}

/// Most rows [`stored_groups`] counts behind one group.
const WAITING_COUNT_CAP: i64 = 100_000;

/// Every group the database knows of (an outbox position or a parked event), by group and topic.
pub async fn stored_groups(db: &Db) -> sqlx::Result<Vec<StoredGroup>> {
    let mut groups: std::collections::BTreeMap<(String, String), StoredGroup> =
        std::collections::BTreeMap::new();
    let positions: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT topic, group_name, last_id FROM event_progress")
            .fetch_all(db.pool())
            .await?;
    let now = now_millis();
    for (topic, group, position) in positions {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM (SELECT 1 FROM event_outbox WHERE topic = $1 AND id > $2 \
             LIMIT $3) behind",
        )
        .bind(&topic)
        .bind(position)
        .bind(WAITING_COUNT_CAP)
        .fetch_one(db.pool())
        .await?;
        let oldest: Option<i64> = sqlx::query_scalar(
            "SELECT created_at FROM event_outbox WHERE topic = $1 AND id > $2 ORDER BY id LIMIT 1",
        )
        .bind(&topic)
        .bind(position)
        .fetch_optional(db.pool())
        .await?;
        groups.insert(
            (group.clone(), topic.clone()),
            StoredGroup {
                topic,
                group,
                position: Some(position),
                waiting: Some(waiting),
                oldest_waiting_seconds: Some(
                    oldest.map_or(0.0, |at| now.saturating_sub(at).max(0) as f64 / 1000.0),
                ),
                ..StoredGroup::default()
            },
        );
    }
    let states: Vec<(String, String, String, i64)> = sqlx::query_as(
        "SELECT topic, group_name, state, COUNT(*) FROM event_parked \
         GROUP BY topic, group_name, state",
    )
    .fetch_all(db.pool())
    .await?;
    for (topic, group, state, count) in states {
        let entry = groups
            .entry((group.clone(), topic.clone()))
            .or_insert_with(|| StoredGroup {
                topic,
                group,
                ..StoredGroup::default()
            });
        match state.as_str() {
            PARKED => entry.parked += count,
            REPLAY | REPLAYING => entry.replaying += count,
            REPLAYED => entry.replayed += count,
            _ => entry.discarded += count,
        }
    }
    Ok(groups.into_values().collect())
}
