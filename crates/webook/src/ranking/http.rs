//! `GET /ranking/top` (API.md → Hot list): public, served from the local snapshot's pre-built
//! bytes. The full list is one reference-counted `Bytes` clone per request — the gzipped copy
//! when the client accepts gzip, as a static file server serves a pre-compressed file; a shorter
//! `limit` serialises that prefix and gzips it here for clients that accept it. Every
//! representation has its own strong ETag (`…-gzip` for gzip), so a cache never answers one
//! client's `If-None-Match` with the other encoding. `ETag` / `If-None-Match` answer 304 when the
//! list has not changed; `x-ranking-computed-at` says when it was computed (ms).
//!
//! The common request — the whole list, no query — is a fast path ([`platform::fast_path`]):
//! answered from memory ahead of the middleware, by the same code as the handler. The handler
//! serves the rest: `limit`, the first request on an instance that has no list yet (it loads
//! the shared copy), and the errors.

use axum::{
    body::Bytes,
    extract::{Request, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::ranking::{
    cache::{envelope, RankedArticle, Snapshot},
    RankingService,
};
use platform::{
    error::{ApiQuery, AppError, Msg},
    http::{accepts_gzip, etag_matches},
    openapi::Envelope,
};

/// What the hot-list handler reaches.
pub struct RankingRoutes {
    /// The hot list.
    pub ranking: RankingService,
}

/// `GET /ranking/top` with no query, answered from memory ahead of the middleware
/// ([`platform::fast_path`]) while this instance holds the list; `None` (no list here yet) lets
/// [`router`]'s handler look for the shared copy or answer the error.
pub fn top_from_memory(ranking: &RankingService, headers: &HeaderMap) -> Option<Response> {
    let snapshot = ranking.top_local()?;
    Some(full_list(&snapshot, headers))
}

/// The hot-list routes.
pub fn router(routes: RankingRoutes) -> Router {
    Router::new()
        .route("/ranking/top", get(top))
        .with_state(std::sync::Arc::new(routes))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct TopQuery {
    /// 1…N, the configured `ranking_size` (default: N).
    limit: Option<usize>,
}

/// The hot list, best first: public, served from the local snapshot.
#[utoipa::path(
    get,
    path = "/ranking/top",
    params(TopQuery),
    responses(
        (status = 200, description = "The list (code 4 for a `limit` out of range). A strong \
         `ETag` per representation, `Vary: accept-encoding`, gzipped for clients that accept \
         it.", body = Envelope<Vec<RankedArticle>>,
         headers(
             ("ETag" = String, description = "Changes with every computation and withdrawal."),
             ("x-ranking-computed-at" = String, description = "When it was computed (ms)."),
         )),
        (status = 304, description = "`If-None-Match` named the current ETag."),
        (status = 503, description = "No list was computed yet (code 5).",
         body = platform::openapi::ErrorEnvelope),
    )
)]
async fn top(
    State(state): State<std::sync::Arc<RankingRoutes>>,
    ApiQuery(query): ApiQuery<TopQuery>,
    // The request itself rather than a `HeaderMap`, which the extractor would copy.
    request: Request,
) -> Result<Response, AppError> {
    let size = state.ranking.settings().size;
    let limit = query.limit.unwrap_or(size);
    if limit == 0 || limit > size {
        return Err(AppError::InvalidInput(Msg::field(
            "limit",
            format!("must be 1-{size}"),
            format!("须在 1 到 {size} 之间"),
        )));
    }
    let Some(snapshot) = state.ranking.top().await else {
        return Err(AppError::Unavailable(anyhow::anyhow!(
            "the hot list has not been computed yet"
        )));
    };
    let gzip = accepts_gzip(request.headers());
    if limit >= snapshot.items.len() {
        return Ok(full_list(&snapshot, request.headers()));
    }
    let items = serde_json::to_string(&snapshot.items[..limit])
        .map_err(|err| AppError::Internal(err.into()))?;
    let base = snapshot
        .etag
        .to_str()
        .unwrap_or_default()
        .trim_end_matches('"')
        .to_owned();
    let (body, etag) = if gzip {
        (
            gzipped(&envelope(&items))?,
            format!("{base}-{limit}-gzip\""),
        )
    } else {
        (envelope(&items), format!("{base}-{limit}\""))
    };
    let etag = HeaderValue::from_str(&etag).map_err(|err| AppError::Internal(err.into()))?;
    Ok(answer(&snapshot, request.headers(), body, etag, gzip))
}

/// The whole list, to a request with `headers`: the common request, which allocates nothing
/// (reference-counted clones only).
fn full_list(snapshot: &Snapshot, headers: &HeaderMap) -> Response {
    let gzip = accepts_gzip(headers);
    let (body, etag) = if gzip {
        (snapshot.gzip_body.clone(), snapshot.gzip_etag.clone())
    } else {
        (snapshot.body.clone(), snapshot.etag.clone())
    };
    answer(snapshot, headers, body, etag, gzip)
}

/// `body` (gzipped when `gzip`) with its `etag`, or 304 when the request's `If-None-Match`
/// names it.
fn answer(
    snapshot: &Snapshot,
    headers: &HeaderMap,
    body: Bytes,
    etag: HeaderValue,
    gzip: bool,
) -> Response {
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|wanted| etag_matches(wanted.as_bytes(), etag.as_bytes()));
    let headers = [
        (header::ETAG, etag),
        (
            header::HeaderName::from_static("x-ranking-computed-at"),
            snapshot.computed_at_header.clone(),
        ),
        // The body depends on Accept-Encoding: caches must keep the two apart.
        (header::VARY, HeaderValue::from_static("accept-encoding")),
    ];
    if not_modified {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    let mut response = (
        headers,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    if gzip {
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

/// `body` gzipped at level 1, as the compression layer would have (module docs).
fn gzipped(body: &[u8]) -> Result<Bytes, AppError> {
    use std::io::Write;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 3),
        flate2::Compression::fast(),
    );
    encoder
        .write_all(body)
        .map_err(|err| AppError::Internal(err.into()))?;
    let compressed = encoder
        .finish()
        .map_err(|err| AppError::Internal(err.into()))?;
    Ok(Bytes::from(compressed))
}

/// The hot list's route description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(top))]
pub struct RankingApi;
