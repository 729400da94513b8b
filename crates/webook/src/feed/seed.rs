//! Bulk writes of seeded follows and feeds (`webook seed`, its follows-and-feed phase):
//! multi-row `INSERT`s into `follows`, `follow_counts`, `feed_events`, `feed_pull_authors` and
//! `feed_inbox`, with the columns and meanings the [follow store](super::follow_store) and the
//! [feed store](super::store) read, on a connection the caller holds inside its transaction.
//!
//! What the rows are: the state the follow service and the feed's consumers leave once every
//! follow and every publication is handled — follows with status 1 and the counts that match
//! them, one item per published article (kind 'article', recipient 0, no comment or detail,
//! dedup key `article:<id>`, fan-out done), the authors whose items are pulled, and the pushed
//! items in their followers' inboxes. The caller keeps them agreeing by writing them in one
//! transaction.
//!
//! Invariants: feed item ids are explicit — the seed continues after the largest id in
//! `feed_events` ([`next_feed_item_id`]), and inbox rows name their items — and, on PostgreSQL,
//! [`insert_seeded_feed_items`] moves the identity sequence past them in the same transaction,
//! so items the consumers write later get fresh ids (SQLite's AUTOINCREMENT keeps track of
//! explicit ids by itself). Follow rows take the ids the database gives them (nothing refers to
//! them). Seeded users are new: no count row, pull author or inbox row exists for them yet.
//! Of these tables, [`seeded_bulk_tables`] names those whose non-unique indexes a bulk load
//! may drop and build again once its rows are in (each index then built in one sort).

use sqlx::AnyConnection;

use super::model::{Delivery, FeedKind};
use platform::{
    config::DatabaseKind,
    db::{advance_id_sequence, bulk_row_placeholders, next_free_id},
};

/// `kind` of article items and their inbox rows.
const ARTICLE_KIND: &str = FeedKind::Article.as_str();

/// Rows per `INSERT`: a few thousand bound values, under SQLite's limit of 32 766.
const FOLLOWS_PER_STATEMENT: usize = 1_000;
const COUNTS_PER_STATEMENT: usize = 1_000;
const FEED_ITEMS_PER_STATEMENT: usize = 1_000;
const PULL_AUTHORS_PER_STATEMENT: usize = 1_000;
const INBOX_ROWS_PER_STATEMENT: usize = 1_000;

/// One user following another (status 1, since `time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededFollow {
    /// Who follows.
    pub follower: i64,
    /// Whom.
    pub followee: i64,
    /// When (ms): `ctime` and `utime`.
    pub time: i64,
}

/// A user's follow counts (`follow_counts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededFollowCount {
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
pub struct SeededFeedItem {
    /// Explicit id.
    pub id: i64,
    /// The article.
    pub article_id: i64,
    /// Its author.
    pub actor: i64,
    /// Pushed to the followers' inboxes, or pulled from the author's outbox.
    pub delivery: Delivery,
    /// The article's publication time (`published_articles.ctime`).
    pub ctime: i64,
}

/// An author whose articles are pulled (`feed_pull_authors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededPullAuthor {
    /// The author.
    pub uid: i64,
    /// Since when: their first article published above the push threshold.
    pub ctime: i64,
}

/// A pushed article item in a follower's inbox (`feed_inbox`, kind 'article').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeededInboxRow {
    /// The follower.
    pub uid: i64,
    /// The item.
    pub event_id: i64,
    /// The item's author.
    pub actor: i64,
    /// The item's time.
    pub ctime: i64,
}

/// The tables whose non-unique indexes a bulk load of the feed may suspend, in the order to
/// suspend them: the items' always, the follows' and the inboxes' too when follows are written
/// (inboxes written user by user name their items in random order).
pub fn seeded_bulk_tables(with_follows: bool) -> &'static [&'static str] {
    const TABLES: [&str; 3] = ["feed_events", "follows", "feed_inbox"];
    if with_follows {
        &TABLES
    } else {
        &TABLES[..1]
    }
}

/// One past the largest feed item id: the id the next seeded item gets.
pub async fn next_feed_item_id(conn: &mut AnyConnection) -> sqlx::Result<i64> {
    next_free_id(conn, "feed_events").await
}

/// Inserts follows (status 1).
pub async fn insert_seeded_follows(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededFollow],
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
pub async fn insert_seeded_follow_counts(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededFollowCount],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(COUNTS_PER_STATEMENT) {
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

/// Inserts article items into `feed_events`, then moves PostgreSQL's id sequence past them.
pub async fn insert_seeded_feed_items(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededFeedItem],
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
                .bind(row.delivery as i64)
                .bind(-1i64)
                .bind(0i64)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    advance_id_sequence(conn, "feed_events").await
}

/// Inserts pull authors (seeded authors are new: none is one yet).
pub async fn insert_seeded_pull_authors(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededPullAuthor],
) -> sqlx::Result<()> {
    for chunk in rows.chunks(PULL_AUTHORS_PER_STATEMENT) {
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
pub async fn insert_seeded_inbox_rows(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededInboxRow],
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

/// Writes the topic rows of the article items of articles `articles` (a seed run's), once their
/// tags are in: the rows [`super::store::FeedStore::index_topics`] would have written.
pub async fn index_seeded_topics(
    conn: &mut AnyConnection,
    articles: std::ops::Range<i64>,
) -> sqlx::Result<u64> {
    let sql = format!(
        "{} AND e.article_id >= $1 AND e.article_id < $2",
        super::store::TOPIC_ROWS
    );
    let done = sqlx::query(&sql)
        .bind(articles.start)
        .bind(articles.end)
        .execute(&mut *conn)
        .await?;
    Ok(done.rows_affected())
}
