//! The hot list end to end, on every setup ({SQLite, PostgreSQL} × {embedded, Redis}): articles
//! with known likes and first-publication times rank in exactly the expected order; editing an
//! old article does not move it up; withdrawn and out-of-window articles leave the list; the
//! response is served with an ETag (304 on a match) and `x-ranking-computed-at`, gzipped once for
//! clients that accept it; a fresh instance
//! serves the list another one computed without computing; a withdrawn article leaves every
//! instance's list when the withdrawal event arrives, not at the next computation; an instance
//! with no list computes one at start-up; the last list survives the shared copy and the
//! database going away; the durable `ranking` job computes it when triggered; and `webook rank
//! --once` from a host whose clock runs ahead does not fence out the scheduled lists.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{get, login, post, signup, Setup};
use platform::db::now_millis;
use platform::testing::wait_until;
use reqwest::{header, StatusCode};
use serde_json::{json, Value};
use webook::schema::MIGRATIONS;
use webook::{ranking::RANKING_JOB, testing::TestApp};

setup_tests!(
    articles_rank_by_score_and_leave_when_withdrawn_or_old,
    a_fresh_instance_serves_the_list_another_computed,
    the_last_list_is_served_when_the_database_is_gone,
    the_ranking_job_computes_the_list_when_triggered,
    in_cron_mode_a_long_locked_job_computes_the_list,
    a_withdrawn_article_leaves_every_list_before_the_next_computation,
);

