//! Live settings on {SQLite, PostgreSQL} × {embedded, Redis}: an admin's change applies on the
//! answering instance at once and on another within its poll, without a restart; removing it
//! brings back the start-up value; an invalid value or a key that needs a restart is refused
//! with the start-up message and writes nothing; only admins see or change settings and every
//! change is in the audit log; a grey-release switch decides per user and counts each variant;
//! an instance started later begins with the stored values.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::Duration;

use crate::common;

use common::{get, member, post, Member, Setup};
use platform::testing::wait_until;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use webook::testing::TestApp;

setup_tests!(
    a_live_limit_applies_at_once_and_unset_brings_back_the_start_up_value,
    invalid_values_and_restart_keys_are_refused_with_the_start_up_message,
    only_admins_see_or_change_settings_and_every_change_is_logged,
    the_stream_switch_decides_per_user_and_counts_each_variant,
    anonymous_reading_is_switched_live,
);

/// An app whose first account is an admin, with the write limit off at start-up.
async fn app(setup: Setup) -> (TestApp, Member) {
    let app = setup
        .spawn(|config| {
            let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
            auth.admins = vec![1];
            auth.auth_rate_limit = 1_000_000;
            auth.write_rate_limit = 0;
        })
        .await;
    let admin = member(&app, "admin").await;
    assert_eq!(admin.uid, 1, "the first account is the admin");
    (app, admin)
}

async fn put(app: &TestApp, admin: &Member, key: &str, value: Value) -> common::Answer {
    common::call(
        app,
        Method::PUT,
        &format!("/admin/settings/{key}"),
        Some(&admin.token),
        common::UA,
        Some(json!({ "value": value })),
    )
    .await
}

async fn unset(app: &TestApp, admin: &Member, key: &str) -> common::Answer {
    common::call(
        app,
        Method::DELETE,
        &format!("/admin/settings/{key}"),
        Some(&admin.token),
        common::UA,
        None,
    )
    .await
}

fn expect(answer: &common::Answer, code: i64) -> Value {
    assert_eq!(
        answer.status_and_code(),
        (StatusCode::OK, code),
        "{}",
        answer.raw
    );
    answer.json()
}

/// Saves a draft as `who`: the answer's code (0, or 429001 over the write limit).
async fn write(app: &TestApp, who: &Member) -> i64 {
    post(
        app,
        "/articles/edit",
        Some(&who.token),
        json!({"title": "t", "content": "<p>c</p>"}),
    )
    .await
    .code()
}

async fn a_live_limit_applies_at_once_and_unset_brings_back_the_start_up_value(setup: Setup) {
    let (app, admin) = app(setup).await;
    let writer = member(&app, "writer").await;
    for _ in 0..3 {
        assert_eq!(
            write(&app, &writer).await,
            0,
            "the limit is off at start-up"
        );
    }
    let set = expect(&put(&app, &admin, "write_rate_limit", json!(2)).await, 0);
    assert_eq!(set["data"]["value"], json!(2), "{set}");
    assert_eq!(set["data"]["startValue"], json!(0), "{set}");
    assert_eq!(set["data"]["overridden"], json!(true), "{set}");
    assert_eq!(set["data"]["live"], json!(true), "{set}");
    // The answering instance applied it before answering: the third write is over the limit.
    assert_eq!(write(&app, &writer).await, 0);
    assert_eq!(write(&app, &writer).await, 0);
    assert_eq!(write(&app, &writer).await, 429_001);
    let back = expect(&unset(&app, &admin, "write_rate_limit").await, 0);
    assert_eq!(back["data"]["value"], json!(0), "{back}");
    assert_eq!(back["data"]["overridden"], json!(false), "{back}");
    for _ in 0..3 {
        assert_eq!(write(&app, &writer).await, 0, "off again");
    }
    // The window is live too, in the form webook.toml takes.
    let window = expect(
        &put(&app, &admin, "write_rate_window", json!("5m")).await,
        0,
    );
    assert_eq!(window["data"]["value"], json!("5m"), "{window}");
}

