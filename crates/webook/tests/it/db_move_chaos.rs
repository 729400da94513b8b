//! Chaos tests of the database move's switch (`db_move::switch`) on the real `webook` binary:
//! coordinators killed or hung at every stage of a switch, instances stopped, killed or started
//! in the middle of one, and a long transaction across the pause — each under a mixed write
//! load (comments, likes and publishes from four users through every serving instance, every
//! answer recorded with its code, id and content).
//!
//! After every broken switch the tests check, without any human action (nobody runs `abort`):
//! - the switch **ends by itself**: aborted when it broke before the flip (the phase unchanged),
//!   completed when it broke after (the phase is the target); the stage is no longer `pause`,
//!   `aborting` or `flip`, and the fences are where the phase needs them (the authority's open,
//!   the other's closed);
//! - the site **answers writes again in time**: probe writes sent to every healthy instance,
//!   once it has acknowledged the pause, are answered with code 0 within the pause deadline
//!   (2 s here; + the coordinator's 3 s lease when the coordinator died or hung) + a 2 s margin,
//!   counted from the pause's start;
//! - and at the end, with the load stopped, **every acknowledged write is on the serving side
//!   exactly once** (the rows of `comments`, `articles`, `published_articles` and `user_likes`
//!   against what the clients were told), no write answered with an error is there, nothing is
//!   there twice or unsent, and — when the phase still replicates — both sides hold the same
//!   rows.
//!
//! The tests (run one at a time: their bounds are about time):
//! 1. [`sqlite_to_postgresql_the_cli_coordinator_killed_at_every_stage`]: one embedded server on
//!    SQLite; the CLI starts the move, switches to SrcFirst, validates and fixes; then `switch
//!    DstFirst` is run four times with `WEBOOK_DB_MOVE_STALL` = `paused`, `fenced`, `drained`,
//!    `flipped` and SIGKILLed there: the server alone aborts the first three (reopening the
//!    source's fence for the second and third) and completes the fourth; then DstOnly. Proves
//!    that a CLI dying anywhere in a switch neither freezes the site nor loses a write, and that
//!    the move goes on to its end afterwards.
//! 2. [`three_cluster_instances_end_every_broken_switch`]: PostgreSQL → PostgreSQL with Redis,
//!    three serving instances (and coordinator-only ones), in order:
//!    - (d) a direct transaction on the source updates an article's title and stays open 10 s
//!      across a switch to DstFirst: the fence cannot close, the switch aborts at its cutoff and
//!      the site writes again within the deadline (reopening the fence does not wait for that
//!      transaction); the update, committed later, reaches both sides;
//!    - (b) an instance SIGSTOPped before the switch cannot acknowledge it: the switch aborts
//!      naming it, the others write again within the deadline, and after SIGCONT it serves too;
//!    - (e) a coordinator instance hung at `acknowledged` (alive; its lease renewed only up to
//!      its cutoff) while a new instance starts: the others abort the switch once the lease
//!      runs out, and the newcomer waits for that outcome before it listens;
//!    - (a) coordinator instances SIGKILLed at `fenced` (the others abort and reopen the fence)
//!      and at `flipped` (the others complete it);
//!    - (c) an instance SIGKILLed right after acknowledging the pause of a switch back to
//!      SrcFirst: the others go on (the switch flips without it, or aborts);
//!    - then a last, clean switch with the instances left.
//!
//!    Proves that no single crash, stop, hang or slow transaction in a cluster freezes the site,
//!    leaves a switch half done, or loses or doubles a write.
//! 3. [`postgresql_to_postgresql_embedded_the_cli_killed_when_fenced`]: one embedded server on
//!    PostgreSQL (no Redis), the CLI killed at `fenced`: the server aborts the switch and reopens
//!    the fence; then the move completes.
//!
//! Each switch prints one line (`db-move chaos …`): how it ended, the pause the coordinator
//! measured (`paused N ms` of the outcome, when it flipped by itself), the longest write in
//! flight while it ran, and when writes were answered again.
//!
//! `WEBOOK_TEST_BINARY` runs these tests against another build of `webook` (e.g. an older
//! commit's, to show what they catch); the default is this crate's binary. With another binary,
//! which may lack the stall points, a coordinator is killed as soon as its pause is seen.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    collections::{BTreeMap, BTreeSet},
    process::{Child, Command, Stdio},
    sync::{mpsc, Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use platform::testing::{redis_url, wait_until, EmptyPostgres, TestDb, WAIT_LIMIT};
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::{any::AnyPoolOptions, AnyPool};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::common::{
    process::{binary_under_test as binary, stderr_lines, webook_at, Server, TEST_BINARY_ENV},
    Lcg, PASSWORD, UA,
};

const ACCESS_SECRET: &str = "db-move-chaos-access-secret-0123456789";
const REFRESH_SECRET: &str = "db-move-chaos-refresh-secret-0123456789";
/// The instances' pause deadline (`db_move_pause_deadline`), short to keep the runs short.
const DEADLINE: Duration = Duration::from_secs(2);
/// A coordinator's lease (`db_move::switch::LEASE`).
const LEASE: Duration = Duration::from_secs(3);
/// What a busy two-core machine may add to a bound: polls (100 ms), probes, scheduling.
const MARGIN: Duration = Duration::from_secs(2);
/// How long a member's sign of life counts (`db_move::control::MEMBER_WITHIN`), plus a little.
const MEMBER_WITHIN_MS: i64 = 10_500;
/// The pause between two writes of one load worker.
const LOAD_PAUSE: Duration = Duration::from_millis(30);
/// How long a CLI command may take (a copy and a validation of the tests' small data take
/// seconds).
const CLI_LIMIT: Duration = Duration::from_secs(60);
/// How long the direct transaction of scenario (d) stays open.
const LONG_TRANSACTION: Duration = Duration::from_secs(10);

/// One test at a time: their bounds are about time, on a machine with two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether another binary than this crate's is under test (it may lack the stall points).
fn other_binary() -> bool {
    std::env::var(TEST_BINARY_ENV).is_ok()
}

/// Wall-clock milliseconds: the control row's times are the coordinators' clocks (same host).
fn wall_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap()
}

async fn pool(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    AnyPoolOptions::new()
        .max_connections(3)
        .connect(&platform::db::connect_url(url).unwrap())
        .await
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// The site: databases, processes, CLI.

/// Where the move starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The embedded SQLite of the data dir `site`.
    Sqlite,
    /// A PostgreSQL database (migrated by the first server).
    Postgres,
}

/// The databases (source and destination), the data dirs and, in cluster mode, a Redis prefix.
struct Site {
    root: tempfile::TempDir,
    source: Option<EmptyPostgres>,
    destination: EmptyPostgres,
    redis_prefix: Option<String>,
}

