//! SQL for `articles` (author copies) and `published_articles` (reader copies), one
//! implementation for SQLite and PostgreSQL. Writes that touch both copies run in one
//! transaction; every write is scoped to the author (`WHERE id = $ AND author_id = $`), so a
//! foreign id changes nothing.

use sqlx::{Any, Transaction};

use crate::article::model::{
    Article, ArticleEvent, ArticleStatus, Draft, ListItem, PublishedArticle, PublishedItem,
    TOPIC_PUBLISHED, TOPIC_WITHDRAWN,
};
use crate::user::Person;
use platform::{db::Db, events::outbox};

/// Why a write to an existing article did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// No article with that id.
    #[error("no such article")]
    NotFound,
    /// The article belongs to someone else.
    #[error("not the author")]
    NotAuthor,
    /// The author's account does not exist (a token outlived its user): the foreign key on
    /// `author_id` said so.
    #[error("no such author")]
    NoSuchAuthor,
    /// A moderator hid or removed the reader copy: the author may not publish it again.
    #[error("hidden by a moderator")]
    Hidden,
    /// Anything else.
    #[error(transparent)]
    Db(sqlx::Error),
}

/// What a moderator does to an article's reader copy ([`ArticleStore::moderate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moderation {
    /// Readers lose it (as on withdrawal); the author sees why; restorable. A copy the word
    /// lists hold becomes the moderator's: its author may no longer publish it again.
    Hide,
    /// As hide, for good.
    Remove,
    /// A hidden copy comes back as it was (published, or withdrawn if its author withdrew it
    /// before or since); a held one is published (approved).
    Restore,
}

/// What [`ArticleStore::moderate`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moderated {
    /// The article's author.
    pub author: i64,
    /// Whether the reader copy's status changed (false: it already was so, or cannot be).
    pub changed: bool,
    /// Whether readers' view changed: an event went to the outbox.
    pub announced: bool,
    /// Whether the copy was held for review before (a restore of it is an approval).
    pub was_held: bool,
}

impl From<sqlx::Error> for WriteError {
    fn from(err: sqlx::Error) -> Self {
        match &err {
            // Every write here is the author's, and `author_id` is the only foreign key a write
            // can break (the reader copy is written after its author copy).
            sqlx::Error::Database(db) if db.is_foreign_key_violation() => Self::NoSuchAuthor,
            _ => Self::Db(err),
        }
    }
}

/// Reads and writes articles.
#[derive(Debug, Clone)]
pub struct ArticleStore {
    db: Db,
}

/// The reader copy with its author's nickname, by id (columns in the order both decoders read).
pub const READER_COPY: &str =
    "SELECT p.id, p.author_id, u.nickname, p.title, p.content, p.abstract, p.status, p.ctime, p.utime \
     FROM published_articles p JOIN users u ON u.id = p.author_id WHERE p.id = $1";

/// A [`READER_COPY`] row: id, author id, nickname, title, content, abstract, status, ctime,
/// utime.
type ReaderCopyRow = (i64, i64, String, String, String, String, i64, i64, i64);

/// The reader copy of a [`READER_COPY`] row, whichever access path read it.
fn reader_copy_from(row: ReaderCopyRow) -> sqlx::Result<PublishedArticle> {
    let (id, author_id, nickname, title, content, abstract_text, status, ctime, utime) = row;
    Ok(PublishedArticle {
        id,
        author_id,
        author_name: crate::user::display_name(&nickname, author_id),
        title,
        content,
        abstract_text,
        status: ArticleStatus::try_from(status).map_err(|err| sqlx::Error::Decode(err.into()))?,
        ctime,
        utime,
    })
}

/// A [`ArticleStore::published_page`] row: the item with its author's id and nickname.
#[derive(sqlx::FromRow)]
struct PublishedItemRow {
    id: i64,
    title: String,
    #[sqlx(rename = "abstract")]
    abstract_text: String,
    author_id: i64,
    nickname: String,
    read_cnt: i64,
    like_cnt: i64,
    comment_cnt: i64,
    ctime: i64,
    utime: i64,
}

impl From<PublishedItemRow> for PublishedItem {
    fn from(row: PublishedItemRow) -> Self {
        Self {
            id: row.id,
            title: row.title,
            abstract_text: row.abstract_text,
            author: Person::new(row.author_id, Some(&row.nickname)),
            read_cnt: row.read_cnt,
            like_cnt: row.like_cnt,
            comment_cnt: row.comment_cnt,
            ctime: row.ctime,
            utime: row.utime,
        }
    }
}