async fn invalid_values_and_restart_keys_are_refused_with_the_start_up_message(setup: Setup) {
    let (app, admin) = app(setup).await;
    for (key, value, message) in [
        (
            "write_rate_window",
            json!("0s"),
            "invalid write_rate_window (WEBOOK_WRITE_RATE_WINDOW): must be above 0",
        ),
        (
            "auth_rate_limit",
            json!(0),
            "invalid auth_rate_limit / auth_rate_window (WEBOOK_AUTH_RATE_LIMIT, \
             WEBOOK_AUTH_RATE_WINDOW): both must be above 0",
        ),
        (
            "log",
            json!("webook=loud"),
            "invalid log (WEBOOK_LOG) \"webook=loud\"",
        ),
        (
            "write_rate_limit",
            json!("lots"),
            "invalid write_rate_limit (live setting):",
        ),
        (
            "notifications_stream",
            json!("150%"),
            "invalid notifications_stream (live setting): a percentage is 0% to 100%",
        ),
        (
            "listen",
            json!("0.0.0.0:1"),
            "listen needs a restart: set it in webook.toml, WEBOOK_LISTEN or --listen, then \
             restart the instances",
        ),
        (
            "jwt_access_secret",
            json!("x"),
            "jwt_access_secret needs a restart",
        ),
        ("no_such_key", json!(1), "unknown setting \"no_such_key\""),
    ] {
        let answer = put(&app, &admin, key, value).await;
        let body = expect(&answer, 4);
        let msg = body["msg"].as_str().unwrap();
        assert!(msg.starts_with(message), "{key}: {msg}");
        assert!(!msg.contains('\n'), "one line: {msg}");
    }
    // Nothing was written: no live value, no audit entry, the start-up values in effect.
    let log = expect(
        &get(&app, "/admin/settings-log", Some(&admin.token)).await,
        0,
    );
    assert_eq!(log["data"], json!([]), "{log}");
    let all = expect(&get(&app, "/admin/settings", Some(&admin.token)).await, 0);
    let all = all["data"].as_array().unwrap();
    assert!(all
        .iter()
        .all(|setting| setting["overridden"] == json!(false)));
    let secret = all
        .iter()
        .find(|setting| setting["key"] == "jwt_access_secret")
        .unwrap();
    assert_eq!(secret["live"], json!(false));
    assert!(
        matches!(secret["value"].as_str(), Some("" | "<redacted>")),
        "a secret is never shown: {secret}"
    );
    let limit = all
        .iter()
        .find(|setting| setting["key"] == "write_rate_limit")
        .unwrap();
    assert_eq!(
        (limit["value"].clone(), limit["live"].clone()),
        (json!(0), json!(true))
    );
}

