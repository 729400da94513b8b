//! Durable jobs administered over HTTP (`/jobs…`, admins only) on every setup, and with
//! `webook jobs …` (the real binary) on a SQLite file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::{
    net::SocketAddr,
    path::Path,
    process::{Command, Output, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{http::HeaderMap, routing::any, Router};
use common::{get, login, post, signup, sorted_keys, Setup};
use platform::db::now_millis;
use platform::testing::wait_until;
use reqwest::StatusCode;
use serde_json::{json, Value};
use webook::{auth::admin::AdminStore, testing::TestApp};

setup_tests!(
    only_admins_may_manage_jobs,
    invalid_jobs_are_refused_with_the_reason,
    a_triggered_http_job_runs_once_and_obeys_stop_and_resume,
    admin_rights_follow_user_ids_never_emails,
    http_jobs_never_call_internal_addresses_unless_allowed,
    an_admin_edits_a_job_and_sees_its_policies_and_lease,
    admins_see_every_instance_and_its_readiness,
    a_non_admin_is_told_what_each_admin_area_guards,
);

/// `POST /jobs/:id/edit` changes the schedule (the next fire time follows), time zone, `cfg`,
/// misfire policy and timeout, checked like a new job; the list shows them with the lease.
async fn an_admin_edits_a_job_and_sees_its_policies_and_lease(setup: Setup) {
    let (app, admin) = admin_app(setup).await;
    let created = post(
        &app,
        "/jobs",
        Some(&admin),
        json!({"name": "hook", "cron": "@every 1h", "executor": "http",
               "cfg": {"url": "http://127.0.0.1:9/hook"}}),
    )
    .await;
    let id = expect(&created, StatusCode::OK, 0)["data"]
        .as_i64()
        .unwrap();
    let job = |jobs: Value| {
        jobs["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|job| job["id"] == id)
            .cloned()
            .unwrap()
    };
    let before = job(expect(
        &get(&app, "/jobs", Some(&admin)).await,
        StatusCode::OK,
        0,
    ));
    assert_eq!(before["cfg"], json!({"url": "http://127.0.0.1:9/hook"}));
    assert_eq!(before["misfire"], "fire_once");
    assert_eq!(before["timeoutMs"], 600_000);
    assert_eq!(before["leaseUntil"], Value::Null);

    let edited = post(
        &app,
        &format!("/jobs/{id}/edit"),
        Some(&admin),
        json!({"cron": "@every 2s", "timezone": "Asia/Shanghai", "misfire": "skip",
               "timeoutMs": 5000, "cfg": {"url": "http://127.0.0.1:9/other"}}),
    )
    .await;
    expect(&edited, StatusCode::OK, 0);
    let after = job(expect(
        &get(&app, "/jobs", Some(&admin)).await,
        StatusCode::OK,
        0,
    ));
    assert_eq!(after["cron"], "@every 2s");
    assert_eq!(after["timezone"], "Asia/Shanghai");
    assert_eq!(after["misfire"], "skip");
    assert_eq!(after["timeoutMs"], 5000);
    assert_eq!(after["cfg"], json!({"url": "http://127.0.0.1:9/other"}));
    assert!(
        after["nextTime"].as_i64().unwrap() <= now_millis() + 2_500,
        "the next fire time follows the new schedule: {after}"
    );
    assert_eq!(after["name"], "hook");

    for (body, needle) in [
        (json!({"cron": "0 0 25 * * *"}), "hour field"),
        (json!({"timezone": "Mars/Olympus"}), "time zone"),
        (json!({"misfire": "sometimes"}), "misfire"),
        (json!({"timeoutMs": 10}), "timeout"),
        (json!({"cfg": {"url": "ftp://x"}}), "http"),
    ] {
        let refused = post(
            &app,
            &format!("/jobs/{id}/edit"),
            Some(&admin),
            body.clone(),
        )
        .await;
        let answer = expect(&refused, StatusCode::OK, 4);
        assert!(
            answer["msg"].as_str().unwrap().contains(needle),
            "{body} → {answer}"
        );
    }
    let unchanged = job(expect(
        &get(&app, "/jobs", Some(&admin)).await,
        StatusCode::OK,
        0,
    ));
    assert_eq!(
        unchanged["cron"], "@every 2s",
        "a refused edit changes nothing"
    );
    expect(
        &post(
            &app,
            "/jobs/999999/edit",
            Some(&admin),
            json!({"cron": "@every 1m"}),
        )
        .await,
        StatusCode::OK,
        404001,
    );
    assert_eq!(signup(&app, "not-admin@example.com").await.code(), 0);
    let (other, _) = login(&app, "not-admin@example.com").await;
    expect(
        &post(
            &app,
            &format!("/jobs/{id}/edit"),
            Some(&other),
            json!({"cron": "@every 1m"}),
        )
        .await,
        StatusCode::OK,
        403002,
    );
}

/// `GET /admin/instances`: this instance reports itself (with the id its job worker uses and
/// the readiness it probed), admins only.
async fn admins_see_every_instance_and_its_readiness(setup: Setup) {
    let (app, admin) = admin_app(setup).await;
    wait_until("this instance reports", || async {
        let listed = expect(
            &get(&app, "/admin/instances", Some(&admin)).await,
            StatusCode::OK,
            0,
        );
        !listed["data"]["instances"].as_array().unwrap().is_empty()
    })
    .await;
    let listed = expect(
        &get(&app, "/admin/instances", Some(&admin)).await,
        StatusCode::OK,
        0,
    );
    let data = &listed["data"];
    let this = data["self"].as_str().unwrap();
    let instance = data["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|instance| instance["id"] == this)
        .unwrap_or_else(|| panic!("{this} not in {data}"));
    assert_eq!(instance["database"], "up");
    assert_eq!(instance["role"], "all");
    assert!(instance["seenAt"].as_i64().unwrap() >= instance["startedAt"].as_i64().unwrap());
    assert_eq!(signup(&app, "not-admin@example.com").await.code(), 0);
    let (other, _) = login(&app, "not-admin@example.com").await;
    expect(
        &get(&app, "/admin/instances", Some(&other)).await,
        StatusCode::OK,
        403002,
    );
    assert_eq!(
        get(&app, "/admin/instances", None).await.status,
        StatusCode::UNAUTHORIZED
    );
}

/// Admins used to be listed by email: whoever signed up first with an admin's unregistered
/// email (in any capitalisation) became an admin. Rights now follow user ids (config) or a
/// grant by an operator, and an email in config `admins` is refused at start-up.
async fn admin_rights_follow_user_ids_never_emails(setup: Setup) {
    let app = setup.spawn(|_| {}).await;
    assert_eq!(signup(&app, "  OPS@Example.com ").await.code(), 0);
    let (ops, _) = login(&app, "ops@example.com").await;
    expect(
        &get(&app, "/jobs", Some(&ops)).await,
        StatusCode::OK,
        403002,
    );

    let store = AdminStore::new(app.platform.db.clone());
    let uid = store.grant("OPS@example.com").await.unwrap();
    expect(&get(&app, "/jobs", Some(&ops)).await, StatusCode::OK, 0);
    assert_eq!(store.list().await.unwrap()[0].uid, uid);
    assert_eq!(store.revoke(&uid.to_string()).await.unwrap(), (uid, true));
    expect(
        &get(&app, "/jobs", Some(&ops)).await,
        StatusCode::OK,
        403002,
    );
    assert!(matches!(
        store.grant("nobody@example.com").await,
        Err(webook::auth::admin::GrantError::NoSuchUser(_))
    ));
}

/// An admin's `http` job pointed at the cloud metadata address or loopback is refused; a host
/// name that resolves to an internal address is refused when the job runs.
async fn http_jobs_never_call_internal_addresses_unless_allowed(setup: Setup) {
    let (app, admin) = admin_app_with(setup, |config| {
        config
            .settings_mut::<webook::jobs::settings::JobSettings>()
            .job_http_allowed_networks = Vec::new(); // the production default
    })
    .await;
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:9/hook",
        "http://[::1]:9/hook",
        "http://10.0.0.7/hook",
        "http://[::ffff:192.168.1.1]/hook",
    ] {
        let create =
            json!({"name": "probe", "cron": "@yearly", "executor": "http", "cfg": {"url": url}});
        let refused = expect(
            &post(&app, "/jobs", Some(&admin), create).await,
            StatusCode::OK,
            4,
        );
        assert!(
            refused["msg"]
                .as_str()
                .unwrap()
                .contains("internal address"),
            "{url}: {refused}"
        );
    }
    let (receiver, calls) = start_receiver().await;
    let create = json!({"name": "by-name", "cron": "@yearly", "executor": "http",
                        "cfg": {"url": format!("http://localhost:{}/hook", receiver.port())}});
    let id = expect(
        &post(&app, "/jobs", Some(&admin), create).await,
        StatusCode::OK,
        0,
    )["data"]
        .as_i64()
        .unwrap();
    expect(
        &post(
            &app,
            &format!("/jobs/{id}/trigger"),
            Some(&admin),
            json!({}),
        )
        .await,
        StatusCode::OK,
        0,
    );
    wait_until("the run to fail", || async {
        runs(&app, &admin, id)
            .await
            .first()
            .is_some_and(|run| run["status"] == "failed")
    })
    .await;
    let error = runs(&app, &admin, id).await[0]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(error.contains("internal address"), "{error}");
    assert!(
        calls.lock().unwrap().is_empty(),
        "the loopback receiver was called"
    );
}

/// The first user of every test's fresh database, so its id is 1.
const ADMIN: &str = "root@example.com";

/// An app whose admin is [`ADMIN`], listed by id in config `admins`, polling for durable jobs
/// often; returns it and the admin's access token.
async fn admin_app(setup: Setup) -> (TestApp, String) {
    admin_app_with(setup, |_| {}).await
}

/// [`admin_app`] with `configure` applied to its config last.
async fn admin_app_with(
    setup: Setup,
    configure: impl FnOnce(&mut platform::config::Config),
) -> (TestApp, String) {
    let app = setup
        .spawn(|config| {
            config
                .settings_mut::<webook::auth::settings::AuthSettings>()
                .admins = vec![1];
            config
                .settings_mut::<webook::jobs::settings::JobSettings>()
                .job_poll_max = Duration::from_millis(100);
            configure(config);
        })
        .await;
    assert_eq!(signup(&app, ADMIN).await.code(), 0);
    let (token, _) = login(&app, ADMIN).await;
    (app, token)
}

/// Asserts an answer's HTTP status and business code; returns its JSON.
#[track_caller]
fn expect(answer: &common::Answer, status: StatusCode, code: i64) -> Value {
    assert_eq!(answer.status_and_code(), (status, code), "{}", answer.raw);
    answer.json()
}

/// The jobs features create at start-up (their own tests cover them).
const STARTUP_JOBS: [&str; 5] = [
    "ranking",
    "sms_code_retries",
    "payment_sweep",
    "payment_reconcile",
    "payment_watch",
];

/// The jobs this test made: all but [`STARTUP_JOBS`].
async fn list_jobs(app: &TestApp, token: &str) -> Vec<Value> {
    let body = expect(&get(app, "/jobs", Some(token)).await, StatusCode::OK, 0);
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|job| !STARTUP_JOBS.iter().any(|name| job["name"] == *name))
        .cloned()
        .collect()
}

async fn job_named(app: &TestApp, token: &str, name: &str) -> Value {
    list_jobs(app, token)
        .await
        .into_iter()
        .find(|job| job["name"] == name)
        .unwrap_or_else(|| panic!("no job {name}"))
}

async fn only_admins_may_manage_jobs(setup: Setup) {
    let (app, admin) = admin_app(setup).await;
    assert_eq!(signup(&app, "someone@example.com").await.code(), 0);
    let (user, _) = login(&app, "someone@example.com").await;
    let create = json!({"name": "sneaky", "cron": "@daily", "executor": "http",
                        "cfg": {"url": "http://127.0.0.1:9/hook"}});
    let id = expect(
        &post(&app, "/jobs", Some(&admin), create.clone()).await,
        StatusCode::OK,
        0,
    )["data"]
        .as_i64()
        .unwrap();

    let posts = ["/jobs".to_owned()]
        .into_iter()
        .chain(["stop", "resume", "trigger"].map(|action| format!("/jobs/{id}/{action}")));
    for path in posts {
        let body = if path == "/jobs" {
            json!({"name": "other", "cron": "@daily", "executor": "http",
                   "cfg": {"url": "http://127.0.0.1:9/hook"}})
        } else {
            json!({})
        };
        expect(
            &post(&app, &path, Some(&user), body.clone()).await,
            StatusCode::OK,
            403002,
        );
        expect(
            &post(&app, &path, None, body).await,
            StatusCode::UNAUTHORIZED,
            401001,
        );
    }
    for path in ["/jobs".to_owned(), format!("/jobs/{id}/runs")] {
        let refused = expect(&get(&app, &path, Some(&user)).await, StatusCode::OK, 403002);
        assert!(refused["data"].is_null(), "{refused}");
        expect(
            &get(&app, &path, None).await,
            StatusCode::UNAUTHORIZED,
            401001,
        );
    }
    // A non-admin learns nothing about ids either: an unknown one is 403002 too.
    expect(
        &post(&app, "/jobs/999999/stop", Some(&user), json!({})).await,
        StatusCode::OK,
        403002,
    );

    // Nothing the refused calls asked for happened.
    let jobs = list_jobs(&app, &admin).await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["status"], "waiting");
}

