//! SQL for follow relations (`follows`, `follow_counts`), one implementation for SQLite and
//! PostgreSQL.
//!
//! A follow or cancel is one transaction: the pair's row changes state (an upsert whose
//! `RETURNING` yields a row only for a real transition), and only then do both users' counts
//! move, the [`TOPIC_FOLLOW_CHANGED`] event go to the outbox, and the follower's inbox change:
//! a follow back-fills the followee's newest pushed articles ([`BACKFILL_ON_FOLLOW`]), a cancel
//! deletes the followee's articles from it — so the follower's next feed page already agrees.
//! Count rows are written in user-id order, so a follow A→B and a follow B→A lock them in the
//! same order and queue instead of deadlocking (PostgreSQL).

use sqlx::{Any, Transaction};

use crate::feed::model::{
    Cursor, FeedKind, FollowCounts, FollowEvent, FollowUser, TOPIC_FOLLOW_CHANGED,
};
use platform::{db::Db, events::outbox};

/// How many of a followee's newest pushed articles a new follower's inbox receives at once.
/// (Pulled articles need none: the feed merges them on read from the moment of the follow.)
pub const BACKFILL_ON_FOLLOW: i64 = 50;

/// Why a follow failed.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The followee does not exist.
    #[error("no such user")]
    NoSuchUser,
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Which side of the relation a list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The users `uid` follows.
    Followees,
    /// The users following `uid`.
    Followers,
}

/// Reads and writes follow relations.
#[derive(Debug, Clone)]
pub struct FollowStore {
    db: Db,
}