impl Site {
    async fn new(source: Source, redis: bool) -> Self {
        Self {
            root: tempfile::tempdir().unwrap(),
            source: match source {
                Source::Postgres => Some(TestDb::empty_postgres().await),
                Source::Sqlite => None,
            },
            destination: TestDb::empty_postgres().await,
            redis_prefix: redis.then(|| format!("dbmove-{}", uuid::Uuid::new_v4().simple())),
        }
    }

    fn source_url(&self) -> String {
        match &self.source {
            Some(postgres) => postgres.url.clone(),
            None => format!(
                "sqlite://{}",
                self.root.path().join("site/data/webook.db").display()
            ),
        }
    }

    /// A `webook` command on data dir `dir` (embedded SQLite: the server's and the CLI's must
    /// be the same, `site`).
    fn command(&self, dir: &str) -> Command {
        let data_dir = self.root.path().join(dir);
        std::fs::create_dir_all(&data_dir).unwrap();
        let mut command = webook_at(&binary(), &data_dir);
        command
            // "listening on" is the app's info line; the move says what it does.
            .env("WEBOOK_LOG", "warn,webook::app=info,webook::db_move=info")
            .env("WEBOOK_AUTH_RATE_LIMIT", "100000")
            .env("WEBOOK_WRITE_RATE_LIMIT", "100000")
            .env("WEBOOK_COMMENT_RATE_LIMIT", "100000")
            .env("WEBOOK_RANKING_SCHEDULE", "@yearly")
            .env(
                "WEBOOK_DB_MOVE_PAUSE_DEADLINE",
                format!("{}s", DEADLINE.as_secs()),
            );
        if let Some(source) = &self.source {
            command.env("WEBOOK_DATABASE_URL", &source.url);
        }
        if let Some(prefix) = &self.redis_prefix {
            command
                .env("WEBOOK_REDIS_URL", redis_url())
                .env("WEBOOK_REDIS_PREFIX", prefix)
                .env("WEBOOK_JWT_ACCESS_SECRET", ACCESS_SECRET)
                .env("WEBOOK_JWT_REFRESH_SECRET", REFRESH_SECRET);
        }
        command
    }

    /// Starts `webook serve` on data dir `dir`, with `stall` as its `WEBOOK_DB_MOVE_STALL`.
    async fn start(&self, dir: &str, stall: Option<&str>) -> Server {
        let mut command = self.command(dir);
        if let Some(stall) = stall {
            command.env("WEBOOK_DB_MOVE_STALL", stall);
        }
        tokio::task::spawn_blocking(move || Server::start(command))
            .await
            .unwrap()
    }

    /// The CLI's command (`args`), with `stall` as its `WEBOOK_DB_MOVE_STALL`.
    fn cli_command(&self, args: &[&str], stall: Option<&str>) -> Command {
        let dir = if self.source.is_none() { "site" } else { "cli" };
        let mut command = self.command(dir);
        command.args(args);
        if let Some(stall) = stall {
            command.env("WEBOOK_DB_MOVE_STALL", stall);
        }
        command
    }

