//! The HTTP middleware stack every request runs through, outermost first:
//!
//! 1. response compression and the body size limit, enforced by [`crate::error::ApiJson`]
//!    (answers 400, code 4) — both wrap the whole router once. Compression is gzip at level 1,
//!    when the client accepts it and the response is not already encoded. Every browser sends
//!    `Accept-Encoding: gzip`, so it runs on nearly every read: level 1 costs well under half
//!    the time of zlib's default level 6 for somewhat more bytes (docs/PERFORMANCE.md →
//!    Kernels), the trade nginx's default `gzip_comp_level 1` makes too;
//! 2. routing;
//! 3. [`Observe`] around each route (it labels metrics with the matched route pattern), one
//!    layer doing what every request needs observed and bounded:
//!    - the request id (`x-request-id`, generated when absent, echoed back);
//!    - the language of `msg` in error answers, from `Accept-Language` ([`Lang`]);
//!    - `X-Content-Type-Options: nosniff` on every answer (no browser guesses a JSON answer
//!      into HTML);
//!    - a `tracing` span carrying method, path and request id — when traces are exported, an
//!      OpenTelemetry server span named by the route, continuing the caller's `traceparent`
//!      ([`crate::tracing_otlp`]);
//!    - CORS per `API.md` ([`CorsPolicy`]: preflights answered here, grants added to responses);
//!    - Prometheus metrics by matched route, method and status (499 when the client went away
//!      before the answer), plus an in-flight gauge;
//!    - the request timeout (answers 503, code 5), armed only if the handler does not answer
//!      on its first poll;
//!    - panic catching (answers 500, code 5: never a dropped connection).
//!
//! The observing steps are one hand-written layer rather than seven stock ones because axum
//! clones a route's whole layered service per request and each stock layer adds a boxed future
//! and often allocations: as seven layers they took a large share of the CPU time of the
//! cheapest cached reads (docs/PERFORMANCE.md → Hot list). Its configuration sits behind one `Arc`;
//! metric handles are looked up once per route, method and status per worker thread, not
//! formatted into labels per request.
//!
//! Unknown routes and methods answer with the envelope too ([`AppError::NoRoute`],
//! [`AppError::MethodNotAllowed`]).
//!

use std::{
    any::Any,
    cell::RefCell,
    collections::HashMap,
    convert::Infallible,
    future::Future,
    panic::AssertUnwindSafe,
    sync::Arc,
    task::{Context as TaskContext, Poll},
    time::Duration,
};

use axum::{
    extract::{DefaultBodyLimit, MatchedPath, Request},
    http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode},
    response::Response,
    Router,
};
use futures_util::{future::BoxFuture, FutureExt};
use metrics::{Counter, Gauge, Histogram};
use tower::{Layer, Service};
use tower_http::{compression::CompressionLayer, CompressionLevel};
use tracing::{Instrument, Span};

use crate::{
    config::Config,
    cors::CorsPolicy,
    error::{AppError, Lang},
    telemetry, tracing_otlp,
};

pub use crate::headers::{ACCESS_TOKEN_HEADER, REFRESH_TOKEN_HEADER};
/// Request and response header carrying the request id.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Wraps `router` in the middleware stack described in the module docs.
pub fn with_middleware(router: Router, config: &Config) -> anyhow::Result<Router> {
    // The layer takes its metric handles now: the recorder must be installed first.
    telemetry::metrics_handle()?;
    let cors = CorsPolicy::new(&config.cors_origins)?;
    // Observe wraps each route, as it labels metrics with the matched route; compression and
    // the body limit wrap the router once.
    let routed = router
        .fallback(|| async { AppError::NoRoute })
        .method_not_allowed_fallback(|| async { AppError::MethodNotAllowed })
        .layer(ObserveLayer::new(config.request_timeout, cors));
    let outer = tower::ServiceBuilder::new()
        .layer(CompressionLayer::new().quality(CompressionLevel::Fastest))
        .layer(DefaultBodyLimit::max(config.body_limit_bytes))
        .service(routed);
    Ok(Router::new().fallback_service(outer))
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case), if any.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// The values of every cookie called `name` in the request's `Cookie` headers (unquoted; empty
/// ones left out).
pub fn cookie_values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(cookie, _)| cookie.trim() == name)
        .map(|(_, value)| value.trim().trim_matches('"'))
        .filter(|value| !value.is_empty())
        .collect()
}

