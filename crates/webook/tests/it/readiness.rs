//! `/healthz` and `/readyz` against real backends: embedded, cluster (PostgreSQL + Redis), a
//! Redis that goes away and comes back, and a PostgreSQL that becomes unreachable (behind a TCP
//! proxy the test cuts): requests that need it fail fast with 503, the rest go on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    sync::Arc,
    time::{Duration, Instant},
};
use webook::schema::MIGRATIONS;

use platform::testing::{redis_url, wait_until, RedisServer, TcpProxy, TestDb};
use platform::{config::DatabaseKind, db::now_millis};
use reqwest::StatusCode;
use serde_json::json;
use webook::testing::{make_cluster, TestApp};

#[tokio::test]
async fn embedded_app_is_alive_and_ready_without_redis() {
    let app = TestApp::spawn(DatabaseKind::Sqlite).await;
    let (status, body) = app.get_json("/healthz").await;
    assert_eq!((status, body["code"].as_i64()), (StatusCode::OK, Some(0)));
    // Features report on `details`: the search index, ready once its (empty) rebuild is done;
    // the event consumer groups, `ok` while none is stuck or has parked events; the live
    // settings, the version applied (0: none ever stored).
    wait_until(
        "the search index is ready and the groups reported",
        || async {
            let details = app.get_json("/readyz").await.1["data"]["details"].clone();
            details["search"] == "ready" && details["events"] == "ok"
        },
    )
    .await;
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["data"],
        json!({"mode": "embedded", "database": "up", "redis": "not configured",
               "details": {"events": "ok", "live_settings": "version 0", "search": "ready"}})
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn cluster_app_on_postgres_and_redis_is_ready() {
    let db = TestDb::postgres(&MIGRATIONS).await;
    let app = TestApp::spawn_with(db, |config| make_cluster(config, redis_url())).await;
    wait_until(
        "the search index is ready and the groups reported",
        || async {
            let details = app.get_json("/readyz").await.1["data"]["details"].clone();
            details["search"] == "ready" && details["events"] == "ok"
        },
    )
    .await;
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["data"],
        json!({"mode": "cluster", "database": "up", "redis": "up",
               "details": {"events": "ok", "live_settings": "version 0", "search": "ready"}})
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn readiness_follows_redis_down_and_back_up_while_liveness_stays() {
    let mut redis = RedisServer::start().await;
    let db = TestDb::sqlite(&MIGRATIONS).await;
    let app = TestApp::spawn_with(db, |config| make_cluster(config, redis.url())).await;
    assert_eq!(app.get_json("/readyz").await.0, StatusCode::OK);

    redis.stop();
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], 5);
    assert_eq!(body["data"]["redis"], "down");
    assert_eq!(body["data"]["database"], "up");
    let (status, body) = app.get_json("/healthz").await;
    assert_eq!((status, body["code"].as_i64()), (StatusCode::OK, Some(0)));

    // The connection manager reconnects on its own once Redis is back.
    redis.restart().await;
    wait_until("readyz to recover after Redis restarts", || async {
        app.get_json("/readyz").await.0 == StatusCode::OK
    })
    .await;
    app.stop().await.unwrap();
}

#[tokio::test]
async fn readiness_reports_a_dead_database() {
    let db = TestDb::sqlite(&MIGRATIONS).await;
    let app = TestApp::spawn_with(db, |_| {}).await;
    app.platform.db.close().await;
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["data"]["database"], "down");
    assert_eq!(app.get_json("/healthz").await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_unreachable_requests_fail_fast_with_503_and_cached_reads_go_on() {
    let db = TestDb::postgres(&MIGRATIONS).await;
    let (proxy, through_proxy) = TcpProxy::for_url(&db.url).await;
    let app = TestApp::spawn_shared(Arc::new(db), |config| {
        config.database_url = Some(through_proxy);
    })
    .await;
    let client = &app.client;
    let call =
        |method: reqwest::Method, path: &str, token: &str, body: Option<serde_json::Value>| {
            let mut request = client
                .request(method, app.url(path))
                .header("user-agent", "proxy-test")
                .bearer_auth(token);
            if let Some(body) = body {
                request = request.json(&body);
            }
            async move {
                let started = Instant::now();
                let response = request.send().await.unwrap();
                let status = response.status();
                let body: serde_json::Value = response.json().await.unwrap();
                (status, body, started.elapsed())
            }
        };
    let credentials = json!({"email": "reader@example.com", "password": "hello#world1"});
    let signed_up = client
        .post(app.url("/users/signup"))
        .json(&json!({"email": "reader@example.com", "password": "hello#world1", "confirmPassword": "hello#world1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(signed_up.status(), StatusCode::OK);
    let login = client
        .post(app.url("/users/login"))
        .header("user-agent", "proxy-test")
        .json(&credentials)
        .send()
        .await
        .unwrap();
    let token = login.headers()["x-jwt-token"].to_str().unwrap().to_owned();
    let publish = |title: &'static str| {
        call(
            reqwest::Method::POST,
            "/articles/publish",
            &token,
            Some(json!({"title": title, "content": "<p>body</p>"})),
        )
    };
    let (status, body, _) = publish("before the outage").await;
    assert_eq!(
        (status, body["code"].as_i64()),
        (StatusCode::OK, Some(0)),
        "{body}"
    );
    let id = body["data"].as_i64().unwrap();
    let read = || {
        call(
            reqwest::Method::GET,
            &format!("/articles/pub/{id}"),
            &token,
            None,
        )
    };
    let (status, body, _) = read().await;
    assert_eq!(
        (status, body["code"].as_i64()),
        (StatusCode::OK, Some(0)),
        "{body}"
    );
    let now = now_millis();
    app.service::<webook::ranking::RankingService>()
        .compute((now, 1), now, |_| {}, || true)
        .await
        .unwrap();

    proxy.cut();
    // Writes and uncached reads: 503, code 5, fast; the first may wait out one acquire timeout
    // (1 s), the next ones find the circuit open.
    let mut durations = Vec::new();
    for attempt in 0..5 {
        let (status, body, took) = publish("during the outage").await;
        assert_eq!(
            (status, body["code"].as_i64()),
            (StatusCode::SERVICE_UNAVAILABLE, Some(5)),
            "attempt {attempt}: {body}"
        );
        durations.push(took);
    }
    let (status, body, took) = call(reqwest::Method::GET, "/users/profile", &token, None).await;
    assert_eq!(
        (status, body["code"].as_i64()),
        (StatusCode::SERVICE_UNAVAILABLE, Some(5)),
        "{body}"
    );
    durations.push(took);
    assert!(
        durations[0] < Duration::from_millis(1_500),
        "the first request waited {:?}",
        durations[0]
    );
    assert!(
        durations[1..]
            .iter()
            .all(|took| *took < Duration::from_millis(300)),
        "later requests did not fail fast: {durations:?}"
    );
    // What needs no database goes on: the cached article, the hot list, liveness.
    let (status, body, _) = read().await;
    assert_eq!(
        (status, body["code"].as_i64()),
        (StatusCode::OK, Some(0)),
        "{body}"
    );
    assert_eq!(app.get_json("/ranking/top").await.0, StatusCode::OK);
    assert_eq!(app.get_json("/healthz").await.0, StatusCode::OK);
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["data"]["database"], "down");

    proxy.restore().await;
    wait_until(
        "writes to succeed once PostgreSQL is reachable again",
        || async { publish("after the outage").await.1["code"] == 0 },
    )
    .await;
    app.stop().await.unwrap();
}
