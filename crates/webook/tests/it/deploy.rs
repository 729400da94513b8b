//! What `deploy/` ships, checked with the real tools and a real `webook` process:
//!
//! - the Prometheus alerting rules (`deploy/prometheus/*.yml`) pass `promtool check rules`, their
//!   unit tests (`deploy/prometheus/tests/`) pass `promtool test rules`, every alert is tested
//!   firing and not firing and has its section in docs/OPERATIONS.md → Alerts;
//! - the Grafana dashboard's queries are valid PromQL (`promtool check rules` on them as
//!   recording rules);
//! - every metric a rule or a panel names is one a running webook exports on `/metrics` (a
//!   cluster-mode process with a little traffic, and an embedded one taking scheduled backups;
//!   `up` is Prometheus's own);
//! - the signals added for the alerts move: `database_up` and `redis_up` with the dependencies,
//!   `data_dir_available_bytes` with the data directory's filesystem, `payment_discrepancies_open`
//!   from the start, `scheduler_sql_misfired_total` with misfired fire times;
//! - the systemd unit passes `systemd-analyze verify` and `systemd-analyze security` and holds
//!   the hardening the issue asks for, and its environment is a configuration webook accepts;
//! - the nginx example passes `nginx -t` and, run by a real nginx in front of a real webook,
//!   hands webook the client's address (and not a forged one), hides `/metrics`, and passes the
//!   notification stream through unbuffered.
//!
//! The tools come from Debian packages (`prometheus` for promtool, `nginx`, `systemd`);
//! scripts/with-services.sh installs them when missing and running as root. A missing tool fails
//! its test with the command that installs it: these tests never skip.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use common::process::{webook, Server, BINARY};
use platform::testing::{wait_until, RedisServer, TcpProxy, TestDb, WAIT_LIMIT};
use reqwest::StatusCode;
use serde_json::{json, Value};
use webook::schema::MIGRATIONS;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    let path = root().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// The first of `candidates` that is an executable file; panics saying how to install it.
fn tool(candidates: &[&str], install: &str) -> PathBuf {
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{} not found (looked at {candidates:?}); install it: {install} \
                 (scripts/with-services.sh does, when run as root)",
                candidates[0]
            )
        })
}

fn promtool() -> PathBuf {
    tool(
        &["/usr/bin/promtool", "/usr/local/bin/promtool"],
        "apt-get install --no-install-recommends prometheus",
    )
}

fn nginx() -> PathBuf {
    tool(
        &["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"],
        "apt-get install nginx",
    )
}

fn systemd_analyze() -> PathBuf {
    tool(
        &["/usr/bin/systemd-analyze", "/bin/systemd-analyze"],
        "apt-get install systemd",
    )
}

