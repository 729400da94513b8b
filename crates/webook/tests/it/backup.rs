//! Backups that restore, with the real binary: `webook backup` of a serving embedded instance
//! under a write load is the database at one instant — checked row by row, every table, against
//! the source rolled back to that instant through a change log the test keeps in it — and the
//! restored instance answers as the source does there (lists, articles, reader views with a
//! token of before the backup, comments, search after the rebuild); `webook restore` refuses a
//! data dir a server is using and a corrupt backup, touching nothing; the scheduled backup keeps
//! exactly `backup_keep`; and on PostgreSQL, `pg_dump` → `pg_restore` into a new database
//! serves the same answers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use platform::db::direct::rusqlite::{types::Value as Sql, Connection, OpenFlags};
use platform::testing::{wait_until, TestDb};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::common::{
    cli_refused, cli_succeeded,
    process::{webook, Server},
    PASSWORD, UA,
};

/// Words of the load's titles: each a query with a handful of hits.
const WORDS: &[&str] = &[
    "kestrel", "marmot", "osprey", "bittern", "pangolin", "quokka",
];

/// A `webook` command in `dir` (data dir `dir/data`), with the write and search limits off for
/// loads and comparisons.
fn command(dir: &Path) -> Command {
    let mut command = webook(dir);
    command
        .env("WEBOOK_WRITE_RATE_LIMIT", "0")
        .env("WEBOOK_COMMENT_RATE_LIMIT", "0")
        .env("WEBOOK_SEARCH_RATE_LIMIT", "0");
    command
}

/// Runs `webook args…` in `dir` to completion.
fn run(dir: &Path, args: &[&str]) -> Output {
    command(dir).args(args).output().unwrap()
}

fn database(dir: &Path) -> PathBuf {
    dir.join("data").join("webook.db")
}

/// The HTTP API of one server, as one user agent (tokens are bound to it).
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
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            base: server.url(""),
        }
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap())
    }

    /// `POST path` as `token`'s holder, expected to succeed; its `data`.
    async fn write(&self, path: &str, token: &str, body: Value) -> Value {
        let (status, answer) = self
            .send(Method::POST, path, Some(token), Some(&body))
            .await;
        assert_eq!(
            (status, answer["code"].as_i64()),
            (StatusCode::OK, Some(0)),
            "{path}: {answer}"
        );
        answer["data"].clone()
    }

    /// Signs `name@backup.test` up and logs in; its token and user id.
    async fn member(&self, name: &str) -> (String, i64) {
        let email = format!("{name}@backup.test");
        let (_, signed) = self
            .send(
                Method::POST,
                "/users/signup",
                None,
                Some(&json!({"email": email, "password": PASSWORD, "confirmPassword": PASSWORD})),
            )
            .await;
        assert_eq!(signed["code"], 0, "{signed}");
        let login = self
            .client
            .post(format!("{}/users/login", self.base))
            .json(&json!({"email": email, "password": PASSWORD}))
            .send()
            .await
            .unwrap();
        let token = login.headers()["x-jwt-token"].to_str().unwrap().to_owned();
        let (_, profile) = self
            .send(Method::GET, "/users/profile", Some(&token), None)
            .await;
        (token, profile["Id"].as_i64().unwrap())
    }

    /// Publishes an article titled `title`; its id.
    async fn publish(&self, token: &str, title: &str) -> i64 {
        self.write(
            "/articles/publish",
            token,
            json!({"title": title, "content": format!("<p>{title}：备份演练的正文</p>")}),
        )
        .await
        .as_i64()
        .unwrap()
    }
}

/// Writers publishing, liking and commenting through the API until stopped, each as its own
/// user; every write is checked answered.
struct Load {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
    published: Arc<Mutex<Vec<i64>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(api: &Api, writers: &[(String, i64)]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let published = Arc::new(Mutex::new(Vec::new()));
        let tasks = writers
            .iter()
            .enumerate()
            .map(|(task, (token, _))| {
                let (api, token) = (api.clone(), token.clone());
                let (stop, acknowledged, published) =
                    (stop.clone(), acknowledged.clone(), published.clone());
                tokio::spawn(async move {
                    let mut k = 0usize;
                    while !stop.load(Ordering::SeqCst) {
                        let word = WORDS[(task * 7 + k) % WORDS.len()];
                        let id = api
                            .publish(&token, &format!("backup drill {task} {k} {word}"))
                            .await;
                        acknowledged.fetch_add(1, Ordering::SeqCst);
                        let target = {
                            let mut all = published.lock().unwrap();
                            all.push(id);
                            all[(k * 31 + task) % all.len()]
                        };
                        api.write(
                            "/articles/pub/like",
                            &token,
                            json!({"id": target, "like": true}),
                        )
                        .await;
                        acknowledged.fetch_add(1, Ordering::SeqCst);
                        api.write(
                            "/comments",
                            &token,
                            json!({"biz": "article", "bizId": target,
                                   "content": format!("comment {task} {k}")}),
                        )
                        .await;
                        acknowledged.fetch_add(1, Ordering::SeqCst);
                        k += 1;
                    }
                })
            })
            .collect();
        Self {
            stop,
            acknowledged,
            published,
            tasks,
        }
    }

