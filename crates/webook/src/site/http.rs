//! The public site's routes: server-rendered pages (`/a/{id}`, `/u/{id}`, `/t/{name}`), Atom
//! feeds (`/feed.atom`, `/hot.atom`, `/u/{id}/feed.atom`, `/t/{name}/feed.atom`), `robots.txt`
//! and the sitemaps (`/sitemap.xml` → `/sitemaps/…`).
//!
//! Every answer has a strong `ETag` (of its body, per encoding) and answers `If-None-Match`
//! with 304; feeds also carry `Last-Modified` (their newest entry) and answer
//! `If-Modified-Since`. Pages are `Cache-Control: no-cache` (revalidated on each view, so a
//! withdrawn article disappears at once); each sitemap (the index included) is read at most
//! every [`SITEMAP_TTL`] ([`SitemapCache`]), an article sitemap less what was unpublished since. An article's page is rendered once per reader copy and kept,
//! compressed, in memory ([`ArticlePages`]); the others are rendered per request from the same
//! services (and caches) as the API.
//!
//! When the operator requires a login to read (`anonymous_reading = false`), the pages answer
//! the console's plain page (which asks for a login), and feeds and sitemaps are not served.

use std::{sync::Arc, time::Duration};

use axum::{
    body::Bytes,
    extract::{Path, RawQuery, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use sha2::Digest;

use crate::{
    article::{ArticleService, ReaderCopy},
    console::{ConsoleShell, ShellPage},
    ranking::RankingService,
    tag::{TagService, TopicOrder},
    user::UserService,
};
use platform::{error::AppError, http::accepts_gzip, http::etag_matches, prerendered::Prerendered};

use super::{
    render::{self, Author, Entry, FeedHead, FEED_ENTRIES},
    store::{SiteStore, SITEMAP_PAGE},
};

/// How long a sitemap's entries are reused before they are read again.
pub const SITEMAP_TTL: Duration = Duration::from_secs(300);
/// Sitemaps kept at most (the index, the topics', and pages of articles and of authors).
const SITEMAPS_KEPT: u64 = 1024;
/// Articles on an author's or a topic's page.
const LIST_LEN: usize = 20;
/// The cache's name in the metrics.
const PAGES_CACHE: &str = "site_article_page";

/// What the site's handlers reach.
pub struct SiteRoutes {
    /// Articles (the reader-copy cache; lists of published articles).
    pub articles: ArticleService,
    /// Authors' profiles.
    pub users: UserService,
    /// Topics.
    pub tags: TagService,
    /// The hot list.
    pub ranking: RankingService,
    /// The console's page the pages fill.
    pub shell: ConsoleShell,
    /// The sitemaps' reads.
    pub store: SiteStore,
    /// The configured origin (`site_url`), if any.
    pub origin: Option<String>,
    /// Where `anonymous_reading` (live) is read: whether visitors may read.
    pub live: platform::live::LiveConfig,
    /// Rendered article pages.
    pub pages: ArticlePages,
    /// The sitemaps' entries, kept for [`SITEMAP_TTL`].
    pub sitemaps: SitemapCache,
}

impl SiteRoutes {
    /// Whether visitors may read now (`anonymous_reading`).
    fn open(&self) -> bool {
        self.live
            .current()
            .settings::<crate::auth::AuthSettings>()
            .is_ok_and(|settings| settings.anonymous_reading)
    }
}

/// The routes.
pub fn router(routes: SiteRoutes) -> Router {
    Router::new()
        .route("/a/{id}", get(article))
        .route("/u/{id}", get(author))
        .route("/t/{name}", get(topic))
        .route("/feed.atom", get(latest_feed))
        .route("/hot.atom", get(hot_feed))
        .route("/u/{id}/feed.atom", get(author_feed))
        .route("/t/{name}/feed.atom", get(topic_feed))
        .route("/robots.txt", get(robots))
        .route("/sitemap.xml", get(sitemap_index))
        .route("/sitemaps/articles/{n}", get(sitemap_articles))
        .route("/sitemaps/authors/{n}", get(sitemap_authors))
        .route("/sitemaps/topics", get(sitemap_topics))
        .with_state(Arc::new(routes))
}

/// An article page rendered from one reader copy for one origin, compressed once.
#[derive(Debug)]
struct ArticlePage {
    article: ReaderCopy,
    origin: String,
    body: Prerendered,
    etag: HeaderValue,
    gzip_etag: HeaderValue,
}

/// Rendered article pages by id, bounded by bytes; a page is served only for the very reader
/// copy and origin it was rendered from, so it needs no invalidation (a republished article
/// has another copy, a withdrawn one none).
#[derive(Debug, Clone)]
pub struct ArticlePages {
    pages: moka::sync::Cache<i64, Arc<ArticlePage>>,
    lookups: platform::cache::LookupCounters,
}

impl ArticlePages {
    /// Pages of at most `memory_bytes` in all.
    pub fn new(memory_bytes: u64) -> Self {
        Self {
            pages: moka::sync::Cache::builder()
                .max_capacity(memory_bytes)
                .weigher(|_, page: &Arc<ArticlePage>| {
                    u32::try_from(page.body.size() + page.article.content.len()).unwrap_or(u32::MAX)
                })
                .build(),
            lookups: platform::cache::LookupCounters::new(PAGES_CACHE, "local"),
        }
    }

    fn page(
        &self,
        shell: &ConsoleShell,
        origin: &str,
        article: ReaderCopy,
    ) -> anyhow::Result<Arc<ArticlePage>> {
        if let Some(page) = self.pages.get(&article.id) {
            if page.article == article && page.origin == origin {
                self.lookups.count(true);
                return Ok(page);
            }
        }
        self.lookups.count(false);
        let html = render::article_page(shell, origin, &article).into_bytes();
        let digest = digest(&html);
        let page = Arc::new(ArticlePage {
            body: Prerendered::new(html)?,
            origin: origin.to_owned(),
            etag: etag(&digest, ""),
            gzip_etag: etag(&digest, "-gzip"),
            article,
        });
        self.pages.insert(page.article.id, page.clone());
        Ok(page)
    }
}

/// Every sitemap's entries (path, last change in ms), by the sitemap's path, kept for
/// [`SITEMAP_TTL`]. Reading one scans published articles — up to 10 000 of them for a page,
/// all of them for the index, the authors' pages and the topics (30–300 ms on the
/// 100 000-article dataset) — so whoever asks again within the TTL, a crawler or a flood, gets
/// the kept entries. One read at a time: the others wait for it, then find its result kept.
///
/// An article sitemap kept is checked against the articles unpublished since it was read (an
/// indexed range of `published_articles (utime)`): a withdrawn or hidden article leaves it at
/// once, on every instance, not after the TTL.
#[derive(Debug)]
pub struct SitemapCache {
    kept: moka::sync::Cache<String, (Sitemaps, i64)>,
    reading: tokio::sync::Mutex<()>,
}

/// How far another instance's clock may be behind this one's, as far as a kept sitemap's check
/// for unpublished articles goes (ms).
const CLOCK_SKEW_MS: i64 = 10_000;

/// A sitemap's entries: (path, last change in ms).
type Sitemaps = Arc<Vec<(String, i64)>>;

impl Default for SitemapCache {
    fn default() -> Self {
        Self {
            kept: moka::sync::Cache::builder()
                .max_capacity(SITEMAPS_KEPT)
                .time_to_live(SITEMAP_TTL)
                .build(),
            reading: tokio::sync::Mutex::default(),
        }
    }
}

impl SitemapCache {
    /// The entries of sitemap `path`, kept or from `read`, and when they were read (ms).
    async fn entries<F>(&self, path: &str, read: F) -> sqlx::Result<(Sitemaps, i64)>
    where
        F: AsyncFnOnce() -> sqlx::Result<Vec<(String, i64)>>,
    {
        if let Some(kept) = self.kept.get(path) {
            return Ok(kept);
        }
        let _one_read = self.reading.lock().await;
        if let Some(kept) = self.kept.get(path) {
            return Ok(kept);
        }
        let read_at = platform::db::now_millis();
        let kept = (Arc::new(read().await?), read_at);
        self.kept.insert(path.to_owned(), kept.clone());
        Ok(kept)
    }
}

/// The sitemap index's entries: a sitemap per page of articles and of authors, and the topics'.
async fn index_entries(store: &SiteStore) -> sqlx::Result<Vec<(String, i64)>> {
    let mut entries = Vec::new();
    for span in store.article_pages().await? {
        entries.push((format!("/sitemaps/articles/{}", span.n), span.lastmod));
    }
    for span in store.author_pages().await? {
        entries.push((format!("/sitemaps/authors/{}", span.n), span.lastmod));
    }
    if let Some(newest) = store.topics().await?.first() {
        entries.push(("/sitemaps/topics".to_owned(), newest.lastmod));
    }
    Ok(entries)
}

/// A strong ETag of `body`, for its representation `suffix` (`""` plain, `"-gzip"`: two
/// representations, two tags).
fn etag(digest: &str, suffix: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{digest}{suffix}\""))
        .unwrap_or(HeaderValue::from_static("\"\""))
}