/// The answers of the course's routes, for the course's web frontend.
///
/// That frontend reads the body of 2xx answers only: anything else shows the person an empty
/// page or "undefined". The course's backend answered a refusal a person should read (a code
/// sent too recently, …) with HTTP 200 and a non-zero `code`; so do the course's routes here:
/// a rate-limit refusal keeps its code (429001), its message and its `Retry-After` header and
/// is sent with HTTP 200. What a client or a proxy acts on without reading keeps its status:
/// 401 and 403001 (the frontend signs in again), 400, 404, 405, and 503 when a dependency is
/// down. webook's own routes (feed, comments, tags, search, the console) answer HTTP 429.
///
/// A feature puts it on the routes it serves for the course: `router.layer(course_answers())`.
/// It is a plain response map (no boxed future), cheap on hot reads.
pub fn course_answers() -> tower::util::MapResponseLayer<fn(Response) -> Response> {
    tower::util::MapResponseLayer::new(course_answer as fn(Response) -> Response)
}

fn course_answer(mut response: Response) -> Response {
    if response.status() == StatusCode::TOO_MANY_REQUESTS {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// Builds [`Observe`] around each route.
#[derive(Clone)]
pub struct ObserveLayer {
    shared: Arc<Observer>,
}

struct Observer {
    timeout: Duration,
    cors: CorsPolicy,
    in_flight: Gauge,
}

impl ObserveLayer {
    /// Requests running longer than `timeout` are answered 503 (code 5); browsers are held to
    /// `cors`.
    pub fn new(timeout: Duration, cors: CorsPolicy) -> Self {
        Self {
            shared: Arc::new(Observer {
                timeout,
                cors,
                in_flight: metrics::gauge!(telemetry::HTTP_REQUESTS_IN_FLIGHT),
            }),
        }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// Request id, span, metrics, timeout and panic catching around one route (module docs).
#[derive(Clone)]
pub struct Observe<S> {
    inner: S,
    shared: Arc<Observer>,
}

impl<S> Service<Request> for Observe<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        // The service that was polled ready serves this request; a clone stays for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let request_id = match request.headers().get(REQUEST_ID_HEADER) {
            Some(id) => id.clone(),
            None => {
                let id = new_request_id();
                request.headers_mut().insert(REQUEST_ID_HEADER, id.clone());
                id
            }
        };
        let route = request.extensions().get::<MatchedPath>().cloned();
        let traced = tracing_otlp::enabled();
        let span = if traced {
            server_span(&request, &request_id, route.as_ref())
        } else {
            tracing::info_span!(
                "request",
                method = %request.method(),
                path = %request.uri().path(),
                request_id = %String::from_utf8_lossy(request_id.as_bytes()),
            )
        };
        // Its status is recorded at the end (only when traced: the log's span stays as it was).
        let traced_span = traced.then(|| span.clone());
        let lang = Lang::negotiate(
            request
                .headers()
                .get(axum::http::header::ACCEPT_LANGUAGE)
                .and_then(|value| value.to_str().ok()),
        );
        let method = request.method().clone();
        let preflight = shared.cors.preflight(request.method(), request.headers());
        let origin = shared.cors.allowed_origin(request.headers());
        async move {
            shared.in_flight.increment(1.0);
            // Decrements however the request ends (response, timeout, client gone); counts a
            // request whose client went away before the answer as status 499.
            let mut in_flight = InFlight {
                gauge: &shared.in_flight,
                abandoned: Some((route, method)),
                started: tokio::time::Instant::now(),
            };
            let started = in_flight.started;
            let mut response = match preflight {
                Some(answer) => answer,
                None => {
                    // Called inside the guard: a panic building the future is caught too.
                    let handled = lang
                        .scope(AssertUnwindSafe(async move { inner.call(request).await }))
                        .catch_unwind();
                    let mut response = match within(started + shared.timeout, handled).await {
                        Some(Ok(Ok(response))) => response,
                        Some(Ok(Err(never))) => match never {},
                        Some(Err(panic)) => panic_response(&panic, lang),
                        None => AppError::Timeout.render(lang),
                    };
                    shared.cors.decorate(origin, &mut response);
                    response
                }
            };
            let headers = response.headers_mut();
            headers.entry(REQUEST_ID_HEADER).or_insert(request_id);
            headers.insert(
                axum::http::header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            if let Some(span) = traced_span {
                record_status(&span, response.status());
            }
            // Answered: counted with its status here, not as abandoned by the guard.
            if let Some((route, method)) = in_flight.abandoned.take() {
                record_request(
                    route.as_ref().map_or(UNMATCHED, MatchedPath::as_str),
                    &method,
                    response.status(),
                    started.elapsed(),
                );
            }
            Ok(response)
        }
        .instrument(span)
        .boxed()
    }
}

/// The span of a request when traces are exported: an OpenTelemetry server span named by the
/// matched route (`POST /articles/publish`), continuing the caller's `traceparent` if it sent
/// one ([`tracing_otlp`]).
fn server_span(request: &Request, request_id: &HeaderValue, route: Option<&MatchedPath>) -> Span {
    let route = route.map_or(UNMATCHED, MatchedPath::as_str);
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %String::from_utf8_lossy(request_id.as_bytes()),
        otel.name = %format_args!("{} {route}", request.method()),
        otel.kind = "server",
        http.request.method = %request.method(),
        http.route = route,
        url.path = %request.uri().path(),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    tracing_otlp::continue_from_headers(&span, request.headers());
    span
}

/// Records the answer's status on a traced request's span (5xx marks the span failed).
fn record_status(span: &Span, status: StatusCode) {
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
}

/// `future`'s output, or `None` once `deadline` passes. Most handlers answer on their first poll
/// (a cached read), so that poll is made before any timer exists: arming a timer takes the timer
/// wheel's lock twice (register, cancel), a cost worth skipping on the hottest routes.
async fn within<F: Future>(deadline: tokio::time::Instant, future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    if let Poll::Ready(output) = futures_util::poll!(future.as_mut()) {
        return Some(output);
    }
    tokio::time::timeout_at(deadline, future).await.ok()
}

/// A UUID v4 as a header value.
pub(crate) fn new_request_id() -> HeaderValue {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let id = uuid::Uuid::new_v4();
    HeaderValue::from_str(id.hyphenated().encode_lower(&mut text))
        .unwrap_or_else(|_| HeaderValue::from_static("-"))
}

/// Nginx's "client closed request": the status a request is counted with when its future is
/// dropped before it answered (the connection closed mid-request). Its handler may have done
/// part of its work.
const CLIENT_CLOSED_REQUEST: u16 = 499;

/// One request in flight, from the gauge's point of view and the request counter's.
struct InFlight<'a> {
    gauge: &'a Gauge,
    /// Route and method while the request has not answered; taken when it does.
    abandoned: Option<(Option<MatchedPath>, Method)>,
    started: tokio::time::Instant,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
        if let Some((route, method)) = self.abandoned.take() {
            if let Ok(status) = StatusCode::from_u16(CLIENT_CLOSED_REQUEST) {
                record_request(
                    route.as_ref().map_or(UNMATCHED, MatchedPath::as_str),
                    &method,
                    status,
                    self.started.elapsed(),
                );
            }
        }
    }
}

