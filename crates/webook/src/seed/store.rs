//! Bulk writes of seeded rows: multi-row `INSERT`s with bound values into the tables the user,
//! article and interactive stores read (same columns, same meanings — see their migrations), on
//! a connection the caller holds inside its transaction.
//!
//! Ids of users and articles are given explicitly (the seed continues after the largest id in
//! the table); on PostgreSQL the identity sequences are moved past them in the same
//! transaction, so rows the application inserts later get fresh ids. SQLite's AUTOINCREMENT
//! keeps track of explicit ids by itself.

use sqlx::AnyConnection;

use platform::{config::DatabaseKind, db::bulk_row_placeholders};

/// A user account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    /// Explicit id.
    pub id: i64,
    /// Unique email.
    pub email: String,
    /// Display name ('' for none).
    pub nickname: String,
    /// Profile text ('' for none).
    pub about_me: String,
    /// Registration time (ms).
    pub ctime: i64,
}

/// An article: the author's copy, and the reader copy when it was ever published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArticleRow {
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

impl ArticleRow {
    /// Whether the article has a reader copy (it was published at some time).
    pub fn has_reader_copy(&self) -> bool {
        self.status != 1
    }
}

/// The counters of one article (`interactives`, biz 'article').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterRow {
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

/// One user's like or collect of an article (status 1; collects in the default folder 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InteractionRow {
    /// The user.
    pub uid: i64,
    /// The article's id.
    pub biz_id: i64,
    /// When (ms).
    pub time: i64,
}

/// Rows per INSERT statement: a few thousand bound values, under SQLite's limit of 32 766.
const USERS_PER_STATEMENT: usize = 1_000;
const ARTICLES_PER_STATEMENT: usize = 500;
const COUNTERS_PER_STATEMENT: usize = 1_000;
const INTERACTIONS_PER_STATEMENT: usize = 1_000;

/// The next free ids: one past the largest user id and article id in the database.
pub async fn next_ids(conn: &mut AnyConnection) -> sqlx::Result<(i64, i64)> {
    let user: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM users")
        .fetch_one(&mut *conn)
        .await?;
    let article: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM articles")
        .fetch_one(&mut *conn)
        .await?;
    Ok((user + 1, article + 1))
}

/// Inserts `rows` into `users`, all with the password hash `password_hash`.
pub async fn insert_users(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[UserRow],
    password_hash: &str,
) -> sqlx::Result<()> {
    for chunk in rows.chunks(USERS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO users (id, email, password, nickname, about_me, ctime, utime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 7)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.id)
                .bind(row.email.as_str())
                .bind(password_hash)
                .bind(row.nickname.as_str())
                .bind(row.about_me.as_str())
                .bind(row.ctime)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    advance_sequence(conn, kind, "users").await
}

/// Inserts the author's copies of `rows` into `articles`, and the reader copies of those ever
/// published into `published_articles`.
pub async fn insert_articles(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[ArticleRow],
) -> sqlx::Result<()> {
    for table in ["articles", "published_articles"] {
        let chunks = rows
            .iter()
            .filter(|row| table == "articles" || row.has_reader_copy())
            .collect::<Vec<_>>();
        for chunk in chunks.chunks(ARTICLES_PER_STATEMENT) {
            let sql = format!(
                "INSERT INTO {table} (id, author_id, title, content, abstract, status, ctime, utime) \
                 VALUES {}",
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
    advance_sequence(conn, kind, "articles").await
}

/// Inserts article counters into `interactives`.
pub async fn insert_counters(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[CounterRow],
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
                .bind(crate::biz::Biz::Article.as_str())
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

/// Which table an [`InteractionRow`] goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interaction {
    /// `user_likes`.
    Like,
    /// `user_collects`, default folder.
    Collect,
}

/// Inserts likes or collects (status 1).
pub async fn insert_interactions(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    interaction: Interaction,
    rows: &[InteractionRow],
) -> sqlx::Result<()> {
    let (table, extra_column) = match interaction {
        Interaction::Like => ("user_likes", ""),
        Interaction::Collect => ("user_collects", ", cid"),
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
                .bind(crate::biz::Biz::Article.as_str())
                .bind(row.biz_id)
                .bind(1i64)
                .bind(row.time)
                .bind(row.time);
            if interaction == Interaction::Collect {
                query = query.bind(0i64);
            }
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// PostgreSQL: moves `table`'s id sequence to its largest id, so the application's own inserts
/// do not collide with the explicit ids just written. (SQLite's AUTOINCREMENT needs nothing.)
async fn advance_sequence(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    table: &str,
) -> sqlx::Result<()> {
    if kind == DatabaseKind::Postgres {
        let sql = format!(
            "SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT MAX(id) FROM {table}))"
        );
        sqlx::query(&sql).execute(&mut *conn).await?;
    }
    Ok(())
}
