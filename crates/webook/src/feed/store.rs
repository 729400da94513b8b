//! SQL for feed items (`feed_events`), inboxes (`feed_inbox`) and the authors whose articles
//! are pulled (`feed_pull_authors`), one implementation for SQLite and PostgreSQL.
//!
//! Writes are made by the feed's event consumers and are idempotent by state, not by event:
//! each handler makes the feed agree with the source tables as they are when it runs (an item
//! exists while its article is published, its like or follow is on), keyed by `dedup_key`. So a
//! redelivered, late or reordered event (a withdrawal handled after the next publish, say)
//! cannot leave a wrong item behind. Likes, the most frequent of them, are synced a batch of
//! events per transaction, as sets ([`FeedStore::sync_likes`]).
//!
//! Reads show only what [`VISIBLE`] allows — the source tables as they are now — so an item the
//! consumers have yet to remove is skipped by the database inside the same statement.
//!
//! An article's fan-out is resumable: each batch is one transaction that writes up to
//! `batch` inbox rows (`INSERT … SELECT` from the follower list, in its (utime, id) order) and
//! moves the item's cursor past them; a consumer killed between batches resumes from the
//! cursor, and the inbox's primary key (uid, event_id) makes any repeat a no-op.

use std::collections::{HashMap, HashSet};

use sqlx::{Any, Transaction};

use crate::{
    comment::CommentEvent,
    feed::model::{Cursor, Delivery, FeedItem, FeedKind, ItemArticle, ItemComment},
    user::Person,
};
use platform::{
    config::DatabaseKind,
    db::{id_set, id_set_value, kind_of, placeholders, row_placeholders, Db},
};

/// What [`FeedStore::fan_out_batch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FanOutStep {
    /// Follower rows covered by this batch (inbox rows written, or already there).
    pub followers: u64,
    /// Whether every follower has the item now.
    pub done: bool,
}

/// What [`FeedStore::set_topic_follow`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicFollow {
    /// The reader follows (or no longer follows) the topic, now or already.
    Done,
    /// No tag has that name.
    NoSuchTopic,
    /// The reader follows as many topics as allowed.
    TooMany,
}

/// A like or follow notice: `actor` did it to `object` (the article, the followee) at `time`.
struct Notice {
    kind: FeedKind,
    actor: i64,
    object: i64,
    key: String,
    time: i64,
}

/// A like to make the feed agree with ([`FeedStore::sync_likes`]): `liker`'s like of `article`,
/// changed at `time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LikeNotice {
    /// Who liked (or unliked).
    pub liker: i64,
    /// The article liked.
    pub article: i64,
    /// When the like changed (ms): the date of an item it adds.
    pub time: i64,
}

/// Likes per statement of [`FeedStore::sync_likes`] (four parameters each; five for the inbox
/// insert).
pub const LIKES_PER_STATEMENT: usize = 200;

/// The `dedup_key` of `liker`'s like item of `article`.
fn like_key(liker: i64, article: i64) -> String {
    format!("like:{liker}:article:{article}")
}

/// Authors merged per outbox query.
pub const AUTHORS_PER_QUERY: usize = 50;

/// SQL: item `e`'s article is published.
macro_rules! article_published {
    () => {
        "EXISTS (SELECT 1 FROM published_articles p WHERE p.id = e.article_id AND p.status = 2)"
    };
}

/// SQL: the like or comment notice `e` still stands: its article is published (a comment not
/// under an article has `article_id` 0) and its like is on, or its comment not deleted.
macro_rules! notice_stands {
    () => {
        concat!(
            "((e.kind = 'like' AND ",
            article_published!(),
            " AND EXISTS (SELECT 1 FROM user_likes l WHERE l.uid = e.actor AND l.biz = 'article' \
             AND l.biz_id = e.article_id AND l.status = 1)) \
             OR (e.kind = 'comment' AND EXISTS (SELECT 1 FROM comments c WHERE c.id = e.comment_id \
             AND c.deleted = 0) AND (e.article_id = 0 OR ",
            article_published!(),
            ")))"
        )
    };
}

/// SQL: whether reader `$1` may see item `e` now, by the source tables — what they no longer
/// show, the feed never shows, whether or not the consumers caught up: an article while it is
/// published and the reader follows its author or a topic it carries, a like while it is on and its article
/// published, a follow while it holds, a comment while it is not deleted and its article (if
/// any) published.
pub const VISIBLE: &str = concat!(
    "((e.kind = 'article' AND ",
    article_published!(),
    " AND (EXISTS (SELECT 1 FROM follows f WHERE f.follower = $1 AND f.followee = e.actor AND f.status = 1) \
     OR EXISTS (SELECT 1 FROM tag_bizs tb JOIN tags tt ON tt.id = tb.tid \
     JOIN topic_follows tf ON tf.uid = $1 AND tf.topic = tt.name_key \
     WHERE tb.biz = 'article' AND tb.biz_id = e.article_id))) \
     OR (e.kind = 'follow' AND EXISTS (SELECT 1 FROM follows f WHERE f.follower = e.actor \
     AND f.followee = $1 AND f.status = 1)) \
     OR ",
    notice_stands!(),
    ")"
);

