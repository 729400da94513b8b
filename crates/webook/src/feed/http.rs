//! `/follow/*` and `/feed` (API.md → Follows and the feed): thin handlers over
//! [`FollowService`] and [`FeedService`]. Every route needs a logged-in caller; following
//! honours `Idempotency-Key`.

use platform::caller::{AuthUser, Writer};
use platform::idempotency::Idempotency;
use std::sync::Arc;

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use serde::{Deserialize, Serialize};

use crate::feed::{
    follow_store::Side,
    model::{page_limit, FeedItem, FollowCounts, FollowUser, Page},
    FeedService, FollowService,
};
use platform::error::{positive_id, ApiJson, ApiQuery, ApiResult, AppError, Reply};

/// What the follow and feed handlers reach.
pub struct FeedRoutes {
    /// Follow relations.
    pub follows: FollowService,
    /// Feeds.
    pub feed: FeedService,
}

/// The routes.
pub fn router(routes: FeedRoutes, idempotency: Arc<Idempotency>) -> Router {
    let idempotent =
        axum::middleware::from_fn_with_state(idempotency, platform::idempotency::layer);
    Router::new()
        .route("/follow/follow", post(follow).route_layer(idempotent))
        .route("/follow/cancel", post(cancel))
        .route("/follow/followees", get(followees))
        .route("/follow/followers", get(followers))
        .route("/follow/static", get(counts))
        .route("/follow/check", get(check))
        .route("/feed", get(feed))
        .with_state(Arc::new(routes))
}

#[derive(Deserialize)]
struct FollowRequest {
    followee: i64,
}

async fn follow(
    State(state): State<Arc<FeedRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<FollowRequest>,
) -> ApiResult<()> {
    set_follow(&state, user.uid, request, true).await
}

async fn cancel(
    State(state): State<Arc<FeedRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<FollowRequest>,
) -> ApiResult<()> {
    set_follow(&state, user.uid, request, false).await
}

async fn set_follow(
    state: &FeedRoutes,
    uid: i64,
    request: FollowRequest,
    on: bool,
) -> ApiResult<()> {
    state.follows.set_follow(uid, request.followee, on).await?;
    Ok(Reply(()))
}

#[derive(Deserialize)]
struct ListQuery {
    uid: Option<i64>,
    cursor: Option<String>,
    limit: Option<i64>,
}

/// `uid` when given (and positive), else the caller.
fn subject(uid: Option<i64>, caller: i64) -> Result<i64, AppError> {
    uid.map_or(Ok(caller), |uid| positive_id("uid", uid))
}

async fn list(
    state: &FeedRoutes,
    caller: i64,
    query: ListQuery,
    side: Side,
) -> ApiResult<Page<FollowUser>> {
    let uid = subject(query.uid, caller)?;
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        state
            .follows
            .list(caller, uid, side, query.cursor.as_deref(), limit)
            .await?,
    ))
}

async fn followees(
    State(state): State<Arc<FeedRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Page<FollowUser>> {
    list(&state, user.uid, query, Side::Followees).await
}

async fn followers(
    State(state): State<Arc<FeedRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Page<FollowUser>> {
    list(&state, user.uid, query, Side::Followers).await
}

#[derive(Deserialize)]
struct UidQuery {
    uid: Option<i64>,
}

async fn counts(
    State(state): State<Arc<FeedRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<UidQuery>,
) -> ApiResult<FollowCounts> {
    let uid = subject(query.uid, user.uid)?;
    Ok(Reply(state.follows.counts(uid).await?))
}

#[derive(Deserialize)]
struct CheckQuery {
    followee: i64,
}

#[derive(Serialize)]
struct Followed {
    followed: bool,
}

async fn check(
    State(state): State<Arc<FeedRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<CheckQuery>,
) -> ApiResult<Followed> {
    Ok(Reply(Followed {
        followed: state.follows.is_following(user.uid, query.followee).await?,
    }))
}

#[derive(Deserialize)]
struct FeedQuery {
    cursor: Option<String>,
    limit: Option<i64>,
}

async fn feed(
    State(state): State<Arc<FeedRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<FeedQuery>,
) -> ApiResult<Page<FeedItem>> {
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        state
            .feed
            .page(user.uid, query.cursor.as_deref(), limit)
            .await?,
    ))
}