/// Runs `command`; its output, after asserting it succeeded (the message shows both streams).
#[track_caller]
fn succeeds(command: &mut Command) -> Output {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|err| panic!("run {command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

// ------------------------------------------------------------------------------- the rules

/// The rule files: every `*.yml` directly in deploy/prometheus.
fn rule_files() -> Vec<PathBuf> {
    let dir = root().join("deploy/prometheus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no rule files in {}", dir.display());
    files
}

/// One rule of a rule file, as far as the checks here need it.
#[derive(Debug)]
struct Rule {
    /// `alert:` or `record:` name.
    name: String,
    /// Whether it is an alert.
    alert: bool,
    expr: String,
}

/// The rules of a rule file. The files write each `expr` on its line or as a `|` block (their
/// header says so); a rule whose expression this does not find fails the count check.
fn rules_of(text: &str) -> Vec<Rule> {
    let lines: Vec<&str> = text.lines().collect();
    let mut rules = Vec::new();
    let mut names = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start().trim_start_matches("- ");
        if let Some(name) = trimmed.strip_prefix("alert:") {
            names.push((name.trim().to_owned(), true));
        } else if let Some(name) = trimmed.strip_prefix("record:") {
            names.push((name.trim().to_owned(), false));
        } else if let Some(value) = trimmed.strip_prefix("expr:") {
            let value = value.trim();
            let expr = if value == "|" || value == "|-" || value == ">" {
                let indent = line.len() - line.trim_start().len();
                lines[index + 1..]
                    .iter()
                    .take_while(|next| {
                        next.trim().is_empty() || next.len() - next.trim_start().len() > indent
                    })
                    .map(|next| next.trim())
                    .collect::<Vec<_>>()
                    .join(" ")
            } else {
                value.trim_matches('\'').trim_matches('"').to_owned()
            };
            let (name, alert) = names.pop().expect("an expr before its rule's name");
            rules.push(Rule {
                name,
                alert,
                expr: expr.trim().to_owned(),
            });
        }
    }
    assert!(names.is_empty(), "rules without an expr read: {names:?}");
    rules
}

fn all_rules() -> Vec<Rule> {
    rule_files()
        .iter()
        .flat_map(|file| rules_of(&std::fs::read_to_string(file).unwrap()))
        .collect()
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let promtool = promtool();
    let files = rule_files();
    let checked = succeeds(
        Command::new(&promtool)
            .arg("check")
            .arg("rules")
            .args(&files),
    );
    let rules = all_rules();
    let report = String::from_utf8_lossy(&checked.stdout).into_owned();
    assert!(
        report.contains(&format!("SUCCESS: {} rules found", rules.len())),
        "promtool found another number of rules than the {} read here:\n{report}",
        rules.len()
    );
    let tests_dir = root().join("deploy/prometheus/tests");
    let tested = succeeds(Command::new(&promtool).current_dir(&tests_dir).args([
        "test",
        "rules",
        "webook-alerts.test.yml",
    ]));
    assert!(
        String::from_utf8_lossy(&tested.stdout).contains("SUCCESS"),
        "{}",
        String::from_utf8_lossy(&tested.stdout)
    );

    // Every alert is tested firing and not firing, and promtool does run the tests: an
    // expectation that cannot hold fails them.
    let tests = read("deploy/prometheus/tests/webook-alerts.test.yml");
    let expectations = alert_expectations(&tests);
    for rule in rules.iter().filter(|rule| rule.alert) {
        let (fires, quiet) = expectations.get(&rule.name).copied().unwrap_or_default();
        assert!(
            fires > 0 && quiet > 0,
            "{}: tested firing {fires} times and not firing {quiet} times; test both",
            rule.name
        );
        assert!(
            rule.expr.contains("job=\"webook\""),
            "{} selects series of other jobs too: {}",
            rule.name,
            rule.expr
        );
    }
    let broken = tests.replacen("severity: critical", "severity: page", 1);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tests")).unwrap();
    for file in &files {
        std::fs::copy(file, dir.path().join(file.file_name().unwrap())).unwrap();
    }
    std::fs::write(dir.path().join("tests/broken.test.yml"), broken).unwrap();
    let failed = Command::new(&promtool)
        .current_dir(dir.path().join("tests"))
        .args(["test", "rules", "broken.test.yml"])
        .output()
        .unwrap();
    assert!(
        !failed.status.success(),
        "promtool passed a test whose expected labels are wrong"
    );
}

/// Per alert name: (expectations that it fires, expectations that it does not), read from a
/// promtool test file (`alertname: X` followed by `exp_alerts: []` or a list).
fn alert_expectations(tests: &str) -> BTreeMap<String, (usize, usize)> {
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (index, line) in lines.iter().enumerate() {
        let Some(name) = line.strip_prefix("alertname:") else {
            continue;
        };
        let next = lines[index + 1..]
            .iter()
            .find(|next| !next.is_empty())
            .expect("exp_alerts after alertname");
        let entry = counts.entry(name.trim().to_owned()).or_default();
        match *next {
            "exp_alerts: []" => entry.1 += 1,
            "exp_alerts:" => entry.0 += 1,
            other => panic!("after alertname {name}: {other}"),
        }
    }
    counts
}

#[test]
fn every_alert_has_its_section_in_the_operations_guide() {
    let guide = read("docs/OPERATIONS.md");
    let alerts = guide
        .split("\n## Alerts\n")
        .nth(1)
        .expect("docs/OPERATIONS.md has a section \"## Alerts\"");
    let alerts = alerts.split("\n## ").next().unwrap();
    let headings: BTreeSet<&str> = alerts
        .lines()
        .filter_map(|line| line.strip_prefix("### "))
        .map(str::trim)
        .collect();
    let names: BTreeSet<String> = all_rules()
        .into_iter()
        .filter(|rule| rule.alert)
        .map(|rule| rule.name)
        .collect();
    for name in &names {
        assert!(
            headings.contains(name.as_str()),
            "docs/OPERATIONS.md → Alerts has no \"### {name}\" (it has {headings:?})"
        );
    }
    for heading in &headings {
        assert!(
            names.contains(*heading),
            "docs/OPERATIONS.md → Alerts describes {heading}, which no rule defines"
        );
    }
}

// ---------------------------------------------------------------------------- the dashboard

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/grafana/webook.json")).expect("the dashboard is JSON")
}

/// Every panel of the dashboard, those inside collapsed rows too.
fn panels(dashboard: &Value) -> Vec<Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel.clone());
        if let Some(inner) = panel["panels"].as_array() {
            all.extend(inner.iter().cloned());
        }
    }
    all
}

