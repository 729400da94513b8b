//! `GET /search` (API.md → Search): public, limited per client address
//! (`search_rate_limit` per `search_rate_window`, 429001 beyond it), parse →
//! [`SearchService::search`] → envelope.

use std::sync::Arc;

use axum::{extract::State, routing::get, Router};
use serde::Deserialize;

use platform::{
    client_ip::{ClientIp, KnowsProxies, TrustedProxies},
    error::{ApiQuery, ApiResult, Reply},
    page::page_limit,
    rate_limit::RateLimiter,
};

use super::service::{SearchResults, SearchService, SearchType};

/// What the search route reaches.
pub struct SearchRoutes {
    /// The index and the database behind it.
    pub search: SearchService,
    /// Searches per client address; `None` when `search_rate_limit` is 0.
    pub limiter: Option<RateLimiter>,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: TrustedProxies,
}

impl KnowsProxies for SearchRoutes {
    fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trusted_proxies
    }
}

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
    State(routes): State<Arc<SearchRoutes>>,
    ClientIp(ip): ClientIp,
    ApiQuery(query): ApiQuery<SearchQuery>,
) -> ApiResult<SearchResults> {
    // Every request counts, refused ones too: the limit is on what an address may ask.
    if let Some(limiter) = &routes.limiter {
        limiter.check(&ip.to_string()).await?;
    }
    let kind = SearchType::parse(query.kind.as_deref())?;
    let limit = page_limit(query.limit)?;
    Ok(Reply(
        routes
            .search
            .search(&query.q, kind, query.cursor.as_deref(), limit)
            .await?,
    ))
}

/// The search routes.
pub fn router(routes: SearchRoutes) -> Router {
    Router::new()
        .route("/search", get(self::search))
        .with_state(Arc::new(routes))
}
