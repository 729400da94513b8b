//! The rules of articles: the draft/publish/withdraw state machine, authorship, the author's
//! list and detail, the reader view, cache maintenance and article events. No HTTP, no SQL text.
//!
//! State machine (status of the author's copy / reader copy):
//! - save draft: author copy → 1 (unpublished); reader copy unchanged, so readers keep seeing
//!   the last published version;
//! - publish: author copy → 2, reader copy := author copy with status 2 (its first-publication
//!   `ctime` kept);
//! - withdraw: both → 3; readers get 404001, the author still sees and can republish it.
//!
//! Every write commits first — publish and withdraw with their event in the transactional outbox
//! ([`platform::events::outbox`]), so a committed change always gets its event — then wakes
//! the outbox relay and fixes the caches (so they never serve what the database no longer says
//! once the write has returned), all on a task of its own ([`platform::detached`]): a client
//! that disconnects, or a request that times out, after the commit cannot leave the caches
//! behind. Once the commit is done, nothing after it can fail the write: a cache step that cannot
//! read back the committed copy leaves the entry invalidated.

pub use crate::article::model::{ArticleEvent, TOPIC_PUBLISHED, TOPIC_WITHDRAWN};
use std::sync::Arc;

use crate::article::{
    cache::{ArticleCache, FIRST_PAGE_LEN},
    model::{Article, Draft, ListItem, PublishedArticle, PublishedItem},
    reader_page::ReaderPage,
    store::{ArticleStore, Moderated, Moderation, WriteError},
};
use crate::screening::{Outcome, Screening};
use platform::{
    cpu,
    db::now_millis,
    detached::to_completion,
    error::{positive_id, AppError, Msg},
    events::outbox::Outbox,
    page::{decode_cursor, overfetch, Page},
};

/// Largest `offset` the author's list accepts.
pub const MAX_LIST_OFFSET: i64 = 10_000;
/// Largest `limit` the author's list accepts.
pub const MAX_LIST_LIMIT: i64 = 100;

/// Articles; cheap to clone.
#[derive(Debug, Clone)]
pub struct ArticleService {
    store: ArticleStore,
    cache: ArticleCache,
    outbox: Outbox,
    screening: Screening,
}

const NO_SUCH_ARTICLE: AppError = AppError::NotFound(Msg::new("no such article", "文章不存在"));
const NOT_THE_AUTHOR: AppError = AppError::Forbidden(Msg::new(
    "not the author of this article",
    "你不是这篇文章的作者",
));

fn write_error(err: WriteError) -> AppError {
    match err {
        WriteError::NotFound => NO_SUCH_ARTICLE,
        WriteError::NotAuthor => NOT_THE_AUTHOR,
        WriteError::NoSuchAuthor => AppError::Unauthorized,
        WriteError::Hidden => AppError::Forbidden(Msg::new(
            "a moderator hid this article: it cannot be published again",
            "该文章已被管理员隐藏，不能再次发表",
        )),
        WriteError::Db(err) => err.into(),
    }
}

/// [`Draft::parse`] on the blocking pool: sanitising is CPU work ([`cpu`]).
async fn parse_draft(title: &str, content: &str, publishing: bool) -> Result<Draft, AppError> {
    let (title, content) = (title.to_owned(), content.to_owned());
    cpu::run(move || Draft::parse(&title, &content, publishing)).await?
}

/// `None` for a new article (absent or 0, as course frontends send), the id otherwise.
pub fn existing_id(id: Option<i64>) -> Result<Option<i64>, AppError> {
    match id {
        None | Some(0) => Ok(None),
        Some(id) => positive_id("id", id).map(Some),
    }
}

impl ArticleService {
    /// Assembles the service.
    pub fn new(store: ArticleStore, cache: ArticleCache, outbox: Outbox) -> Self {
        Self {
            store,
            cache,
            outbox,
            screening: Screening::none(),
        }
    }

    /// The same service, screening what is published against the word lists.
    #[must_use]
    pub fn screened_by(mut self, screening: Screening) -> Self {
        self.screening = screening;
        self
    }

    /// Saves the author's draft (new when `id` is None); returns the id. Runs to completion even
    /// if the caller goes away, as every write here does ([`to_completion`], module docs).
    pub async fn save_draft(
        &self,
        author: i64,
        id: Option<i64>,
        title: &str,
        content: &str,
    ) -> Result<i64, AppError> {
        let draft = parse_draft(title, content, false).await?;
        let service = self.clone();
        to_completion(async move {
            let id = service
                .store
                .save_draft(author, id, &draft, now_millis())
                .await
                .map_err(write_error)?;
            service.cache.forget_first_page(author).await;
            Ok(id)
        })
        .await
    }

