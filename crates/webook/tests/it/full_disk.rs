//! A full disk never turns into lost writes: every write answered code 0 is still there after
//! a restart, nothing is answered twice with one id, failed writes answer 503 (code 5), the
//! writer never stays stuck in a failed transaction (another process can take the write lock),
//! `/readyz` says the database cannot write, and the server recovers by itself once space is
//! freed. The same holds for likes, which share transactions (group commit), and for reads,
//! which are counted in batches: every like answered code 0 survives, and every read is counted
//! once space is back.
//!
//! Each test makes its own small filesystem: a tmpfs it mounts (which needs root; CI runs as
//! root, and without it the tests fail saying so), with a ballast file that is deleted to free
//! space. SQLite lives on it directly; PostgreSQL gets a tablespace on it for the test's
//! database, so a full disk is PostgreSQL's own "could not extend file" error.
//!
//! The server's own output on a full disk (its database on a healthy one) costs no answer either:
//! the log lines that cannot be written are dropped and counted, and writing resumes once space
//! is freed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::{
    collections::HashSet,
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::Duration,
};
use webook::schema::MIGRATIONS;

use common::process::{webook, Server};
use common::{get, login, post, refresh, signup, Answer};
use platform::db::Db;
use platform::testing::{wait_until, TestDb};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection, Row, SqliteConnection};
use webook::testing::TestApp;

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

/// Readers prepared before the disk fills, and what they did while it was full.
struct Readers {
    tokens: Vec<String>,
    target: i64,
    likes_acknowledged: i64,
    reads: i64,
}

impl Readers {
    /// Six readers and an article for them, while there is space.
    async fn prepare(app: &TestApp, author: &str) -> Self {
        let answer = post(
            app,
            "/articles/publish",
            Some(author),
            json!({"title": "liked while full", "content": "<p>read me</p>"}),
        )
        .await;
        expect_ok(&answer, "the target article");
        let mut tokens = Vec::new();
        for n in 0..6 {
            let email = format!("reader{n}@example.com");
            expect_ok(&signup(app, &email).await, "a reader's sign-up");
            tokens.push(login(app, &email).await.0);
        }
        Self {
            tokens,
            target: answer.json()["data"].as_i64().unwrap(),
            likes_acknowledged: 0,
            reads: 0,
        }
    }

    /// On the full disk: every reader likes the target at once (they share a group commit) and
    /// reads it five times. A like answers 0 or 503; a read answers 0 (it writes nothing itself).
    async fn act_while_full(&mut self, app: &TestApp) {
        let target = self.target;
        let likes = self.tokens.iter().map(|token| async move {
            post(
                app,
                "/articles/pub/like",
                Some(token),
                json!({"id": target, "like": true}),
            )
            .await
        });
        for answer in futures_util::future::join_all(likes).await {
            match (answer.status, answer.code()) {
                (StatusCode::OK, 0) => self.likes_acknowledged += 1,
                (StatusCode::SERVICE_UNAVAILABLE, 5) => {}
                other => panic!("a like on a full disk answered {other:?}: {}", answer.raw),
            }
        }
        for token in &self.tokens {
            for _ in 0..5 {
                let answer = get(app, &format!("/articles/pub/{target}"), Some(token)).await;
                expect_ok(&answer, "a read on a full disk");
                self.reads += 1;
            }
        }
    }

    /// Once space is back: every read made while the disk was full is counted.
    async fn reads_are_all_counted(&self, db: &Db) {
        wait_until("every read made on the full disk to be counted", || async {
            let counted: Option<i64> = sqlx::query_scalar(
                "SELECT read_cnt FROM interactives WHERE biz = 'article' AND biz_id = $1",
            )
            .bind(self.target)
            .fetch_optional(db.pool())
            .await
            .unwrap();
            counted == Some(self.reads)
        })
        .await;
    }
}

/// After a restart (a fresh pool on the same database): every acknowledged article is there
/// with its title, and the users and likes acknowledged too.
async fn assert_everything_acknowledged_survived(
    url: &str,
    acknowledged: &[(i64, String)],
    users: &[&str],
    likes: i64,
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
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM user_likes WHERE status = 1")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(
        stored, likes,
        "likes answered code 0 are gone (or refused ones were kept)"
    );
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