async fn a_withdrawn_article_leaves_every_list_before_the_next_computation(setup: Setup) {
    let db = setup.database().await;
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let first = setup
        .spawn_on(db.clone(), &prefix, |config| {
            quiet(config);
            config
                .settings_mut::<webook::ranking::RankingSettings>()
                .ranking_refresh = std::time::Duration::from_millis(100);
        })
        .await;
    let token = author(&first, "withdrawer@example.com").await;
    let kept = publish(&first, &token, "kept").await;
    let withdrawn = publish(&first, &token, "withdrawn").await;
    set_signals(&first, kept, 1, 5).await;
    set_signals(&first, withdrawn, 1, 50).await;
    compute(&first, 1).await;
    assert_eq!(top_ids(&first).await, [withdrawn, kept]);
    let etag = get(&first, "/ranking/top", None).await.header("etag");
    // Cluster mode: a second instance serving the same list.
    let second = if setup.cluster {
        let second = setup
            .spawn_on(db.clone(), &prefix, |config| {
                quiet(config);
                config
                    .settings_mut::<webook::ranking::RankingSettings>()
                    .ranking_refresh = std::time::Duration::from_millis(100);
            })
            .await;
        wait_until("the second instance to serve the list", || async {
            top_ids(&second).await == [withdrawn, kept]
        })
        .await;
        Some(second)
    } else {
        None
    };

    let answer = post(
        &first,
        "/articles/withdraw",
        Some(&token),
        json!({"id": withdrawn}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    // The schedule is yearly: only the withdrawal event can take it off.
    wait_until("the withdrawn article to leave the list", || async {
        top_ids(&first).await == [kept]
    })
    .await;
    assert_ne!(
        get(&first, "/ranking/top", None).await.header("etag"),
        etag,
        "another list, another ETag"
    );
    if let Some(second) = &second {
        wait_until("the other instance to drop it too", || async {
            top_ids(second).await == [kept]
        })
        .await;
    }
    // The stored list lost it too: an instance started now does not bring it back.
    drop(second);
    first.stop().await.unwrap();
    let fresh = setup.spawn_on(db, &prefix, quiet).await;
    assert_eq!(top_ids(&fresh).await, [kept]);
}

const HOUR: i64 = 3600 * 1000;

/// Yearly, so the scheduler never computes behind the test's back.
fn quiet(config: &mut platform::config::Config) {
    config
        .settings_mut::<webook::ranking::RankingSettings>()
        .ranking_schedule = "@yearly".to_owned();
    config
        .settings_mut::<webook::jobs::settings::JobSettings>()
        .job_poll_max = std::time::Duration::from_millis(100);
}

async fn author(app: &TestApp, email: &str) -> String {
    signup(app, email).await;
    login(app, email).await.0
}

async fn publish(app: &TestApp, token: &str, title: &str) -> i64 {
    let answer = post(
        app,
        "/articles/publish",
        Some(token),
        json!({"title": title, "content": format!("<p>{title} body</p>")}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].as_i64().unwrap()
}

/// Sets an article's first publication and like count directly (the test's known inputs).
async fn set_signals(app: &TestApp, id: i64, published_hours_ago: i64, likes: i64) {
    let writer = app.platform.db.writer();
    sqlx::query("UPDATE published_articles SET ctime = $1 WHERE id = $2")
        .bind(now_millis() - published_hours_ago * HOUR)
        .bind(id)
        .execute(writer)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO interactives (biz, biz_id, like_cnt, ctime, utime) VALUES ('article', $1, $2, 0, 0) \
         ON CONFLICT (biz, biz_id) DO UPDATE SET like_cnt = excluded.like_cnt",
    )
    .bind(id)
    .bind(likes)
    .execute(writer)
    .await
    .unwrap();
}

async fn compute(app: &TestApp, fence_at: i64) {
    app.service::<webook::ranking::RankingService>()
        .compute((fence_at, 0), now_millis(), |_| {}, || true)
        .await
        .unwrap();
}

async fn top_ids(app: &TestApp) -> Vec<i64> {
    let answer = get(app, "/ranking/top", None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.raw);
    answer.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect()
}

async fn articles_rank_by_score_and_leave_when_withdrawn_or_old(setup: Setup) {
    let app = setup.spawn(quiet).await;
    // No list existed: the instance computes one at start-up rather than answer 503 until the
    // first scheduled run (yearly here). An empty list is a list.
    wait_until("the list computed at start-up", || async {
        get(&app, "/ranking/top", None).await.status == StatusCode::OK
    })
    .await;
    assert_eq!(top_ids(&app).await, Vec::<i64>::new());
    let token = author(&app, "ranker@example.com").await;
    // Hacker News score (likes - 1) / (hours + 2)^1.5:
    let fresh = publish(&app, &token, "fresh").await; //     9 likes, 1 h:  8 / 5.2  = 1.54
    let popular = publish(&app, &token, "popular").await; // 60 likes, 10 h: 59 / 41.6 = 1.42
    let steady = publish(&app, &token, "steady").await; //  20 likes, 5 h:  19 / 18.5 = 1.03
    let old = publish(&app, &token, "old").await; //     1000 likes, 8 days: outside the window
    let quiet_one = publish(&app, &token, "quiet").await; //  0 likes, 0 h: -1 / 2.8 = -0.35
    set_signals(&app, fresh, 1, 9).await;
    set_signals(&app, popular, 10, 60).await;
    set_signals(&app, steady, 5, 20).await;
    set_signals(&app, old, 8 * 24, 1000).await;
    set_signals(&app, quiet_one, 0, 0).await;
    compute(&app, 1).await;
    assert_eq!(top_ids(&app).await, [fresh, popular, steady, quiet_one]);

    // The exact item shape, and the headers.
    let response = app
        .client
        .get(app.url("/ranking/top?limit=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let computed_at: i64 = response.headers()["x-ranking-computed-at"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((now_millis() - computed_at).abs() < 60_000);
    let etag = response.headers()[header::ETAG]
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = response.json().await.unwrap();
    let first = &body["data"][0];
    assert_eq!(
        common::sorted_keys(first),
        ["abstract", "author", "ctime", "id", "likeCnt", "score", "title", "utime"]
    );
    assert_eq!(first["id"], fresh);
    assert_eq!(first["likeCnt"], 9);
    assert_eq!(
        first["author"]["name"],
        format!("user{}", first["author"]["id"])
    );
    assert!((first["score"].as_f64().unwrap() - 8.0 / 3f64.powf(1.5)).abs() < 0.01);
    let not_modified = app
        .client
        .get(app.url("/ranking/top?limit=1"))
        .header(header::IF_NONE_MATCH, &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(not_modified.status(), StatusCode::NOT_MODIFIED);
    // A shorter list gzipped (the compression layer used to gzip it under the plain ETag): its
    // own ETag, which the plain representation does not match.
    let partial_gzip = app
        .client
        .get(app.url("/ranking/top?limit=1"))
        .header(header::ACCEPT_ENCODING, "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(partial_gzip.headers()[header::CONTENT_ENCODING], "gzip");
    let partial_gzip_etag = partial_gzip.headers()[header::ETAG]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(partial_gzip_etag, etag);
    assert!(
        partial_gzip_etag.ends_with("-gzip\""),
        "{partial_gzip_etag}"
    );
    let mut decoded = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&partial_gzip.bytes().await.unwrap()[..]),
        &mut decoded,
    )
    .unwrap();
    let decoded: Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(decoded["data"][0]["id"], fresh);
    let cross = app
        .client
        .get(app.url("/ranking/top?limit=1"))
        .header(header::IF_NONE_MATCH, &partial_gzip_etag)
        .send()
        .await
        .unwrap();
    assert_eq!(
        cross.status(),
        StatusCode::OK,
        "a gzip ETag does not match the plain body"
    );

    // The full list is also kept gzipped, a representation with its own ETag.
    let full = |gzip: bool, etag: Option<&str>| {
        let mut request = app.client.get(app.url("/ranking/top"));
        if gzip {
            request = request.header(header::ACCEPT_ENCODING, "br, gzip;q=0.8");
        }
        if let Some(etag) = etag {
            request = request.header(header::IF_NONE_MATCH, etag);
        }
        request.send()
    };
    let plain = full(false, None).await.unwrap();
    assert!(plain.headers().get(header::CONTENT_ENCODING).is_none());
    let plain_etag = plain.headers()[header::ETAG].to_str().unwrap().to_owned();
    let plain_body = plain.bytes().await.unwrap();
    let gzipped = full(true, None).await.unwrap();
    assert_eq!(gzipped.headers()[header::CONTENT_ENCODING], "gzip");
    assert_eq!(gzipped.headers()[header::VARY], "accept-encoding");
    let gzip_etag = gzipped.headers()[header::ETAG].to_str().unwrap().to_owned();
    assert_ne!(gzip_etag, plain_etag);
    let mut unzipped = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&gzipped.bytes().await.unwrap()[..]),
        &mut unzipped,
    )
    .unwrap();
    assert_eq!(unzipped, plain_body);
    let revalidated = full(true, Some(&gzip_etag)).await.unwrap();
    assert_eq!(revalidated.status(), StatusCode::NOT_MODIFIED);
    let other_representation = full(false, Some(&gzip_etag)).await.unwrap();
    assert_eq!(other_representation.status(), StatusCode::OK);

    // The plain request is answered ahead of the middleware (platform::fast_path); a `limit`
    // covering the whole list goes through the routed handler. Both answer the same bytes with
    // the same headers, the ones every answer carries included.
    for gzip in [false, true] {
        let mut answers = Vec::new();
        for uri in ["/ranking/top", "/ranking/top?limit=4"] {
            let mut request = app
                .client
                .get(app.url(uri))
                .header(header::ORIGIN, "http://localhost:3000");
            if gzip {
                request = request.header(header::ACCEPT_ENCODING, "gzip");
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{uri}");
            let headers = response.headers().clone();
            assert_eq!(headers["x-content-type-options"], "nosniff", "{uri}");
            assert_eq!(
                headers[header::ACCESS_CONTROL_ALLOW_ORIGIN],
                "http://localhost:3000",
                "{uri}"
            );
            assert!(headers.contains_key("x-request-id"), "{uri}");
            let vary: Vec<_> = headers.get_all(header::VARY).iter().collect();
            answers.push((
                headers[header::ETAG].clone(),
                headers.get(header::CONTENT_ENCODING).cloned(),
                format!("{vary:?}"),
                response.bytes().await.unwrap(),
            ));
        }
        assert_eq!(answers[0], answers[1], "gzip: {gzip}");
    }

    assert_eq!(
        get(&app, "/ranking/top?limit=0", None)
            .await
            .status_and_code(),
        (StatusCode::OK, 4)
    );

    // Republishing the popular article (an edit) keeps its first publication: it stays second.
    let answer = post(
        &app,
        "/articles/publish",
        Some(&token),
        json!({"id": popular, "title": "popular, edited", "content": "<p>new</p>"}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    compute(&app, 2).await;
    assert_eq!(top_ids(&app).await, [fresh, popular, steady, quiet_one]);

    // A withdrawn article leaves at the next computation.
    let answer = post(
        &app,
        "/articles/withdraw",
        Some(&token),
        json!({"id": fresh}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    compute(&app, 3).await;
    assert_eq!(top_ids(&app).await, [popular, steady, quiet_one]);

    // A stale computation (older fire time) cannot replace the newer list.
    set_signals(&app, quiet_one, 0, 500).await;
    compute(&app, 2).await;
    assert_eq!(top_ids(&app).await, [popular, steady, quiet_one]);
    compute(&app, 4).await;
    assert_eq!(top_ids(&app).await, [quiet_one, popular, steady]);

    let metrics = app.metrics_text().await;
    for series in [
        "ranking_serves_total{source=\"local\"} ",
        // The job-duration buckets the feature asked for, not the request-latency ones.
        "ranking_compute_duration_seconds_bucket{le=\"900\"}",
        "ranking_candidates_scanned_total ",
    ] {
        assert!(metrics.contains(series), "no {series} on /metrics");
    }
}

/// In cluster mode a second instance beside the first; embedded (one server per database), the
/// same instance restarted.
async fn a_fresh_instance_serves_the_list_another_computed(setup: Setup) {
    let db = setup.database().await;
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let first = setup.spawn_on(db.clone(), &prefix, quiet).await;
    let token = author(&first, "shared@example.com").await;
    let id = publish(&first, &token, "shared").await;
    set_signals(&first, id, 1, 5).await;
    compute(&first, 1).await;
    let expected = get(&first, "/ranking/top", None).await.raw;
    if !setup.cluster {
        first.stop().await.unwrap();
        let restarted = setup.spawn_on(db, &prefix, quiet).await;
        let answer = get(&restarted, "/ranking/top", None).await;
        assert_eq!(
            answer.raw, expected,
            "the restarted instance serves the stored list"
        );
        return;
    }

    let second = setup.spawn_on(db, &prefix, quiet).await;
    let answer = get(&second, "/ranking/top", None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.raw);
    assert_eq!(
        answer.raw, expected,
        "the second instance serves the shared list"
    );

    // A newer list computed by the first reaches the second at its next refresh.
    let other = publish(&first, &token, "newer").await;
    set_signals(&first, other, 1, 50).await;
    compute(&first, 2).await;
    wait_until("the second instance to serve the newer list", || async {
        top_ids(&second).await.first() == Some(&other)
    })
    .await;
}

async fn the_last_list_is_served_when_the_database_is_gone(setup: Setup) {
    let app = setup.spawn(quiet).await;
    let token = author(&app, "durable@example.com").await;
    let id = publish(&app, &token, "durable").await;
    set_signals(&app, id, 1, 3).await;
    compute(&app, 1).await;
    let before = get(&app, "/ranking/top", None).await.raw;
    app.platform.db.close().await;
    if let Some(redis) = &app.platform.redis {
        // The shared copy goes too (in cluster mode it is Redis): drop the list's keys.
        let mut connection = redis.connection();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:ranking:*", app.platform.config.redis_prefix))
            .query_async(&mut connection)
            .await
            .unwrap();
        for key in keys {
            let _: () = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut connection)
                .await
                .unwrap();
        }
    }
    for _ in 0..3 {
        let answer = get(&app, "/ranking/top", None).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.raw, before);
    }
}

async fn the_ranking_job_computes_the_list_when_triggered(setup: Setup) {
    let app = setup.spawn(quiet).await;
    let token = author(&app, "scheduled@example.com").await;
    let id = publish(&app, &token, "scheduled").await;
    set_signals(&app, id, 1, 7).await;
    let job = app
        .service::<scheduler::sql::SqlJobStore>()
        .find(RANKING_JOB)
        .await
        .unwrap()
        .expect("the ranking job is created at start-up");
    assert_eq!(job.cron, "@yearly");
    assert_eq!(job.executor, RANKING_JOB);
    app.service::<scheduler::sql::SqlJobStore>()
        .trigger(job.id)
        .await
        .unwrap();
    wait_until("the triggered ranking run to publish the list", || async {
        let answer = get(&app, "/ranking/top", None).await;
        answer.status == StatusCode::OK && top_ids(&app).await == [id]
    })
    .await;
    let runs = app
        .service::<scheduler::sql::SqlJobStore>()
        .runs(job.id, 10)
        .await
        .unwrap();
    assert_eq!(runs.len(), 1);
}

/// Runs the real `webook` binary with `args` on `db` (no other `WEBOOK_*` settings of this
/// process leak in), with `env` added; asserts it succeeded and returns its stdout.
fn webook_cli(
    db: &platform::testing::TestDb,
    data_dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_webook"));
    for (key, _) in std::env::vars() {
        if key.starts_with("WEBOOK_") {
            command.env_remove(key);
        }
    }
    let output = command
        .args(args)
        .args(["--database-url", &db.url, "--data-dir"])
        .arg(data_dir)
        .env("WEBOOK_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "webook {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// `webook rank --once` (the real binary) computes and stores the list; a running instance
/// serves it at its next refresh; `webook rank` prints it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_computes_a_list_that_running_instances_serve() {
    let db = std::sync::Arc::new(platform::testing::TestDb::sqlite(&MIGRATIONS).await);
    let app = TestApp::spawn_shared(db.clone(), |config| {
        quiet(config);
        config
            .settings_mut::<webook::ranking::RankingSettings>()
            .ranking_refresh = std::time::Duration::from_millis(100);
    })
    .await;
    let token = author(&app, "cli@example.com").await;
    let id = publish(&app, &token, "from the command line").await;
    set_signals(&app, id, 2, 4).await;
    let data_dir = tempfile::tempdir().unwrap();
    let webook = |args: &[&str]| webook_cli(&db, data_dir.path(), args, &[]);
    let printed = webook(&["rank", "--once"]);
    assert_eq!(
        printed,
        "computed the hot list: 1 candidates scanned, 1 ranked\n"
    );
    wait_until("the running instance to serve the CLI's list", || async {
        let answer = get(&app, "/ranking/top", None).await;
        answer.status == StatusCode::OK && top_ids(&app).await == [id]
    })
    .await;
    let listed = webook(&["rank"]);
    assert!(listed.contains("from the command line"), "{listed}");
    assert!(listed.lines().count() == 3, "{listed}");
}

/// `webook rank --once` run on a host whose clock is two hours ahead of the database's does not
/// fence out the scheduled runs: its list is fenced by the database's clock, as theirs are.
/// (It used the host's clock, so every scheduled list was refused for the next two hours.)
/// PostgreSQL only: with SQLite the database's clock is the process's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_list_from_a_host_whose_clock_runs_ahead_does_not_block_scheduled_lists() {
    let libfaketime = std::env::var("WEBOOK_TEST_LIBFAKETIME").expect(
        "WEBOOK_TEST_LIBFAKETIME is not set: run the tests through scripts/with-services.sh, \
         which installs libfaketime",
    );
    let two_hours_ahead = [
        ("LD_PRELOAD", libfaketime.as_str()),
        ("FAKETIME", "+2h"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    // The preload really moves a process's wall clock here.
    let date = std::process::Command::new("date")
        .arg("+%s")
        .envs(two_hours_ahead)
        .output()
        .unwrap();
    let skew = String::from_utf8(date.stdout)
        .unwrap()
        .trim()
        .parse::<i64>()
        .unwrap()
        - now_millis() / 1000;
    assert!((7_100..7_300).contains(&skew), "libfaketime skew {skew} s");

    let db = std::sync::Arc::new(platform::testing::TestDb::postgres(&MIGRATIONS).await);
    let app = TestApp::spawn_shared(db.clone(), |config| {
        quiet(config);
        config
            .settings_mut::<webook::ranking::RankingSettings>()
            .ranking_refresh = std::time::Duration::from_millis(100);
    })
    .await;
    let token = author(&app, "skew@example.com").await;
    let older = publish(&app, &token, "older").await;
    set_signals(&app, older, 2, 4).await;
    let data_dir = tempfile::tempdir().unwrap();
    webook_cli(&db, data_dir.path(), &["rank", "--once"], &two_hours_ahead);
    wait_until("the running instance to serve the CLI's list", || async {
        get(&app, "/ranking/top", None).await.status == StatusCode::OK
            && top_ids(&app).await == [older]
    })
    .await;

    // A scheduled run afterwards replaces it.
    let newer = publish(&app, &token, "newer").await;
    set_signals(&app, newer, 1, 9).await;
    let job = app
        .service::<scheduler::sql::SqlJobStore>()
        .find(RANKING_JOB)
        .await
        .unwrap()
        .unwrap();
    app.service::<scheduler::sql::SqlJobStore>()
        .trigger(job.id)
        .await
        .unwrap();
    wait_until("the scheduled list to replace the CLI's", || async {
        top_ids(&app).await == [newer, older]
    })
    .await;
}

/// Cluster mode with Redis killed: the local snapshot still answers, byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_stopped_the_local_snapshot_is_served() {
    let mut redis = platform::testing::RedisServer::start().await;
    let url = redis.url();
    let app = TestApp::spawn_with(
        platform::testing::TestDb::sqlite(&MIGRATIONS).await,
        |config| {
            webook::testing::make_cluster(config, url);
            quiet(config);
        },
    )
    .await;
    let token = author(&app, "outage@example.com").await;
    let id = publish(&app, &token, "outage").await;
    set_signals(&app, id, 1, 2).await;
    compute(&app, 1).await;
    let before = get(&app, "/ranking/top", None).await.raw;
    redis.stop();
    for _ in 0..3 {
        let answer = get(&app, "/ranking/top", None).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.raw);
        assert_eq!(answer.raw, before);
    }
}

async fn in_cron_mode_a_long_locked_job_computes_the_list(setup: Setup) {
    let app = setup
        .spawn(|config| {
            config
                .settings_mut::<webook::ranking::RankingSettings>()
                .ranking_mode = webook::ranking::RankingMode::Cron;
            config
                .settings_mut::<webook::ranking::RankingSettings>()
                .ranking_schedule = "@every 1s".to_owned();
        })
        .await;
    let token = author(&app, "cron@example.com").await;
    let id = publish(&app, &token, "cron").await;
    set_signals(&app, id, 1, 3).await;
    wait_until(
        "the cron job to publish a list with the article",
        || async {
            let answer = get(&app, "/ranking/top", None).await;
            answer.status == StatusCode::OK && answer.json()["data"][0]["id"] == id
        },
    )
    .await;
    assert!(
        app.service::<scheduler::sql::SqlJobStore>()
            .find(RANKING_JOB)
            .await
            .unwrap()
            .is_none(),
        "cron mode creates no durable ranking job"
    );
}
