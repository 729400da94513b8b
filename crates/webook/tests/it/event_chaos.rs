//! Chaos test of the event consumer groups (issue 44) on the real `webook` binary, in four
//! modes: {SQLite, PostgreSQL} × {in-process events, Redis Streams}. One body per mode, under
//! steady traffic (reads, likes, comments, publishes) while `/metrics` is sampled every 200 ms
//! for `event_group_lag_seconds` of every group:
//! 1. **poison** — the feed's `article_published` handler fails permanently for two articles
//!    (`/debug/event-faults`): every other (topic, group) keeps its lag under 2 s at p99 (search,
//!    which gathers for 250 ms and commits per batch, under 3 s), the
//!    other articles reach the follower's feed, exactly those two events are parked for the feed
//!    and `/readyz` says so; after the fix a replay (`POST /admin/events/replay`) puts each in
//!    the feed once and the parked rows become `replayed`;
//! 2. **outage** — the same handler fails transiently on every event: the others still keep
//!    their lag under 2 s while the feed's grows past it (and, in one mode, `/readyz` calls it
//!    stuck after 10 s), nothing is parked, and once the fault is gone the feed catches up;
//! 3. **kill -9** at a seeded moment of the traffic, then a restart on the same data: every
//!    acknowledged publish is in the follower's feed exactly once, every acknowledged like and
//!    comment is counted and shown once (the author's feed agrees with the counts), no read is
//!    counted twice, and the parked store holds no duplicate.
//!
//! With Redis Streams, search follows the streams without a consumer group, so it has no lag
//! gauge there (its state is `/readyz`'s `details.search`); in-process it is five more groups.
//!
//! Beside them, on SQLite embedded: removing the search index directory holds neither the feed
//! nor likes and comments, `/readyz` names search, and once the directory exists again search
//! recovers without a restart.
//!
//! `WEBOOK_TEST_BINARY` runs these tests against another build of `webook` (e.g. an older
//! commit's, to show what they catch); the default is this crate's binary.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use platform::{
    config::DatabaseKind,
    testing::{redis_url, wait_until, TestDb, WAIT_LIMIT},
};
use reqwest::Method;
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use webook::schema::MIGRATIONS;

use crate::common::{
    process::{binary_under_test as binary, webook_at, Server},
    Lcg, PASSWORD, UA,
};

const ACCESS_SECRET: &str = "event-chaos-access-secret-0123456789";
const REFRESH_SECRET: &str = "event-chaos-refresh-secret-0123456789";
/// The group and topic the faults are injected into.
const FEED: &str = "feed";
const PUBLISHED: &str = "article_published";
/// How often `/metrics` is sampled, and at most how many times per test.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
const MAX_SAMPLES: usize = 1500;
/// The bound on the other groups' lag (p99 of the samples of a phase). Held behind the feed's
/// failing handler a group would lag for the whole phase (10 s and more); under the whole
/// suite's load on two cores, one batch of `feed/comment_changed` took 1.004 s once (SQLite's
/// single writer shared with the traffic and the other groups), so the bound is 2 s.
const LAG_BOUND_SECONDS: f64 = 2.0;
/// The bound on the in-process search groups' lag. Search gathers events for 250 ms and then
/// commits its index (segment files and meta, each synced to disk) once per batch, so its lag is
/// that gather plus a commit: on the CI machine, under the whole suite's load, a commit took up
/// to 1.4 s (a run where `search/article_published` reached 1.7 s at p99 in the poison phase while
/// every other group stayed under 1 s). Held behind the feed's failing handler it would lag for
/// as long as the outage lasts (10 s and more), far past this bound.
const SEARCH_LAG_BOUND_SECONDS: f64 = 3.0;
/// Pages a listing may take before a test gives up on it (a loop that stops by itself).
const MAX_PAGES: usize = 100;

macro_rules! chaos_tests {
    ($($module:ident: $db:ident, $redis:expr, $seed:expr, $wait_stuck:expr;)+) => {
        $(
            mod $module {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn groups_survive_poison_outage_and_kill_minus_nine() {
                    super::chaos(super::Mode {
                        name: stringify!($module),
                        db: platform::config::DatabaseKind::$db,
                        redis: $redis,
                        seed: $seed,
                        wait_stuck: $wait_stuck,
                    })
                    .await
                }
            }
        )+
    };
}

// One mode also waits the 10 s after which `/readyz` reports the transiently failing feed stuck;
// the others stop at its lag gauge (CI time).
chaos_tests! {
    sqlite_in_process: Sqlite, false, 0x44_0001, true;
    postgres_in_process: Postgres, false, 0x44_0002, false;
    sqlite_redis: Sqlite, true, 0x44_0003, false;
    postgres_redis: Postgres, true, 0x44_0004, false;
}

#[derive(Debug, Clone, Copy)]
struct Mode {
    name: &'static str,
    db: DatabaseKind,
    redis: bool,
    /// Seeds the traffic's choices and the moment of the kill.
    seed: u64,
    /// Whether the outage phase waits for `/readyz` to call the feed stuck (10 s).
    wait_stuck: bool,
}

/// What the server runs on: a data dir, the database (SQLite in the data dir, or a fresh
/// PostgreSQL database) and, with Redis, a key prefix of its own on the test Redis.
struct Backend {
    mode: Mode,
    dir: tempfile::TempDir,
    postgres: Option<TestDb>,
    redis_prefix: String,
}

