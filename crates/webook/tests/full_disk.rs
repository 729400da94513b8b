//! A full disk never turns into lost writes: every write answered code 0 is still there after
//! a restart, nothing is answered twice with one id, failed writes answer 503 (code 5), the
//! writer never stays stuck in a failed transaction (another process can take the write lock),
//! `/readyz` says the database cannot write, and the server recovers by itself once space is
//! freed.
//!
//! Each test makes its own small filesystem: a tmpfs it mounts (which needs root; CI runs as
//! root, and without it the tests fail saying so), with a ballast file that is deleted to free
//! space. SQLite lives on it directly; PostgreSQL gets a tablespace on it for the test's
//! database, so a full disk is PostgreSQL's own "could not extend file" error.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod common;

use std::{
    collections::HashSet,
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
};

use common::{login, post, signup, Answer};
use reqwest::StatusCode;
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection, Row, SqliteConnection};
use webook::{
    infra::db::Db,
    testing::{wait_until, TestApp, TestDb},
};

const MIB: u64 = 1024 * 1024;

/// A tmpfs of a given size, mounted on a temp dir for the test and unmounted after it.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: u64) -> Self {
        assert!(
            rustix::process::geteuid().is_root(),
            "the full-disk tests mount a tmpfs and need root (scripts/test.sh in CI runs as \
             root); run them as root"
        );
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mounting a tmpfs on {}",
            dir.path().display()
        );
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `bytes` of ballast (or as much as fits) to a file; returns its path.
    fn ballast(&self, bytes: u64) -> PathBuf {
        let path = self.path().join("ballast");
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0xa5u8; 64 * 1024];
        let mut written = 0;
        while written < bytes {
            if file.write_all(&block).is_err() {
                break;
            }
            written += block.len() as u64;
        }
        path
    }

    fn free_bytes(&self) -> u64 {
        let stats = rustix::fs::statvfs(self.path()).unwrap();
        stats.f_bavail * stats.f_frsize
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: a straggling handle (a closing pool) must not keep the mount.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// What the concurrent publishing answered.
#[derive(Default)]
struct Outcomes {
    acknowledged: Vec<(i64, String)>,
    failures: Vec<String>,
}

fn content(index: usize) -> String {
    // ~100 KiB of text per article that does not compress (PostgreSQL compresses long values):
    // letters from a simple generator seeded by the index.
    let mut state = (index as u64).wrapping_mul(6_364_136_223_846_793_005) | 1;
    let text: String = (0..100 * 1024)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from(b'a' + ((state >> 33) % 26) as u8)
        })
        .collect();
    format!("<p>{text}</p>")
}

/// Publishes `per_round` articles at a time until `failures` publishes failed or `rounds`
/// rounds ran.
async fn publish_until_full(
    app: &TestApp,
    token: &str,
    failures: usize,
    rounds: usize,
) -> Outcomes {
    let mut outcomes = Outcomes::default();
    let mut index = 0;
    for _ in 0..rounds {
        let mut round = Vec::new();
        for _ in 0..8 {
            index += 1;
            let title = format!("full disk {index}");
            let body = json!({"title": title, "content": content(index)});
            round.push(async move {
                (
                    title,
                    post(app, "/articles/publish", Some(token), body).await,
                )
            });
        }
        for (title, answer) in futures_util::future::join_all(round).await {
            match (answer.status, answer.code()) {
                (StatusCode::OK, 0) => outcomes
                    .acknowledged
                    .push((answer.json()["data"].as_i64().unwrap(), title)),
                (StatusCode::SERVICE_UNAVAILABLE, 5) => outcomes.failures.push(answer.raw),
                other => panic!(
                    "a publish on a full disk answered {other:?}: {}",
                    answer.raw
                ),
            }
        }
        if outcomes.failures.len() >= failures {
            break;
        }
    }
    outcomes
}

fn assert_unique(acknowledged: &[(i64, String)]) {
    let mut seen = HashSet::new();
    let twice: Vec<&(i64, String)> = acknowledged
        .iter()
        .filter(|(id, _)| !seen.insert(*id))
        .collect();
    assert!(
        twice.is_empty(),
        "{} of {} acknowledged publishes got an id answered before: {twice:?}",
        twice.len(),
        acknowledged.len()
    );
}

fn expect_ok(answer: &Answer, what: &str) {
    assert_eq!(
        (answer.status, answer.code()),
        (StatusCode::OK, 0),
        "{what}: {}",
        answer.raw
    );
}

/// After a restart (a fresh pool on the same database): every acknowledged article is there
/// with its title, and the users and like acknowledged after recovery too.
async fn assert_everything_acknowledged_survived(
    url: &str,
    acknowledged: &[(i64, String)],
    users: &[&str],
) {
    let db = Db::connect_url(url, 2).await.unwrap();
    for (id, title) in acknowledged {
        let row = sqlx::query("SELECT title, status FROM published_articles WHERE id = $1")
            .bind(*id)
            .fetch_optional(db.pool())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("article {id} ({title}) was answered code 0 and is gone"));
        assert_eq!(row.get::<String, _>(0), *title, "article {id}");
    }
    for email in users {
        let found: Option<i64> = sqlx::query_scalar("SELECT id FROM users WHERE email = $1")
            .bind(*email)
            .fetch_optional(db.pool())
            .await
            .unwrap();
        assert!(
            found.is_some(),
            "sign-up of {email} was answered code 0 and is gone"
        );
    }
    let likes: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM user_likes WHERE status = 1")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(likes, 1, "the like answered code 0 is gone");
    db.close().await;
}

