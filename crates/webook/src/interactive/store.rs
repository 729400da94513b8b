//! SQL for counters (`interactives`), likes (`user_likes`) and collects (`user_collects`,
//! `collections`), with applied-event ids through [`platform::events::dedup`]. One
//! implementation for SQLite and PostgreSQL.
//!
//! Likes and collects change the user's row and the counter in one transaction, and only when the
//! user's row actually changes state, so repeating a like counts once and unliking what was never
//! liked changes nothing. A collect learns that from its upsert's `RETURNING` (a row only for a
//! real transition); a batch of likes reads its rows' states first and applies the batch to them
//! as sets ([`InteractiveStore::set_likes`]). Counters never go negative.

use std::collections::{BTreeMap, HashMap, HashSet};

use sqlx::{any::AnyRow, Any, Row, Transaction};

use crate::{
    biz::Biz,
    interactive::model::{
        Counts, InteractionEvent, UserFlags, TOPIC_COLLECT_CHANGED, TOPIC_LIKE_CHANGED,
    },
};
use platform::{
    config::DatabaseKind,
    db::{bulk_row_placeholders, id_set, id_set_value, kind_of, row_placeholders, Db},
    events::{dedup, outbox},
};

/// One like (`like: true`) or unlike by `uid` of `biz` + `biz_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LikeChange {
    /// Who.
    pub uid: i64,
    /// Kind of object.
    pub biz: Biz,
    /// Its id.
    pub biz_id: i64,
    /// Like or unlike.
    pub like: bool,
}

/// Reads and writes interactions.
#[derive(Debug, Clone)]
pub struct InteractiveStore {
    db: Db,
}

/// Which counter a user action moves.
#[derive(Debug, Clone, Copy)]
enum Counter {
    Like,
    Collect,
}

impl Counter {
    fn column(self) -> &'static str {
        match self {
            Self::Like => "like_cnt",
            Self::Collect => "collect_cnt",
        }
    }
}