impl Backend {
    async fn new(mode: Mode) -> Self {
        let postgres = match mode.db {
            DatabaseKind::Postgres => Some(TestDb::postgres(&MIGRATIONS).await),
            DatabaseKind::Sqlite => None,
        };
        Self {
            mode,
            dir: tempfile::tempdir().unwrap(),
            postgres,
            redis_prefix: format!("chaos-{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// A `webook` command on this backend (the server's and the CLI's settings are the same).
    fn command(&self) -> Command {
        let mut command = webook_at(&binary(), self.dir.path());
        command
            .env("WEBOOK_DEBUG_ENDPOINTS", "true")
            // "listening on" is the app's info line; the rest only when it goes wrong.
            .env("WEBOOK_LOG", "warn,webook::app=info")
            .env("WEBOOK_AUTH_RATE_LIMIT", "100000")
            .env("WEBOOK_WRITE_RATE_LIMIT", "100000")
            .env("WEBOOK_COMMENT_RATE_LIMIT", "100000")
            .env("WEBOOK_SEARCH_RATE_LIMIT", "0")
            .env("WEBOOK_RANKING_SCHEDULE", "@yearly");
        if let Some(db) = &self.postgres {
            command.env("WEBOOK_DATABASE_URL", &db.url);
        }
        if self.mode.redis {
            command
                .env("WEBOOK_REDIS_URL", redis_url())
                .env("WEBOOK_REDIS_PREFIX", &self.redis_prefix)
                .env("WEBOOK_JWT_ACCESS_SECRET", ACCESS_SECRET)
                .env("WEBOOK_JWT_REFRESH_SECRET", REFRESH_SECRET);
        }
        command
    }

    fn start(&self) -> Server {
        Server::start(self.command())
    }

    /// Runs `webook ARGS…` on this backend; its stdout.
    fn cli(&self, args: &[&str]) -> String {
        let output = self.command().args(args).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "webook {args:?}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// Waits until a killed embedded server's hold on a PostgreSQL database is gone: the
    /// instance lock is a session advisory lock, released once PostgreSQL sees the connection
    /// closed. (SQLite's lock file is released by the kernel with the process; cluster mode
    /// takes no lock.)
    async fn wait_released(&self) {
        let Some(db) = self.postgres.as_ref().filter(|_| !self.mode.redis) else {
            return;
        };
        wait_until(
            "the killed server's advisory locks to be released",
            || async {
                let held: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
                 WHERE l.locktype = 'advisory' AND d.datname = current_database()",
                )
                .fetch_one(db.db.pool())
                .await
                .unwrap();
                held == 0
            },
        )
        .await;
    }
}

/// The HTTP API of one running server.
#[derive(Clone)]
struct Api {
    client: reqwest::Client,
    base: String,
}

impl Api {
    fn of(server: &Server) -> Self {
        Self {
            client: reqwest::Client::builder()
                .user_agent(UA)
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap(),
            base: server.url(""),
        }
    }

    /// The JSON answer of `method path`; `Err` when no JSON answer came (the server died).
    async fn try_send(
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

    async fn get(&self, path: &str, token: Option<&str>) -> Value {
        self.try_send(Method::GET, path, token, None)
            .await
            .unwrap_or_else(|err| panic!("GET {path}: {err}"))
    }

    async fn post(&self, path: &str, token: Option<&str>, body: Value) -> Value {
        self.try_send(Method::POST, path, token, Some(&body))
            .await
            .unwrap_or_else(|err| panic!("POST {path}: {err}"))
    }

    /// `data` of a successful (code 0) answer to `GET path`.
    async fn data(&self, path: &str, token: Option<&str>) -> Value {
        let answer = self.get(path, token).await;
        assert_eq!(answer["code"], 0, "GET {path}: {answer}");
        answer["data"].clone()
    }

    /// `data` of a successful (code 0) answer to `POST path`.
    async fn post_data(&self, path: &str, token: Option<&str>, body: Value) -> Value {
        let answer = self.post(path, token, body).await;
        assert_eq!(answer["code"], 0, "POST {path}: {answer}");
        answer["data"].clone()
    }

    /// Logs `email` in; the access token.
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

    async fn try_metrics(&self) -> Result<String, reqwest::Error> {
        self.client
            .get(format!("{}/metrics", self.base))
            .send()
            .await?
            .text()
            .await
    }

    async fn metrics(&self) -> String {
        self.try_metrics().await.unwrap()
    }

    /// `/readyz`'s `data.details.<name>` ("" when absent).
    async fn ready_detail(&self, name: &str) -> String {
        self.get("/readyz", None).await["data"]["details"][name]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    async fn set_faults(&self, faults: Value) {
        let count = faults.as_array().map_or(0, Vec::len);
        let set = self
            .post_data("/debug/event-faults", None, faults.clone())
            .await;
        assert_eq!(set, json!(count), "{faults}");
        assert_eq!(self.data("/debug/event-faults", None).await, faults);
    }
}

/// A signed-up, logged-in user.
struct User {
    email: String,
    uid: i64,
    token: String,
}

async fn user(api: &Api, name: &str) -> User {
    let email = format!("{name}@chaos.test");
    let signed = api
        .post(
            "/users/signup",
            None,
            json!({"email": email, "password": PASSWORD, "confirmPassword": PASSWORD}),
        )
        .await;
    assert_eq!(signed["code"], 0, "{signed}");
    let token = api.log_in(&email).await;
    let profile = api.get("/users/profile", Some(&token)).await;
    User {
        email,
        uid: profile["Id"].as_i64().unwrap(),
        token,
    }
}

/// Every series of metric `name` in a Prometheus text: (labels, value).
fn series(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let prefix = format!("{name}{{");
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (labels, value) = rest.rsplit_once("} ")?;
            let labels = labels
                .split(',')
                .filter_map(|pair| {
                    let (key, value) = pair.split_once('=')?;
                    Some((key.to_owned(), value.trim_matches('"').to_owned()))
                })
                .collect();
            Some((labels, value.trim().parse().ok()?))
        })
        .collect()
}

/// `event_group_lag_seconds` of every (topic, group) in `text`.
fn group_lags(text: &str) -> Vec<(String, String, f64)> {
    series(text, "event_group_lag_seconds")
        .into_iter()
        .map(|(labels, value)| (labels["topic"].clone(), labels["group"].clone(), value))
        .collect()
}

/// The value of gauge `name` for the feed's `article_published` group in `text`, if reported.
fn feed_published(text: &str, name: &str) -> Option<f64> {
    series(text, name)
        .into_iter()
        .find(|(labels, _)| labels["group"] == FEED && labels["topic"] == PUBLISHED)
        .map(|(_, value)| value)
}

/// Waits until the feed has handled at least `count` publications: a poll of `/metrics`, so
/// that the feed — which costs the server far more to page through, while the other groups'
/// lag is measured — is read once they are.
async fn feed_handled(api: &Api, count: usize) {
    wait_until("the feed to handle the publications", || async {
        feed_published(&api.metrics().await, "events_consumed_total")
            .is_some_and(|handled| handled >= count as f64)
    })
    .await;
}

/// The `p` quantile (nearest rank) of `sorted`.
fn quantile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index]
}

/// One sample of one group's lag gauge.
struct LagSample {
    phase: &'static str,
    topic: String,
    group: String,
    seconds: f64,
}

/// Samples every group's lag gauge every [`SAMPLE_EVERY`], each sample tagged with the phase
/// the test is in, until stopped (or [`MAX_SAMPLES`] rounds, or a scrape fails).
struct Lags {
    samples: Arc<Mutex<Vec<LagSample>>>,
    phase: Arc<Mutex<&'static str>>,
    stop: CancellationToken,
    task: JoinHandle<Result<usize, String>>,
}

impl Lags {
    fn start(api: Api) -> Self {
        let samples: Arc<Mutex<Vec<LagSample>>> = Arc::default();
        let phase = Arc::new(Mutex::new("setup"));
        let stop = CancellationToken::new();
        let task =
            tokio::spawn({
                let (samples, phase, stop) = (samples.clone(), phase.clone(), stop.clone());
                async move {
                    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
                    let mut rounds = 0;
                    while rounds < MAX_SAMPLES {
                        tokio::select! {
                            _ = ticks.tick() => {}
                            () = stop.cancelled() => break,
                        }
                        let text = match api.try_metrics().await {
                            Ok(text) => text,
                            Err(err) => return Err(format!("after {rounds} samples: {err}")),
                        };
                        let now = *phase.lock().unwrap();
                        samples
                            .lock()
                            .unwrap()
                            .extend(group_lags(&text).into_iter().map(
                                |(topic, group, seconds)| LagSample {
                                    phase: now,
                                    topic,
                                    group,
                                    seconds,
                                },
                            ));
                        rounds += 1;
                    }
                    Ok(rounds)
                }
            });
        Self {
            samples,
            phase,
            stop,
            task,
        }
    }

