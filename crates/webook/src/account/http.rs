//! `GET /account`: the caller's balance and entries, newest first, in keyset pages.

use platform::caller::AuthUser;
use std::sync::Arc;

use axum::{extract::State, routing::get, Router};
use serde::Deserialize;

use super::{AccountView, Ledger};
use platform::{
    error::{ApiQuery, ApiResult, Reply},
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

#[derive(Deserialize)]
struct PageQuery {
    cursor: Option<String>,
    limit: Option<i64>,
}

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
