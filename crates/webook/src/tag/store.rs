//! SQL for tags (`tags`), the tags on objects (`tag_bizs`) and the per-object lock row of a
//! replace (`tagged_objects`), one implementation for SQLite and PostgreSQL.
//!
//! - **Create** is one insert-or-nothing on the owner's unique `(uid, name_key)`, made only
//!   while the owner has fewer tags than the cap: a new name inserts, a known one does nothing
//!   and its id is read back (none: the cap is reached). Two concurrent creates of one name end
//!   with one row (the second waits on the unique index, then does nothing); tags are deleted
//!   only by the start-up re-key, before the routes serve, so the id read back is there. The
//!   cap's count runs in the insert's statement: creates of one owner at the same instant on
//!   PostgreSQL may each see the count below the cap and pass it by their number (the write rate
//!   limit bounds that).
//! - **Re-key** ([`TagStore::rekey`]): once per database, at start-up, every stored key is
//!   computed again by the current rules ([`tag_key`], [`TAG_KEY_RULES`] in `meta`), in one
//!   transaction that first claims the `meta` row (a second instance starting at the same time
//!   waits for it, then finds the work done). An owner's tags whose names now share a key merge
//!   into the oldest: its objects get the oldest tag instead (once each), the others are
//!   deleted.
//! - **Replace** ([`TagStore::replace`]) is one transaction: it first upserts the object's
//!   `tagged_objects` row — a write first, which on PostgreSQL locks the row until the commit, so
//!   a second replace of the same object waits there and then sees the first one's rows — then
//!   checks that the object is the caller's ([`Biz::owner`], drafts included) and every tag is
//!   theirs, deletes the owner's rows on the object, inserts the new ones and, when asked,
//!   records the [`TagsEvent`] in the outbox. A refusal rolls everything back, event included.
//! - **A tag's articles** ([`TagStore::articles`]) is one statement per page: the tag's row
//!   left-joined to the page (so an unknown tag is told apart from a tag without articles),
//!   the page being `tag_bizs` by the `(tid, biz, biz_id)` index joined to the published reader
//!   copies, their authors and counters.

use std::collections::HashMap;

use crate::{
    biz::Biz,
    tag::model::{
        tag_key, ArticleCursor, Tag, TagName, TaggedArticle, TagsEvent, TopicCursor, TopicOrder,
        TAG_KEY_RULES, TOPIC_TAGS_CHANGED,
    },
    user::Person,
};
use platform::{
    db::{placeholders, Db},
    events::outbox,
};

/// Why a replace was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReplaceError {
    /// The object does not exist.
    #[error("no such object")]
    NoSuchObject,
    /// The object is someone else's.
    #[error("the object is not the caller's")]
    NotTheOwner,
    /// A tag id is someone else's, or no tag's.
    #[error("a tag is not the caller's")]
    NotTheirTag,
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// What a create found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// A new tag, with this id.
    New(i64),
    /// The owner's tag of that key, already there.
    Existing(i64),
    /// No such tag, and the owner has as many as the cap allows.
    CapReached,
}

/// What the start-up re-key did ([`TagStore::rekey`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rekeyed {
    /// Tags whose key changed.
    pub rekeyed: usize,
    /// Tags merged into an older one of the same owner and key (deleted).
    pub merged: usize,
    /// The owners concerned (their cached lists are stale).
    pub owners: Vec<i64>,
}

/// Rows of the re-key's scan per statement.
const REKEY_BATCH: i64 = 1000;

/// Reads and writes tags.
#[derive(Debug, Clone)]
pub struct TagStore {
    db: Db,
}