    fn enter(&self, phase: &'static str) {
        *self.phase.lock().unwrap() = phase;
    }

    /// Each (topic, group)'s samples in `phase`, sorted.
    fn of(&self, phase: &str) -> BTreeMap<(String, String), Vec<f64>> {
        let mut by_group: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
        for sample in self.samples.lock().unwrap().iter() {
            if sample.phase == phase {
                by_group
                    .entry((sample.topic.clone(), sample.group.clone()))
                    .or_default()
                    .push(sample.seconds);
            }
        }
        for values in by_group.values_mut() {
            values.sort_by(f64::total_cmp);
        }
        by_group
    }

    /// Asserts that in `phase` every (topic, group) but the feed's `article_published` kept its
    /// lag under its bound at p99; returns a line of figures (p50 and p99 over all of them, the
    /// worst group's p99 and max).
    fn assert_others_kept_up(&self, phase: &str, expected: &[(&str, &str)]) -> String {
        let groups = self.of(phase);
        for (group, topic) in expected {
            assert!(
                groups.contains_key(&((*topic).to_owned(), (*group).to_owned())),
                "{phase}: no lag samples of {group}/{topic}, only of {:?}",
                groups.keys().collect::<Vec<_>>()
            );
        }
        let mut all = Vec::new();
        let mut worst = (String::new(), 0.0_f64, 0.0_f64);
        for ((topic, group), values) in &groups {
            if group == FEED && topic == PUBLISHED {
                continue;
            }
            let p99 = quantile(values, 0.99);
            let bound = if group == "search" {
                SEARCH_LAG_BOUND_SECONDS
            } else {
                LAG_BOUND_SECONDS
            };
            assert!(
                p99 < bound,
                "{phase}: {group}/{topic} lagged {p99} s at p99, over {bound} s (samples {values:?})"
            );
            let max = values.last().copied().unwrap_or(0.0);
            if max >= worst.2 {
                worst = (format!("{group}/{topic}"), p99, max);
            }
            all.extend(values.iter().copied());
        }
        all.sort_by(f64::total_cmp);
        let feed = groups
            .get(&(PUBLISHED.to_owned(), FEED.to_owned()))
            .and_then(|values| values.last().copied())
            .unwrap_or(0.0);
        format!(
            "{phase}: {} groups, {} samples, others p50 {:.3} s p99 {:.3} s (worst {} p99 {:.3} \
             max {:.3}); feed/{PUBLISHED} max {feed:.3} s",
            groups.len(),
            all.len(),
            quantile(&all, 0.5),
            quantile(&all, 0.99),
            worst.0,
            worst.1,
            worst.2
        )
    }

