//! What the sitemaps list, read straight from the published reader copies: pages of articles
//! and authors by id range (stable page numbers, one index range scan each, whatever the
//! number of articles) and the topics with published articles.

use platform::db::Db;

/// Ids per sitemap page (the protocol allows 50 000 URLs and 50 MB a file; 10 000 keeps a
/// page near 1 MB).
pub const SITEMAP_PAGE: i64 = 10_000;
/// Most topics the topics sitemap lists (the protocol's limit for one file): the most recently
/// updated first.
pub const MAX_TOPICS: i64 = 50_000;

/// One sitemap page: number `n` covers ids `n × SITEMAP_PAGE ..< (n + 1) × SITEMAP_PAGE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct PageSpan {
    /// Page number.
    pub n: i64,
    /// Latest change of anything on it (ms).
    pub lastmod: i64,
}

/// A URL's subject and its last change (ms): an article or author id, or a topic key.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Listed<K> {
    /// Article id, author id or topic key.
    pub key: K,
    /// Latest change (ms).
    pub lastmod: i64,
}

/// The sitemaps' reads; cheap to clone.
#[derive(Debug, Clone)]
pub struct SiteStore {
    db: Db,
}

impl SiteStore {
    /// Reads of `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The article pages that hold a published article, by number. One pass over the published
    /// copies (the caller caches it).
    pub async fn article_pages(&self) -> sqlx::Result<Vec<PageSpan>> {
        sqlx::query_as(
            "SELECT id / $1 AS n, MAX(utime) AS lastmod FROM published_articles \
             WHERE status = 2 GROUP BY id / $1 ORDER BY n",
        )
        .bind(SITEMAP_PAGE)
        .fetch_all(self.db.pool())
        .await
    }

    /// The author pages that hold an author of a published article, by number.
    pub async fn author_pages(&self) -> sqlx::Result<Vec<PageSpan>> {
        sqlx::query_as(
            "SELECT author_id / $1 AS n, MAX(utime) AS lastmod FROM published_articles \
             WHERE status = 2 GROUP BY author_id / $1 ORDER BY n",
        )
        .bind(SITEMAP_PAGE)
        .fetch_all(self.db.pool())
        .await
    }

    /// The published articles of page `n`, by id, with their last publish.
    pub async fn articles_on(&self, n: i64) -> sqlx::Result<Vec<Listed<i64>>> {
        sqlx::query_as(
            "SELECT id AS key, utime AS lastmod FROM published_articles \
             WHERE status = 2 AND id >= $1 AND id < $2 ORDER BY id",
        )
        .bind(n.saturating_mul(SITEMAP_PAGE))
        .bind(n.saturating_add(1).saturating_mul(SITEMAP_PAGE))
        .fetch_all(self.db.pool())
        .await
    }

    /// The articles of page `n` whose reader copy stopped being published (withdrawn, hidden,
    /// removed) at `since` (ms) or later: what a sitemap kept since then must leave out.
    pub async fn unpublished_since(&self, n: i64, since: i64) -> sqlx::Result<Vec<i64>> {
        sqlx::query_scalar(
            "SELECT id FROM published_articles WHERE utime >= $1 AND status <> 2 \
             AND id >= $2 AND id < $3",
        )
        .bind(since)
        .bind(n.saturating_mul(SITEMAP_PAGE))
        .bind(n.saturating_add(1).saturating_mul(SITEMAP_PAGE))
        .fetch_all(self.db.pool())
        .await
    }

    /// The authors of published articles on page `n`, by id, with their latest publish.
    pub async fn authors_on(&self, n: i64) -> sqlx::Result<Vec<Listed<i64>>> {
        sqlx::query_as(
            "SELECT author_id AS key, MAX(utime) AS lastmod FROM published_articles \
             WHERE status = 2 AND author_id >= $1 AND author_id < $2 \
             GROUP BY author_id ORDER BY author_id",
        )
        .bind(n.saturating_mul(SITEMAP_PAGE))
        .bind(n.saturating_add(1).saturating_mul(SITEMAP_PAGE))
        .fetch_all(self.db.pool())
        .await
    }

    /// Up to [`MAX_TOPICS`] topics (tag keys) carried by a published article, the most
    /// recently updated first.
    pub async fn topics(&self) -> sqlx::Result<Vec<Listed<String>>> {
        sqlx::query_as(
            "SELECT t.name_key AS key, MAX(p.utime) AS lastmod FROM tags t \
             JOIN tag_bizs b ON b.tid = t.id AND b.biz = 'article' \
             JOIN published_articles p ON p.id = b.biz_id AND p.status = 2 \
             GROUP BY t.name_key ORDER BY lastmod DESC, t.name_key LIMIT $1",
        )
        .bind(MAX_TOPICS)
        .fetch_all(self.db.pool())
        .await
    }
}
