//! SQL of search: the rows documents are built from and hits are shown with — published
//! articles with their author's name, like count and tags; users' public profile fields (never
//! email or phone: not even selected) — by ids, and in keyset pages for a rebuild.

use std::collections::HashMap;

use platform::db::{placeholders, Db};

use crate::{article::ArticleStatus, biz::Biz};

/// A published article with what search needs of it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ArticleRow {
    /// Id.
    pub id: i64,
    /// Title.
    pub title: String,
    /// Sanitised HTML.
    pub content: String,
    /// Escaped abstract.
    #[sqlx(rename = "abstract")]
    pub abstract_text: String,
    /// Author id.
    pub author_id: i64,
    /// Author's nickname ('' when none).
    #[sqlx(rename = "nickname")]
    pub author_nickname: String,
    /// First publication (ms).
    pub ctime: i64,
    /// Likes.
    #[sqlx(rename = "like_cnt")]
    pub likes: i64,
}

/// A user's public profile.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct UserRow {
    /// Id.
    pub id: i64,
    /// Nickname ('' when none).
    pub nickname: String,
    /// About me.
    #[sqlx(rename = "about_me")]
    pub about: String,
}

const ARTICLE_COLUMNS: &str = "p.id, p.title, p.content, p.abstract, p.author_id, \
     COALESCE(u.nickname, '') AS nickname, p.ctime, COALESCE(i.like_cnt, 0) AS like_cnt";

/// The joins of [`ARTICLE_COLUMNS`]; `$1` is the article biz, `$2` the published status.
const ARTICLE_FROM: &str = "FROM published_articles p \
     LEFT JOIN users u ON u.id = p.author_id \
     LEFT JOIN interactives i ON i.biz = $1 AND i.biz_id = p.id \
     WHERE p.status = $2";

/// Search's reads.
#[derive(Debug, Clone)]
pub struct SearchStore {
    db: Db,
}

impl SearchStore {
    /// The store over `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Those of `ids` that are published, in no particular order (one query).
    pub async fn articles(&self, ids: &[i64]) -> sqlx::Result<Vec<ArticleRow>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {ARTICLE_COLUMNS} {ARTICLE_FROM} AND p.id IN ({})",
            placeholders(3, ids.len())
        );
        let mut query = sqlx::query_as(&sql)
            .bind(Biz::Article.as_str())
            .bind(i64::from(ArticleStatus::Published));
        for id in ids {
            query = query.bind(*id);
        }
        query.fetch_all(self.db.pool()).await
    }

    /// Rows a rebuild writes: published articles and users with a profile.
    pub async fn rebuild_total(&self) -> sqlx::Result<u64> {
        let articles: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM published_articles WHERE status = $1")
                .bind(i64::from(ArticleStatus::Published))
                .fetch_one(self.db.pool())
                .await?;
        let users: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE nickname <> '' OR about_me <> ''")
                .fetch_one(self.db.pool())
                .await?;
        Ok(u64::try_from(articles + users).unwrap_or(0))
    }

    /// The next `limit` published articles after id `after`, by id.
    pub async fn article_page(&self, after: i64, limit: i64) -> sqlx::Result<Vec<ArticleRow>> {
        let sql =
            format!("SELECT {ARTICLE_COLUMNS} {ARTICLE_FROM} AND p.id > $3 ORDER BY p.id LIMIT $4");
        sqlx::query_as(&sql)
            .bind(Biz::Article.as_str())
            .bind(i64::from(ArticleStatus::Published))
            .bind(after)
            .bind(limit)
            .fetch_all(self.db.pool())
            .await
    }

    /// Ids of `author`'s articles (any status) after id `after`, by id, at most `limit`: whose
    /// documents carry the author's name.
    pub async fn article_ids_of(
        &self,
        author: i64,
        after: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<i64>> {
        sqlx::query_scalar(
            "SELECT id FROM articles WHERE author_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(author)
        .bind(after)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await
    }

    /// The tag names on each of `ids` (articles), in tag id order (one query).
    pub async fn tags(&self, ids: &[i64]) -> sqlx::Result<HashMap<i64, Vec<String>>> {
        let mut tags: HashMap<i64, Vec<String>> = HashMap::new();
        if ids.is_empty() {
            return Ok(tags);
        }
        let sql = format!(
            "SELECT b.biz_id, t.name FROM tag_bizs b JOIN tags t ON t.id = b.tid \
             WHERE b.biz = $1 AND b.biz_id IN ({}) ORDER BY b.biz_id, b.tid",
            placeholders(2, ids.len())
        );
        let mut query = sqlx::query_as::<_, (i64, String)>(&sql).bind(Biz::Article.as_str());
        for id in ids {
            query = query.bind(*id);
        }
        for (biz_id, name) in query.fetch_all(self.db.pool()).await? {
            tags.entry(biz_id).or_default().push(name);
        }
        Ok(tags)
    }

    /// The profiles of those of `ids` that exist (one query).
    pub async fn users(&self, ids: &[i64]) -> sqlx::Result<Vec<UserRow>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT id, nickname, about_me FROM users WHERE id IN ({})",
            placeholders(1, ids.len())
        );
        let mut query = sqlx::query_as(&sql);
        for id in ids {
            query = query.bind(*id);
        }
        query.fetch_all(self.db.pool()).await
    }

    /// The next `limit` users after id `after` who wrote a nickname or an about-me, by id.
    pub async fn user_page(&self, after: i64, limit: i64) -> sqlx::Result<Vec<UserRow>> {
        sqlx::query_as(
            "SELECT id, nickname, about_me FROM users \
             WHERE id > $1 AND (nickname <> '' OR about_me <> '') ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(limit)
        .fetch_all(self.db.pool())
        .await
    }
}