/// The digest an ETag of `body` is made of.
fn digest(body: &[u8]) -> String {
    hex::encode(&sha2::Sha256::digest(body)[..12])
}

/// The headers every answer of the site carries: revalidated on each use, its `etag`, and a
/// page's security headers.
fn caching_headers(etag: HeaderValue, html: bool) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::ETAG, etag);
    if html {
        ConsoleShell::security_headers(&mut headers);
    }
    headers
}

/// Whether the client's copy is current: `If-None-Match` names `etag`, or, without it,
/// `If-Modified-Since` is not before `last_modified` (ms; whole seconds compared).
fn fresh(request: &HeaderMap, etag: &HeaderValue, last_modified: Option<i64>) -> bool {
    match request.get(header::IF_NONE_MATCH) {
        Some(wanted) => etag_matches(wanted.as_bytes(), etag.as_bytes()),
        None => match (last_modified, request.get(header::IF_MODIFIED_SINCE)) {
            (Some(modified), Some(since)) => since
                .to_str()
                .ok()
                .and_then(|since| chrono::DateTime::parse_from_rfc2822(since).ok())
                .is_some_and(|since| modified / 1000 <= since.timestamp()),
            _ => false,
        },
    }
}

/// The origin links name: `site_url`, else `http://` and the request's `Host` when it is a
/// plain host name or address with an optional port (`localhost` otherwise).
fn origin(routes: &SiteRoutes, headers: &HeaderMap) -> String {
    if let Some(origin) = &routes.origin {
        return origin.clone();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .filter(|host| {
            !host.is_empty()
                && host.len() <= 255
                && host.bytes().all(|b| {
                    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                })
        })
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// `body` as `content_type` with its caching headers, or 304 when the client's copy is current.
fn send(
    request: &HeaderMap,
    content_type: &'static str,
    body: Bytes,
    last_modified: Option<i64>,
) -> Response {
    let etag = etag(&digest(&body), "");
    let fresh = fresh(request, &etag, last_modified);
    let mut headers = caching_headers(etag, content_type.starts_with("text/html"));
    if let Some(value) = last_modified.and_then(|ms| HeaderValue::from_str(&http_date(ms)).ok()) {
        headers.insert(header::LAST_MODIFIED, value);
    }
    if fresh {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    (headers, body).into_response()
}

/// An HTTP date (RFC 9110 IMF-fixdate) of Unix milliseconds.
fn http_date(ms: i64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

const HTML: &str = "text/html; charset=utf-8";
const ATOM: &str = "application/atom+xml; charset=utf-8";
const XML: &str = "application/xml; charset=utf-8";

/// The console's page with no content of its own: what a page answers when visitors may not
/// read (the console asks for a login) or when there is nothing at the address (404).
fn bare(
    routes: &SiteRoutes,
    request: &HeaderMap,
    status: StatusCode,
    title: &str,
    main: &str,
) -> Response {
    let html = routes.shell.render(&ShellPage {
        lang: "en",
        title,
        head: "<meta name=\"robots\" content=\"noindex\">\n",
        main,
    });
    let mut response = send(request, HTML, Bytes::from(html), None);
    if response.status() == StatusCode::OK {
        *response.status_mut() = status;
    }
    response
}

fn not_found(routes: &SiteRoutes, request: &HeaderMap) -> Response {
    bare(
        routes,
        request,
        StatusCode::NOT_FOUND,
        "Not found · webook",
        "<section class=\"card\" data-test=\"ssr-missing\"><h1 class=\"page-title\">Not found</h1>\
         <p>Nothing is published at this address. <a href=\"/\">Home</a></p></section>",
    )
}

/// What a handler answers for an error of a service: 404 for what is not there (or not a
/// valid address), 500 for the rest (logged).
fn failed(routes: &SiteRoutes, request: &HeaderMap, err: AppError) -> Response {
    match err {
        AppError::NotFound(_) | AppError::InvalidInput(_) => not_found(routes, request),
        other => other.into_response(),
    }
}

/// Parameter `name` of a page's query string.
fn param_of(query: Option<&str>, name: &str) -> Option<String> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// The `cursor` of a page's query string.
fn cursor_of(query: Option<&str>) -> Option<String> {
    param_of(query, "cursor")
}

/// `GET /a/{id}` **(webook)**: a published article as a page — title, author, date and
/// content, with its description, canonical link and share card (Open Graph, Twitter) — that
/// the console's script then takes over. Reads are counted by the reader view the script
/// fetches (once per visitor and window), not by the page, so a crawler never counts one.
#[utoipa::path(
    get,
    path = "/a/{id}",
    params(("id" = i64, Path, description = "The article.")),
    responses(
        (status = 200, description = "The page (`text/html`), gzipped for clients that accept \
         it; `ETag`, `Cache-Control: no-cache`.", content_type = "text/html", body = String),
        (status = 304, description = "`If-None-Match` named its ETag."),
        (status = 404, description = "No such published article (a page saying so).",
         content_type = "text/html", body = String),
    )
)]
async fn article(
    State(routes): State<Arc<SiteRoutes>>,
    Path(id): Path<String>,
    request: HeaderMap,
) -> Response {
    if !routes.open() {
        return bare(&routes, &request, StatusCode::OK, "webook", "");
    }
    let Some(id) = id.parse::<i64>().ok().filter(|id| *id > 0) else {
        return not_found(&routes, &request);
    };
    let article = match routes.articles.reader_view(id).await {
        Ok(article) => article,
        Err(err) => return failed(&routes, &request, err),
    };
    let origin = origin(&routes, &request);
    let page = match routes.pages.page(&routes.shell, &origin, article) {
        Ok(page) => page,
        Err(err) => return AppError::Internal(err).into_response(),
    };
    let gzip = accepts_gzip(&request);
    let etag = if gzip { &page.gzip_etag } else { &page.etag };
    let fresh = fresh(&request, etag, None);
    let mut headers = caching_headers(etag.clone(), true);
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if fresh {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(HTML));
    if gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    (headers, page.body.body(b"", gzip)).into_response()
}

/// An author's profile and first page of published articles, from the services.
async fn author_of(
    routes: &SiteRoutes,
    id: &str,
    cursor: Option<&str>,
    limit: usize,
) -> Result<(Author, platform::page::Page<crate::article::PublishedItem>), AppError> {
    let id = id
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or(AppError::NotFound(platform::error::Msg::new(
            "no such user",
            "用户不存在",
        )))?;
    let profile = routes.users.profile(id).await?;
    let articles = routes.articles.published(Some(id), cursor, limit).await?;
    Ok((
        Author {
            id,
            name: crate::user::display_name(&profile.nickname, id),
            about: profile.about_me,
        },
        articles,
    ))
}

/// `GET /u/{id}` **(webook)**: an author's page — name, about and published articles, newest
/// first (`?cursor=` the next page) — never the email, phone or birthday.
#[utoipa::path(
    get,
    path = "/u/{id}",
    params(("id" = i64, Path, description = "The author."),
           ("cursor" = Option<String>, Query, description = "The next page's cursor.")),
    responses(
        (status = 200, description = "The page (`text/html`).", content_type = "text/html", body = String),
        (status = 304, description = "`If-None-Match` named its ETag."),
        (status = 404, description = "No such user.", content_type = "text/html", body = String),
    )
)]
async fn author(
    State(routes): State<Arc<SiteRoutes>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    request: HeaderMap,
) -> Response {
    if !routes.open() {
        return bare(&routes, &request, StatusCode::OK, "webook", "");
    }
    let cursor = cursor_of(query.as_deref());
    match author_of(&routes, &id, cursor.as_deref(), LIST_LEN).await {
        Ok((author, page)) => {
            let origin = origin(&routes, &request);
            let html = render::author_page(
                &routes.shell,
                &origin,
                &author,
                &page.items,
                page.next.as_deref(),
            );
            send(&request, HTML, Bytes::from(html), None)
        }
        Err(err) => failed(&routes, &request, err),
    }
}

