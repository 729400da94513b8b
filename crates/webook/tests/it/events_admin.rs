//! `webook events groups|parked|replay|discard` (the real binary) beside a running embedded
//! server, on events its consumer groups really parked: a withdrawal committed with a payload
//! that does not decode (`common::withdraw_with_a_garbled_event`) is parked by `ranking` and
//! `feed`; the command lists both groups and both events with their error, discards one with
//! its reason, marks the other for replay — which the server takes and, the payload still
//! garbled, parks again — and, once the payload is repaired, replays it for good. Selections
//! that name nothing, and blank reasons, are refused with one line; an unknown state with
//! the states there are.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{path::Path, process::Output};

use platform::{
    db::Db,
    events::parked::{self, Filter, Parked},
    testing::wait_until,
};
use serde_json::{json, Value};

use crate::common::{
    self, embedded_db,
    process::{webook, Server},
    repair_parked_payload, withdraw_with_a_garbled_event, withdrawal_payload,
};

const PASSWORD: &str = "Events-Passw0rd!";

/// Runs `webook <args>` on the data dir of the server started in `dir`.
fn events_command(dir: &Path, args: &[&str]) -> Output {
    webook(dir)
        .env("WEBOOK_LOG", "warn")
        .args(args)
        .output()
        .expect("run webook")
}

/// Runs a command expected to succeed; returns its stdout.
#[track_caller]
fn succeeds(dir: &Path, args: &[&str]) -> String {
    common::cli_succeeded(events_command(dir, args), args)
}

/// Runs a command expected to be refused; returns its one `error: …` line.
#[track_caller]
fn refused(dir: &Path, args: &[&str]) -> String {
    common::cli_refused(events_command(dir, args), args)
}

use common::table_cells as cells;

/// The row of `rows` whose cells start with `first` and `second`.
#[track_caller]
fn row<'a>(rows: &'a [Vec<String>], first: &str, second: &str) -> &'a [String] {
    rows.iter()
        .find(|row| row.len() > 2 && row[0] == first && row[1] == second)
        .unwrap_or_else(|| panic!("no row {first} {second} in {rows:?}"))
}

async fn parked_of(db: &Db, group: &str) -> Parked {
    let mut rows = parked::list(
        db,
        &Filter {
            group: Some(group.to_owned()),
            ..Filter::default()
        },
        10,
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 1, "{group}: {rows:?}");
    rows.remove(0)
}