impl TagStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// `uid`'s tag named like `name` (by key): created now if there is none and `uid` owns
    /// fewer than `cap` tags.
    pub async fn create(
        &self,
        uid: i64,
        name: &TagName,
        cap: u32,
        now: i64,
    ) -> sqlx::Result<Created> {
        let inserted: Vec<i64> = sqlx::query_scalar(
            "INSERT INTO tags (uid, name, name_key, ctime, utime) \
             SELECT $1, $2, $3, $4, $4 WHERE (SELECT COUNT(*) FROM tags WHERE uid = $1) < $5 \
             ON CONFLICT (uid, name_key) DO NOTHING RETURNING id",
        )
        .bind(uid)
        .bind(&name.name)
        .bind(&name.key)
        .bind(now)
        .bind(i64::from(cap))
        // To completion: an autocommit's failed commit is reported only then (platform::db).
        .fetch_all(self.db.writer())
        .await?;
        if let Some(&id) = inserted.first() {
            return Ok(Created::New(id));
        }
        // A conflicting row is committed (the insert waited for it) and stays.
        let existing: Option<i64> =
            sqlx::query_scalar("SELECT id FROM tags WHERE uid = $1 AND name_key = $2")
                .bind(uid)
                .bind(&name.key)
                .fetch_optional(self.db.writer())
                .await?;
        Ok(existing.map_or(Created::CapReached, Created::Existing))
    }

    /// Computes every stored key again by the current rules, merging an owner's tags that now
    /// share a key (module docs); `None` when this database's keys follow them already.
    pub async fn rekey(&self, now: i64) -> sqlx::Result<Option<Rekeyed>> {
        let mut tx = self.db.writer().begin().await?;
        let claimed = sqlx::query(
            "INSERT INTO meta (name, value, utime) VALUES ('tag_key_rules', $1, $2) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(TAG_KEY_RULES)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if claimed == 0 {
            let rules: Option<String> =
                sqlx::query_scalar("SELECT value FROM meta WHERE name = 'tag_key_rules'")
                    .fetch_optional(&mut *tx)
                    .await?;
            if rules.as_deref() == Some(TAG_KEY_RULES) {
                tx.rollback().await?;
                return Ok(None);
            }
            sqlx::query("UPDATE meta SET value = $1, utime = $2 WHERE name = 'tag_key_rules'")
                .bind(TAG_KEY_RULES)
                .bind(now)
                .execute(&mut *tx)
                .await?;
        }
        let mut report = Rekeyed::default();
        let mut owner: Vec<(i64, String, String)> = Vec::new();
        let mut owner_uid = 0;
        let (mut after_uid, mut after_id) = (i64::MIN, i64::MIN);
        loop {
            let rows: Vec<(i64, i64, String, String)> = sqlx::query_as(
                "SELECT id, uid, name, name_key FROM tags \
                 WHERE uid > $1 OR (uid = $1 AND id > $2) ORDER BY uid, id LIMIT $3",
            )
            .bind(after_uid)
            .bind(after_id)
            .bind(REKEY_BATCH)
            .fetch_all(&mut *tx)
            .await?;
            let done = (rows.len() as i64) < REKEY_BATCH;
            for (id, uid, name, name_key) in rows {
                if uid != owner_uid && !owner.is_empty() {
                    rekey_owner(&mut tx, owner_uid, &owner, &mut report).await?;
                    owner.clear();
                }
                owner_uid = uid;
                owner.push((id, name, name_key));
                (after_uid, after_id) = (uid, id);
            }
            if done {
                break;
            }
        }
        if !owner.is_empty() {
            rekey_owner(&mut tx, owner_uid, &owner, &mut report).await?;
        }
        tx.commit().await?;
        Ok(Some(report))
    }

    /// Every tag of `uid`, by id.
    pub async fn owned_by(&self, uid: i64) -> sqlx::Result<Vec<Tag>> {
        sqlx::query_as("SELECT id, name FROM tags WHERE uid = $1 ORDER BY id")
            .bind(uid)
            .fetch_all(self.db.pool())
            .await
    }

    /// Replaces `uid`'s tags on object `biz`/`biz_id` with `tids` (distinct; empty clears them)
    /// in one transaction (module docs); returns the tags now on it, by id. With `announce`,
    /// records their [`TagsEvent`] in the same transaction.
    pub async fn replace(
        &self,
        uid: i64,
        biz: Biz,
        biz_id: i64,
        tids: &[i64],
        now: i64,
        announce: bool,
    ) -> Result<Vec<Tag>, ReplaceError> {
        let mut tx = self.db.writer().begin().await?;
        // First, and a write: serialises replaces of this object (PostgreSQL row lock; a SQLite
        // transaction that read first could not upgrade to writing under contention).
        sqlx::query(
            "INSERT INTO tagged_objects (biz, biz_id, utime) VALUES ($1, $2, $3) \
             ON CONFLICT (biz, biz_id) DO UPDATE SET utime = excluded.utime",
        )
        .bind(biz.as_str())
        .bind(biz_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        match biz.owner(&mut *tx, biz_id).await? {
            None => return Err(ReplaceError::NoSuchObject),
            Some(owner) if owner != uid => return Err(ReplaceError::NotTheOwner),
            Some(_) => {}
        }
        let tags = if tids.is_empty() {
            Vec::new()
        } else {
            let sql = format!(
                "SELECT id, name FROM tags WHERE uid = $1 AND id IN ({}) ORDER BY id",
                placeholders(2, tids.len())
            );
            let mut query = sqlx::query_as::<_, Tag>(&sql).bind(uid);
            for tid in tids {
                query = query.bind(*tid);
            }
            query.fetch_all(&mut *tx).await?
        };
        if tags.len() != tids.len() {
            return Err(ReplaceError::NotTheirTag);
        }
        sqlx::query("DELETE FROM tag_bizs WHERE biz = $1 AND biz_id = $2 AND uid = $3")
            .bind(biz.as_str())
            .bind(biz_id)
            .bind(uid)
            .execute(&mut *tx)
            .await?;
        if !tags.is_empty() {
            // From the tags' rows: each tag row carries its tag's key (topic pages).
            let sql = format!(
                "INSERT INTO tag_bizs (tid, uid, biz, biz_id, ctime, name_key) \
                 SELECT id, uid, $1, $2, $3, name_key FROM tags WHERE uid = $4 AND id IN ({})",
                placeholders(5, tags.len())
            );
            let mut query = sqlx::query(&sql)
                .bind(biz.as_str())
                .bind(biz_id)
                .bind(now)
                .bind(uid);
            for tag in &tags {
                query = query.bind(tag.id);
            }
            query.execute(&mut *tx).await?;
        }
        if announce {
            let event = TagsEvent {
                uid,
                biz,
                biz_id,
                tags: tags.iter().map(|tag| tag.name.clone()).collect(),
                time: now,
            };
            outbox::record(
                &mut tx,
                TOPIC_TAGS_CHANGED,
                &format!("{biz}:{biz_id}"),
                &event,
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(tags)
    }

    /// The tags on object `biz`/`biz_id` (of `owner` only, when given), by id.
    pub async fn on_object(
        &self,
        biz: Biz,
        biz_id: i64,
        owner: Option<i64>,
    ) -> sqlx::Result<Vec<Tag>> {
        let owner_filter = if owner.is_some() {
            " AND b.uid = $3"
        } else {
            ""
        };
        let sql = format!(
            "SELECT t.id, t.name FROM tag_bizs b JOIN tags t ON t.id = b.tid \
             WHERE b.biz = $1 AND b.biz_id = $2{owner_filter} ORDER BY t.id"
        );
        let mut query = sqlx::query_as(&sql).bind(biz.as_str()).bind(biz_id);
        if let Some(owner) = owner {
            query = query.bind(owner);
        }
        query.fetch_all(self.db.pool()).await
    }

    /// Whether `caller` (`None`: a visitor) may see object `biz`/`biz_id`'s tags: it is
    /// visible to readers ([`Biz::visible_owner`]: a published article), or it is the caller's
    /// own (drafts included). `false` for an object that does not exist.
    pub async fn may_see(&self, caller: Option<i64>, biz: Biz, biz_id: i64) -> sqlx::Result<bool> {
        if biz.visible_owner(self.db.pool(), biz_id).await?.is_some() {
            return Ok(true);
        }
        let Some(caller) = caller else {
            // A visitor sees published objects only.
            return Ok(false);
        };
        Ok(biz.owner(self.db.pool(), biz_id).await? == Some(caller))
    }

    /// Up to `limit` published articles carrying tag `tid`, newest id first, strictly below
    /// `after`; and whether more follow. `None` when there is no such tag. One statement.
    pub async fn articles(
        &self,
        tid: i64,
        after: ArticleCursor,
        limit: usize,
    ) -> sqlx::Result<Option<(Vec<TaggedArticle>, bool)>> {
        let rows: Vec<TaggedRow> = sqlx::query_as(
            "SELECT page.id, page.title, page.abstract, page.author_id, page.nickname, \
             page.like_cnt, page.comment_cnt, page.ctime, page.utime \
             FROM tags t LEFT JOIN ( \
               SELECT p.id, p.title, p.abstract, p.author_id, u.nickname, \
               COALESCE(i.like_cnt, 0) AS like_cnt, COALESCE(i.comment_cnt, 0) AS comment_cnt, \
               p.ctime, p.utime \
               FROM tag_bizs b \
               JOIN published_articles p ON p.id = b.biz_id AND p.status = 2 \
               LEFT JOIN users u ON u.id = p.author_id \
               LEFT JOIN interactives i ON i.biz = $2 AND i.biz_id = p.id \
               WHERE b.tid = $1 AND b.biz = $2 AND b.biz_id < $3 \
               ORDER BY b.biz_id DESC LIMIT $4 \
             ) AS page ON 1 = 1 \
             WHERE t.id = $1 ORDER BY page.id DESC",
        )
        .bind(tid)
        .bind(Biz::Article.as_str())
        .bind(after.article_id)
        .bind(limit as i64 + 1)
        .fetch_all(self.db.pool())
        .await?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut articles: Vec<TaggedArticle> =
            rows.into_iter().filter_map(TaggedRow::article).collect();
        let more = articles.len() > limit;
        articles.truncate(limit);
        Ok(Some((articles, more)))
    }
}

impl TagStore {
    /// Up to `limit` published articles carrying a tag of key `key` (topic `key`: any
    /// owner's), in `order` strictly after `after`; and whether more follow. An article
    /// carries at most one tag of a key (its owner's tags are unique by key), so no article
    /// shows twice. One statement, over the topic's tag rows (`tag_bizs_by_topic`): newest
    /// first, a range read until the page is full; hottest, every row of the topic, sorted by
    /// likes (a cost that grows with the topic: docs/PERFORMANCE.md → Topics).
    pub async fn topic_articles(
        &self,
        key: &str,
        order: TopicOrder,
        after: TopicCursor,
        limit: usize,
    ) -> sqlx::Result<(Vec<TaggedArticle>, bool)> {
        macro_rules! topic_sql {
            ($after:literal, $order:literal) => {
                concat!(
                    "SELECT p.id, p.title, p.abstract, p.author_id, u.nickname, \
                     COALESCE(i.like_cnt, 0) AS like_cnt, COALESCE(i.comment_cnt, 0) AS comment_cnt, \
                     p.ctime, p.utime \
                     FROM tag_bizs b \
                     JOIN published_articles p ON p.id = b.biz_id AND p.status = 2 \
                     LEFT JOIN users u ON u.id = p.author_id \
                     LEFT JOIN interactives i ON i.biz = $2 AND i.biz_id = p.id \
                     WHERE b.name_key = $1 AND b.biz = $2 AND ",
                    $after,
                    " ORDER BY ",
                    $order,
                    " LIMIT $4"
                )
            };
        }
        let sql = match order {
            TopicOrder::Newest => topic_sql!("b.biz_id < $3", "b.biz_id DESC"),
            TopicOrder::Hottest => topic_sql!(
                "(COALESCE(i.like_cnt, 0) < $5 OR (COALESCE(i.like_cnt, 0) = $5 AND p.id < $3))",
                "like_cnt DESC, p.id DESC"
            ),
        };
        let mut query = sqlx::query_as::<_, TaggedRow>(sql)
            .bind(key)
            .bind(Biz::Article.as_str())
            .bind(after.article_id)
            .bind(limit as i64 + 1);
        if order == TopicOrder::Hottest {
            query = query.bind(after.likes);
        }
        let rows = query.fetch_all(self.db.pool()).await?;
        let mut articles: Vec<TaggedArticle> =
            rows.into_iter().filter_map(TaggedRow::article).collect();
        let more = articles.len() > limit;
        articles.truncate(limit);
        Ok((articles, more))
    }

    /// Gives the tag rows an older binary inserted without their tag's key (`''`) that key;
    /// how many. Run at start-up: during a rolling upgrade, instances of the previous release
    /// may still attach tags after the migration that added the column.
    pub async fn key_tag_rows(&self) -> sqlx::Result<u64> {
        let done = sqlx::query(
            "UPDATE tag_bizs SET name_key = (SELECT t.name_key FROM tags t WHERE t.id = tag_bizs.tid) \
             WHERE name_key = ''",
        )
        .execute(self.db.writer())
        .await?;
        Ok(done.rows_affected())
    }

    /// The name topic `key` is shown by: the one its most articles' tags are written as (the
    /// oldest tag's on a tie); `None` when no tag has that key.
    pub async fn topic_name(&self, key: &str) -> sqlx::Result<Option<String>> {
        sqlx::query_scalar(
            "SELECT t.name FROM tags t LEFT JOIN tag_bizs b ON b.tid = t.id \
             WHERE t.name_key = $1 GROUP BY t.id, t.name \
             ORDER BY COUNT(b.biz_id) DESC, t.id LIMIT 1",
        )
        .bind(key)
        .fetch_optional(self.db.pool())
        .await
    }
}

/// The re-key of one owner's tags (`tags`: id, name, stored key; by id): the oldest of each new
/// key keeps it, the others merge into it; changed keys go through a placeholder first, so no
/// two rows hold one key at any moment (the unique index checks each statement).
async fn rekey_owner(
    tx: &mut sqlx::Transaction<'static, sqlx::Any>,
    uid: i64,
    tags: &[(i64, String, String)],
    report: &mut Rekeyed,
) -> sqlx::Result<()> {
    let mut keepers: HashMap<String, i64> = HashMap::new();
    let mut merges = Vec::new();
    let mut changes = Vec::new();
    for (id, name, stored) in tags {
        let key = tag_key(name);
        match keepers.get(&key) {
            Some(&keeper) => merges.push((*id, keeper)),
            None => {
                keepers.insert(key.clone(), *id);
                if *stored != key {
                    changes.push((*id, key));
                }
            }
        }
    }
    if merges.is_empty() && changes.is_empty() {
        return Ok(());
    }
    for (merged, keeper) in &merges {
        sqlx::query(
            "INSERT INTO tag_bizs (tid, uid, biz, biz_id, ctime, name_key) \
             SELECT $1, uid, biz, biz_id, ctime, name_key FROM tag_bizs WHERE tid = $2 \
             ON CONFLICT (biz, biz_id, tid) DO NOTHING",
        )
        .bind(keeper)
        .bind(merged)
        .execute(&mut **tx)
        .await?;
        sqlx::query("DELETE FROM tag_bizs WHERE tid = $1")
            .bind(merged)
            .execute(&mut **tx)
            .await?;
        sqlx::query("DELETE FROM tags WHERE id = $1")
            .bind(merged)
            .execute(&mut **tx)
            .await?;
    }
    for (id, _) in &changes {
        // U+0001 cannot start a key: keys hold no control characters.
        sqlx::query("UPDATE tags SET name_key = $1 WHERE id = $2")
            .bind(format!("\u{1}{id}"))
            .bind(id)
            .execute(&mut **tx)
            .await?;
    }
    for (id, key) in &changes {
        sqlx::query("UPDATE tags SET name_key = $1 WHERE id = $2")
            .bind(key)
            .bind(id)
            .execute(&mut **tx)
            .await?;
    }
    // The owner's tag rows carry their tags' keys.
    sqlx::query(
        "UPDATE tag_bizs SET name_key = (SELECT t.name_key FROM tags t WHERE t.id = tag_bizs.tid) \
         WHERE tid IN (SELECT id FROM tags WHERE uid = $1)",
    )
    .bind(uid)
    .execute(&mut **tx)
    .await?;
    report.rekeyed += changes.len();
    report.merged += merges.len();
    report.owners.push(uid);
    Ok(())
}

/// One row of [`TagStore::articles`]: the tag left-joined to a page of its articles, so every
/// column is null in the one row of a tag without (more) articles.
#[derive(sqlx::FromRow)]
struct TaggedRow {
    id: Option<i64>,
    title: Option<String>,
    #[sqlx(rename = "abstract")]
    abstract_text: Option<String>,
    author_id: Option<i64>,
    nickname: Option<String>,
    like_cnt: Option<i64>,
    comment_cnt: Option<i64>,
    ctime: Option<i64>,
    utime: Option<i64>,
}

impl TaggedRow {
    /// The article of the row; `None` for the row of a tag without (more) articles.
    fn article(self) -> Option<TaggedArticle> {
        let author = self.author_id?;
        Some(TaggedArticle {
            id: self.id?,
            title: self.title?,
            abstract_text: self.abstract_text?,
            author: Person::new(author, self.nickname.as_deref()),
            like_cnt: self.like_cnt?,
            comment_cnt: self.comment_cnt?,
            ctime: self.ctime?,
            utime: self.utime?,
        })
    }
}