    async fn finish(self) {
        self.stop.cancel();
        let rounds = self
            .task
            .await
            .unwrap()
            .unwrap_or_else(|err| panic!("a /metrics scrape failed {err}"));
        assert!(rounds > 0, "no lag sample taken");
    }
}

/// The consumer groups every mode reports a lag for: (group, topic).
const GROUPS: [(&str, &str); 10] = [
    (FEED, PUBLISHED),
    (FEED, "article_withdrawn"),
    (FEED, "like_changed"),
    (FEED, "follow_changed"),
    (FEED, "comment_changed"),
    ("read_counter", "interactive_read"),
    ("ranking", "article_withdrawn"),
    ("rewards", "payment_succeeded"),
    ("rewards", "payment_failed"),
    ("rewards", "payment_refunded"),
];

/// In-process, search is one more group per topic it follows (with Redis Streams it follows the
/// streams without a group, and reports on `/readyz` under `details.search` instead).
const SEARCH_GROUPS: [(&str, &str); 5] = [
    ("search", PUBLISHED),
    ("search", "article_withdrawn"),
    ("search", "like_changed"),
    ("search", "tags_changed"),
    ("search", "user_profile_changed"),
];

/// What the traffic and the test did, acknowledged (code 0) or not.
#[derive(Default)]
struct Ledger {
    /// Articles published with code 0, in order.
    published: Vec<i64>,
    /// Publishes that got no answer (the server was killed).
    publishes_in_doubt: usize,
    /// (article, liker) acknowledged, and tried.
    likes: BTreeSet<(i64, i64)>,
    likes_tried: BTreeSet<(i64, i64)>,
    /// (comment id, article) acknowledged; comments tried per article.
    comments: Vec<(i64, i64)>,
    comments_tried: BTreeMap<i64, usize>,
    /// Reader views asked for, per article.
    reads_tried: BTreeMap<i64, usize>,
    /// Answers other than code 0, and requests without an answer.
    refused: Vec<String>,
    unanswered: Vec<String>,
    ops: usize,
}

type Shared = Arc<Mutex<Ledger>>;

/// How one burst of traffic runs.
#[derive(Clone, Copy)]
struct Plan {
    workers: u64,
    pause: Duration,
    longest: Duration,
    max_ops: usize,
    /// Per cent of operations that publish (the rest: likes, comments and reads).
    publish_percent: u64,
}

const STEADY: Plan = Plan {
    workers: 2,
    pause: Duration::from_millis(75),
    longest: Duration::from_secs(20),
    max_ops: 1500,
    publish_percent: 15,
};

/// Traffic running in the background until stopped (or its plan's bounds).
struct Traffic {
    stop: CancellationToken,
    workers: Vec<JoinHandle<()>>,
    started: Instant,
}

impl Traffic {
    /// Stops it once it has run for at least `least`, and waits for its workers.
    async fn stop_after(self, least: Duration) {
        let left = least.saturating_sub(self.started.elapsed());
        tokio::time::sleep(left).await;
        self.stop.cancel();
        for worker in self.workers {
            worker.await.unwrap();
        }
    }

    /// Waits for the workers to stop by themselves (the server went away).
    async fn join(self) {
        for worker in self.workers {
            worker.await.unwrap();
        }
    }
}

/// The users and what they did.
struct World {
    author: Arc<User>,
    reader: User,
    fans: Arc<Vec<User>>,
    admin: User,
    ledger: Shared,
}

/// The outcome of one request for the ledger: acknowledged, refused, or no answer.
enum Outcome {
    Ok(Value),
    Refused,
    Unanswered,
}

fn record(ledger: &Shared, what: &str, answer: Result<Value, String>) -> Outcome {
    let mut ledger = ledger.lock().unwrap();
    ledger.ops += 1;
    match answer {
        Ok(answer) if answer["code"] == 0 => Outcome::Ok(answer["data"].clone()),
        Ok(answer) => {
            ledger.refused.push(format!("{what}: {answer}"));
            Outcome::Refused
        }
        Err(err) => {
            ledger.unanswered.push(format!("{what}: {err}"));
            Outcome::Unanswered
        }
    }
}

/// Publishes an article as `author` (a draft's id, or a new one), recording the outcome.
async fn publish(
    api: &Api,
    author: &User,
    ledger: &Shared,
    id: Option<i64>,
    title: &str,
) -> Outcome {
    let mut body = json!({"title": title, "content": format!("<p>{title}</p>")});
    if let Some(id) = id {
        body["id"] = json!(id);
    }
    let answer = api
        .try_send(
            Method::POST,
            "/articles/publish",
            Some(&author.token),
            Some(&body),
        )
        .await;
    let outcome = record(ledger, "publish", answer);
    let mut ledger = ledger.lock().unwrap();
    match &outcome {
        Outcome::Ok(data) => ledger.published.push(data.as_i64().unwrap()),
        Outcome::Unanswered => ledger.publishes_in_doubt += 1,
        Outcome::Refused => {}
    }
    outcome
}

/// Starts `plan.workers` workers of traffic: the author publishes, fans read, like (each
/// article at most once per fan) and comment, on the articles published so far. With
/// `until_unanswered` a worker stops at the first request that gets no answer.
fn traffic(api: &Api, world: &World, seed: u64, plan: Plan, until_unanswered: bool) -> Traffic {
    let stop = CancellationToken::new();
    let started = Instant::now();
    let workers = (0..plan.workers)
        .map(|worker| {
            let (api, stop) = (api.clone(), stop.clone());
            let (author, fans, ledger) = (
                world.author.clone(),
                world.fans.clone(),
                world.ledger.clone(),
            );
            tokio::spawn(async move {
                let mut random = Lcg(seed.wrapping_mul(31).wrapping_add(worker));
                for n in 0..plan.max_ops {
                    if stop.is_cancelled() || started.elapsed() >= plan.longest {
                        break;
                    }
                    let roll = random.below(100);
                    let fan = &fans[random.pick(fans.len())];
                    let (article, first_like) = {
                        let mut ledger = ledger.lock().unwrap();
                        let article = ledger.published[random.pick(ledger.published.len())];
                        // Each fan likes an article at most once; a second pick reads instead.
                        let like = (plan.publish_percent..plan.publish_percent + 25)
                            .contains(&roll)
                            && ledger.likes_tried.insert((article, fan.uid));
                        (article, like)
                    };
                    let outcome = if roll < plan.publish_percent {
                        let title = format!("traffic {seed:x}-{worker}-{n}");
                        publish(&api, &author, &ledger, None, &title).await
                    } else if first_like {
                        let body = json!({"id": article, "like": true});
                        let answer = api
                            .try_send(
                                Method::POST,
                                "/articles/pub/like",
                                Some(&fan.token),
                                Some(&body),
                            )
                            .await;
                        let outcome = record(&ledger, "like", answer);
                        if matches!(outcome, Outcome::Ok(_)) {
                            ledger.lock().unwrap().likes.insert((article, fan.uid));
                        }
                        outcome
                    } else if (plan.publish_percent + 25..plan.publish_percent + 45).contains(&roll)
                    {
                        *ledger
                            .lock()
                            .unwrap()
                            .comments_tried
                            .entry(article)
                            .or_default() += 1;
                        let body = json!({
                            "biz": "article",
                            "bizId": article,
                            "content": format!("comment {worker}-{n}"),
                        });
                        let answer = api
                            .try_send(Method::POST, "/comments", Some(&fan.token), Some(&body))
                            .await;
                        let outcome = record(&ledger, "comment", answer);
                        if let Outcome::Ok(id) = &outcome {
                            ledger
                                .lock()
                                .unwrap()
                                .comments
                                .push((id.as_i64().unwrap(), article));
                        }
                        outcome
                    } else {
                        *ledger
                            .lock()
                            .unwrap()
                            .reads_tried
                            .entry(article)
                            .or_default() += 1;
                        let answer = api
                            .try_send(
                                Method::GET,
                                &format!("/articles/pub/{article}"),
                                Some(&fan.token),
                                None,
                            )
                            .await;
                        record(&ledger, "read", answer)
                    };
                    if until_unanswered && matches!(outcome, Outcome::Unanswered) {
                        break;
                    }
                    tokio::select! {
                        () = tokio::time::sleep(plan.pause) => {}
                        () = stop.cancelled() => break,
                    }
                }
            })
        })
        .collect();
    Traffic {
        stop,
        workers,
        started,
    }
}

/// Every item of `user`'s feed, page by page.
async fn feed(api: &Api, user: &User) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let path = match &cursor {
            Some(cursor) => format!("/feed?limit=100&cursor={cursor}"),
            None => "/feed?limit=100".to_owned(),
        };
        let data = api.data(&path, Some(&user.token)).await;
        items.extend(data["items"].as_array().unwrap().iter().cloned());
        match data["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return items,
        }
    }
    panic!("{}'s feed is longer than {MAX_PAGES} pages", user.email)
}

