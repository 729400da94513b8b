//! Bulk writes of seeded comments (`webook seed`, its comments phase): multi-row `INSERT`s into
//! `comments`, with the columns and meanings the [store](super::store) reads, on a connection
//! the caller holds inside its transaction. Every comment is on an article and none is deleted.
//!
//! Invariants: ids are explicit — the seed continues after the largest id in the table
//! ([`next_comment_id`]) — and, on PostgreSQL, [`insert_seeded_comments`] moves the identity
//! sequence past them in the same transaction, so comments the application writes later get
//! fresh ids (SQLite's AUTOINCREMENT keeps track of explicit ids by itself). A reply's
//! `root_id` and `parent_id` name earlier comments of the same article; every `child_cnt` and
//! `reply_cnt` counts the rows answering it, as the store keeps them — the caller builds whole
//! threads. The articles' `comment_cnt` is the interactive feature's, written in the same
//! transaction by the caller.
//! No outbox event (nor comment notice) is written: seeded comments were never announced.

use sqlx::AnyConnection;

use crate::biz::Biz;
use platform::{
    config::DatabaseKind,
    db::{advance_id_sequence, bulk_row_placeholders, next_free_id},
};

/// Rows per `INSERT` (12 values each).
const COMMENTS_PER_STATEMENT: usize = 500;

/// A seeded comment on an article.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeededComment {
    /// Comment id.
    pub id: i64,
    /// The article.
    pub biz_id: i64,
    /// Its author.
    pub uid: i64,
    /// Its thread's top-level comment (0 for a top-level comment).
    pub root_id: i64,
    /// The comment it answers (0 for a top-level comment).
    pub parent_id: i64,
    /// Plain text.
    pub content: String,
    /// Comments answering it.
    pub child_cnt: i64,
    /// Top-level only: replies in its thread.
    pub reply_cnt: i64,
    /// When it was written (ms): `ctime` and `utime`.
    pub ctime: i64,
}

/// One past the largest comment id: the id the next seeded comment gets.
pub async fn next_comment_id(conn: &mut AnyConnection) -> sqlx::Result<i64> {
    next_free_id(conn, "comments").await
}

/// Inserts `rows` into `comments` (none deleted), then moves PostgreSQL's id sequence past
/// them, so the application's own comments do not collide with the seeded ids.
pub async fn insert_seeded_comments(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededComment],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(COMMENTS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO comments (id, biz, biz_id, uid, root_id, parent_id, content, deleted, \
             child_cnt, reply_cnt, ctime, utime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 12)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.id)
                .bind(Biz::Article.as_str())
                .bind(row.biz_id)
                .bind(row.uid)
                .bind(row.root_id)
                .bind(row.parent_id)
                .bind(row.content.as_str())
                .bind(0_i64)
                .bind(row.child_cnt)
                .bind(row.reply_cnt)
                .bind(row.ctime)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    advance_id_sequence(conn, "comments").await
}
