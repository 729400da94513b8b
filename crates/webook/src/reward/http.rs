//! The reward routes: `POST /articles/pub/reward` (honours `Idempotency-Key`), `POST
//! /reward/detail` (long poll), `GET /rewards`.
//!
//! Creating a reward creates an order at the payment provider, so it is a write (the per-user
//! `write_rate_limit`) under a tighter limit of its own (`reward_rate_limit` per user), both
//! checked before anything is created: a flood is answered 429001 and reaches no provider.

use platform::caller::{AuthUser, Writer};
use platform::idempotency::Idempotency;
use std::sync::Arc;

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::{
    model::{RewardStatus, Role},
    service::{RewardCreated, RewardService, RewardView},
};
use platform::{
    error::{positive_id, ApiJson, ApiQuery, ApiResult, AppError, Msg, Reply},
    openapi::Envelope,
    page::{page_limit, Page},
    rate_limit::RateLimiter,
};

/// What the handlers reach.
pub struct RewardRoutes {
    /// Rewards.
    pub rewards: RewardService,
    /// Rewards created per user (`reward_rate_limit`); `None` when turned off.
    pub limiter: Option<RateLimiter>,
}

/// The routes.
pub fn router(routes: RewardRoutes, idempotency: Arc<Idempotency>) -> Router {
    let idempotent =
        axum::middleware::from_fn_with_state(idempotency, platform::idempotency::layer);
    Router::new()
        .route("/articles/pub/reward", post(create).route_layer(idempotent))
        .route("/reward/detail", post(detail))
        .route("/rewards", get(list))
        .with_state(Arc::new(routes))
        .layer(platform::http::course_answers())
}

/// A reward of an article.
#[derive(Deserialize, ToSchema)]
#[schema(as = NewReward)]
struct CreateRequest {
    /// The published article (not the caller's own).
    id: i64,
    /// Fen, 1–500 000.
    amt: i64,
}

/// Rewards an article: creates the reward and its payment order at the provider.
#[utoipa::path(
    post,
    path = "/articles/pub/reward",
    security(("access_token" = [])),
    params(platform::idempotency::IdempotencyKey),
    request_body = CreateRequest,
    responses((status = 200, description = "The payment's QR-code URL and the reward's id; \
               asking again for the same article and amount while that order can be paid \
               answers it again. Code 4: the caller's own article, not published, an amount \
               out of range; 429001 beyond `reward_rate_limit`; code 5: no provider.",
               body = Envelope<RewardCreated>))
)]
async fn create(
    State(routes): State<Arc<RewardRoutes>>,
    Writer(user): Writer,
    ApiJson(request): ApiJson<CreateRequest>,
) -> ApiResult<RewardCreated> {
    let id = positive_id("id", request.id)?;
    if let Some(limiter) = &routes.limiter {
        limiter.check(&user.uid.to_string()).await?;
    }
    Ok(Reply(
        routes.rewards.create(user.uid, id, request.amt).await?,
    ))
}

/// The reward to ask about.
#[derive(Deserialize, ToSchema)]
struct DetailRequest {
    /// The reward.
    rid: i64,
}

/// A reward's status, long-polled: waits up to `reward_long_poll` (10 s) for it to leave `Init`.
#[utoipa::path(
    post,
    path = "/reward/detail",
    security(("access_token" = [])),
    request_body = DetailRequest,
    responses((status = 200, description = "The status. Only the payer may ask (others: \
               404001, as for a reward that does not exist).", body = Envelope<RewardStatus>))
)]
async fn detail(
    State(routes): State<Arc<RewardRoutes>>,
    user: AuthUser,
    ApiJson(request): ApiJson<DetailRequest>,
) -> ApiResult<RewardStatus> {
    let rid = positive_id("rid", request.rid)?;
    Ok(Reply(routes.rewards.status(user.uid, rid).await?))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// `sent` (the default) or `received` (paid rewards only).
    #[param(pattern = "^(sent|received)$")]
    role: Option<String>,
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// The rewards the caller sent or received, newest first.
#[utoipa::path(
    get,
    path = "/rewards",
    security(("access_token" = [])),
    params(ListQuery),
    responses((status = 200, description = "A page.", body = Envelope<Page<RewardView>>))
)]
async fn list(
    State(routes): State<Arc<RewardRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> ApiResult<Page<RewardView>> {
    let role = match query.role.as_deref() {
        None | Some("sent") => Role::Sent,
        Some("received") => Role::Received,
        Some(_) => {
            return Err(AppError::InvalidInput(Msg::new(
                "role must be sent or received",
                "role 只能是 sent 或 received",
            )))
        }
    };
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        routes
            .rewards
            .list(user.uid, role, query.cursor.as_deref(), limit)
            .await?,
    ))
}

/// The reward routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(create, detail, list))]
pub struct RewardsApi;
