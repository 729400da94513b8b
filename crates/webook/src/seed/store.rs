//! Bulk writes of seeded rows: multi-row `INSERT`s with bound values into the tables the user,
//! article, interactive, follow and feed stores read (same columns, same meanings — see their
//! migrations), on a connection the caller holds inside its transaction.
//!
//! Ids of users, articles and feed items are given explicitly (the seed continues after the
//! largest id in the table; inbox rows name their item); on PostgreSQL the identity sequences
//! are moved past them in the same transaction, so rows the application inserts later get fresh
//! ids. SQLite's AUTOINCREMENT keeps track of explicit ids by itself. Follow rows take the ids
//! the database gives them (nothing the seed writes refers to them).

use sqlx::AnyConnection;

use crate::feed::FeedKind;
use platform::{config::DatabaseKind, db::bulk_row_placeholders};

/// `kind` of article items and their inbox rows.
const ARTICLE_KIND: &str = FeedKind::Article.as_str();

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

/// One user following another (status 1, since `time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowRow {
    /// Who follows.
    pub follower: i64,
    /// Whom.
    pub followee: i64,
    /// When (ms): `ctime` and `utime`.
    pub time: i64,
}

/// A user's follow counts (`follow_counts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowCountRow {
    /// The user.
    pub uid: i64,
    /// Users following them (as many `follows` rows with status 1).
    pub followers: i64,
    /// Users they follow.
    pub followees: i64,
    /// Time of the last follow either way (ms).
    pub utime: i64,
}

/// The feed item of a published article (`feed_events`, kind 'article'), as the feed's
/// consumer leaves it once the article's event is handled: recipient 0, no comment, no
/// detail, fan-out cursor unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedItemRow {
    /// Explicit id.
    pub id: i64,
    /// The article.
    pub article_id: i64,
    /// Its author.
    pub actor: i64,
    /// 1 pushed to the followers' inboxes, 2 pulled from the author's outbox.
    pub delivery: i64,
    /// The article's publication time (`published_articles.ctime`).
    pub ctime: i64,
}

/// An author whose articles are pulled (`feed_pull_authors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullAuthorRow {
    /// The author.
    pub uid: i64,
    /// Since when: their first article published above the push threshold.
    pub ctime: i64,
}

/// A pushed article item in a follower's inbox (`feed_inbox`, kind 'article').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxRow {
    /// The follower.
    pub uid: i64,
    /// The item.
    pub event_id: i64,
    /// The item's author.
    pub actor: i64,
    /// The item's time.
    pub ctime: i64,
}

/// Rows per INSERT statement: a few thousand bound values, under SQLite's limit of 32 766.
const USERS_PER_STATEMENT: usize = 1_000;
const ARTICLES_PER_STATEMENT: usize = 500;
const COUNTERS_PER_STATEMENT: usize = 1_000;
const INTERACTIONS_PER_STATEMENT: usize = 1_000;
const FOLLOWS_PER_STATEMENT: usize = 1_000;
const FEED_ITEMS_PER_STATEMENT: usize = 1_000;
const INBOX_ROWS_PER_STATEMENT: usize = 1_000;

/// The first free ids of the tables whose ids the seed gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextIds {
    /// One past the largest user id.
    pub user: i64,
    /// One past the largest article id.
    pub article: i64,
    /// One past the largest feed item id.
    pub feed_item: i64,
    /// One past the largest comment id.
    pub comment: i64,
}