async fn only_admins_see_or_change_settings_and_every_change_is_logged(setup: Setup) {
    let (app, admin) = app(setup).await;
    let reader = member(&app, "reader").await;
    assert_eq!(
        get(&app, "/admin/settings", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    expect(
        &get(&app, "/admin/settings", Some(&reader.token)).await,
        403_002,
    );
    expect(
        &put(&app, &reader, "write_rate_limit", json!(1)).await,
        403_002,
    );
    expect(&unset(&app, &reader, "write_rate_limit").await, 403_002);
    expect(
        &get(&app, "/admin/settings-log", Some(&reader.token)).await,
        403_002,
    );
    expect(&put(&app, &admin, "comment_rate_limit", json!(7)).await, 0);
    // The same value again changes nothing and logs nothing.
    expect(&put(&app, &admin, "comment_rate_limit", json!(7)).await, 0);
    expect(&put(&app, &admin, "search_rate_limit", json!(9)).await, 0);
    expect(&unset(&app, &admin, "comment_rate_limit").await, 0);
    // Unsetting what has no live value changes nothing either.
    expect(&unset(&app, &admin, "comment_rate_limit").await, 0);
    let log = expect(
        &get(&app, "/admin/settings-log", Some(&admin.token)).await,
        0,
    );
    let entries: Vec<(String, Value, Value, i64, String)> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["key"].as_str().unwrap().to_owned(),
                entry["oldValue"].clone(),
                entry["newValue"].clone(),
                entry["admin"].as_i64().unwrap(),
                entry["via"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        vec![
            (
                "comment_rate_limit".to_owned(),
                json!(7),
                Value::Null,
                1,
                "api".to_owned()
            ),
            (
                "search_rate_limit".to_owned(),
                Value::Null,
                json!(9),
                1,
                "api".to_owned()
            ),
            (
                "comment_rate_limit".to_owned(),
                Value::Null,
                json!(7),
                1,
                "api".to_owned()
            ),
        ]
    );
    let one_key = expect(
        &get(
            &app,
            "/admin/settings-log?key=search_rate_limit&limit=5",
            Some(&admin.token),
        )
        .await,
        0,
    );
    assert_eq!(one_key["data"].as_array().unwrap().len(), 1, "{one_key}");
    let page = expect(
        &get(&app, "/admin/settings-log?limit=1", Some(&admin.token)).await,
        0,
    );
    let newest = page["data"][0]["id"].as_i64().unwrap();
    let next = expect(
        &get(
            &app,
            &format!("/admin/settings-log?limit=5&before={newest}"),
            Some(&admin.token),
        )
        .await,
        0,
    );
    assert_eq!(next["data"].as_array().unwrap().len(), 2, "{next}");
}

/// The status of `who`'s `GET /notifications/stream` (the stream itself is dropped).
async fn stream_status(app: &TestApp, who: &Member) -> StatusCode {
    app.client
        .get(app.url("/notifications/stream"))
        .header(reqwest::header::USER_AGENT, common::UA)
        .bearer_auth(&who.token)
        .send()
        .await
        .unwrap()
        .status()
}

fn switch_count(app: &TestApp, variant: &str) -> f64 {
    let series = format!(
        "feature_switch_decisions_total{{switch=\"notifications_stream\",variant=\"{variant}\"}} "
    );
    app.platform
        .metrics
        .render()
        .lines()
        .find_map(|line| line.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn the_stream_switch_decides_per_user_and_counts_each_variant(setup: Setup) {
    let (app, admin) = app(setup).await;
    let chosen = member(&app, "chosen").await;
    let other = member(&app, "other").await;
    assert_eq!(
        stream_status(&app, &other).await,
        StatusCode::OK,
        "on by default"
    );
    let (on_before, off_before) = (switch_count(&app, "on"), switch_count(&app, "off"));
    expect(
        &put(&app, &admin, "notifications_stream", json!("off")).await,
        0,
    );
    assert_eq!(stream_status(&app, &chosen).await, StatusCode::NO_CONTENT);
    let listed = expect(
        &put(
            &app,
            &admin,
            "notifications_stream",
            json!(format!("0%, {}", chosen.uid)),
        )
        .await,
        0,
    );
    assert_eq!(
        listed["data"]["value"],
        json!(chosen.uid.to_string()),
        "{listed}"
    );
    assert_eq!(stream_status(&app, &chosen).await, StatusCode::OK);
    assert_eq!(stream_status(&app, &other).await, StatusCode::NO_CONTENT);
    // The unread count still answers whoever the stream is off for (the console polls it).
    expect(
        &get(&app, "/notifications/unread", Some(&other.token)).await,
        0,
    );
    assert!(switch_count(&app, "on") > on_before);
    assert!(switch_count(&app, "off") >= off_before + 2.0);
    // The table form of webook.toml works too, and everyone is "on".
    let table = expect(
        &put(
            &app,
            &admin,
            "notifications_stream",
            json!({"percent": 100}),
        )
        .await,
        0,
    );
    assert_eq!(table["data"]["value"], json!("on"), "{table}");
    assert_eq!(stream_status(&app, &other).await, StatusCode::OK);
}

async fn anonymous_reading_is_switched_live(setup: Setup) {
    let (app, admin) = app(setup).await;
    let author = member(&app, "author").await;
    let id = common::publish(&app, &author, "Open to all").await;
    let path = format!("/articles/pub/{id}");
    let page = format!("/a/{id}");
    expect(&get(&app, &path, None).await, 0);
    assert!(get(&app, &page, None).await.raw.contains("Open to all"));
    expect(
        &put(&app, &admin, "anonymous_reading", json!(false)).await,
        0,
    );
    assert_eq!(
        get(&app, &path, None).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert!(
        !get(&app, &page, None).await.raw.contains("Open to all"),
        "the public page follows the same switch"
    );
    expect(&get(&app, &path, Some(&author.token)).await, 0);
    expect(&unset(&app, &admin, "anonymous_reading").await, 0);
    expect(&get(&app, &path, None).await, 0);
}

/// Two cluster instances on one database and Redis, live settings polled every 100 ms.
async fn pair() -> (TestApp, TestApp, Member) {
    let (first, second) = common::cluster_pair(|config| {
        let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
        auth.admins = vec![1];
        auth.auth_rate_limit = 1_000_000;
        auth.write_rate_limit = 0;
        config
            .settings_mut::<webook::live_settings::settings::LiveSettingsSettings>()
            .live_settings_poll = Duration::from_millis(100);
    })
    .await;
    let admin = member(&first, "admin").await;
    assert_eq!(admin.uid, 1);
    (first, second, admin)
}

/// A change on one instance applies on the other within its poll, and so does its removal; the
/// other reports the version it applied on `/readyz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_on_one_instance_applies_on_the_other_within_its_poll() {
    let (first, second, admin) = pair().await;
    let writer = member(&second, "writer").await;
    expect(&put(&first, &admin, "write_rate_limit", json!(1)).await, 0);
    wait_until("the second instance applies the limit", || {
        let live = second.platform.live.current();
        async move {
            live.settings::<webook::auth::settings::AuthSettings>()
                .unwrap()
                .write_rate_limit
                == 1
        }
    })
    .await;
    assert_eq!(write(&second, &writer).await, 0);
    assert_eq!(write(&second, &writer).await, 429_001);
    let ready = get(&second, "/readyz", None).await.json();
    assert!(
        ready["data"]["details"]["live_settings"]
            .as_str()
            .unwrap()
            .starts_with("version "),
        "{ready}"
    );
    expect(&unset(&first, &admin, "write_rate_limit").await, 0);
    wait_until("the second instance drops the limit", || {
        let live = second.platform.live.current();
        async move {
            live.settings::<webook::auth::settings::AuthSettings>()
                .unwrap()
                .write_rate_limit
                == 0
        }
    })
    .await;
    assert_eq!(write(&second, &writer).await, 0);
}

/// `log` is live: a running process logs what its new filter lets through, and no longer
/// what it filters out, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_filter_changes_in_a_running_process() {
    use common::process::{webook, Server};
    let dir = tempfile::tempdir().unwrap();
    let mut command = webook(dir.path());
    command
        .env("WEBOOK_ADMINS", "[1]")
        .env("WEBOOK_LOG", "warn,webook::app=info");
    let server = Server::start(command);
    let admin = server
        .sign_up_and_log_in("log-admin@example.com", "Log-Passw0rd!")
        .await;
    let set = |key: &'static str, value: Value| {
        let (server, admin) = (&server, admin.clone());
        async move {
            let answer: Value = reqwest::Client::new()
                .put(server.url(&format!("/admin/settings/{key}")))
                .bearer_auth(admin)
                .json(&json!({ "value": value }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            assert_eq!(answer["code"], 0, "{answer}");
        }
    };
    // Under the start-up filter, applying a change logs nothing (its line is platform::live's).
    set("write_rate_limit", json!(50)).await;
    set("log", json!("warn,webook::app=info,platform::live=info")).await;
    let before: Vec<String> = server.new_log_lines();
    assert!(
        !before
            .iter()
            .any(|line| line.contains("live settings applied")),
        "{before:?}"
    );
    // Under the new one, the next change's line is written.
    set("write_rate_limit", json!(60)).await;
    let mut seen = Vec::new();
    wait_until("the next change's line under the live filter", || {
        seen.extend(server.new_log_lines());
        let found = seen
            .iter()
            .any(|line| line.contains("live settings applied"));
        async move { found }
    })
    .await;
    // Back to the start-up filter: the line is gone again.
    let reset: Value = reqwest::Client::new()
        .delete(server.url("/admin/settings/log"))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        reset["data"]["value"],
        json!("warn,webook::app=info"),
        "{reset}"
    );
    // (The reset's own line, version 4, is written under the filter it replaces.)
    set("write_rate_limit", json!(70)).await;
    set("write_rate_limit", json!(80)).await;
    let after = server.new_log_lines();
    assert!(
        !after
            .iter()
            .any(|line| line.contains("live settings applied")
                && (line.contains("version=5") || line.contains("version=6"))),
        "{after:?}"
    );
}