pub(crate) fn panic_response(panic: &(dyn Any + Send), lang: Lang) -> Response {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    AppError::Panic(message).render(lang)
}

/// The metric handles of one (route, method, status) series.
struct Series {
    method: Method,
    status: StatusCode,
    requests: Counter,
    duration: Histogram,
}

thread_local! {
    /// Series handles by route pattern, per worker thread: looked up without locks or
    /// allocation once a thread has served a series.
    static SERIES: RefCell<HashMap<Box<str>, Vec<Series>>> = RefCell::new(HashMap::new());
}

/// The route label of a request no route matched.
const UNMATCHED: &str = "unmatched";

/// Counts one served request and its latency, by route pattern.
pub(crate) fn record_request(route: &str, method: &Method, status: StatusCode, elapsed: Duration) {
    // Methods outside the standard set share one label: a client inventing methods must not
    // mint series.
    let method = if is_standard(method) {
        method
    } else {
        &OTHER_METHOD
    };
    SERIES.with_borrow_mut(|by_route| {
        if !by_route.contains_key(route) {
            by_route.insert(route.into(), Vec::new());
        }
        let Some(series) = by_route.get_mut(route) else {
            return;
        };
        let index = match series
            .iter()
            .position(|one| one.status == status && one.method == *method)
        {
            Some(index) => index,
            None => {
                let labels = [
                    ("method", method.as_str().to_owned()),
                    ("route", route.to_owned()),
                    ("status", status.as_str().to_owned()),
                ];
                series.push(Series {
                    method: method.clone(),
                    status,
                    requests: metrics::counter!(telemetry::HTTP_REQUESTS_TOTAL, &labels),
                    duration: metrics::histogram!(telemetry::HTTP_REQUEST_DURATION, &labels),
                });
                series.len() - 1
            }
        };
        let one = &series[index];
        one.requests.increment(1);
        one.duration.record(elapsed.as_secs_f64());
    });
}

