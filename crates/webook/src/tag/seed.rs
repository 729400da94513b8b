//! Bulk writes of seeded tags (`webook seed`, its tags phase): multi-row `INSERT`s into `tags`
//! (authors' own tags) and `tag_bizs` (tags on articles), with the columns and meanings the
//! [store](super::store) reads, on a connection the caller holds inside its transaction.
//!
//! Invariants: tag ids are explicit — the seed continues after the largest id in `tags`
//! ([`next_tag_id`]), and tag rows name their tags — and, on PostgreSQL,
//! [`insert_seeded_tags`] moves the identity sequence past them in the same transaction, so tags
//! the application creates later get fresh ids (SQLite's AUTOINCREMENT keeps track of explicit
//! ids by itself). Each tag's `name_key` is [`tag_key`] of its name, as the store keys names,
//! so the caller gives an author distinct keys; a tag row's `uid` is its tag's owner, who is
//! the article's author. No `tagged_objects` row is written: the first replace of an article's
//! tags through the API creates it. [`SEEDED_BULK_TABLES`] names the table whose non-unique
//! index a bulk load may drop and build again once its rows are in.

use sqlx::AnyConnection;

use super::model::tag_key;
use crate::biz::Biz;
use platform::{
    config::DatabaseKind,
    db::{advance_id_sequence, bulk_row_placeholders, next_free_id},
};

/// Rows per `INSERT` (6 values each for tags, 5 for tag rows).
const ROWS_PER_STATEMENT: usize = 1_000;

/// The tables whose non-unique indexes a bulk load of tags may suspend: the tag rows'.
pub const SEEDED_BULK_TABLES: &[&str] = &["tag_bizs"];

/// A seeded tag of an author's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededTag {
    /// Explicit id.
    pub id: i64,
    /// Its owner.
    pub uid: i64,
    /// Its name, a valid tag name (already trimmed).
    pub name: &'static str,
    /// When it was created (ms): `ctime` and `utime`.
    pub ctime: i64,
}

/// A seeded tag on an article (biz 'article').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededTagRow {
    /// The tag.
    pub tid: i64,
    /// Its owner, the article's author.
    pub uid: i64,
    /// The article.
    pub article_id: i64,
    /// When it was attached (ms).
    pub ctime: i64,
}

/// One past the largest tag id: the id the next seeded tag gets.
pub async fn next_tag_id(conn: &mut AnyConnection) -> sqlx::Result<i64> {
    next_free_id(conn, "tags").await
}

/// Inserts `rows` into `tags`, then moves PostgreSQL's id sequence past them.
pub async fn insert_seeded_tags(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededTag],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO tags (id, uid, name, name_key, ctime, utime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 6)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.id)
                .bind(row.uid)
                .bind(row.name)
                .bind(tag_key(row.name))
                .bind(row.ctime)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    advance_id_sequence(conn, "tags").await
}

/// Inserts tags on articles into `tag_bizs`.
pub async fn insert_seeded_tag_rows(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededTagRow],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO tag_bizs (tid, uid, biz, biz_id, ctime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 5)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.tid)
                .bind(row.uid)
                .bind(Biz::Article.as_str())
                .bind(row.article_id)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
        // Each row carries its tag's key, as an attach writes it (topic pages).
        let (first, last) = chunk.iter().fold((i64::MAX, i64::MIN), |(lo, hi), row| {
            (lo.min(row.article_id), hi.max(row.article_id))
        });
        sqlx::query(
            "UPDATE tag_bizs SET name_key = (SELECT t.name_key FROM tags t WHERE t.id = tag_bizs.tid) \
             WHERE biz = $1 AND biz_id >= $2 AND biz_id <= $3 AND name_key = ''",
        )
        .bind(Biz::Article.as_str())
        .bind(first)
        .bind(last)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}