/// How often each article appears as an `article` item of `user`'s feed.
async fn feed_articles(api: &Api, user: &User) -> BTreeMap<i64, usize> {
    let mut counts = BTreeMap::new();
    for item in feed(api, user).await {
        if item["type"] == "article" {
            *counts
                .entry(item["article"]["id"].as_i64().unwrap())
                .or_default() += 1;
        }
    }
    counts
}

/// Every published article of `author` (the database's truth), by id.
async fn published_articles(api: &Api, author: &User) -> BTreeMap<i64, Value> {
    let mut articles = BTreeMap::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut path = format!("/articles/pub?author={}&limit=100", author.uid);
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let data = api.data(&path, Some(&author.token)).await;
        for item in data["items"].as_array().unwrap() {
            articles.insert(item["id"].as_i64().unwrap(), item.clone());
        }
        match data["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return articles,
        }
    }
    panic!("more than {MAX_PAGES} pages of articles")
}

/// Every comment id on `article`, as listed (top-level comments; the traffic writes no
/// replies), and the listing's `total`.
async fn comments_on(api: &Api, user: &User, article: i64) -> (Vec<i64>, i64) {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut path = format!("/comments?biz=article&bizId={article}&limit=100");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let data = api.data(&path, Some(&user.token)).await;
        for item in data["items"].as_array().unwrap() {
            ids.push(item["id"].as_i64().unwrap());
        }
        match data["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (ids, data["total"].as_i64().unwrap()),
        }
    }
    panic!("more than {MAX_PAGES} pages of comments on {article}")
}

/// The parked events `query` (`group=…`, `state=…`, or "" for all) selects, as the admin API
/// lists them.
async fn parked(api: &Api, admin: &User, query: &str) -> Vec<Value> {
    api.data(
        &format!("/admin/events/parked?limit=500&{query}"),
        Some(&admin.token),
    )
    .await
    .as_array()
    .unwrap()
    .clone()
}

fn acknowledged(ledger: &Shared) -> Vec<i64> {
    ledger.lock().unwrap().published.clone()
}

