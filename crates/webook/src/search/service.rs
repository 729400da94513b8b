//! Answering `/search`: checks the request, runs the query on a blocking thread against the
//! latest commit, then shows the hits from the database — so a hit withdrawn since it was
//! indexed is dropped rather than shown — with highlights, whose work per request is bounded
//! ([`highlight::Highlighter`]). While search is degraded (the index cannot be written, or is
//! being reopened or rebuilt after that) queries are answered from the last good commit.
//!
//! Cursors: scores carry a freshness nudge that shrinks as time passes, so a list is ranked at
//! one reference time — the first page's — which its cursors carry (`[list, score bits, id,
//! ranked at]`); each later page is ranked at it and continues exactly after the last hit. A
//! cursor's time is checked against this instance's clock (at most [`CURSOR_LIFETIME_MS`] old,
//! at most a few minutes ahead); anything else is code 4.

use std::{sync::Arc, time::Instant};

use platform::{
    db::now_millis,
    error::{AppError, Msg},
    page::{decode_cursor, encode_cursor, invalid_cursor, Page},
};
use serde::Serialize;

use super::{
    feeder::Readiness,
    highlight::{self, Highlight},
    index::{CurrentIndex, ARTICLE, USER},
    query::{self, After, Hit, ParsedQuery, MAX_QUERY_CHARS},
    store::SearchStore,
    synonyms::Synonyms,
};
use crate::user::Person;

/// Histogram: seconds per search request (query and hydration), by `type`.
pub const SEARCH_QUERY_SECONDS: &str = "search_query_seconds";

/// What to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchType {
    /// Articles and users.
    All,
    /// Articles only.
    Article,
    /// Users only.
    User,
}

impl SearchType {
    /// `type` of the request; absent means [`SearchType::All`].
    pub fn parse(value: Option<&str>) -> Result<Self, AppError> {
        match value.unwrap_or("all") {
            "all" => Ok(Self::All),
            "article" => Ok(Self::Article),
            "user" => Ok(Self::User),
            _ => Err(AppError::InvalidInput(Msg::field(
                "type",
                "must be all, article or user",
                "须为 all、article 或 user",
            ))),
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::All => "all",
            Self::Article => "article",
            Self::User => "user",
        }
    }
}

/// An article hit.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArticleHit {
    /// Article id.
    pub id: i64,
    /// Title (plain text).
    pub title: String,
    /// Escaped abstract.
    #[serde(rename = "abstract")]
    pub abstract_text: String,
    /// Author.
    pub author: Person,
    /// Tag names.
    pub tags: Vec<String>,
    /// Likes.
    pub like_cnt: i64,
    /// First publication (ms).
    pub ctime: i64,
    /// What matched.
    pub highlight: Highlight,
}

/// A user hit (never email or phone).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserHit {
    /// User id.
    pub id: i64,
    /// Nickname.
    pub nickname: String,
    /// About me.
    pub about_me: String,
}

/// The answer: a page of each list asked for (the other empty).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SearchResults {
    /// Article hits.
    pub articles: Page<ArticleHit>,
    /// User hits.
    pub users: Page<UserHit>,
}

/// Cursor kinds (the first number of a cursor): which list it continues.
const ARTICLE_CURSOR: i64 = 1;
const USER_CURSOR: i64 = 2;

/// How long a cursor continues its list: pages are ranked at the time of the first one (the
/// freshness nudge moves every score as time passes), and a list ranked a day ago is stale.
pub const CURSOR_LIFETIME_MS: i64 = 24 * 3_600_000;
/// How far in the future a cursor's ranking time may be: another instance's clock may run
/// ahead of this one's.
const CURSOR_CLOCK_SKEW_MS: i64 = 5 * 60_000;

fn invalid_query(en: &str, zh: &str) -> AppError {
    AppError::InvalidInput(Msg::field("q", en, zh))
}

/// The cursor after `hit` of a list ranked at `ranked_at` (ms).
fn cursor_of(kind: i64, hit: &Hit, ranked_at: i64) -> String {
    let after = hit.after();
    encode_cursor(&[
        kind,
        i64::from(after.score_bits),
        after.id as i64,
        ranked_at,
    ])
}

