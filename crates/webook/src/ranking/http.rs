//! `GET /ranking/top` (API.md → Hot list): public, served from the local snapshot's pre-built
//! bytes. The full list is one reference-counted `Bytes` clone per request; a shorter `limit`
//! serialises that prefix. `ETag` / `If-None-Match` answer 304 when the list has not changed;
//! `x-ranking-computed-at` says when it was computed (ms).

use axum::{
    extract::State,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use serde::Deserialize;

use crate::{
    app::AppState,
    error::{ApiQuery, AppError},
    ranking::cache::envelope,
};

/// The hot-list routes.
pub fn router() -> Router<AppState> {
    Router::new().route("/ranking/top", get(top))
}

#[derive(Deserialize)]
struct TopQuery {
    limit: Option<usize>,
}

async fn top(
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<TopQuery>,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let size = state.ranking.settings().size;
    let limit = query.limit.unwrap_or(size);
    if limit == 0 || limit > size {
        return Err(AppError::InvalidInput(format!("limit: must be 1-{size}")));
    }
    let Some(snapshot) = state.ranking.top().await else {
        return Err(AppError::Unavailable(anyhow::anyhow!(
            "the hot list has not been computed yet"
        )));
    };
    let (body, etag) = if limit >= snapshot.items.len() {
        (snapshot.body.clone(), snapshot.etag.clone())
    } else {
        let items = serde_json::to_string(&snapshot.items[..limit])
            .map_err(|err| AppError::Internal(err.into()))?;
        let etag = format!("{}-{limit}\"", snapshot.etag.trim_end_matches('"'));
        (envelope(&items), etag)
    };
    let etag = HeaderValue::from_str(&etag).map_err(|err| AppError::Internal(err.into()))?;
    let computed_at = HeaderValue::from(snapshot.computed_at);
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|wanted| {
            wanted
                .split(',')
                .any(|candidate| candidate.trim() == etag.to_str().unwrap_or_default())
        });
    let headers = [
        (header::ETAG, etag),
        (
            header::HeaderName::from_static("x-ranking-computed-at"),
            computed_at,
        ),
    ];
    if not_modified {
        return Ok((StatusCode::NOT_MODIFIED, headers).into_response());
    }
    Ok((
        headers,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response())
}
