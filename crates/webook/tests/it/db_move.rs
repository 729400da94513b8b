//! The online database move (`/admin/db-move…`): an embedded webook on SQLite moves to a fresh
//! PostgreSQL while readers, likers, commenters, followers and authors keep using it, then
//! restarts on PostgreSQL + Redis with the same data; and validation finds and the guarded
//! fixer mends differences injected on the destination.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    collections::BTreeMap,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc,
    },
};

use serde_json::{json, Value};
use sqlx::{any::AnyPoolOptions, AnyPool, Row};

use crate::common::{self, get, login, members, post, publish, signup, Member};
use platform::testing::{redis_url, wait_until, EmptyPostgres, TestDb};
use webook::{
    schema::MIGRATIONS,
    testing::{make_cluster, TestApp},
};

const ADMIN: &str = "root@example.com";

/// An embedded app on a fresh SQLite whose admin is user 1; the app and the admin's token.
async fn embedded_with_admin() -> (TestApp, String) {
    let app = embedded_on(Arc::new(TestDb::sqlite(&MIGRATIONS).await)).await;
    assert_eq!(signup(&app, ADMIN).await.code(), 0);
    let (token, _) = login(&app, ADMIN).await;
    (app, token)
}

/// An embedded app on `db` (admin: user 1; no write limits, for the load).
async fn embedded_on(db: Arc<TestDb>) -> TestApp {
    TestApp::spawn_shared(db, |config| {
        let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
        auth.admins = vec![1];
        auth.write_rate_limit = 0;
        config
            .settings_mut::<webook::comment::settings::CommentSettings>()
            .comment_rate_limit = 0;
    })
    .await
}

async fn move_status(app: &TestApp, admin: &str) -> Value {
    let answer = get(app, "/admin/db-move", Some(admin)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].clone()
}

/// Posts a move operation that must be accepted; returns the status it answers.
async fn operate(app: &TestApp, admin: &str, path: &str, body: Value) -> Value {
    let answer = post(app, path, Some(admin), body).await;
    assert_eq!(answer.code(), 0, "{path}: {}", answer.raw);
    answer.json()["data"].clone()
}

/// Waits until the move's task `kind` is done (a failed one fails the test); returns the status.
async fn task_done(app: &TestApp, admin: &str, kind: &str) -> Value {
    wait_until(&format!("the move's {kind} to finish"), || {
        let app = &app;
        async {
            let status = move_status(app, admin).await;
            let task = &status["task"];
            assert_ne!(task["state"], "failed", "{kind}: {status}");
            task["kind"] == kind && task["state"] == "done"
        }
    })
    .await;
    move_status(app, admin).await
}

/// Waits until nothing captured is left to copy across, either way.
async fn drained(app: &TestApp, admin: &str) {
    wait_until("the change logs to drain", || async {
        let status = move_status(app, admin).await;
        status["pending"]["source"] == 0 && status["pending"]["destination"] == 0
    })
    .await;
}