/// `GET /t/{name}` **(webook)**: a topic's page — the published articles carrying a tag of
/// that name (any author's; the name compared normalised), newest first.
#[utoipa::path(
    get,
    path = "/t/{name}",
    params(("name" = String, Path, description = "The topic (any spelling)."),
           ("cursor" = Option<String>, Query, description = "The next page's cursor.")),
    responses(
        (status = 200, description = "The page (`text/html`).", content_type = "text/html", body = String),
        (status = 304, description = "`If-None-Match` named its ETag."),
        (status = 404, description = "No such topic.", content_type = "text/html", body = String),
    )
)]
async fn topic(
    State(routes): State<Arc<SiteRoutes>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    request: HeaderMap,
) -> Response {
    if !routes.open() {
        return bare(&routes, &request, StatusCode::OK, "webook", "");
    }
    let cursor = cursor_of(query.as_deref());
    // An unknown order is the default one (a page, not an API, answers what it can).
    let order =
        TopicOrder::parse(param_of(query.as_deref(), "sort").as_deref()).unwrap_or_default();
    match routes
        .tags
        .topic(&name, order, cursor.as_deref(), LIST_LEN)
        .await
    {
        Ok(topic) => {
            let origin = origin(&routes, &request);
            let html = render::topic_page(&routes.shell, &origin, &topic, order);
            send(&request, HTML, Bytes::from(html), None)
        }
        Err(err) => failed(&routes, &request, err),
    }
}