impl InteractiveStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Likes (`true`) or unlikes; returns whether anything changed.
    pub async fn set_like(
        &self,
        uid: i64,
        biz: Biz,
        biz_id: i64,
        like: bool,
        now: i64,
    ) -> sqlx::Result<bool> {
        let change = LikeChange {
            uid,
            biz,
            biz_id,
            like,
        };
        Ok(self
            .set_likes(std::slice::from_ref(&change), now, true)
            .await?
            .first()
            .copied()
            .unwrap_or(false))
    }

    /// Applies `changes` in order in one transaction (all or none), recording (when `announce`)
    /// a [`TOPIC_LIKE_CHANGED`] event for each that changed something (one statement for the
    /// batch); returns, for each, whether it changed anything.
    ///
    /// Set-based, so a batch costs the same five statements whatever its size and however often
    /// one user likes and unlikes one object in it (on PostgreSQL each statement is a round
    /// trip; a pair per like capped the writer near 5 000 likes/s, docs/PERFORMANCE.md → Likes
    /// as sets):
    /// 1. the users' rows of the batch are read — and on PostgreSQL locked, in key order — so
    ///    each (user, object) starts from its committed state (SQLite's writer holds the write
    ///    lock from `BEGIN IMMEDIATE`);
    /// 2. each pair's changes are applied in order in memory: a change changed something when
    ///    it differs from the state before it, so a repeated like, or an unlike of what was
    ///    never liked, counts nothing;
    /// 3. one upsert sets the pairs whose last state differs from their first to that last
    ///    state, `RETURNING` those it flipped. A pair it did not flip was inserted by another
    ///    instance after the read (no row to lock then) and now holds that state, locked: the
    ///    batch starts from it instead (2 again, for that pair);
    /// 4. one upsert adds each object's net change to its counter, in key order, so two
    ///    instances' batches lock counters in the same order and queue instead of deadlocking.
    pub async fn set_likes(
        &self,
        changes: &[LikeChange],
        now: i64,
        announce: bool,
    ) -> sqlx::Result<Vec<bool>> {
        let mut tx = self.db.writer().begin().await?;
        let mut pairs: BTreeMap<LikePair, PairChanges> = BTreeMap::new();
        for (index, change) in changes.iter().enumerate() {
            pairs
                .entry((change.uid, change.biz.as_str(), change.biz_id))
                .or_default()
                .changes
                .push(index);
        }
        let keys: Vec<LikePair> = pairs.keys().copied().collect();
        for pair in liked_pairs(&mut tx, &keys).await? {
            if let Some(entry) = pairs.get_mut(&pair) {
                entry.liked = true;
            }
        }
        let last = |entry: &PairChanges| {
            entry
                .changes
                .last()
                .is_some_and(|&index| changes[index].like)
        };
        let flips: Vec<(LikePair, bool)> = pairs
            .iter()
            .filter(|(_, entry)| last(entry) != entry.liked)
            .map(|(pair, entry)| (*pair, last(entry)))
            .collect();
        let flipped = set_like_states(&mut tx, &flips, now).await?;
        for (pair, state) in &flips {
            if !flipped.contains(pair) {
                if let Some(entry) = pairs.get_mut(pair) {
                    entry.liked = *state;
                }
            }
        }
        let mut changed = vec![false; changes.len()];
        let mut deltas: BTreeMap<(&'static str, i64), i64> = BTreeMap::new();
        for ((_, biz, biz_id), entry) in &pairs {
            let mut liked = entry.liked;
            for &index in &entry.changes {
                let like = changes[index].like;
                if like != liked {
                    changed[index] = true;
                    *deltas.entry((biz, *biz_id)).or_default() += if like { 1 } else { -1 };
                    liked = like;
                }
            }
        }
        deltas.retain(|_, delta| *delta != 0);
        add_to_counter(&mut tx, Counter::Like, &deltas, now).await?;
        let events: Vec<(String, InteractionEvent)> = changes
            .iter()
            .zip(&changed)
            .filter(|(_, changed)| **changed)
            .map(|(change, _)| {
                interaction_event(change.uid, change.biz, change.biz_id, change.like, now)
            })
            .collect();
        if announce && !events.is_empty() {
            outbox::record_many(&mut tx, TOPIC_LIKE_CHANGED, &events, now).await?;
        }
        tx.commit().await?;
        Ok(changed)
    }

    /// Collects into folder `cid` (`true`; moving between folders does not count again) or
    /// removes from collections; returns whether the counter changed, in which case (when
    /// `announce`) a [`TOPIC_COLLECT_CHANGED`] event is recorded in the same transaction.
    #[allow(clippy::too_many_arguments)]
    pub async fn set_collect(
        &self,
        uid: i64,
        biz: Biz,
        biz_id: i64,
        cid: i64,
        collect: bool,
        now: i64,
        announce: bool,
    ) -> sqlx::Result<bool> {
        let kind = biz;
        let biz = biz.as_str();
        let mut tx = self.db.writer().begin().await?;
        let changed = if collect {
            let turned_on = sqlx::query_scalar::<_, i64>(
                "INSERT INTO user_collects (uid, biz, biz_id, cid, status, ctime, utime) VALUES ($1, $2, $3, $4, 1, $5, $5) \
                 ON CONFLICT (uid, biz, biz_id) DO UPDATE SET status = 1, cid = excluded.cid, utime = excluded.utime \
                 WHERE user_collects.status = 0 RETURNING id",
            )
            .bind(uid)
            .bind(biz)
            .bind(biz_id)
            .bind(cid)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?
            .is_some();
            if !turned_on {
                // Already collected: at most a move to another folder. (Writes only: a SQLite
                // transaction that read first could not upgrade to writing under contention.)
                sqlx::query(
                    "UPDATE user_collects SET cid = $1, utime = $2 \
                     WHERE uid = $3 AND biz = $4 AND biz_id = $5 AND status = 1 AND cid <> $1",
                )
                .bind(cid)
                .bind(now)
                .bind(uid)
                .bind(biz)
                .bind(biz_id)
                .execute(&mut *tx)
                .await?;
            }
            turned_on
        } else {
            uncollect(&mut tx, uid, biz, biz_id, now).await?
        };
        if changed {
            let delta = if collect { 1 } else { -1 };
            let deltas = BTreeMap::from([((biz, biz_id), delta)]);
            add_to_counter(&mut tx, Counter::Collect, &deltas, now).await?;
        }
        if changed && announce {
            let (key, event) = interaction_event(uid, kind, biz_id, collect, now);
            outbox::record(&mut tx, TOPIC_COLLECT_CHANGED, &key, &event, now).await?;
        }
        tx.commit().await?;
        Ok(changed)
    }

    /// Whether folder `cid` belongs to `uid` (the default folder 0 always does).
    pub async fn owns_collection(&self, uid: i64, cid: i64) -> sqlx::Result<bool> {
        if cid == 0 {
            return Ok(true);
        }
        let found: Option<i64> =
            sqlx::query_scalar("SELECT id FROM collections WHERE id = $1 AND uid = $2")
                .bind(cid)
                .bind(uid)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(found.is_some())
    }

    /// Adds read counts — `reads` are (biz, biz_id, event id) — one statement for the whole batch,
    /// in one transaction. With `dedup_group`, event ids already applied by that group are
    /// skipped and the rest recorded in the same transaction, so a redelivered batch is counted
    /// once. Returns the reads applied per object.
    pub async fn apply_reads(
        &self,
        reads: &[(Biz, i64, String)],
        dedup_group: Option<&str>,
        now: i64,
    ) -> sqlx::Result<Vec<((Biz, i64), i64)>> {
        let mut tx = self.db.writer().begin().await?;
        let kind = kind_of(&tx);
        let fresh: Vec<&(Biz, i64, String)> = match dedup_group {
            None => reads.iter().collect(),
            Some(group) => {
                dedup::first_deliveries(
                    &mut tx,
                    kind,
                    group,
                    reads.iter().collect(),
                    |(_, _, id)| id.as_str(),
                    now,
                )
                .await?
            }
        };
        let mut per_object: HashMap<(Biz, i64), i64> = HashMap::new();
        for (biz, biz_id, _) in fresh {
            *per_object.entry((*biz, *biz_id)).or_default() += 1;
        }
        // In key order: two instances' batches lock the same rows in the same order, so on
        // PostgreSQL they queue instead of deadlocking (HashMap order differs per batch).
        let mut applied: Vec<((Biz, i64), i64)> = per_object.into_iter().collect();
        applied.sort_unstable();
        for chunk in applied.chunks(1000) {
            let placeholders = bulk_row_placeholders(kind, chunk.len(), 5);
            let sql = format!(
                "INSERT INTO interactives (biz, biz_id, read_cnt, ctime, utime) VALUES {placeholders} \
                 ON CONFLICT (biz, biz_id) DO UPDATE SET read_cnt = interactives.read_cnt + excluded.read_cnt, \
                 utime = excluded.utime"
            );
            let mut query = sqlx::query(&sql);
            for ((biz, biz_id), count) in chunk {
                query = query
                    .bind(biz.as_str())
                    .bind(*biz_id)
                    .bind(*count)
                    .bind(now)
                    .bind(now);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(applied)
    }

    /// The counters of one object (zeros when it has none yet).
    pub async fn counts(&self, biz: Biz, biz_id: i64) -> sqlx::Result<Counts> {
        // Embedded: inline, without the pool's thread hand-off (platform::db::direct).
        if let Some(counts) = self.db.read_inline(|connection| {
            use platform::db::direct::rusqlite::OptionalExtension;
            connection
                .prepare_cached(COUNTS)?
                .query_row((biz.as_str(), biz_id), |row| {
                    Ok(Counts {
                        read_cnt: row.get(0)?,
                        like_cnt: row.get(1)?,
                        collect_cnt: row.get(2)?,
                        comment_cnt: row.get(3)?,
                    })
                })
                .optional()
        }) {
            return Ok(counts.unwrap_or_default());
        }
        Ok(self
            .batch_counts(biz, &[biz_id])
            .await?
            .remove(&biz_id)
            .unwrap_or_default())
    }

    /// The counters of many objects in one query; objects without counters are absent.
    pub async fn batch_counts(&self, biz: Biz, ids: &[i64]) -> sqlx::Result<HashMap<i64, Counts>> {
        let biz = biz.as_str();
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        // One statement text for any number of ids (prepared once): the read counter asks for a
        // thousand or more after every batch.
        // The engine of the connection it runs on: a move may re-route before one is taken.
        let mut connection = self.db.pool().acquire().await?;
        let kind = kind_of(&connection);
        let sql = format!(
            "SELECT biz_id, read_cnt, like_cnt, collect_cnt, comment_cnt FROM interactives \
             WHERE biz = $1 AND biz_id IN ({})",
            id_set(kind, 2)
        );
        let rows: Vec<CountsRow> = sqlx::query_as(&sql)
            .bind(biz)
            .bind(id_set_value(kind, ids))
            .fetch_all(&mut *connection)
            .await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.biz_id, row.counts))
            .collect())
    }

    /// Whether `uid` likes and has collected the object, in one query.
    pub async fn user_flags(&self, uid: i64, biz: Biz, biz_id: i64) -> sqlx::Result<UserFlags> {
        let biz = biz.as_str();
        let flags = |liked: Option<i64>, collected: Option<i64>| UserFlags {
            liked: liked == Some(1),
            collected: collected == Some(1),
        };
        // Embedded: inline, without the pool's thread hand-off (platform::db::direct).
        if let Some(found) = self.db.read_inline(|connection| {
            connection
                .prepare_cached(USER_FLAGS)?
                .query_row((uid, biz, biz_id), |row| {
                    Ok(flags(row.get(0)?, row.get(1)?))
                })
        }) {
            return Ok(found);
        }
        let (liked, collected) = sqlx::query_as(USER_FLAGS)
            .bind(uid)
            .bind(biz)
            .bind(biz_id)
            .fetch_one(self.db.pool())
            .await?;
        Ok(flags(liked, collected))
    }
}