/// Every row of every moved table on `pool`, by table, in key order (as text, engine-neutral).
async fn every_row(pool: &AnyPool, tables: &[MovedTable]) -> BTreeMap<String, Vec<String>> {
    let mut all = BTreeMap::new();
    for MovedTable {
        name: table,
        key,
        columns,
    } in tables
    {
        let rows = sqlx::query(&format!("SELECT {columns} FROM {table} ORDER BY {key}"))
            .fetch_all(pool)
            .await
            .unwrap();
        let text = rows
            .iter()
            .map(|row| {
                (0..row.len())
                    .map(|index| {
                        row.try_get::<Option<i64>, _>(index)
                            .map(|value| format!("{value:?}"))
                            .or_else(|_| {
                                row.try_get::<Option<String>, _>(index)
                                    .map(|v| format!("{v:?}"))
                            })
                            .or_else(|_| {
                                row.try_get::<Option<f64>, _>(index)
                                    .map(|v| format!("{v:?}"))
                            })
                            .unwrap_or_else(|_| "?".to_owned())
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect();
        all.insert(table.clone(), text);
    }
    all
}

/// A table to compare: its name, key columns and every column (comma-separated).
#[derive(Debug)]
struct MovedTable {
    name: String,
    key: String,
    columns: String,
}

/// The application's tables with their key columns (as the move sees them), from SQLite.
async fn moved_tables(sqlite: &AnyPool) -> Vec<MovedTable> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         AND name NOT LIKE 'db_move%' AND name <> '_sqlx_migrations' ORDER BY name",
    )
    .fetch_all(sqlite)
    .await
    .unwrap();
    let mut tables = Vec::new();
    for name in names {
        let keys: Vec<String> =
            sqlx::query_scalar("SELECT name FROM pragma_table_info($1) WHERE pk > 0 ORDER BY pk")
                .bind(&name)
                .fetch_all(sqlite)
                .await
                .unwrap();
        let columns: Vec<String> =
            sqlx::query_scalar("SELECT name FROM pragma_table_info($1) ORDER BY name")
                .bind(&name)
                .fetch_all(sqlite)
                .await
                .unwrap();
        tables.push(MovedTable {
            name,
            key: keys.join(", "),
            columns: columns.join(", "),
        });
    }
    tables
}

async fn pool(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    AnyPoolOptions::new()
        .max_connections(2)
        .connect(&platform::db::connect_url(url).unwrap())
        .await
        .unwrap()
}

/// Mixed traffic until `stop`: reads, like toggles, comments, follows, publishes. Counts every
/// request and every failure (anything but HTTP 200 with code 0).
struct Load {
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    failures: Arc<std::sync::Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(app: &Arc<TestApp>, people: &[Member], articles: &[i64]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (worker, person) in people.iter().enumerate() {
            let (app, stop, requests, failures) = (
                app.clone(),
                stop.clone(),
                requests.clone(),
                failures.clone(),
            );
            let person = Member {
                token: person.token.clone(),
                uid: person.uid,
            };
            let others: Vec<i64> = people
                .iter()
                .map(|p| p.uid)
                .filter(|&uid| uid != person.uid)
                .collect();
            let articles = articles.to_vec();
            tasks.push(tokio::spawn(async move {
                let mut round = 0usize;
                while !stop.load(Ordering::Acquire) {
                    round += 1;
                    let article = articles[(round * 7 + worker) % articles.len()];
                    let kind = round % 10;
                    let answer = match kind {
                        0 => {
                            post(&app, "/articles/publish", Some(&person.token),
                                json!({"title": format!("during the move {worker}-{round}"), "content": "<p>moving</p>"})).await
                        }
                        1 | 2 => {
                            post(&app, "/articles/pub/like", Some(&person.token),
                                json!({"id": article, "like": round % 4 < 2})).await
                        }
                        3 => {
                            post(&app, "/comments", Some(&person.token),
                                json!({"biz": "article", "bizId": article, "content": format!("comment {round}")})).await
                        }
                        4 => {
                            let whom = others[round % others.len()];
                            let path = if round % 8 < 4 { "/follow/follow" } else { "/follow/cancel" };
                            post(&app, path, Some(&person.token), json!({"followee": whom})).await
                        }
                        _ => get(&app, &format!("/articles/pub/{article}"), Some(&person.token)).await,
                    };
                    requests.fetch_add(1, Ordering::Relaxed);
                    if answer.status_and_code() != (reqwest::StatusCode::OK, 0) {
                        failures.lock().unwrap().push(format!("request kind {kind}: {}", answer.raw));
                    }
                }
            }));
        }
        Self {
            stop,
            requests,
            failures,
            tasks,
        }
    }

    /// Waits until at least `more` further requests were answered.
    async fn progress(&self, more: u64) {
        let from = self.requests.load(Ordering::Relaxed);
        wait_until("traffic to go on", || async {
            self.requests.load(Ordering::Relaxed) >= from + more
        })
        .await;
    }

    async fn stop(self) -> (u64, Vec<String>) {
        self.stop.store(true, Ordering::Release);
        for task in self.tasks {
            task.await.unwrap();
        }
        let failures = self.failures.lock().unwrap().clone();
        (self.requests.load(Ordering::Relaxed), failures)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_site_moves_to_postgresql_under_load_and_restarts_there() {
    let (app, admin) = embedded_with_admin().await;
    let app = Arc::new(app);
    let people = members(&app, "mover", 4).await;
    let mut articles = Vec::new();
    for (index, author) in people.iter().enumerate() {
        for n in 0..3 {
            articles.push(publish(&app, author, &format!("before the move {index}-{n}")).await);
        }
    }
    let destination = TestDb::empty_postgres().await;
    let sqlite_url = app.platform.config.database_url();

    let load = Load::start(&app, &people, &articles);
    load.progress(50).await;

    // Start: the destination is migrated, capture installed, the copy runs in the background.
    let started = operate(
        &app,
        &admin,
        "/admin/db-move/start",
        json!({"destination": destination.url}),
    )
    .await;
    assert_eq!(started["phase"], "SrcOnly");
    assert!(
        started["destination"]
            .as_str()
            .unwrap()
            .starts_with("postgres"),
        "{started}"
    );
    let switched = operate(
        &app,
        &admin,
        "/admin/db-move/switch",
        json!({"phase": "SrcFirst"}),
    )
    .await;
    assert_eq!(switched["phase"], "SrcFirst");
    let copied = task_done(&app, &admin, "copy").await;
    assert!(
        copied["tables"]
            .as_array()
            .unwrap()
            .iter()
            .all(|table| table["done"] == true),
        "{copied}"
    );
    let articles_progress = copied["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "articles")
        .unwrap()
        .clone();
    assert!(
        articles_progress["copied"].as_i64().unwrap() >= 12,
        "{articles_progress}"
    );
    load.progress(50).await;

    // The destination becomes authoritative only after a full validation in SrcFirst.
    let refused = post(
        &app,
        "/admin/db-move/switch",
        Some(&admin),
        json!({"phase": "DstFirst"}),
    )
    .await;
    assert_eq!(refused.code(), 4, "{}", refused.raw);
    assert!(refused.raw.contains("no validation"), "{}", refused.raw);

    // Differences the copy raced with are found and fixed while the load goes on; the switch
    // compares them again in its pause.
    operate(&app, &admin, "/admin/db-move/validate", json!({})).await;
    task_done(&app, &admin, "validate").await;
    operate(&app, &admin, "/admin/db-move/fix", json!({})).await;
    task_done(&app, &admin, "fix").await;
    // A skipped neighbour is refused.
    let refused = post(
        &app,
        "/admin/db-move/switch",
        Some(&admin),
        json!({"phase": "DstOnly"}),
    )
    .await;
    assert_eq!(refused.code(), 4, "{}", refused.raw);

    let switched = operate(
        &app,
        &admin,
        "/admin/db-move/switch",
        json!({"phase": "DstFirst"}),
    )
    .await;
    assert_eq!(switched["phase"], "DstFirst");
    assert!(
        app.platform.db.kind() == platform::config::DatabaseKind::Postgres,
        "routed to PostgreSQL"
    );
    load.progress(100).await;
    let (requests, failures) = load.stop().await;
    assert!(
        failures.is_empty(),
        "{} of {requests} requests failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(requests >= 200, "{requests}");

    // Everything written is on both sides: validation finds nothing, and row by row they agree.
    // First every consumer group passes the last events and the relay trims them (embedded,
    // positions are recorded within 250 ms and trimmed within a second): their deletions are
    // changes to copy too.
    wait_until(
        "every group to pass its events and the outbox to be trimmed",
        || async {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM event_outbox")
                .fetch_one(app.platform.db.pool())
                .await
                .is_ok_and(|rows| rows == 0)
        },
    )
    .await;
    drained(&app, &admin).await;
    operate(&app, &admin, "/admin/db-move/validate", json!({})).await;
    let validated = task_done(&app, &admin, "validate").await;
    let findings = get(&app, "/admin/db-move/findings?limit=200", Some(&admin)).await;
    assert_eq!(validated["validation"]["findings"], 0, "{}", findings.raw);
    assert!(
        validated["validation"]["checked"].as_i64().unwrap() > 100,
        "{validated}"
    );
    let (sqlite, postgres) = (pool(&sqlite_url).await, pool(&destination.url).await);
    let tables = moved_tables(&sqlite).await;
    assert!(tables.len() > 20, "{tables:?}");
    // The process keeps writing on its own (its `instances` row, every 10 s): a write that
    // lands between reading one side and the other is a difference until it is replicated, a
    // few ms later. So the sides are read until they agree (at most WAIT_LIMIT); a difference
    // that stays fails below, naming its table.
    let limit = std::time::Instant::now() + platform::testing::WAIT_LIMIT;
    let (left, right) = loop {
        let sides = (
            every_row(&sqlite, &tables).await,
            every_row(&postgres, &tables).await,
        );
        if sides.0 == sides.1 || std::time::Instant::now() >= limit {
            break sides;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    for (table, rows) in &left {
        assert_eq!(Some(rows), right.get(table), "table {table} differs");
    }

    // DstOnly, finish: the process serves from PostgreSQL alone.
    operate(
        &app,
        &admin,
        "/admin/db-move/switch",
        json!({"phase": "DstOnly"}),
    )
    .await;
    let finished = operate(&app, &admin, "/admin/db-move/finish", json!({})).await;
    let restart_with = finished["restartWith"].as_str().unwrap().to_owned();
    assert!(
        restart_with.starts_with("database_url = \"postgres://"),
        "{restart_with}"
    );
    let late = publish(&app, &people[0], "after the move").await;
    let on_postgres: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM articles WHERE id = $1")
        .bind(late)
        .fetch_one(&postgres)
        .await
        .unwrap();
    let on_sqlite: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM articles WHERE id = $1")
        .bind(late)
        .fetch_one(&sqlite)
        .await
        .unwrap();
    assert_eq!(
        (on_postgres, on_sqlite),
        (1, 0),
        "written to PostgreSQL only"
    );
    let ids_are_fresh: i64 = sqlx::query_scalar("SELECT MAX(id) FROM articles")
        .fetch_one(&postgres)
        .await
        .unwrap();
    assert_eq!(
        ids_are_fresh, late,
        "the sequence went on after the copied ids"
    );

    // Restarted on PostgreSQL + Redis, the same data.
    let article_views = {
        let mut views = Vec::new();
        for id in articles.iter().copied().chain([late]) {
            let answer = get(&app, &format!("/articles/pub/{id}"), Some(&people[1].token)).await;
            assert_eq!(answer.code(), 0, "{}", answer.raw);
            let data = answer.json()["data"].clone();
            views.push((
                data["title"].clone(),
                data["likeCnt"].clone(),
                data["collectCnt"].clone(),
            ));
        }
        views
    };
    let app = Arc::try_unwrap(app).ok().unwrap();
    app.stop().await.unwrap();
    let restarted = TestApp::spawn_shared(
        Arc::new(TestDb::existing(&destination.url).await),
        |config| make_cluster(config, redis_url()),
    )
    .await;
    assert_eq!(
        restarted.platform.db.kind(),
        platform::config::DatabaseKind::Postgres
    );
    let (reader, _) = login(&restarted, "mover1@webook.test").await;
    for (id, seen) in articles.iter().copied().chain([late]).zip(&article_views) {
        let answer = get(&restarted, &format!("/articles/pub/{id}"), Some(&reader)).await;
        assert_eq!(answer.code(), 0, "{}", answer.raw);
        let data = answer.json()["data"].clone();
        assert_eq!(
            &(
                data["title"].clone(),
                data["likeCnt"].clone(),
                data["collectCnt"].clone()
            ),
            seen
        );
    }
    restarted.stop().await.unwrap();
}

/// A connection to `url` whose writes fire no triggers: what a lost double write leaves
/// behind, made by hand.
async fn behind_the_moves_back(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    AnyPoolOptions::new()
        .max_connections(1)
        .after_connect(|connection, _| {
            Box::pin(async move {
                sqlx::Executor::execute(&mut *connection, "SET session_replication_role = replica")
                    .await?;
                Ok(())
            })
        })
        .connect(url)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_differences_are_found_and_fixed_without_overwriting_newer_rows() {
    let db = Arc::new(TestDb::sqlite(&MIGRATIONS).await);
    let app = embedded_on(db.clone()).await;
    assert_eq!(signup(&app, ADMIN).await.code(), 0);
    let (admin, _) = login(&app, ADMIN).await;
    let author = members(&app, "author", 1).await.remove(0);
    let mut articles = Vec::new();
    for n in 0..5 {
        articles.push(publish(&app, &author, &format!("article {n}")).await);
    }
    let destination = TestDb::empty_postgres().await;
    operate(
        &app,
        &admin,
        "/admin/db-move/start",
        json!({"destination": destination.url}),
    )
    .await;
    task_done(&app, &admin, "copy").await;

    // The move's state survives a restart; the restarted process takes part again.
    app.stop().await.unwrap();
    let app = embedded_on(db.clone()).await;
    let (admin, _) = login(&app, ADMIN).await;
    let (author_token, _) = login(&app, "author0@webook.test").await;
    let status = move_status(&app, &admin).await;
    assert_eq!(
        (status["phase"].as_str(), status["task"]["kind"].as_str()),
        (Some("SrcOnly"), Some("copy")),
        "{status}"
    );
    operate(
        &app,
        &admin,
        "/admin/db-move/switch",
        json!({"phase": "SrcFirst"}),
    )
    .await;
    drained(&app, &admin).await;
    operate(&app, &admin, "/admin/db-move/validate", json!({})).await;
    let clean = task_done(&app, &admin, "validate").await;
    // The destination's own migration wrote its `meta` rows: the only differences.
    let meta_only = get(&app, "/admin/db-move/findings", Some(&admin))
        .await
        .json()["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|item| item["table"] == "meta");
    assert!(meta_only, "{clean}");
    operate(&app, &admin, "/admin/db-move/fix", json!({})).await;
    task_done(&app, &admin, "fix").await;

    // A changed, a deleted and an added row on the destination.
    let (changed, deleted, newer) = (articles[0], articles[1], articles[2]);
    let behind = behind_the_moves_back(&destination.url).await;
    sqlx::query("UPDATE articles SET title = 'tampered' WHERE id = $1")
        .bind(changed)
        .execute(&behind)
        .await
        .unwrap();
    sqlx::query("UPDATE articles SET title = 'stale copy' WHERE id = $1")
        .bind(newer)
        .execute(&behind)
        .await
        .unwrap();
    sqlx::query("DELETE FROM published_articles WHERE id = $1")
        .bind(deleted)
        .execute(&behind)
        .await
        .unwrap();
    sqlx::query("INSERT INTO tags (id, uid, name, name_key, ctime, utime) VALUES (9999, 1, 'stray', 'stray', 1, 1)").execute(&behind).await.unwrap();

    operate(&app, &admin, "/admin/db-move/validate", json!({})).await;
    let validated = task_done(&app, &admin, "validate").await;
    assert_eq!(validated["validation"]["findings"], 4, "{validated}");
    let findings = get(&app, "/admin/db-move/findings?limit=200", Some(&admin))
        .await
        .json()["data"]["items"]
        .clone();
    let open: Vec<(String, String, String)> = findings
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["state"] == "open")
        .map(|item| {
            (
                item["table"].as_str().unwrap().to_owned(),
                item["key"].as_str().unwrap().to_owned(),
                item["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        open,
        vec![
            (
                "articles".to_owned(),
                format!("[{changed}]"),
                "different".to_owned()
            ),
            (
                "articles".to_owned(),
                format!("[{newer}]"),
                "different".to_owned()
            ),
            (
                "published_articles".to_owned(),
                format!("[{deleted}]"),
                "missing_in_destination".to_owned()
            ),
            (
                "tags".to_owned(),
                "[9999]".to_owned(),
                "extra_in_destination".to_owned()
            ),
        ]
    );

    // Between compare and fix, the author edits one of them: the replicator brings the new
    // version, and the fixer must not put what validation saw back.
    let edited = post(
        &app,
        "/articles/edit",
        Some(&author_token),
        json!({"id": newer, "title": "edited after the compare", "content": "<p>new</p>"}),
    )
    .await;
    assert_eq!(edited.code(), 0, "{}", edited.raw);
    wait_until("the edit to reach the destination", || async {
        let title: String = sqlx::query_scalar("SELECT title FROM articles WHERE id = $1")
            .bind(newer)
            .fetch_one(&behind)
            .await
            .unwrap();
        title == "edited after the compare"
    })
    .await;
    operate(&app, &admin, "/admin/db-move/fix", json!({})).await;
    let fixed = task_done(&app, &admin, "fix").await;
    assert_eq!(
        fixed["task"]["message"], "fixed 3 rows, skipped 1 changed since validation",
        "{fixed}"
    );
    let states: BTreeMap<String, String> =
        get(&app, "/admin/db-move/findings?limit=200", Some(&admin))
            .await
            .json()["data"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|item| item["table"] != "meta")
            .map(|item| {
                (
                    item["key"].as_str().unwrap().to_owned(),
                    item["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
    assert_eq!(
        states.get(&format!("[{newer}]")).map(String::as_str),
        Some("skipped")
    );
    assert_eq!(
        states.get(&format!("[{changed}]")).map(String::as_str),
        Some("fixed")
    );
    let on_destination: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, title FROM articles WHERE id IN ($1, $2) ORDER BY id")
            .bind(changed)
            .bind(newer)
            .fetch_all(&behind)
            .await
            .unwrap();
    assert_eq!(
        on_destination,
        vec![
            (changed, "article 0".to_owned()),
            (newer, "edited after the compare".to_owned())
        ]
    );
    let restored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM published_articles WHERE id = $1")
        .bind(deleted)
        .fetch_one(&behind)
        .await
        .unwrap();
    let stray: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tags WHERE id = 9999")
        .fetch_one(&behind)
        .await
        .unwrap();
    assert_eq!((restored, stray), (1, 0));

    operate(&app, &admin, "/admin/db-move/validate", json!({})).await;
    let again = task_done(&app, &admin, "validate").await;
    let findings = get(&app, "/admin/db-move/findings", Some(&admin)).await;
    assert_eq!(again["validation"]["findings"], 0, "{}", findings.raw);
    app.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_cluster_instances_move_between_postgresqls_and_switch_together() {
    let (one, two) = common::cluster_pair(|config| {
        let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
        auth.admins = vec![1];
        auth.write_rate_limit = 0;
        config
            .settings_mut::<webook::comment::settings::CommentSettings>()
            .comment_rate_limit = 0;
    })
    .await;
    let (one, two) = (Arc::new(one), Arc::new(two));
    assert_eq!(signup(&one, ADMIN).await.code(), 0);
    let (admin, _) = login(&one, ADMIN).await;
    let people = members(&one, "member", 4).await;
    let mut articles = Vec::new();
    for author in &people {
        articles.push(publish(&one, author, "before the move").await);
    }
    let source_url = one.platform.config.database_url();
    let destination = TestDb::empty_postgres().await;

    // Traffic through both instances, as behind a load balancer.
    let load_one = Load::start(&one, &people[..2], &articles);
    let load_two = Load::start(&two, &people[2..], &articles);
    load_two.progress(30).await;

    operate(
        &one,
        &admin,
        "/admin/db-move/start",
        json!({"destination": destination.url}),
    )
    .await;
    // Either instance coordinates; both acknowledge every switch.
    operate(
        &two,
        &admin,
        "/admin/db-move/switch",
        json!({"phase": "SrcFirst"}),
    )
    .await;
    task_done(&one, &admin, "copy").await;
    operate(&one, &admin, "/admin/db-move/validate", json!({})).await;
    task_done(&one, &admin, "validate").await;
    operate(&one, &admin, "/admin/db-move/fix", json!({})).await;
    task_done(&one, &admin, "fix").await;
    let switched = operate(
        &one,
        &admin,
        "/admin/db-move/switch",
        json!({"phase": "DstFirst"}),
    )
    .await;
    assert_eq!(switched["epoch"], 2, "{switched}");
    // Both instances answered the barrier of both switches.
    let acks: Vec<(i64, String)> =
        sqlx::query_as("SELECT epoch, stage FROM db_move_acks ORDER BY instance")
            .fetch_all(&pool(&source_url).await)
            .await
            .unwrap();
    assert_eq!(
        acks,
        vec![(2, "flipped".to_owned()), (2, "flipped".to_owned())]
    );
    load_one.progress(30).await;
    load_two.progress(30).await;
    let (requests_one, failures_one) = load_one.stop().await;
    let (requests_two, failures_two) = load_two.stop().await;
    assert!(
        failures_one.is_empty() && failures_two.is_empty(),
        "{failures_one:?} {failures_two:?}"
    );
    assert!(requests_one + requests_two >= 120);

    drained(&two, &admin).await;
    operate(&two, &admin, "/admin/db-move/validate", json!({})).await;
    let validated = task_done(&two, &admin, "validate").await;
    assert_eq!(validated["validation"]["findings"], 0, "{validated}");

    operate(
        &two,
        &admin,
        "/admin/db-move/switch",
        json!({"phase": "DstOnly"}),
    )
    .await;
    // Whichever instance takes a write, it lands on the destination only.
    let late = publish(&two, &people[0], "after the move").await;
    let on = |url: String| async move {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM articles WHERE id = $1")
            .bind(late)
            .fetch_one(&pool(&url).await)
            .await
            .unwrap();
        count
    };
    assert_eq!(
        (
            on(destination.url.clone()).await,
            on(source_url.clone()).await
        ),
        (1, 0)
    );
    let seen = get(
        &one,
        &format!("/articles/pub/{late}"),
        Some(&people[0].token),
    )
    .await;
    assert_eq!(seen.code(), 0, "{}", seen.raw);
    Arc::try_unwrap(one).ok().unwrap().stop().await.unwrap();
    Arc::try_unwrap(two).ok().unwrap().stop().await.unwrap();
}

/// Runs `webook db-move ARGS` for the server in `dir`; its standard output (it must succeed).
async fn db_move_cli(dir: &std::path::Path, args: &[&str]) -> String {
    let mut command = common::process::webook(dir);
    command.arg("db-move").args(args);
    let output = tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    assert!(
        output.status.success(),
        "db-move {args:?} failed:\n{stdout}\n{stderr}"
    );
    stdout
}

/// Publishes through a server process; the article's id.
async fn publish_on(server: &common::process::Server, token: &str, title: &str) -> i64 {
    let answer: Value = reqwest::Client::new()
        .post(server.url("/articles/publish"))
        .bearer_auth(token)
        .json(&json!({"title": title, "content": format!("<p>{title}</p>")}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["code"], 0, "{answer}");
    answer["data"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_moves_a_running_embedded_server_and_it_restarts_on_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::process::Server::start(common::process::webook(dir.path()));
    let token = server
        .sign_up_and_log_in("writer@example.com", common::PASSWORD)
        .await;
    let before = publish_on(&server, &token, "before the move").await;
    let destination = TestDb::empty_postgres().await;

    let started = db_move_cli(dir.path(), &["start", "--destination", &destination.url]).await;
    assert!(started.contains("copied"), "{started}");
    assert!(started.contains("\"phase\": \"SrcOnly\""), "{started}");
    let switched = db_move_cli(dir.path(), &["switch", "SrcFirst"]).await;
    assert!(switched.contains("switched to SrcFirst"), "{switched}");
    let during = publish_on(&server, &token, "during the move").await;
    // The destination's migration wrote `meta` rows of its own: two differences, then none.
    let validated = db_move_cli(dir.path(), &["validate"]).await;
    assert!(validated.contains(": 2 differences"), "{validated}");
    let fixed = db_move_cli(dir.path(), &["fix"]).await;
    assert!(fixed.contains("fixed 2, skipped 0"), "{fixed}");
    let validated = db_move_cli(dir.path(), &["validate"]).await;
    assert!(validated.contains(": 0 differences"), "{validated}");
    db_move_cli(dir.path(), &["switch", "DstFirst"]).await;
    let after = publish_on(&server, &token, "after the switch").await;
    db_move_cli(dir.path(), &["switch", "DstOnly"]).await;
    let finished = db_move_cli(dir.path(), &["finish"]).await;
    let restart_with = format!("database_url = \"{}\"", destination.url);
    assert!(finished.contains(&restart_with), "{finished}");
    let status = db_move_cli(dir.path(), &["status"]).await;
    assert!(status.contains("\"stage\": \"finished\""), "{status}");
    drop(server);

    // Restarted with what finish printed: the same articles.
    let mut command = common::process::webook(dir.path());
    command.env("WEBOOK_DATABASE_URL", &destination.url);
    let server = common::process::Server::start(command);
    let token = server.log_in("writer@example.com", common::PASSWORD).await;
    for (id, title) in [
        (before, "before the move"),
        (during, "during the move"),
        (after, "after the switch"),
    ] {
        let body: Value = reqwest::Client::new()
            .get(server.url(&format!("/articles/pub/{id}")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["data"]["title"], title, "{body}");
    }
}

/// An embedded app on SQLite with its admin logged in, whose move to an empty PostgreSQL has
/// been started (the copy runs): (source, app, admin token, destination).
async fn copying_to_postgresql() -> (Arc<TestDb>, TestApp, String, EmptyPostgres) {
    let db = Arc::new(TestDb::sqlite(&MIGRATIONS).await);
    let app = embedded_on(db.clone()).await;
    assert_eq!(signup(&app, ADMIN).await.code(), 0);
    let (admin, _) = login(&app, ADMIN).await;
    let destination = TestDb::empty_postgres().await;
    operate(
        &app,
        &admin,
        "/admin/db-move/start",
        json!({"destination": destination.url}),
    )
    .await;
    (db, app, admin, destination)
}

/// As [`copying_to_postgresql`], once the copy is done and the move is in SrcFirst (every
/// write replicated to the destination).
async fn replicating_to_postgresql() -> (Arc<TestDb>, TestApp, String, EmptyPostgres) {
    let (db, app, admin, destination) = copying_to_postgresql().await;
    task_done(&app, &admin, "copy").await;
    operate(
        &app,
        &admin,
        "/admin/db-move/switch",
        json!({"phase": "SrcFirst"}),
    )
    .await;
    (db, app, admin, destination)
}

/// The write fence, on both engines: from the start the destination refuses every application
/// write (captured tables only take the mover's), and a closed source refuses them too — in the
/// database itself, whoever writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_database_refuses_application_writes_on_both_engines() {
    let (db, app, admin, destination) = copying_to_postgresql().await;
    let status = task_done(&app, &admin, "copy").await;
    assert_eq!(
        status["fenced"],
        json!({"source": false, "destination": true}),
        "{status}"
    );
    let write = "UPDATE users SET nickname = 'fenced?' WHERE id = 1";
    let on_destination = sqlx::query(write)
        .execute(&pool(&destination.url).await)
        .await
        .unwrap_err();
    assert!(
        on_destination.to_string().contains("fenced"),
        "{on_destination}"
    );
    let source = pool(&db.url).await;
    sqlx::query(write).execute(&source).await.unwrap();
    sqlx::query("UPDATE db_move_fence SET closed = 1")
        .execute(&source)
        .await
        .unwrap();
    let on_source = sqlx::query(write).execute(&source).await.unwrap_err();
    assert!(on_source.to_string().contains("fenced"), "{on_source}");
    // Through the application: refused, not acknowledged.
    let answer = post(
        &app,
        "/users/edit",
        Some(&admin),
        json!({"nickname": "after", "birthday": "2000-01-01", "aboutMe": ""}),
    )
    .await;
    assert_eq!(
        answer.status,
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.raw
    );
    assert_ne!(answer.code(), 0, "{}", answer.raw);
    sqlx::query("UPDATE db_move_fence SET closed = 0")
        .execute(&source)
        .await
        .unwrap();
    sqlx::query(write).execute(&source).await.unwrap();
}

/// A switch whose coordinator went away (its lease ran out at stage pause) is ended by the
/// serving instance on its own: aborted, every fence as before, writes served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_switch_is_aborted_by_the_instance() {
    let (db, app, admin, _destination) = replicating_to_postgresql().await;
    // What a coordinator of the switch to DstFirst killed right after fencing leaves: stage
    // pause, a lapsed lease, the source's fence closed.
    let source = pool(&db.url).await;
    sqlx::query(
        "UPDATE db_move SET epoch = epoch + 1, stage = 'pause', target = 'DstFirst', \
         members = '[]', coordinator = 'cli-gone', lease_until = 1, paused_at = 1",
    )
    .execute(&source)
    .await
    .unwrap();
    sqlx::query("UPDATE db_move_fence SET closed = 1")
        .execute(&source)
        .await
        .unwrap();
    wait_until("the orphaned switch to be aborted", || async {
        move_status(&app, &admin).await["stage"] == "abort"
    })
    .await;
    let status = move_status(&app, &admin).await;
    assert_eq!(status["phase"], "SrcFirst", "{status}");
    assert!(
        status["outcome"]
            .as_str()
            .unwrap()
            .contains("the coordinator cli-gone went away at stage pause"),
        "{status}"
    );
    assert_ne!(status["coordinator"], "cli-gone", "{status}");
    assert_eq!(
        status["fenced"],
        json!({"source": false, "destination": true}),
        "{status}"
    );
    // Served again, and `/readyz` says where this instance stands.
    assert_eq!(signup(&app, "after@example.com").await.code(), 0);
    wait_until("readiness to show the phase", || async {
        platform::ops::readiness(&app.platform)
            .await
            .details
            .get("db_move")
            == Some(&"ok: phase SrcFirst".to_owned())
    })
    .await;
    // And the operator's abort of nothing is refused with the reason.
    let refused = post(&app, "/admin/db-move/abort", Some(&admin), json!({})).await;
    assert_eq!(refused.code(), 4, "{}", refused.raw);
    assert!(
        refused.raw.contains("no switch is in progress"),
        "{}",
        refused.raw
    );
}

/// A validation while replication is stuck (a row on the destination held by another
/// transaction) waits for the changes in flight once, not once per batch that found one: it
/// waited 5 s for each table it found a row in flight in (users, articles, their published
/// copy, the outbox…), over the test's wait on a busy machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_waits_for_changes_in_flight_once() {
    let (_db, app, admin, destination) = replicating_to_postgresql().await;
    drained(&app, &admin).await;
    let held = pool(&destination.url).await;
    let mut holder = held.begin().await.unwrap();
    sqlx::query("SELECT id FROM users WHERE id = 1 FOR UPDATE")
        .fetch_all(&mut *holder)
        .await
        .unwrap();
    let edited = post(
        &app,
        "/users/edit",
        Some(&admin),
        json!({"nickname": "in flight", "birthday": "2000-01-01", "aboutMe": ""}),
    )
    .await;
    assert_eq!(edited.code(), 0, "{}", edited.raw);
    let author = Member {
        token: admin.clone(),
        uid: 1,
    };
    for n in 0..3 {
        publish(&app, &author, &format!("in flight {n}")).await;
    }
    let stuck = move_status(&app, &admin).await;
    assert!(stuck["pending"]["source"].as_i64().unwrap() > 0, "{stuck}");

    operate(&app, &admin, "/admin/db-move/validate", json!({})).await;
    let validated = task_done(&app, &admin, "validate").await;
    let waited = validated["validation"]["replicationWaitMs"]
        .as_i64()
        .unwrap();
    assert!((5_000..10_000).contains(&waited), "{validated}");
    assert_eq!(
        validated["validation"]["replicationBehind"], true,
        "{validated}"
    );
    let findings = get(&app, "/admin/db-move/findings?limit=200", Some(&admin)).await;
    let tables: std::collections::BTreeSet<String> = findings.json()["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["table"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        tables.contains("users") && tables.contains("articles"),
        "{}",
        findings.raw
    );

    // Once the row is let go, replication catches up and nothing is in flight any more.
    holder.rollback().await.unwrap();
    drained(&app, &admin).await;
    operate(&app, &admin, "/admin/db-move/validate", json!({})).await;
    let again = task_done(&app, &admin, "validate").await;
    let waited = again["validation"]["replicationWaitMs"].as_i64().unwrap();
    assert!(waited < 5_000, "{again}");
    assert_eq!(again["validation"]["replicationBehind"], false, "{again}");
    let findings = get(&app, "/admin/db-move/findings?limit=200", Some(&admin)).await;
    let meta_only = findings.json()["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|item| item["table"] == "meta");
    assert!(meta_only, "{}", findings.raw);
}

/// A validation that finds more differing rows of a table with a four-column key than one
/// statement may bind (SQLite: 32 766 values) re-reads them in batches: it failed with "too
/// many SQL variables" once it confirmed a table's suspects in one statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validation_confirms_many_differences_of_a_wide_key_in_batches() {
    let (db, app, admin, _destination) = copying_to_postgresql().await;
    task_done(&app, &admin, "copy").await;
    let rows = 8_500;
    sqlx::query(&format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows}) \
         INSERT INTO notification_sources \
         (recipient, source, subject_id, actor_id, on_flag, time, notification_id) \
         SELECT 1, 'like', i, i, 1, i, i FROM n"
    ))
    .execute(&pool(&db.url).await)
    .await
    .unwrap();
    operate(&app, &admin, "/admin/db-move/validate", json!({})).await;
    let validated = task_done(&app, &admin, "validate").await;
    let findings = validated["validation"]["findings"].as_i64().unwrap();
    assert!(findings >= rows, "{validated}");
}

/// The durable job store waits while the application's database is paused (it once took raw
/// pools and kept writing to the old database during a switch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_job_store_waits_for_a_paused_database() {
    let (app, _) = embedded_with_admin().await;
    let store = webook::jobs::store(&app.platform.db);
    let paused = app
        .platform
        .db
        .pause(std::time::Duration::from_secs(5))
        .await
        .unwrap();
    let listing = tokio::spawn(async move { store.list().await.map(|jobs| jobs.len()) });
    // Negative check: it has not answered while paused (nothing to await but time).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!listing.is_finished(), "the job store ran while paused");
    drop(paused);
    let jobs = listing.await.unwrap().unwrap();
    assert!(jobs > 0, "no jobs listed after the pause");
}

/// A query whose SQL depends on the engine, begun while a move pauses the routing and run once
/// it has been re-routed to the other engine, is written for the engine it runs on. (It chose
/// its SQL by the engine it was routed to before it took a connection: a move's benchmark saw
/// SQLite refuse PostgreSQL's array syntax about 18 times per switch under load.)
#[tokio::test]
async fn an_engine_specific_query_that_waits_out_a_pause_runs_on_the_new_engine() {
    use webook::{biz::Biz, interactive::store::InteractiveStore};
    let sqlite = TestDb::sqlite(&MIGRATIONS).await;
    let postgres = TestDb::postgres(&MIGRATIONS).await;
    sqlx::query(
        "INSERT INTO interactives (biz, biz_id, read_cnt, like_cnt, collect_cnt, ctime, utime) \
         VALUES ('article', 7, 3, 2, 1, 0, 0)",
    )
    .execute(postgres.db.writer())
    .await
    .unwrap();
    let app = sqlite.db.clone();
    let store = InteractiveStore::new(app.clone());
    let paused = app.pause(std::time::Duration::from_secs(5)).await.unwrap();
    let mut counts = std::pin::pin!(store.batch_counts(Biz::Article, &[7]));
    assert!(
        futures_util::poll!(counts.as_mut()).is_pending(),
        "the query waits while the routing is paused"
    );
    app.route_to(&paused, &postgres.db);
    drop(paused);
    let counts = counts.await.expect("the query runs on PostgreSQL");
    assert_eq!(
        (
            counts[&7].read_cnt,
            counts[&7].like_cnt,
            counts[&7].collect_cnt
        ),
        (3, 2, 1)
    );
}
