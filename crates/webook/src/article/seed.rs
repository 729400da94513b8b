//! Bulk writes of seeded articles (`webook seed`, its articles phase), and the reads of them a
//! later phase needs: multi-row `INSERT`s into `articles` (the author's copies) and
//! `published_articles` (the reader copies), with the columns and meanings the
//! [store](super::store) reads, on a connection the caller holds inside its transaction.
//!
//! Invariants: an article's two copies share its explicit id — the seed continues after the
//! largest id in `articles` ([`next_article_id`]) — and, on PostgreSQL,
//! [`insert_seeded_articles`] moves the identity sequence of `articles` past them in the same
//! transaction, so articles the application creates later get fresh ids (SQLite's AUTOINCREMENT
//! keeps track of explicit ids by itself). An article ever published (published or withdrawn)
//! has a reader copy carrying the same status, title, body and times; a draft has none. No
//! outbox event is written: seeded articles were never announced.

use std::ops::Range;

use sqlx::AnyConnection;

use platform::{
    config::DatabaseKind,
    db::{advance_id_sequence, bulk_row_placeholders, next_free_id},
};

/// Rows per `INSERT` (8 values each, long texts): under SQLite's limit of 32 766 bound values.
const ARTICLES_PER_STATEMENT: usize = 500;

/// A seeded article: the author's copy, and the reader copy when it was ever published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeededArticle {
    /// Explicit id, shared by both copies.
    pub id: i64,
    /// Author's user id.
    pub author_id: i64,
    /// Plain-text title.
    pub title: String,
    /// Sanitised HTML.
    pub content: String,
    /// Abstract of `content`.
    pub abstract_text: String,
    /// 1 draft, 2 published, 3 withdrawn (both copies carry it).
    pub status: i64,
    /// Creation time = first publication (ms).
    pub ctime: i64,
    /// Last change (ms).
    pub utime: i64,
}

impl SeededArticle {
    /// Whether the article has a reader copy (it was published at some time).
    pub fn has_reader_copy(&self) -> bool {
        self.status != 1
    }
}

/// A published article as the later seed phases read it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishedArticle {
    /// The article's id.
    pub id: i64,
    /// Its author.
    pub author_id: i64,
    /// Its (first) publication (ms).
    pub ctime: i64,
}

/// One past the largest article id: the id the next seeded article gets.
pub async fn next_article_id(conn: &mut AnyConnection) -> sqlx::Result<i64> {
    next_free_id(conn, "articles").await
}

/// Inserts the author's copies of `rows` into `articles`, and the reader copies of those ever
/// published into `published_articles`, then moves PostgreSQL's id sequence past them.
pub async fn insert_seeded_articles(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededArticle],
) -> sqlx::Result<()> {
    for table in ["articles", "published_articles"] {
        let chunks = rows
            .iter()
            .filter(|row| table == "articles" || row.has_reader_copy())
            .collect::<Vec<_>>();
        for chunk in chunks.chunks(ARTICLES_PER_STATEMENT) {
            let sql = format!(
                "INSERT INTO {table} (id, author_id, title, content, abstract, status, ctime, \
                 utime) VALUES {}",
                bulk_row_placeholders(kind, chunk.len(), 8)
            );
            let mut query = sqlx::query(&sql);
            for row in chunk {
                query = query
                    .bind(row.id)
                    .bind(row.author_id)
                    .bind(row.title.as_str())
                    .bind(row.content.as_str())
                    .bind(row.abstract_text.as_str())
                    .bind(row.status)
                    .bind(row.ctime)
                    .bind(row.utime);
            }
            query.execute(&mut *conn).await?;
        }
    }
    advance_id_sequence(conn, "articles").await
}

/// The authors of the published articles (status 2) with ids in `ids`, ascending, each with
/// their first publication (ms).
pub async fn published_authors(
    conn: &mut AnyConnection,
    ids: Range<i64>,
) -> sqlx::Result<Vec<(i64, i64)>> {
    sqlx::query_as(
        "SELECT author_id, MIN(ctime) FROM published_articles \
         WHERE id >= $1 AND id < $2 AND status = 2 GROUP BY author_id ORDER BY author_id",
    )
    .bind(ids.start)
    .bind(ids.end)
    .fetch_all(&mut *conn)
    .await
}

/// The first `limit` published articles (status 2) with ids above `after` and below `end`, in
/// id order.
pub async fn published_after(
    conn: &mut AnyConnection,
    after: i64,
    end: i64,
    limit: i64,
) -> sqlx::Result<Vec<PublishedArticle>> {
    let rows: Vec<(i64, i64, i64)> = sqlx::query_as(
        "SELECT id, author_id, ctime FROM published_articles \
         WHERE id > $1 AND id < $2 AND status = 2 ORDER BY id LIMIT $3",
    )
    .bind(after)
    .bind(end)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, author_id, ctime)| PublishedArticle {
            id,
            author_id,
            ctime,
        })
        .collect())
}