/// A [`InteractiveStore::batch_counts`] row: the object's id and its counters.
#[derive(sqlx::FromRow)]
struct CountsRow {
    biz_id: i64,
    #[sqlx(flatten)]
    counts: Counts,
}

/// The counters of one object (no row: all zero).
pub const COUNTS: &str = "SELECT read_cnt, like_cnt, collect_cnt, comment_cnt FROM interactives \
                          WHERE biz = $1 AND biz_id = $2";

/// Whether a user likes / has collected an object (`status` 1), or NULL when never.
pub const USER_FLAGS: &str =
    "SELECT (SELECT status FROM user_likes WHERE uid = $1 AND biz = $2 AND biz_id = $3) AS liked, \
            (SELECT status FROM user_collects WHERE uid = $1 AND biz = $2 AND biz_id = $3) AS collected";

/// Moves the comment count of the object by `delta` (±1) in the caller's transaction — the
/// comments feature calls it in the transaction that adds or deletes the comment, so the count
/// is exact; then [`InteractiveService::comments_changed`](crate::interactive::InteractiveService::comments_changed)
/// drops the cached counts. Never goes below zero.
pub async fn add_comments(
    conn: &mut sqlx::AnyConnection,
    biz: Biz,
    biz_id: i64,
    delta: i64,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO interactives (biz, biz_id, comment_cnt, ctime, utime) VALUES ($1, $2, $3, $4, $4) \
         ON CONFLICT (biz, biz_id) DO UPDATE SET \
           comment_cnt = CASE WHEN interactives.comment_cnt + excluded.comment_cnt < 0 THEN 0 \
                              ELSE interactives.comment_cnt + excluded.comment_cnt END, \
           utime = excluded.utime",
    )
    .bind(biz.as_str())
    .bind(biz_id)
    .bind(delta)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// The outbox entry (key `biz:biz_id`, payload) of a like or collect that changed state.