/// A feed's answer, or 404 when visitors may not read.
fn feed(
    routes: &SiteRoutes,
    request: &HeaderMap,
    head: &FeedHead<'_>,
    entries: &[Entry],
) -> Response {
    let origin = origin(routes, request);
    let body = render::atom(&origin, head, entries);
    send(
        request,
        ATOM,
        Bytes::from(body),
        Some(render::feed_updated(entries)),
    )
}

fn closed() -> Response {
    AppError::NoRoute.into_response()
}

/// What a feed answers for an error of a service: a real 404 for what is not there (a feed
/// reader goes by the status), else the error.
fn feed_failed(err: AppError) -> Response {
    let missing = matches!(err, AppError::NotFound(_) | AppError::InvalidInput(_));
    let mut response = match err {
        AppError::InvalidInput(_) => {
            AppError::NotFound(platform::error::Msg::new("no such feed", "没有这个订阅源"))
                .into_response()
        }
        other => other.into_response(),
    };
    if missing {
        *response.status_mut() = StatusCode::NOT_FOUND;
    }
    response
}

fn entries_of(items: impl Iterator<Item = Entry>) -> Vec<Entry> {
    items.take(FEED_ENTRIES).collect()
}

/// `GET /feed.atom` **(webook)**: the latest published articles (Atom 1.0).
#[utoipa::path(
    get,
    path = "/feed.atom",
    responses(
        (status = 200, description = "The feed; `ETag` and `Last-Modified` (its newest entry).",
         content_type = "application/atom+xml", body = String),
        (status = 304, description = "`If-None-Match` or `If-Modified-Since` says it is unchanged."),
    )
)]
async fn latest_feed(State(routes): State<Arc<SiteRoutes>>, request: HeaderMap) -> Response {
    if !routes.open() {
        return closed();
    }
    match routes.articles.published(None, None, FEED_ENTRIES).await {
        Ok(page) => {
            let entries = entries_of(page.items.into_iter().map(Entry::from));
            feed(
                &routes,
                &request,
                &FeedHead {
                    title: "webook",
                    path: "/feed.atom",
                    page: "/",
                },
                &entries,
            )
        }
        Err(err) => feed_failed(err),
    }
}

