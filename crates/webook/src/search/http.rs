//! `GET /search` (API.md → Search): public, parse → [`SearchService::search`] → envelope.

use axum::{extract::State, routing::get, Router};
use serde::Deserialize;

use platform::{
    error::{ApiQuery, ApiResult, Reply},
    page::page_limit,
};

use super::service::{SearchResults, SearchService, SearchType};

#[derive(Deserialize)]
struct SearchQuery {
    #[serde(default)]
    q: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
}

async fn search(
    State(search): State<SearchService>,
    ApiQuery(query): ApiQuery<SearchQuery>,
) -> ApiResult<SearchResults> {
    let kind = SearchType::parse(query.kind.as_deref())?;
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        search
            .search(&query.q, kind, query.cursor.as_deref(), limit)
            .await?,
    ))
}

/// The search routes.
pub fn router(search: SearchService) -> Router {
    Router::new()
        .route("/search", get(self::search))
        .with_state(search)
}
