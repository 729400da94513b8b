//! `/follow/*` and `/feed` (API.md → Follows and the feed): thin handlers over
//! [`FollowService`] and [`FeedService`]. A user's counts and follower and followee lists are
//! open to visitors without an account (`anonymous_reading`; they name the user); the rest
//! needs a logged-in caller. Following honours `Idempotency-Key`.

use platform::caller::{AuthUser, Reader, Writer};
use platform::idempotency::Idempotency;
use std::sync::Arc;

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::feed::{
    follow_store::Side,
    model::{page_limit, FeedItem, FollowCounts, FollowUser, Page},
    FeedService, FollowService,
};
use platform::{
    error::{positive_id, ApiJson, ApiQuery, ApiResult, AppError, Reply},
    openapi::{Envelope, Null},
};

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
        .route("/topics/follow", post(follow_topic))
        .route("/topics/followed", get(followed_topics))
        .with_state(Arc::new(routes))
}

/// Whom to follow or stop following.
#[derive(Deserialize, ToSchema)]
struct FollowRequest {
    /// The user.
    followee: i64,
}

/// Follows a user; idempotent.
#[utoipa::path(
    post,
    path = "/follow/follow",
    security(("access_token" = [])),
    params(platform::idempotency::IdempotencyKey),
    request_body = FollowRequest,
    responses((status = 200, description = "Following. Code 4: yourself or a non-positive id; \
               404001: no such user.", body = Envelope<Null>))
)]
async fn follow(
    State(state): State<Arc<FeedRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<FollowRequest>,
) -> ApiResult<()> {
    set_follow(&state, user.uid, request, true).await
}

/// Stops following a user; idempotent (cancelling what was never followed is `{code: 0}`).
#[utoipa::path(
    post,
    path = "/follow/cancel",
    security(("access_token" = [])),
    request_body = FollowRequest,
    responses((status = 200, description = "Not following.", body = Envelope<Null>))
)]
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

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// Whose list (default: the caller; required for a visitor without an account).
    uid: Option<i64>,
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// `uid` when given (and positive), else the caller.
fn subject(uid: Option<i64>, caller: i64) -> Result<i64, AppError> {
    uid.map_or(Ok(caller), |uid| positive_id("uid", uid))
}

async fn list(
    state: &FeedRoutes,
    caller: &platform::caller::Caller,
    query: ListQuery,
    side: Side,
) -> ApiResult<Page<FollowUser>> {
    // A visitor names the user, and follows nobody (no `followed` is true for user 0).
    let (uid, asker) = match caller.uid() {
        Some(me) => (subject(query.uid, me)?, me),
        None => (positive_id("uid", query.uid.unwrap_or(0))?, 0),
    };
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        state
            .follows
            .list(asker, uid, side, query.cursor.as_deref(), limit)
            .await?,
    ))
}

/// Whom a user follows, newest follow first.
#[utoipa::path(
    get,
    path = "/follow/followees",
    security((), ("access_token" = [])),
    params(ListQuery),
    responses((status = 200, description = "A page; `followed`: whether the caller follows \
               that user.", body = Envelope<Page<FollowUser>>))
)]
async fn followees(
    State(state): State<Arc<FeedRoutes>>,
    Reader(caller): Reader,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Page<FollowUser>> {
    list(&state, &caller, query, Side::Followees).await
}

/// Who follows a user, newest follow first.
#[utoipa::path(
    get,
    path = "/follow/followers",
    security((), ("access_token" = [])),
    params(ListQuery),
    responses((status = 200, description = "A page; `followed`: whether the caller follows \
               that user.", body = Envelope<Page<FollowUser>>))
)]
async fn followers(
    State(state): State<Arc<FeedRoutes>>,
    Reader(caller): Reader,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Page<FollowUser>> {
    list(&state, &caller, query, Side::Followers).await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct UidQuery {
    /// Whose counts (default: the caller).
    uid: Option<i64>,
}

/// A user's follower and followee counts, exact. A visitor without an account (setting
/// `anonymous_reading`) names the user: `uid` is required then (code 4 without it).
#[utoipa::path(
    get,
    path = "/follow/static",
    security((), ("access_token" = [])),
    params(UidQuery),
    responses((status = 200, description = "The counts.", body = Envelope<FollowCounts>))
)]
async fn counts(
    State(state): State<Arc<FeedRoutes>>,
    Reader(caller): Reader,
    ApiQuery(query): ApiQuery<UidQuery>,
) -> ApiResult<FollowCounts> {
    let uid = match caller.uid() {
        Some(me) => subject(query.uid, me)?,
        None => positive_id("uid", query.uid.unwrap_or(0))?,
    };
    Ok(Reply(state.follows.counts(uid).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct CheckQuery {
    /// The user.
    followee: i64,
}

/// Whether the caller follows a user.
#[derive(Serialize, ToSchema)]
struct Followed {
    followed: bool,
}

/// Whether the caller follows a user.
#[utoipa::path(
    get,
    path = "/follow/check",
    security(("access_token" = [])),
    params(CheckQuery),
    responses((status = 200, description = "`followed`.", body = Envelope<Followed>))
)]
async fn check(
    State(state): State<Arc<FeedRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<CheckQuery>,
) -> ApiResult<Followed> {
    Ok(Reply(Followed {
        followed: state.follows.is_following(user.uid, query.followee).await?,
    }))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct FeedQuery {
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// A topic to follow or stop following.
#[derive(Deserialize, ToSchema)]
struct TopicFollowRequest {
    /// Any spelling of the topic's name (`Rust`, `rust`).
    name: String,
    /// `true` to follow, `false` to stop.
    follow: bool,
}

/// `POST /topics/follow` **(webook)**: follows a topic — its new articles, by any author, come
/// into the caller's feed — or stops following it; idempotent.
#[utoipa::path(
    post,
    path = "/topics/follow",
    security(("access_token" = [])),
    request_body = TopicFollowRequest,
    responses((status = 200, description = "Done. Code 4: a name no tag could have, or a 201st \
               topic; 404001: no tag has that name (following only).", body = Envelope<Null>))
)]
async fn follow_topic(
    State(state): State<Arc<FeedRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<TopicFollowRequest>,
) -> ApiResult<()> {
    state
        .feed
        .follow_topic(user.uid, &request.name, request.follow)
        .await?;
    Ok(Reply(()))
}

/// `GET /topics/followed` **(webook)**: the topics the caller follows (normalised names).
#[utoipa::path(
    get,
    path = "/topics/followed",
    security(("access_token" = [])),
    responses((status = 200, description = "The topics, by name.", body = Envelope<Vec<String>>))
)]
async fn followed_topics(
    State(state): State<Arc<FeedRoutes>>,
    user: AuthUser,
) -> ApiResult<Vec<String>> {
    Ok(Reply(state.feed.followed_topics(user.uid).await?))
}

/// The caller's feed, newest first by (`ctime`, `id`).
#[utoipa::path(
    get,
    path = "/feed",
    security(("access_token" = [])),
    params(FeedQuery),
    responses((status = 200, description = "A page: empty only at the end.",
               body = Envelope<Page<FeedItem>>))
)]
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

/// The follow and feed routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    follow,
    cancel,
    followees,
    followers,
    counts,
    check,
    feed,
    follow_topic,
    followed_topics
))]
pub struct FeedApi;