    /// Runs `webook ARGS…` to its end, at most [`CLI_LIMIT`] (a command that hangs fails the
    /// test); its stdout (it must succeed).
    async fn cli(&self, args: &[&str]) -> String {
        let mut command = tokio::process::Command::from(self.cli_command(args, None));
        command.kill_on_drop(true);
        let output = tokio::time::timeout(CLI_LIMIT, command.output())
            .await
            .unwrap_or_else(|_| panic!("webook {args:?} did not finish within {CLI_LIMIT:?}"))
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "webook {args:?}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }
}

/// A CLI coordinator running in the background, its stderr read line by line (to kill it at a
/// stall point).
struct Background {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Background {
    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn webook");
        let lines = stderr_lines(&mut child);
        Self { child, lines }
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// The log line a coordinator writes at its stall point (`WEBOOK_DB_MOVE_STALL`).
const STALLS: &str = "the coordinator stalls here";

/// Waits until the coordinator whose log lines `next` yields stopped at its stall point — or,
/// with a binary without stall points, until the pause of the switch after `epoch` is seen in
/// the control row (it is killed then).
async fn stalled(
    what: &str,
    mut next: impl FnMut() -> Vec<String>,
    seen: &mut Vec<String>,
    watch: &Watch,
    epoch: i64,
) {
    let limit = Instant::now() + WAIT_LIMIT;
    loop {
        seen.extend(next());
        if other_binary() {
            let row = watch.row().await;
            if row.epoch > epoch && row.stage == "pause" {
                return;
            }
            assert!(
                row.epoch == epoch,
                "{what}: the switch ended ({row:?}) before its pause was seen; log:\n{}",
                seen.join("\n")
            );
        } else if seen.iter().any(|line| line.contains(STALLS)) {
            return;
        }
        assert!(
            Instant::now() < limit,
            "{what}: never reached its stall point; log:\n{}",
            seen.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(if other_binary() { 2 } else { 20 })).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The move's state, read from the databases (it is what `db-move status` shows; read directly,
// it is seen while every instance is paused).

/// The control row.
#[derive(Debug, Clone, Default)]
struct MoveRow {
    phase: String,
    epoch: i64,
    stage: String,
    coordinator: String,
    paused_at: i64,
    outcome: String,
}

impl MoveRow {
    fn switching(&self) -> bool {
        matches!(self.stage.as_str(), "pause" | "aborting" | "flip")
    }

    /// The pause the coordinator measured (`paused N ms` in the outcome of a flip).
    fn pause_ms(&self) -> Option<i64> {
        let rest = self.outcome.split("paused ").nth(1)?;
        rest.split(" ms").next()?.parse().ok()
    }
}

/// The source and destination, as the test reads them.
struct Watch {
    source: AnyPool,
    destination: AnyPool,
}

type SwitchColumns = (String, i64, String, String, i64, String);

impl Watch {
    async fn new(site: &Site) -> Self {
        Self {
            source: pool(&site.source_url()).await,
            destination: pool(&site.destination.url).await,
        }
    }

    async fn row(&self) -> MoveRow {
        let full: Result<Option<SwitchColumns>, _> = sqlx::query_as(
            "SELECT phase, epoch, stage, coordinator, paused_at, outcome FROM db_move \
             WHERE id = 1",
        )
        .fetch_optional(&self.source)
        .await;
        match full {
            Ok(Some((phase, epoch, stage, coordinator, paused_at, outcome))) => MoveRow {
                phase,
                epoch,
                stage,
                coordinator,
                paused_at,
                outcome,
            },
            Ok(None) => MoveRow::default(),
            // A binary without the switch's task columns.
            Err(_) => {
                let (phase, epoch, stage): (String, i64, String) =
                    sqlx::query_as("SELECT phase, epoch, stage FROM db_move WHERE id = 1")
                        .fetch_one(&self.source)
                        .await
                        .unwrap();
                MoveRow {
                    phase,
                    epoch,
                    stage,
                    ..MoveRow::default()
                }
            }
        }
    }

    /// Waits for the switch after `epoch` to begin; its row.
    async fn begun(&self, epoch: i64) -> MoveRow {
        wait_until("the switch to begin", || async {
            self.row().await.epoch > epoch
        })
        .await;
        self.row().await
    }

    /// Waits until the switch of `epoch` has ended (no human acts meanwhile); its row.
    async fn ended(&self, epoch: i64) -> MoveRow {
        let limit = Instant::now() + WAIT_LIMIT;
        loop {
            let row = self.row().await;
            if row.epoch >= epoch && !row.switching() {
                return row;
            }
            assert!(
                Instant::now() < limit,
                "the switch of epoch {epoch} did not end by itself within {WAIT_LIMIT:?}: {row:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// (source fence closed, destination fence closed); `None` without fences (older binary).
    async fn fences(&self) -> Option<(bool, bool)> {
        let closed = |pool: AnyPool| async move {
            sqlx::query_scalar::<_, i64>("SELECT closed FROM db_move_fence WHERE id = 1")
                .fetch_one(&pool)
                .await
                .ok()
                .map(|closed| closed == 1)
        };
        Some((
            closed(self.source.clone()).await?,
            closed(self.destination.clone()).await?,
        ))
    }

    /// The name of the serving instance with process id `pid` (its sign of life).
    async fn instance(&self, pid: u32) -> String {
        let pattern = format!("%-{pid}-%");
        let find = || async {
            sqlx::query_scalar::<_, String>(
                "SELECT instance FROM db_move_acks WHERE instance LIKE $1",
            )
            .bind(&pattern)
            .fetch_optional(&self.source)
            .await
            .ok()
            .flatten()
        };
        wait_until(&format!("a sign of life of process {pid}"), || async {
            find().await.is_some()
        })
        .await;
        find().await.unwrap()
    }

    /// Waits until each of `instances` has seen `epoch` (acknowledged its pause, or more), or
    /// the switch has ended.
    async fn acknowledged(&self, instances: &[String], epoch: i64) {
        wait_until("the instances to acknowledge the pause", || async {
            let seen: Vec<(String, i64)> =
                sqlx::query_as("SELECT instance, epoch FROM db_move_acks")
                    .fetch_all(&self.source)
                    .await
                    .unwrap();
            let all = instances.iter().all(|instance| {
                seen.iter()
                    .any(|(name, seen)| name == instance && *seen >= epoch)
            });
            all || !self.row().await.switching()
        })
        .await;
    }

    /// Waits until the sign of life of dead `instance` is too old for it to be a member.
    async fn gone(&self, instance: &str) {
        wait_until(
            &format!("{instance} to drop out of the members"),
            || async {
                let seen: i64 =
                    sqlx::query_scalar("SELECT seen_at FROM db_move_acks WHERE instance = $1")
                        .bind(instance)
                        .fetch_optional(&self.source)
                        .await
                        .unwrap()
                        .unwrap_or(0);
                seen < wall_ms() - MEMBER_WITHIN_MS
            },
        )
        .await;
    }

    /// Waits until neither change log holds an entry (the load stopped).
    async fn drained(&self) {
        wait_until("the change logs to drain", || async {
            let mut empty = true;
            for side in [&self.source, &self.destination] {
                let pending: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM db_move_changes")
                    .fetch_one(side)
                    .await
                    .unwrap();
                empty &= pending == 0;
            }
            empty
        })
        .await;
    }

    /// The side that serves in `phase`.
    fn serving(&self, phase: &str) -> &AnyPool {
        if matches!(phase, "DstFirst" | "DstOnly") {
            &self.destination
        } else {
            &self.source
        }
    }
}

/// The expected end of a broken switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Aborted,
    Completed,
}

/// Asserts how the switch of `row` ended (`from` → `target`) and where the fences are.
async fn assert_ended(watch: &Watch, row: &MoveRow, end: End, from: &str, target: &str) {
    let fences = watch.fences().await;
    match end {
        End::Aborted => {
            assert_eq!(
                (row.stage.as_str(), row.phase.as_str()),
                ("abort", from),
                "{row:?}"
            );
        }
        End::Completed => {
            assert_eq!(
                (row.stage.as_str(), row.phase.as_str()),
                ("", target),
                "{row:?}"
            );
        }
    }
    // The old authority's fence stays closed after the flip; the authority's is open.
    let destination_authority = matches!(row.phase.as_str(), "DstFirst" | "DstOnly");
    assert_eq!(
        fences,
        Some((destination_authority, !destination_authority)),
        "fences (source closed, destination closed) after {row:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The HTTP API and the load.

/// The HTTP API of one instance (`index` names it in the ledger).
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    base: String,
    index: usize,
}

impl Api {
    fn of(server: &Server, index: usize) -> Self {
        Self {
            client: reqwest::Client::builder()
                .user_agent(UA)
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            base: server.url(""),
            index,
        }
    }

    /// The JSON answer of `method path`; `Err` when no JSON answer came.
    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|err| err.to_string())?;
        let status = response.status();
        let text = response.text().await.map_err(|err| err.to_string())?;
        serde_json::from_str(&text).map_err(|_| format!("HTTP {status}: {text}"))
    }

    /// `data` of a code-0 answer to `method path`.
    async fn ok(&self, method: Method, path: &str, token: Option<&str>, body: Value) -> Value {
        let body = (method == Method::POST).then_some(body);
        let answer = self
            .send(method.clone(), path, token, body.as_ref())
            .await
            .unwrap_or_else(|err| panic!("{method} {path}: {err}"));
        assert_eq!(answer["code"], 0, "{method} {path}: {answer}");
        answer["data"].clone()
    }

    async fn log_in(&self, email: &str) -> String {
        let response = self
            .client
            .post(format!("{}/users/login", self.base))
            .json(&json!({"email": email, "password": PASSWORD}))
            .send()
            .await
            .unwrap();
        response.headers()["x-jwt-token"]
            .to_str()
            .unwrap()
            .to_owned()
    }

    /// The move's status as the admin API answers it.
    async fn status(&self, admin: &User) -> Value {
        self.ok(Method::GET, "/admin/db-move", Some(&admin.token), json!({}))
            .await
    }

    /// Waits until the move's background task `kind` is done.
    async fn task_done(&self, admin: &User, kind: &str) {
        wait_until(&format!("the move's {kind} to finish"), || async {
            let status = self.status(admin).await;
            assert_ne!(status["task"]["state"], "failed", "{kind}: {status}");
            status["task"]["kind"] == kind && status["task"]["state"] == "done"
        })
        .await;
    }
}

/// A signed-up, logged-in user.
struct User {
    email: String,
    uid: i64,
    token: String,
}

async fn sign_up(api: &Api, email: &str) -> User {
    api.ok(
        Method::POST,
        "/users/signup",
        None,
        json!({"email": email, "password": PASSWORD, "confirmPassword": PASSWORD}),
    )
    .await;
    let token = api.log_in(email).await;
    let profile = api
        .send(Method::GET, "/users/profile", Some(&token), None)
        .await
        .unwrap();
    User {
        email: email.to_owned(),
        uid: profile["Id"].as_i64().unwrap(),
        token,
    }
}

/// An admin (granted with the CLI) and four users.
async fn people(api: &Api, site: &Site) -> (User, Arc<Vec<User>>) {
    let admin = sign_up(api, "admin@chaos.test").await;
    let granted = site.cli(&["admin", "grant", &admin.email]).await;
    assert!(granted.contains("is an admin"), "{granted}");
    let mut users = Vec::new();
    for n in 0..4 {
        users.push(sign_up(api, &format!("user{n}@chaos.test")).await);
    }
    (admin, Arc::new(users))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Comment,
    Like,
    Publish,
}

/// What a write was answered.
#[derive(Debug, Clone)]
enum Answer {
    /// Code 0, with the new row's id (0 for a like).
    Acked(i64),
    /// Any other code.
    Refused(String),
    /// No answer (the instance was killed).
    Unanswered(String),
}

/// One write and its answer.
#[derive(Debug, Clone)]
struct Write {
    kind: Kind,
    instance: usize,
    /// Wall-clock ms when sent, and how long the answer took.
    sent: i64,
    took: i64,
    /// The comment's content, the article's title, or the liked article.
    label: String,
    article: i64,
    uid: i64,
    answer: Answer,
}

/// Every write and its answer; the articles there are to like and comment on.
#[derive(Default)]
struct Ledger {
    writes: Vec<Write>,
    articles: Vec<i64>,
    likes_tried: BTreeSet<(i64, i64)>,
}

type Shared = Arc<Mutex<Ledger>>;

impl Ledger {
    fn acked(&self) -> usize {
        self.writes
            .iter()
            .filter(|write| matches!(write.answer, Answer::Acked(_)))
            .count()
    }
}

/// Sends one write as `user` through `api` and records it.
async fn write(
    api: &Api,
    user: &User,
    ledger: &Shared,
    kind: Kind,
    article: i64,
    label: String,
) -> Answer {
    let (path, body) = match kind {
        Kind::Comment => (
            "/comments",
            json!({"biz": "article", "bizId": article, "content": label}),
        ),
        Kind::Like => ("/articles/pub/like", json!({"id": article, "like": true})),
        Kind::Publish => (
            "/articles/publish",
            json!({"title": label, "content": format!("<p>{label}</p>")}),
        ),
    };
    let sent = wall_ms();
    let clock = Instant::now();
    let answer = match api
        .send(Method::POST, path, Some(&user.token), Some(&body))
        .await
    {
        Ok(answer) if answer["code"] == 0 => Answer::Acked(answer["data"].as_i64().unwrap_or(0)),
        Ok(answer) => Answer::Refused(answer.to_string()),
        Err(err) => Answer::Unanswered(err),
    };
    let took = millis(clock.elapsed());
    let mut ledger = ledger.lock().unwrap();
    if let (Kind::Publish, Answer::Acked(id)) = (kind, &answer) {
        ledger.articles.push(*id);
    }
    ledger.writes.push(Write {
        kind,
        instance: api.index,
        sent,
        took,
        label,
        article,
        uid: user.uid,
        answer: answer.clone(),
    });
    answer
}

/// The instances the load is sent to (as behind a load balancer that drops a dead one).
#[derive(Clone, Default)]
struct Targets(Arc<Mutex<Vec<Api>>>);

impl Targets {
    fn add(&self, api: &Api) {
        self.0.lock().unwrap().push(api.clone());
    }

    fn remove(&self, index: usize) {
        self.0.lock().unwrap().retain(|api| api.index != index);
    }

    fn pick(&self, random: &mut Lcg) -> Api {
        let targets = self.0.lock().unwrap();
        targets[random.pick(targets.len())].clone()
    }
}

/// The load: one worker per user, each writing every [`LOAD_PAUSE`] — a fifth publishes, a
/// third likes (an article it has not liked yet), the rest comment — until stopped.
struct Load {
    stop: CancellationToken,
    workers: Vec<JoinHandle<()>>,
}

impl Load {
    fn start(targets: &Targets, users: &Arc<Vec<User>>, ledger: &Shared, tag: &str) -> Self {
        let stop = CancellationToken::new();
        let workers = (0..users.len())
            .map(|worker| {
                let (targets, users, ledger, stop) =
                    (targets.clone(), users.clone(), ledger.clone(), stop.clone());
                let tag = tag.to_owned();
                tokio::spawn(async move {
                    let user = &users[worker];
                    let mut random = Lcg(0x5eed + worker as u64);
                    for n in 0.. {
                        if stop.is_cancelled() {
                            break;
                        }
                        let api = targets.pick(&mut random);
                        let roll = random.below(100);
                        let (kind, article) = {
                            let mut ledger = ledger.lock().unwrap();
                            let article = ledger.articles[random.pick(ledger.articles.len())];
                            let kind = if roll < 20 {
                                Kind::Publish
                            } else if roll < 55 && ledger.likes_tried.insert((article, user.uid)) {
                                Kind::Like
                            } else {
                                Kind::Comment
                            };
                            (kind, article)
                        };
                        let label = match kind {
                            Kind::Publish => format!("{tag} p{worker}-{n}"),
                            Kind::Comment => format!("{tag} c{worker}-{n}"),
                            Kind::Like => format!("{tag} like {article}"),
                        };
                        write(&api, user, &ledger, kind, article, label).await;
                        tokio::select! {
                            () = tokio::time::sleep(LOAD_PAUSE) => {}
                            () = stop.cancelled() => break,
                        }
                    }
                })
            })
            .collect();
        Self { stop, workers }
    }

    async fn stop(self) {
        self.stop.cancel();
        for worker in self.workers {
            worker.await.unwrap();
        }
    }
}

/// Waits until `more` further writes were acknowledged.
async fn progress(ledger: &Shared, more: usize) {
    let from = ledger.lock().unwrap().acked();
    wait_until("the load to go on", || async {
        ledger.lock().unwrap().acked() >= from + more
    })
    .await;
}

/// Sends comments through each of `apis` (one after the other per instance, all instances at
/// once) until one is acknowledged; the latest wall-clock ms at which one of them was.
async fn writes_answered(apis: &[Api], user: &User, ledger: &Shared, tag: &str) -> i64 {
    let article = ledger.lock().unwrap().articles[0];
    let probes: Vec<_> = apis
        .iter()
        .map(|api| {
            let (api, ledger, token, uid) =
                (api.clone(), ledger.clone(), user.token.clone(), user.uid);
            let tag = tag.to_owned();
            tokio::spawn(async move {
                let user = User {
                    email: String::new(),
                    uid,
                    token,
                };
                let limit = Instant::now() + WAIT_LIMIT;
                for n in 0.. {
                    let label = format!("{tag} probe{}-{n}", api.index);
                    let answer = write(&api, &user, &ledger, Kind::Comment, article, label).await;
                    if matches!(answer, Answer::Acked(_)) {
                        return wall_ms();
                    }
                    assert!(
                        Instant::now() < limit,
                        "instance {} answered no write within {WAIT_LIMIT:?}: last {answer:?}",
                        api.index
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                unreachable!()
            })
        })
        .collect();
    let mut latest = 0;
    for probe in probes {
        latest = latest.max(probe.await.unwrap());
    }
    latest
}

/// One line of figures for the switch of `row`: how it ended, the pause the coordinator
/// measured, the longest write in flight between its pause and `until` (wall ms) on an instance
/// not in `disturbed`, and how long after the pause's start writes were answered again.
fn figures(
    label: &str,
    row: &MoveRow,
    ledger: &Shared,
    until: i64,
    disturbed: &[usize],
    answered_again: Option<i64>,
) -> String {
    let ledger = ledger.lock().unwrap();
    let from = row.paused_at;
    let during: Vec<&Write> = ledger
        .writes
        .iter()
        .filter(|write| write.sent < until && write.sent + write.took > from)
        .filter(|write| !disturbed.contains(&write.instance))
        .collect();
    let longest = during.iter().map(|write| write.took).max().unwrap_or(0);
    let refusals: Vec<&str> = during
        .iter()
        .filter_map(|write| match &write.answer {
            Answer::Refused(answer) => Some(answer.as_str()),
            _ => None,
        })
        .collect();
    let refused = match refusals.first() {
        Some(first) => format!("{} refused, e.g. {first}", refusals.len()),
        None => "none refused".to_owned(),
    };
    let ended = match row.stage.as_str() {
        "abort" => "aborted",
        "" => "flipped",
        other => other,
    };
    let line = format!(
        "db-move chaos {label}: {ended} to {} (epoch {}); pause {}; longest write {longest} ms \
         ({} writes in flight, {refused}); writes answered again {}; ended by {}: {}",
        row.phase,
        row.epoch,
        row.pause_ms()
            .map_or_else(|| "not measured".to_owned(), |ms| format!("{ms} ms")),
        during.len(),
        answered_again.map_or_else(
            || "(not probed)".to_owned(),
            |ms| format!("{ms} ms after the pause began")
        ),
        row.coordinator,
        row.outcome
    );
    eprintln!("{line}");
    line
}

// ---------------------------------------------------------------------------------------------
// What the serving side holds.

/// The rows the load writes: comments (id, content), articles and published articles (id,
/// title), likes (uid, article, status).
#[derive(Debug, PartialEq)]
struct Written {
    comments: Vec<(i64, String)>,
    articles: Vec<(i64, String)>,
    published: Vec<(i64, String)>,
    likes: Vec<(i64, i64, i64)>,
}

async fn written(pool: &AnyPool) -> Written {
    Written {
        comments: sqlx::query_as("SELECT id, content FROM comments ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap(),
        articles: sqlx::query_as("SELECT id, title FROM articles ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap(),
        published: sqlx::query_as("SELECT id, title FROM published_articles ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap(),
        likes: sqlx::query_as(
            "SELECT uid, biz_id, status FROM user_likes WHERE biz = 'article' ORDER BY uid, biz_id",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
    }
}

/// Asserts that the serving side holds every acknowledged write exactly once and no refused
/// one, and nothing labelled `tag` that was never sent; a summary.
async fn verify(serving: &AnyPool, ledger: &Shared, tag: &str) -> String {
    let rows = written(serving).await;
    let by_label = |rows: &[(i64, String)]| {
        let mut map: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (id, label) in rows {
            map.entry(label.clone()).or_default().push(*id);
        }
        map
    };
    let (comments, articles, published) = (
        by_label(&rows.comments),
        by_label(&rows.articles),
        by_label(&rows.published),
    );
    let likes: BTreeMap<(i64, i64), i64> = rows
        .likes
        .iter()
        .map(|(uid, article, status)| ((*uid, *article), *status))
        .collect();
    let ledger = ledger.lock().unwrap();
    let mut counts = BTreeMap::<&str, usize>::new();
    for write in &ledger.writes {
        let tables: Vec<(&str, &BTreeMap<String, Vec<i64>>)> = match write.kind {
            Kind::Comment => vec![("comments", &comments)],
            Kind::Publish => vec![("articles", &articles), ("published_articles", &published)],
            Kind::Like => Vec::new(),
        };
        match &write.answer {
            Answer::Acked(id) => {
                *counts.entry("acknowledged").or_default() += 1;
                for (table, rows) in &tables {
                    assert_eq!(
                        rows.get(&write.label),
                        Some(&vec![*id]),
                        "acknowledged {write:?}: not exactly once in {table}"
                    );
                }
                if write.kind == Kind::Like {
                    assert_eq!(
                        likes.get(&(write.uid, write.article)),
                        Some(&1),
                        "acknowledged {write:?}: not in user_likes"
                    );
                }
            }
            Answer::Refused(_) => {
                *counts.entry("refused").or_default() += 1;
                for (table, rows) in &tables {
                    assert!(
                        !rows.contains_key(&write.label),
                        "refused {write:?} is in {table}"
                    );
                }
                if write.kind == Kind::Like {
                    assert!(
                        !likes.contains_key(&(write.uid, write.article)),
                        "refused {write:?} is in user_likes"
                    );
                }
            }
            Answer::Unanswered(err) => {
                *counts.entry("unanswered").or_default() += 1;
                eprintln!(
                    "db-move chaos {tag}: unanswered {:?} {}: {err}",
                    write.kind, write.label
                );
            }
        }
    }
    // Nothing twice, nothing that was never sent.
    let sent: BTreeSet<&str> = ledger
        .writes
        .iter()
        .map(|write| write.label.as_str())
        .collect();
    for (table, rows) in [
        ("comments", &comments),
        ("articles", &articles),
        ("published_articles", &published),
    ] {
        for (label, ids) in rows.iter().filter(|(label, _)| label.starts_with(tag)) {
            assert_eq!(ids.len(), 1, "{table}: {label:?} {ids:?}");
            assert!(
                sent.contains(label.as_str()),
                "{table}: {label:?} never sent"
            );
        }
    }
    let kinds = |kind: Kind| {
        ledger
            .writes
            .iter()
            .filter(|write| write.kind == kind && matches!(write.answer, Answer::Acked(_)))
            .count()
    };
    format!(
        "{} writes acknowledged ({} comments, {} likes, {} publishes), each once on the serving \
         side; {} refused, none there; {} unanswered",
        counts.get("acknowledged").copied().unwrap_or(0),
        kinds(Kind::Comment),
        kinds(Kind::Like),
        kinds(Kind::Publish),
        counts.get("refused").copied().unwrap_or(0),
        counts.get("unanswered").copied().unwrap_or(0),
    )
}

/// Publishes one article per user, to like and comment on, through `api`.
async fn base_articles(api: &Api, users: &[User], ledger: &Shared, tag: &str) {
    for (n, user) in users.iter().enumerate() {
        let answer = write(
            api,
            user,
            ledger,
            Kind::Publish,
            0,
            format!("{tag} base {n}"),
        )
        .await;
        assert!(matches!(answer, Answer::Acked(_)), "{answer:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// 1 and 3: one embedded server, the CLI as the coordinator.

/// A switch run by the CLI to its end; its figures.
async fn cli_switch(site: &Site, watch: &Watch, ledger: &Shared, target: &str) -> String {
    let switched = site.cli(&["db-move", "switch", target]).await;
    assert!(
        switched.contains(&format!("switched to {target}")),
        "{switched}"
    );
    let row = watch.row().await;
    figures(
        &format!("cli switch to {target}"),
        &row,
        ledger,
        wall_ms(),
        &[],
        None,
    )
}

async fn embedded(source: Source, tag: &str, points: &[&str]) {
    let began = Instant::now();
    let site = Site::new(source, false).await;
    let server = site.start("site", None).await;
    let api = Api::of(&server, 0);
    let (admin, users) = people(&api, &site).await;
    let watch = Watch::new(&site).await;
    let ledger = Shared::default();
    base_articles(&api, &users, &ledger, tag).await;
    let targets = Targets::default();
    targets.add(&api);
    let load = Load::start(&targets, &users, &ledger, tag);
    progress(&ledger, 20).await;

    let started = site
        .cli(&["db-move", "start", "--destination", &site.destination.url])
        .await;
    assert!(started.contains("copied"), "{started}");
    // (An older binary signs its instances' lives only once a move exists.)
    let name = watch.instance(server.child.id()).await;
    cli_switch(&site, &watch, &ledger, "SrcFirst").await;
    progress(&ledger, 20).await;
    site.cli(&["db-move", "validate"]).await;
    site.cli(&["db-move", "fix"]).await;
    progress(&ledger, 20).await;

    for point in points {
        let before = watch.row().await;
        assert_eq!(before.phase, "SrcFirst", "{before:?}");
        let mut cli =
            Background::spawn(site.cli_command(&["db-move", "switch", "DstFirst"], Some(point)));
        let lines_of = &cli.lines;
        let mut seen = Vec::new();
        stalled(
            &format!("the CLI stalled at {point}"),
            || lines_of.try_iter().collect(),
            &mut seen,
            &watch,
            before.epoch,
        )
        .await;
        cli.kill();
        let row = watch.begun(before.epoch).await;
        watch
            .acknowledged(std::slice::from_ref(&name), row.epoch)
            .await;
        let answered = writes_answered(
            std::slice::from_ref(&api),
            &users[0],
            &ledger,
            &format!("{tag} {point}"),
        )
        .await;
        let row = watch.ended(row.epoch).await;
        let line = figures(
            &format!("cli killed at {point}"),
            &row,
            &ledger,
            wall_ms(),
            &[],
            Some(answered - row.paused_at),
        );
        let end = if *point == "flipped" {
            End::Completed
        } else {
            End::Aborted
        };
        assert_ended(&watch, &row, end, "SrcFirst", "DstFirst").await;
        assert!(
            row.outcome.contains("went away"),
            "ended by the server, not a human: {row:?}"
        );
        // The admin API says the same.
        let status = api.status(&admin).await;
        assert_eq!(
            (status["stage"].as_str(), status["phase"].as_str()),
            (Some(row.stage.as_str()), Some(row.phase.as_str())),
            "{status}"
        );
        let bound = millis(DEADLINE + LEASE + MARGIN);
        assert!(
            answered - row.paused_at <= bound,
            "killed at {point}: writes answered again {} ms after the pause began (bound {bound} \
             ms): {line}",
            answered - row.paused_at
        );
        progress(&ledger, 10).await;
    }
    if watch.row().await.phase == "SrcFirst" {
        cli_switch(&site, &watch, &ledger, "DstFirst").await;
    }
    progress(&ledger, 10).await;
    cli_switch(&site, &watch, &ledger, "DstOnly").await;
    progress(&ledger, 10).await;
    load.stop().await;
    let verified = verify(&watch.destination, &ledger, tag).await;
    eprintln!(
        "db-move chaos {tag}: {verified}; {:.1} s",
        began.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_to_postgresql_the_cli_coordinator_killed_at_every_stage() {
    let _serial = SERIAL.lock().await;
    embedded(
        Source::Sqlite,
        "sqlite",
        &["paused", "fenced", "drained", "flipped"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_to_postgresql_embedded_the_cli_killed_when_fenced() {
    let _serial = SERIAL.lock().await;
    embedded(Source::Postgres, "pg", &["fenced"]).await;
}

// ---------------------------------------------------------------------------------------------
// 2: three cluster instances.

/// Starts a switch to `target` through `api` in the background; its answer.
fn switch_through(api: &Api, admin: &User, target: &str) -> JoinHandle<Result<Value, String>> {
    let (api, token, body) = (api.clone(), admin.token.clone(), json!({"phase": target}));
    tokio::spawn(async move {
        api.send(
            Method::POST,
            "/admin/db-move/switch",
            Some(&token),
            Some(&body),
        )
        .await
    })
}

/// A clean switch through `api`; its figures.
async fn clean_switch(
    api: &Api,
    admin: &User,
    watch: &Watch,
    ledger: &Shared,
    target: &str,
) -> String {
    let answer = switch_through(api, admin, target).await.unwrap().unwrap();
    assert_eq!(answer["code"], 0, "{answer}");
    assert_eq!(answer["data"]["phase"], target, "{answer}");
    let row = watch.row().await;
    figures(
        &format!("clean switch to {target}"),
        &row,
        ledger,
        wall_ms(),
        &[],
        None,
    )
}

/// Asserts that writes were answered again within `bound` of the pause's start.
fn assert_answered_within(what: &str, answered: i64, row: &MoveRow, bound: Duration, line: &str) {
    let after = answered - row.paused_at;
    assert!(
        after <= millis(bound),
        "{what}: writes answered again {after} ms after the pause began (bound {} ms): {line}",
        millis(bound)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_cluster_instances_end_every_broken_switch() {
    let _serial = SERIAL.lock().await;
    let began = Instant::now();
    let tag = "cluster";
    let site = Site::new(Source::Postgres, true).await;
    // The first migrates the source; the others start beside it.
    let a = site.start("a", None).await;
    let (b, c) = tokio::join!(site.start("b", None), site.start("c", None));
    let mut apis = vec![Api::of(&a, 0), Api::of(&b, 1), Api::of(&c, 2)];
    let (admin, users) = people(&apis[0], &site).await;
    let watch = Watch::new(&site).await;
    let ledger = Shared::default();
    base_articles(&apis[0], &users, &ledger, tag).await;
    let targets = Targets::default();
    for api in &apis {
        targets.add(api);
    }
    let load = Load::start(&targets, &users, &ledger, tag);
    progress(&ledger, 20).await;

    apis[0]
        .ok(
            Method::POST,
            "/admin/db-move/start",
            Some(&admin.token),
            json!({"destination": site.destination.url}),
        )
        .await;
    apis[0].task_done(&admin, "copy").await;
    // (An older binary signs its instances' lives only once a move exists.)
    let mut names = Vec::new();
    for server in [&a, &b, &c] {
        names.push(watch.instance(server.child.id()).await);
    }
    clean_switch(&apis[1], &admin, &watch, &ledger, "SrcFirst").await;
    apis[2]
        .ok(
            Method::POST,
            "/admin/db-move/validate",
            Some(&admin.token),
            json!({}),
        )
        .await;
    apis[2].task_done(&admin, "validate").await;
    apis[2]
        .ok(
            Method::POST,
            "/admin/db-move/fix",
            Some(&admin.token),
            json!({}),
        )
        .await;
    apis[2].task_done(&admin, "fix").await;
    progress(&ledger, 20).await;

    // (d) A transaction on the source, outside every instance, open across the pause: it
    // updates an article no load writes to, and commits after 10 s whatever happens meanwhile.
    let held_article = apis[0]
        .ok(
            Method::POST,
            "/articles/publish",
            Some(&users[0].token),
            json!({"title": "to be held", "content": "<p>held</p>"}),
        )
        .await
        .as_i64()
        .unwrap();
    let held_title = "held across the pause";
    let direct = pool(&site.source_url()).await;
    let mut long = direct.begin().await.unwrap();
    sqlx::query("UPDATE articles SET title = $1 WHERE id = $2")
        .bind(held_title)
        .bind(held_article)
        .execute(&mut *long)
        .await
        .unwrap();
    let committed = tokio::spawn(async move {
        tokio::time::sleep(LONG_TRANSACTION).await;
        long.commit().await.unwrap();
        wall_ms()
    });
    let before = watch.row().await;
    let switching = switch_through(&apis[0], &admin, "DstFirst");
    let row = watch.begun(before.epoch).await;
    watch.acknowledged(&names, row.epoch).await;
    let answered = writes_answered(&apis, &users[0], &ledger, &format!("{tag} d")).await;
    let answer = switching.await.unwrap().unwrap();
    let row = watch.ended(row.epoch).await;
    let ended = wall_ms();
    let committed = committed.await.unwrap();
    eprintln!(
        "db-move chaos (d): the switch ended {} ms and the transaction committed {} ms after \
         the pause began",
        ended - row.paused_at,
        committed - row.paused_at
    );
    let line = figures(
        "(d) a 10 s transaction across the pause",
        &row,
        &ledger,
        wall_ms(),
        &[],
        Some(answered - row.paused_at),
    );
    assert_ne!(answer["code"], 0, "the switch was refused: {answer}");
    assert!(row.outcome.contains("fence"), "{row:?}");
    assert_ended(&watch, &row, End::Aborted, "SrcFirst", "DstFirst").await;
    wait_until("the held update on both sides", || async {
        let mut both = true;
        for side in [&watch.source, &watch.destination] {
            let title: String = sqlx::query_scalar("SELECT title FROM articles WHERE id = $1")
                .bind(held_article)
                .fetch_one(side)
                .await
                .unwrap();
            both &= title == held_title;
        }
        both
    })
    .await;
    assert_answered_within("(d)", answered, &row, DEADLINE + MARGIN, &line);
    progress(&ledger, 20).await;

    // (b) An instance stopped before the pause cannot acknowledge it.
    targets.remove(2);
    c.signal("STOP");
    let before = watch.row().await;
    let switching = switch_through(&apis[0], &admin, "DstFirst");
    let row = watch.begun(before.epoch).await;
    watch.acknowledged(&names[..2], row.epoch).await;
    let answered = writes_answered(&apis[..2], &users[1], &ledger, &format!("{tag} b")).await;
    let answer = switching.await.unwrap().unwrap();
    let row = watch.ended(row.epoch).await;
    let line = figures(
        "(b) an instance SIGSTOPped",
        &row,
        &ledger,
        wall_ms(),
        &[2],
        Some(answered - row.paused_at),
    );
    assert_ne!(answer["code"], 0, "{answer}");
    assert!(
        row.outcome.contains(&names[2]) && row.outcome.contains("did not pause"),
        "{row:?}"
    );
    assert_ended(&watch, &row, End::Aborted, "SrcFirst", "DstFirst").await;
    assert_answered_within("(b)", answered, &row, DEADLINE + MARGIN, &line);
    c.signal("CONT");
    let resumed = Instant::now();
    writes_answered(&apis[2..], &users[2], &ledger, &format!("{tag} b-cont")).await;
    eprintln!(
        "db-move chaos (b): the stopped instance answered a write {} ms after SIGCONT",
        resumed.elapsed().as_millis()
    );
    targets.add(&apis[2]);
    progress(&ledger, 20).await;

    // (e) + (a) A coordinator hung at `acknowledged` (alive, its lease renewed only up to its
    // cutoff) while a new instance starts: the newcomer waits for the outcome.
    let hung = site.start("hung", Some("acknowledged")).await;
    let hung_name = watch.instance(hung.child.id()).await;
    let hung_api = Api::of(&hung, 9);
    let before = watch.row().await;
    let hanging = switch_through(&hung_api, &admin, "DstFirst");
    let mut seen = Vec::new();
    stalled(
        "the hung coordinator",
        || hung.new_log_lines(),
        &mut seen,
        &watch,
        before.epoch,
    )
    .await;
    let row = watch.begun(before.epoch).await;
    let newcomer = {
        let command = site.command("e");
        tokio::task::spawn_blocking(move || Server::start(command))
    };
    watch.acknowledged(&names, row.epoch).await;
    let answered = writes_answered(&apis, &users[3], &ledger, &format!("{tag} e")).await;
    let e = newcomer.await.unwrap();
    let when_listening = watch.row().await;
    assert!(
        when_listening.epoch == row.epoch && !when_listening.switching(),
        "the new instance listened before the switch ended: {when_listening:?}"
    );
    let waited = e.startup_lines().iter().any(|line| {
        line.contains("waiting for the switch in progress")
            || line.contains("ended a switch at start")
    });
    assert!(
        waited,
        "the new instance did not start during the switch; its log:\n{}",
        e.startup_lines().join("\n")
    );
    let row = watch.ended(row.epoch).await;
    let line = figures(
        "(e)+(a) coordinator hung at acknowledged, an instance started meanwhile",
        &row,
        &ledger,
        wall_ms(),
        &[],
        Some(answered - row.paused_at),
    );
    assert_ended(&watch, &row, End::Aborted, "SrcFirst", "DstFirst").await;
    assert!(
        row.outcome.contains("went away") && row.outcome.contains(&hung_name),
        "{row:?}"
    );
    assert_answered_within("(e)", answered, &row, DEADLINE + LEASE + MARGIN, &line);
    hanging.abort();
    apis.push(Api::of(&e, 3));
    names.push(watch.instance(e.child.id()).await);
    names.push(hung_name);
    targets.add(&apis[3]);
    progress(&ledger, 20).await;

    // (a) Coordinators killed at `fenced` (the others abort and reopen the fence) and at
    // `flipped` (the others complete it).
    let fenced = site.start("fenced", Some("fenced")).await;
    let fenced_name = watch.instance(fenced.child.id()).await;
    let flipped = site.start("flipped", Some("flipped")).await;
    let flipped_name = watch.instance(flipped.child.id()).await;
    for (coordinator, coordinator_name, point, end) in [
        (fenced, fenced_name, "fenced", End::Aborted),
        (flipped, flipped_name, "flipped", End::Completed),
    ] {
        let before = watch.row().await;
        let running = switch_through(&Api::of(&coordinator, 8), &admin, "DstFirst");
        let mut seen = Vec::new();
        stalled(
            &format!("the coordinator at {point}"),
            || coordinator.new_log_lines(),
            &mut seen,
            &watch,
            before.epoch,
        )
        .await;
        coordinator.signal("KILL");
        drop(coordinator);
        let row = watch.begun(before.epoch).await;
        watch.acknowledged(&names, row.epoch).await;
        let answered = writes_answered(&apis, &users[0], &ledger, &format!("{tag} {point}")).await;
        let row = watch.ended(row.epoch).await;
        let line = figures(
            &format!("(a) coordinator SIGKILLed at {point}"),
            &row,
            &ledger,
            wall_ms(),
            &[],
            Some(answered - row.paused_at),
        );
        assert!(running.await.unwrap().is_err(), "no answer from the killed");
        assert_ended(&watch, &row, end, "SrcFirst", "DstFirst").await;
        assert!(
            row.outcome.contains("went away") && row.outcome.contains(&coordinator_name),
            "{row:?}"
        );
        assert_answered_within(
            &format!("(a) at {point}"),
            answered,
            &row,
            DEADLINE + LEASE + MARGIN,
            &line,
        );
        progress(&ledger, 20).await;
        // Until then the dead coordinator is a member every switch would wait for.
        watch.gone(&coordinator_name).await;
    }

    // (c) An instance killed right after acknowledging the pause of a switch back to SrcFirst.
    let before = watch.row().await;
    assert_eq!(before.phase, "DstFirst");
    let switching = switch_through(&apis[0], &admin, "SrcFirst");
    let limit = Instant::now() + WAIT_LIMIT;
    loop {
        let acked: Option<(i64, String)> =
            sqlx::query_as("SELECT epoch, stage FROM db_move_acks WHERE instance = $1")
                .bind(&names[2])
                .fetch_optional(&watch.source)
                .await
                .unwrap();
        if acked.is_some_and(|(epoch, _)| epoch > before.epoch) {
            break;
        }
        assert!(Instant::now() < limit, "instance c never acknowledged");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    targets.remove(2);
    c.signal("KILL");
    drop(c);
    let stage_at_kill = watch.row().await;
    let healthy = [apis[0].clone(), apis[1].clone(), apis[3].clone()];
    let healthy_names = [names[0].clone(), names[1].clone(), names[3].clone()];
    watch
        .acknowledged(&healthy_names, stage_at_kill.epoch)
        .await;
    let answered = writes_answered(&healthy, &users[1], &ledger, &format!("{tag} c")).await;
    let answer = switching.await.unwrap().unwrap();
    let row = watch.ended(stage_at_kill.epoch).await;
    let line = figures(
        &format!(
            "(c) an instance SIGKILLed after acknowledging (stage {:?} then)",
            stage_at_kill.stage
        ),
        &row,
        &ledger,
        wall_ms(),
        &[2],
        Some(answered - row.paused_at),
    );
    let end = if row.stage == "abort" {
        End::Aborted
    } else {
        End::Completed
    };
    assert_eq!(answer["code"] == 0, end == End::Completed, "{answer}");
    assert_ended(&watch, &row, end, "DstFirst", "SrcFirst").await;
    assert_answered_within("(c)", answered, &row, DEADLINE + MARGIN, &line);
    progress(&ledger, 20).await;
    watch.gone(&names[2]).await;

    // A last, clean switch with the instances left.
    let target = if row.phase == "SrcFirst" {
        "DstFirst"
    } else {
        "SrcFirst"
    };
    clean_switch(&apis[1], &admin, &watch, &ledger, target).await;
    progress(&ledger, 20).await;
    load.stop().await;

    let row = watch.row().await;
    let verified = verify(watch.serving(&row.phase), &ledger, tag).await;
    watch.drained().await;
    let (source, destination) = (
        written(&watch.source).await,
        written(&watch.destination).await,
    );
    assert_eq!(source, destination, "the sides differ after the drain");
    eprintln!(
        "db-move chaos {tag}: {verified}; both sides equal; {:.1} s",
        began.elapsed().as_secs_f64()
    );
    drop((a, b, e, hung));
}