/// The PromQL of the dashboard — every panel target, and the selector of each variable's
/// `label_values(…)` query — with Grafana's variables replaced by what Prometheus accepts.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut queries: Vec<String> = panels(dashboard)
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .map(|target| target["expr"].as_str().expect("a target's expr").to_owned())
        .collect();
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or_else(|| variable["query"].as_str())
            .unwrap();
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.rsplit_once(','))
            .map(|(selector, _)| selector.trim().to_owned())
            .unwrap_or_else(|| panic!("variable query {query}: label_values(selector, label)"));
        queries.push(inner);
    }
    queries
        .into_iter()
        .map(|query| {
            query
                .replace("$__rate_interval", "5m")
                .replace("$__range", "1h")
                .replace("$instance", ".+")
        })
        .collect()
}

#[test]
fn the_dashboards_queries_are_valid_promql() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "webook-ops");
    let panels = panels(&dashboard);
    let ids: BTreeSet<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
    for panel in panels.iter().filter(|panel| panel["type"] != "row") {
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {} reads the chosen data source",
            panel["title"]
        );
        assert!(
            panel["targets"].as_array().is_some_and(|t| !t.is_empty()),
            "panel {} has no query",
            panel["title"]
        );
    }
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() > 15, "{queries:?}");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (index, query) in queries.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: dashboard_query_{index}\n        expr: {}\n",
            serde_json::to_string(query).unwrap()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard.yml");
    std::fs::write(&file, rules).unwrap();
    succeeds(Command::new(promtool()).args(["check", "rules"]).arg(&file));
}

// ------------------------------------------------------------------- metrics webook exports

/// The metric names a PromQL expression selects: identifiers outside label matchers, ranges,
/// strings and grouping clauses that are neither functions, aggregations nor keywords.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Operators, modifiers and the aggregations (`sum by (…) (…)`: no parenthesis after them).
    const KEYWORDS: &[&str] = &[
        "and",
        "or",
        "unless",
        "bool",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "inf",
        "nan",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
    ];
    const GROUPING: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut at = 0;
    // Skips from an opening character to its closing one, past strings in between.
    let skip_to = |from: usize, close: char| -> usize {
        let mut index = from + 1;
        while index < chars.len() && chars[index] != close {
            if matches!(chars[index], '"' | '\'' | '`') {
                let quote = chars[index];
                index += 1;
                while index < chars.len() && chars[index] != quote {
                    index += if chars[index] == '\\' { 2 } else { 1 };
                }
            }
            index += 1;
        }
        index + 1
    };
    while at < chars.len() {
        let c = chars[at];
        match c {
            '"' | '\'' | '`' => {
                at += 1;
                while at < chars.len() && chars[at] != c {
                    at += if chars[at] == '\\' { 2 } else { 1 };
                }
                at += 1;
            }
            '{' => at = skip_to(at, '}'),
            '[' => at = skip_to(at, ']'),
            c if c.is_ascii_digit() || c == '.' => {
                while at < chars.len() && (chars[at].is_ascii_alphanumeric() || chars[at] == '.') {
                    at += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = at;
                while at < chars.len()
                    && (chars[at].is_ascii_alphanumeric() || chars[at] == '_' || chars[at] == ':')
                {
                    at += 1;
                }
                let word: String = chars[start..at].iter().collect();
                let mut next = at;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let called = chars.get(next) == Some(&'(');
                if GROUPING.contains(&word.as_str()) {
                    if called {
                        at = skip_to(next, ')');
                    }
                } else if word == "offset" {
                    // The duration after it.
                    at = next;
                    while at < chars.len() && chars[at].is_ascii_alphanumeric() {
                        at += 1;
                    }
                } else if !called && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                    names.insert(word);
                }
            }
            _ => at += 1,
        }
    }
    names
}

#[test]
fn metric_names_are_read_from_promql_past_labels_functions_and_clauses() {
    let names = |expr: &str| -> Vec<String> { metric_names(expr).into_iter().collect() };
    assert_eq!(
        names(
            "histogram_quantile(0.99, sum by (job, instance, le) (rate(\
             http_request_duration_seconds_bucket{job=\"webook\", route!~\"/a|{b}\"}[5m]))) > 1 \
             and sum by (job) (rate(http_request_duration_seconds_count{job=\"webook\"}[5m])) > 0.2"
        ),
        ["http_request_duration_seconds_bucket", "http_request_duration_seconds_count"]
    );
    assert_eq!(
        names("predict_linear(a_bytes[6h], 24 * 3600) < 0 and a_bytes / b_bytes < 1e9"),
        ["a_bytes", "b_bytes"]
    );
    assert_eq!(
        names("max by (topic, group) (lag offset 5m) > bool 60 unless on (instance) up == 0"),
        ["lag", "up"]
    );
    assert_eq!(
        names("x * on (instance) group_left (version) y"),
        ["x", "y"]
    );
    assert_eq!(
        names("topk(5, histogram_quantile(0.99, sum without (x) (rate(a_bucket[1m]))))"),
        ["a_bucket"]
    );
    assert!(names("vector(1)").is_empty());
}