/// `GET /hot.atom` **(webook)**: the hot list (Atom 1.0), best first.
#[utoipa::path(
    get,
    path = "/hot.atom",
    responses(
        (status = 200, description = "The feed; `ETag` and `Last-Modified`.",
         content_type = "application/atom+xml", body = String),
        (status = 304, description = "Unchanged."),
    )
)]
async fn hot_feed(State(routes): State<Arc<SiteRoutes>>, request: HeaderMap) -> Response {
    if !routes.open() {
        return closed();
    }
    let entries = match routes.ranking.top().await {
        Some(snapshot) => entries_of(snapshot.items.iter().map(Entry::from)),
        None => Vec::new(),
    };
    feed(
        &routes,
        &request,
        &FeedHead {
            title: "webook · hot",
            path: "/hot.atom",
            page: "/",
        },
        &entries,
    )
}

/// `GET /u/{id}/feed.atom` **(webook)**: an author's published articles (Atom 1.0).
#[utoipa::path(
    get,
    path = "/u/{id}/feed.atom",
    params(("id" = i64, Path, description = "The author.")),
    responses(
        (status = 200, description = "The feed.", content_type = "application/atom+xml", body = String),
        (status = 304, description = "Unchanged."),
        (status = 404, description = "No such user (code 404001).", body = platform::openapi::ErrorEnvelope),
    )
)]
async fn author_feed(
    State(routes): State<Arc<SiteRoutes>>,
    Path(id): Path<String>,
    request: HeaderMap,
) -> Response {
    if !routes.open() {
        return closed();
    }
    match author_of(&routes, &id, None, FEED_ENTRIES).await {
        Ok((author, page)) => {
            let entries = entries_of(page.items.into_iter().map(Entry::from));
            let title = format!("{} · webook", author.name);
            let path = format!("/u/{}/feed.atom", author.id);
            let page = format!("/u/{}", author.id);
            feed(
                &routes,
                &request,
                &FeedHead {
                    title: &title,
                    path: &path,
                    page: &page,
                },
                &entries,
            )
        }
        Err(err) => feed_failed(err),
    }
}

