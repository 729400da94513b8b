//! `GET /search` (API.md → Search): public, limited per client address
//! (`search_rate_limit` per `search_rate_window`, 429001 beyond it), parse →
//! [`SearchService::search`] → envelope.

use std::sync::Arc;

use axum::{extract::State, routing::get, Router};
use serde::Deserialize;
use utoipa::IntoParams;

use platform::{
    client_ip::{ClientIp, KnowsProxies, TrustedProxies},
    error::{ApiQuery, ApiResult, Reply},
    live::LiveRateLimiter,
    openapi::Envelope,
    page::page_limit,
};

use super::service::{SearchResults, SearchService, SearchType};

/// What the search route reaches.
pub struct SearchRoutes {
    /// The index and the database behind it.
    pub search: SearchService,
    /// Searches per client address; `None` when `search_rate_limit` is 0.
    pub limiter: LiveRateLimiter,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: TrustedProxies,
}

impl KnowsProxies for SearchRoutes {
    fn trusted_proxies(&self) -> &TrustedProxies {
        &self.trusted_proxies
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct SearchQuery {
    /// 1–100 characters with a letter or a digit; terms split on whitespace, `"quoted text"`
    /// one term, the last term also a prefix unless `q` ends with a space or a quote.
    #[serde(default)]
    q: String,
    /// `all` (the default), `article` or `user`.
    #[serde(rename = "type")]
    #[param(pattern = "^(all|article|user)$")]
    kind: Option<String>,
    /// The `next` of one list's previous page: continues that list only.
    cursor: Option<String>,
    /// 1–100 (default 20), per list.
    limit: Option<i64>,
}

/// Searches published articles and users **(webook)**: public, limited per client address.
#[utoipa::path(
    get,
    path = "/search",
    params(SearchQuery),
    responses(
        (status = 200, description = "A page of each list asked for (the other empty). Code 4 \
         names an invalid `q`, `type` or `cursor`.", body = Envelope<SearchResults>),
        (status = 429, description = "Beyond `search_rate_limit` per `search_rate_window` \
         (code 429001, `Retry-After`).", body = platform::openapi::ErrorEnvelope),
        (status = 503, description = "The index is being rebuilt (code 5).",
         body = platform::openapi::ErrorEnvelope),
    )
)]
async fn search(
    State(routes): State<Arc<SearchRoutes>>,
    ClientIp(ip): ClientIp,
    ApiQuery(query): ApiQuery<SearchQuery>,
) -> ApiResult<SearchResults> {
    // Every request counts, refused ones too: the limit is on what an address may ask.
    {
        routes.limiter.check(&ip.to_string()).await?;
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

/// The search route's description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(search))]
pub struct SearchApi;