/// The next free ids: one past the largest user, article, feed item and comment id in the
/// database.
pub async fn next_ids(conn: &mut AnyConnection) -> sqlx::Result<NextIds> {
    let mut next = [0i64; 4];
    for (slot, table) in next
        .iter_mut()
        .zip(["users", "articles", "feed_events", "comments"])
    {
        let largest: i64 = sqlx::query_scalar(&format!("SELECT COALESCE(MAX(id), 0) FROM {table}"))
            .fetch_one(&mut *conn)
            .await?;
        *slot = largest + 1;
    }
    let [user, article, feed_item, comment] = next;
    Ok(NextIds {
        user,
        article,
        feed_item,
        comment,
    })
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

/// Inserts follows (status 1).
pub async fn insert_follows(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[FollowRow],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(FOLLOWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO follows (follower, followee, status, ctime, utime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 5)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.follower)
                .bind(row.followee)
                .bind(1i64)
                .bind(row.time)
                .bind(row.time);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Inserts follow counts (of users that have none yet: seeded users are new).
pub async fn insert_follow_counts(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[FollowCountRow],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(COUNTERS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO follow_counts (uid, followers, followees, utime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 4)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.uid)
                .bind(row.followers)
                .bind(row.followees)
                .bind(row.utime);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Inserts article items into `feed_events`.
pub async fn insert_feed_items(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[FeedItemRow],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(FEED_ITEMS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO feed_events (id, kind, actor, recipient, article_id, comment_id, detail, \
             dedup_key, delivery, fanout_time, fanout_id, ctime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 12)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.id)
                .bind(ARTICLE_KIND)
                .bind(row.actor)
                .bind(0i64)
                .bind(row.article_id)
                .bind(0i64)
                .bind("")
                .bind(format!("article:{}", row.article_id))
                .bind(row.delivery)
                .bind(-1i64)
                .bind(0i64)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    advance_sequence(conn, kind, "feed_events").await
}

/// Inserts pull authors (seeded authors are new: none is one yet).
pub async fn insert_pull_authors(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[PullAuthorRow],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(COUNTERS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO feed_pull_authors (uid, ctime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 2)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query.bind(row.uid).bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Inserts inbox rows of article items.
pub async fn insert_inbox_rows(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[InboxRow],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(INBOX_ROWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO feed_inbox (uid, event_id, actor, kind, ctime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 5)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.uid)
                .bind(row.event_id)
                .bind(row.actor)
                .bind(ARTICLE_KIND)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// Drops the indexes of `tables` that enforce nothing (neither primary keys nor unique ones)
/// and returns the statements that create them again, for after a bulk load: each index is
/// then built once, from sorted rows, instead of taking millions of inserts at random places
/// (an inbox written by user gets its items' ids in random order). Both engines' DDL is
/// transactional, so the drop rolls back with the rows if the transaction does not commit.
pub async fn suspend_indexes(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    tables: &[&str],
) -> sqlx::Result<Vec<String>> {
    let catalog = match kind {
        DatabaseKind::Sqlite => {
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = $1 \
             AND sql IS NOT NULL AND UPPER(sql) NOT LIKE 'CREATE UNIQUE%' ORDER BY name"
        }
        DatabaseKind::Postgres => {
            "SELECT i.relname::text, pg_get_indexdef(i.oid) FROM pg_index x \
             JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid \
             WHERE t.relname = $1 AND pg_table_is_visible(t.oid) \
             AND NOT x.indisunique AND NOT x.indisprimary ORDER BY i.relname"
        }
    };
    let mut statements = Vec::new();
    for table in tables {
        let indexes: Vec<(String, String)> = sqlx::query_as(catalog)
            .bind(*table)
            .fetch_all(&mut *conn)
            .await?;
        for (name, create) in indexes {
            sqlx::query(&format!("DROP INDEX \"{}\"", name.replace('"', "\"\"")))
                .execute(&mut *conn)
                .await?;
            statements.push(create);
        }
    }
    Ok(statements)
}

/// Runs the statements [`suspend_indexes`] returned.
pub async fn restore_indexes(conn: &mut AnyConnection, statements: &[String]) -> sqlx::Result<()> {
    for create in statements {
        sqlx::query(create).execute(&mut *conn).await?;
    }
    Ok(())
}

/// PostgreSQL: moves `table`'s id sequence to its largest id, so the application's own inserts
/// do not collide with the explicit ids just written. (SQLite's AUTOINCREMENT needs nothing.)
pub async fn advance_sequence(
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
