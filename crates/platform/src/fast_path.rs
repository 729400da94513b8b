//! Fast paths: answers served from memory ahead of the router and its middleware, for the few
//! routes whose whole work is handing out pre-built bytes (the hot list).
//!
//! A feature registers one with [`crate::feature::Registry::fast_path`]: an exact path and a
//! function from the request's headers to `Some(response)`, or `None` when it cannot answer from
//! memory alone. The server ([`crate::serve`]) asks [`Served::call`] for every request:
//!
//! 1. a `GET` of a registered path with no query string goes to that path's answer; when it
//!    answers, the response gets what every answer carries — the request id (echoed, or
//!    generated), `X-Content-Type-Options: nosniff`, the CORS grant for an allowed `Origin` — is
//!    counted in the same request metrics as routed requests (route, method, status, latency),
//!    and is returned at once;
//! 2. anything else — another method, a query string, an answer of `None` — goes through the
//!    router with the full middleware stack of [`crate::http`], so the route must exist there
//!    too (it serves the uncommon cases and the errors).
//!
//! What a fast answer does without: the routing and extractors, the compression layer (the
//! answer carries its own pre-gzipped bytes when the client accepts gzip), the request timeout
//! (nothing in it awaits), the in-flight gauge (it is never in flight across a poll) and the
//! `info` request span — its span is at `debug` level, so it costs nothing unless asked for
//! (nothing in a fast answer logs). A panic in the answer still becomes the 500 envelope rather
//! than a dropped connection.
//!
//! Why it exists: `GET /ranking/top` is compared with nginx serving the same bytes as a static
//! file, and with the observing layer, compression and routing around it, it stayed below the
//! 0.9× target (docs/PERFORMANCE.md → Hot list).

use std::{convert::Infallible, panic::AssertUnwindSafe, sync::Arc, time::Instant};

use axum::{
    body::Body,
    extract::ConnectInfo,
    http::{header, HeaderMap, HeaderValue, Method, Request},
    response::Response,
    Router,
};
use futures_util::future::{ready, Either, Ready};
use tower::Service;

use crate::{
    config::Config,
    cors::CorsPolicy,
    error::Lang,
    http::{new_request_id, record_request, REQUEST_ID_HEADER},
};

/// Answers a fast path's request from its headers, or `None` to let the router serve it.
pub type FastAnswer = Arc<dyn Fn(&HeaderMap) -> Option<Response> + Send + Sync>;

/// One registered fast path.
#[derive(Clone)]
pub struct FastPath {
    /// The exact path it answers (`/ranking/top`), also the `route` label of its metrics.
    pub path: &'static str,
    /// Its answer.
    pub answer: FastAnswer,
}

/// What the server serves: the fast paths first, then the router (module docs).
#[derive(Clone)]
pub struct Served {
    fast: Arc<FastPaths>,
    router: Router,
}

struct FastPaths {
    paths: Vec<FastPath>,
    cors: CorsPolicy,
}

/// The future of one served request.
pub type ServedFuture =
    Either<Ready<Result<Response, Infallible>>, axum::routing::future::RouteFuture<Infallible>>;

impl Served {
    /// Serves `router` (already wrapped in [`crate::http::with_middleware`]) behind `paths`,
    /// whose answers are held to the configured CORS origins as routed answers are.
    pub fn new(router: Router, paths: Vec<FastPath>, config: &Config) -> anyhow::Result<Self> {
        Ok(Self {
            fast: Arc::new(FastPaths {
                paths,
                cors: CorsPolicy::new(&config.cors_origins)?,
            }),
            router,
        })
    }

    /// Answers `request` from `peer`: by a fast path when one answers it, else by the router.
    pub fn call<B>(&self, request: Request<B>, peer: std::net::SocketAddr) -> ServedFuture
    where
        B: axum::body::HttpBody<Data = axum::body::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        if let Some(response) = self.fast.answer(&request) {
            return Either::Left(ready(Ok(response)));
        }
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(ConnectInfo(peer));
        Either::Right(self.router.clone().call(request))
    }
}

impl FastPaths {
    fn answer<B>(&self, request: &Request<B>) -> Option<Response> {
        if request.method() != Method::GET || request.uri().query().is_some() {
            return None;
        }
        let path = request.uri().path();
        let fast = self.paths.iter().find(|fast| fast.path == path)?;
        let started = Instant::now();
        let headers = request.headers();
        let _span =
            tracing::debug_span!("request", method = "GET", path, fast_path = true).entered();
        let mut response =
            match std::panic::catch_unwind(AssertUnwindSafe(|| (fast.answer)(headers))) {
                Ok(answer) => answer?,
                Err(panic) => {
                    let lang = Lang::negotiate(
                        headers
                            .get(header::ACCEPT_LANGUAGE)
                            .and_then(|value| value.to_str().ok()),
                    );
                    crate::http::panic_response(&panic, lang)
                }
            };
        self.cors
            .decorate(self.cors.allowed_origin(headers), &mut response);
        // Made only once the path answered: a request it declines gets its id from the router.
        let request_id = headers
            .get(REQUEST_ID_HEADER)
            .cloned()
            .unwrap_or_else(new_request_id);
        let response_headers = response.headers_mut();
        response_headers
            .entry(REQUEST_ID_HEADER)
            .or_insert(request_id);
        response_headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        record_request(
            fast.path,
            &Method::GET,
            response.status(),
            started.elapsed(),
        );
        Some(response)
    }
}

