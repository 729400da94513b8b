//! The reader view's answer, rendered once per reader copy: everything but the counters and the
//! reader's flags, serialised and gzip-compressed ([`Prerendered`]), kept in memory for the
//! articles being read.
//!
//! Data flow: the reader-copy cache ([`super::cache`]) hands out its serialised copy of an
//! article (the authority on what is published: versioned, invalidated by publish and
//! withdraw) → [`ReaderPages::page`] returns the page rendered from those very bytes if it has
//! one (the same allocation, or equal bytes), else renders them now and keeps the result →
//! the handler appends the counters and flags as the answer's tail ([`ReaderPage::respond`]).
//! A page is only ever served for the bytes it was rendered from, so it needs no invalidation
//! of its own: a republished or withdrawn article has other bytes, or none, in the reader-copy
//! cache. The pages are bounded by bytes (their share of `cache_memory_bytes`); their lookups
//! are counted with the other caches' (`cache_requests_total{cache="article_reader_page"}`).

use std::sync::Arc;

use axum::{body::Bytes, response::Response};
use serde::Serialize;

use crate::{
    article::model::{ArticleStatus, PublishedArticle},
    interactive::{Counts, UserFlags},
    user::Person,
};
use platform::{cache::LookupCounters, error::AppError, prerendered::Prerendered};

/// The pages' name in the cache metrics; a hit is a page rendered from the very copy found.
const PAGES_CACHE: &str = "article_reader_page";

/// The envelope's opening, as [`platform::error::Reply`] writes it, up to the `data` object.
const ENVELOPE_OPENING: &[u8] = br#"{"code":0,"msg":"ok","data":"#;

/// The constant fields of the reader view; the changing ones follow in the tail, so the
/// object's keys are: id, title, content, abstract, author, status, ctime, utime, readCnt,
/// likeCnt, collectCnt, commentCnt, liked, collected.
#[derive(Serialize)]
struct ConstantFields<'a> {
    id: i64,
    title: &'a str,
    content: &'a str,
    #[serde(rename = "abstract")]
    abstract_text: &'a str,
    author: Person,
    status: ArticleStatus,
    ctime: i64,
    utime: i64,
}

/// One article's rendered answer and the bytes it was rendered from.
#[derive(Debug)]
pub struct ReaderPage {
    source: Bytes,
    prerendered: Prerendered,
}

impl ReaderPage {
    /// Renders `article`, serialised in `source` (decoded from it when not given); `None` when
    /// it is not published.
    fn render(source: Bytes, article: Option<PublishedArticle>) -> anyhow::Result<Option<Self>> {
        let article = match article {
            Some(article) => article,
            None => serde_json::from_slice(&source)?,
        };
        if article.status != ArticleStatus::Published {
            return Ok(None);
        }
        let mut prefix = Vec::with_capacity(ENVELOPE_OPENING.len() + source.len() + 64);
        prefix.extend_from_slice(ENVELOPE_OPENING);
        serde_json::to_writer(
            &mut prefix,
            &ConstantFields {
                id: article.id,
                title: &article.title,
                content: &article.content,
                abstract_text: &article.abstract_text,
                author: Person {
                    id: article.author_id,
                    name: article.author_name,
                },
                status: article.status,
                ctime: article.ctime,
                utime: article.utime,
            },
        )?;
        // Reopen the object for the tail: `…,"utime":1}` → `…,"utime":1,`.
        if prefix.pop() != Some(b'}') {
            anyhow::bail!("the reader view's fields did not serialise as an object");
        }
        prefix.push(b',');
        Ok(Some(Self {
            source,
            prerendered: Prerendered::new(prefix)?,
        }))
    }

    fn rendered_from(&self, source: &Bytes) -> bool {
        (self.source.as_ptr() == source.as_ptr() && self.source.len() == source.len())
            || self.source == *source
    }

    /// The reader view with `counts` and the reader's `flags`, gzipped if `gzip`.
    pub fn respond(&self, counts: &Counts, flags: &UserFlags, gzip: bool) -> Response {
        let tail = format!(
            r#""readCnt":{},"likeCnt":{},"collectCnt":{},"commentCnt":{},"liked":{},"collected":{}}}}}"#,
            counts.read_cnt,
            counts.like_cnt,
            counts.collect_cnt,
            counts.comment_cnt,
            flags.liked,
            flags.collected,
        );
        self.prerendered.respond(tail.as_bytes(), gzip)
    }
}

/// Rendered pages by article id, bounded by bytes; cheap to clone.
#[derive(Debug, Clone)]
pub struct ReaderPages {
    pages: moka::sync::Cache<i64, Arc<ReaderPage>>,
    /// The lookups' counters, taken once: made after the metrics recorder is installed, as
    /// features are.
    lookups: LookupCounters,
}

