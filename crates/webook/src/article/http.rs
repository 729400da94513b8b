//! `/articles/*` routes (API.md → Articles): thin handlers over [`ArticleService`]. Every route
//! needs a logged-in caller, but the reader's (`GET /articles/pub`, `GET /articles/pub/{id}`)
//! while `anonymous_reading` lets visitors read.

use axum::{
    extract::{Request, State},
    http::header,
    response::Response,
    routing::{get, post},
    Router,
};
use platform::caller::{AuthUser, Reader, Writer};
use platform::idempotency::Idempotency;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use std::sync::Arc;

use crate::{
    article::{
        model::{Article, ListItem, PublishedItem},
        service::existing_id,
        visitors::{self, Visitors},
        ArticleService,
    },
    interactive::{model::UserFlags, InteractiveService},
};
use platform::{
    client_ip::{ClientIp, KnowsProxies, TrustedProxies},
    error::{positive_id, ApiJson, ApiPath, ApiQuery, ApiResult, AppError, Msg, Reply},
    http::accepts_gzip,
    openapi::{Envelope, Null},
    page::{page_limit, Page},
};

/// What the `/articles` handlers reach.
pub struct ArticleRoutes {
    /// Articles.
    pub articles: ArticleService,
    /// Reads, likes and collects of the reader view.
    pub interactive: InteractiveService,
    /// Which reads of visitors without an account count.
    pub visitors: Visitors,
    /// The proxies whose `X-Forwarded-For` is believed (a visitor's address).
    pub trusted_proxies: TrustedProxies,
}

impl KnowsProxies for ArticleRoutes {
    fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trusted_proxies
    }
}

/// The `/articles` routes; saving and publishing honour `Idempotency-Key`.
pub fn router(routes: ArticleRoutes, idempotency: Arc<Idempotency>) -> Router {
    let idempotent =
        axum::middleware::from_fn_with_state(idempotency, platform::idempotency::layer);
    Router::new()
        .route("/articles/edit", post(edit).route_layer(idempotent.clone()))
        .route("/articles/publish", post(publish).route_layer(idempotent))
        .route("/articles/withdraw", post(withdraw))
        .route("/articles/list", post(list))
        .route("/articles/detail/{id}", get(detail))
        .route("/articles/pub", get(published))
        .route("/articles/pub/{id}", get(reader_view))
        .route("/articles/pub/like", post(like))
        .route("/articles/pub/collect", post(collect))
        .with_state(Arc::new(routes))
        .layer(platform::http::course_answers())
}

/// The `biz` of articles in the interactive tables.
pub const BIZ: crate::biz::Biz = crate::biz::Biz::Article;

/// A draft to save or publish.
#[derive(Deserialize, ToSchema)]
#[schema(as = ArticleEdit)]
struct EditRequest {
    /// The article; absent or 0: a new one.
    id: Option<i64>,
    /// At most 256 characters; not empty to publish.
    title: String,
    /// HTML, sanitised on save (at most 512 KiB, nested at most 256 deep, 50 000 elements).
    content: String,
}

/// Saves the caller's draft (a new article without `id`).
#[utoipa::path(
    post,
    path = "/articles/edit",
    security(("access_token" = [])),
    params(platform::idempotency::IdempotencyKey),
    request_body = EditRequest,
    responses((status = 200, description = "`data`: the article's id. 403002 when the id is \
               someone else's, 404001 when there is no such article.", body = Envelope<i64>))
)]
async fn edit(
    State(state): State<Arc<ArticleRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<EditRequest>,
) -> ApiResult<i64> {
    let id = existing_id(request.id)?;
    Ok(Reply(
        state
            .articles
            .save_draft(user.uid, id, &request.title, &request.content)
            .await?,
    ))
}

/// Saves and publishes (a new article without `id`).
#[utoipa::path(
    post,
    path = "/articles/publish",
    security(("access_token" = [])),
    params(platform::idempotency::IdempotencyKey),
    request_body = EditRequest,
    responses((status = 200, description = "`data`: the article's id.", body = Envelope<i64>))
)]
async fn publish(
    State(state): State<Arc<ArticleRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<EditRequest>,
) -> ApiResult<i64> {
    let id = existing_id(request.id)?;
    Ok(Reply(
        state
            .articles
            .publish(user.uid, id, &request.title, &request.content)
            .await?,
    ))
}

/// The article to withdraw.
#[derive(Deserialize, ToSchema)]
struct WithdrawRequest {
    /// The article.
    id: i64,
}