/// SQL: inserts the topic rows of article items (`feed_topic_items`) from the tags they carry;
/// the caller appends conditions on `e`, the item.
pub(crate) const TOPIC_ROWS: &str =
    "INSERT INTO feed_topic_items (topic, ctime, event_id, article_id) \
     SELECT DISTINCT t.name_key, e.ctime, e.id, e.article_id FROM feed_events e \
     JOIN tag_bizs b ON b.biz = 'article' AND b.biz_id = e.article_id \
     JOIN tags t ON t.id = b.tid WHERE e.kind = 'article'";

/// Reads and writes the feed.
#[derive(Debug, Clone)]
pub struct FeedStore {
    db: Db,
}

fn article_key(article_id: i64) -> String {
    format!("article:{article_id}")
}

impl FeedStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Makes article `article_id` of `author`, published at `time`, an item — if it is
    /// published now and is not one yet. It is pushed when the author has at most
    /// `push_threshold` followers, else pulled (and the author joins the pull authors). Returns
    /// the item's id when its fan-out is still to do (new, or left half done).
    pub async fn add_article(
        &self,
        article_id: i64,
        author: i64,
        time: i64,
        push_threshold: i64,
    ) -> sqlx::Result<Option<i64>> {
        let key = article_key(article_id);
        let mut tx = self.db.writer().begin().await?;
        let inserted: Option<(i64, i64)> = sqlx::query_as(
            "INSERT INTO feed_events (kind, actor, recipient, article_id, comment_id, detail, dedup_key, \
             delivery, fanout_time, fanout_id, ctime) \
             SELECT $1, $2, 0, $3, 0, '', $4, \
             CASE WHEN COALESCE((SELECT followers FROM follow_counts WHERE uid = $2), 0) > $5 THEN $6 ELSE $7 END, \
             -1, 0, $8 \
             WHERE EXISTS (SELECT 1 FROM published_articles WHERE id = $3 AND author_id = $2 AND status = 2) \
             ON CONFLICT (dedup_key) DO NOTHING RETURNING id, delivery",
        )
        .bind(FeedKind::Article.as_str())
        .bind(author)
        .bind(article_id)
        .bind(&key)
        .bind(push_threshold)
        .bind(Delivery::Pulled as i64)
        .bind(Delivery::FanningOut as i64)
        .bind(time)
        .fetch_optional(&mut *tx)
        .await?;
        let pending = match inserted {
            Some((_, delivery)) if delivery == Delivery::Pulled as i64 => {
                sqlx::query(
                    "INSERT INTO feed_pull_authors (uid, ctime) VALUES ($1, $2) ON CONFLICT (uid) DO NOTHING",
                )
                .bind(author)
                .bind(time)
                .execute(&mut *tx)
                .await?;
                None
            }
            Some((id, _)) => Some(id),
            // Already an item (redelivered: its fan-out may be half done), or not published.
            None => {
                sqlx::query_scalar::<_, i64>(
                    "SELECT id FROM feed_events WHERE dedup_key = $1 AND delivery = $2",
                )
                .bind(&key)
                .bind(Delivery::FanningOut as i64)
                .fetch_optional(&mut *tx)
                .await?
            }
        };
        tx.commit().await?;
        Ok(pending)
    }

    /// Writes the next `batch` followers' inbox rows of item `event_id` in one transaction
    /// and moves its cursor past them; the last batch marks it pushed.
    pub async fn fan_out_batch(&self, event_id: i64, batch: i64) -> sqlx::Result<FanOutStep> {
        let mut tx = self.db.writer().begin().await?;
        // Locks the item first (a concurrent redelivery of the same item waits, then sees the
        // moved cursor); nothing comes back once it is pushed or gone (withdrawn).
        let item: Option<(i64, i64, i64, i64)> = sqlx::query_as(
            "UPDATE feed_events SET delivery = delivery WHERE id = $1 AND delivery = $2 \
             RETURNING actor, ctime, fanout_time, fanout_id",
        )
        .bind(event_id)
        .bind(Delivery::FanningOut as i64)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((author, ctime, after_time, after_id)) = item else {
            return Ok(FanOutStep {
                followers: 0,
                done: true,
            });
        };
        // One follower more than the batch: whether any is left after it.
        let mut keys: Vec<(i64, i64)> = sqlx::query_as(
            "SELECT utime, id FROM follows WHERE followee = $1 AND status = 1 \
             AND (utime > $2 OR (utime = $2 AND id > $3)) ORDER BY utime, id LIMIT $4",
        )
        .bind(author)
        .bind(after_time)
        .bind(after_id)
        .bind(batch + 1)
        .fetch_all(&mut *tx)
        .await?;
        let done = keys.len() as i64 <= batch;
        keys.truncate(usize::try_from(batch).unwrap_or(usize::MAX));
        let (last_time, last_id) = keys.last().copied().unwrap_or((after_time, after_id));
        if !keys.is_empty() {
            sqlx::query(
                "INSERT INTO feed_inbox (uid, event_id, actor, kind, ctime) \
                 SELECT follower, $1, $2, $3, $4 FROM follows WHERE followee = $2 AND status = 1 \
                 AND (utime > $5 OR (utime = $5 AND id > $6)) AND (utime < $7 OR (utime = $7 AND id <= $8)) \
                 ON CONFLICT (uid, event_id) DO NOTHING",
            )
            .bind(event_id)
            .bind(author)
            .bind(FeedKind::Article.as_str())
            .bind(ctime)
            .bind(after_time)
            .bind(after_id)
            .bind(last_time)
            .bind(last_id)
            .execute(&mut *tx)
            .await?;
        }
        let delivery = if done {
            Delivery::Pushed
        } else {
            Delivery::FanningOut
        };
        sqlx::query(
            "UPDATE feed_events SET fanout_time = $1, fanout_id = $2, delivery = $3 WHERE id = $4",
        )
        .bind(last_time)
        .bind(last_id)
        .bind(delivery as i64)
        .bind(event_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(FanOutStep {
            followers: keys.len() as u64,
            done,
        })
    }

    /// Removes article `article_id`'s item from every inbox and outbox, and the like and
    /// comment notices about it from their recipients' inboxes — unless it is published
    /// (again) by now. The notices themselves stay, for [`FeedStore::restore_notices`] should
    /// it come back. Returns whether it removed the article's item.
    pub async fn remove_article(&self, article_id: i64) -> sqlx::Result<bool> {
        let mut tx = self.db.writer().begin().await?;
        let published = "EXISTS (SELECT 1 FROM published_articles WHERE id = $2 AND status = $3)";
        let removed = retract(
            &mut tx,
            &article_key(article_id),
            Some((published, article_id, 2)),
        )
        .await?;
        sqlx::query(
            "DELETE FROM feed_inbox WHERE event_id IN \
             (SELECT id FROM feed_events WHERE article_id = $1 AND kind IN ('like', 'comment')) \
             AND NOT EXISTS (SELECT 1 FROM published_articles WHERE id = $1 AND status = 2)",
        )
        .bind(article_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(removed)
    }

    /// Puts the like and comment notices about article `article_id` that still stand back
    /// into their recipients' inboxes — while it is published (a republication after
    /// [`FeedStore::remove_article`]; nothing to do after a first publication). Returns the
    /// inbox rows written.
    pub async fn restore_notices(&self, article_id: i64) -> sqlx::Result<u64> {
        Ok(sqlx::query(concat!(
            "INSERT INTO feed_inbox (uid, event_id, actor, kind, ctime) \
             SELECT e.recipient, e.id, e.actor, e.kind, e.ctime FROM feed_events e \
             WHERE e.article_id = $1 AND e.kind IN ('like', 'comment') AND ",
            notice_stands!(),
            " ON CONFLICT (uid, event_id) DO NOTHING"
        ))
        .bind(article_id)
        .execute(self.db.writer())
        .await?
        .rows_affected())
    }

    /// Makes the feed agree with `liker`'s like of article `article_id`: while it is on (and the
    /// article published, and not the liker's own), its author has a `like` item dated `time`.
    pub async fn sync_like(&self, liker: i64, article_id: i64, time: i64) -> sqlx::Result<()> {
        self.sync_likes(&[LikeNotice {
            liker,
            article: article_id,
            time,
        }])
        .await
    }

    /// [`FeedStore::sync_like`] for a batch of likes, in one transaction and a few statements
    /// whatever its size (a statement per [`LIKES_PER_STATEMENT`] likes and step), where one
    /// transaction of four or five statements per like could not keep up with a stream of them.
    ///
    /// What happens to a (liker, article) is decided by the tables as they are now, not by the
    /// notice, so of several notices of one pair only the first counts (its `time` dates an item
    /// added, as when they were applied one by one: the later ones found it there). Steps,
    /// each taking its items in key order (on PostgreSQL two instances' batches over the
    /// same pairs then lock them in one order and queue; a deadlock with another kind of write
    /// fails the batch, which the event platform retries):
    /// 1. one `INSERT … SELECT` adds the items of the pairs whose like is on (article published,
    ///    not the liker's own), `RETURNING` those it added;
    /// 2. the added items go into their recipients' inboxes;
    /// 3. the items of the other pairs whose like is off are read (on PostgreSQL locked,
    ///    `FOR UPDATE`) and deleted with their inbox rows — an item of a like that is on stays,
    ///    already there, or its article not published: reads hide those.
    pub async fn sync_likes(&self, likes: &[LikeNotice]) -> sqlx::Result<()> {
        let mut first = std::collections::BTreeMap::new();
        for like in likes {
            first
                .entry(like_key(like.liker, like.article))
                .or_insert(like);
        }
        if first.is_empty() {
            return Ok(());
        }
        let pairs: Vec<(String, &LikeNotice)> = first.into_iter().collect();
        let mut tx = self.db.writer().begin().await?;
        let mut left: Vec<&str> = Vec::new();
        for chunk in pairs.chunks(LIKES_PER_STATEMENT) {
            let sql = format!(
                "INSERT INTO feed_events (kind, actor, recipient, article_id, comment_id, detail, \
                 dedup_key, delivery, fanout_time, fanout_id, ctime) \
                 SELECT 'like', v.column1, p.author_id, v.column2, 0, '', v.column3, {pushed}, -1, 0, \
                 v.column4 FROM (VALUES {rows}) v JOIN published_articles p ON p.id = v.column2 \
                 WHERE p.status = 2 AND p.author_id <> v.column1 AND EXISTS (SELECT 1 FROM user_likes l \
                 WHERE l.uid = v.column1 AND l.biz = 'article' AND l.biz_id = v.column2 AND l.status = 1) \
                 ORDER BY v.column3 \
                 ON CONFLICT (dedup_key) DO NOTHING RETURNING id, recipient, actor, ctime, dedup_key",
                pushed = Delivery::Pushed as i64,
                rows = row_placeholders(chunk.len(), 4),
            );
            let mut query = sqlx::query_as(&sql);
            for (key, like) in chunk {
                query = query
                    .bind(like.liker)
                    .bind(like.article)
                    .bind(key.as_str())
                    .bind(like.time);
            }
            let added: Vec<(i64, i64, i64, i64, String)> = query.fetch_all(&mut *tx).await?;
            if !added.is_empty() {
                let sql = format!(
                    "INSERT INTO feed_inbox (uid, event_id, actor, kind, ctime) VALUES {} \
                     ON CONFLICT (uid, event_id) DO NOTHING",
                    row_placeholders(added.len(), 5)
                );
                let mut query = sqlx::query(&sql);
                for (id, recipient, actor, time, _) in &added {
                    query = query
                        .bind(*recipient)
                        .bind(*id)
                        .bind(*actor)
                        .bind(FeedKind::Like.as_str())
                        .bind(*time);
                }
                query.execute(&mut *tx).await?;
            }
            let added: HashSet<&str> = added.iter().map(|row| row.4.as_str()).collect();
            left.extend(
                chunk
                    .iter()
                    .map(|(key, _)| key.as_str())
                    .filter(|key| !added.contains(key)),
            );
        }
        let kind = kind_of(&tx);
        // SQLite has one writer: nothing to lock against.
        let lock = match kind {
            DatabaseKind::Postgres => " FOR UPDATE OF e",
            DatabaseKind::Sqlite => "",
        };
        let mut gone: Vec<i64> = Vec::new();
        for chunk in left.chunks(LIKES_PER_STATEMENT) {
            let sql = format!(
                "SELECT e.id FROM feed_events e WHERE e.dedup_key IN ({keys}) AND NOT EXISTS \
                 (SELECT 1 FROM user_likes l WHERE l.uid = e.actor AND l.biz = 'article' \
                 AND l.biz_id = e.article_id AND l.status = 1) ORDER BY e.dedup_key{lock}",
                keys = placeholders(1, chunk.len()),
            );
            let mut query = sqlx::query_scalar::<_, i64>(&sql);
            for key in chunk {
                query = query.bind(*key);
            }
            gone.extend(query.fetch_all(&mut *tx).await?);
        }
        if !gone.is_empty() {
            // One statement text whatever the number (prepared once per connection).
            let ids = id_set(kind, 1);
            for sql in [
                format!("DELETE FROM feed_inbox WHERE event_id IN ({ids})"),
                format!("DELETE FROM feed_events WHERE id IN ({ids})"),
            ] {
                sqlx::query(&sql)
                    .bind(id_set_value(kind, &gone))
                    .execute(&mut *tx)
                    .await?;
            }
        }
        tx.commit().await
    }

    /// Makes the feed agree with `follower` following `followee`: while it is on, the followee
    /// has a `follow` item dated `time`.
    pub async fn sync_follow(&self, follower: i64, followee: i64, time: i64) -> sqlx::Result<()> {
        let active =
            "EXISTS (SELECT 1 FROM follows WHERE follower = $2 AND followee = $3 AND status = 1)";
        let notice = Notice {
            kind: FeedKind::Follow,
            actor: follower,
            object: followee,
            key: format!("follow:{follower}:{followee}"),
            time,
        };
        let source = format!("SELECT $1, $2, $3, 0, 0, '', $4, $5, -1, 0, $6 WHERE {active}");
        self.sync_notice(notice, &source, active).await
    }

    /// In one transaction: adds `notice` with the row `source` yields (a `SELECT` of the
    /// `feed_events` columns over $1 kind, $2 actor, $3 object, $4 key, $5 delivery, $6 time; no
    /// row while the notice should not exist) and puts it into its recipient's inbox — or, when
    /// `source` yields nothing, deletes the notice unless `active` (over $2, $3) still holds.
    async fn sync_notice(&self, notice: Notice, source: &str, active: &str) -> sqlx::Result<()> {
        let mut tx = self.db.writer().begin().await?;
        let added: Option<(i64, i64)> = sqlx::query_as(&format!(
            "INSERT INTO feed_events (kind, actor, recipient, article_id, comment_id, detail, dedup_key, \
             delivery, fanout_time, fanout_id, ctime) {source} \
             ON CONFLICT (dedup_key) DO NOTHING RETURNING id, recipient"
        ))
        .bind(notice.kind.as_str())
        .bind(notice.actor)
        .bind(notice.object)
        .bind(&notice.key)
        .bind(Delivery::Pushed as i64)
        .bind(notice.time)
        .fetch_optional(&mut *tx)
        .await?;
        match added {
            Some((id, recipient)) => {
                deliver(
                    &mut tx,
                    recipient,
                    id,
                    notice.actor,
                    notice.kind,
                    notice.time,
                )
                .await?
            }
            None => {
                let unless = Some((active, notice.actor, notice.object));
                retract(&mut tx, &notice.key, unless).await?;
            }
        }
        tx.commit().await
    }

    /// Makes the feed agree with comment `comment.id` for `comment.recipient`: while the
    /// comment exists and is not deleted (and is not the recipient's own), the recipient has a
    /// `comment` item dated `comment.time`; otherwise none. Decided by the `comments` table, not
    /// by the event's `on`, so a late or repeated event cannot bring a deleted comment back.
    pub async fn sync_comment(&self, comment: &CommentEvent) -> sqlx::Result<()> {
        let key = format!("comment:{}:{}", comment.id, comment.recipient);
        let live = "EXISTS (SELECT 1 FROM comments WHERE id = $2 AND deleted = $3)";
        let mut tx = self.db.writer().begin().await?;
        let added: Option<i64> = sqlx::query_scalar(
            "INSERT INTO feed_events (kind, actor, recipient, article_id, comment_id, detail, dedup_key, \
             delivery, fanout_time, fanout_id, ctime) \
             SELECT $1, $4, $5, $6, $2, $7, $8, $9, -1, 0, $10 \
             WHERE $4 <> $5 AND EXISTS (SELECT 1 FROM comments WHERE id = $2 AND deleted = $3) \
             ON CONFLICT (dedup_key) DO NOTHING RETURNING id",
        )
        .bind(FeedKind::Comment.as_str())
        .bind(comment.id)
        .bind(0_i64)
        .bind(comment.uid)
        .bind(comment.recipient)
        .bind(comment.article_id)
        .bind(&comment.content)
        .bind(&key)
        .bind(Delivery::Pushed as i64)
        .bind(comment.time)
        .fetch_optional(&mut *tx)
        .await?;
        match added {
            Some(id) => {
                deliver(
                    &mut tx,
                    comment.recipient,
                    id,
                    comment.uid,
                    FeedKind::Comment,
                    comment.time,
                )
                .await?;
            }
            None => {
                retract(&mut tx, &key, Some((live, comment.id, 0))).await?;
            }
        }
        tx.commit().await
    }

    /// The pull authors `reader` follows, probing from the smaller side: with
    /// `from_followees`, each of the reader's followees against `feed_pull_authors`, else each
    /// pull author against the reader's follows (see [`FeedStore::followee_count`] and
    /// [`FeedStore::pull_author_count`]).
    pub async fn followed_pull_authors(
        &self,
        reader: i64,
        from_followees: bool,
    ) -> sqlx::Result<Vec<i64>> {
        let sql = if from_followees {
            "SELECT f.followee FROM follows f WHERE f.follower = $1 AND f.status = 1 \
             AND EXISTS (SELECT 1 FROM feed_pull_authors p WHERE p.uid = f.followee)"
        } else {
            "SELECT p.uid FROM feed_pull_authors p WHERE EXISTS \
             (SELECT 1 FROM follows f WHERE f.follower = $1 AND f.followee = p.uid AND f.status = 1)"
        };
        sqlx::query_scalar(sql)
            .bind(reader)
            .fetch_all(self.db.pool())
            .await
    }

    /// How many users `reader` follows.
    pub async fn followee_count(&self, reader: i64) -> sqlx::Result<i64> {
        Ok(
            sqlx::query_scalar::<_, i64>("SELECT followees FROM follow_counts WHERE uid = $1")
                .bind(reader)
                .fetch_optional(self.db.pool())
                .await?
                .unwrap_or(0),
        )
    }

    /// How many authors have pulled items, site-wide.
    pub async fn pull_author_count(&self) -> sqlx::Result<i64> {
        sqlx::query_scalar("SELECT COUNT(*) FROM feed_pull_authors")
            .fetch_one(self.db.pool())
            .await
    }

    /// The newest `limit` items of `reader`'s inbox strictly before `before` that the reader
    /// may see now ([`VISIBLE`]): the database skips hidden rows in the same index range scan,
    /// so hidden items never cost a round trip.
    pub async fn inbox_heads(
        &self,
        reader: i64,
        before: Cursor,
        limit: usize,
    ) -> sqlx::Result<Vec<Cursor>> {
        let sql = format!(
            "SELECT b.ctime, b.event_id FROM feed_inbox b JOIN feed_events e ON e.id = b.event_id \
             WHERE b.uid = $1 AND (b.ctime < $2 OR (b.ctime = $2 AND b.event_id < $3)) AND {VISIBLE} \
             ORDER BY b.ctime DESC, b.event_id DESC LIMIT $4"
        );
        let rows: Vec<(i64, i64)> = sqlx::query_as(&sql)
            .bind(reader)
            .bind(before.time)
            .bind(before.id)
            .bind(limit as i64)
            .fetch_all(self.db.pool())
            .await?;
        Ok(rows
            .into_iter()
            .map(|(time, id)| Cursor { time, id })
            .collect())
    }

    /// The newest `limit` pulled items of each of `authors` strictly before `before` that
    /// `reader` may see now ([`VISIBLE`]) — one `UNION ALL` of per-author index range scans per
    /// [`AUTHORS_PER_QUERY`] authors. Each author's part is in feed order; parts follow each
    /// other in `authors`' order.
    pub async fn outbox_heads(
        &self,
        reader: i64,
        authors: &[i64],
        before: Cursor,
        limit: usize,
    ) -> sqlx::Result<Vec<Vec<Cursor>>> {
        self.heads_by_part(reader, authors, before, limit, |n, key| {
            format!(
                "SELECT {n} AS part, e.ctime, e.id FROM feed_events e \
                 WHERE e.actor = ${key} AND e.kind = 'article' AND e.delivery = 2 \
                 AND (e.ctime < $2 OR (e.ctime = $2 AND e.id < $3)) AND {VISIBLE} \
                 ORDER BY e.ctime DESC, e.id DESC LIMIT $4"
            )
        })
        .await
    }

    /// The newest `limit` article items of each of `topics` (tag keys) strictly before
    /// `before` that `reader` may see now, whatever their delivery: the articles carrying a tag
    /// of the topic, by any author: each topic's part a range of `feed_topic_items`, newest
    /// first, read until `limit` items are visible (an item's topic rows are written again when
    /// it is published and when its tags change: [`FeedStore::index_topics`]). Parts as
    /// [`FeedStore::outbox_heads`].
    pub async fn topic_heads(
        &self,
        reader: i64,
        topics: &[String],
        before: Cursor,
        limit: usize,
    ) -> sqlx::Result<Vec<Vec<Cursor>>> {
        self.heads_by_part(reader, topics, before, limit, |n, key| {
            format!(
                "SELECT {n} AS part, e.ctime, e.id FROM feed_topic_items ti \
                 JOIN feed_events e ON e.id = ti.event_id \
                 WHERE ti.topic = ${key} \
                 AND (ti.ctime < $2 OR (ti.ctime = $2 AND ti.event_id < $3)) \
                 AND {VISIBLE} ORDER BY ti.ctime DESC, ti.event_id DESC LIMIT $4"
            )
        })
        .await
    }

    /// One part of heads per key — `part(n, placeholder)` the SQL of part `n` whose key is
    /// placeholder `$placeholder` (`$1`–`$4`: reader, cursor time and id, limit) — as one
    /// `UNION ALL` per [`AUTHORS_PER_QUERY`] keys; each part sorted in feed order.
    async fn heads_by_part<K>(
        &self,
        reader: i64,
        keys: &[K],
        before: Cursor,
        limit: usize,
        part: impl Fn(usize, usize) -> String,
    ) -> sqlx::Result<Vec<Vec<Cursor>>>
    where
        K: for<'q> sqlx::Encode<'q, Any> + sqlx::Type<Any> + Clone + Send + 'static,
    {
        let mut heads = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(AUTHORS_PER_QUERY) {
            let parts: Vec<String> = (0..chunk.len())
                .map(|n| format!("SELECT * FROM ({}) AS h{n}", part(n, n + 5)))
                .collect();
            let sql = parts.join(" UNION ALL ");
            let mut query = sqlx::query_as::<_, (i64, i64, i64)>(&sql)
                .bind(reader)
                .bind(before.time)
                .bind(before.id)
                .bind(limit as i64);
            for key in chunk {
                query = query.bind(key.clone());
            }
            let rows = query.fetch_all(self.db.pool()).await?;
            let mut parts = vec![Vec::new(); chunk.len()];
            for (part, time, id) in rows {
                if let Some(part) = parts.get_mut(part as usize) {
                    part.push(Cursor { time, id });
                }
            }
            for part in &mut parts {
                part.sort_unstable_by(|a, b| b.cmp(a));
            }
            heads.extend(parts);
        }
        Ok(heads)
    }

    /// Writes article `article_id`'s topic rows (`feed_topic_items`) again from the tags it
    /// carries now: none while it has no item, one per tag key with its item's place in the
    /// feed. Idempotent, and order-free: whichever of the publication and a tag change is
    /// applied last reads the state both left.
    pub async fn index_topics(&self, article_id: i64) -> sqlx::Result<()> {
        let mut tx = self.db.writer().begin().await?;
        sqlx::query("DELETE FROM feed_topic_items WHERE article_id = $1")
            .bind(article_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(&format!(
            "{TOPIC_ROWS} AND e.article_id = $1 ON CONFLICT (topic, ctime, event_id) DO NOTHING"
        ))
        .bind(article_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await
    }

    /// The topics (tag keys) `reader` follows, by key.
    pub async fn followed_topics(&self, reader: i64) -> sqlx::Result<Vec<String>> {
        sqlx::query_scalar("SELECT topic FROM topic_follows WHERE uid = $1 ORDER BY topic")
            .bind(reader)
            .fetch_all(self.db.pool())
            .await
    }

    /// Makes `reader` follow topic `topic` (a tag key) from `now`, or stop following it.
    /// Following is refused ([`TopicFollow::NoSuchTopic`]) for a key no tag has, and
    /// ([`TopicFollow::TooMany`]) beyond `cap` topics; both idempotent.
    pub async fn set_topic_follow(
        &self,
        reader: i64,
        topic: &str,
        follow: bool,
        cap: i64,
        now: i64,
    ) -> sqlx::Result<TopicFollow> {
        if !follow {
            sqlx::query("DELETE FROM topic_follows WHERE uid = $1 AND topic = $2")
                .bind(reader)
                .bind(topic)
                .execute(self.db.writer())
                .await?;
            return Ok(TopicFollow::Done);
        }
        let inserted = sqlx::query(
            "INSERT INTO topic_follows (uid, topic, ctime) SELECT $1, $2, $3 \
             WHERE EXISTS (SELECT 1 FROM tags WHERE name_key = $2) \
             AND (SELECT COUNT(*) FROM topic_follows WHERE uid = $1) < $4 \
             ON CONFLICT (uid, topic) DO NOTHING",
        )
        .bind(reader)
        .bind(topic)
        .bind(now)
        .bind(cap)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        if inserted == 1 {
            return Ok(TopicFollow::Done);
        }
        let (followed, exists): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT COUNT(*) FROM topic_follows WHERE uid = $1 AND topic = $2), \
             (SELECT COUNT(*) FROM (SELECT 1 FROM tags WHERE name_key = $2 LIMIT 1) AS x)",
        )
        .bind(reader)
        .bind(topic)
        .fetch_one(self.db.pool())
        .await?;
        Ok(match (followed, exists) {
            (1.., _) => TopicFollow::Done,
            (_, 0) => TopicFollow::NoSuchTopic,
            _ => TopicFollow::TooMany,
        })
    }

    /// The items `ids` as `reader` may see them now ([`VISIBLE`]), in one query. Items not
    /// visible are absent; a comment shows its text as the `comments` table has it.
    pub async fn visible_items(
        &self,
        reader: i64,
        ids: &[i64],
    ) -> sqlx::Result<HashMap<i64, FeedItem>> {
        if ids.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!(
            "SELECT e.id, e.kind, e.actor, e.article_id, e.comment_id, cm.content AS comment_content, e.ctime, \
             a.nickname AS actor_nickname, p.title, p.abstract, p.author_id, p.status AS article_status, \
             p.ctime AS article_ctime, w.nickname AS author_nickname, COALESCE(i.like_cnt, 0) AS like_cnt, \
             COALESCE(i.comment_cnt, 0) AS comment_cnt \
             FROM feed_events e \
             LEFT JOIN users a ON a.id = e.actor \
             LEFT JOIN published_articles p ON p.id = e.article_id \
             LEFT JOIN users w ON w.id = p.author_id \
             LEFT JOIN interactives i ON i.biz = 'article' AND i.biz_id = e.article_id \
             LEFT JOIN comments cm ON cm.id = e.comment_id AND e.kind = 'comment' \
             WHERE e.id IN ({}) AND {VISIBLE}",
            placeholders(2, ids.len())
        );
        let mut query = sqlx::query_as::<_, VisibleRow>(&sql).bind(reader);
        for id in ids {
            query = query.bind(*id);
        }
        let mut items = HashMap::with_capacity(ids.len());
        for row in query.fetch_all(self.db.pool()).await? {
            if let Some(item) = visible_item(row) {
                items.insert(item.id, item);
            }
        }
        Ok(items)
    }

    /// Deletes the oldest items of every inbox holding more than `cap`, for users with ids in
    /// `[from, to)`, in one statement; returns the rows deleted.
    pub async fn prune_inboxes(&self, from: i64, to: i64, cap: i64) -> sqlx::Result<u64> {
        Ok(sqlx::query(
            "DELETE FROM feed_inbox WHERE (uid, event_id) IN ( \
               SELECT uid, event_id FROM ( \
                 SELECT uid, event_id, ROW_NUMBER() OVER (PARTITION BY uid ORDER BY ctime DESC, event_id DESC) AS position \
                 FROM feed_inbox WHERE uid >= $1 AND uid < $2) AS ranked \
               WHERE position > $3)",
        )
        .bind(from)
        .bind(to)
        .bind(cap)
        .execute(self.db.writer())
        .await?
        .rows_affected())
    }

    /// Deletes `like`, `follow` and `comment` items older than `before` that no inbox holds
    /// any more (pruned), at most `limit`; returns how many. Articles stay: they are their
    /// author's outbox, back-filled to new followers. So do the notices of a withdrawn article
    /// (out of the inboxes only while it is withdrawn: [`FeedStore::restore_notices`]).
    pub async fn purge_orphan_notices(&self, before: i64, limit: i64) -> sqlx::Result<u64> {
        Ok(sqlx::query(
            "DELETE FROM feed_events WHERE id IN ( \
               SELECT e.id FROM feed_events e WHERE e.kind <> 'article' AND e.ctime < $1 \
               AND NOT EXISTS (SELECT 1 FROM feed_inbox b WHERE b.event_id = e.id) \
               AND NOT EXISTS (SELECT 1 FROM published_articles p WHERE p.id = e.article_id AND p.status <> 2) \
               LIMIT $2)",
        )
        .bind(before)
        .bind(limit)
        .execute(self.db.writer())
        .await?
        .rows_affected())
    }

    /// The largest user id that has an inbox row (0 when none), for the prune job's ranges.
    pub async fn max_inbox_uid(&self) -> sqlx::Result<i64> {
        Ok(
            sqlx::query_scalar::<_, Option<i64>>("SELECT MAX(uid) FROM feed_inbox")
                .fetch_one(self.db.pool())
                .await?
                .unwrap_or(0),
        )
    }
}

/// Puts item `event_id` into `uid`'s inbox.
async fn deliver(
    tx: &mut Transaction<'static, Any>,
    uid: i64,
    event_id: i64,
    actor: i64,
    kind: FeedKind,
    time: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO feed_inbox (uid, event_id, actor, kind, ctime) VALUES ($1, $2, $3, $4, $5) \
         ON CONFLICT (uid, event_id) DO NOTHING",
    )
    .bind(uid)
    .bind(event_id)
    .bind(actor)
    .bind(kind.as_str())
    .bind(time)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Deletes the item `key` and its inbox rows — only while `unless`' condition (over `$2`, `$3`,
/// bound to its two values) does not hold, when given; returns whether there was one.
async fn retract(
    tx: &mut Transaction<'static, Any>,
    key: &str,
    unless: Option<(&str, i64, i64)>,
) -> sqlx::Result<bool> {
    let guard = unless.map_or(String::new(), |(condition, _, _)| {
        format!(" AND NOT {condition}")
    });
    let statements = [
        format!("DELETE FROM feed_inbox WHERE event_id IN (SELECT id FROM feed_events WHERE dedup_key = $1){guard}"),
        format!("DELETE FROM feed_events WHERE dedup_key = $1{guard}"),
    ];
    let mut deleted = 0;
    for sql in &statements {
        let mut query = sqlx::query(sql).bind(key);
        if let Some((_, first, second)) = unless {
            query = query.bind(first).bind(second);
        }
        deleted = query.execute(&mut **tx).await?.rows_affected();
    }
    Ok(deleted > 0)
}

/// One row of [`FeedStore::visible_items`]: the item, its actor's nickname, and what the left
/// joins found — the article (absent, or its status, when it is not one a reader sees) and the
/// comment's text.
#[derive(sqlx::FromRow)]
struct VisibleRow {
    id: i64,
    kind: String,
    actor: i64,
    article_id: i64,
    comment_id: i64,
    comment_content: Option<String>,
    ctime: i64,
    actor_nickname: Option<String>,
    title: Option<String>,
    #[sqlx(rename = "abstract")]
    abstract_text: Option<String>,
    author_id: Option<i64>,
    article_status: Option<i64>,
    article_ctime: Option<i64>,
    author_nickname: Option<String>,
    like_cnt: i64,
    comment_cnt: i64,
}

/// One row of [`FeedStore::visible_items`] as the reader sees it, or `None` when hidden.
fn visible_item(row: VisibleRow) -> Option<FeedItem> {
    let kind = FeedKind::parse(&row.kind)?;
    let article = match (
        row.article_status,
        row.author_id,
        row.title,
        row.abstract_text,
        row.article_ctime,
    ) {
        (Some(2), Some(author), Some(title), Some(abstract_text), Some(ctime)) => {
            Some(ItemArticle {
                id: row.article_id,
                title,
                abstract_text,
                author: Person::new(author, row.author_nickname.as_deref()),
                like_cnt: row.like_cnt,
                comment_cnt: row.comment_cnt,
                ctime,
            })
        }
        _ => None,
    };
    let needs_article = matches!(kind, FeedKind::Article | FeedKind::Like);
    if needs_article && article.is_none() {
        return None;
    }
    let comment = match kind {
        FeedKind::Comment => Some(ItemComment {
            id: row.comment_id,
            content: platform::text::escape_html(&row.comment_content?),
        }),
        _ => None,
    };
    Some(FeedItem {
        id: row.id,
        kind: kind.as_str(),
        ctime: row.ctime,
        actor: Person::new(row.actor, row.actor_nickname.as_deref()),
        article,
        comment,
    })
}