impl ReaderPages {
    /// Pages of at most `memory_bytes` in all (rendered bytes plus the source copies they keep).
    pub fn new(memory_bytes: u64) -> Self {
        Self {
            pages: moka::sync::Cache::builder()
                .max_capacity(memory_bytes)
                .weigher(|_, page: &Arc<ReaderPage>| {
                    u32::try_from(page.prerendered.size() + page.source.len()).unwrap_or(u32::MAX)
                })
                .build(),
            lookups: LookupCounters::new(PAGES_CACHE, "local"),
        }
    }

    /// The page of article `id` rendered from `source` (its reader copy as the cache holds
    /// it; `decoded`, when the caller has it, is `source` already deserialised); `None` when
    /// that copy is not published.
    pub fn page(
        &self,
        id: i64,
        source: Bytes,
        decoded: Option<PublishedArticle>,
    ) -> Result<Option<Arc<ReaderPage>>, AppError> {
        if let Some(page) = self.pages.get(&id) {
            if page.rendered_from(&source) {
                self.lookups.count(true);
                return Ok(Some(page));
            }
        }
        self.lookups.count(false);
        let Some(page) = ReaderPage::render(source, decoded).map_err(AppError::Internal)? else {
            return Ok(None);
        };
        let page = Arc::new(page);
        self.pages.insert(id, page.clone());
        Ok(Some(page))
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn article(status: ArticleStatus, content: &str) -> Bytes {
        platform::cache::json_bytes(&PublishedArticle {
            id: 7,
            author_id: 3,
            author_name: "Ann \"the\" author".into(),
            title: "Title <b>".into(),
            content: content.into(),
            abstract_text: "abs".into(),
            status,
            ctime: 10,
            utime: 20,
        })
        .unwrap()
    }

    async fn json(response: Response, gzip: bool) -> serde_json::Value {
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let mut plain = Vec::new();
        if gzip {
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut plain)
                .unwrap();
        } else {
            plain = body.to_vec();
        }
        serde_json::from_slice(&plain).unwrap()
    }

    #[tokio::test]
    async fn a_page_is_the_whole_reader_view_plain_and_gzipped() {
        let pages = ReaderPages::new(1 << 20);
        let page = pages
            .page(7, article(ArticleStatus::Published, "<p>hello</p>"), None)
            .unwrap()
            .unwrap();
        let counts = Counts {
            read_cnt: 5,
            like_cnt: 4,
            collect_cnt: 3,
            comment_cnt: 2,
        };
        let flags = UserFlags {
            liked: true,
            collected: false,
        };
        let expected = serde_json::json!({"code": 0, "msg": "ok", "data": {
            "id": 7, "title": "Title <b>", "content": "<p>hello</p>", "abstract": "abs",
            "author": {"id": 3, "name": "Ann \"the\" author"}, "status": 2,
            "readCnt": 5, "likeCnt": 4, "collectCnt": 3, "commentCnt": 2,
            "liked": true, "collected": false, "ctime": 10, "utime": 20}});
        assert_eq!(
            json(page.respond(&counts, &flags, false), false).await,
            expected
        );
        assert_eq!(
            json(page.respond(&counts, &flags, true), true).await,
            expected
        );
    }

    #[test]
    fn lookups_are_counted_as_hits_and_misses() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let metrics = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let pages = ReaderPages::new(1 << 20);
            // Rendered (a miss), found (a hit), a republished copy rendered anew (a miss).
            pages
                .page(7, article(ArticleStatus::Published, "one"), None)
                .unwrap();
            pages
                .page(7, article(ArticleStatus::Published, "one"), None)
                .unwrap();
            pages
                .page(7, article(ArticleStatus::Published, "two"), None)
                .unwrap();
        });
        let text = metrics.render();
        let lookups = |result: &str| {
            text.lines()
                .find(|line| {
                    line.starts_with("cache_requests_total{")
                        && line.contains(r#"cache="article_reader_page""#)
                        && line.contains(&format!(r#"result="{result}""#))
                })
                .and_then(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        };
        assert_eq!(lookups("hit"), Some(1), "{text}");
        assert_eq!(lookups("miss"), Some(2), "{text}");
    }

    #[tokio::test]
    async fn a_page_is_served_only_for_the_bytes_it_was_rendered_from() {
        let pages = ReaderPages::new(1 << 20);
        let first = article(ArticleStatus::Published, "one");
        let page = pages.page(7, first.clone(), None).unwrap().unwrap();
        // The same bytes, another allocation: the same page.
        let again = pages
            .page(7, Bytes::from(first.to_vec()), None)
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&page, &again));
        // A republished copy: rendered anew.
        let republished = pages
            .page(7, article(ArticleStatus::Published, "two"), None)
            .unwrap()
            .unwrap();
        assert!(!Arc::ptr_eq(&page, &republished));
        let body = json(
            republished.respond(&Counts::default(), &UserFlags::default(), false),
            false,
        )
        .await;
        assert_eq!(body["data"]["content"], "two");
        // A copy that is not published has no page.
        assert!(pages
            .page(7, article(ArticleStatus::Private, "two"), None)
            .unwrap()
            .is_none());
    }
}
