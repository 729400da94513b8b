//! The HTTP conventions of API.md, through the real middleware stack: the envelope, the error
//! mapping (unknown route, bad JSON, oversize body, panic, timeout), CORS, request ids, metrics
//! (including requests the client abandoned, counted as 499).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{net::SocketAddr, time::Duration};
use webook::schema::MIGRATIONS;

use axum::{routing::post, Router};
use platform::testing::wait_until;
use platform::{
    config::{Config, DatabaseKind},
    error::{ApiJson, Reply},
    http::with_middleware,
    telemetry,
};
use reqwest::{header, StatusCode};
use serde_json::{json, Value};
use webook::testing::TestApp;

/// Serves `routes` behind the production middleware with `config`; returns the base URL.
async fn serve(routes: Router, config: &Config) -> String {
    // As the app installs the recorder: `with_middleware` alone would install it without the
    // features' buckets for every other test of the process, were it first.
    telemetry::install_metrics(&webook::app::metrics()).unwrap();
    let router = with_middleware(routes, config).unwrap();
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

fn probe_routes() -> Router {
    Router::new()
        .route(
            "/echo",
            post(|ApiJson(body): ApiJson<Value>| async move { Reply(body) }),
        )
        .route(
            "/typed",
            post(|ApiJson(body): ApiJson<Typed>| async move { Reply(body.id) }),
        )
        .route(
            "/panic",
            post(|| async {
                if true {
                    panic!("handler bug");
                }
                Reply(())
            }),
        )
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                Reply(())
            }),
        )
}

#[derive(serde::Deserialize)]
struct Typed {
    id: i64,
}

fn small_config() -> Config {
    Config {
        body_limit_bytes: 1024,
        request_timeout: Duration::from_millis(200),
        ..Config::default()
    }
}

async fn body(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text:?}"));
    (status, value)
}