/// Every admin area refuses a non-admin with 403002 and a message naming what it guards, in
/// English and Chinese (not the jobs' message everywhere).
async fn a_non_admin_is_told_what_each_admin_area_guards(setup: Setup) {
    let (app, _admin) = admin_app(setup).await;
    assert_eq!(signup(&app, "nosy@example.com").await.code(), 0);
    let (user, _) = login(&app, "nosy@example.com").await;
    let areas: [(&str, bool, &str, &str); 8] = [
        (
            "/jobs",
            false,
            "only admins may manage jobs",
            "只有管理员可以管理任务",
        ),
        (
            "/admin/db-move",
            false,
            "only admins may move the database",
            "只有管理员可以迁移数据库",
        ),
        (
            "/admin/db-move/abort",
            true,
            "only admins may move the database",
            "只有管理员可以迁移数据库",
        ),
        (
            "/admin/instances",
            false,
            "only admins may see the instances",
            "只有管理员可以查看实例",
        ),
        (
            "/payments/discrepancies",
            false,
            "only admins may see payment discrepancies",
            "只有管理员可以查看支付差异",
        ),
        (
            "/payments/discrepancies/1/resolve",
            true,
            "only admins may see payment discrepancies",
            "只有管理员可以查看支付差异",
        ),
        (
            "/admin/events/groups",
            false,
            "only admins may manage event consumer groups",
            "只有管理员可以管理事件消费组",
        ),
        (
            "/admin/events/replay",
            true,
            "only admins may manage event consumer groups",
            "只有管理员可以管理事件消费组",
        ),
    ];
    for (path, is_post, english, chinese) in areas {
        for (language, msg) in [("en", english), ("zh-CN", chinese)] {
            let url = app.url(path);
            let request = if is_post {
                app.client.post(url).json(&json!({}))
            } else {
                app.client.get(url)
            };
            let response = request
                .bearer_auth(&user)
                .header("user-agent", common::UA)
                .header("accept-language", language)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{path}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["code"], 403002, "{path}: {body}");
            assert_eq!(body["msg"], msg, "{path} ({language})");
        }
    }
}