#[cfg(test)]
mod tests {
    use std::{net::SocketAddr, sync::Arc};

    use axum::{
        body::{to_bytes, Body},
        http::{header, HeaderMap, Method, Request, StatusCode},
        response::{IntoResponse, Response},
        routing::any,
        Router,
    };
    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::{FastPath, Served};
    use crate::config::Config;

    const PEER: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9);

    /// A server whose router answers `x-routed: 1` everywhere, with fast paths at `/fast` (answers
    /// "fast"), `/declines` (answers `None`) and `/panics`.
    fn served() -> Served {
        let router = Router::new().fallback(any(|| async { ([("x-routed", "1")], "routed") }));
        let paths = vec![
            FastPath {
                path: "/fast",
                answer: Arc::new(|headers: &HeaderMap| {
                    let mut response = "fast".into_response();
                    // It sees the request's headers.
                    if let Some(value) = headers.get("x-echo") {
                        response.headers_mut().insert("x-echoed", value.clone());
                    }
                    Some(response)
                }),
            },
            FastPath {
                path: "/declines",
                answer: Arc::new(|_: &HeaderMap| None),
            },
            FastPath {
                path: "/panics",
                answer: Arc::new(|_: &HeaderMap| panic!("the answer broke")),
            },
        ];
        Served::new(router, paths, &Config::default()).unwrap()
    }

    async fn text(response: Response) -> String {
        let body = to_bytes(response.into_body(), 1 << 16).await.unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    fn request(method: Method, uri: &str, headers: &[(&str, &str)]) -> Request<Body> {
        let mut request = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn a_plain_get_of_a_fast_path_is_answered_with_what_every_answer_carries() {
        let served = served();
        let response = served
            .call(
                request(
                    Method::GET,
                    "/fast",
                    &[("origin", "http://localhost:3000"), ("x-echo", "1")],
                ),
                PEER,
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers().clone();
        assert_eq!(headers["x-echoed"], "1");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(
            headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
            "http://localhost:3000"
        );
        let id = headers["x-request-id"].to_str().unwrap();
        assert!(uuid::Uuid::parse_str(id).is_ok(), "a generated id: {id}");
        assert_eq!(text(response).await, "fast");

        // A client's request id is echoed; an origin not allowed is granted nothing.
        let response = served
            .call(
                request(
                    Method::GET,
                    "/fast",
                    &[("x-request-id", "abc-1"), ("origin", "http://evil.test")],
                ),
                PEER,
            )
            .await
            .unwrap();
        assert_eq!(response.headers()["x-request-id"], "abc-1");
        assert!(!response
            .headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
    }

    #[tokio::test]
    async fn everything_else_goes_to_the_router() {
        let served = served();
        for (method, uri) in [
            (Method::GET, "/fast?limit=1"),
            (Method::GET, "/fast?"),
            (Method::HEAD, "/fast"),
            (Method::POST, "/fast"),
            (Method::GET, "/fast/"),
            (Method::GET, "/declines"),
            (Method::GET, "/elsewhere"),
        ] {
            let response = served
                .call(request(method.clone(), uri, &[]), PEER)
                .await
                .unwrap();
            assert_eq!(response.headers()["x-routed"], "1", "{method} {uri}");
        }
    }

    #[tokio::test]
    async fn a_panicking_answer_is_the_error_envelope() {
        let response = served()
            .call(request(Method::GET, "/panics", &[]), PEER)
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(response.headers().contains_key("x-request-id"));
        let body: serde_json::Value = serde_json::from_str(&text(response).await).unwrap();
        assert_eq!(body["code"], 5, "{body}");
    }

    #[tokio::test]
    async fn fast_answers_are_counted_as_requests_of_their_route() {
        let served = served();
        let recorder = PrometheusBuilder::new().build_recorder();
        let metrics = recorder.handle();
        let answers = metrics::with_local_recorder(&recorder, || {
            // The answer is made when the request is handed over, before the future runs.
            [
                served.call(request(Method::GET, "/fast", &[]), PEER),
                served.call(request(Method::GET, "/fast", &[]), PEER),
            ]
        });
        for answer in answers {
            assert_eq!(answer.await.unwrap().status(), StatusCode::OK);
        }
        let text = metrics.render();
        let requests = text
            .lines()
            .find(|line| {
                line.starts_with("http_requests_total{")
                    && line.contains(r#"route="/fast""#)
                    && line.contains(r#"method="GET""#)
                    && line.contains(r#"status="200""#)
            })
            .unwrap_or_else(|| panic!("no series for /fast in:\n{text}"));
        assert!(requests.ends_with(" 2"), "{requests}");
    }
}