    /// Saves and publishes; returns the id.
    pub async fn publish(
        &self,
        author: i64,
        id: Option<i64>,
        title: &str,
        content: &str,
    ) -> Result<i64, AppError> {
        let draft = parse_draft(title, content, true).await?;
        let held = match self
            .screening
            .verdict(&draft.title, &draft.content, true)
            .await?
        {
            Outcome::Clean => None,
            Outcome::Held(reason) => Some(reason),
        };
        let service = self.clone();
        to_completion(async move {
            let now = now_millis();
            let id = service
                .store
                .publish(author, id, &draft, now, held.as_deref())
                .await
                .map_err(write_error)?;
            // Committed, with its event in the outbox: from here nothing may fail the publish
            // (it happened); the cache steps only invalidate and refill.
            service.outbox.committed();
            service.cache.forget_first_page(author).await;
            service
                .cache
                .refresh_reader_copy(id, service.store.reader_copy(id))
                .await;
            Ok(id)
        })
        .await
    }

    /// Withdraws an article: readers lose it, the author keeps it.
    pub async fn withdraw(&self, author: i64, id: i64) -> Result<(), AppError> {
        let service = self.clone();
        to_completion(async move {
            let now = now_millis();
            service
                .store
                .withdraw(author, id, now)
                .await
                .map_err(write_error)?;
            service.outbox.committed();
            service.cache.forget_reader_copy(id).await;
            service.cache.forget_first_page(author).await;
            Ok(())
        })
        .await
    }

    /// A moderator's `action` on article `id`'s reader copy ([`ArticleStore::moderate`]): the
    /// same event and cache steps as a withdrawal or a publish, so every surface that follows
    /// them (feed, hot list, search, topics, the reader view on every instance) follows this.
    /// `None`: the article was never published.
    pub async fn moderate(
        &self,
        id: i64,
        action: Moderation,
        reason: &str,
    ) -> Result<Option<Moderated>, AppError> {
        let service = self.clone();
        let reason = reason.to_owned();
        to_completion(async move {
            let Some(moderated) = service
                .store
                .moderate(id, action, &reason, now_millis())
                .await?
            else {
                return Ok(None);
            };
            if moderated.changed {
                service.outbox.committed();
                service.cache.forget_reader_copy(id).await;
                service.cache.forget_first_page(moderated.author).await;
            }
            Ok(Some(moderated))
        })
        .await
    }

    /// A page of the author's own articles, newest update first.
    pub async fn list(
        &self,
        author: i64,
        offset: i64,
        limit: i64,
    ) -> Result<Vec<ListItem>, AppError> {
        if !(0..=MAX_LIST_OFFSET).contains(&offset) {
            return Err(AppError::InvalidInput(Msg::field(
                "offset",
                format!("must be between 0 and {MAX_LIST_OFFSET}"),
                format!("须在 0 到 {MAX_LIST_OFFSET} 之间"),
            )));
        }
        if !(1..=MAX_LIST_LIMIT).contains(&limit) {
            return Err(AppError::InvalidInput(Msg::field(
                "limit",
                format!("must be between 1 and {MAX_LIST_LIMIT}"),
                format!("须在 1 到 {MAX_LIST_LIMIT} 之间"),
            )));
        }
        if offset == 0 {
            let mut page = self
                .cache
                .first_page(author, self.store.list_by_author(author, 0, FIRST_PAGE_LEN))
                .await?;
            page.truncate(usize::try_from(limit).unwrap_or(0));
            return Ok(page);
        }
        Ok(self.store.list_by_author(author, offset, limit).await?)
    }

    /// A page of published articles, newest first publication first, only `author`'s when
    /// given; `cursor` is the `next` of the previous page. Keyset by (`ctime`, id): a page never
    /// repeats or skips an article, whatever is published meanwhile.
    pub async fn published(
        &self,
        author: Option<i64>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page<PublishedItem>, AppError> {
        if let Some(author) = author {
            positive_id("author", author)?;
        }
        let after = match cursor {
            Some(cursor) => {
                let [ctime, id] = decode_cursor(cursor)?;
                (ctime, id)
            }
            None => (i64::MAX, i64::MAX),
        };
        let items = self
            .store
            .published_page(author, after, overfetch(limit))
            .await?;
        Ok(Page::from_overfetched(items, limit, |last| {
            vec![last.ctime, last.id]
        }))
    }

    /// The author's own copy; 403002 for someone else's.
    pub async fn author_detail(&self, author: i64, id: i64) -> Result<Article, AppError> {
        let article = self.store.author_copy(id).await?.ok_or(NO_SUCH_ARTICLE)?;
        if article.author_id != author {
            return Err(NOT_THE_AUTHOR);
        }
        Ok(article)
    }

    /// The reader view's rendered page of published article `id` (404001 otherwise), from the
    /// reader-copy cache ([`crate::article::reader_page`]).
    pub async fn reader_page(&self, id: i64) -> Result<Arc<ReaderPage>, AppError> {
        self.cache
            .reader_page(id, self.store.reader_copy(id))
            .await?
            .ok_or(NO_SUCH_ARTICLE)
    }

    /// The published reader copy; 404001 when absent, unpublished or withdrawn.
    pub async fn reader_view(&self, id: i64) -> Result<PublishedArticle, AppError> {
        self.cache
            .reader_copy(id, self.store.reader_copy(id))
            .await?
            .ok_or(NO_SUCH_ARTICLE)
    }
}
