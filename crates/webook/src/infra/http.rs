//! The HTTP middleware stack every route runs behind, outermost first:
//!
//! 1. request id (`x-request-id`, generated when absent, echoed back);
//! 2. a `tracing` span per request carrying method, path and request id;
//! 3. CORS per `API.md` (configured origins, credentials, exposed token headers);
//! 4. response compression;
//! 5. Prometheus metrics by matched route, method and status, plus an in-flight gauge;
//! 6. the request timeout (answers 503, code 5);
//! 7. panic catching (answers 500, code 5: never a dropped connection);
//! 8. the body size limit, enforced by [`crate::error::ApiJson`] (answers 400, code 4).
//!
//! Unknown routes and methods answer with the envelope too ([`AppError::NoRoute`],
//! [`AppError::MethodNotAllowed`]).

use std::{any::Any, time::Duration};

use anyhow::Context;
use axum::{
    extract::{DefaultBodyLimit, MatchedPath, Request, State},
    http::{header, HeaderName, HeaderValue, Method},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    Router,
};
use tower::ServiceBuilder;
use tower_http::{
    catch_panic::CatchPanicLayer,
    compression::CompressionLayer,
    cors::{AllowOrigin, CorsLayer},
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::TraceLayer,
};

use crate::{config::Config, error::AppError, infra::telemetry};

/// Response header carrying a new access token (login, refresh).
pub const ACCESS_TOKEN_HEADER: &str = "x-jwt-token";
/// Response header carrying a new refresh token (login, refresh).
pub const REFRESH_TOKEN_HEADER: &str = "x-refresh-token";

/// Wraps `router` in the middleware stack described in the module docs.
pub fn with_middleware(router: Router, config: &Config) -> anyhow::Result<Router> {
    let cors = cors_layer(&config.cors_origins)?;
    Ok(router
        .fallback(|| async { AppError::NoRoute })
        .method_not_allowed_fallback(|| async { AppError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(config.body_limit_bytes))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(middleware::from_fn_with_state(
            config.request_timeout,
            enforce_timeout,
        ))
        .layer(middleware::from_fn(record_metrics))
        .layer(
            ServiceBuilder::new()
                .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
                .layer(TraceLayer::new_for_http().make_span_with(request_span))
                .layer(PropagateRequestIdLayer::x_request_id())
                .layer(cors)
                .layer(CompressionLayer::new()),
        ))
}

/// CORS as `API.md` specifies it. A wildcard origin is refused: browsers reject it together with
/// credentials, so it could only ever break the frontend.
pub fn cors_layer(origins: &[String]) -> anyhow::Result<CorsLayer> {
    let origins = origins
        .iter()
        .map(|origin| {
            anyhow::ensure!(
                origin != "*",
                "invalid cors_origins (WEBOOK_CORS_ORIGINS): \"*\" cannot be used with \
                 credentials; list the frontend origins"
            );
            HeaderValue::from_str(origin)
                .with_context(|| format!("invalid cors_origins entry {origin:?}"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_credentials(true)
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION])
        .expose_headers([
            HeaderName::from_static(ACCESS_TOKEN_HEADER),
            HeaderName::from_static(REFRESH_TOKEN_HEADER),
        ])
        .max_age(Duration::from_secs(600)))
}

fn request_span(request: &Request) -> tracing::Span {
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|value| value.to_str().ok())
        .unwrap_or("-");
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %request_id,
    )
}

fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    AppError::Panic(message).into_response()
}

async fn enforce_timeout(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => AppError::Timeout.into_response(),
    }
}

/// Decrements the in-flight gauge however the request ends (response, timeout, disconnect).
struct InFlight;

impl InFlight {
    fn start() -> Self {
        metrics::gauge!(telemetry::HTTP_REQUESTS_IN_FLIGHT).increment(1.0);
        Self
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        metrics::gauge!(telemetry::HTTP_REQUESTS_IN_FLIGHT).decrement(1.0);
    }
}

async fn record_metrics(request: Request, next: Next) -> Response {
    let _in_flight = InFlight::start();
    let started = std::time::Instant::now();
    // The route pattern, not the path: `/articles/pub/{id}` is one series, not one per id.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = request.method().as_str().to_owned();
    let response = next.run(request).await;
    let labels = [
        ("method", method),
        ("route", route),
        ("status", response.status().as_u16().to_string()),
    ];
    metrics::counter!(telemetry::HTTP_REQUESTS_TOTAL, &labels).increment(1);
    metrics::histogram!(telemetry::HTTP_REQUEST_DURATION, &labels)
        .record(started.elapsed().as_secs_f64());
    response
}