/// Where a cursor continues: its list, its last hit and the time its list is ranked at, which
/// must lie within [`CURSOR_LIFETIME_MS`] before `now_ms` and a clock's skew after it.
fn decode_search_cursor(cursor: &str, now_ms: i64) -> Result<(i64, After, i64), AppError> {
    let [list, bits, id, ranked_at] = decode_cursor::<4>(cursor)?;
    let score_bits = u32::try_from(bits).map_err(|_| invalid_cursor())?;
    let id = u64::try_from(id).map_err(|_| invalid_cursor())?;
    if ranked_at > now_ms.saturating_add(CURSOR_CLOCK_SKEW_MS) || ranked_at <= 0 {
        return Err(invalid_cursor());
    }
    if ranked_at < now_ms.saturating_sub(CURSOR_LIFETIME_MS) {
        return Err(AppError::InvalidInput(Msg::field(
            "cursor",
            "has expired: search again from the first page",
            "已过期，请从第一页重新搜索",
        )));
    }
    Ok((list, After { score_bits, id }, ranked_at))
}

/// Search over this process's index.
#[derive(Debug, Clone)]
pub struct SearchService {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    index: CurrentIndex,
    readiness: Arc<Readiness>,
    store: SearchStore,
    synonyms: Synonyms,
}

