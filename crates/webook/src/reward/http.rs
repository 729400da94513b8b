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

use super::{
    service::{RewardCreated, RewardView, Rewards},
    store::{RewardStatus, Role},
};
use platform::{
    error::{positive_id, ApiJson, ApiQuery, ApiResult, AppError, Msg, Reply},
    page::{page_limit, Page},
    rate_limit::RateLimiter,
};

/// What the handlers reach.
pub struct RewardRoutes {
    /// Rewards.
    pub rewards: Rewards,
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

#[derive(Deserialize)]
struct CreateRequest {
    id: i64,
    amt: i64,
}

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

#[derive(Deserialize)]
struct DetailRequest {
    rid: i64,
}

async fn detail(
    State(routes): State<Arc<RewardRoutes>>,
    user: AuthUser,
    ApiJson(request): ApiJson<DetailRequest>,
) -> ApiResult<RewardStatus> {
    let rid = positive_id("rid", request.rid)?;
    Ok(Reply(routes.rewards.status(user.uid, rid).await?))
}

#[derive(Deserialize)]
struct ListQuery {
    role: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

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
