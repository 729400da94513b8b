//! The app's periodic jobs, on every setup: the maintenance jobs purge what has expired
//! (sessions, applied-event ids, durable-job history past its retention) and keep what has not,
//! and the job metrics (runs by outcome, duration histogram) appear on `/metrics`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Setup;
use platform::db::now_millis;
use platform::testing::wait_until;
use webook::schema::MIGRATIONS;
use webook::testing::TestApp;

setup_tests!(maintenance_jobs_purge_expired_state_and_report_metrics);

const DAY_MS: i64 = 24 * 3600 * 1000;

async fn count(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap()
}

async fn maintenance_jobs_purge_expired_state_and_report_metrics(setup: Setup) {
    let app = setup
        .spawn(|config| config.purge_schedule = "@every 1s".to_owned())
        .await;
    let now = now_millis();
    let writer = app.platform.db.writer();
    for (ssid, expires_at) in [("expired", now - 1000), ("live", now + DAY_MS)] {
        sqlx::query(
            "INSERT INTO sessions (ssid, uid, generation, revoked, expires_at) \
             VALUES ($1, 1, 1, 0, $2)",
        )
        .bind(ssid)
        .bind(expires_at)
        .execute(writer)
        .await
        .unwrap();
    }
    for (event_id, ctime) in [("old-0", now - 2 * DAY_MS), ("recent-0", now)] {
        sqlx::query(
            "INSERT INTO consumed_events (group_name, event_id, ctime) VALUES ('g', $1, $2)",
        )
        .bind(event_id)
        .bind(ctime)
        .execute(writer)
        .await
        .unwrap();
    }

    // Durable-job history: finished runs past the retention (30 days by default) go; a recent
    // one and a still-running one stay.
    let job_id = app
        .service::<scheduler::sql::SqlJobStore>()
        .create(&scheduler::sql::NewJob {
            name: "history".to_owned(),
            cron: "@every 1h".to_owned(),
            timezone: "UTC".to_owned(),
            executor: "http".to_owned(),
            cfg: "{}".to_owned(),
            misfire: scheduler::sql::Misfire::Skip,
            overlap: scheduler::sql::OverlapPolicy::Forbid,
            timeout_ms: 1000,
        })
        .await
        .unwrap();
    for (scheduled_at, status) in [
        (now - 40 * DAY_MS, "ok"),
        (now - 40 * DAY_MS + 1, "misfired"),
        (now - 39 * DAY_MS, "running"),
        (now - DAY_MS, "ok"),
    ] {
        sqlx::query(
            "INSERT INTO job_runs (job_id, scheduled_at, token, status) VALUES ($1, $2, 1, $3)",
        )
        .bind(job_id)
        .bind(scheduled_at)
        .bind(status)
        .execute(writer)
        .await
        .unwrap();
    }
    wait_until("job runs past the retention to be purged", || async {
        count(
            &app,
            &format!("SELECT COUNT(*) FROM job_runs WHERE job_id = {job_id} AND status <> 'running' AND scheduled_at < {}", now - 2 * DAY_MS),
        )
        .await
            == 0
    })
    .await;
    assert_eq!(
        count(
            &app,
            &format!("SELECT COUNT(*) FROM job_runs WHERE job_id = {job_id}")
        )
        .await,
        2,
        "the running and the recent run stay"
    );

    wait_until("old applied-event ids to be purged", || async {
        count(
            &app,
            "SELECT COUNT(*) FROM consumed_events WHERE event_id = 'old-0'",
        )
        .await
            == 0
    })
    .await;
    assert_eq!(
        count(
            &app,
            "SELECT COUNT(*) FROM consumed_events WHERE event_id = 'recent-0'"
        )
        .await,
        1
    );
    // Sessions live in the database in both modes (Redis only caches their flags).
    wait_until("expired sessions to be purged", || async {
        count(&app, "SELECT COUNT(*) FROM sessions WHERE ssid = 'expired'").await == 0
    })
    .await;
    assert_eq!(
        count(&app, "SELECT COUNT(*) FROM sessions WHERE ssid = 'live'").await,
        1
    );

    // Both jobs have succeeded at least once by now (metrics are process-wide across tests).
    wait_until("job metrics on /metrics", || async {
        let body = app.metrics_text().await;
        ["purge_expired_sessions", "purge_consumed_events", "purge_job_runs"]
            .iter()
            .all(|job| {
                let runs = format!(
                    "scheduler_job_runs_total{{job=\"{job}\",outcome=\"success\"}} "
                );
                let succeeded = body
                    .lines()
                    .filter_map(|line| line.strip_prefix(&runs))
                    .any(|value| value.parse::<f64>().is_ok_and(|runs| runs >= 1.0));
                let histogram = format!(
                    "scheduler_job_duration_seconds_bucket{{job=\"{job}\",outcome=\"success\",le=\"3600\"}}"
                );
                succeeded && body.contains(&histogram)
            })
    })
    .await;
    app.stop().await.unwrap();
}

/// `role = worker`: jobs run (the purge below), but the port answers only the operations routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_jobs_and_serves_only_operations_routes() {
    let app = TestApp::spawn_with(
        platform::testing::TestDb::sqlite(&MIGRATIONS).await,
        |config| {
            config.role = platform::config::Role::Worker;
            config.purge_schedule = "@every 1s".to_owned();
        },
    )
    .await;
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            app.get_json(path).await.0,
            reqwest::StatusCode::OK,
            "{path}"
        );
    }
    assert!(app
        .metrics_text()
        .await
        .contains("scheduler_job_runs_total"));
    let (status, body) = app.get_json("/ranking/top").await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "{body}");
    sqlx::query(
        "INSERT INTO sessions (ssid, uid, generation, revoked, expires_at) VALUES ('gone', 1, 1, 0, 1)",
    )
    .execute(app.platform.db.writer())
    .await
    .unwrap();
    wait_until("the worker's purge job to run", || async {
        count(&app, "SELECT COUNT(*) FROM sessions").await == 0
    })
    .await;
}