impl SearchService {
    /// The service over `index`, served once `readiness` says so, with `synonyms`.
    pub fn new(
        index: CurrentIndex,
        readiness: Arc<Readiness>,
        store: SearchStore,
        synonyms: Synonyms,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                index,
                readiness,
                store,
                synonyms,
            }),
        }
    }

    /// Whether queries are served: the index was complete (it may be degraded since).
    pub fn is_searchable(&self) -> bool {
        self.inner.readiness.is_searchable()
    }

    /// A page of hits for `q`. `cursor` (from an earlier answer) continues the list it came
    /// from; only that list is returned then.
    pub async fn search(
        &self,
        q: &str,
        kind: SearchType,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<SearchResults, AppError> {
        self.search_at(q, kind, cursor, limit, now_millis()).await
    }

    /// [`SearchService::search`] as if asked at `now_ms` (tests move the clock with it).
    pub async fn search_at(
        &self,
        q: &str,
        kind: SearchType,
        cursor: Option<&str>,
        limit: usize,
        now_ms: i64,
    ) -> Result<SearchResults, AppError> {
        let started = Instant::now();
        if q.chars().count() > MAX_QUERY_CHARS {
            return Err(invalid_query(
                &format!("must be at most {MAX_QUERY_CHARS} characters"),
                &format!("不能超过 {MAX_QUERY_CHARS} 个字符"),
            ));
        }
        if q.chars().any(|c| c.is_control() && !c.is_whitespace()) {
            return Err(invalid_query(
                "must not contain control characters",
                "不能包含控制字符",
            ));
        }
        let (mut want_articles, mut want_users) = match kind {
            SearchType::All => (true, true),
            SearchType::Article => (true, false),
            SearchType::User => (false, true),
        };
        // The first page ranks at `now_ms`; the pages after it at the same time, which their
        // cursors carry, so each continues the order the ones before it followed.
        let mut after = None;
        let mut ranked_at = now_ms;
        if let Some(cursor) = cursor {
            let (list, last, at) = decode_search_cursor(cursor, now_ms)?;
            match list {
                ARTICLE_CURSOR if want_articles => want_users = false,
                USER_CURSOR if want_users => want_articles = false,
                _ => return Err(invalid_cursor()),
            }
            after = Some(last);
            ranked_at = at;
        }
        let parsed = ParsedQuery::parse(q);
        if parsed.is_empty() {
            return Err(invalid_query(
                "must contain a letter or digit",
                "须包含文字或数字",
            ));
        }
        if !self.is_searchable() {
            return Err(AppError::Unavailable(anyhow::anyhow!(
                "the search index is being rebuilt"
            )));
        }
        let index = self.inner.index.load_full();
        let synonyms = self.inner.synonyms.clone();
        let (article_hits, user_hits, needles) = tokio::task::spawn_blocking(move || {
            synonyms.refresh();
            let searcher = index.reader().searcher();
            let fields = index.fields();
            let run = |kind: &str| -> tantivy::Result<(Vec<Hit>, Vec<String>)> {
                let mut prepared = query::prepare(&searcher, fields, kind, &parsed, &synonyms)?;
                let hits = prepared.search(&searcher, kind, after, limit + 1, ranked_at)?;
                Ok((hits, prepared.needles()))
            };
            let (articles, needles) = if want_articles {
                run(ARTICLE)?
            } else {
                Default::default()
            };
            let users = if want_users { run(USER)?.0 } else { Vec::new() };
            tantivy::Result::Ok((articles, users, needles))
        })
        .await
        .map_err(|err| AppError::Internal(err.into()))?
        .map_err(|err| AppError::Internal(err.into()))?;
        let articles = self
            .article_page(article_hits, limit, needles, ranked_at)
            .await?;
        let users = self.user_page(user_hits, limit, ranked_at).await?;
        metrics::histogram!(SEARCH_QUERY_SECONDS, "type" => kind.label())
            .record(started.elapsed().as_secs_f64());
        Ok(SearchResults { articles, users })
    }

    async fn article_page(
        &self,
        mut hits: Vec<Hit>,
        limit: usize,
        needles: Vec<String>,
        ranked_at: i64,
    ) -> Result<Page<ArticleHit>, AppError> {
        let next = (hits.len() > limit).then(|| {
            hits.truncate(limit);
            hits.last()
                .map(|hit| cursor_of(ARTICLE_CURSOR, hit, ranked_at))
        });
        let ids: Vec<i64> = hits.iter().map(|hit| hit.id).collect();
        let store = &self.inner.store;
        let rows = store
            .articles(&ids)
            .await
            .map_err(|err| AppError::Internal(err.into()))?;
        let mut tags = store
            .tags(&ids)
            .await
            .map_err(|err| AppError::Internal(err.into()))?;
        let mut rows: std::collections::HashMap<i64, _> =
            rows.into_iter().map(|row| (row.id, row)).collect();
        let mut highlighter = highlight::Highlighter::new(needles);
        let ordered: Vec<_> = ids
            .iter()
            .filter_map(|id| {
                rows.remove(id)
                    .map(|row| (row, tags.remove(id).unwrap_or_default()))
            })
            .collect();
        // Markup stripping and matching are CPU work: off the async workers.
        let items = tokio::task::spawn_blocking(move || {
            ordered
                .into_iter()
                .map(|(row, tags)| ArticleHit {
                    id: row.id,
                    highlight: highlighter.article(&row.title, &row.content),
                    title: row.title,
                    abstract_text: row.abstract_text,
                    author: Person::new(row.author_id, Some(&row.author_nickname)),
                    tags,
                    like_cnt: row.likes,
                    ctime: row.ctime,
                })
                .collect()
        })
        .await
        .map_err(|err| AppError::Internal(err.into()))?;
        Ok(Page {
            items,
            next: next.flatten(),
        })
    }

    async fn user_page(
        &self,
        mut hits: Vec<Hit>,
        limit: usize,
        ranked_at: i64,
    ) -> Result<Page<UserHit>, AppError> {
        let next = (hits.len() > limit).then(|| {
            hits.truncate(limit);
            hits.last()
                .map(|hit| cursor_of(USER_CURSOR, hit, ranked_at))
        });
        let ids: Vec<i64> = hits.iter().map(|hit| hit.id).collect();
        let rows = self
            .inner
            .store
            .users(&ids)
            .await
            .map_err(|err| AppError::Internal(err.into()))?;
        let mut rows: std::collections::HashMap<i64, _> =
            rows.into_iter().map(|row| (row.id, row)).collect();
        let items = ids
            .iter()
            .filter_map(|id| rows.remove(id))
            .map(|row| UserHit {
                id: row.id,
                nickname: row.nickname,
                about_me: row.about,
            })
            .collect();
        Ok(Page {
            items,
            next: next.flatten(),
        })
    }
}