/// Once space is freed: writes succeed again without a restart.
async fn writes_recover(app: &TestApp, token: &str, acknowledged: &mut Vec<(i64, String)>) {
    let answer = post(
        app,
        "/articles/publish",
        Some(token),
        json!({"title": "after recovery", "content": "<p>space again</p>"}),
    )
    .await;
    expect_ok(&answer, "a publish after space was freed");
    let id = answer.json()["data"].as_i64().unwrap();
    acknowledged.push((id, "after recovery".to_owned()));
    expect_ok(
        &signup(app, "later@example.com").await,
        "a sign-up after space was freed",
    );
    let (later, _) = login(app, "later@example.com").await;
    expect_ok(
        &post(
            app,
            "/articles/pub/like",
            Some(&later),
            json!({"id": id, "like": true}),
        )
        .await,
        "a like after space was freed",
    );
    assert_unique(acknowledged);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_full_disk_loses_no_acknowledged_write() {
    let disk = SmallDisk::mount(16 * MIB);
    let ballast = disk.ballast(4 * MIB);
    let db = Arc::new(TestDb::sqlite_in(tempfile::tempdir_in(disk.path()).unwrap()).await);
    let url = db.url.clone();
    let file = url.trim_start_matches("sqlite://").to_owned();
    // `db` stays here: dropping the last handle removes the database.
    let app = TestApp::spawn_shared(db.clone(), |_| {}).await;
    expect_ok(&signup(&app, "writer@example.com").await, "sign-up");
    let (token, _) = login(&app, "writer@example.com").await;

    let mut outcomes = publish_until_full(&app, &token, 16, 40).await;
    assert!(
        outcomes.failures.len() >= 16,
        "the disk never filled up: {} publishes succeeded, {} MiB free",
        outcomes.acknowledged.len(),
        disk.free_bytes() / MIB
    );
    assert_unique(&outcomes.acknowledged);

    // Full: readiness says the database cannot write, and the writer holds no lock.
    let (status, body) = app.get_json("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["data"]["database"], "not writable", "{body}");
    let mut other = SqliteConnection::connect(&format!("sqlite://{file}"))
        .await
        .unwrap();
    other.execute("PRAGMA busy_timeout = 2000").await.unwrap();
    other
        .execute("BEGIN IMMEDIATE")
        .await
        .expect("another process takes the write lock: the writer is not stuck in a transaction");
    other.execute("ROLLBACK").await.unwrap();
    other.close().await.unwrap();

    std::fs::remove_file(ballast).unwrap();
    wait_until("readyz to recover once space is freed", || async {
        app.get_json("/readyz").await.0 == StatusCode::OK
    })
    .await;
    writes_recover(&app, &token, &mut outcomes.acknowledged).await;
    app.stop().await.unwrap();

    assert_everything_acknowledged_survived(
        &url,
        &outcomes.acknowledged,
        &["writer@example.com", "later@example.com"],
    )
    .await;
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_on_a_full_tablespace_loses_no_acknowledged_write() {
    let disk = SmallDisk::mount(12 * MIB);
    let location = disk.path().join("tablespace");
    std::fs::create_dir(&location).unwrap();
    let admin_url = std::env::var(webook::testing::TEST_DATABASE_URL_ENV)
        .expect("WEBOOK_TEST_DATABASE_URL: run the tests through scripts/test.sh");
    let mut admin = PgConnection::connect(&admin_url).await.unwrap();
    // The server's own OS user must own a tablespace's directory.
    let data_directory: String = sqlx::query_scalar("SHOW data_directory")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&data_directory).unwrap());
    std::os::unix::fs::chown(&location, Some(owner), None).unwrap();
    let tablespace = format!("webook_small_{}", uuid::Uuid::new_v4().simple());
    admin
        .execute(
            format!(
                "CREATE TABLESPACE {tablespace} LOCATION '{}'",
                location.display()
            )
            .as_str(),
        )
        .await
        .unwrap();

    let ballast = disk.ballast(3 * MIB);
    let db = Arc::new(TestDb::postgres_in_tablespace(&tablespace).await);
    let url = db.url.clone();
    let app = TestApp::spawn_shared(db.clone(), |_| {}).await;
    expect_ok(&signup(&app, "writer@example.com").await, "sign-up");
    let (token, _) = login(&app, "writer@example.com").await;

    let mut outcomes = publish_until_full(&app, &token, 16, 40).await;
    assert!(
        outcomes.failures.len() >= 16,
        "the tablespace never filled up: {} publishes succeeded",
        outcomes.acknowledged.len()
    );
    assert_unique(&outcomes.acknowledged);

    std::fs::remove_file(ballast).unwrap();
    writes_recover(&app, &token, &mut outcomes.acknowledged).await;
    app.stop().await.unwrap();
    assert_everything_acknowledged_survived(
        &url,
        &outcomes.acknowledged,
        &["writer@example.com", "later@example.com"],
    )
    .await;

    drop(db);
    admin
        .execute(format!("DROP TABLESPACE {tablespace}").as_str())
        .await
        .unwrap();
    admin.close().await.unwrap();
}