async fn chaos(mode: Mode) {
    let began = Instant::now();
    let backend = Backend::new(mode).await;
    let server = backend.start();
    let api = Api::of(&server);

    // Users, a follow, two articles to read, like and comment on, and four drafts.
    let author = Arc::new(user(&api, "author").await);
    let reader = user(&api, "reader").await;
    let mut fans = Vec::new();
    for n in 0..4 {
        fans.push(user(&api, &format!("fan{n}")).await);
    }
    let admin = user(&api, "admin").await;
    let granted = backend.cli(&["admin", "grant", &admin.email]);
    assert!(granted.contains("is an admin"), "{granted}");
    api.post_data(
        "/follow/follow",
        Some(&reader.token),
        json!({"followee": author.uid}),
    )
    .await;
    let world = World {
        author: author.clone(),
        reader,
        fans: Arc::new(fans),
        admin,
        ledger: Shared::default(),
    };
    for n in 0..2 {
        let outcome = publish(&api, &author, &world.ledger, None, &format!("base {n}")).await;
        assert!(matches!(outcome, Outcome::Ok(_)));
    }
    let mut drafts = Vec::new();
    for n in 0..4 {
        let id = api
            .post_data(
                "/articles/edit",
                Some(&author.token),
                json!({"title": format!("draft {n}"), "content": "<p>draft</p>"}),
            )
            .await;
        drafts.push(id.as_i64().unwrap());
    }
    let poisoned = [drafts[0], drafts[1]];
    let lags = Lags::start(api.clone());
    let mut figures = Vec::new();
    let mut expected_groups = GROUPS.to_vec();
    if !mode.redis {
        expected_groups.extend(SEARCH_GROUPS);
    }

    // 0. Calm: the same traffic with no fault, for comparison — on a machine too busy for the
    // groups to keep under the bound at all, the test fails here, saying so.
    lags.enter("calm");
    traffic(&api, &world, mode.seed ^ 0xca1, STEADY, false)
        .stop_after(Duration::from_secs(3))
        .await;
    figures.push(lags.assert_others_kept_up("calm", &expected_groups));

    // 1. Poison: the feed cannot apply two articles' publications.
    lags.enter("poison");
    api.set_faults(json!([{
        "group": FEED,
        "topic": PUBLISHED,
        "keys": poisoned.map(|id| id.to_string()),
        "failure": "permanent",
    }]))
    .await;
    let running = traffic(&api, &world, mode.seed, STEADY, false);
    for (n, draft) in drafts.iter().enumerate() {
        let outcome = publish(
            &api,
            &author,
            &world.ledger,
            Some(*draft),
            &format!("draft {n}"),
        )
        .await;
        assert!(matches!(outcome, Outcome::Ok(_)));
    }
    let healthy: Vec<i64> = acknowledged(&world.ledger)
        .into_iter()
        .filter(|id| !poisoned.contains(id))
        .collect();
    feed_handled(&api, healthy.len()).await;
    wait_until(
        "the other articles to reach the follower's feed",
        || async {
            let shown = feed_articles(&api, &world.reader).await;
            healthy.iter().all(|id| shown.contains_key(id))
        },
    )
    .await;
    wait_until(
        "the two poisoned events to be parked for the feed",
        || async { parked(&api, &world.admin, "group=feed").await.len() >= 2 },
    )
    .await;
    let rows = parked(&api, &world.admin, "").await;
    let mut keys: Vec<String> = rows
        .iter()
        .map(|row| row["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    let mut expected: Vec<String> = poisoned.iter().map(i64::to_string).collect();
    expected.sort();
    assert_eq!(
        keys, expected,
        "exactly the poisoned events parked: {rows:?}"
    );
    for row in &rows {
        assert_eq!(
            (&row["group"], &row["topic"], &row["state"], &row["failure"]),
            (
                &json!(FEED),
                &json!(PUBLISHED),
                &json!("parked"),
                &json!("permanent")
            ),
            "{row}"
        );
        assert!(
            row["last_error"]
                .as_str()
                .unwrap()
                .contains("injected fault"),
            "{row}"
        );
    }
    // `/readyz` probes the database's writer: it is asked once the gauge set in the same pass
    // of the monitor says so, not polled meanwhile (SQLite has one writer, which the groups'
    // reads of the outbox share).
    wait_until("the parked gauge to count the two", || async {
        feed_published(&api.metrics().await, "events_parked") == Some(2.0)
    })
    .await;
    wait_until("/readyz to report the parked events", || async {
        api.ready_detail("events")
            .await
            .contains("feed/article_published 2 parked")
    })
    .await;
    running.stop_after(Duration::from_secs(3)).await;
    let shown = feed_articles(&api, &world.reader).await;
    for id in poisoned {
        assert!(!shown.contains_key(&id), "parked article {id} in the feed");
    }

    // The fix, then a replay of the group: each article once in the feed.
    api.set_faults(json!([])).await;
    let replayed = api
        .post_data(
            "/admin/events/replay",
            Some(&world.admin.token),
            json!({"group": FEED}),
        )
        .await;
    assert_eq!(replayed["count"], 2, "{replayed}");
    wait_until("both parked rows to be replayed", || async {
        parked(&api, &world.admin, "group=feed")
            .await
            .iter()
            .all(|row| row["state"] == "replayed")
    })
    .await;
    wait_until("the replayed articles to reach the feed", || async {
        let shown = feed_articles(&api, &world.reader).await;
        poisoned.iter().all(|id| shown.contains_key(id))
    })
    .await;
    let shown = feed_articles(&api, &world.reader).await;
    for id in poisoned {
        assert_eq!(shown.get(&id), Some(&1), "replayed article {id}: {shown:?}");
    }
    figures.push(lags.assert_others_kept_up("poison", &expected_groups));

    // 2. Outage: the feed fails transiently on every publication.
    lags.enter("outage");
    api.set_faults(json!([{
        "group": FEED, "topic": PUBLISHED, "keys": [], "failure": "transient",
    }]))
    .await;
    let running = traffic(&api, &world, mode.seed ^ 0xbad, STEADY, false);
    let mut held = Vec::new();
    for n in 0..2 {
        if let Outcome::Ok(id) =
            publish(&api, &author, &world.ledger, None, &format!("held {n}")).await
        {
            held.push(id.as_i64().unwrap());
        }
    }
    assert_eq!(held.len(), 2);
    wait_until("the feed's lag to grow past the bound", || async {
        feed_published(&api.metrics().await, "event_group_lag_seconds")
            .is_some_and(|lag| lag > LAG_BOUND_SECONDS)
    })
    .await;
    if mode.wait_stuck {
        // Reported stuck once it has failed for 10 s (the wait's limit is 20 s); it has failed
        // since it took its oldest event, so `/readyz` is asked once the lag says 10 s passed.
        wait_until("the feed's lag to pass 10 s", || async {
            feed_published(&api.metrics().await, "event_group_lag_seconds")
                .is_some_and(|lag| lag > 10.0)
        })
        .await;
        wait_until("/readyz to report the feed stuck", || async {
            api.ready_detail("events")
                .await
                .contains("feed/article_published stuck")
        })
        .await;
    }
    running.stop_after(Duration::from_secs(3)).await;
    let shown = feed_articles(&api, &world.reader).await;
    for id in &held {
        assert!(!shown.contains_key(id), "{id} passed a failing handler");
    }
    assert!(
        parked(&api, &world.admin, "state=parked").await.is_empty(),
        "transient failures are never parked"
    );
    let failed_transiently = series(&api.metrics().await, "events_failed_total")
        .into_iter()
        .filter(|(labels, _)| {
            labels["group"] == FEED
                && labels["topic"] == PUBLISHED
                && labels["failure"] == "transient"
        })
        .map(|(_, value)| value)
        .sum::<f64>();
    assert!(failed_transiently >= 1.0, "{failed_transiently}");
    api.set_faults(json!([])).await;
    let all = acknowledged(&world.ledger);
    feed_handled(&api, all.len()).await;
    wait_until("the feed to catch up after the outage", || async {
        let shown = feed_articles(&api, &world.reader).await;
        all.iter().all(|id| shown.contains_key(id))
    })
    .await;
    assert!(
        parked(&api, &world.admin, "state=parked").await.is_empty(),
        "nothing parked by the outage"
    );
    figures.push(lags.assert_others_kept_up("outage", &expected_groups));
    lags.finish().await;
    {
        let ledger = world.ledger.lock().unwrap();
        assert!(ledger.refused.is_empty(), "refused: {:?}", ledger.refused);
        assert!(
            ledger.unanswered.is_empty(),
            "unanswered: {:?}",
            ledger.unanswered
        );
    }

    // 3. kill -9 at a seeded moment of the traffic, then a restart on the same data.
    let mut random = Lcg(mode.seed);
    let kill_after = Duration::from_millis(300 + random.below(1500));
    let kill_plan = Plan {
        publish_percent: 30,
        ..STEADY
    };
    let ops_before = world.ledger.lock().unwrap().ops;
    let running = traffic(&api, &world, mode.seed ^ 0x919, kill_plan, true);
    tokio::time::sleep(kill_after).await;
    server.signal("KILL");
    drop(server);
    running.join().await;
    let (ops_during, unanswered) = {
        let ledger = world.ledger.lock().unwrap();
        (ledger.ops - ops_before, ledger.unanswered.len())
    };
    backend.wait_released().await;
    let server = backend.start();
    let api = Api::of(&server);
    let verified = verify_after_restart(&api, &world).await;
    wait_until("/readyz to report every group well", || async {
        api.ready_detail("events").await == "ok"
    })
    .await;

    let ledger = world.ledger.lock().unwrap();
    assert!(ledger.refused.is_empty(), "refused: {:?}", ledger.refused);
    println!(
        "event chaos {}: {} ops in all ({} publishes, {} likes, {} comments acknowledged); \
         killed after {} ms of traffic (seed {:#x}: {ops_during} ops, {unanswered} unanswered, \
         {} publishes in doubt); {verified}; {:.1} s",
        mode.name,
        ledger.ops,
        ledger.published.len(),
        ledger.likes.len(),
        ledger.comments.len(),
        kill_after.as_millis(),
        mode.seed,
        ledger.publishes_in_doubt,
        began.elapsed().as_secs_f64(),
    );
    for line in figures {
        println!("event chaos {}: {line}", mode.name);
    }
}

/// After the kill and restart: nothing acknowledged lost, nothing applied twice. Returns a
/// summary.
async fn verify_after_restart(api: &Api, world: &World) -> String {
    let (acked, likes, likes_tried, comments, comments_tried, reads_tried) = {
        let ledger = world.ledger.lock().unwrap();
        (
            ledger.published.clone(),
            ledger.likes.clone(),
            ledger.likes_tried.clone(),
            ledger.comments.clone(),
            ledger.comments_tried.clone(),
            ledger.reads_tried.clone(),
        )
    };
    // Every published article — each acknowledged one among them — in the follower's feed.
    let articles = published_articles(api, &world.author).await;
    for id in &acked {
        assert!(
            articles.contains_key(id),
            "acknowledged article {id} was lost"
        );
    }
    wait_until(
        "the follower's feed to hold every published article",
        || async {
            let shown = feed_articles(api, &world.reader).await;
            articles.keys().all(|id| shown.contains_key(id))
        },
    )
    .await;
    let shown = feed_articles(api, &world.reader).await;
    let twice: Vec<_> = shown.iter().filter(|(_, count)| **count != 1).collect();
    assert!(twice.is_empty(), "articles not once in the feed: {twice:?}");
    assert_eq!(
        shown.keys().collect::<Vec<_>>(),
        articles.keys().collect::<Vec<_>>(),
        "the feed shows exactly the published articles"
    );

    // Likes: each acknowledged one counted, nothing counted that was not tried; reads never
    // counted twice.
    let mut like_counts = BTreeMap::new();
    for (id, article) in &articles {
        let count = article["likeCnt"].as_i64().unwrap();
        let acked = likes.iter().filter(|(liked, _)| liked == id).count();
        let tried = likes_tried.iter().filter(|(liked, _)| liked == id).count();
        assert!(
            i64::try_from(acked).unwrap() <= count && count <= i64::try_from(tried).unwrap(),
            "article {id}: {count} likes counted, {acked} acknowledged, {tried} tried"
        );
        like_counts.insert(*id, count);
        let reads = article["readCnt"].as_i64().unwrap();
        let read_tries = reads_tried.get(id).copied().unwrap_or(0);
        assert!(
            reads <= i64::try_from(read_tries).unwrap(),
            "article {id}: {reads} reads counted of {read_tries} tried"
        );
    }
    // Comments: each acknowledged one listed once; the counts agree with the listing.
    let mut all_comments = BTreeSet::new();
    for (id, tried) in &comments_tried {
        let (listed, total) = comments_on(api, &world.author, *id).await;
        let unique: BTreeSet<i64> = listed.iter().copied().collect();
        assert_eq!(unique.len(), listed.len(), "article {id}: {listed:?}");
        assert_eq!(i64::try_from(listed.len()).unwrap(), total, "article {id}");
        assert_eq!(articles[id]["commentCnt"].as_i64(), Some(total), "{id}");
        assert!(
            listed.len() <= *tried,
            "article {id}: {listed:?} of {tried}"
        );
        for (comment, _) in comments.iter().filter(|(_, on)| on == id) {
            assert!(
                unique.contains(comment),
                "acknowledged comment {comment} on {id} was lost"
            );
        }
        all_comments.extend(unique);
    }
    // The author's feed agrees: one like item per counted like, one comment item per comment.
    wait_until(
        "the author's feed to show every like and comment",
        || async {
            let (liked, commented) = likes_and_comments(&feed(api, &world.author).await);
            liked
                == like_counts
                    .iter()
                    .filter(|(_, count)| **count > 0)
                    .map(|(id, count)| (*id, *count))
                    .collect::<BTreeMap<_, _>>()
                && commented == all_comments
        },
    )
    .await;
    let items = feed(api, &world.author).await;
    let mut seen = BTreeSet::new();
    for item in &items {
        let key = match item["type"].as_str().unwrap() {
            "like" => (
                "like",
                item["actor"]["id"].as_i64(),
                item["article"]["id"].as_i64(),
            ),
            "comment" => ("comment", item["comment"]["id"].as_i64(), None),
            other => (other, item["id"].as_i64(), None),
        };
        assert!(seen.insert(key), "twice in the author's feed: {item}");
    }

    // The parked store: the two replayed rows, nothing else, no duplicate.
    let rows = parked(api, &world.admin, "").await;
    let unique: BTreeSet<(String, String, String)> = rows
        .iter()
        .map(|row| {
            (
                row["group"].as_str().unwrap().to_owned(),
                row["topic"].as_str().unwrap().to_owned(),
                row["event_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(unique.len(), rows.len(), "duplicate parked rows: {rows:?}");
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter().all(|row| row["state"] == "replayed"),
        "{rows:?}"
    );
    let (liked, commented) = likes_and_comments(&items);
    format!(
        "after the restart {} articles each once in the feed, {} like and {} comment items \
         as counted",
        articles.len(),
        liked.values().sum::<i64>(),
        commented.len()
    )
}

/// The like items of a feed, counted per article, and the ids of its comment items.
fn likes_and_comments(items: &[Value]) -> (BTreeMap<i64, i64>, BTreeSet<i64>) {
    let mut liked: BTreeMap<i64, i64> = BTreeMap::new();
    let mut commented = BTreeSet::new();
    for item in items {
        match item["type"].as_str() {
            Some("like") => {
                *liked
                    .entry(item["article"]["id"].as_i64().unwrap())
                    .or_default() += 1;
            }
            Some("comment") => {
                commented.insert(item["comment"]["id"].as_i64().unwrap());
            }
            _ => {}
        }
    }
    (liked, commented)
}

/// Publishes a new article titled `title` as `author`; its id.
async fn publish_ok(api: &Api, author: &User, title: &str) -> i64 {
    let ledger = Shared::default();
    match publish(api, author, &ledger, None, title).await {
        Outcome::Ok(id) => id.as_i64().unwrap(),
        _ => {
            let ledger = ledger.lock().unwrap();
            panic!(
                "publish {title}: {:?} {:?}",
                ledger.refused, ledger.unanswered
            )
        }
    }
}

/// SQLite embedded: the search index directory removed under a running server. The feed and
/// likes keep flowing, `/readyz` names search, and once the directory exists again search
/// rebuilds and finds what was published meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_search_index_holds_neither_the_feed_nor_likes() {
    let backend = Backend::new(Mode {
        name: "search",
        db: DatabaseKind::Sqlite,
        redis: false,
        seed: 0x44_0005,
        wait_stuck: false,
    })
    .await;
    let server = backend.start();
    let api = Api::of(&server);
    server.search_ready().await;
    let author = user(&api, "author").await;
    let reader = user(&api, "reader").await;
    let fan = user(&api, "fan").await;
    api.post_data(
        "/follow/follow",
        Some(&reader.token),
        json!({"followee": author.uid}),
    )
    .await;
    let first = publish_ok(&api, &author, "before zebra").await;
    wait_until("the first article to be searchable", || async {
        server.search_article_ids("zebra").await == [first]
    })
    .await;

    // With the index directory gone: a like, a comment and a publish, each to reach a feed.
    let index = backend.dir.path().join("data/search");
    std::fs::remove_dir_all(&index).unwrap();
    let removed = Instant::now();
    api.post_data(
        "/articles/pub/like",
        Some(&fan.token),
        json!({"id": first, "like": true}),
    )
    .await;
    let comment = api
        .post_data(
            "/comments",
            Some(&fan.token),
            json!({"biz": "article", "bizId": first, "content": "still here"}),
        )
        .await;
    let second = publish_ok(&api, &author, "during zebra").await;
    // Polled until all three arrived or the wait's limit passed, to say which did not.
    let arrived = loop {
        let items = feed(&api, &author).await;
        let arrived = (
            feed_articles(&api, &reader).await.contains_key(&second),
            items.iter().any(|item| {
                item["type"] == "like" && item["actor"]["id"].as_i64() == Some(fan.uid)
            }),
            items
                .iter()
                .any(|item| item["type"] == "comment" && item["comment"]["id"] == comment),
        );
        if arrived == (true, true, true) || removed.elapsed() > WAIT_LIMIT {
            break arrived;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        arrived,
        (true, true, true),
        "with the search index gone, after {:.1} s: (the new article in the follower's feed, \
         the like in the author's feed, the comment in the author's feed)",
        removed.elapsed().as_secs_f64()
    );
    wait_until("/readyz to name search", || async {
        api.ready_detail("search").await.starts_with("degraded")
    })
    .await;

    // The directory back (the feeder waits for it, never creates it): search recovers.
    std::fs::create_dir(&index).unwrap();
    wait_until("search to be ready again", || async {
        api.ready_detail("search").await == "ready"
    })
    .await;
    let third = publish_ok(&api, &author, "after zebra").await;
    wait_until("every article to be searchable again", || async {
        let mut found = server.search_article_ids("zebra").await;
        found.sort_unstable();
        found == [first, second, third]
    })
    .await;
}