async fn invalid_jobs_are_refused_with_the_reason(setup: Setup) {
    let (app, admin) = admin_app(setup).await;
    let valid = || {
        json!({"name": "ping", "cron": "@every 1h", "executor": "http",
               "cfg": {"url": "http://127.0.0.1:9/hook"}})
    };
    let with = |field: &str, value: Value| {
        let mut body = valid();
        body[field] = value;
        body
    };
    let cases = [
        (with("cron", json!("0 0 25 * * *")), "hour field"),
        (with("cron", json!("every day")), "cron expression"),
        (with("timezone", json!("Mars/Olympus_Mons")), "time zone"),
        (
            with("executor", json!("nosuch")),
            "unknown executor \"nosuch\"",
        ),
        (
            with("cfg", json!({"url": "https://example.com/hook"})),
            "invalid http cfg",
        ),
        (with("cfg", json!({})), "invalid http cfg"),
        (with("cfg", json!("{not json")), "cfg is not valid JSON"),
        (with("cfg", json!(42)), "cfg: must be a JSON object"),
        (with("misfire", json!("later")), "misfire policy"),
        (with("overlap", json!("allow")), "overlap policy"),
        (with("name", json!("no spaces please")), "job name"),
        (with("name", json!("")), "job name"),
        (with("timeoutMs", json!(10)), "timeout"),
    ];
    for (body, reason) in cases {
        let answer = post(&app, "/jobs", Some(&admin), body.clone()).await;
        let refused = expect(&answer, StatusCode::OK, 4);
        let msg = refused["msg"].as_str().unwrap();
        assert!(
            msg.contains(reason),
            "{body}: {msg:?} should name {reason:?}"
        );
    }
    // Bodies that do not fit the route at all: 400, code 4.
    let mut unknown_field = valid();
    unknown_field["timeout_ms"] = json!(5000);
    expect(
        &post(&app, "/jobs", Some(&admin), unknown_field).await,
        StatusCode::BAD_REQUEST,
        4,
    );
    expect(
        &post(&app, "/jobs", Some(&admin), json!({"name": "x"})).await,
        StatusCode::BAD_REQUEST,
        4,
    );
    assert_eq!(list_jobs(&app, &admin).await, Vec::<Value>::new());

    let before = now_millis();
    // `cfg` as a JSON string is accepted as well as an object.
    let created = post(
        &app,
        "/jobs",
        Some(&admin),
        with("cfg", json!(r#"{"url": "http://127.0.0.1:9/hook"}"#)),
    )
    .await;
    let id = expect(&created, StatusCode::OK, 0)["data"]
        .as_i64()
        .unwrap();
    assert!(id > 0);
    let duplicate = post(&app, "/jobs", Some(&admin), valid()).await;
    expect(&duplicate, StatusCode::OK, 409001);
    let zoned = json!({"name": "zoned", "cron": "0 30 9 * * MON-FRI", "executor": "http",
                       "cfg": {"url": "http://127.0.0.1:9/hook", "method": "PUT"},
                       "timezone": "Asia/Shanghai", "misfire": "skip", "overlap": "forbid",
                       "timeoutMs": 5000});
    expect(
        &post(&app, "/jobs", Some(&admin), zoned).await,
        StatusCode::OK,
        0,
    );

    let jobs = list_jobs(&app, &admin).await;
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    let ping = &jobs[0];
    assert_eq!(
        sorted_keys(ping),
        [
            "cfg",
            "cron",
            "executor",
            "id",
            "leaseUntil",
            "misfire",
            "name",
            "nextTime",
            "owner",
            "scheduledAt",
            "status",
            "timeoutMs",
            "timezone",
            "utime"
        ]
    );
    assert_eq!(ping["id"], id);
    assert_eq!(ping["name"], "ping");
    assert_eq!(ping["cron"], "@every 1h");
    assert_eq!(ping["timezone"], "UTC");
    assert_eq!(ping["executor"], "http");
    assert_eq!(ping["status"], "waiting");
    assert_eq!(ping["owner"], "");
    let next = ping["nextTime"].as_i64().unwrap();
    assert!(
        next > before && next <= now_millis() + 3600 * 1000,
        "nextTime {next} should be within the hour after {before}"
    );
    assert!(ping["utime"].as_i64().unwrap() > 0);
    assert_eq!(jobs[1]["name"], "zoned");
    assert_eq!(jobs[1]["timezone"], "Asia/Shanghai");
    assert!(jobs[1]["nextTime"].as_i64().unwrap() > before);
}

/// What the receiver saw of one call: `x-webook-job`, `x-webook-scheduled-at`,
/// `x-webook-token`.
#[derive(Debug, Clone)]
struct Call {
    job: String,
    scheduled_at: String,
    token: String,
}

/// A tiny HTTP server recording every request's job headers; answers 200.
async fn start_receiver() -> (SocketAddr, Arc<Mutex<Vec<Call>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let recorded = calls.clone();
    let app = Router::new().route(
        "/hook",
        any(move |headers: HeaderMap| {
            let recorded = recorded.clone();
            async move {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .map(|value| value.to_str().unwrap().to_owned())
                        .unwrap_or_default()
                };
                recorded.lock().unwrap().push(Call {
                    job: header("x-webook-job"),
                    scheduled_at: header("x-webook-scheduled-at"),
                    token: header("x-webook-token"),
                });
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, calls)
}

async fn runs(app: &TestApp, token: &str, id: i64) -> Vec<Value> {
    let answer = get(app, &format!("/jobs/{id}/runs"), Some(token)).await;
    expect(&answer, StatusCode::OK, 0)["data"]
        .as_array()
        .unwrap()
        .clone()
}

async fn a_triggered_http_job_runs_once_and_obeys_stop_and_resume(setup: Setup) {
    let (app, admin) = admin_app(setup).await;
    let (receiver, calls) = start_receiver().await;
    let create = json!({"name": "yearly-ping", "cron": "@yearly", "executor": "http",
                        "cfg": {"url": format!("http://{receiver}/hook")}});
    let id = expect(
        &post(&app, "/jobs", Some(&admin), create).await,
        StatusCode::OK,
        0,
    )["data"]
        .as_i64()
        .unwrap();
    assert_eq!(runs(&app, &admin, id).await, Vec::<Value>::new());

    let triggered_after = now_millis();
    expect(
        &post(
            &app,
            &format!("/jobs/{id}/trigger"),
            Some(&admin),
            json!({}),
        )
        .await,
        StatusCode::OK,
        0,
    );
    wait_until("the triggered run to be recorded as ok", || async {
        runs(&app, &admin, id)
            .await
            .first()
            .is_some_and(|run| run["status"] == "ok")
    })
    .await;
    let recorded = runs(&app, &admin, id).await;
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    let run = &recorded[0];
    assert_eq!(
        sorted_keys(run),
        [
            "error",
            "finishedAt",
            "id",
            "owner",
            "scheduledAt",
            "startedAt",
            "status",
            "token"
        ]
    );
    assert!(run["error"].is_null(), "{run}");
    assert!(!run["owner"].as_str().unwrap().is_empty(), "{run}");
    let scheduled_at = run["scheduledAt"].as_i64().unwrap();
    assert!(
        (triggered_after - 5000..=now_millis() + 5000).contains(&scheduled_at),
        "a trigger runs now, not at the yearly fire time: {run}"
    );
    assert!(run["startedAt"].as_i64().unwrap() <= run["finishedAt"].as_i64().unwrap());
    // The run is recorded ok only after the call answered: it has been made, exactly once.
    let seen = calls.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].job, "yearly-ping");
    assert_eq!(seen[0].scheduled_at, scheduled_at.to_string());
    assert_eq!(seen[0].token, run["token"].as_i64().unwrap().to_string());
    let job = job_named(&app, &admin, "yearly-ping").await;
    assert_eq!(job["status"], "waiting", "released after the run: {job}");
    // The durable scheduler's metrics are on /metrics (process-wide across tests, so >= 1).
    let metrics = app.metrics_text().await;
    for series in [
        "scheduler_sql_claims_total{kind=\"triggered\"} ",
        "scheduler_job_runs_total{job=\"yearly-ping\",outcome=\"success\"} ",
        "scheduler_sql_schedule_lag_seconds_bucket{le=\"1\"}",
    ] {
        assert!(metrics.contains(series), "no {series} on /metrics");
    }

    expect(
        &post(&app, &format!("/jobs/{id}/stop"), Some(&admin), json!({})).await,
        StatusCode::OK,
        0,
    );
    assert_eq!(
        job_named(&app, &admin, "yearly-ping").await["status"],
        "paused"
    );
    let refused = expect(
        &post(
            &app,
            &format!("/jobs/{id}/trigger"),
            Some(&admin),
            json!({}),
        )
        .await,
        StatusCode::OK,
        4,
    );
    assert!(
        refused["msg"].as_str().unwrap().contains("stopped"),
        "{refused}"
    );
    expect(
        &post(&app, &format!("/jobs/{id}/resume"), Some(&admin), json!({})).await,
        StatusCode::OK,
        0,
    );
    let resumed = job_named(&app, &admin, "yearly-ping").await;
    assert_eq!(resumed["status"], "waiting");
    assert!(
        resumed["nextTime"].as_i64().unwrap() > now_millis(),
        "{resumed}"
    );

    // `limit` is checked; a valid one bounds the list.
    for limit in ["0", "501"] {
        let answer = get(
            &app,
            &format!("/jobs/{id}/runs?limit={limit}"),
            Some(&admin),
        )
        .await;
        let refused = expect(&answer, StatusCode::OK, 4);
        assert!(
            refused["msg"].as_str().unwrap().contains("limit"),
            "{refused}"
        );
    }
    let answer = get(&app, &format!("/jobs/{id}/runs?limit=many"), Some(&admin)).await;
    expect(&answer, StatusCode::BAD_REQUEST, 4);
    let answer = get(&app, &format!("/jobs/{id}/runs?limit=1"), Some(&admin)).await;
    assert_eq!(
        expect(&answer, StatusCode::OK, 0)["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Unknown ids: 404001 on every route; a non-numeric id is a bad request.
    for action in ["stop", "resume", "trigger"] {
        let answer = post(
            &app,
            &format!("/jobs/999999/{action}"),
            Some(&admin),
            json!({}),
        )
        .await;
        expect(&answer, StatusCode::OK, 404001);
    }
    expect(
        &get(&app, "/jobs/999999/runs", Some(&admin)).await,
        StatusCode::OK,
        404001,
    );
    expect(
        &post(&app, "/jobs/ping/stop", Some(&admin), json!({})).await,
        StatusCode::BAD_REQUEST,
        4,
    );
    assert_eq!(calls.lock().unwrap().len(), 1, "no other run was made");
}

const BINARY: &str = env!("CARGO_BIN_EXE_webook");

/// Runs `webook <args>` on the SQLite file in `dir`, with no inherited `WEBOOK_*` settings.
fn webook(dir: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(BINARY);
    for (key, _) in std::env::vars() {
        if key.starts_with("WEBOOK_") {
            command.env_remove(key);
        }
    }
    let data_dir = dir.join("data");
    let database_url = format!("sqlite://{}", dir.join("jobs.db").display());
    command
        .current_dir(dir)
        .args(["--data-dir", data_dir.to_str().unwrap()])
        .args(["--database-url", &database_url])
        // The jobs here name loopback hooks, which http jobs may not call by default.
        .env("WEBOOK_JOB_HTTP_ALLOWED_NETWORKS", "127.0.0.0/8")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run webook")
}

/// Runs a command expected to succeed; returns its stdout.
#[track_caller]
fn succeeds(dir: &Path, args: &[&str]) -> String {
    common::cli_succeeded(webook(dir, args), args)
}

/// Runs a command expected to fail; returns its one-line stderr.
#[track_caller]
fn fails(dir: &Path, args: &[&str]) -> String {
    common::cli_refused(webook(dir, args), args)
}

use common::table_cells as cells;

#[test]
fn the_jobs_command_manages_jobs_offline() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let cfg = r#"{"url": "http://127.0.0.1:9/hook"}"#;
    let add = |name: &'static str, cron: &'static str, executor: &'static str| {
        vec![
            "jobs",
            "add",
            "--name",
            name,
            "--cron",
            cron,
            "--executor",
            executor,
            "--cfg",
            cfg,
        ]
    };

    let mut nightly = add("nightly", "0 0 3 * * *", "http");
    nightly.extend(["--timezone", "Europe/Paris", "--misfire", "skip"]);
    let created = succeeds(dir, &nightly);
    assert_eq!(created, "created job 1\n");

    let stderr = fails(dir, &add("bad", "0 0 25 * * *", "http"));
    assert!(stderr.contains("hour field"), "{stderr}");
    let stderr = fails(dir, &add("other", "@daily", "nosuch"));
    assert!(stderr.contains("unknown executor \"nosuch\""), "{stderr}");
    let mut bad_cfg = add("other", "@daily", "http");
    bad_cfg[9] = r#"{"url": "ftp://example.com/"}"#;
    let stderr = fails(dir, &bad_cfg);
    assert!(stderr.contains("invalid http cfg"), "{stderr}");
    let stderr = fails(dir, &add("nightly", "@daily", "http"));
    assert!(stderr.contains("already exists"), "{stderr}");

    let listed = cells(&succeeds(dir, &["jobs", "list"]));
    assert_eq!(
        listed[0],
        ["ID", "NAME", "STATUS", "CRON", "TIMEZONE", "EXECUTOR", "NEXT", "OWNER"]
    );
    assert_eq!(
        listed.len(),
        2,
        "only the valid job was created: {listed:?}"
    );
    let row = &listed[1];
    assert_eq!(
        row[..6],
        [
            "1",
            "nightly",
            "waiting",
            "0 0 3 * * *",
            "Europe/Paris",
            "http"
        ]
    );
    let next = chrono::DateTime::parse_from_rfc3339(&row[6]).expect("NEXT is RFC 3339");
    assert!(row[6].ends_with('Z'), "UTC: {}", row[6]);
    assert!(next.timestamp_millis() > now_millis());
    assert_eq!(row[7], "-");

    assert_eq!(
        succeeds(dir, &["jobs", "stop", "nightly"]),
        "stopped job 1 (nightly)\n"
    );
    assert_eq!(cells(&succeeds(dir, &["jobs", "list"]))[1][2], "paused");
    let stderr = fails(dir, &["jobs", "trigger", "nightly"]);
    assert!(stderr.contains("stopped; resume it first"), "{stderr}");
    let resumed = succeeds(dir, &["jobs", "resume", "nightly"]);
    assert!(
        resumed.starts_with("resumed job 1 (nightly), next run at 20"),
        "{resumed}"
    );
    assert_eq!(cells(&succeeds(dir, &["jobs", "list"]))[1][2], "waiting");
    let triggered = succeeds(dir, &["jobs", "trigger", "1"]);
    assert!(
        triggered.starts_with("triggered job 1 (nightly)"),
        "{triggered}"
    );

    let runs = succeeds(dir, &["jobs", "runs", "nightly", "--limit", "10"]);
    assert_eq!(
        cells(&runs),
        [[
            "ID",
            "SCHEDULED",
            "STATUS",
            "STARTED",
            "FINISHED",
            "TOKEN",
            "OWNER",
            "ERROR"
        ]],
        "a header and no runs (no instance ran it): {runs}"
    );
    let stderr = fails(dir, &["jobs", "stop", "nosuch"]);
    assert!(stderr.contains("no such job \"nosuch\""), "{stderr}");
    let stderr = fails(dir, &["jobs", "runs", "42"]);
    assert!(stderr.contains("no such job \"42\""), "{stderr}");
}

#[test]
fn the_admin_command_grants_and_revokes_by_email_or_id() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    succeeds(dir, &["migrate"]);
    let stderr = fails(dir, &["admin", "grant", "nobody@example.com"]);
    assert!(stderr.contains("no user nobody@example.com"), "{stderr}");
    // A user to grant: signed up through the store, as the server would.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = format!("sqlite://{}", dir.join("jobs.db").display());
    runtime.block_on(async {
        let db = platform::db::Db::connect_url(&url, 1).await.unwrap();
        webook::user::store::UserStore::new(db.clone())
            .insert("ops@example.com", "$argon2id$not-a-real-hash", now_millis())
            .await
            .unwrap();
        db.close().await;
    });
    assert_eq!(
        succeeds(dir, &["admin", "grant", "OPS@example.com"]),
        "user 1 (OPS@example.com) is an admin\n"
    );
    let listed = cells(&succeeds(dir, &["admin", "list"]));
    assert_eq!(listed[1][..2], ["1", "ops@example.com"]);
    assert_eq!(
        succeeds(dir, &["admin", "revoke", "1"]),
        "user 1 (1) is no longer an admin\n"
    );
    assert_eq!(cells(&succeeds(dir, &["admin", "list"])).len(), 1);
}
