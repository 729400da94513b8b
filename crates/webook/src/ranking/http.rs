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
    // The full list (the common request) allocates nothing: reference-counted clones only.
    let (body, etag) = if limit >= snapshot.items.len() {
        (snapshot.body.clone(), snapshot.etag.clone())
    } else {
        let items = serde_json::to_string(&snapshot.items[..limit])
            .map_err(|err| AppError::Internal(err.into()))?;
        let etag = format!(
            "{}-{limit}\"",
            snapshot
                .etag
                .to_str()
                .unwrap_or_default()
                .trim_end_matches('"')
        );
        let etag = HeaderValue::from_str(&etag).map_err(|err| AppError::Internal(err.into()))?;
        (envelope(&items), etag)
    };
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|wanted| etag_matches(wanted.as_bytes(), etag.as_bytes()));
    let headers = [
        (header::ETAG, etag),
        (
            header::HeaderName::from_static("x-ranking-computed-at"),
            snapshot.computed_at_header.clone(),
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

/// Whether an `If-None-Match` value (a list of ETags, or `*`) names `etag`.
fn etag_matches(wanted: &[u8], etag: &[u8]) -> bool {
    wanted
        .split(|byte| *byte == b',')
        .map(<[u8]>::trim_ascii)
        .any(|candidate| candidate == etag || candidate == b"*")
}

#[cfg(test)]
mod tests {
    use super::etag_matches;

    #[test]
    fn if_none_match_lists_and_wildcards() {
        assert!(etag_matches(br#""a-1""#, br#""a-1""#));
        assert!(etag_matches(br#""x", "a-1""#, br#""a-1""#));
        assert!(etag_matches(b"*", br#""a-1""#));
        assert!(!etag_matches(br#""a-2""#, br#""a-1""#));
        assert!(!etag_matches(b"", br#""a-1""#));
    }
}