fn interaction_event(
    uid: i64,
    biz: Biz,
    biz_id: i64,
    on: bool,
    now: i64,
) -> (String, InteractionEvent) {
    (
        format!("{biz}:{biz_id}"),
        InteractionEvent {
            uid,
            biz,
            biz_id,
            on,
            time: now,
        },
    )
}

/// (uid, biz, biz_id): one user's like of one object.
type LikePair = (i64, &'static str, i64);

/// A batch's changes of one pair (indexes into the batch, in order) and the state they start
/// from.
#[derive(Default)]
struct PairChanges {
    liked: bool,
    changes: Vec<usize>,
}

/// The `pairs` (in key order) that are liked now; on PostgreSQL their rows (every existing one
/// of `pairs`) stay locked, in key order, until `tx` ends.
async fn liked_pairs(
    tx: &mut Transaction<'static, Any>,
    pairs: &[LikePair],
) -> sqlx::Result<Vec<LikePair>> {
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let lock = match kind_of(tx) {
        DatabaseKind::Postgres => " FOR UPDATE",
        DatabaseKind::Sqlite => "",
    };
    let sql = format!(
        "SELECT uid, biz, biz_id, status FROM user_likes WHERE (uid, biz, biz_id) IN (VALUES {}) \
         ORDER BY uid, biz, biz_id{lock}",
        row_placeholders(pairs.len(), 3)
    );
    let mut query = sqlx::query(&sql);
    for (uid, biz, biz_id) in pairs {
        query = query.bind(*uid).bind(*biz).bind(*biz_id);
    }
    let mut liked = Vec::new();
    for row in query.fetch_all(&mut **tx).await? {
        if row.try_get::<i64, _>(3)? == 1 {
            liked.push(like_pair(&row)?);
        }
    }
    Ok(liked)
}

/// Sets each pair of `states` to its state (liked or not) in one upsert; returns the pairs
/// whose row changed state (a pair already in its state is left as it is, ctime and utime too).
async fn set_like_states(
    tx: &mut Transaction<'static, Any>,
    states: &[(LikePair, bool)],
    now: i64,
) -> sqlx::Result<HashSet<LikePair>> {
    if states.is_empty() {
        return Ok(HashSet::new());
    }
    let sql = format!(
        "INSERT INTO user_likes (uid, biz, biz_id, status, ctime, utime) VALUES {} \
         ON CONFLICT (uid, biz, biz_id) DO UPDATE SET status = excluded.status, utime = excluded.utime \
         WHERE user_likes.status <> excluded.status RETURNING uid, biz, biz_id",
        row_placeholders(states.len(), 6)
    );
    let mut query = sqlx::query(&sql);
    for ((uid, biz, biz_id), liked) in states {
        query = query
            .bind(*uid)
            .bind(*biz)
            .bind(*biz_id)
            .bind(i64::from(*liked))
            .bind(now)
            .bind(now);
    }
    query
        .fetch_all(&mut **tx)
        .await?
        .iter()
        .map(like_pair)
        .collect()
}

/// The (uid, biz, biz_id) of a `user_likes` row.
fn like_pair(row: &AnyRow) -> sqlx::Result<LikePair> {
    let biz: String = row.try_get(1)?;
    let biz: Biz = biz.parse().map_err(|_| sqlx::Error::ColumnDecode {
        index: "biz".into(),
        source: format!("unknown biz {biz:?}").into(),
    })?;
    Ok((row.try_get(0)?, biz.as_str(), row.try_get(2)?))
}

/// Adds each object's net change (`deltas`, in key order, none zero) to `counter` in one
/// upsert, never below zero. A decrement of an object without a counter row would insert a
/// negative count: the statement returns it, and it is set to zero (rows already locked).
async fn add_to_counter(
    tx: &mut Transaction<'static, Any>,
    counter: Counter,
    deltas: &BTreeMap<(&'static str, i64), i64>,
    now: i64,
) -> sqlx::Result<()> {
    if deltas.is_empty() {
        return Ok(());
    }
    let column = counter.column();
    let sql = format!(
        "INSERT INTO interactives (biz, biz_id, {column}, ctime, utime) VALUES {} \
         ON CONFLICT (biz, biz_id) DO UPDATE SET {column} = CASE \
         WHEN interactives.{column} + excluded.{column} > 0 THEN interactives.{column} + excluded.{column} \
         ELSE 0 END, utime = excluded.utime RETURNING biz, biz_id, {column}",
        row_placeholders(deltas.len(), 5)
    );
    let mut query = sqlx::query(&sql);
    for ((biz, biz_id), delta) in deltas {
        query = query
            .bind(*biz)
            .bind(*biz_id)
            .bind(*delta)
            .bind(now)
            .bind(now);
    }
    for row in query.fetch_all(&mut **tx).await? {
        if row.try_get::<i64, _>(2)? < 0 {
            sqlx::query(&format!(
                "UPDATE interactives SET {column} = 0 WHERE biz = $1 AND biz_id = $2"
            ))
            .bind(row.try_get::<String, _>(0)?)
            .bind(row.try_get::<i64, _>(1)?)
            .execute(&mut **tx)
            .await?;
        }
    }
    Ok(())
}

/// Sets the user's collect row to 0 if it was 1; returns whether it did.
async fn uncollect(
    tx: &mut Transaction<'static, Any>,
    uid: i64,
    biz: &str,
    biz_id: i64,
    now: i64,
) -> sqlx::Result<bool> {
    Ok(sqlx::query(
        "UPDATE user_collects SET status = 0, utime = $1 \
         WHERE uid = $2 AND biz = $3 AND biz_id = $4 AND status = 1",
    )
    .bind(now)
    .bind(uid)
    .bind(biz)
    .bind(biz_id)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1)
}