impl FollowStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Follows (`on`) or cancels; returns whether anything changed. With `announce`, a change
    /// records its [`FollowEvent`] in the same transaction.
    pub async fn set_follow(
        &self,
        follower: i64,
        followee: i64,
        on: bool,
        now: i64,
        announce: bool,
    ) -> Result<bool, FollowError> {
        let mut tx = self.db.writer().begin().await?;
        let changed = if on {
            // Writes first: a SQLite transaction that read first could not upgrade to writing
            // under contention. The followee's existence is part of the insert.
            sqlx::query_scalar::<_, i64>(
                "INSERT INTO follows (follower, followee, status, ctime, utime) \
                 SELECT $1, $2, 1, $3, $3 WHERE EXISTS (SELECT 1 FROM users WHERE id = $2) \
                 ON CONFLICT (follower, followee) DO UPDATE SET status = 1, utime = excluded.utime \
                 WHERE follows.status = 0 RETURNING id",
            )
            .bind(follower)
            .bind(followee)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?
            .is_some()
        } else {
            sqlx::query(
                "UPDATE follows SET status = 0, utime = $1 \
                 WHERE follower = $2 AND followee = $3 AND status = 1",
            )
            .bind(now)
            .bind(follower)
            .bind(followee)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1
        };
        if !changed {
            drop(tx);
            if on && !self.user_exists(followee).await? {
                return Err(FollowError::NoSuchUser);
            }
            return Ok(false);
        }
        let step = if on { 1 } else { -1 };
        let mut sides = [(follower, 0, step), (followee, step, 0)];
        sides.sort_unstable_by_key(|(uid, _, _)| *uid);
        for (uid, followers, followees) in sides {
            sqlx::query(
                "INSERT INTO follow_counts (uid, followers, followees, utime) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (uid) DO UPDATE SET followers = follow_counts.followers + excluded.followers, \
                 followees = follow_counts.followees + excluded.followees, utime = excluded.utime",
            )
            .bind(uid)
            .bind(followers)
            .bind(followees)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        if on {
            backfill(&mut tx, follower, followee).await?;
        } else {
            sqlx::query("DELETE FROM feed_inbox WHERE uid = $1 AND actor = $2 AND kind = $3")
                .bind(follower)
                .bind(followee)
                .bind(FeedKind::Article.as_str())
                .execute(&mut *tx)
                .await?;
        }
        if announce {
            let event = FollowEvent {
                follower,
                followee,
                on,
                time: now,
            };
            outbox::record(
                &mut tx,
                TOPIC_FOLLOW_CHANGED,
                &format!("{follower}:{followee}"),
                &event,
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Whether user `uid` exists.
    pub async fn user_exists(&self, uid: i64) -> sqlx::Result<bool> {
        Ok(
            sqlx::query_scalar::<_, i64>("SELECT id FROM users WHERE id = $1")
                .bind(uid)
                .fetch_optional(self.db.pool())
                .await?
                .is_some(),
        )
    }

    /// The follower and followee counts of `uid` (zeros when it has none).
    pub async fn counts(&self, uid: i64) -> sqlx::Result<FollowCounts> {
        let counts: Option<FollowCounts> =
            sqlx::query_as("SELECT followers, followees FROM follow_counts WHERE uid = $1")
                .bind(uid)
                .fetch_optional(self.db.pool())
                .await?;
        Ok(counts.unwrap_or_default())
    }

    /// Whether `follower` follows `followee` now.
    pub async fn is_following(&self, follower: i64, followee: i64) -> sqlx::Result<bool> {
        Ok(sqlx::query_scalar::<_, i64>(
            "SELECT id FROM follows WHERE follower = $1 AND followee = $2 AND status = 1",
        )
        .bind(follower)
        .bind(followee)
        .fetch_optional(self.db.pool())
        .await?
        .is_some())
    }

    /// One page of `uid`'s followees or followers, newest follow first, strictly after `after`,
    /// with whether `caller` follows each — one query. Returns up to `limit` users and the
    /// cursor of the next page when there is one.
    pub async fn list(
        &self,
        caller: i64,
        uid: i64,
        side: Side,
        after: Option<Cursor>,
        limit: usize,
    ) -> sqlx::Result<(Vec<FollowUser>, Option<Cursor>)> {
        let (owner, listed) = match side {
            Side::Followees => ("follower", "followee"),
            Side::Followers => ("followee", "follower"),
        };
        let after = after.unwrap_or(Cursor {
            time: i64::MAX,
            id: i64::MAX,
        });
        let sql = format!(
            "SELECT u.id, u.nickname, u.about_me, f.utime, f.id AS row_id, \
             CASE WHEN EXISTS (SELECT 1 FROM follows m WHERE m.follower = $1 AND m.followee = u.id AND m.status = 1) \
             THEN 1 ELSE 0 END AS followed \
             FROM follows f JOIN users u ON u.id = f.{listed} \
             WHERE f.{owner} = $2 AND f.status = 1 AND (f.utime < $3 OR (f.utime = $3 AND f.id < $4)) \
             ORDER BY f.utime DESC, f.id DESC LIMIT $5"
        );
        let rows: Vec<FollowRow> = sqlx::query_as(&sql)
            .bind(caller)
            .bind(uid)
            .bind(after.time)
            .bind(after.id)
            .bind(limit as i64 + 1)
            .fetch_all(self.db.pool())
            .await?;
        let mut users = Vec::with_capacity(rows.len().min(limit));
        let mut next = None;
        let more = rows.len() > limit;
        for row in rows.into_iter().take(limit) {
            next = Some(Cursor {
                time: row.utime,
                id: row.row_id,
            });
            users.push(FollowUser {
                id: row.id,
                nickname: row.nickname,
                about_me: row.about_me,
                followed: row.followed == 1,
            });
        }
        Ok((users, next.filter(|_| more)))
    }
}

/// Puts `followee`'s newest pushed (or being pushed) articles into `follower`'s inbox; those
/// already there stay as they are.
async fn backfill(
    tx: &mut Transaction<'static, Any>,
    follower: i64,
    followee: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO feed_inbox (uid, event_id, actor, kind, ctime) \
         SELECT $1, id, actor, kind, ctime FROM feed_events \
         WHERE actor = $2 AND kind = $3 AND delivery IN (0, 1) \
         ORDER BY ctime DESC, id DESC LIMIT $4 \
         ON CONFLICT (uid, event_id) DO NOTHING",
    )
    .bind(follower)
    .bind(followee)
    .bind(FeedKind::Article.as_str())
    .bind(BACKFILL_ON_FOLLOW)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// One row of a follow list: the listed user, the follow row's key (the page cursor) and
/// whether the caller follows them (`1` or `0`, computed in SQL).
#[derive(sqlx::FromRow)]
struct FollowRow {
    id: i64,
    nickname: String,
    about_me: String,
    utime: i64,
    row_id: i64,
    followed: i64,
}