    /// Waits until `more` writes beyond those acknowledged now are.
    async fn progress(&self, more: u64) {
        let target = self.acknowledged.load(Ordering::SeqCst) + more;
        wait_until("the load's writes", || async {
            self.acknowledged.load(Ordering::SeqCst) >= target
        })
        .await;
    }

    /// Stops the writers (each finishes its write in progress); the articles they published.
    async fn stop(self) -> Vec<i64> {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.unwrap();
        }
        let published = self.published.lock().unwrap().clone();
        published
    }
}

// --- the change log: the source at any earlier instant --------------------------------------

/// The database's tables, but SQLite's own.
fn tables(connection: &Connection) -> Vec<String> {
    let mut statement = connection
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
             ORDER BY name",
        )
        .unwrap();
    statement
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn columns(connection: &Connection, table: &str) -> Vec<String> {
    let mut statement = connection
        .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .unwrap();
    statement
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The log table: every change to every table, in commit order (SQLite has one writer), with
/// the changed row's old values and when it was made.
const LOG: &str = "_bt_log";

/// Adds triggers to every table of the database `file` that record each change in [`LOG`]:
/// what undoing it takes. (`_sqlx_migrations` holds a BLOB column JSON cannot carry; nothing
/// changes it during the test, and its rows are compared all the same.)
fn install_change_log(file: &Path) {
    let connection = Connection::open(file).unwrap();
    connection
        .execute_batch(&format!(
            "CREATE TABLE {LOG} (id INTEGER PRIMARY KEY, tbl TEXT NOT NULL, op TEXT NOT NULL, \
             rid INTEGER NOT NULL, nrid INTEGER, old TEXT, at INTEGER NOT NULL)"
        ))
        .unwrap();
    let now = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";
    for table in tables(&connection) {
        if table == LOG || table == "_sqlx_migrations" {
            continue;
        }
        let old = columns(&connection, &table)
            .iter()
            .map(|column| format!("'{column}', OLD.\"{column}\""))
            .collect::<Vec<_>>()
            .join(", ");
        connection
            .execute_batch(&format!(
                "CREATE TRIGGER \"_bt_i_{table}\" AFTER INSERT ON \"{table}\" BEGIN \
                   INSERT INTO {LOG} (tbl, op, rid, at) VALUES ('{table}', 'I', NEW.rowid, {now}); \
                 END; \
                 CREATE TRIGGER \"_bt_u_{table}\" AFTER UPDATE ON \"{table}\" BEGIN \
                   INSERT INTO {LOG} (tbl, op, rid, nrid, old, at) \
                   VALUES ('{table}', 'U', OLD.rowid, NEW.rowid, json_object({old}), {now}); \
                 END; \
                 CREATE TRIGGER \"_bt_d_{table}\" AFTER DELETE ON \"{table}\" BEGIN \
                   INSERT INTO {LOG} (tbl, op, rid, old, at) \
                   VALUES ('{table}', 'D', OLD.rowid, json_object({old}), {now}); \
                 END;"
            ))
            .unwrap();
    }
}

/// Drops the log's triggers from the database `file`.
fn remove_change_log_triggers(connection: &Connection) {
    let mut statement = connection
        .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name GLOB '_bt_*'")
        .unwrap();
    let triggers: Vec<String> = statement
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for trigger in triggers {
        connection
            .execute_batch(&format!("DROP TRIGGER \"{trigger}\""))
            .unwrap();
    }
}

/// One logged change: the table, `I`/`U`/`D`, the row's rowid (and its new one after an
/// update), its old values as a JSON object.
struct Change {
    table: String,
    op: String,
    rid: i64,
    nrid: Option<i64>,
    old: Option<String>,
}

/// Undoes, newest first, every change of the database `file` logged after entry `boundary`;
/// the changes undone.
fn roll_back(file: &Path, boundary: i64) -> usize {
    let mut connection = Connection::open(file).unwrap();
    remove_change_log_triggers(&connection);
    let transaction = connection.transaction().unwrap();
    let changes: Vec<Change> = {
        let mut statement = transaction
            .prepare(&format!(
                "SELECT tbl, op, rid, nrid, old FROM {LOG} WHERE id > ?1 ORDER BY id DESC"
            ))
            .unwrap();
        statement
            .query_map([boundary], |row| {
                Ok(Change {
                    table: row.get(0)?,
                    op: row.get(1)?,
                    rid: row.get(2)?,
                    nrid: row.get(3)?,
                    old: row.get(4)?,
                })
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let mut column_cache: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for Change {
        table,
        op,
        rid,
        nrid,
        old,
    } in &changes
    {
        let columns = column_cache
            .entry(table.clone())
            .or_insert_with(|| columns(&transaction, table));
        let value = |column: &str| format!("json_extract(?1, '$.\"{column}\"')");
        match op.as_str() {
            "I" => {
                transaction
                    .execute(&format!("DELETE FROM \"{table}\" WHERE rowid = ?1"), [rid])
                    .unwrap();
            }
            "U" => {
                let set = columns
                    .iter()
                    .map(|column| format!("\"{column}\" = {}", value(column)))
                    .collect::<Vec<_>>()
                    .join(", ");
                transaction
                    .execute(
                        &format!("UPDATE \"{table}\" SET rowid = ?2, {set} WHERE rowid = ?3"),
                        (old, rid, nrid),
                    )
                    .unwrap();
            }
            "D" => {
                let names = columns
                    .iter()
                    .map(|column| format!("\"{column}\""))
                    .collect::<Vec<_>>()
                    .join(", ");
                let values = columns
                    .iter()
                    .map(|column| value(column))
                    .collect::<Vec<_>>()
                    .join(", ");
                transaction
                    .execute(
                        &format!("INSERT INTO \"{table}\" (rowid, {names}) VALUES (?2, {values})"),
                        (old, rid),
                    )
                    .unwrap();
            }
            other => panic!("unknown change {other}"),
        }
    }
    transaction
        .execute(&format!("DELETE FROM {LOG} WHERE id > ?1"), [boundary])
        .unwrap();
    transaction.commit().unwrap();
    changes.len()
}

fn read_only(file: &Path) -> Connection {
    Connection::open_with_flags(file, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

/// Every row of `table`, by rowid.
fn rows(connection: &Connection, table: &str) -> Vec<Vec<Sql>> {
    let mut statement = connection
        .prepare(&format!("SELECT rowid, * FROM \"{table}\" ORDER BY rowid"))
        .unwrap();
    let width = statement.column_count();
    statement
        .query_map([], |row| (0..width).map(|i| row.get::<_, Sql>(i)).collect())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The schema of tables, indexes and triggers, but the change log's triggers.
fn schema(connection: &Connection) -> Vec<(String, String, Option<String>)> {
    let mut statement = connection
        .prepare(
            "SELECT type, name, sql FROM sqlite_master \
             WHERE NOT (type = 'trigger' AND name GLOB '_bt_*') ORDER BY type, name",
        )
        .unwrap();
    statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Asserts the databases `expected` and `actual` hold the same schema and, table by table,
/// the same rows (rowid and every column, value and type); SQLite's `sqlite_sequence`, which no
/// trigger can log, only as far as ids go: `actual`'s counters cover its rows and never pass
/// `expected`'s. The rows compared.
fn assert_same_rows(expected: &Path, actual: &Path) -> usize {
    let (expected, actual) = (read_only(expected), read_only(actual));
    assert_eq!(schema(&expected), schema(&actual), "schemas differ");
    let mut compared = 0;
    for table in tables(&expected) {
        let (want, got) = (rows(&expected, &table), rows(&actual, &table));
        if want != got {
            let first = want
                .iter()
                .zip(&got)
                .position(|(want, got)| want != got)
                .unwrap_or(want.len().min(got.len()));
            panic!(
                "table {table}: {} rows expected, {} restored; first difference at row {first}: \
                 expected {:?}, restored {:?}",
                want.len(),
                got.len(),
                want.get(first),
                got.get(first)
            );
        }
        compared += want.len();
    }
    let sequences = |connection: &Connection| -> BTreeMap<String, i64> {
        let mut statement = connection
            .prepare("SELECT name, seq FROM sqlite_sequence")
            .unwrap();
        statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let (source, restored) = (sequences(&expected), sequences(&actual));
    for (table, seq) in &restored {
        let largest: i64 = actual
            .query_row(
                &format!("SELECT COALESCE(MAX(rowid), 0) FROM \"{table}\""),
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert!(
            largest <= *seq && seq <= &source[table],
            "sqlite_sequence of {table}: {seq}, rows up to {largest}, source {}",
            source[table]
        );
    }
    compared
}

// --- answers ---------------------------------------------------------------------------------

/// `value` without the read counters (reading an article counts a read, applied in batches:
/// what a comparison of two servers' answers cannot hold still).
fn without_read_counts(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.remove("readCnt");
            fields.values_mut().for_each(without_read_counts);
        }
        Value::Array(items) => items.iter_mut().for_each(without_read_counts),
        _ => {}
    }
}

/// A search answer with its hit lists in id order and without cursors: two indexes of the same
/// rows find the same hits, but one maintained by events and one rebuilt may break ties of
/// score differently.
fn as_hit_sets(mut answer: Value) -> Value {
    for list in ["articles", "users"] {
        if let Some(found) = answer["data"][list].as_object_mut() {
            found.remove("next");
            if let Some(Value::Array(items)) = found.get_mut("items") {
                items.sort_by_key(|item| item["id"].as_i64());
            }
        }
    }
    answer
}

/// Asserts `source` and `restored` answer every path alike (as `token`'s holder when given);
/// the number of answers with data.
async fn assert_same_answers(
    source: &Api,
    restored: &Api,
    token: Option<&str>,
    paths: &[String],
) -> usize {
    let mut with_data = 0;
    for path in paths {
        let (mut want, mut got) = (
            source.send(Method::GET, path, token, None).await,
            restored.send(Method::GET, path, token, None).await,
        );
        without_read_counts(&mut want.1);
        without_read_counts(&mut got.1);
        if path.starts_with("/search") {
            want.1 = as_hit_sets(want.1);
            got.1 = as_hit_sets(got.1);
        }
        assert_eq!(want, got, "GET {path}");
        if want.0 == StatusCode::OK && want.1["code"] == 0 {
            with_data += 1;
        }
    }
    with_data
}

/// The read routes compared between a source and its restored copy: the first pages of the
/// article list, every listed article's reader view and comments, a few users and searches.
async fn read_paths(api: &Api, users: &[i64], queries: &[&str]) -> Vec<String> {
    let mut paths = vec!["/articles/pub?limit=100".to_owned()];
    let (_, first) = api
        .send(Method::GET, "/articles/pub?limit=100", None, None)
        .await;
    if let Some(next) = first["data"]["next"].as_str() {
        paths.push(format!("/articles/pub?limit=100&cursor={next}"));
    }
    for item in first["data"]["items"].as_array().unwrap().iter().take(40) {
        let id = item["id"].as_i64().unwrap();
        paths.push(format!("/articles/pub/{id}"));
        paths.push(format!("/comments?biz=article&bizId={id}&limit=50"));
    }
    for uid in users {
        paths.push(format!("/users/{uid}"));
        paths.push(format!("/articles/pub?author={uid}&limit=100"));
    }
    for q in queries {
        let q: String = url::form_urlencoded::byte_serialize(q.as_bytes()).collect();
        paths.push(format!("/search?q={q}&type=all&limit=50"));
    }
    paths
}

fn secrets(dir: &Path) -> Vec<u8> {
    std::fs::read(dir.join("data").join("jwt-secrets.toml")).unwrap()
}

/// The first line of a command's stdout: the backup directory `webook backup` printed.
fn backup_dir_of(stdout: &str) -> PathBuf {
    let path = PathBuf::from(stdout.lines().next().unwrap().trim());
    assert!(path.join("manifest.json").is_file(), "{stdout}");
    path
}

fn manifest(backup: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(backup.join("manifest.json")).unwrap()).unwrap()
}

/// A file name listing of the data dir under `dir`, with each file's contents hashed (but the
/// instance lock's, which names the pid of whoever took it last).
fn data_dir_state(dir: &Path) -> BTreeMap<String, String> {
    use sha2::{Digest, Sha256};
    std::fs::read_dir(dir.join("data"))
        .unwrap()
        .filter(|entry| {
            !entry
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".lock")
        })
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let digest = if entry.file_type().unwrap().is_file() {
                hex::encode(Sha256::digest(std::fs::read(entry.path()).unwrap()))
            } else {
                "dir".to_owned()
            };
            (name, digest)
        })
        .collect()
}

// --- the tests -------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_under_write_load_is_one_instant_and_restores_to_the_same_answers() {
    let root = tempfile::tempdir().unwrap();
    let (source, restored, backups) = (
        root.path().join("source"),
        root.path().join("restored"),
        root.path().join("backups"),
    );
    for dir in [&source, &restored] {
        std::fs::create_dir(dir).unwrap();
    }
    // A database of some megabytes, so the copy takes many steps while the load writes.
    cli_succeeded(
        run(
            &source,
            &[
                "seed",
                "--users",
                "100",
                "--articles",
                "2000",
                "--likes",
                "3000",
                "--collects",
                "200",
                "--reads",
                "20000",
                "--comments",
                "1000",
                "--days",
                "7",
            ],
        ),
        &["seed"],
    );
    install_change_log(&database(&source));

    let server = Server::start(command(&source));
    server.search_ready().await;
    let api = Api::of(&server);
    let mut writers = Vec::new();
    for n in 0..4 {
        writers.push(api.member(&format!("writer{n}")).await);
    }
    let load = Load::start(&api, &writers);
    load.progress(60).await;
    let args = ["backup", "--to", backups.to_str().unwrap()];
    let backup = backup_dir_of(&cli_succeeded(run(&source, &args), &args));
    // Password hashes and token secrets: only the owner reads any of it, whatever the umask.
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&backup), 0o700, "{}", backup.display());
        for entry in std::fs::read_dir(&backup).unwrap() {
            let path = entry.unwrap().path();
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
    load.progress(60).await;
    let published = load.stop().await;
    server.terminate();
    assert_eq!(server.exit_code().await, 0);

    // The backup's instant: the last change it logged. The source had changes on both sides of
    // it, and some committed while the backup was being taken.
    let boundary: i64 = read_only(&backup.join("webook.db"))
        .query_row(&format!("SELECT MAX(id) FROM {LOG}"), [], |row| row.get(0))
        .unwrap();
    let finished_at = manifest(&backup)["finished_at"].as_i64().unwrap();
    let during: i64 = read_only(&database(&source))
        .query_row(
            &format!("SELECT COUNT(*) FROM {LOG} WHERE id > ?1 AND at < ?2"),
            (boundary, finished_at),
            |row| row.get(0),
        )
        .unwrap();
    assert!(
        during > 0,
        "no write committed while the backup was being taken"
    );

    // Left to the server's start, the index rebuild writes nothing to the restored database
    // before it is compared (the rebuild's migration step records who migrated last).
    let args = ["restore", backup.to_str().unwrap(), "--no-reindex"];
    let out = cli_succeeded(run(&restored, &args), &args);
    assert!(out.contains("search index marked stale"), "{out}");
    assert_eq!(
        secrets(&restored),
        secrets(&source),
        "the token secrets came back"
    );

    // The source as it was at the backup's instant, compared row by row with the restored copy.
    let undone = roll_back(&database(&source), boundary);
    assert!(undone > 0, "the load went on after the backup");
    let compared = assert_same_rows(&database(&source), &database(&restored));
    assert!(compared > 10_000, "only {compared} rows compared");
    let in_backup: i64 = read_only(&database(&restored))
        .query_row(
            "SELECT COUNT(*) FROM published_articles WHERE title LIKE 'backup drill %'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(
        in_backup > 0 && (in_backup as usize) < published.len(),
        "the backup has {in_backup} of the load's {} articles: it was taken mid-load",
        published.len()
    );

    // Both serve that instant: the source on its rolled-back database with its index rebuilt,
    // the restored copy with the index its server rebuilds at start.
    let args = ["search", "reindex"];
    cli_succeeded(run(&source, &args), &args);
    let source_server = Server::start(command(&source));
    let restored_server = Server::start(command(&restored));
    source_server.search_ready().await;
    restored_server.search_ready().await;
    let (from, to) = (Api::of(&source_server), Api::of(&restored_server));
    let users: Vec<i64> = writers.iter().map(|(_, uid)| *uid).collect();
    let mut queries = WORDS.to_vec();
    queries.extend(["backup drill", "备份演练"]);
    let mut paths = read_paths(&from, &users, &queries).await;
    // The load's articles: those before the instant are served, those after are not, alike.
    paths.extend(published.iter().map(|id| format!("/articles/pub/{id}")));
    let answered = assert_same_answers(&from, &to, None, &paths).await;
    assert!(
        answered > 100 && answered < paths.len(),
        "{answered} of {} answers had data",
        paths.len()
    );
    // A session of before the backup is valid on the restored instance, with the reader's own
    // likes: same secrets, same sessions.
    let (token, _) = &writers[0];
    let mine: Vec<String> = published
        .iter()
        .take(30)
        .map(|id| format!("/articles/pub/{id}"))
        .collect();
    let (_, profile) = to
        .send(Method::GET, "/users/profile", Some(token), None)
        .await;
    assert_eq!(profile["Id"].as_i64(), Some(writers[0].1), "{profile}");
    assert_same_answers(&from, &to, Some(token), &mine).await;
    for found in queries.iter().take(WORDS.len()) {
        assert!(
            !restored_server.search_article_ids(found).await.is_empty(),
            "{found}: no hits"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_a_data_dir_a_server_is_using_and_leaves_it_alone() {
    let root = tempfile::tempdir().unwrap();
    let (dir, backups) = (root.path().join("site"), root.path().join("backups"));
    std::fs::create_dir(&dir).unwrap();
    let server = Server::start(command(&dir));
    let api = Api::of(&server);
    let (token, _) = api.member("author").await;
    let before = api.publish(&token, "before the backup").await;
    let args = ["backup", "--to", backups.to_str().unwrap()];
    let backup = backup_dir_of(&cli_succeeded(run(&dir, &args), &args));
    let after = api.publish(&token, "after the backup").await;
    // The server writes its database by itself (heartbeats): what must not change is which
    // files there are, the secrets, and what it serves.
    let files = data_dir_state(&dir).into_keys().collect::<Vec<_>>();
    let secrets_before = secrets(&dir);

    let args = ["restore", backup.to_str().unwrap()];
    let line = cli_refused(run(&dir, &args), &args);
    assert!(
        line.contains(&format!(
            "another webook process (pid {})",
            server.child.id()
        )) && line.contains("stop it before starting webook restore"),
        "{line}"
    );
    assert!(!line.contains("cluster mode"), "{line}");
    assert_eq!(data_dir_state(&dir).into_keys().collect::<Vec<_>>(), files);
    assert_eq!(secrets(&dir), secrets_before);
    for id in [before, after] {
        let (status, read) = api
            .send(Method::GET, &format!("/articles/pub/{id}"), None, None)
            .await;
        assert_eq!((status, read["code"].as_i64()), (StatusCode::OK, Some(0)));
    }

    // Stopped, the same restore goes through: the data of after the backup is gone.
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
    let out = cli_succeeded(run(&dir, &args), &args);
    assert!(
        out.contains("kept the replaced") && out.contains("search index rebuilt"),
        "{out}"
    );
    let server = Server::start(command(&dir));
    let api = Api::of(&server);
    let (_, read) = api
        .send(
            Method::GET,
            &format!("/articles/pub/{before}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(read["code"], 0, "{read}");
    let (_, gone) = api
        .send(Method::GET, &format!("/articles/pub/{after}"), None, None)
        .await;
    assert_ne!(gone["code"], 0, "{gone}");
    // The restore rebuilt the index from the restored database: ready at once, without the
    // article of after the backup.
    server.search_ready().await;
    assert_eq!(server.search_article_ids("backup").await, vec![before]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_backup_is_refused_and_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let (source, target, backups) = (
        root.path().join("source"),
        root.path().join("target"),
        root.path().join("backups"),
    );
    for dir in [&source, &target] {
        std::fs::create_dir(dir).unwrap();
        let server = Server::start(command(dir));
        let api = Api::of(&server);
        let (token, _) = api.member("author").await;
        api.publish(&token, "an article").await;
        server.terminate();
        assert_eq!(server.exit_code().await, 0);
    }
    let args = ["backup", "--to", backups.to_str().unwrap()];
    let backup = backup_dir_of(&cli_succeeded(run(&source, &args), &args));
    let verify = ["backup", "verify", backup.to_str().unwrap()];
    let out = cli_succeeded(run(&source, &verify), &verify);
    assert!(out.contains(": ok"), "{out}");

    // One byte changed in the middle of the database copy.
    let copy = backup.join("webook.db");
    let mut bytes = std::fs::read(&copy).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&copy, bytes).unwrap();

    let state = data_dir_state(&target);
    let args = ["restore", backup.to_str().unwrap()];
    let line = cli_refused(run(&target, &args), &args);
    assert!(
        line.contains("checksum mismatch") && line.contains("webook.db"),
        "{line}"
    );
    assert_eq!(data_dir_state(&target), state, "the data dir is as it was");
    let line = cli_refused(run(&source, &verify), &verify);
    assert!(line.contains("checksum mismatch"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduled_backup_keeps_exactly_backup_keep() {
    let root = tempfile::tempdir().unwrap();
    let (dir, backups) = (root.path().join("site"), root.path().join("backups"));
    std::fs::create_dir(&dir).unwrap();
    let scheduled = |schedule: &str| {
        let mut command = command(&dir);
        command
            .env("WEBOOK_BACKUP_DIR", &backups)
            .env("WEBOOK_BACKUP_SCHEDULE", schedule)
            .env("WEBOOK_BACKUP_KEEP", "2");
        command
    };
    let started = platform::db::now_millis() as f64 / 1000.0;
    let server = Server::start(scheduled("@every 1s"));
    let api = Api::of(&server);
    let (token, _) = api.member("author").await;
    api.publish(&token, "scheduled").await;
    wait_until("four scheduled backups", || async {
        server.metric("backup_successes_total").await >= 4.0
    })
    .await;
    assert_eq!(server.metric("backup_failures_total").await, 0.0);
    assert!(server.metric("backup_last_success_timestamp_seconds").await > started);
    assert!(server.metric("backup_last_duration_seconds").await > 0.0);
    server.terminate();
    assert_eq!(server.exit_code().await, 0);

    let mut entries: Vec<String> = std::fs::read_dir(&backups)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    entries.sort();
    assert_eq!(
        entries.len(),
        2,
        "exactly backup_keep, no partial ones: {entries:?}"
    );
    for name in &entries {
        assert!(name.starts_with("webook-"), "{entries:?}");
        let backup = backups.join(name);
        let verify = ["backup", "verify", backup.to_str().unwrap()];
        cli_succeeded(run(&dir, &verify), &verify);
    }
    let list = ["backup", "list", "--dir", backups.to_str().unwrap()];
    let listed = cli_succeeded(run(&dir, &list), &list);
    assert_eq!(
        listed.lines().count(),
        3,
        "a header and two backups: {listed}"
    );

    // After a restart the last success is the newest backup's, not "never".
    let newest = manifest(&backups.join(&entries[1]))["finished_at"]
        .as_i64()
        .unwrap();
    let server = Server::start(scheduled("@every 24h"));
    let reported = server.metric("backup_last_success_timestamp_seconds").await;
    assert!(
        (reported - newest as f64 / 1000.0).abs() < 0.001,
        "{reported} vs {newest}"
    );
}

#[test]
fn nothing_opens_the_database_of_a_data_dir_an_interrupted_restore_left() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    std::fs::create_dir(&data).unwrap();
    // The journal of a restore that was interrupted before its first rename.
    std::fs::write(
        data.join("restore-journal.json"),
        r#"{"backup": "/backups/webook-20260301T120000.000Z", "steps": []}"#,
    )
    .unwrap();
    for args in [&["serve"][..], &["migrate"], &["jobs", "list"], &["backup"]] {
        let output = run(root.path(), args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} ran: {stderr}");
        assert!(
            stderr.contains("a restore into")
                && stderr.contains("was interrupted: run `webook restore /backups/webook-20260301T120000.000Z` again"),
            "{args:?}: {stderr}"
        );
        // Refused before the database was opened: not even created.
        assert!(!database(root.path()).exists(), "{args:?} opened it");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_scheduled_backup_is_stamped_until_one_succeeds() {
    let root = tempfile::tempdir().unwrap();
    let (dir, backups) = (root.path().join("site"), root.path().join("backups"));
    std::fs::create_dir(&dir).unwrap();
    // A file where the backup directory should be: every attempt fails to create it.
    std::fs::write(&backups, b"in the way").unwrap();
    let scheduled = |schedule: &str| {
        let mut command = command(&dir);
        command
            .env("WEBOOK_BACKUP_DIR", &backups)
            .env("WEBOOK_BACKUP_SCHEDULE", schedule);
        command
    };
    // No attempt yet (the first fire time is a day away): the failure gauge is there, at 0.
    let server = Server::start(scheduled("@every 24h"));
    assert_eq!(
        server.metric("backup_last_failure_timestamp_seconds").await,
        0.0
    );
    assert!(server
        .metrics_text()
        .await
        .lines()
        .any(|line| line == "backup_last_failure_timestamp_seconds 0"));
    server.terminate();
    assert_eq!(server.exit_code().await, 0);

    let server = Server::start(scheduled("@every 1s"));
    wait_until("a failed scheduled backup", || async {
        server.metric("backup_failures_total").await >= 1.0
    })
    .await;
    let failed = server.metric("backup_last_failure_timestamp_seconds").await;
    assert!(failed > 0.0, "the failure is stamped");
    let text = server.metrics_text().await;
    assert!(
        !text.contains("backup_last_success_timestamp_seconds "),
        "no success is reported before one happens: {text}"
    );
    assert_eq!(server.metric("backup_successes_total").await, 0.0);

    // The way cleared, the next attempt succeeds and is stamped after the failure (what the
    // alert WebookBackupFailed compares).
    std::fs::remove_file(&backups).unwrap();
    wait_until("a scheduled backup after the failures", || async {
        server.metric("backup_successes_total").await >= 1.0
    })
    .await;
    let succeeded = server.metric("backup_last_success_timestamp_seconds").await;
    let failed = server.metric("backup_last_failure_timestamp_seconds").await;
    assert!(succeeded > failed, "{succeeded} after {failed}");
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_pg_dump_and_pg_restore_into_a_new_database_serve_the_same_answers() {
    let (source_db, restored_db) = (
        TestDb::empty_postgres().await,
        TestDb::empty_postgres().await,
    );
    let root = tempfile::tempdir().unwrap();
    let (source, restored) = (root.path().join("source"), root.path().join("restored"));
    for dir in [&source, &restored] {
        std::fs::create_dir(dir).unwrap();
    }
    let on = |dir: &Path, url: &str| {
        let mut command = command(dir);
        command.env("WEBOOK_DATABASE_URL", url);
        command
    };
    // webook's own backup is for SQLite and says what to use instead, in one line.
    let args = ["backup", "--to", "/tmp/unused"];
    let line = cli_refused(
        on(&source, &source_db.url).args(args).output().unwrap(),
        &args,
    );
    assert!(line.contains("pg_dump"), "{line}");
    let line = cli_refused(
        on(&source, &source_db.url)
            .env("WEBOOK_BACKUP_DIR", root.path().join("backups"))
            .args(["serve"])
            .output()
            .unwrap(),
        &["serve"],
    );
    assert!(
        line.contains("invalid backup_dir (WEBOOK_BACKUP_DIR)"),
        "{line}"
    );

    let server = Server::start(on(&source, &source_db.url));
    let api = Api::of(&server);
    let mut writers = Vec::new();
    for n in 0..3 {
        writers.push(api.member(&format!("pgwriter{n}")).await);
    }
    let load = Load::start(&api, &writers);
    load.progress(90).await;
    let published = load.stop().await;
    server.search_ready().await;
    // The source's index follows the events: wait until it has the last article.
    let last = *published.last().unwrap();
    let (_, read) = api
        .send(Method::GET, &format!("/articles/pub/{last}"), None, None)
        .await;
    let title = read["data"]["title"].as_str().unwrap().to_owned();
    wait_until("the newest article is searchable", || async {
        server.search_article_ids(&title).await.contains(&last)
    })
    .await;

    // Online: the source keeps serving while pg_dump reads its snapshot.
    let dump = root.path().join("webook.dump");
    let dumped = Command::new("pg_dump")
        .args(["--format=custom", "--file"])
        .arg(&dump)
        .arg(&source_db.url)
        .output()
        .unwrap();
    assert!(
        dumped.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&dumped.stderr)
    );
    let restored_out = Command::new("pg_restore")
        .args([
            "--no-owner",
            "--exit-on-error",
            "--dbname",
            &restored_db.url,
        ])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(
        restored_out.status.success(),
        "pg_restore: {}",
        String::from_utf8_lossy(&restored_out.stderr)
    );
    // Embedded mode on PostgreSQL keeps its token secrets in the data dir: they go along.
    platform::db::create_private_dir(&restored.join("data")).unwrap();
    std::fs::copy(
        source.join("data").join("jwt-secrets.toml"),
        restored.join("data").join("jwt-secrets.toml"),
    )
    .unwrap();

    let restored_server = Server::start(on(&restored, &restored_db.url));
    restored_server.search_ready().await;
    let (from, to) = (Api::of(&server), Api::of(&restored_server));
    let users: Vec<i64> = writers.iter().map(|(_, uid)| *uid).collect();
    let mut queries = WORDS.to_vec();
    queries.push("backup drill");
    let mut paths = read_paths(&from, &users, &queries).await;
    paths.extend(published.iter().map(|id| format!("/articles/pub/{id}")));
    let answered = assert_same_answers(&from, &to, None, &paths).await;
    assert_eq!(answered, paths.len(), "every path answered with data");
    let (token, _) = &writers[1];
    let theirs: Vec<String> = published
        .iter()
        .take(30)
        .map(|id| format!("/articles/pub/{id}"))
        .collect();
    assert_same_answers(&from, &to, Some(token), &theirs).await;
}
