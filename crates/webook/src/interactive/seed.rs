//! Bulk writes of seeded interactions (`webook seed`, its interactions and comments phases):
//! multi-row `INSERT`s into `interactives` (an article's counters), `user_likes` and
//! `user_collects`, with the columns and meanings the [store](super::store) reads, on a
//! connection the caller holds inside its transaction. Every row is of biz 'article'.
//!
//! Invariants, which the caller keeps by writing in one transaction: an article's `like_cnt`
//! and `collect_cnt` are the numbers of its `user_likes` and `user_collects` rows (all status 1,
//! collects in the default folder 0), and its `comment_cnt` grows by the comments seeded under
//! it ([`add_seeded_comment_counts`]). Rows take the ids the database gives them (nothing refers
//! to them). Seeded articles are new: [`insert_seeded_counters`] expects no counter row for them.

use sqlx::AnyConnection;

use crate::biz::Biz;
use platform::{config::DatabaseKind, db::bulk_row_placeholders};

/// Rows per `INSERT`: a few thousand bound values, under SQLite's limit of 32 766.
const COUNTERS_PER_STATEMENT: usize = 1_000;
const INTERACTIONS_PER_STATEMENT: usize = 1_000;
const COMMENT_COUNTS_PER_STATEMENT: usize = 500;

/// The counters of one seeded article (`interactives`, biz 'article').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededCounters {
    /// The article's id.
    pub biz_id: i64,
    /// Reads.
    pub reads: i64,
    /// Likes (as many `user_likes` rows with status 1).
    pub likes: i64,
    /// Collects (as many `user_collects` rows with status 1).
    pub collects: i64,
    /// The article's creation time.
    pub ctime: i64,
    /// Time of the counters' last change.
    pub utime: i64,
}

/// Which table a [`SeededInteraction`] goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikeOrCollect {
    /// `user_likes`.
    Like,
    /// `user_collects`, default folder.
    Collect,
}

/// One user's like or collect of an article (status 1; collects in the default folder 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededInteraction {
    /// The user.
    pub uid: i64,
    /// The article's id.
    pub biz_id: i64,
    /// When (ms): `ctime` and `utime`.
    pub time: i64,
}

/// An article's seeded comments, to add to `interactives.comment_cnt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededCommentCount {
    /// The article.
    pub biz_id: i64,
    /// Its comments.
    pub comments: i64,
}

/// Inserts article counters into `interactives`.
pub async fn insert_seeded_counters(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededCounters],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(COUNTERS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO interactives (biz, biz_id, read_cnt, like_cnt, collect_cnt, ctime, utime) \
             VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 7)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(Biz::Article.as_str())
                .bind(row.biz_id)
                .bind(row.reads)
                .bind(row.likes)
                .bind(row.collects)
                .bind(row.ctime)
                .bind(row.utime);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Inserts likes or collects (status 1).
pub async fn insert_seeded_interactions(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    interaction: LikeOrCollect,
    rows: &[SeededInteraction],
) -> sqlx::Result<()> {
    let (table, extra_column) = match interaction {
        LikeOrCollect::Like => ("user_likes", ""),
        LikeOrCollect::Collect => ("user_collects", ", cid"),
    };
    let columns = if extra_column.is_empty() { 6 } else { 7 };
    for chunk in rows.chunks(INTERACTIONS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO {table} (uid, biz, biz_id, status, ctime, utime{extra_column}) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), columns)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.uid)
                .bind(Biz::Article.as_str())
                .bind(row.biz_id)
                .bind(1i64)
                .bind(row.time)
                .bind(row.time);
            if interaction == LikeOrCollect::Collect {
                query = query.bind(0i64);
            }
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Adds each article's seeded comments to its `comment_cnt` (creating counter rows, dated
/// `now`, for articles that had none).
pub async fn add_seeded_comment_counts(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededCommentCount],
    now: i64,
) -> sqlx::Result<()> {
    for chunk in rows.chunks(COMMENT_COUNTS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO interactives (biz, biz_id, comment_cnt, ctime, utime) VALUES {} \
             ON CONFLICT (biz, biz_id) DO UPDATE SET \
             comment_cnt = interactives.comment_cnt + excluded.comment_cnt",
            bulk_row_placeholders(kind, chunk.len(), 5)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(Biz::Article.as_str())
                .bind(row.biz_id)
                .bind(row.comments)
                .bind(now)
                .bind(now);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}
