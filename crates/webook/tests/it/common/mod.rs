//! Helpers shared by the HTTP integration tests: the four setups ({SQLite, PostgreSQL} ×
//! {embedded, Redis}), a request helper that keeps raw bodies, user sign-up/login, and a
//! withdrawal whose event no consumer can decode (for the parked-events tests).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

pub mod browser;
pub mod fake_sms;
pub mod fake_wechat;
pub mod fake_wechatpay;
pub mod process;

use platform::config::{Config, DatabaseKind};
use platform::testing::{redis_url, TestDb};
use reqwest::{header::HeaderMap, StatusCode};
use serde_json::{json, Value};
use webook::schema::MIGRATIONS;
use webook::testing::{make_cluster, TestApp};

pub const UA: &str = "Mozilla/5.0 (webook tests)";
pub const PASSWORD: &str = "hello#world1";

/// A small deterministic generator, so a failing chaos run can be replayed.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next value below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }

    /// The next index below `len`.
    pub fn pick(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).unwrap()
    }
}

/// Which database and which session store / rate limiter a test runs on.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub db: DatabaseKind,
    pub cluster: bool,
}

impl Setup {
    /// An app on a fresh database (and, with Redis, a fresh key prefix).
    pub async fn spawn(self, configure: impl FnOnce(&mut Config)) -> TestApp {
        let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
        self.spawn_on(self.database().await, &prefix, configure)
            .await
    }

    /// A fresh database of this setup's engine, to share between apps (restarts, instances).
    pub async fn database(self) -> std::sync::Arc<TestDb> {
        std::sync::Arc::new(TestDb::new(self.db, &MIGRATIONS).await)
    }

    /// An app on `db`; with Redis, under `redis_prefix` (apps sharing it share Redis state).
    pub async fn spawn_on(
        self,
        db: std::sync::Arc<TestDb>,
        redis_prefix: &str,
        configure: impl FnOnce(&mut Config),
    ) -> TestApp {
        TestApp::spawn_shared(db, |config| {
            if self.cluster {
                make_cluster(config, redis_url());
                config.redis_prefix = redis_prefix.to_owned();
            }
            configure(config);
        })
        .await
    }
}

/// One test body, four runs: {SQLite, PostgreSQL} × {embedded, Redis}.
#[macro_export]
macro_rules! setup_tests {
    ($($name:ident),+ $(,)?) => {
        setup_tests!(@mode sqlite_embedded, Sqlite, false, $($name),+);
        setup_tests!(@mode postgres_embedded, Postgres, false, $($name),+);
        setup_tests!(@mode sqlite_redis, Sqlite, true, $($name),+);
        setup_tests!(@mode postgres_redis, Postgres, true, $($name),+);
    };
    (@mode $module:ident, $db:ident, $cluster:expr, $($name:ident),+) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Setup { db: platform::config::DatabaseKind::$db, cluster: $cluster }).await
                }
            )+
        }
    };
}

/// A response, with its raw body kept for "no password hash anywhere" checks.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub raw: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.raw).unwrap_or_else(|_| panic!("not JSON: {}", self.raw))
    }

    pub fn status_and_code(&self) -> (StatusCode, i64) {
        (self.status, self.code())
    }

    pub fn code(&self) -> i64 {
        self.json()["code"].as_i64().unwrap()
    }

    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} header"))
            .to_str()
            .unwrap()
            .to_owned()
    }
}

pub async fn call(
    app: &TestApp,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    user_agent: &str,
    body: Option<Value>,
) -> Answer {
    let mut request = app
        .client
        .request(method, app.url(path))
        .header(reqwest::header::USER_AGENT, user_agent);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let answer = Answer {
        status: response.status(),
        headers: response.headers().clone(),
        raw: response.text().await.unwrap(),
    };
    assert!(
        !answer.raw.contains("$argon2"),
        "a response leaked a password hash: {}",
        answer.raw
    );
    answer
}

pub async fn post(app: &TestApp, path: &str, token: Option<&str>, body: Value) -> Answer {
    call(app, reqwest::Method::POST, path, token, UA, Some(body)).await
}

pub async fn get(app: &TestApp, path: &str, token: Option<&str>) -> Answer {
    call(app, reqwest::Method::GET, path, token, UA, None).await
}

pub async fn signup(app: &TestApp, email: &str) -> Answer {
    post(
        app,
        "/users/signup",
        None,
        json!({"email": email, "password": PASSWORD, "confirmPassword": PASSWORD}),
    )
    .await
}

/// Logs in; returns (access token, refresh token).
pub async fn login(app: &TestApp, email: &str) -> (String, String) {
    let answer = post(
        app,
        "/users/login",
        None,
        json!({"email": email, "password": PASSWORD}),
    )
    .await;
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::OK, 0),
        "{}",
        answer.raw
    );
    (
        answer.header("x-jwt-token"),
        answer.header("x-refresh-token"),
    )
}

pub async fn refresh(app: &TestApp, refresh_token: &str) -> Answer {
    call(
        app,
        reqwest::Method::POST,
        "/users/refresh_token",
        Some(refresh_token),
        UA,
        None,
    )
    .await
}

/// The JSON envelope of a request made without a `TestApp` at hand (from a spawned task that
/// owns a client and the base URL): `method` on `base` + `path` as `token`'s holder.
pub async fn envelope(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<&Value>,
) -> Value {
    let mut request = client
        .request(method, url)
        .bearer_auth(token)
        .header(reqwest::header::USER_AGENT, UA);
    if let Some(body) = body {
        request = request.json(body);
    }
    request.send().await.unwrap().json().await.unwrap()
}