/// The label of methods outside [`is_standard`].
static OTHER_METHOD: std::sync::LazyLock<Method> =
    std::sync::LazyLock::new(|| Method::from_bytes(b"OTHER").unwrap_or(Method::GET));

fn is_standard(method: &Method) -> bool {
    const STANDARD: [Method; 9] = [
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
        Method::CONNECT,
        Method::TRACE,
    ];
    STANDARD.contains(method)
}

/// Whether an `Accept-Encoding` header admits gzip: a `gzip` (or `*`) coding whose `q` is not 0.
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .flat_map(|value| value.as_bytes().split(|byte| *byte == b','))
        .any(|coding| {
            let mut parts = coding.split(|byte| *byte == b';');
            let name = parts.next().unwrap_or_default().trim_ascii();
            let named = name.eq_ignore_ascii_case(b"gzip") || name == b"*";
            named
                && parts.all(|param| {
                    let param = param.trim_ascii();
                    let Some(q) = param
                        .strip_prefix(b"q=")
                        .or_else(|| param.strip_prefix(b"Q="))
                    else {
                        return true;
                    };
                    std::str::from_utf8(q)
                        .ok()
                        .and_then(|q| q.trim().parse::<f32>().ok())
                        .is_some_and(|q| q > 0.0)
                })
        })
}

/// Whether an `If-None-Match` value (a list of ETags, or `*`) names `etag`.
pub fn etag_matches(wanted: &[u8], etag: &[u8]) -> bool {
    wanted
        .split(|byte| *byte == b',')
        .map(<[u8]>::trim_ascii)
        .any(|candidate| candidate == etag || candidate == b"*")
}

#[cfg(test)]
mod tests {
    use axum::http::{header, HeaderMap, HeaderValue};

    use super::{accepts_gzip, etag_matches};

    fn accept(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(header::ACCEPT_ENCODING, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn accept_encoding_admits_gzip_unless_refused() {
        assert!(accepts_gzip(&accept(&["gzip, deflate, br, zstd"])));
        assert!(accepts_gzip(&accept(&["br;q=1.0, GZIP;q=0.5"])));
        assert!(accepts_gzip(&accept(&["identity", "*"])));
        assert!(!accepts_gzip(&accept(&[])));
        assert!(!accepts_gzip(&accept(&["br, identity"])));
        assert!(!accepts_gzip(&accept(&["gzip;q=0"])));
        assert!(!accepts_gzip(&accept(&["gzip; q=0.000"])));
        assert!(!accepts_gzip(&accept(&["gzips, xgzip"])));
    }

    #[test]
    fn if_none_match_lists_and_wildcards() {
        assert!(etag_matches(br#""a-1""#, br#""a-1""#));
        assert!(etag_matches(br#""x", "a-1""#, br#""a-1""#));
        assert!(etag_matches(b"*", br#""a-1""#));
        assert!(!etag_matches(br#""a-2""#, br#""a-1""#));
        assert!(!etag_matches(b"", br#""a-1""#));
    }
}