/// `GET /t/{name}/feed.atom` **(webook)**: a topic's published articles (Atom 1.0).
#[utoipa::path(
    get,
    path = "/t/{name}/feed.atom",
    params(("name" = String, Path, description = "The topic (any spelling).")),
    responses(
        (status = 200, description = "The feed.", content_type = "application/atom+xml", body = String),
        (status = 304, description = "Unchanged."),
        (status = 404, description = "No such topic (code 404001).", body = platform::openapi::ErrorEnvelope),
    )
)]
async fn topic_feed(
    State(routes): State<Arc<SiteRoutes>>,
    Path(name): Path<String>,
    request: HeaderMap,
) -> Response {
    if !routes.open() {
        return closed();
    }
    match routes
        .tags
        .topic(&name, TopicOrder::Newest, None, FEED_ENTRIES)
        .await
    {
        Ok(topic) => {
            let entries = entries_of(topic.articles.items.into_iter().map(Entry::from));
            let title = format!("#{} · webook", topic.name);
            let page = render::topic_path(&topic.key);
            let path = format!("{page}/feed.atom");
            feed(
                &routes,
                &request,
                &FeedHead {
                    title: &title,
                    path: &path,
                    page: &page,
                },
                &entries,
            )
        }
        Err(err) => feed_failed(err),
    }
}