/// Every item of a paged list, page by page: `page(cursor)` answers one page's `data`
/// (`{items, next}`); stops when `next` is absent. Checks no page exceeds `limit`.
pub async fn every_page(
    limit: usize,
    mut page: impl AsyncFnMut(Option<String>) -> Value,
) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let data = page(cursor.take()).await;
        let items = data["items"].as_array().unwrap();
        assert!(items.len() <= limit, "a page longer than {limit}");
        all.extend(items.iter().cloned());
        match data["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return all,
        }
    }
}

/// A signed-up, logged-in user.
pub struct Member {
    pub token: String,
    pub uid: i64,
}

/// Signs `name` up (as `name@webook.test`) and logs in.
pub async fn member(app: &TestApp, name: &str) -> Member {
    let email = format!("{name}@webook.test");
    assert_eq!(signup(app, &email).await.code(), 0);
    let token = login(app, &email).await.0;
    let profile = get(app, "/users/profile", Some(&token)).await;
    let uid = profile.json()["Id"].as_i64().unwrap();
    Member { token, uid }
}

/// `count` members named `prefix0`, `prefix1`, …
pub async fn members(app: &TestApp, prefix: &str, count: usize) -> Vec<Member> {
    let mut all = Vec::with_capacity(count);
    for n in 0..count {
        all.push(member(app, &format!("{prefix}{n}")).await);
    }
    all
}

/// Publishes an article titled `title` by `author`; returns its id.
pub async fn publish(app: &TestApp, author: &Member, title: &str) -> i64 {
    let answer = post(
        app,
        "/articles/publish",
        Some(&author.token),
        json!({"title": title, "content": format!("<p>{title}</p>")}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].as_i64().unwrap()
}

/// Two cluster-mode instances sharing one PostgreSQL database and one Redis key space, as two
/// instances behind a load balancer would; `configure` adjusts both configs.
pub async fn cluster_pair(configure: impl Fn(&mut Config)) -> (TestApp, TestApp) {
    let db = std::sync::Arc::new(TestDb::postgres(&MIGRATIONS).await);
    let redis = redis_url();
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let configure = |config: &mut Config| {
        make_cluster(config, redis.clone());
        config.redis_prefix = prefix.clone();
        configure(config);
    };
    let first = TestApp::spawn_shared(db.clone(), configure).await;
    let second = TestApp::spawn_shared(db, configure).await;
    (first, second)
}

/// The keys of a JSON object, sorted: for asserting a response's exact shape.
pub fn sorted_keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value
        .as_object()
        .expect("a JSON object")
        .keys()
        .cloned()
        .collect();
    keys.sort_unstable();
    keys
}

/// The SQLite database of a `webook` process started with [`process::webook`] in `dir`, opened
/// beside it as `webook jobs …` would open it.
pub async fn embedded_db(dir: &std::path::Path) -> platform::db::Db {
    let url = format!("sqlite://{}", dir.join("data").join("webook.db").display());
    platform::db::Db::connect_url(&url, 2).await.unwrap()
}

/// Withdraws article `id` the way a writer with a bug would: both copies private and, in the
/// same transaction, an `article_withdrawn` event whose payload is the JSON string
/// `"not json"` instead of `{id, author, time}`. The relay of the process serving `db` finds the
/// row by itself (it polls every 500 ms); the groups consuming the topic (`ranking`, `feed`)
/// cannot decode it — a permanent failure — and park it after 3 tries (search skips it).
pub async fn withdraw_with_a_garbled_event(db: &platform::db::Db, id: i64) {
    let now = platform::db::now_millis();
    let mut tx = db.writer().begin().await.unwrap();
    for table in ["articles", "published_articles"] {
        let changed = sqlx::query(&format!(
            "UPDATE {table} SET status = 3, utime = $1 WHERE id = $2"
        ))
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await
        .unwrap()
        .rows_affected();
        assert_eq!(changed, 1, "article {id} in {table}");
    }
    platform::events::outbox::record(
        &mut tx,
        "article_withdrawn",
        &id.to_string(),
        &"not json",
        now,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

/// The payload the garbled event of [`withdraw_with_a_garbled_event`] should have had.
pub fn withdrawal_payload(id: i64, author: i64) -> String {
    json!({"id": id, "author": author, "time": platform::db::now_millis()}).to_string()
}

/// "Fixes" parked event `parked_id` (a row of `event_parked`) by giving it `payload`: what an
/// operator's repair of the writer's bug amounts to, before the replay.
pub async fn repair_parked_payload(db: &platform::db::Db, parked_id: i64, payload: &str) {
    let changed = sqlx::query("UPDATE event_parked SET payload = $1 WHERE id = $2")
        .bind(payload)
        .bind(parked_id)
        .execute(db.writer())
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(changed, 1, "parked event {parked_id}");
}

/// A `webook` command's output, expected to succeed: its stdout.
#[track_caller]
pub fn cli_succeeded(output: std::process::Output, args: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{args:?} failed: {stderr}");
    String::from_utf8(output.stdout).unwrap()
}

/// A `webook` command's output, expected to be refused: its one `error: …` line (exit code 1,
/// nothing on stdout).
#[track_caller]
pub fn cli_refused(output: std::process::Output, args: &[&str]) -> String {
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(output.stdout.is_empty(), "{args:?} printed on stdout");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one clear line, got: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    stderr
}

/// A CLI table's rows as cells (columns are at least two spaces apart; cells have single ones).
pub fn table_cells(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|line| {
            line.split("  ")
                .map(str::trim)
                .filter(|cell| !cell.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .collect()
}