/// The names of the samples in a Prometheus text exposition.
fn exported_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            line.split(|c: char| c == '{' || c.is_whitespace())
                .next()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// Series Prometheus makes itself for every target; no exporter exports them.
const PROMETHEUS_OWN: &[&str] = &["up"];

const JWT_ACCESS: &str = "deploy-test-access-secret-0123456789abcdef";
const JWT_REFRESH: &str = "deploy-test-refresh-secret-0123456789abcdef";
const PASSWORD: &str = "hello#world1";

/// A cluster-mode `webook serve` on `database_url` and `redis_url`, in a data dir under `dir`.
fn cluster_server(dir: &Path, database_url: &str, redis_url: &str) -> Server {
    let mut command = webook(dir);
    command
        .env("WEBOOK_DATABASE_URL", database_url)
        .env("WEBOOK_REDIS_URL", redis_url)
        .env("WEBOOK_JWT_ACCESS_SECRET", JWT_ACCESS)
        .env("WEBOOK_JWT_REFRESH_SECRET", JWT_REFRESH)
        .env("WEBOOK_LOG", "warn,webook::app=info");
    Server::start(command)
}

/// Signs `email` up on `base` and logs in; the access token.
async fn sign_up(client: &reqwest::Client, base: &str, email: &str) -> String {
    let body = json!({"email": email, "password": PASSWORD, "confirmPassword": PASSWORD});
    let signed: Value = client
        .post(format!("{base}/users/signup"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(signed["code"], 0, "{signed}");
    let login = client
        .post(format!("{base}/users/login"))
        .json(&json!({"email": email, "password": PASSWORD}))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::OK);
    login.headers()["x-jwt-token"].to_str().unwrap().to_owned()
}

#[tokio::test]
async fn every_metric_the_rules_and_the_dashboard_name_is_exported_by_a_running_webook() {
    let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rule in all_rules() {
        for name in metric_names(&rule.expr) {
            wanted
                .entry(name)
                .or_default()
                .push(format!("rule {}", rule.name));
        }
    }
    for query in dashboard_queries(&dashboard()) {
        for name in metric_names(&query) {
            wanted
                .entry(name)
                .or_default()
                .push("the dashboard".to_owned());
        }
    }
    for own in PROMETHEUS_OWN {
        wanted.remove(*own);
    }
    assert!(
        wanted.len() > 10,
        "implausibly few metrics named: {wanted:?}"
    );

    // Cluster mode exports the most (Redis, the stream's groups); a little traffic makes the
    // request and event series appear.
    let db = TestDb::postgres(&MIGRATIONS).await;
    let redis = RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = cluster_server(dir.path(), &db.url, &redis.url());
    let client = reqwest::Client::new();
    let base = server.url("");
    let token = sign_up(&client, &base, "metrics@example.com").await;
    let published: Value = client
        .post(server.url("/articles/publish"))
        .bearer_auth(&token)
        .json(&json!({"title": "Metrics", "content": "<p>metrics</p>"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(published["code"], 0, "{published}");
    // Scheduled backups are the embedded mode's (PostgreSQL has its own tools).
    let embedded_dir = tempfile::tempdir().unwrap();
    let mut command = webook(embedded_dir.path());
    command
        .env("WEBOOK_BACKUP_DIR", embedded_dir.path().join("backups"))
        .env("WEBOOK_BACKUP_SCHEDULE", "@every 1s");
    let embedded = Server::start(command);

    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        let mut exported = exported_names(&server.metrics_text().await);
        exported.extend(exported_names(&embedded.metrics_text().await));
        let missing: Vec<(&String, &Vec<String>)> = wanted
            .iter()
            .filter(|(name, _)| !exported.contains(*name))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "metrics named by the rules or the dashboard that webook does not export: \
             {missing:?}\nit exports: {exported:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
    embedded.terminate();
    assert_eq!(embedded.exit_code().await, 0);
}

// ----------------------------------------------------------------- signals added for alerts

/// The value of the unlabelled series `name` on `server`'s `/metrics`, if exported.
async fn gauge(server: &Server, name: &str) -> Option<f64> {
    server.metrics_text().await.lines().find_map(|line| {
        let (series, value) = line.split_once(' ')?;
        (series == name).then(|| value.trim().parse().unwrap())
    })
}

// Multi-threaded: the PostgreSQL proxy runs on the test's runtime while the test blocks on the
// server's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_up_and_redis_up_follow_the_dependencies() {
    let db = TestDb::postgres(&MIGRATIONS).await;
    let (proxy, database_url) = TcpProxy::for_url(&db.url).await;
    let mut redis = RedisServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = cluster_server(dir.path(), &database_url, &redis.url());
    wait_until("database_up and redis_up are 1", || async {
        gauge(&server, "database_up").await == Some(1.0)
            && gauge(&server, "redis_up").await == Some(1.0)
    })
    .await;

    // A readiness probe sets them as it answers.
    redis.stop();
    let (status, body) = server.get_json("/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["data"]["redis"], "down", "{body}");
    assert_eq!(gauge(&server, "redis_up").await, Some(0.0));
    assert_eq!(gauge(&server, "database_up").await, Some(1.0));
    redis.restart().await;
    wait_until("redis_up is 1 again", || async {
        server.get_json("/readyz").await;
        gauge(&server, "redis_up").await == Some(1.0)
    })
    .await;

    // Nobody asks /readyz: the periodic probe notices by itself.
    proxy.cut();
    wait_until("database_up is 0 without a /readyz request", || async {
        gauge(&server, "database_up").await == Some(0.0)
    })
    .await;
    proxy.restore().await;
    wait_until("database_up is 1 again", || async {
        gauge(&server, "database_up").await == Some(1.0)
    })
    .await;
}

/// A tmpfs of `bytes`, mounted on a temp dir and unmounted when dropped (needs root).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: u64) -> Self {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test mounts a tmpfs and needs root (scripts/test.sh in CI runs as root)"
        );
        let dir = tempfile::tempdir().unwrap();
        succeeds(
            Command::new("mount")
                .args([
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={bytes},mode=0755"),
                    "tmpfs",
                ])
                .arg(dir.path()),
        );
        Self { dir }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test]
async fn the_data_dir_gauges_read_its_filesystem() {
    const MIB: u64 = 1024 * 1024;
    let disk = SmallDisk::mount(64 * MIB);
    let server = Server::start(webook(disk.dir.path()));
    let data_dir = disk.dir.path().join("data");
    let size = wait_for_gauge(&server, "data_dir_size_bytes").await;
    assert_eq!(size, (64 * MIB) as f64);
    let before = wait_for_gauge(&server, "data_dir_available_bytes").await;
    let (available, _) = platform::health::space(&data_dir).unwrap();
    assert!(
        (before - available as f64).abs() < (8 * MIB) as f64,
        "gauge {before}, statvfs {available}"
    );

    // 24 MiB written beside the database: the next probe shows them gone.
    let ballast = data_dir.join("ballast");
    std::fs::write(&ballast, vec![1u8; (24 * MIB) as usize]).unwrap();
    server.get_json("/readyz").await;
    let full = gauge(&server, "data_dir_available_bytes").await.unwrap();
    assert!(
        before - full >= (20 * MIB) as f64,
        "available {before} before the ballast, {full} after"
    );
    std::fs::remove_file(&ballast).unwrap();
    server.get_json("/readyz").await;
    let freed = gauge(&server, "data_dir_available_bytes").await.unwrap();
    assert!(freed - full >= (20 * MIB) as f64, "{full} → {freed}");
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

async fn wait_for_gauge(server: &Server, name: &str) -> f64 {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        if let Some(value) = gauge(server, name).await {
            return value;
        }
        assert!(Instant::now() < deadline, "{name} never exported");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `webook <args>` on the embedded database in `dir` (data dir `dir/data`).
fn cli(dir: &Path, args: &[&str]) -> String {
    let output = webook(dir).args(args).output().unwrap();
    common::cli_succeeded(output, args)
}

#[tokio::test]
async fn open_payment_discrepancies_are_on_the_gauge_from_the_start() {
    let dir = tempfile::tempdir().unwrap();
    cli(dir.path(), &["migrate"]);
    let url = format!("sqlite://{}", dir.path().join("data/webook.db").display());
    let mut connection = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap();
    for (trade_no, status) in [("t1", "open"), ("t2", "acting"), ("t3", "resolved")] {
        sqlx::query(
            "INSERT INTO payment_discrepancies (bill_date, kind, trade_no, detail, status, ctime, \
             utime) VALUES ('2026-01-01', 'missing_payment', $1, '', $2, 0, 0)",
        )
        .bind(trade_no)
        .bind(status)
        .execute(&mut connection)
        .await
        .unwrap();
    }
    sqlx::Connection::close(connection).await.unwrap();

    // No reconciliation has run in this process: the gauge still says what waits.
    let server = Server::start(webook(dir.path()));
    wait_until("payment_discrepancies_open is 2", || async {
        gauge(&server, "payment_discrepancies_open").await == Some(2.0)
    })
    .await;
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

#[tokio::test]
async fn fire_times_missed_while_no_instance_ran_are_counted_as_misfires() {
    let dir = tempfile::tempdir().unwrap();
    cli(
        dir.path(),
        &[
            "jobs",
            "add",
            "--name",
            "tick",
            "--cron",
            "@every 1s",
            "--executor",
            "ranking",
        ],
    );
    // Fire times pass with no instance running: the first claim records them as misfired.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let server = Server::start(webook(dir.path()));
    let deadline = Instant::now() + WAIT_LIMIT;
    let counted = loop {
        let counted = wait_for_gauge(&server, "scheduler_sql_misfired_total").await;
        if counted >= 2.0 {
            break counted;
        }
        assert!(Instant::now() < deadline, "misfires counted: {counted}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
    let runs = cli(dir.path(), &["jobs", "runs", "tick", "--limit", "500"]);
    let misfired = runs
        .lines()
        .filter(|line| line.contains("misfired"))
        .count();
    assert!(
        counted <= misfired as f64,
        "counted {counted} misfires, the job's runs record {misfired}:\n{runs}"
    );
}

// ------------------------------------------------------------------------- the systemd unit

/// `key=value` lines of a unit file (comments and sections aside), in order.
fn unit_settings(unit: &str) -> Vec<(String, String)> {
    unit.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with('['))
        .map(|line| {
            let (key, value) = line.split_once('=').expect("key=value");
            (key.trim().to_owned(), value.trim().to_owned())
        })
        .collect()
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let analyze = systemd_analyze();
    let unit = read("deploy/systemd/webook.service");
    let settings = unit_settings(&unit);
    let values = |key: &str| -> Vec<&str> {
        settings
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    let one = |key: &str| -> &str {
        match values(key).as_slice() {
            [value] => value,
            other => panic!("{key}: expected one value, found {other:?}"),
        }
    };
    for (key, value) in [
        ("DynamicUser", "yes"),
        // The data directory, and the one scheduled backups may use.
        ("StateDirectory", "webook webook-backups"),
        ("ProtectSystem", "strict"),
        ("ReadWritePaths", "/var/lib/webook"),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("MemoryDenyWriteExecute", "yes"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("KillSignal", "SIGTERM"),
    ] {
        assert_eq!(one(key), value, "{key}");
    }
    assert!(
        values("SystemCallFilter").contains(&"@system-service"),
        "{:?}",
        values("SystemCallFilter")
    );
    // The data directory is the only writable path and the state directory.
    let environment = values("Environment");
    assert!(
        environment.contains(&"WEBOOK_DATA_DIR=/var/lib/webook"),
        "{environment:?}"
    );
    // webook drains on SIGTERM: requests, then jobs, each up to shutdown_timeout.
    let stop: u64 = one("TimeoutStopSec")
        .parse()
        .expect("TimeoutStopSec in seconds");
    let shutdown = platform::config::Config::default()
        .shutdown_timeout
        .as_secs();
    assert!(
        stop > 2 * shutdown,
        "TimeoutStopSec={stop} leaves webook's drain ({shutdown} s per stage) no room"
    );

    // systemd-analyze verify needs ExecStart's binary: a copy names the one just built.
    let dir = tempfile::tempdir().unwrap();
    let exec = one("ExecStart");
    let (program, args) = exec.split_once(' ').unwrap();
    assert_eq!((program, args), ("/usr/local/bin/webook", "serve"));
    let copy = dir.path().join("webook.service");
    std::fs::write(
        &copy,
        unit.replace(
            "ExecStart=/usr/local/bin/webook serve",
            &format!("ExecStart={BINARY} serve"),
        ),
    )
    .unwrap();
    let verified = succeeds(Command::new(&analyze).arg("verify").arg(&copy));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&verified.stdout),
        String::from_utf8_lossy(&verified.stderr)
    );
    assert!(
        said.trim().is_empty(),
        "systemd-analyze verify warns:\n{said}"
    );
    // An exposure of at most 2.0 ("OK"; systemd-analyze counts in tenths).
    succeeds(
        Command::new(&analyze)
            .args(["security", "--offline=yes", "--threshold=20"])
            .arg(&copy),
    );

    // The unit's environment is a configuration webook accepts.
    let mut command = Command::new(BINARY);
    for (key, _) in std::env::vars() {
        if key.starts_with("WEBOOK_") {
            command.env_remove(key);
        }
    }
    for assignment in &environment {
        let (key, value) = assignment.split_once('=').unwrap();
        let value = if key == "WEBOOK_DATA_DIR" {
            dir.path().join("data").display().to_string()
        } else {
            value.to_owned()
        };
        command.env(key, value);
    }
    let printed = succeeds(
        command
            .args(["serve", "--print-config"])
            .current_dir(dir.path()),
    );
    let printed = String::from_utf8_lossy(&printed.stdout);
    assert!(printed.contains("127.0.0.1:8080"), "{printed}");
    assert!(printed.contains("::1"), "{printed}");
}

// ------------------------------------------------------------------------ the nginx example

/// A free local TCP port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `text` with `from` (which must occur exactly once) replaced by `to`.
#[track_caller]
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "{from:?} once in the example"
    );
    text.replacen(from, to, 1)
}

/// The `location` block of `path` in the example (`location = PATH {` … `}`).
fn location<'a>(conf: &'a str, path: &str) -> &'a str {
    let start = conf
        .find(&format!("location = {path} {{"))
        .unwrap_or_else(|| panic!("no location = {path}"));
    let end = conf[start..].find('}').unwrap();
    &conf[start..start + end]
}

/// nginx running the example in front of `webook` (`host:port`), with TLS on a certificate for
/// `webook.test`; stopped when dropped.
struct Nginx {
    child: std::process::Child,
    dir: tempfile::TempDir,
    http: u16,
    https: u16,
    certificate: Vec<u8>,
}

impl Nginx {
    fn start(webook: &str) -> Self {
        let nginx = nginx();
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let certified = rcgen::generate_simple_self_signed(vec!["webook.test".to_owned()]).unwrap();
        std::fs::write(path("cert.pem"), certified.cert.pem()).unwrap();
        std::fs::write(path("key.pem"), certified.signing_key.serialize_pem()).unwrap();
        let (http, https) = (free_port(), free_port());
        let mut conf = read("deploy/nginx/webook.conf");
        for (from, to) in [
            ("server 127.0.0.1:8080;", format!("server {webook};")),
            ("listen 80;", format!("listen 127.0.0.1:{http};")),
            (
                "listen 443 ssl http2;",
                format!("listen 127.0.0.1:{https} ssl http2;"),
            ),
            // The test host may have no IPv6.
            ("listen [::]:80;", String::new()),
            ("listen [::]:443 ssl http2;", String::new()),
            (
                "/etc/letsencrypt/live/example.com/fullchain.pem",
                path("cert.pem"),
            ),
            (
                "/etc/letsencrypt/live/example.com/privkey.pem",
                path("key.pem"),
            ),
        ] {
            conf = replace_once(&conf, from, &to);
        }
        std::fs::write(path("webook.conf"), conf).unwrap();
        // A main configuration as a site would have it — gzip on for event streams too, as a
        // site-wide `gzip_types` can say — running in the foreground, everything in `dir`.
        let main = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {pid};\n\
             error_log {log} info;\nevents {{ worker_connections 256; }}\n\
             http {{\n  access_log {access};\n  gzip on;\n  gzip_types text/event-stream application/json;\n\
             client_body_temp_path {tmp}/body;\n  proxy_temp_path {tmp}/proxy;\n\
             fastcgi_temp_path {tmp}/fastcgi;\n  uwsgi_temp_path {tmp}/uwsgi;\n\
             scgi_temp_path {tmp}/scgi;\n  include {site};\n}}\n",
            pid = path("nginx.pid"),
            log = path("error.log"),
            access = path("access.log"),
            tmp = dir.path().display(),
            site = path("webook.conf"),
        );
        std::fs::write(path("nginx.conf"), main).unwrap();
        let args = |command: &mut Command| {
            command
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(path("nginx.conf"))
                .arg("-e")
                .arg(path("error.log"));
        };
        let mut test = Command::new(&nginx);
        args(&mut test);
        succeeds(test.arg("-t"));
        let mut run = Command::new(&nginx);
        args(&mut run);
        let child = run
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let started = Self {
            child,
            certificate: certified.cert.pem().into_bytes(),
            dir,
            http,
            https,
        };
        let deadline = Instant::now() + WAIT_LIMIT;
        while std::net::TcpStream::connect(("127.0.0.1", https)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen; its log:\n{}",
                std::fs::read_to_string(started.dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        started
    }

    /// A client connecting from `local` (a loopback address of its own), trusting the test
    /// certificate, reaching `webook.test` at this nginx.
    fn client(&self, local: &str) -> reqwest::Client {
        let address: IpAddr = local.parse().unwrap();
        reqwest::Client::builder()
            .local_address(address)
            .tls_certs_only([reqwest::Certificate::from_pem(&self.certificate).unwrap()])
            .resolve(
                "webook.test",
                SocketAddr::from(([127, 0, 0, 1], self.https)),
            )
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }

    fn url(&self, path: &str) -> String {
        format!("https://webook.test:{}{path}", self.https)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// An nginx time (`90s`, `10m`, `1h`; one unit).
fn nginx_time(text: &str) -> Duration {
    let (number, unit) = text.split_at(text.len() - 1);
    let number: u64 = number.parse().unwrap_or_else(|_| panic!("time {text}"));
    Duration::from_secs(match unit {
        "s" => number,
        "m" => number * 60,
        "h" => number * 3600,
        "d" => number * 86_400,
        _ => panic!("time {text}: unit s, m, h or d"),
    })
}

/// A failed login through `client`: its code (401002 wrong password, 429001 limited).
async fn failed_login(client: &reqwest::Client, url: &str, forged: Option<&str>) -> i64 {
    let mut request = client
        .post(url)
        .json(&json!({"email": "nobody@example.com", "password": "wrong#password1"}));
    if let Some(forged) = forged {
        request = request.header("x-forwarded-for", forged);
    }
    let body: Value = request.send().await.unwrap().json().await.unwrap();
    body["code"].as_i64().unwrap()
}

#[tokio::test]
async fn the_nginx_example_proxies_client_addresses_and_the_notification_stream() {
    let example = read("deploy/nginx/webook.conf");
    let stream = location(&example, "/notifications/stream");
    for directive in ["proxy_buffering off;", "proxy_cache off;", "gzip off;"] {
        assert!(
            stream.contains(directive),
            "the stream's location lacks {directive}"
        );
    }
    let read_timeout = stream
        .split("proxy_read_timeout ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("the stream's location sets proxy_read_timeout");
    let read_timeout = nginx_time(read_timeout);
    assert!(
        read_timeout >= webook::notifications::STREAM_LIFETIME,
        "proxy_read_timeout {read_timeout:?} is shorter than a stream"
    );

    // webook believes nginx (on 127.0.0.1) and lets each client try to sign in twice.
    let dir = tempfile::tempdir().unwrap();
    let mut command = webook(dir.path());
    command
        .env("WEBOOK_TRUSTED_PROXIES", "127.0.0.1")
        .env("WEBOOK_AUTH_RATE_LIMIT", "2")
        .env("WEBOOK_AUTH_RATE_WINDOW", "1h");
    let server = Server::start(command);
    let nginx = Nginx::start(&server.address());
    let login = nginx.url("/users/login");

    // Clients on other loopback addresses: webook sees each one, not nginx.
    let alice = nginx.client("127.0.0.2");
    assert_eq!(failed_login(&alice, &login, None).await, 401_002);
    assert_eq!(failed_login(&alice, &login, None).await, 401_002);
    assert_eq!(failed_login(&alice, &login, None).await, 429_001);
    let bob = nginx.client("127.0.0.3");
    assert_eq!(failed_login(&bob, &login, None).await, 401_002);
    // Claiming to be Alice through the proxy does not make Carol count as her.
    let carol = nginx.client("127.0.0.4");
    assert_eq!(
        failed_login(&carol, &login, Some("127.0.0.2")).await,
        401_002
    );
    assert_eq!(
        failed_login(&carol, &login, Some("127.0.0.2")).await,
        401_002
    );

    // Plain HTTP is sent to HTTPS; the metrics are not served publicly.
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirected = plain
        .get(format!("http://127.0.0.1:{}/articles", nginx.http))
        .send()
        .await
        .unwrap();
    assert_eq!(redirected.status(), StatusCode::MOVED_PERMANENTLY);
    assert!(redirected.headers()["location"]
        .to_str()
        .unwrap()
        .starts_with("https://"));
    let metrics = alice.get(nginx.url("/metrics")).send().await.unwrap();
    assert_eq!(metrics.status(), StatusCode::NOT_FOUND);
    assert!(!metrics
        .text()
        .await
        .unwrap()
        .contains("http_requests_total"));

    // The stream's first event arrives while the stream stays open: nothing holds it back,
    // though the site gzips event streams and the client accepts gzip.
    let dave = nginx.client("127.0.0.5");
    let token = sign_up(&dave, &nginx.url(""), "dave@example.com").await;
    let mut events = dave
        .get(nginx.url("/notifications/stream"))
        .bearer_auth(&token)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), StatusCode::OK);
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    assert!(
        events.headers().get("content-encoding").is_none(),
        "{:?}",
        events.headers()
    );
    let mut received = String::new();
    let first = tokio::time::timeout(WAIT_LIMIT, async {
        while !received.contains("\n\n") {
            let chunk = events
                .chunk()
                .await
                .unwrap()
                .expect("the stream stays open");
            received.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(
        first.is_ok(),
        "no event through nginx; received {received:?}"
    );
    assert!(
        received.starts_with("event: unread\ndata: {\"count\":0}"),
        "{received:?}"
    );
    drop(events);
    drop(nginx);
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}
