//! `GET /account`: the caller's balance and entries, newest first, in keyset pages.

use platform::caller::AuthUser;
use std::sync::Arc;

use axum::{extract::State, routing::get, Router};
use serde::Deserialize;
use utoipa::IntoParams;

use super::service::{AccountView, Ledger};
use platform::{
    error::{ApiQuery, ApiResult, Reply},
    openapi::Envelope,
    page::page_limit,
};

/// What the handler reaches.
pub struct AccountRoutes {
    /// The ledger.
    pub ledger: Ledger,
}

/// The routes.
pub fn router(routes: AccountRoutes) -> Router {
    Router::new()
        .route("/account", get(account))
        .with_state(Arc::new(routes))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PageQuery {
    /// The `next` of the previous page of entries.
    cursor: Option<String>,
    /// 1–100 (default 20).
    limit: Option<i64>,
}

/// The caller's account: its balance and a page of its entries, newest first (amounts in fen).
#[utoipa::path(
    get,
    path = "/account",
    security(("access_token" = [])),
    params(PageQuery),
    responses((status = 200, description = "The account.", body = Envelope<AccountView>))
)]
async fn account(
    State(routes): State<Arc<AccountRoutes>>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<AccountView> {
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        routes
            .ledger
            .user_account(user.uid, query.cursor.as_deref(), limit)
            .await?,
    ))
}

/// The account route's description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(account))]
pub struct AccountApi;
