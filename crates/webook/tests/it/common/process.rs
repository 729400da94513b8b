//! The real `webook` binary as a child process: a command with a clean environment, and a
//! running server whose address is read from its "listening on" log line.

use std::{
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

use platform::testing::WAIT_LIMIT;
use reqwest::StatusCode;
use serde_json::Value;

/// Names a directory into which every server's log is copied (`<pid>.log`), for a failure
/// that needs more than the assertion's message.
pub const LOG_DIR_ENV: &str = "WEBOOK_TEST_LOG_DIR";

/// This crate's `webook` binary.
pub const BINARY: &str = env!("CARGO_BIN_EXE_webook");

/// Names another `webook` binary for the tests of faults between processes to run (e.g. an
/// older build, to see a test fail before its fix).
pub const TEST_BINARY_ENV: &str = "WEBOOK_TEST_BINARY";

/// The binary under test: [`TEST_BINARY_ENV`]'s, else this crate's [`BINARY`].
pub fn binary_under_test() -> String {
    std::env::var(TEST_BINARY_ENV).unwrap_or_else(|_| BINARY.to_owned())
}

/// A `webook` command with a clean environment: no inherited `WEBOOK_*` settings.
pub fn webook(data_dir: &Path) -> Command {
    webook_at(BINARY, data_dir)
}

/// [`webook`] of the binary at `binary` (e.g. a release build, for timings).
pub fn webook_at(binary: &str, data_dir: &Path) -> Command {
    let mut command = Command::new(binary);
    for (key, _) in std::env::vars() {
        if key.starts_with("WEBOOK_") {
            command.env_remove(key);
        }
    }
    command
        .current_dir(data_dir)
        .env("WEBOOK_DATA_DIR", data_dir.join("data"))
        .env("WEBOOK_LISTEN", "127.0.0.1:0")
        .env("WEBOOK_LOG", "info")
        .stdin(Stdio::null());
    if binary == BINARY {
        // Every test's accounts are new: the new-account write limit, which tests of their
        // own cover, would hold every test that writes in bursts (as `test_config` says too).
        command.env("WEBOOK_MODERATION_NEW_ACCOUNT_PERIOD", "0s");
    }
    command
}

/// The lines `child` writes to its piped stderr, read by a thread of their own (and copied to
/// [`LOG_DIR_ENV`]'s directory when it is set).
pub fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("stderr piped");
    let (lines_tx, lines) = mpsc::channel();
    let mut copy = std::env::var_os(LOG_DIR_ENV).map(|dir| {
        let path = Path::new(&dir).join(format!("{}.log", child.id()));
        std::fs::File::create(&path)
            .unwrap_or_else(|err| panic!("{LOG_DIR_ENV}: {}: {err}", path.display()))
    });
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(file) = copy.as_mut() {
                let _ = writeln!(file, "{line}");
            }
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// A running `webook serve`, its address read from its "listening on" log line.
pub struct Server {
    /// The process.
    pub child: Child,
    base: String,
    stderr_lines: mpsc::Receiver<String>,
    startup_lines: Vec<String>,
}

impl Server {
    pub fn start(mut command: Command) -> Self {
        command.args(["serve"]);
        Self::spawn(command, WAIT_LIMIT)
    }

    /// Runs `command` (which serves) and waits up to `limit` for its "listening on" line.
    pub fn spawn(mut command: Command, limit: Duration) -> Self {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn webook");
        let lines = stderr_lines(&mut child);
        let mut seen = Vec::new();
        let base = loop {
            let line = lines.recv_timeout(limit).unwrap_or_else(|_| {
                panic!(
                    "no 'listening on' line; stderr so far:\n{}",
                    seen.join("\n")
                )
            });
            if let Some(rest) = line.split("listening on ").nth(1) {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
            seen.push(line);
        };
        Self {
            child,
            base,
            stderr_lines: lines,
            startup_lines: seen,
        }
    }

    /// Runs `command` (which serves) with its stdout and stderr appended to the file `output`,
    /// and waits for the "listening on" line there. Its log lines are not read
    /// ([`Self::new_log_lines`] answers none).
    pub fn start_with_output(mut command: Command, output: &Path) -> Self {
        let file = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(output)
                .unwrap()
        };
        let child = command
            .arg("serve")
            .stdout(file())
            .stderr(file())
            .spawn()
            .expect("spawn webook");
        let deadline = std::time::Instant::now() + WAIT_LIMIT;
        let base = loop {
            let text = std::fs::read_to_string(output).unwrap_or_default();
            if let Some(rest) = text.split("listening on ").nth(1) {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no 'listening on' line; output so far:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        Self {
            child,
            base,
            stderr_lines: mpsc::channel().1,
            startup_lines: Vec::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Signs `email` up with `password` and logs in; the access token.
    pub async fn sign_up_and_log_in(&self, email: &str, password: &str) -> String {
        let client = reqwest::Client::new();
        let body =
            serde_json::json!({"email": email, "password": password, "confirmPassword": password});
        let signed: Value = client
            .post(self.url("/users/signup"))
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(signed["code"], 0, "{signed}");
        self.log_in(email, password).await
    }

    /// Logs `email` in with `password`; the access token.
    pub async fn log_in(&self, email: &str, password: &str) -> String {
        let body = serde_json::json!({"email": email, "password": password});
        let login = reqwest::Client::new()
            .post(self.url("/users/login"))
            .json(&body)
            .send()
            .await
            .unwrap();
        login.headers()["x-jwt-token"].to_str().unwrap().to_owned()
    }

    /// Publishes an article of `title` and `content` (HTML) as the holder of `token`; its id.
    pub async fn publish(&self, token: &str, title: &str, content: &str) -> i64 {
        let body = serde_json::json!({"title": title, "content": content});
        let published = self.post_json("/articles/publish", token, &body).await;
        assert_eq!(published["code"], 0, "{published}");
        published["data"].as_i64().unwrap()
    }

    /// The answer to a POST of `body` to `path` as the holder of `token`, as JSON.
    pub async fn post_json(&self, path: &str, token: &str, body: &Value) -> Value {
        reqwest::Client::new()
            .post(self.url(path))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// `host:port` it listens on.
    pub fn address(&self) -> String {
        self.base.trim_start_matches("http://").to_owned()
    }

    /// The log lines written before the "listening on" line.
    pub fn startup_lines(&self) -> &[String] {
        &self.startup_lines
    }

    /// The log lines written since the last call.
    pub fn new_log_lines(&self) -> Vec<String> {
        self.stderr_lines.try_iter().collect()
    }

    pub async fn get_json(&self, path: &str) -> (StatusCode, Value) {
        let response = reqwest::get(self.url(path)).await.unwrap();
        (response.status(), response.json().await.unwrap())
    }

    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends signal `name` (`TERM`, `KILL`, `STOP`, `CONT`) to the process.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// Waits for the process to exit (bounded) and returns its exit code.
    pub async fn exit_code(mut self) -> i32 {
        let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or_else(|| {
                    use std::os::unix::process::ExitStatusExt;
                    // Seen once in CI (SIGTERM after a CLI run beside the server): say which
                    // signal and what the server last logged.
                    let log: Vec<String> = self.stderr_lines.try_iter().collect();
                    panic!(
                        "webook was killed by signal {:?} instead of exiting; its last log lines:\n{}",
                        status.signal(),
                        log[log.len().saturating_sub(40)..].join("\n")
                    )
                });
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "webook did not exit"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What the search tests ask a running server.
impl Server {
    /// The article ids `GET /search` answers for `q`, in ranked order (one page of 50).
    pub async fn search_article_ids(&self, q: &str) -> Vec<i64> {
        let q: String = url::form_urlencoded::byte_serialize(q.as_bytes()).collect();
        let (status, body) = self
            .get_json(&format!("/search?q={q}&type=article&limit=50"))
            .await;
        assert_eq!(
            (status, body["code"].as_i64()),
            (StatusCode::OK, Some(0)),
            "{body}"
        );
        body["data"]["articles"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["id"].as_i64().unwrap())
            .collect()
    }

    /// Waits until `/readyz` reports the search index ready.
    pub async fn search_ready(&self) {
        platform::testing::wait_until("the search index is ready", || async {
            self.get_json("/readyz").await.1["data"]["details"]["search"] == "ready"
        })
        .await;
    }

    /// The text of `/metrics` (answered 200).
    pub async fn metrics_text(&self) -> String {
        let response = reqwest::get(self.url("/metrics")).await.unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        response.text().await.unwrap()
    }

    /// The value of `series` (a metric name with its labels) in `/metrics`; 0 when not yet
    /// recorded.
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.metrics_text().await;
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or(0.0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}
