//! `/healthz` and `/readyz` against real backends: embedded, cluster (PostgreSQL + Redis), a
//! Redis that goes away and comes back, and a PostgreSQL that becomes unreachable (behind a TCP
//! proxy the test cuts): requests that need it fail fast with 503, the rest go on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use reqwest::StatusCode;
use serde_json::json;
use tokio::{net::TcpListener, task::JoinHandle};
use webook::{
    config::DatabaseKind,
    infra::db::now_millis,
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

/// A TCP proxy in front of a server, which the test can cut (the listener and every connection
/// dropped: new connections are refused, open ones end) and restore on the same address.
struct Proxy {
    address: SocketAddr,
    target: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = Self {
            address: listener.local_addr().unwrap(),
            target,
            tasks: Arc::new(Mutex::new(Vec::new())),
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let (target, tasks) = (self.target, self.tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let pipe = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                tasks.lock().unwrap().push(pipe);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }

    fn cut(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    async fn restore(&self) {
        let listener = TcpListener::bind(self.address).await.unwrap();
        self.serve(listener);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_unreachable_requests_fail_fast_with_503_and_cached_reads_go_on() {
    let db = TestDb::postgres().await;
    let mut through_proxy = url::Url::parse(&db.url).unwrap();
    let target: SocketAddr = format!(
        "{}:{}",
        through_proxy.host_str().unwrap(),
        through_proxy.port().unwrap()
    )
    .parse()
    .unwrap();
    let proxy = Proxy::start(target).await;
    through_proxy.set_port(Some(proxy.address.port())).unwrap();
    let app = TestApp::spawn_shared(Arc::new(db), |config| {
        config.database_url = Some(through_proxy.to_string());
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
    app.state
        .ranking
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
