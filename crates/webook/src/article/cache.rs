//! The article caches (seeds: "cache the first page", "preload on publish"), each with its rule:
//!
//! - **author's first page** — key: author id; value: the author's newest [`FIRST_PAGE_LEN`]
//!   list items. Serves `/articles/list` with offset 0 and limit ≤ 100 by slicing. Invalidated by
//!   every write of that author (save, publish, withdraw) after the transaction commits.
//! - **reader copy** — key: article id; value: the published article with its author's name.
//!   Refreshed on publish and republish through the same versioned fill readers use (invalidate,
//!   read the committed copy, fill with the invalidation's token), so a withdrawal or a newer
//!   republish racing with it wins: an unconditional set here once put a published copy back
//!   over a withdrawal's tombstone for the rest of the TTL. Invalidated on withdraw. Only
//!   published copies are cached, and a hit is checked for status too. An author's later
//!   nickname change shows after the entry's TTL.
//!
//! - **reader pages** — key: article id; value: the reader view's answer rendered from a reader
//!   copy ([`super::reader_page`]); served only for the very copy it was rendered from, so the
//!   reader copy's rules above govern it too.
//!
//! The first two are [`VersionedCache`]s: a reader that loaded from the database before a write cannot
//! put the old value back after it, and in cluster mode every instance sees a write at its next
//! read. A value that no longer deserialises (a deploy changed its shape) is a miss.

use std::{future::Future, sync::Arc, time::Duration};

use axum::body::Bytes;

use crate::article::{
    model::{ArticleStatus, ListItem, PublishedArticle},
    reader_page::{ReaderPage, ReaderPages},
};
use platform::{
    cache::{Lookup, VersionedCache},
    error::AppError,
    redis::Redis,
};

fn is_published(article: &PublishedArticle) -> bool {
    article.status == ArticleStatus::Published
}

/// Items kept in an author's first-page entry (the largest page the API serves).
pub const FIRST_PAGE_LEN: i64 = 100;
const FIRST_PAGE_TTL: Duration = Duration::from_secs(10 * 60);
const READER_COPY_TTL: Duration = Duration::from_secs(30 * 60);

/// The article caches; cheap to clone.
#[derive(Debug, Clone)]
pub struct ArticleCache {
    first_pages: VersionedCache,
    reader_copies: VersionedCache,
    reader_pages: ReaderPages,
}

impl ArticleCache {
    /// Caches in-process, or shared through `redis` under `redis_prefix` with a near cache.
    /// `memory_bytes` is the process's whole cache budget (`cache_memory_bytes`): reader copies
    /// and reader pages get a quarter each, first pages an eighth (the interactive caches have
    /// the rest).
    pub fn new(redis: Option<(&Redis, &str)>, memory_bytes: u64) -> Self {
        Self {
            first_pages: VersionedCache::new(
                "article_first_page",
                memory_bytes / 8,
                FIRST_PAGE_TTL,
                redis,
            ),
            reader_copies: VersionedCache::new(
                "article_reader_copy",
                memory_bytes / 4,
                READER_COPY_TTL,
                redis,
            ),
            reader_pages: ReaderPages::new(memory_bytes / 4),
        }
    }

    /// The author's first page, from the cache or from `load` (then cached).
    pub async fn first_page(
        &self,
        author: i64,
        load: impl Future<Output = sqlx::Result<Vec<ListItem>>>,
    ) -> sqlx::Result<Vec<ListItem>> {
        self.first_pages
            .get_or_load(&author.to_string(), load, |_| true)
            .await
    }

    /// Rule: after any committed write by `author`.
    pub async fn forget_first_page(&self, author: i64) {
        self.first_pages.invalidate(&author.to_string()).await;
    }

    /// The reader copy `id` when published, from the cache or from `load` (cached only when
    /// published).
    pub async fn reader_copy(
        &self,
        id: i64,
        load: impl Future<Output = sqlx::Result<Option<PublishedArticle>>>,
    ) -> sqlx::Result<Option<PublishedArticle>> {
        let published = async { Ok::<_, sqlx::Error>(load.await?.filter(is_published)) };
        let found = self
            .reader_copies
            .get_or_load(&id.to_string(), published, Option::is_some)
            .await?;
        Ok(found.filter(is_published))
    }