/// `GET /robots.txt` **(webook)**: crawlers may read the public pages, not the API's private
/// routes; names the sitemap.
#[utoipa::path(
    get,
    path = "/robots.txt",
    responses((status = 200, description = "The rules.", content_type = "text/plain", body = String))
)]
async fn robots(State(routes): State<Arc<SiteRoutes>>, request: HeaderMap) -> Response {
    let body = if routes.open() {
        format!(
            "User-agent: *\nAllow: /\nDisallow: /admin/\nDisallow: /pay/\nDisallow: /oauth2/\n\
             Disallow: /users/\nDisallow: /search\n\nSitemap: {}/sitemap.xml\n",
            origin(&routes, &request)
        )
    } else {
        "User-agent: *\nDisallow: /\n".to_owned()
    };
    send(
        &request,
        "text/plain; charset=utf-8",
        Bytes::from(body),
        None,
    )
}

/// `GET /sitemap.xml` **(webook)**: the sitemap index — a page per 10 000 article ids and per
/// 10 000 author ids that hold any, and the topics — each with its last change.
#[utoipa::path(
    get,
    path = "/sitemap.xml",
    responses(
        (status = 200, description = "The index (sitemaps.org 0.9), recomputed at most every \
         5 minutes.", content_type = "application/xml", body = String),
        (status = 304, description = "Unchanged."),
    )
)]
async fn sitemap_index(State(routes): State<Arc<SiteRoutes>>, request: HeaderMap) -> Response {
    if !routes.open() {
        return closed();
    }
    let read = async || index_entries(&routes.store).await;
    match routes.sitemaps.entries("/sitemap.xml", read).await {
        Ok((entries, _)) => {
            let body = render::sitemap_index(&origin(&routes, &request), &entries);
            send(&request, XML, Bytes::from(body), None)
        }
        Err(err) => AppError::from(err).into_response(),
    }
}

fn page_number(n: &str) -> Option<i64> {
    n.parse::<i64>()
        .ok()
        .filter(|n| (0..=i64::MAX / SITEMAP_PAGE - 1).contains(n))
}

/// Sitemap `n` under `sitemaps` (its path without the number): the ids `read` lists, each at
/// `prefix` and its id; 404 for a page number out of range or while visitors may not read.
/// For `articles`, a kept sitemap leaves out what was unpublished since it was read.
async fn id_sitemap<F>(
    routes: &SiteRoutes,
    sitemaps: &str,
    n: &str,
    request: &HeaderMap,
    (prefix, articles): (&str, bool),
    read: F,
) -> Response
where
    F: AsyncFnOnce(&SiteStore, i64) -> sqlx::Result<Vec<super::store::Listed<i64>>>,
{
    let Some(n) = page_number(n).filter(|_| routes.open()) else {
        return closed();
    };
    let rows = async || {
        let rows = read(&routes.store, n).await?;
        Ok(rows
            .into_iter()
            .map(|row| (format!("{prefix}{}", row.key), row.lastmod))
            .collect())
    };
    let kept = routes
        .sitemaps
        .entries(&format!("{sitemaps}/{n}"), rows)
        .await;
    let urls = match kept {
        Ok((urls, read_at)) if articles => {
            match routes
                .store
                .unpublished_since(n, read_at.saturating_sub(CLOCK_SKEW_MS))
                .await
            {
                Ok(gone) if gone.is_empty() => urls,
                Ok(gone) => {
                    let gone: std::collections::HashSet<String> =
                        gone.iter().map(|id| format!("{prefix}{id}")).collect();
                    Arc::new(
                        urls.iter()
                            .filter(|(path, _)| !gone.contains(path))
                            .cloned()
                            .collect(),
                    )
                }
                Err(err) => return AppError::from(err).into_response(),
            }
        }
        Ok((urls, _)) => urls,
        Err(err) => return AppError::from(err).into_response(),
    };
    send_sitemap(routes, request, &urls)
}

