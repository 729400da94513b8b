//! The real `webook` binary as a separate process: the README's run command as written, first
//! start, cluster mode, bad configuration, graceful shutdown on SIGTERM, one embedded server per
//! data dir, connection limits (idle, slow-header and surplus clients, one client holding many),
//! who may read `/metrics` on the API port, and the `migrate`/`version`/`--print-config`
//! commands.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use common::process::{webook, Server};
use std::{
    path::Path,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use platform::testing::{redis_url, wait_until, TestDb};
use platform::{config::DatabaseKind, db::migrator};
use reqwest::StatusCode;
use serde_json::Value;

const ACCESS_SECRET: &str = "process-test-access-secret-0123456789";
const REFRESH_SECRET: &str = "process-test-refresh-secret-0123456789";

#[tokio::test]
async fn first_start_creates_the_sqlite_database_and_private_secrets() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(webook(dir.path()));
    let (status, body) = server.get_json("/healthz").await;
    assert_eq!((status, body["code"].as_i64()), (StatusCode::OK, Some(0)));
    let (status, body) = server.get_json("/readyz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["data"]["mode"], "embedded");
    let mode = |path: &str| {
        std::fs::metadata(dir.path().join(path))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    // Emails and password hashes: readable by the owner only.
    assert_eq!(mode("data"), 0o700);
    assert_eq!(mode("data/webook.db"), 0o600);
    assert_eq!(mode("data/jwt-secrets.toml"), 0o600);
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

#[tokio::test]
async fn cluster_mode_runs_on_postgres_and_redis() {
    let dir = tempfile::tempdir().unwrap();
    let empty = TestDb::empty_postgres().await;
    let mut command = webook(dir.path());
    command
        .env("WEBOOK_DATABASE_URL", &empty.url)
        .env("WEBOOK_REDIS_URL", redis_url())
        .env("WEBOOK_JWT_ACCESS_SECRET", ACCESS_SECRET)
        .env("WEBOOK_JWT_REFRESH_SECRET", REFRESH_SECRET);
    let server = Server::start(command);
    let (status, body) = server.get_json("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["mode"], "cluster");
    assert_eq!(body["data"]["database"], "up");
    assert_eq!(body["data"]["redis"], "up");
    assert!(
        !dir.path().join("data/webook.db").exists(),
        "cluster mode must not create a SQLite file"
    );
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

#[tokio::test]
async fn sigterm_lets_a_slow_request_finish_then_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = webook(dir.path());
    command.env("WEBOOK_DEBUG_ENDPOINTS", "true");
    let server = Server::start(command);
    let slow = tokio::spawn(reqwest::get(server.url("/debug/sleep?ms=1500")));

    // Wait until the slow request is being served: the in-flight gauge counts it plus the
    // /metrics request itself.
    wait_until("the slow request to be in flight", || async {
        let text = reqwest::get(server.url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix("http_requests_in_flight "))
            .and_then(|n| n.trim().parse::<f64>().ok())
            .is_some_and(|n| n >= 2.0)
    })
    .await;
    server.terminate();

    let response = slow
        .await
        .unwrap()
        .expect("the in-flight request completes");
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"], 1500);
    let lines = server.new_log_lines();
    assert!(
        lines.iter().any(|l| l.contains("received SIGTERM")),
        "{lines:?}"
    );
    assert_eq!(server.exit_code().await, 0);
}

/// Runs `webook serve` expecting a start-up failure; returns stderr.
fn failing_start(configure: impl FnOnce(&mut Command)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut command = webook(dir.path());
    command.env("WEBOOK_LOG", "warn").arg("serve");
    configure(&mut command);
    let Output { status, stderr, .. } = command.output().unwrap();
    let stderr = String::from_utf8(stderr).unwrap();
    assert_eq!(status.code(), Some(1), "exit code; stderr: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one clear line, got: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    stderr
}

#[test]
fn an_unparseable_database_url_names_the_setting() {
    let stderr = failing_start(|c| {
        c.env("WEBOOK_DATABASE_URL", "mysql://root:pw@localhost/webook");
    });
    assert!(
        stderr.contains("database_url") && stderr.contains("WEBOOK_DATABASE_URL"),
        "{stderr}"
    );
    assert!(!stderr.contains(":pw@"), "password printed: {stderr}");
}

#[test]
fn an_unreachable_database_names_the_setting() {
    let stderr = failing_start(|c| {
        // Port 1 on loopback: nothing listens, the connection is refused at once.
        c.env(
            "WEBOOK_DATABASE_URL",
            "postgres://webook:pw@127.0.0.1:1/webook",
        );
    });
    assert!(
        stderr.contains("cannot connect to database_url"),
        "{stderr}"
    );
    assert!(!stderr.contains(":pw@"), "password printed: {stderr}");
}

#[test]
fn missing_cluster_secrets_name_the_setting() {
    let stderr = failing_start(|c| {
        c.env("WEBOOK_REDIS_URL", "redis://127.0.0.1:1/");
    });
    assert!(
        stderr.contains("jwt_access_secret") && stderr.contains("cluster"),
        "{stderr}"
    );
}

#[test]
fn an_unparseable_flag_value_names_the_setting() {
    let stderr = failing_start(|c| {
        c.args(["--listen", "not-an-address"]);
    });
    assert!(stderr.contains("listen"), "{stderr}");
}

#[test]
fn an_unreachable_redis_names_the_setting() {
    let stderr = failing_start(|c| {
        c.env("WEBOOK_REDIS_URL", "redis://127.0.0.1:1/")
            .env("WEBOOK_JWT_ACCESS_SECRET", ACCESS_SECRET)
            .env("WEBOOK_JWT_REFRESH_SECRET", REFRESH_SECRET);
    });
    assert!(stderr.contains("redis_url"), "{stderr}");
}

#[test]
fn migrate_version_and_print_config_work_offline() {
    let dir = tempfile::tempdir().unwrap();
    let output = webook(dir.path()).arg("migrate").output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let expected = format!(
        "{} applied",
        migrator(DatabaseKind::Sqlite, &webook::schema::MIGRATIONS)
            .iter()
            .count()
    );
    assert!(stdout.contains(&expected), "{stdout}");
    let output = webook(dir.path()).arg("migrate").output().unwrap();
    assert!(String::from_utf8(output.stdout)
        .unwrap()
        .contains("0 applied"));

    let output = webook(dir.path()).arg("version").output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        stdout.trim(),
        format!("webook {}", env!("CARGO_PKG_VERSION"))
    );

    let output = webook(dir.path())
        .args(["serve", "--print-config"])
        .env("WEBOOK_REDIS_URL", "redis://:redispw@127.0.0.1:6379/")
        .env("WEBOOK_JWT_ACCESS_SECRET", ACCESS_SECRET)
        .env("WEBOOK_JWT_REFRESH_SECRET", REFRESH_SECRET)
        .env("WEBOOK_ADMINS", "1,42")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let shown = String::from_utf8(output.stdout).unwrap();
    for secret in [ACCESS_SECRET, REFRESH_SECRET, "redispw"] {
        assert!(!shown.contains(secret), "{secret} printed:\n{shown}");
    }
    assert!(shown.contains("# mode: cluster"), "{shown}");
    assert!(shown.contains("admins = [\n    1,\n    42,\n]"), "{shown}");
}

#[tokio::test]
async fn seed_fills_the_embedded_database_and_the_server_serves_it() {
    let dir = tempfile::tempdir().unwrap();
    let output = webook(dir.path())
        .args([
            "seed",
            "--users",
            "30",
            "--articles",
            "120",
            "--likes",
            "300",
            "--collects",
            "30",
            "--reads",
            "5000",
            "--days",
            "3",
            "--seed",
            "9",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    for (what, count) in [("users", "30"), ("articles", "120"), ("likes", "300")] {
        let reported = stdout.lines().any(|line| {
            let mut words = line.split_whitespace();
            words.next() == Some(what) && words.next() == Some(count)
        });
        assert!(reported, "{what} {count} not in:\n{stdout}");
    }

    // A seeded user signs in over HTTP and reads a seeded article with its counters.
    let server = Server::start(webook(dir.path()));
    let client = reqwest::Client::new();
    let login = client
        .post(server.url("/users/login"))
        .json(&serde_json::json!({"email": "seed5@example.com", "password": "seed-Password-1!"}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::OK);
    let token = login.headers()["x-jwt-token"].to_str().unwrap().to_owned();
    let mut found = None;
    for id in 1..=20 {
        let body: Value = client
            .get(server.url(&format!("/articles/pub/{id}")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if body["code"] == 0 {
            found = Some(body);
            break;
        }
    }
    let article = found.expect("a published article among the first 20");
    assert!(
        !article["data"]["title"].as_str().unwrap().is_empty(),
        "{article}"
    );
    assert!(
        article["data"]["content"]
            .as_str()
            .unwrap()
            .starts_with('<'),
        "{article}"
    );
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

#[test]
fn seed_rejects_an_impossible_plan_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    for (args, named) in [
        (
            vec!["--users", "2", "--articles", "10", "--likes", "100"],
            "--likes",
        ),
        (vec!["--until", "yesterday"], "--until"),
        (vec!["--days", "0"], "--days"),
        (
            vec![
                "--articles",
                "0",
                "--likes",
                "0",
                "--collects",
                "0",
                "--reads",
                "0",
                "--comments",
                "5",
            ],
            "--comments",
        ),
    ] {
        let output = webook(dir.path()).arg("seed").args(&args).output().unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(named),
            "{args:?}: {stderr}"
        );
    }
    // Nothing was written: the next seed's first user is id 1.
    let output = webook(dir.path())
        .args([
            "seed",
            "--users",
            "1",
            "--articles",
            "0",
            "--likes",
            "0",
            "--collects",
            "0",
            "--reads",
            "0",
            "--comments",
            "0",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.contains("ids 1–1,"),
        "the first seeded user is id 1: {stdout}"
    );
}

/// The README's run command, exactly as written (a fresh clone has two binaries in the
/// workspace, the scheduler's test probe and webook; `cargo run` must still pick webook).
/// Builds the release binary in its own target directory, so it never waits for the lock of
/// the build running these tests.
#[tokio::test]
async fn the_readme_run_command_works_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let run_it = readme
        .split("## Run it")
        .nth(1)
        .expect("the README has a 'Run it' section");
    let command = run_it
        .split("```sh")
        .nth(1)
        .and_then(|block| block.lines().nth(1))
        .expect("'Run it' starts with a sh block")
        .trim()
        .to_owned();
    assert!(command.starts_with("cargo run"), "{command}");
    let dir = tempfile::tempdir().unwrap();
    let mut shell = Command::new("sh");
    for (key, _) in std::env::vars() {
        if key.starts_with("WEBOOK_") {
            shell.env_remove(key);
        }
    }
    shell
        .args(["-c", &format!("exec {command}")])
        .current_dir(&root)
        .env("CARGO_TARGET_DIR", root.join("target/readme"))
        .env("WEBOOK_DATA_DIR", dir.path().join("data"))
        .env("WEBOOK_LISTEN", "127.0.0.1:0")
        .env("WEBOOK_LOG", "info")
        .stdin(Stdio::null());
    // A release build from scratch on two cores takes minutes.
    let server = Server::spawn(shell, Duration::from_secs(30 * 60));
    let (status, body) = server.get_json("/healthz").await;
    assert_eq!(
        (status, body["code"].as_i64()),
        (StatusCode::OK, Some(0)),
        "{body}"
    );
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

/// Embedded mode keeps sessions in the process: a second server on the same data dir is refused
/// with one line naming the first, while the commands that are safe beside a server still work.
#[tokio::test]
async fn a_second_embedded_server_is_refused_but_the_cli_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let first = Server::start(webook(dir.path()));
    let output = webook(dir.path())
        .env("WEBOOK_LOG", "warn")
        .arg("serve")
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "another webook process (pid {})",
            first.child.id()
        )) && stderr.contains("cluster mode"),
        "{stderr}"
    );
    for args in [&["jobs", "list"][..], &["rank", "--once"], &["migrate"]] {
        let output = webook(dir.path())
            .env("WEBOOK_LOG", "warn")
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "webook {args:?} beside a server: {output:?}"
        );
    }
    first.terminate();
    assert_eq!(first.exit_code().await, 0);
    // The lock went with the process.
    let again = Server::start(webook(dir.path()));
    again.terminate();
    assert_eq!(again.exit_code().await, 0);
}

/// Reads until the server closes `connection`; returns how long that took, or `None` if it
/// stayed open for `limit`.
async fn closed_within(
    connection: &mut tokio::net::TcpStream,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    loop {
        match tokio::time::timeout_at((started + limit).into(), connection.read(&mut buffer)).await
        {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

/// Silent clients, clients that send a header one byte at a time and more clients than the cap
/// cannot hold the server: their connections are closed, and a new client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_slow_and_surplus_connections_cannot_hold_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = webook(dir.path());
    command
        .env("WEBOOK_HTTP_HEADER_TIMEOUT", "1s")
        .env("WEBOOK_HTTP_IDLE_TIMEOUT", "2s")
        .env("WEBOOK_HTTP_MAX_CONNECTIONS", "20")
        // The surplus here all comes from one address; the per-client cap has its own test.
        .env("WEBOOK_HTTP_MAX_CONNECTIONS_PER_CLIENT", "0");
    let server = Server::start(command);
    let address = server.address();

    // Twice the cap of clients that never send a byte: the first twenty are accepted and
    // closed after the idle timeout, the rest wait in the backlog and then get the same.
    let mut silent = Vec::new();
    for _ in 0..40 {
        silent.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    // A newcomer is served once idle connections make room.
    let started = Instant::now();
    let (status, _) = server.get_json("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "healthz took {:?} behind the silent clients",
        started.elapsed()
    );
    for connection in &mut silent {
        let closed = closed_within(connection, Duration::from_secs(15)).await;
        assert!(closed.is_some(), "a silent connection stayed open");
    }
    let limit_lines = server
        .new_log_lines()
        .into_iter()
        .filter(|line| line.contains("connection limit reached"))
        .count();
    assert_eq!(
        limit_lines, 1,
        "one log line for reaching the cap, not one per connection"
    );

    // Slowloris: a header trickling in one byte every 200 ms is cut at the header timeout,
    // although bytes keep arriving (so the idle timeout never would).
    let mut slow = tokio::net::TcpStream::connect(&address).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let trickle = async {
        for byte in b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if slow.write_all(&[*byte]).await.is_err() {
                return true; // closed under us
            }
        }
        false
    };
    let cut = tokio::time::timeout(Duration::from_secs(6), trickle).await;
    assert!(
        matches!(cut, Ok(true)),
        "a slow header was not cut within the header timeout"
    );

    // A keep-alive connection in use outlives the idle timeout: one request every 500 ms for
    // twice the idle timeout, all answered on the same connection.
    let mut busy = tokio::net::TcpStream::connect(&address).await.unwrap();
    for _ in 0..8 {
        busy.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut answer = vec![0u8; 1024];
        let read = busy.read(&mut answer).await.unwrap();
        assert!(
            String::from_utf8_lossy(&answer[..read]).starts_with("HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answer[..read])
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

/// A client bound to `source` (another loopback address than 127.0.0.1).
fn client_from(source: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(source.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

/// Issue 46, item 15: one address cannot take every socket. Its connections over the per-client
/// cap are closed at once, while another address is still served, and it gets room again as its
/// own connections close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_cannot_take_every_connection() {
    const CAP: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let mut command = webook(dir.path());
    command.env("WEBOOK_HTTP_MAX_CONNECTIONS_PER_CLIENT", CAP.to_string());
    let server = Server::start(command);
    let address = server.address();

    let mut held = Vec::new();
    for _ in 0..CAP {
        held.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    let mut surplus = Vec::new();
    for _ in 0..3 {
        surplus.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    for connection in &mut surplus {
        assert!(
            closed_within(connection, Duration::from_secs(5))
                .await
                .is_some(),
            "a connection over the per-client cap stayed open"
        );
    }
    // The held ones are served.
    held[0]
        .write_all(
            b"GET /healthz HTTP/1.1
Host: x

",
        )
        .await
        .unwrap();
    let mut answer = vec![0u8; 1024];
    let read = held[0].read(&mut answer).await.unwrap();
    assert!(
        String::from_utf8_lossy(&answer[..read]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer[..read])
    );
    // Another address is served meanwhile; this one is not.
    let other = client_from("127.0.0.2")
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    assert!(
        client_from("127.0.0.1")
            .get(server.url("/healthz"))
            .send()
            .await
            .is_err(),
        "a fifth connection from the capped address was served"
    );
    // Room again once its own connections close.
    drop(held);
    wait_until("the capped address is served again", || async {
        client_from("127.0.0.1")
            .get(server.url("/healthz"))
            .send()
            .await
            .is_ok_and(|answer| answer.status() == StatusCode::OK)
    })
    .await;
    assert!(
        server
            .metric(r#"http_connections_closed_total{reason="per_client_cap"}"#)
            .await
            >= 4.0
    );
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

/// Issue 46, item 16: `/metrics` on the API port answers allowed networks and the bearer of the
/// metrics token; anyone else gets the answer of an unknown route (404), so do requests a proxy
/// that is not trusted forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_on_the_api_port_answer_allowed_networks_and_the_token_only() {
    const TOKEN: &str = "process-metrics-token-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let mut command = webook(dir.path());
    command
        .env("WEBOOK_METRICS_ALLOWED_NETWORKS", "127.0.0.1/32")
        .env("WEBOOK_METRICS_TOKEN", TOKEN);
    let server = Server::start(command);
    let metrics = |client: reqwest::Client, token: Option<&'static str>| {
        let mut request = client.get(server.url("/metrics"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap() }
    };
    let allowed = metrics(client_from("127.0.0.1"), None).await;
    assert_eq!(allowed.status(), StatusCode::OK);
    assert!(allowed
        .text()
        .await
        .unwrap()
        .contains("log_lines_dropped_total"));

    let outsider = metrics(client_from("127.0.0.2"), None).await;
    assert_eq!(outsider.status(), StatusCode::NOT_FOUND);
    let body: Value = outsider.json().await.unwrap();
    assert!(
        body.to_string().find("log_lines_dropped_total").is_none(),
        "{body}"
    );
    let wrong = metrics(client_from("127.0.0.2"), Some("not-the-metrics-token-0123")).await;
    assert_eq!(wrong.status(), StatusCode::NOT_FOUND);
    let bearer = metrics(client_from("127.0.0.2"), Some(TOKEN)).await;
    assert_eq!(bearer.status(), StatusCode::OK);
    assert!(bearer
        .text()
        .await
        .unwrap()
        .contains("log_lines_dropped_total"));

    // Through a reverse proxy on this host that is not in trusted_proxies.
    let proxied = client_from("127.0.0.1")
        .get(server.url("/metrics"))
        .header("x-forwarded-for", "203.0.113.5")
        .send()
        .await
        .unwrap();
    assert_eq!(proxied.status(), StatusCode::NOT_FOUND);
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

#[test]
fn a_config_file_that_is_not_toml_is_reported_on_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("webook.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:0\"\nlog = \n").unwrap();
    let stderr = failing_start(|c| {
        c.env("WEBOOK_CONFIG", &file);
    });
    assert!(
        stderr.contains("webook.toml") && stderr.contains("line 2"),
        "{stderr}"
    );
}

#[test]
fn a_reward_share_that_leaves_the_author_nothing_is_refused_at_start() {
    // With it every reward's author line would be 0 fen, which the ledger refuses: the
    // `rewards` consumer would fail on the first paid reward forever.
    let stderr = failing_start(|c| {
        c.env("WEBOOK_REWARD_SHARE_BPS", "10000");
    });
    assert!(
        stderr.contains("invalid reward_share_bps (WEBOOK_REWARD_SHARE_BPS)"),
        "{stderr}"
    );
}

/// Asserts that `server` answers each of `queries` with the ids in `expected`.
async fn same_answers(server: &Server, queries: &[&str], expected: &[Vec<i64>], when: &str) {
    for (q, ids) in queries.iter().zip(expected) {
        assert_eq!(&server.search_article_ids(q).await, ids, "{q} {when}");
    }
}

/// Documents the server's index wrote since it started.
async fn documents_put(server: &Server) -> f64 {
    server
        .metric(r#"search_documents_written_total{kind="put"}"#)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_index_survives_kill_minus_nine_and_is_rebuilt_the_same_when_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let seeded = webook(dir.path())
        .args([
            "seed",
            "--users",
            "20",
            "--articles",
            "150",
            "--likes",
            "100",
        ])
        .args([
            "--collects",
            "0",
            "--reads",
            "0",
            "--comments",
            "0",
            "--seed",
            "3",
        ])
        .output()
        .unwrap();
    assert!(seeded.status.success(), "{seeded:?}");
    let queries = ["性能", "数据库 缓存", "the", "Database", "笔记"];

    // First start: an empty index is rebuilt from the database.
    let server = Server::start(webook(dir.path()));
    server.search_ready().await;
    let indexed = documents_put(&server).await;
    assert!(indexed > 50.0, "{indexed} documents");
    let mut expected = Vec::new();
    for q in queries {
        let ids = server.search_article_ids(q).await;
        assert!(!ids.is_empty(), "{q} finds nothing in the seed");
        expected.push(ids);
    }

    // Killed: the committed index is complete; the restart serves it without rebuilding.
    let mut killed = server;
    killed.signal("KILL");
    killed.child.wait().unwrap();
    let server = Server::start(webook(dir.path()));
    server.search_ready().await;
    assert_eq!(documents_put(&server).await, 0.0, "the index was rebuilt");
    same_answers(&server, &queries, &expected, "after kill -9").await;

    // Deleted: rebuilt at start, the same answers.
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
    std::fs::remove_dir_all(dir.path().join("data/search")).unwrap();
    let server = Server::start(webook(dir.path()));
    server.search_ready().await;
    assert_eq!(documents_put(&server).await, indexed);
    same_answers(&server, &queries, &expected, "after the rebuild").await;
    server.terminate();
    assert_eq!(server.exit_code().await, 0);

    // And rebuilt offline by the CLI.
    let reindexed = webook(dir.path())
        .args(["search", "reindex"])
        .output()
        .unwrap();
    assert!(reindexed.status.success(), "{reindexed:?}");
    assert!(
        String::from_utf8_lossy(&reindexed.stdout).contains("search index rebuilt"),
        "{reindexed:?}"
    );
    let server = Server::start(webook(dir.path()));
    server.search_ready().await;
    assert_eq!(
        documents_put(&server).await,
        0.0,
        "the CLI's index was rebuilt again"
    );
    same_answers(&server, &queries, &expected, "after search reindex").await;
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

/// Reads the server's log until a line holds `needle`; that line.
async fn log_line_with(server: &Server, needle: &str, seen: &mut Vec<String>) -> String {
    let mut found = None;
    platform::testing::wait_until(&format!("a log line with {needle:?}"), || {
        let new = server.new_log_lines();
        found = found
            .take()
            .or_else(|| new.iter().find(|line| line.contains(needle)).cloned());
        seen.extend(new);
        let done = found.is_some();
        async move { done }
    })
    .await;
    found.unwrap()
}

#[tokio::test]
async fn the_course_frontends_sms_login_works_with_the_log_provider() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(webook(dir.path()));
    assert!(
        server
            .startup_lines()
            .iter()
            .any(|line| line.contains("SMS provider `log` in use") && line.contains("WARN")),
        "a warning at start-up: {:?}",
        server.startup_lines()
    );
    let mut log = Vec::new();
    // What the course's Next.js page does: axios from http://localhost:3000, JSON bodies,
    // `alert(res.data.msg)` after sending, tokens from the exposed response headers.
    let client = reqwest::Client::new();
    let origin = "http://localhost:3000";
    let preflight = client
        .request(
            reqwest::Method::OPTIONS,
            server.url("/users/login_sms/code/send"),
        )
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success());
    assert_eq!(preflight.headers()["access-control-allow-origin"], origin);
    let sent = client
        .post(server.url("/users/login_sms/code/send"))
        .header("origin", origin)
        .header("accept-language", "zh-CN,zh;q=0.9")
        .json(&serde_json::json!({ "phone": "13800138000" }))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::OK);
    let body: Value = sent.json().await.unwrap();
    assert_eq!(
        (body["code"].as_i64(), body["msg"].as_str()),
        (Some(0), Some("验证码已发送"))
    );
    let line = log_line_with(&server, "sms (log provider", &mut log).await;
    assert!(line.contains("to=13800138000"), "{line}");
    let code: String = line
        .split("code=")
        .nth(1)
        .unwrap()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert_eq!(code.len(), 6, "{line}");
    let login = client
        .post(server.url("/users/login_sms"))
        .header("origin", origin)
        .header("user-agent", "course-frontend")
        .json(&serde_json::json!({ "phone": "13800138000", "code": code }))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::OK);
    let exposed = login.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("x-jwt-token"), "{exposed}");
    let token = login.headers()["x-jwt-token"].to_str().unwrap().to_owned();
    let body: Value = login.json().await.unwrap();
    assert_eq!(body["code"], 0);
    // The page then goes to /users/profile.
    let profile: Value = client
        .get(server.url("/users/profile"))
        .header("user-agent", "course-frontend")
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(profile["Phone"], "13800138000");
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

/// The course frontend's reader page rewards an article and polls `/reward/detail`; with the
/// embedded default (the fake provider) a person pays on webook's own page, and the poll reaches
/// `RewardStatusPayed` — on the real binary, with nothing configured.
#[tokio::test]
async fn the_course_frontends_reward_button_reaches_payed_on_the_fake_page() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(webook(dir.path()));
    assert!(
        server
            .startup_lines()
            .iter()
            .any(|line| line.contains("fake provider") && line.contains("WARN")),
        "a warning at start-up: {:?}",
        server.startup_lines()
    );
    let client = reqwest::Client::new();
    let origin = "http://localhost:3000";
    let call = |path: &str, token: Option<&str>, body: Value| {
        let mut request = client
            .post(server.url(path))
            .header("origin", origin)
            .header("user-agent", "course-frontend")
            .json(&body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let response = request.send().await.unwrap();
            let headers = response.headers().clone();
            (response.json::<Value>().await.unwrap(), headers)
        }
    };
    let mut tokens = Vec::new();
    for email in ["author@example.com", "reader@example.com"] {
        let credentials = serde_json::json!({"email": email, "password": "hello#world1"});
        let mut signup = credentials.clone();
        signup["confirmPassword"] = credentials["password"].clone();
        assert_eq!(call("/users/signup", None, signup).await.0["code"], 0);
        let (answer, headers) = call("/users/login", None, credentials).await;
        assert_eq!(answer["code"], 0, "{answer}");
        tokens.push(headers["x-jwt-token"].to_str().unwrap().to_owned());
    }
    let body = serde_json::json!({"title": "打赏我", "content": "<p>谢谢</p>"});
    let article = call("/articles/publish", Some(&tokens[0]), body).await.0["data"]
        .as_i64()
        .unwrap();

    // The reward button: POST /articles/pub/reward, then the QR code of codeURL.
    let (answer, _) = call(
        "/articles/pub/reward",
        Some(&tokens[1]),
        serde_json::json!({"id": article, "amt": 100}),
    )
    .await;
    assert_eq!(answer["code"], 0, "{answer}");
    let code_url = answer["data"]["codeURL"].as_str().unwrap().to_owned();
    let rid = answer["data"]["rid"].as_i64().unwrap();

    // The person who scans it sees webook's payment page and presses "pay" (the page's form).
    let page = client.get(server.url(&code_url)).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.text().await.unwrap();
    assert!(page.contains("¥1.00") && page.contains("打赏我"), "{page}");
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let pressed = no_redirects
        .post(server.url(&format!("{code_url}/confirm")))
        .form(&[("result", "success")])
        .send()
        .await
        .unwrap();
    assert_eq!(pressed.status(), StatusCode::SEE_OTHER);

    // The reader page's poll.
    let mut status = Value::Null;
    for _ in 0..5 {
        status = call(
            "/reward/detail",
            Some(&tokens[1]),
            serde_json::json!({"rid": rid}),
        )
        .await
        .0;
        if status["data"] == "RewardStatusPayed" {
            break;
        }
    }
    assert_eq!(status["data"], "RewardStatusPayed", "{status}");
    let account: Value = client
        .get(server.url("/account"))
        .header("user-agent", "course-frontend")
        .bearer_auth(&tokens[0])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(account["data"]["balance"], 90, "{account}");
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

#[tokio::test]
async fn a_real_provider_never_puts_the_code_in_the_log() {
    let fake = crate::common::fake_sms::FakeSms::tencent("AKIDprocess", "process-secret").await;
    fake.set_template_params(&["code", "minutes"]);
    let dir = tempfile::tempdir().unwrap();
    let mut command = webook(dir.path());
    command
        .env("WEBOOK_LOG", "debug")
        .env("WEBOOK_SMS_PROVIDERS", "tencent")
        .env("WEBOOK_SMS_TENCENT_ENDPOINT", fake.endpoint())
        .env("WEBOOK_SMS_TENCENT_SECRET_ID", "AKIDprocess")
        .env("WEBOOK_SMS_TENCENT_SECRET_KEY", "process-secret")
        .env("WEBOOK_SMS_TENCENT_SDK_APP_ID", "1400000001")
        .env("WEBOOK_SMS_TENCENT_SIGN_NAME", "webook")
        .env("WEBOOK_SMS_TENCENT_TEMPLATE_ID", "100002");
    let server = Server::start(command);
    let client = reqwest::Client::new();
    let send = |phone: &'static str| {
        client
            .post(server.url("/users/login_sms/code/send"))
            .json(&serde_json::json!({ "phone": phone }))
            .send()
    };
    let body: Value = send("13700137000").await.unwrap().json().await.unwrap();
    assert_eq!(body["data"]["delivery"], "sent", "{body}");
    let code = fake.last_param_to("13700137000", "code").unwrap();
    // A failing send is logged too (with its reasons): still no code in it.
    fake.set_mode(crate::common::fake_sms::Mode::Fail);
    let body: Value = send("13700137001").await.unwrap().json().await.unwrap();
    assert_eq!(body["data"]["delivery"], "queued", "{body}");
    let mut log = Vec::new();
    log_line_with(&server, "login code queued", &mut log).await;
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
    assert!(!log.is_empty());
    for line in &log {
        assert!(!line.contains(&code), "the code is in the log: {line}");
        assert!(
            !line.contains("13700137000"),
            "a full phone number is in the log: {line}"
        );
    }
}

#[test]
fn cluster_mode_refuses_the_log_sms_provider_unless_allowed() {
    let stderr = failing_start(|c| {
        c.env("WEBOOK_REDIS_URL", "redis://127.0.0.1:1/")
            .env("WEBOOK_JWT_ACCESS_SECRET", ACCESS_SECRET)
            .env("WEBOOK_JWT_REFRESH_SECRET", REFRESH_SECRET)
            .env("WEBOOK_SMS_PROVIDERS", "log");
    });
    assert!(
        stderr.contains("sms_providers lists log") && stderr.contains("sms_allow_log_provider"),
        "{stderr}"
    );
}

/// The word segmenter's dictionary in the server's memory, as its metrics say (0: not loaded).
const DICTIONARY_BYTES: &str = "search_dictionary_bytes";

#[tokio::test]
async fn an_empty_site_idles_without_the_chinese_dictionary_and_a_site_with_articles_loads_it_at_start(
) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(webook(dir.path()));
    server.search_ready().await;
    assert_eq!(
        server.metric(DICTIONARY_BYTES).await,
        0.0,
        "an empty site starts without the dictionary"
    );
    // The first text that needs it loads it: a Chinese query.
    assert!(server.search_article_ids("分布式系统").await.is_empty());
    let loaded = server.metric(DICTIONARY_BYTES).await;
    assert!(
        (1e6..4e6).contains(&loaded),
        "the first Chinese query loads the dictionary, a map of 1–4 MB: {loaded} B"
    );
    let token = server
        .sign_up_and_log_in("writer@example.com", "hello#world1")
        .await;
    let id = server.publish(&token, "分布式系统", "<p>一致性</p>").await;
    wait_until("the article is indexed", || async {
        server.search_article_ids("分布式").await == vec![id]
    })
    .await;
    server.terminate();
    assert_eq!(server.exit_code().await, 0);

    // An index with documents will be searched: the dictionary is loaded before the first
    // query.
    let server = Server::start(webook(dir.path()));
    server.search_ready().await;
    assert_eq!(
        server.metric(DICTIONARY_BYTES).await,
        loaded,
        "a site with articles loads the dictionary at start"
    );
    assert_eq!(server.search_article_ids("一致性").await, vec![id]);
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}