    /// The reader view's page of `id` when published: rendered from the cached reader copy, or
    /// from `load` after a miss (which then fills the cache as [`Self::reader_copy`] does).
    pub async fn reader_page(
        &self,
        id: i64,
        load: impl Future<Output = sqlx::Result<Option<PublishedArticle>>>,
    ) -> Result<Option<Arc<ReaderPage>>, AppError> {
        let key = id.to_string();
        let token = match self.reader_copies.get(&key).await {
            Lookup::Hit(bytes) => match self.reader_pages.page(id, bytes, None) {
                Ok(page) => return Ok(page),
                Err(err) => {
                    // A value that no longer decodes (a deploy changed its shape): dropped, and
                    // this read is answered from the database (the next one fills the entry).
                    tracing::warn!(id, %err, "undecodable reader copy in the cache; reloading");
                    self.reader_copies.invalidate(&key).await;
                    None
                }
            },
            Lookup::Miss(token) => Some(token),
        };
        let Some(article) = load.await?.filter(is_published) else {
            return Ok(None);
        };
        let bytes: Bytes =
            platform::cache::json_bytes(&article).map_err(|err| AppError::Internal(err.into()))?;
        if let Some(token) = token {
            self.reader_copies.fill(&key, token, bytes.clone()).await;
        }
        self.reader_pages.page(id, bytes, Some(article))
    }

    /// Rule: after a publish or republish committed — invalidate, read the committed reader copy
    /// with `load`, and fill it under the invalidation's token (module docs). A failed read
    /// leaves the entry invalidated: readers load it themselves.
    pub async fn refresh_reader_copy(
        &self,
        id: i64,
        load: impl Future<Output = sqlx::Result<Option<PublishedArticle>>>,
    ) {
        let key = id.to_string();
        let token = self.reader_copies.invalidate_for_refill(&key).await;
        match load.await {
            Ok(Some(article)) if is_published(&article) => {
                match platform::cache::json_bytes(&article) {
                    Ok(bytes) => self.reader_copies.fill(&key, token, bytes).await,
                    Err(err) => tracing::error!(%err, id, "cannot serialise a reader copy"),
                }
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(%err, id, "cannot reload a published article; readers will load it");
            }
        }
    }

    /// Rule: on withdraw.
    pub async fn forget_reader_copy(&self, id: i64) {
        self.reader_copies.invalidate(&id.to_string()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(content: &str) -> PublishedArticle {
        PublishedArticle {
            id: 7,
            author_id: 3,
            author_name: "ann".into(),
            title: "t".into(),
            content: content.into(),
            abstract_text: "a".into(),
            status: ArticleStatus::Published,
            ctime: 1,
            utime: 2,
        }
    }

    #[tokio::test]
    async fn an_undecodable_cached_copy_is_reloaded_not_an_error() {
        let cache = ArticleCache::new(None, 1 << 20);
        cache
            .reader_copies
            .set(
                "7",
                Bytes::from_static(b"{\"shape\": \"of an older deploy\"}"),
            )
            .await;
        let page = cache
            .reader_page(7, async { Ok(Some(published("fresh"))) })
            .await
            .unwrap();
        assert!(page.is_some(), "the reloaded copy was not served");
        // The next read fills the entry from the database and serves it from the cache after.
        cache
            .reader_page(7, async { Ok(Some(published("fresh"))) })
            .await
            .unwrap();
        let cached = cache
            .reader_page(7, async { panic!("read the database although cached") })
            .await
            .unwrap();
        assert!(cached.is_some());
    }

    #[tokio::test]
    async fn an_unpublished_copy_has_no_page() {
        let cache = ArticleCache::new(None, 1 << 20);
        let mut withdrawn = published("x");
        withdrawn.status = ArticleStatus::Private;
        let page = cache
            .reader_page(7, async { Ok(Some(withdrawn)) })
            .await
            .unwrap();
        assert!(page.is_none());
    }
}