/// A sitemap of `urls` (paths of this site, with their last change).
fn send_sitemap(routes: &SiteRoutes, request: &HeaderMap, urls: &[(String, i64)]) -> Response {
    send(
        request,
        XML,
        Bytes::from(render::sitemap(&origin(routes, request), urls)),
        None,
    )
}

/// `GET /sitemaps/articles/{n}` **(webook)**: the published articles with ids
/// `n × 10 000 ..< (n + 1) × 10 000`, each with its last publish.
#[utoipa::path(
    get,
    path = "/sitemaps/articles/{n}",
    params(("n" = i64, Path, description = "The page.")),
    responses(
        (status = 200, description = "A sitemap.", content_type = "application/xml", body = String),
        (status = 304, description = "Unchanged."),
        (status = 404, description = "Not a page (code 404001).", body = platform::openapi::ErrorEnvelope),
    )
)]
async fn sitemap_articles(
    State(routes): State<Arc<SiteRoutes>>,
    Path(n): Path<String>,
    request: HeaderMap,
) -> Response {
    id_sitemap(
        &routes,
        "/sitemaps/articles",
        &n,
        &request,
        ("/a/", true),
        async |store, n| store.articles_on(n).await,
    )
    .await
}

/// `GET /sitemaps/authors/{n}` **(webook)**: the authors of published articles with ids
/// `n × 10 000 ..< (n + 1) × 10 000`, each with their latest publish.
#[utoipa::path(
    get,
    path = "/sitemaps/authors/{n}",
    params(("n" = i64, Path, description = "The page.")),
    responses(
        (status = 200, description = "A sitemap.", content_type = "application/xml", body = String),
        (status = 304, description = "Unchanged."),
        (status = 404, description = "Not a page (code 404001).", body = platform::openapi::ErrorEnvelope),
    )
)]
async fn sitemap_authors(
    State(routes): State<Arc<SiteRoutes>>,
    Path(n): Path<String>,
    request: HeaderMap,
) -> Response {
    id_sitemap(
        &routes,
        "/sitemaps/authors",
        &n,
        &request,
        ("/u/", false),
        async |store, n| store.authors_on(n).await,
    )
    .await
}

/// `GET /sitemaps/topics` **(webook)**: the topics carried by published articles (up to
/// 50 000, the most recently updated first).
#[utoipa::path(
    get,
    path = "/sitemaps/topics",
    responses(
        (status = 200, description = "A sitemap.", content_type = "application/xml", body = String),
        (status = 304, description = "Unchanged."),
    )
)]
async fn sitemap_topics(State(routes): State<Arc<SiteRoutes>>, request: HeaderMap) -> Response {
    if !routes.open() {
        return closed();
    }
    let rows = async || {
        let rows = routes.store.topics().await?;
        Ok(rows
            .into_iter()
            .map(|row| (render::topic_path(&row.key), row.lastmod))
            .collect())
    };
    match routes.sitemaps.entries("/sitemaps/topics", rows).await {
        Ok((urls, _)) => send_sitemap(&routes, &request, &urls),
        Err(err) => AppError::from(err).into_response(),
    }
}

/// The site routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    article,
    author,
    topic,
    latest_feed,
    hot_feed,
    author_feed,
    topic_feed,
    robots,
    sitemap_index,
    sitemap_articles,
    sitemap_authors,
    sitemap_topics
))]
pub struct SiteApi;
