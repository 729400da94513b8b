//! `/articles/*` routes (API.md → Articles): thin handlers over [`ArticleService`]. Every route
//! needs a logged-in caller.

use axum::{
    extract::{Request, State},
    response::Response,
    routing::{get, post},
    Router,
};
use platform::caller::{AuthUser, Writer};
use platform::idempotency::Idempotency;
use serde::Deserialize;

use std::sync::Arc;

use crate::{
    article::{
        model::{Article, ListItem, PublishedItem},
        service::existing_id,
        ArticleService,
    },
    interactive::InteractiveService,
};
use platform::{
    error::{positive_id, ApiJson, ApiPath, ApiQuery, ApiResult, AppError, Msg, Reply},
    http::accepts_gzip,
    page::{page_limit, Page},
};

/// What the `/articles` handlers reach.
pub struct ArticleRoutes {
    /// Articles.
    pub articles: ArticleService,
    /// Reads, likes and collects of the reader view.
    pub interactive: InteractiveService,
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

#[derive(Deserialize)]
struct EditRequest {
    id: Option<i64>,
    title: String,
    content: String,
}

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

#[derive(Deserialize)]
struct WithdrawRequest {
    id: i64,
}

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

#[derive(Deserialize)]
struct ListRequest {
    #[serde(default)]
    offset: i64,
    limit: i64,
}

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

#[derive(Deserialize)]
struct PublishedQuery {
    author: Option<i64>,
    cursor: Option<String>,
    limit: Option<i64>,
}

/// `GET /articles/pub?author&cursor&limit` **(webook)**: the latest published articles, or one
/// author's.
async fn published(
    State(state): State<Arc<ArticleRoutes>>,
    _user: AuthUser,
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
/// client accepts it).
async fn reader_view(
    State(state): State<Arc<ArticleRoutes>>,
    user: AuthUser,
    ApiPath(id): ApiPath<i64>,
    // The request itself rather than a `HeaderMap`, which the extractor would copy.
    request: Request,
) -> Result<Response, AppError> {
    let id = positive(id)?;
    // The three look-ups run concurrently, and in cluster mode their Redis probes go as one
    // round trip (`platform::redis_probe`). A missing article answers 404 all the same; its
    // counters and flags were then looked up for nothing.
    let (page, counts, flags) = platform::redis_probe::together(async {
        tokio::try_join!(
            state.articles.reader_page(id),
            state.interactive.counts(BIZ, id),
            state.interactive.user_flags(user.uid, BIZ, id),
        )
    })
    .await?;
    // Counted only once the answer is assembled: a read answered with an error is no read.
    state.interactive.record_read(BIZ, id, user.uid).await;
    Ok(page.respond(&counts, &flags, accepts_gzip(request.headers())))
}

#[derive(Deserialize)]
struct LikeRequest {
    id: i64,
    like: bool,
}

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

#[derive(Deserialize)]
struct CollectRequest {
    id: i64,
    #[serde(default)]
    cid: i64,
    #[serde(default = "collect_by_default")]
    collect: bool,
}

fn collect_by_default() -> bool {
    true
}

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