impl ArticleStore {
    /// A store on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Saves a draft: a new article (`id` None) or an edit of the author's copy, which becomes
    /// unpublished (changes not yet published); the reader copy is untouched. Returns the id.
    pub async fn save_draft(
        &self,
        author: i64,
        id: Option<i64>,
        draft: &Draft,
        now: i64,
    ) -> Result<i64, WriteError> {
        let mut tx = self.db.writer().begin().await?;
        let id =
            upsert_author_copy(&mut tx, author, id, draft, ArticleStatus::Unpublished, now).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Saves and publishes in one transaction: the author's copy and the reader copy get the same
    /// content; the reader copy keeps its first-publication `ctime`; the
    /// [`TOPIC_PUBLISHED`] event goes to the outbox (last, after the rows it reports are locked).
    /// `held` (screening's reason) keeps the reader copy hidden (status 4) for a moderator to
    /// approve: no event, or [`TOPIC_WITHDRAWN`] when readers saw the previous version. A copy
    /// a moderator hid or removed is refused ([`WriteError::Hidden`]); one only held may be
    /// published again (screened again).
    pub async fn publish(
        &self,
        author: i64,
        id: Option<i64>,
        draft: &Draft,
        now: i64,
        held: Option<&str>,
    ) -> Result<i64, WriteError> {
        let mut tx = self.db.writer().begin().await?;
        let id =
            upsert_author_copy(&mut tx, author, id, draft, ArticleStatus::Published, now).await?;
        // Touching the reader copy takes its lock (PostgreSQL; SQLite has one writer anyway), so
        // a moderator's hide cannot slip between this check and the write below.
        let reader: Option<(i64, i64)> = sqlx::query_as(
            "UPDATE published_articles SET utime = utime WHERE id = $1 RETURNING status, held",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((status, was_held)) = reader {
            if status == 5 || (status == 4 && was_held == 0) {
                // Rolled back: the author's copy stays as it was.
                return Err(WriteError::Hidden);
            }
        }
        let status = if held.is_some() {
            ArticleStatus::Hidden
        } else {
            ArticleStatus::Published
        };
        sqlx::query(
            "INSERT INTO published_articles (id, author_id, title, content, abstract, status, ctime, utime, \
             hidden_reason, held, restore_to) VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, 2) \
             ON CONFLICT (id) DO UPDATE SET title = excluded.title, content = excluded.content, \
             abstract = excluded.abstract, status = excluded.status, utime = excluded.utime, \
             hidden_reason = excluded.hidden_reason, held = excluded.held, restore_to = 2",
        )
        .bind(id)
        .bind(author)
        .bind(&draft.title)
        .bind(&draft.content)
        .bind(&draft.abstract_text)
        .bind(i64::from(status))
        .bind(now)
        .bind(held.unwrap_or(""))
        .bind(i64::from(held.is_some()))
        .execute(&mut *tx)
        .await?;
        match (held, reader) {
            (None, _) => record_event(&mut tx, TOPIC_PUBLISHED, id, author, now).await?,
            (Some(_), Some((2, _))) => {
                record_event(&mut tx, TOPIC_WITHDRAWN, id, author, now).await?;
            }
            (Some(_), _) => {}
        }
        tx.commit().await?;
        Ok(id)
    }

    /// Makes both copies private (status 3) in one transaction, with the [`TOPIC_WITHDRAWN`]
    /// event in the outbox.
    pub async fn withdraw(&self, author: i64, id: i64, now: i64) -> Result<(), WriteError> {
        let mut tx = self.db.writer().begin().await?;
        let changed = sqlx::query(
            "UPDATE articles SET status = $1, utime = $2 WHERE id = $3 AND author_id = $4",
        )
        .bind(i64::from(ArticleStatus::Private))
        .bind(now)
        .bind(id)
        .bind(author)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed == 0 {
            return Err(why_not_written(&mut tx, id).await);
        }
        // A copy a moderator hid or removed stays so (its author cannot publish it again), to be
        // restored as withdrawn; one only held for review is withdrawn from the review.
        sqlx::query(
            "UPDATE published_articles SET \
             status = CASE WHEN status = 5 OR (status = 4 AND held = 0) THEN status ELSE $1 END, \
             hidden_reason = CASE WHEN status = 5 OR (status = 4 AND held = 0) THEN hidden_reason ELSE '' END, \
             held = 0, restore_to = $1, utime = $2 WHERE id = $3 AND author_id = $4",
        )
        .bind(i64::from(ArticleStatus::Private))
        .bind(now)
        .bind(id)
        .bind(author)
        .execute(&mut *tx)
        .await?;
        record_event(&mut tx, TOPIC_WITHDRAWN, id, author, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// A moderator's `action` on the reader copy of `id`, with `reason` for its author, in one
    /// transaction with the event readers' views follow: [`TOPIC_WITHDRAWN`] when a published
    /// copy is hidden or removed, [`TOPIC_PUBLISHED`] when a restored one is published again.
    /// Repeating an action changes nothing ([`Moderated::changed`] false). `None`: no reader
    /// copy (never published).
    pub async fn moderate(
        &self,
        id: i64,
        action: Moderation,
        reason: &str,
        now: i64,
    ) -> sqlx::Result<Option<Moderated>> {
        let mut tx = self.db.writer().begin().await?;
        // Touching the row takes its lock (PostgreSQL; SQLite has one writer anyway).
        let row: Option<(i64, i64, i64, i64)> = sqlx::query_as(
            "UPDATE published_articles SET utime = utime WHERE id = $1 \
             RETURNING author_id, status, held, restore_to",
        )
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let Some((author, status, held, restore_to)) = row else {
            return Ok(None);
        };
        let was_held = status == 4 && held == 1;
        // (next status, reason, restore_to): a hide remembers what a restore gives back (a held
        // copy was never shown: published once approved).
        let (next, reason, restore_to) = match (action, status) {
            (Moderation::Hide, 2 | 3) => (4, reason, status),
            (Moderation::Hide, 4) if held == 1 => (4, reason, restore_to),
            (Moderation::Remove, 2..=4) => (5, reason, restore_to),
            (Moderation::Restore, 4) => (restore_to, "", restore_to),
            _ => {
                return Ok(Some(Moderated {
                    author,
                    changed: false,
                    announced: false,
                    was_held,
                }))
            }
        };
        sqlx::query(
            "UPDATE published_articles SET status = $1, hidden_reason = $2, held = 0, \
             restore_to = $3, utime = $4 WHERE id = $5",
        )
        .bind(next)
        .bind(reason)
        .bind(restore_to)
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let topic = match (status, next) {
            (2, 4 | 5) => Some(TOPIC_WITHDRAWN),
            (_, 2) => Some(TOPIC_PUBLISHED),
            _ => None,
        };
        if let Some(topic) = topic {
            record_event(&mut tx, topic, id, author, now).await?;
        }
        tx.commit().await?;
        Ok(Some(Moderated {
            author,
            changed: true,
            announced: topic.is_some(),
            was_held,
        }))
    }

    /// The author's copy `id`, whoever wrote it (callers check authorship).
    pub async fn author_copy(&self, id: i64) -> sqlx::Result<Option<Article>> {
        sqlx::query_as(
            "SELECT a.id, a.author_id, a.title, a.content, a.status, a.ctime, a.utime, \
             COALESCE(p.hidden_reason, '') AS hidden FROM articles a \
             LEFT JOIN published_articles p ON p.id = a.id WHERE a.id = $1",
        )
        .bind(id)
        .fetch_optional(self.db.pool())
        .await
    }

    /// A page of `author`'s articles, newest update first (offset is bounded by the caller).
    pub async fn list_by_author(
        &self,
        author: i64,
        offset: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<ListItem>> {
        sqlx::query_as(
            "SELECT a.id, a.title, a.abstract, a.status, a.ctime, a.utime, \
             COALESCE(p.hidden_reason, '') AS hidden FROM articles a \
             LEFT JOIN published_articles p ON p.id = a.id \
             WHERE a.author_id = $1 ORDER BY a.utime DESC, a.id DESC LIMIT $2 OFFSET $3",
        )
        .bind(author)
        .bind(limit)
        .bind(offset)
        .fetch_all(self.db.pool())
        .await
    }

    /// Up to `fetch` published articles, newest first publication first (`ctime`, then id),
    /// strictly after `after` = (ctime, id) in that order; only `author`'s when given. One
    /// statement, a range over `published_articles (ctime, id)` or `(author_id, ctime, id)`;
    /// withdrawn reader copies are skipped by the scan.
    pub async fn published_page(
        &self,
        author: Option<i64>,
        after: (i64, i64),
        fetch: i64,
    ) -> sqlx::Result<Vec<PublishedItem>> {
        macro_rules! published_page_sql {
            ($filter:literal) => {
                concat!(
                    "SELECT p.id, p.title, p.abstract, p.author_id, u.nickname, \
                     COALESCE(i.read_cnt, 0) AS read_cnt, COALESCE(i.like_cnt, 0) AS like_cnt, \
                     COALESCE(i.comment_cnt, 0) AS comment_cnt, p.ctime, p.utime \
                     FROM published_articles p JOIN users u ON u.id = p.author_id \
                     LEFT JOIN interactives i ON i.biz = 'article' AND i.biz_id = p.id WHERE ",
                    $filter,
                    " ORDER BY p.ctime DESC, p.id DESC LIMIT $3"
                )
            };
        }
        let (ctime, id) = after;
        let query = match author {
            Some(author) => sqlx::query_as::<_, PublishedItemRow>(published_page_sql!(
                "p.author_id = $4 AND p.status = 2 AND (p.ctime, p.id) < ($1, $2)"
            ))
            .bind(ctime)
            .bind(id)
            .bind(fetch)
            .bind(author),
            None => sqlx::query_as::<_, PublishedItemRow>(published_page_sql!(
                "p.status = 2 AND (p.ctime, p.id) < ($1, $2)"
            ))
            .bind(ctime)
            .bind(id)
            .bind(fetch),
        };
        let rows = query.fetch_all(self.db.pool()).await?;
        Ok(rows.into_iter().map(PublishedItem::from).collect())
    }

    /// The reader copy `id` with its author's display name, whatever its status. On an
    /// embedded database read inline, without the pool's thread hand-off (a reader view's cache
    /// miss; [`platform::db::direct`]).
    pub async fn reader_copy(&self, id: i64) -> sqlx::Result<Option<PublishedArticle>> {
        let inline = self.db.read_inline(|connection| {
            use platform::db::direct::rusqlite::OptionalExtension;
            connection
                .prepare_cached(READER_COPY)?
                .query_row([id], |row| ReaderCopyRow::try_from(row))
                .optional()
        });
        let row: Option<ReaderCopyRow> = match inline {
            Some(row) => row,
            None => {
                sqlx::query_as(READER_COPY)
                    .bind(id)
                    .fetch_optional(self.db.pool())
                    .await?
            }
        };
        row.map(reader_copy_from).transpose()
    }
}

/// Inserts a new author copy, or updates an existing one of `author`.
async fn upsert_author_copy(
    tx: &mut Transaction<'static, Any>,
    author: i64,
    id: Option<i64>,
    draft: &Draft,
    status: ArticleStatus,
    now: i64,
) -> Result<i64, WriteError> {
    match id {
        None => Ok(sqlx::query_scalar(
            "INSERT INTO articles (author_id, title, content, abstract, status, ctime, utime) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING id",
        )
        .bind(author)
        .bind(&draft.title)
        .bind(&draft.content)
        .bind(&draft.abstract_text)
        .bind(i64::from(status))
        .bind(now)
        .fetch_one(&mut **tx)
        .await?),
        Some(id) => {
            let changed = sqlx::query(
                "UPDATE articles SET title = $1, content = $2, abstract = $3, status = $4, utime = $5 \
                 WHERE id = $6 AND author_id = $7",
            )
            .bind(&draft.title)
            .bind(&draft.content)
            .bind(&draft.abstract_text)
            .bind(i64::from(status))
            .bind(now)
            .bind(id)
            .bind(author)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            if changed == 0 {
                return Err(why_not_written(tx, id).await);
            }
            Ok(id)
        }
    }
}

/// After an author-scoped write changed nothing: was the id missing, or someone else's?
async fn why_not_written(tx: &mut Transaction<'static, Any>, id: i64) -> WriteError {
    match sqlx::query_scalar::<_, i64>("SELECT author_id FROM articles WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
    {
        Ok(Some(_)) => WriteError::NotAuthor,
        Ok(None) => WriteError::NotFound,
        Err(err) => WriteError::Db(err),
    }
}

/// Records an [`ArticleEvent`] of `topic` in the transaction's outbox.
async fn record_event(
    tx: &mut Transaction<'_, Any>,
    topic: &str,
    id: i64,
    author: i64,
    now: i64,
) -> sqlx::Result<()> {
    let event = ArticleEvent {
        id,
        author,
        time: now,
    };
    outbox::record(tx, topic, &id.to_string(), &event, now).await
}