/// What both tests do: a writer and six readers get ready while there is space, the writer
/// publishes until the disk is full, and the readers like and read on the full disk.
struct Filled {
    token: String,
    readers: Readers,
    outcomes: Outcomes,
}

impl Filled {
    async fn fill(app: &TestApp) -> Self {
        expect_ok(&signup(app, "writer@example.com").await, "sign-up");
        let (token, _) = login(app, "writer@example.com").await;
        let mut readers = Readers::prepare(app, &token).await;
        let outcomes = publish_until_full(app, &token, 16, 40).await;
        assert!(
            outcomes.failures.len() >= 16,
            "the disk never filled up: {} publishes succeeded",
            outcomes.acknowledged.len()
        );
        assert_unique(&outcomes.acknowledged);
        readers.act_while_full(app).await;
        Self {
            token,
            readers,
            outcomes,
        }
    }

    /// Once space is freed: writes succeed again, every read is counted, and after a restart
    /// everything acknowledged is there.
    async fn recover_and_verify(mut self, app: TestApp, url: &str) {
        writes_recover(&app, &self.token, &mut self.outcomes.acknowledged).await;
        self.readers.reads_are_all_counted(&app.platform.db).await;
        app.stop().await.unwrap();
        assert_everything_acknowledged_survived(
            url,
            &self.outcomes.acknowledged,
            &["writer@example.com", "later@example.com"],
            self.readers.likes_acknowledged + 1,
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_on_a_full_disk_loses_no_acknowledged_write() {
    let disk = SmallDisk::mount(16 * MIB);
    let ballast = disk.ballast(4 * MIB);
    let db =
        Arc::new(TestDb::sqlite_in(tempfile::tempdir_in(disk.path()).unwrap(), &MIGRATIONS).await);
    let url = db.url.clone();
    let file = url.trim_start_matches("sqlite://").to_owned();
    // `db` stays here: dropping the last handle removes the database.
    let app = TestApp::spawn_shared(db.clone(), |config| {
        config
            .settings_mut::<webook::auth::settings::AuthSettings>()
            .auth_rate_limit = 1_000
    })
    .await;
    let filled = Filled::fill(&app).await;

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
    filled.recover_and_verify(app, &url).await;
    drop(db);
}

/// One full tablespace at a time: a checkpoint is cluster-wide, so while any tablespace is full
/// every checkpoint fails — and `DROP DATABASE` requests one. Two of these tests overlapping made
/// the first to finish unable to drop its database ("checkpoint request failed"), then its
/// tablespace ("is not empty").
static FULL_TABLESPACE_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A PostgreSQL test database in a tablespace of its own on a small disk.
struct PgOnSmallDisk {
    disk: SmallDisk,
    db: Arc<TestDb>,
    tablespace: String,
    admin_url: String,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl PgOnSmallDisk {
    /// A disk of `bytes`, `ballast` of it taken before the database is created on it; the
    /// database and the ballast file's path.
    async fn create(bytes: u64, ballast: u64) -> (Self, PathBuf) {
        let turn = FULL_TABLESPACE_TURN.lock().await;
        let disk = SmallDisk::mount(bytes);
        let location = disk.path().join("tablespace");
        std::fs::create_dir(&location).unwrap();
        let admin_url = std::env::var(platform::testing::TEST_DATABASE_URL_ENV)
            .expect("WEBOOK_TEST_DATABASE_URL: run the tests through scripts/test.sh");
        let mut admin = PgConnection::connect(&admin_url).await.unwrap();
        // The server's own OS user must own a tablespace's directory.
        let data_directory: String = sqlx::query_scalar("SHOW data_directory")
            .fetch_one(&mut admin)
            .await
            .unwrap();
        let owner =
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&data_directory).unwrap());
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
        admin.close().await.unwrap();
        let ballast = disk.ballast(ballast);
        let db = Arc::new(TestDb::postgres_in_tablespace(&tablespace, &MIGRATIONS).await);
        (
            Self {
                disk,
                db,
                tablespace,
                admin_url,
                _turn: turn,
            },
            ballast,
        )
    }

    /// Drops the database (every app on it must be stopped), then its tablespace. A checkpoint
    /// the server started while the disk was full may still be failing: the drop is retried
    /// until it goes through.
    async fn remove(self) {
        let Self {
            disk,
            db,
            tablespace,
            admin_url,
            _turn,
        } = self;
        let name = url::Url::parse(&db.url)
            .unwrap()
            .path()
            .trim_start_matches('/')
            .to_owned();
        drop(db);
        wait_until("the test database and its tablespace to be dropped", || {
            let (admin_url, name, tablespace) =
                (admin_url.clone(), name.clone(), tablespace.clone());
            async move {
                let Ok(mut admin) = PgConnection::connect(&admin_url).await else {
                    return false;
                };
                let dropped = admin
                    .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await
                    .is_ok()
                    && admin
                        .execute(format!("DROP TABLESPACE IF EXISTS {tablespace}").as_str())
                        .await
                        .is_ok();
                admin.close().await.ok();
                dropped
            }
        })
        .await;
        drop(disk);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_on_a_full_tablespace_loses_no_acknowledged_write() {
    // The database copies its template (about 7.5 MiB) into the tablespace, then every
    // feature's empty tables and indexes take their first pages.
    let (pg, ballast) = PgOnSmallDisk::create(14 * MIB, 3 * MIB).await;
    let url = pg.db.url.clone();
    let app = TestApp::spawn_shared(pg.db.clone(), |config| {
        config
            .settings_mut::<webook::auth::settings::AuthSettings>()
            .auth_rate_limit = 1_000
    })
    .await;
    let filled = Filled::fill(&app).await;
    std::fs::remove_file(ballast).unwrap();
    filled.recover_and_verify(app, &url).await;
    pg.remove().await;
}

/// Issue 46, item 14: a refresh the full disk cannot take is refused (503, code 5) and the token
/// it presented still works once space is back; a refresh it took is saved, and its token then
/// works once. Never both — two live token branches of one session. (SQLite answered 200 with
/// new tokens for a rotation its failed commit had rolled back.) The app runs with
/// `refresh_retry_window` at 0 ([`strict_refresh`]): within the window a replay of the token
/// just used is answered 200 whether the rotation was saved or not, so only without it does the
/// replay tell which.
async fn refresh_on_a_full_disk(app: &TestApp, ballast: &Path) {
    expect_ok(&signup(app, "writer@example.com").await, "sign-up");
    let (token, rt0) = login(app, "writer@example.com").await;
    // A refresh while there is space creates the session's row: the one on the full disk only
    // moves its generation.
    let first = refresh(app, &rt0).await;
    expect_ok(&first, "a refresh while there is space");
    let rt1 = first.header("x-refresh-token");
    let outcomes = publish_until_full(app, &token, 16, 40).await;
    assert!(
        outcomes.failures.len() >= 16,
        "the disk never filled up: {} publishes succeeded",
        outcomes.acknowledged.len()
    );
    let on_full = refresh(app, &rt1).await;
    // A sign-up (another autocommit write with `RETURNING`): saved if acknowledged.
    let signed_up = signup(app, "late@example.com").await;

    std::fs::remove_file(ballast).unwrap();
    wait_until("readyz to recover once space is freed", || async {
        app.get_json("/readyz").await.0 == StatusCode::OK
    })
    .await;
    let replayed = refresh(app, &rt1).await;
    match on_full.status_and_code() {
        (StatusCode::SERVICE_UNAVAILABLE, 5) => expect_ok(
            &replayed,
            "the token of a refresh refused on the full disk, once space is back",
        ),
        (StatusCode::OK, 0) => {
            assert_eq!(
                replayed.status,
                StatusCode::UNAUTHORIZED,
                "a refresh answered 200 on the full disk was not saved: the token it used still \
                 works ({})",
                replayed.raw
            );
            let rt2 = on_full.header("x-refresh-token");
            assert_eq!(
                refresh(app, &rt2).await.status,
                StatusCode::UNAUTHORIZED,
                "the replay revoked the session"
            );
        }
        other => panic!(
            "a refresh on a full disk answered {other:?}: {}",
            on_full.raw
        ),
    }
    match signed_up.status_and_code() {
        (StatusCode::SERVICE_UNAVAILABLE, 5) => {}
        (StatusCode::OK, 0) => {
            login(app, "late@example.com").await;
        }
        other => panic!(
            "a sign-up on a full disk answered {other:?}: {}",
            signed_up.raw
        ),
    }
}

/// Every second use of a refresh token revokes (no retry window): see [`refresh_on_a_full_disk`].
fn strict_refresh(config: &mut platform::config::Config) {
    config
        .settings_mut::<webook::auth::settings::AuthSettings>()
        .refresh_retry_window = Duration::ZERO;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_refuses_a_refresh_it_cannot_save() {
    let disk = SmallDisk::mount(16 * MIB);
    let ballast = disk.ballast(4 * MIB);
    let db =
        Arc::new(TestDb::sqlite_in(tempfile::tempdir_in(disk.path()).unwrap(), &MIGRATIONS).await);
    let app = TestApp::spawn_shared(db.clone(), strict_refresh).await;
    // Usually the write fails at commit, like every write on the full disk; but a commit that
    // fits in WAL space SQLite already holds (the log restarts from its beginning after a
    // checkpoint) needs no new byte and is saved. Either way the answer must match what was
    // saved, which `refresh_on_a_full_disk` checks for both.
    refresh_on_a_full_disk(&app, &ballast).await;
    app.stop().await.unwrap();
    drop(db);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_never_leaves_two_live_refresh_tokens_on_a_full_disk() {
    let (pg, ballast) = PgOnSmallDisk::create(14 * MIB, 3 * MIB).await;
    let app = TestApp::spawn_shared(pg.db.clone(), strict_refresh).await;
    refresh_on_a_full_disk(&app, &ballast).await;
    app.stop().await.unwrap();
    pg.remove().await;
}

/// Appends to `file` until the disk refuses a byte: the last page of a file that a full disk
/// still holds has room for a few lines, which would otherwise be written.
fn fill_last_page(file: &Path) {
    let mut file = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    for _ in 0..64 * 1024 {
        if file.write_all(b"\n").is_err() {
            return;
        }
    }
    panic!("the disk never filled up");
}

/// Issue 46, item 1: with the server's output on a full disk, every request is still answered
/// (before, the first line that could not be written panicked the request's task and its
/// connection was closed without an answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_disk_costs_no_answer() {
    let disk = SmallDisk::mount(MIB);
    let data = tempfile::tempdir().unwrap();
    let log = disk.path().join("webook.log");
    let server = Server::start_with_output(webook(data.path()), &log);
    let ballast = disk.ballast(2 * MIB);
    fill_last_page(&log);
    let full = std::fs::metadata(&log).unwrap().len();

    // Each code request logs a line (the `log` SMS provider writes the code there).
    let client = reqwest::Client::new();
    let send = |n: usize| {
        let client = client.clone();
        let url = server.url("/users/login_sms/code/send");
        async move {
            let answer = client
                .post(url)
                .json(&json!({ "phone": format!("1380013{n:04}") }))
                .send()
                .await
                .unwrap_or_else(|err| panic!("request {n} got no answer: {err}"));
            let status = answer.status();
            let body: Value = answer.json().await.unwrap();
            assert!(
                matches!(
                    (status, body["code"].as_i64()),
                    (StatusCode::OK, Some(0)) | (StatusCode::SERVICE_UNAVAILABLE, Some(5))
                ),
                "request {n}: {status} {body}"
            );
        }
    };
    for n in 0..30 {
        send(n).await;
    }
    let (status, _) = server.get_json("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let dropped = server.metric("log_lines_dropped_total").await;
    assert!(dropped >= 30.0, "{dropped} log lines counted as dropped");
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        full,
        "the disk was full"
    );

    // Space again: the next lines are written.
    std::fs::remove_file(ballast).unwrap();
    send(30).await;
    wait_until("a log line once space is freed", || async {
        std::fs::metadata(&log).unwrap().len() > full
    })
    .await;
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}