/// Withdraws an article: status 3 on both copies; readers get 404001 afterwards.
#[utoipa::path(
    post,
    path = "/articles/withdraw",
    security(("access_token" = [])),
    request_body = WithdrawRequest,
    responses((status = 200, description = "Withdrawn.", body = Envelope<Null>))
)]
async fn withdraw(
    State(state): State<Arc<ArticleRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<WithdrawRequest>,
) -> ApiResult<()> {
    let id = existing_id(Some(request.id))?
        .ok_or_else(|| AppError::InvalidInput(Msg::field("id", "required", "不能为空")))?;
    state.articles.withdraw(user.uid, id).await?;
    Ok(Reply(()))
}

/// A page of the caller's articles.
#[derive(Deserialize, ToSchema)]
#[schema(as = ArticleListRequest)]
struct ListRequest {
    /// 0…10000 (default 0).
    #[serde(default)]
    offset: i64,
    /// 1…100.
    limit: i64,
}

/// The caller's own articles, newest update first.
#[utoipa::path(
    post,
    path = "/articles/list",
    security(("access_token" = [])),
    request_body = ListRequest,
    responses((status = 200, description = "The page.", body = Envelope<Vec<ListItem>>))
)]
async fn list(
    State(state): State<Arc<ArticleRoutes>>,
    user: AuthUser,
    ApiJson(request): ApiJson<ListRequest>,
) -> ApiResult<Vec<ListItem>> {
    Ok(Reply(
        state
            .articles
            .list(user.uid, request.offset, request.limit)
            .await?,
    ))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PublishedQuery {
    /// Only this author's articles.
    author: Option<i64>,
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// `GET /articles/pub?author&cursor&limit` **(webook)**: the latest published articles, or one
/// author's.
#[utoipa::path(
    get,
    path = "/articles/pub",
    security((), ("access_token" = [])),
    params(PublishedQuery),
    responses((status = 200, description = "Newest first publication first; withdrawn \
               articles are not listed.", body = Envelope<Page<PublishedItem>>))
)]
async fn published(
    State(state): State<Arc<ArticleRoutes>>,
    _reader: Reader,
    ApiQuery(query): ApiQuery<PublishedQuery>,
) -> ApiResult<Page<PublishedItem>> {
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        state
            .articles
            .published(query.author, query.cursor.as_deref(), limit)
            .await?,
    ))
}

