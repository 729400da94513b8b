//! `/healthz` and `/readyz` against real backends: embedded, cluster (PostgreSQL + Redis), and a
//! Redis that goes away and comes back.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use reqwest::StatusCode;
use serde_json::json;
use webook::{
    config::DatabaseKind,
    testing::{make_cluster, redis_url, wait_until, RedisServer, TestApp, TestDb},
};

#[tokio::test]
async fn embedded_app_is_alive_and_ready_without_redis() {
    let app = TestApp::spawn(DatabaseKind::Sqlite).await;
    let (status, body) = app.get_json("/healthz").await;
    assert_eq!((status, body["code"].as_i64()), (StatusCode::OK, Some(0)));
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["data"],
        json!({"mode": "embedded", "database": "up", "redis": "not configured"})
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn cluster_app_on_postgres_and_redis_is_ready() {
    let db = TestDb::postgres().await;
    let app = TestApp::spawn_with(db, |config| make_cluster(config, redis_url())).await;
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["data"],
        json!({"mode": "cluster", "database": "up", "redis": "up"})
    );
    app.stop().await.unwrap();
}

#[tokio::test]
async fn readiness_follows_redis_down_and_back_up_while_liveness_stays() {
    let mut redis = RedisServer::start().await;
    let db = TestDb::sqlite().await;
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
    let db = TestDb::sqlite().await;
    let app = TestApp::spawn_with(db, |_| {}).await;
    app.state.db.close().await;
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["data"]["database"], "down");
    assert_eq!(app.get_json("/healthz").await.0, StatusCode::OK);
}