#[tokio::test]
async fn valid_json_is_answered_in_the_envelope() {
    let base = serve(probe_routes(), &small_config()).await;
    let client = reqwest::Client::new();
    let (status, value) = body(
        client
            .post(format!("{base}/echo"))
            .json(&json!({"hello": "世界"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        value,
        json!({"code": 0, "msg": "ok", "data": {"hello": "世界"}})
    );
}

#[tokio::test]
async fn malformed_mistyped_and_oversize_bodies_answer_400_code_4() {
    let base = serve(probe_routes(), &small_config()).await;
    let client = reqwest::Client::new();
    let send = |path: &str, body: String| {
        client
            .post(format!("{base}{path}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
    };

    let (status, value) = body(send("/echo", "{not json".into()).await.unwrap()).await;
    assert_eq!(
        (status, value["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(4))
    );
    assert!(
        value["msg"].as_str().unwrap().contains("not valid JSON"),
        "{value}"
    );

    let (status, value) = body(send("/typed", r#"{"id":"seven"}"#.into()).await.unwrap()).await;
    assert_eq!(
        (status, value["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(4))
    );
    assert!(
        value["msg"].as_str().unwrap().contains("id"),
        "names the field: {value}"
    );

    let oversize = format!(r#"{{"pad":"{}"}}"#, "x".repeat(4096));
    let (status, value) = body(send("/echo", oversize).await.unwrap()).await;
    assert_eq!(
        (status, value["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(4))
    );
    assert!(
        value["msg"].as_str().unwrap().contains("too large"),
        "{value}"
    );

    let response = client
        .post(format!("{base}/echo"))
        .header(header::CONTENT_TYPE, "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    let (status, value) = body(response).await;
    assert_eq!(
        (status, value["code"].as_i64()),
        (StatusCode::BAD_REQUEST, Some(4))
    );
}

#[tokio::test]
async fn a_panicking_handler_answers_500_in_the_envelope_and_the_server_lives_on() {
    let base = serve(probe_routes(), &small_config()).await;
    let client = reqwest::Client::new();
    let (status, value) = body(client.post(format!("{base}/panic")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        value,
        json!({"code": 5, "msg": "system error", "data": null})
    );
    let (status, _) = body(
        client
            .post(format!("{base}/echo"))
            .json(&json!(1))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_request_past_the_timeout_answers_503_code_5() {
    let base = serve(probe_routes(), &small_config()).await;
    let (status, value) = body(
        reqwest::Client::new()
            .post(format!("{base}/slow"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(value["code"], 5);
    assert_eq!(value["msg"], "request timed out");
}

#[tokio::test]
async fn a_request_the_client_abandons_is_counted_as_499() {
    let config = Config {
        request_timeout: Duration::from_secs(30),
        ..small_config()
    };
    let base = serve(probe_routes(), &config).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let err = client
        .post(format!("{base}/slow"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    let metrics = telemetry::metrics_handle().unwrap();
    wait_until("the abandoned request counted as 499", || async {
        metrics
            .render()
            .contains(r#"http_requests_total{method="POST",route="/slow",status="499"}"#)
    })
    .await;
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_envelope() {
    let base = serve(probe_routes(), &small_config()).await;
    let client = reqwest::Client::new();
    let (status, value) = body(client.get(format!("{base}/nope")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(value["code"], 404001);
    let (status, value) = body(client.get(format!("{base}/echo")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(value["code"], 4);
}

#[tokio::test]
async fn cors_preflight_allows_the_frontend_and_exposes_token_headers() {
    let base = serve(probe_routes(), &small_config()).await;
    let client = reqwest::Client::new();
    let preflight = client
        .request(reqwest::Method::OPTIONS, format!("{base}/echo"))
        .header(header::ORIGIN, "http://localhost:3000")
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(
            header::ACCESS_CONTROL_REQUEST_HEADERS,
            "content-type,authorization",
        )
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    let headers = preflight.headers();
    assert_eq!(
        headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "http://localhost:3000"
    );
    assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
    let allowed = headers[header::ACCESS_CONTROL_ALLOW_HEADERS]
        .to_str()
        .unwrap()
        .to_lowercase();
    assert!(
        allowed.contains("authorization") && allowed.contains("content-type"),
        "{allowed}"
    );

    let actual = client
        .post(format!("{base}/echo"))
        .header(header::ORIGIN, "http://localhost:3000")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    let exposed = actual.headers()[header::ACCESS_CONTROL_EXPOSE_HEADERS]
        .to_str()
        .unwrap();
    assert!(
        exposed.contains("x-jwt-token") && exposed.contains("x-refresh-token"),
        "{exposed}"
    );

    let foreign = client
        .post(format!("{base}/echo"))
        .header(header::ORIGIN, "http://evil.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert!(foreign
        .headers()
        .get(header::ACCESS_CONTROL_ALLOW_ORIGIN)
        .is_none());
}

#[test]
fn a_wildcard_cors_origin_is_refused_at_start() {
    let config = Config {
        cors_origins: vec!["*".into()],
        ..Config::default()
    };
    let err = with_middleware(Router::new(), &config)
        .unwrap_err()
        .to_string();
    assert!(err.contains("cors_origins"), "{err}");
}

#[tokio::test]
async fn request_ids_are_generated_or_propagated() {
    let base = serve(probe_routes(), &small_config()).await;
    let client = reqwest::Client::new();
    let generated = client.get(format!("{base}/nope")).send().await.unwrap();
    let id = generated.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let propagated = client
        .get(format!("{base}/nope"))
        .header("x-request-id", "trace-me-42")
        .send()
        .await
        .unwrap();
    assert_eq!(propagated.headers()["x-request-id"], "trace-me-42");
}

#[tokio::test]
async fn large_responses_are_compressed_when_the_client_accepts_it() {
    let base = serve(probe_routes(), &small_config()).await;
    let sent = json!({"text": "webook ".repeat(100)});
    let response = reqwest::Client::new()
        .post(format!("{base}/echo"))
        .header(header::ACCEPT_ENCODING, "gzip")
        .json(&sent)
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()[header::CONTENT_ENCODING], "gzip");
    let compressed = response.bytes().await.unwrap();
    let mut decoded = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&compressed[..]),
        &mut decoded,
    )
    .unwrap();
    assert!(
        compressed.len() < decoded.len() / 4,
        "{} bytes of {}",
        compressed.len(),
        decoded.len()
    );
    let envelope: Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(envelope["data"], sent);
}

#[tokio::test]
async fn metrics_count_requests_by_route_pattern_and_status() {
    let app = TestApp::spawn(DatabaseKind::Sqlite).await;
    for _ in 0..3 {
        app.get_json("/healthz").await;
    }
    app.get_json("/no/such/route").await;
    let text = app.metrics_text().await;
    let count_of = |series: &str| -> f64 {
        text.lines()
            .find(|line| line.starts_with(series))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no series {series} in:\n{text}"))
    };
    // Other tests in this binary share the registry, so assert lower bounds.
    assert!(count_of(r#"http_requests_total{method="GET",route="/healthz",status="200"}"#) >= 3.0);
    assert!(count_of(r#"http_requests_total{method="GET",route="unmatched",status="404"}"#) >= 1.0);
    assert!(
        text.contains("http_request_duration_seconds_bucket{"),
        "{text}"
    );
    assert!(text.contains(telemetry::HTTP_REQUESTS_IN_FLIGHT));
    app.stop().await.unwrap();
}

#[tokio::test]
async fn errors_speak_the_requested_language_and_no_answer_can_be_sniffed() {
    let base = serve(probe_routes(), &small_config()).await;
    let client = reqwest::Client::new();
    let bad_json = |language: Option<&'static str>| {
        let mut request = client
            .post(format!("{base}/echo"))
            .header(header::CONTENT_TYPE, "application/json")
            .body("{nope");
        if let Some(language) = language {
            request = request.header(header::ACCEPT_LANGUAGE, language);
        }
        request.send()
    };
    for (language, msg) in [
        (None, "request body is not valid JSON"),
        (Some("en-US,en;q=0.9"), "request body is not valid JSON"),
        (Some("zh-CN,zh;q=0.9,en;q=0.8"), "请求体不是合法的 JSON"),
    ] {
        let response = bad_json(language).await.unwrap();
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
        let (status, body) = body(response).await;
        assert_eq!(
            (status, body["code"].as_i64()),
            (StatusCode::BAD_REQUEST, Some(4))
        );
        assert_eq!(body["msg"], msg, "{language:?}");
    }
    let response = client
        .get(format!("{base}/nowhere"))
        .header(header::ACCEPT_LANGUAGE, "zh")
        .send()
        .await
        .unwrap();
    let (status, body) = body(response).await;
    assert_eq!(
        (status, body["code"].as_i64()),
        (StatusCode::NOT_FOUND, Some(404001))
    );
    assert_eq!(body["msg"], "没有这个接口");
    let response = client
        .post(format!("{base}/echo"))
        .json(&json!({"a": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
}

#[tokio::test]
async fn ops_listen_serves_metrics_apart_from_the_api() {
    let app = TestApp::spawn_with(
        platform::testing::TestDb::sqlite(&MIGRATIONS).await,
        |config| {
            config.ops_listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        },
    )
    .await;
    let ops = app.ops_addr.expect("ops_listen bound");
    let api_metrics = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(
        api_metrics.status(),
        StatusCode::NOT_FOUND,
        "no /metrics on the API port"
    );
    let metrics = app
        .client
        .get(format!("http://{ops}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    assert!(metrics
        .text()
        .await
        .unwrap()
        .contains("http_requests_total"));
    for base in [format!("http://{ops}"), format!("http://{}", app.addr)] {
        let response = app
            .client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{base}");
    }
    app.stop().await.unwrap();
}