/// The caller's own draft.
#[utoipa::path(
    get,
    path = "/articles/detail/{id}",
    security(("access_token" = [])),
    params(("id" = i64, Path, description = "The article.")),
    responses((status = 200, description = "The author's copy; 403002 for another's.",
               body = Envelope<Article>))
)]
async fn detail(
    State(state): State<Arc<ArticleRoutes>>,
    user: AuthUser,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<Article> {
    let id = positive(id)?;
    Ok(Reply(state.articles.author_detail(user.uid, id).await?))
}

/// The reader view: the published copy with its counters and the caller's flags, answered from
/// the page rendered for that copy ([`crate::article::reader_page`]; gzipped there when the
/// client accepts it). A signed-in reader's every view counts a read (the course's rule); a
/// visitor's, when `anonymous_reading` lets them in, once per window ([`Visitors`]), a
/// crawler's never.
#[utoipa::path(
    get,
    path = "/articles/pub/{id}",
    summary = "The reader view of a published article; counts one read.",
    description = "A visitor without an account (setting `anonymous_reading`) gets the \
                   same view with no like or collect of their own; their reads count once per \
                   `anonymous_read_window` (cookie `webook_visitor`, set on the answer when \
                   absent), a known crawler's never.",
    security((), ("access_token" = [])),
    params(("id" = i64, Path, description = "The article.")),
    responses((status = 200, description = "404001 when it is not published.",
               body = Envelope<ReaderView>))
)]
async fn reader_view(
    State(state): State<Arc<ArticleRoutes>>,
    Reader(caller): Reader,
    ClientIp(client): ClientIp,
    ApiPath(id): ApiPath<i64>,
    // The request itself rather than a `HeaderMap`, which the extractor would copy.
    request: Request,
) -> Result<Response, AppError> {
    let id = positive(id)?;
    let uid = caller.uid();
    // The three look-ups run concurrently, and in cluster mode their Redis probes go as one
    // round trip (`platform::redis_probe`). A missing article answers 404 all the same; its
    // counters and flags were then looked up for nothing.
    let flags = async {
        match uid {
            Some(uid) => state.interactive.user_flags(uid, BIZ, id).await,
            None => Ok(UserFlags::default()),
        }
    };
    let (page, counts, flags) = platform::redis_probe::together(async {
        tokio::try_join!(
            state.articles.reader_page(id),
            state.interactive.counts(BIZ, id),
            flags,
        )
    })
    .await?;
    // Counted only once the answer is assembled: a read answered with an error is no read.
    let headers = request.headers();
    let mut keep_visitor = None;
    match uid {
        Some(uid) => state.interactive.record_read(BIZ, id, uid).await,
        None => {
            let (visitor, new) = visitors::identify(headers, client);
            if new {
                keep_visitor = visitors::set_cookie(&visitor);
            }
            let agent = platform::caller::user_agent(headers);
            if !visitors::is_crawler(agent) && state.visitors.counts(&visitor, id).await {
                state.interactive.record_read(BIZ, id, ANONYMOUS).await;
            }
        }
    }
    let mut response = page.respond(&counts, &flags, accepts_gzip(headers));
    if let Some(cookie) = keep_visitor {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

/// The reader a visitor's read is recorded as (no user has id 0).
const ANONYMOUS: i64 = 0;

/// A like or an unlike.
#[derive(Deserialize, ToSchema)]
struct LikeRequest {
    /// The published article.
    id: i64,
    /// `true` to like, `false` to unlike.
    like: bool,
}

/// Likes or unlikes a published article; idempotent.
#[utoipa::path(
    post,
    path = "/articles/pub/like",
    security(("access_token" = [])),
    request_body = LikeRequest,
    responses((status = 200, description = "Done; 404001 when it is not published.",
               body = Envelope<Null>))
)]
async fn like(
    State(state): State<Arc<ArticleRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<LikeRequest>,
) -> ApiResult<()> {
    let id = positive(request.id)?;
    // Only published articles can be liked; 404001 otherwise.
    state.articles.reader_view(id).await?;
    state
        .interactive
        .like(user.uid, BIZ, id, request.like)
        .await?;
    Ok(Reply(()))
}

/// A collect or an uncollect.
#[derive(Deserialize, ToSchema)]
struct CollectRequest {
    /// The published article.
    id: i64,
    /// The caller's collection; 0 (the default) is the default collection.
    #[serde(default)]
    cid: i64,
    /// `true` (the default) to add, `false` to remove.
    #[serde(default = "collect_by_default")]
    collect: bool,
}

fn collect_by_default() -> bool {
    true
}

/// Adds a published article to the caller's collection, or removes it; idempotent.
#[utoipa::path(
    post,
    path = "/articles/pub/collect",
    security(("access_token" = [])),
    request_body = CollectRequest,
    responses((status = 200, description = "Done; 404001 when it is not published.",
               body = Envelope<Null>))
)]
async fn collect(
    State(state): State<Arc<ArticleRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<CollectRequest>,
) -> ApiResult<()> {
    let id = positive(request.id)?;
    state.articles.reader_view(id).await?;
    state
        .interactive
        .collect(user.uid, BIZ, id, request.cid, request.collect)
        .await?;
    Ok(Reply(()))
}

fn positive(id: i64) -> Result<i64, AppError> {
    positive_id("id", id)
}

/// The reader view: the published copy with its counts and the caller's flags.
// Describes the answer `crate::article::reader_page` writes in two parts.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
#[allow(dead_code)] // describes the prerendered answer; never built
struct ReaderView {
    id: i64,
    title: String,
    /// Sanitised HTML.
    content: String,
    /// The first 128 characters of the text, HTML-escaped.
    #[schema(rename = "abstract")]
    abstract_text: String,
    author: crate::user::Person,
    status: crate::article::ArticleStatus,
    /// First publication (ms).
    ctime: i64,
    /// Last publish (ms).
    utime: i64,
    /// Reads (applied in batches: may lag by moments).
    read_cnt: i64,
    like_cnt: i64,
    collect_cnt: i64,
    /// Comments not deleted, exact.
    comment_cnt: i64,
    /// Whether the caller likes it.
    liked: bool,
    /// Whether the caller collected it.
    collected: bool,
}

/// The `/articles` routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    edit,
    publish,
    withdraw,
    list,
    published,
    detail,
    reader_view,
    like,
    collect
))]
pub struct ArticlesApi;