/// `POST path` with `token`: the envelope's `data`.
async fn api_post(server: &Server, token: &str, path: &str, body: Value) -> Value {
    let answer: Value = reqwest::Client::new()
        .post(server.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["code"], 0, "{path}: {answer}");
    answer["data"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_events_command_lists_discards_and_replays_what_groups_parked() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut command = webook(dir);
    command.env("WEBOOK_LOG", "warn,webook::app=info");
    let server = Server::start(command);
    let token = server
        .sign_up_and_log_in("author@example.com", PASSWORD)
        .await;
    let article = api_post(
        &server,
        &token,
        "/articles/publish",
        json!({"title": "Withdrawn with a garbled event", "content": "<p>Soon gone.</p>"}),
    )
    .await
    .as_i64()
    .unwrap();

    let db = embedded_db(dir).await;
    withdraw_with_a_garbled_event(&db, article).await;
    wait_until(
        "ranking, feed and notifications to park the garbled event",
        || async {
            let open = parked::list(&db, &Filter::default(), 10).await.unwrap();
            open.len() == 3 && open.iter().all(|row| row.state == "parked")
        },
    )
    .await;
    let ranking = parked_of(&db, "ranking").await;
    let feed = parked_of(&db, "feed").await;
    let notifications = parked_of(&db, "notifications").await;

    // Groups: both know their parked event; the position went past it (nothing waits).
    let groups = cells(&succeeds(dir, &["events", "groups"]));
    assert_eq!(
        groups[0],
        [
            "GROUP",
            "TOPIC",
            "POSITION",
            "WAITING",
            "OLDEST",
            "PARKED",
            "REPLAYING",
            "REPLAYED",
            "DISCARDED"
        ]
    );
    for group in ["ranking", "feed", "notifications"] {
        let row = row(&groups, group, "article_withdrawn");
        assert_eq!(row[3..], ["0", "0.0s", "1", "0", "0", "0"], "{row:?}");
    }
    // A group that parked nothing is listed with its position.
    let published = row(&groups, "feed", "article_published");
    assert_eq!(published[5..], ["0", "0", "0", "0"], "{published:?}");

    // Parked: the three events, newest first, with the kind of failure, attempts and the error.
    let listed = succeeds(dir, &["events", "parked"]);
    let rows = cells(&listed);
    assert_eq!(
        rows[0],
        [
            "ID",
            "GROUP",
            "TOPIC",
            "KEY",
            "STATE",
            "FAILURE",
            "ATTEMPTS",
            "PARKED AT",
            "LAST ERROR"
        ]
    );
    assert_eq!(rows.len(), 4, "{listed}");
    for parked in [&ranking, &feed, &notifications] {
        let row = row(&rows, &parked.id.to_string(), &parked.group);
        assert_eq!(
            row[2..7],
            [
                "article_withdrawn",
                &article.to_string(),
                "parked",
                "permanent",
                "3"
            ],
            "{row:?}"
        );
        chrono::DateTime::parse_from_rfc3339(&row[7]).expect("PARKED AT is RFC 3339");
        assert!(row[8].contains("does not decode"), "{row:?}");
    }
    let only_feed = cells(&succeeds(dir, &["events", "parked", "--group", "feed"]));
    assert_eq!(only_feed.len(), 2, "{only_feed:?}");
    assert_eq!(only_feed[1][0], feed.id.to_string());

    // Refusals: a selection that names nothing, a blank reason.
    let stderr = refused(dir, &["events", "discard", "--reason", "no selection"]);
    assert!(stderr.contains("name the parked events"), "{stderr}");
    let stderr = refused(dir, &["events", "replay"]);
    assert!(stderr.contains("name the parked events"), "{stderr}");
    let feed_id = feed.id.to_string();
    let stderr = refused(
        dir,
        &["events", "discard", "--id", &feed_id, "--reason", "  "],
    );
    assert!(stderr.contains("--reason must say why"), "{stderr}");
    assert_eq!(
        parked_of(&db, "feed").await.state,
        "parked",
        "nothing changed"
    );
    // A state that does not exist is a usage error (clap's), not an empty list.
    let typo = events_command(dir, &["events", "parked", "--state", "parkd"]);
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert_eq!(typo.status.code(), Some(2), "{stderr}");
    assert!(typo.stdout.is_empty());
    assert!(
        stderr.contains("invalid value 'parkd'") && stderr.contains("discarded"),
        "{stderr}"
    );

    // Discard the feed's: the feed reads an article's visibility when it serves.
    let reason = "the feed hides withdrawn articles by itself";
    assert_eq!(
        succeeds(
            dir,
            &["events", "discard", "--id", &feed_id, "--reason", reason]
        ),
        "1 parked event(s) discarded\n"
    );
    let discarded = parked_of(&db, "feed").await;
    assert_eq!(discarded.state, "discarded");
    assert_eq!(discarded.note.as_deref(), Some(reason));
    assert!(
        discarded
            .resolved_by
            .as_deref()
            .is_some_and(|by| by.starts_with("cli:")),
        "{discarded:?}"
    );
    assert!(discarded.resolved_at.is_some(), "{discarded:?}");
    assert_eq!(
        succeeds(
            dir,
            &["events", "discard", "--id", &feed_id, "--reason", reason]
        ),
        "0 parked event(s) discarded\n",
        "a discarded event is not discarded twice"
    );
    let listed = cells(&succeeds(
        dir,
        &["events", "parked", "--state", "discarded"],
    ));
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(
        listed[1][..5],
        [
            &feed_id,
            "feed",
            "article_withdrawn",
            &article.to_string(),
            "discarded"
        ]
    );

    // A replay while the payload is still garbled: the server takes it and parks it again.
    let ranking_id = ranking.id.to_string();
    let marked = succeeds(dir, &["events", "replay", "--id", &ranking_id]);
    assert!(
        marked.starts_with("1 parked event(s) marked for replay"),
        "{marked}"
    );
    wait_until("the server to replay it and park it again", || async {
        let row = parked_of(&db, "ranking").await;
        row.state == "parked" && row.attempts == 4
    })
    .await;
    let again = parked_of(&db, "ranking").await;
    assert!(again.last_error.contains("does not decode"), "{again:?}");

    // Repaired, a replay of the group applies it: replayed, and nothing is open any more.
    repair_parked_payload(&db, ranking.id, &withdrawal_payload(article, 1)).await;
    let marked = succeeds(
        dir,
        &[
            "events",
            "replay",
            "--group",
            "ranking",
            "--topic",
            "article_withdrawn",
        ],
    );
    assert!(
        marked.starts_with("1 parked event(s) marked for replay"),
        "{marked}"
    );
    wait_until("the server to apply the repaired event", || async {
        parked_of(&db, "ranking").await.state == "replayed"
    })
    .await;
    let replayed = parked_of(&db, "ranking").await;
    assert!(replayed.resolved_at.is_some(), "{replayed:?}");
    // The notifications' too (an operator would replay it repaired; discarding is enough here).
    assert_eq!(
        succeeds(
            dir,
            &[
                "events",
                "discard",
                "--id",
                &notifications.id.to_string(),
                "--reason",
                "a test article"
            ]
        ),
        "1 parked event(s) discarded\n"
    );
    assert_eq!(succeeds(dir, &["events", "parked"]), "no parked events\n");
    let listed = cells(&succeeds(dir, &["events", "parked", "--state", "replayed"]));
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(
        listed[1][..5],
        [
            &ranking_id,
            "ranking",
            "article_withdrawn",
            &article.to_string(),
            "replayed"
        ]
    );
    let groups = cells(&succeeds(dir, &["events", "groups"]));
    assert_eq!(
        row(&groups, "ranking", "article_withdrawn")[5..],
        ["0", "0", "1", "0"]
    );
    assert_eq!(
        row(&groups, "feed", "article_withdrawn")[5..],
        ["0", "0", "0", "1"]
    );
    assert_eq!(
        succeeds(dir, &["events", "replay", "--all"]),
        "0 parked event(s) marked for replay; their groups apply them within a few seconds \
         of a server running\n"
    );

    db.close().await;
    server.terminate();
    assert_eq!(server.exit_code().await, 0);
}
