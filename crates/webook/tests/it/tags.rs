//! Tags on {SQLite, PostgreSQL} × {embedded, Redis}: creating is idempotent per owner whatever
//! the case and spaces (also under concurrency and with `Idempotency-Key`), the owner's list is
//! cached and shows a new tag at once, a replace of an object's tags is all or nothing (also N
//! at once: one set wins, never a union), refusals change nothing, a draft's tags are private,
//! a tag's articles page each published article once, newest first, while others are published,
//! and each replace — only a committed one — sends its `tags_changed` event.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use common::{get, login, post, signup, sorted_keys, Setup};
use platform::testing::{wait_until, TestDb};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use webook::{
    biz::Biz,
    tag::{
        store::{Created, TagStore},
        TagName, TOPIC_TAGS_CHANGED,
    },
    testing::TestApp,
};

struct Member {
    token: String,
    uid: i64,
}

async fn app(setup: Setup) -> TestApp {
    setup
        .spawn(|config| {
            config
                .settings_mut::<webook::auth::settings::AuthSettings>()
                .auth_rate_limit = 1_000_000;
        })
        .await
}

async fn member(app: &TestApp, name: &str) -> Member {
    let email = format!("{name}@tags.test");
    assert_eq!(signup(app, &email).await.code(), 0);
    let token = login(app, &email).await.0;
    let profile = get(app, "/users/profile", Some(&token)).await;
    let uid = profile.json()["Id"].as_i64().unwrap();
    Member { token, uid }
}

/// `POST /tags`; returns (code, data).
async fn create(app: &TestApp, who: &Member, name: &str) -> (i64, Value) {
    let answer = post(app, "/tags", Some(&who.token), json!({ "name": name })).await;
    let body = answer.json();
    (answer.code(), body["data"].clone())
}

/// A tag that must be created: its id.
async fn tag(app: &TestApp, who: &Member, name: &str) -> i64 {
    let (code, id) = create(app, who, name).await;
    assert_eq!(code, 0, "creating {name:?}");
    id.as_i64().unwrap()
}

/// `GET /tags` of `who`, every page: (id, name) by id.
async fn own_tags(app: &TestApp, who: &Member) -> Vec<(i64, String)> {
    let mut tags = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/tags?limit=100&cursor={cursor}"),
            None => "/tags?limit=100".to_owned(),
        };
        let answer = get(app, &path, Some(&who.token)).await;
        assert_eq!(answer.code(), 0, "{}", answer.raw);
        let page = answer.json()["data"].clone();
        tags.extend(pairs(&page["items"]));
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return tags,
        }
    }
}

fn pairs(tags: &Value) -> Vec<(i64, String)> {
    tags.as_array()
        .unwrap()
        .iter()
        .map(|tag| {
            assert_eq!(sorted_keys(tag), ["id", "name"]);
            (
                tag["id"].as_i64().unwrap(),
                tag["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// `POST /tags/attach` on an article; returns the code.
async fn attach(app: &TestApp, who: &Member, article: i64, tids: &[i64]) -> i64 {
    post(
        app,
        "/tags/attach",
        Some(&who.token),
        json!({"biz": "article", "bizId": article, "tids": tids}),
    )
    .await
    .code()
}

/// `GET /tags/biz` of an article as `who` sees it: (code, tag ids).
async fn tags_on(app: &TestApp, who: &Member, article: i64, uid: Option<i64>) -> (i64, Vec<i64>) {
    let mut path = format!("/tags/biz?biz=article&bizId={article}");
    if let Some(uid) = uid {
        path.push_str(&format!("&uid={uid}"));
    }
    let answer = get(app, &path, Some(&who.token)).await;
    let body = answer.json();
    let ids = match body["data"].as_array() {
        Some(_) => pairs(&body["data"]).into_iter().map(|(id, _)| id).collect(),
        None => Vec::new(),
    };
    (answer.code(), ids)
}

/// The tag ids on an article, as stored.
async fn stored_tags(app: &TestApp, article: i64) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT tid FROM tag_bizs WHERE biz = 'article' AND biz_id = $1 ORDER BY tid",
    )
    .bind(article)
    .fetch_all(app.platform.db.pool())
    .await
    .unwrap()
}

async fn publish(app: &TestApp, author: &Member, title: &str) -> i64 {
    let answer = post(
        app,
        "/articles/publish",
        Some(&author.token),
        json!({"title": title, "content": format!("<p>{title} body</p>")}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].as_i64().unwrap()
}

async fn draft(app: &TestApp, author: &Member, title: &str) -> i64 {
    let answer = post(
        app,
        "/articles/edit",
        Some(&author.token),
        json!({"title": title, "content": "<p>draft</p>"}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].as_i64().unwrap()
}

async fn withdraw(app: &TestApp, author: &Member, id: i64) {
    let answer = post(
        app,
        "/articles/withdraw",
        Some(&author.token),
        json!({ "id": id }),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
}

/// `POST /tags` from a spawned task, with an optional `Idempotency-Key`: (code, data, replayed).
async fn create_raw(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    name: &str,
    key: Option<&str>,
) -> (i64, Value, bool) {
    let mut request = client
        .post(url)
        .bearer_auth(token)
        .header("user-agent", common::UA)
        .json(&json!({ "name": name }));
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let body: Value = response.json().await.unwrap();
    (
        body["code"].as_i64().unwrap(),
        body["data"].clone(),
        replayed,
    )
}

async fn creating_is_idempotent_case_and_space_insensitive_and_per_owner(setup: Setup) {
    let app = app(setup).await;
    let alice = member(&app, "alice").await;
    let bob = member(&app, "bob").await;

    let rust = tag(&app, &alice, " Rust ").await;
    assert_eq!(tag(&app, &alice, "rust").await, rust);
    assert_eq!(tag(&app, &alice, "RUST\t").await, rust);
    let bobs_rust = tag(&app, &bob, "rust").await;
    assert_ne!(bobs_rust, rust, "another owner's tag is another tag");
    // The name stays as first written, trimmed.
    assert_eq!(own_tags(&app, &alice).await, [(rust, "Rust".to_owned())]);
    assert_eq!(own_tags(&app, &bob).await, [(bobs_rust, "rust".to_owned())]);
    let chinese = tag(&app, &alice, "数据库").await;
    assert_eq!(tag(&app, &alice, " 数据库 ").await, chinese);

    // Ten creates of one new name at once: one tag.
    let url = app.url("/tags");
    let mut tasks = Vec::new();
    for n in 0..10 {
        let (client, url, token) = (app.client.clone(), url.clone(), alice.token.clone());
        let spelling = if n % 2 == 0 { "Tokio" } else { " tokio" };
        tasks.push(tokio::spawn(async move {
            create_raw(&client, &url, &token, spelling, None).await
        }));
    }
    let mut ids = HashSet::new();
    for task in tasks {
        let (code, id, _) = task.await.unwrap();
        assert_eq!(code, 0);
        ids.insert(id.as_i64().unwrap());
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tags WHERE uid = $1")
        .bind(alice.uid)
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap();
    assert_eq!(rows, 3, "Rust, 数据库, Tokio");
    let names: Vec<String> = own_tags(&app, &alice)
        .await
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    assert_eq!(names.len(), 3);
    assert!(names[2] == "Tokio" || names[2] == "tokio", "{names:?}");

    // Idempotency-Key: the repeat replays the first answer.
    let first = create_raw(&app.client, &url, &alice.token, "Axum", Some("tag-1")).await;
    let again = create_raw(&app.client, &url, &alice.token, "Axum", Some("tag-1")).await;
    assert_eq!(first.0, 0);
    assert!(!first.2 && again.2, "the repeat is a replay");
    assert_eq!(first.1, again.1);
    let other = create_raw(&app.client, &url, &alice.token, "Sqlx", Some("tag-1")).await;
    assert_eq!(other.0, 4, "the same key for another request");

    // Validation: code 4 naming the field, nothing created.
    for bad in [
        "",
        "   ",
        "\u{200B}",
        "a\u{0007}b",
        "two\nlines",
        "a\u{202E}b",
        &"x".repeat(33),
        &"标".repeat(33),
    ] {
        let answer = post(&app, "/tags", Some(&alice.token), json!({ "name": bad })).await;
        assert_eq!(answer.code(), 4, "{bad:?}: {}", answer.raw);
        assert!(
            answer.json()["msg"].as_str().unwrap().starts_with("name"),
            "{}",
            answer.raw
        );
    }
    // 32 characters are fine, however many bytes they take.
    assert_eq!(create(&app, &alice, &"标".repeat(32)).await.0, 0);
    assert_eq!(create(&app, &alice, &"x".repeat(32)).await.0, 0);
    assert_eq!(own_tags(&app, &alice).await.len(), 6);
    assert_eq!(
        post(&app, "/tags", Some(&alice.token), json!({}))
            .await
            .code(),
        4
    );
    assert_eq!(
        post(&app, "/tags", None, json!({"name": "x"})).await.status,
        401
    );
    assert_eq!(get(&app, "/tags", None).await.status, 401);
}

/// The look-alikes of issue 46 — full-width letters, zero-width spaces before and after, a soft
/// hyphen, composed and decomposed letters, doubled spaces — each name the plain spelling's tag
/// or are refused with code 4 naming `name`; nothing else is created.
async fn look_alike_names_are_one_tag_or_refused(setup: Setup) {
    let app = app(setup).await;
    let alice = member(&app, "alice").await;
    let rust = tag(&app, &alice, "Rust").await;
    assert_eq!(tag(&app, &alice, "Ｒｕｓｔ").await, rust);
    assert_eq!(tag(&app, &alice, "ＲＵＳＴ").await, rust);
    for invisible in [
        "Rust\u{200B}",
        "\u{200B}Rust",
        "Ru\u{00AD}st",
        "Rust\u{FEFF}",
        "Ru\u{2060}st",
    ] {
        let (code, _) = create(&app, &alice, invisible).await;
        assert_eq!(code, 4, "{invisible:?}");
        let answer = post(
            &app,
            "/tags",
            Some(&alice.token),
            json!({ "name": invisible }),
        )
        .await;
        assert!(
            answer.json()["msg"]
                .as_str()
                .unwrap()
                .starts_with("name: must not contain invisible"),
            "{}",
            answer.raw
        );
    }
    let composed = tag(&app, &alice, "R\u{00FC}st").await;
    assert_eq!(tag(&app, &alice, "Ru\u{0308}st").await, composed);
    let spaced = tag(&app, &alice, "a b").await;
    assert_eq!(tag(&app, &alice, "a  b").await, spaced);
    assert_eq!(tag(&app, &alice, "a\u{3000}b").await, spaced);
    assert_eq!(
        own_tags(&app, &alice).await,
        [
            (rust, "Rust".to_owned()),
            (composed, "R\u{00FC}st".to_owned()),
            (spaced, "a b".to_owned()),
        ]
    );
    // Zalgo is refused too.
    let zalgo = format!("a{}", "\u{0301}".repeat(20));
    assert_eq!(create(&app, &alice, &zalgo).await.0, 4);
}

/// An owner has at most `tag_max_per_user` tags: a new name beyond it is code 4 and creates
/// nothing, an existing name still answers its id, other owners are not concerned.
async fn an_owner_has_at_most_the_configured_number_of_tags(setup: Setup) {
    let app = setup
        .spawn(|config| {
            config
                .settings_mut::<webook::auth::settings::AuthSettings>()
                .auth_rate_limit = 1_000_000;
            config
                .settings_mut::<webook::tag::TagSettings>()
                .tag_max_per_user = 3;
        })
        .await;
    let alice = member(&app, "alice").await;
    let bob = member(&app, "bob").await;
    let ids = [
        tag(&app, &alice, "one").await,
        tag(&app, &alice, "two").await,
        tag(&app, &alice, "three").await,
    ];
    let answer = post(&app, "/tags", Some(&alice.token), json!({"name": "four"})).await;
    assert_eq!(answer.code(), 4, "{}", answer.raw);
    assert_eq!(answer.json()["msg"], "at most 3 tags per user");
    assert_eq!(
        tag(&app, &alice, "TWO").await,
        ids[1],
        "an existing one is found"
    );
    assert_eq!(own_tags(&app, &alice).await.len(), 3);
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tags WHERE uid = $1")
        .bind(alice.uid)
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap();
    assert_eq!(rows, 3);
    tag(&app, &bob, "four").await;
}

/// `GET /tags` is paged like every list: `limit` 1–100 (default 20), `next` until the last
/// page, by id, each tag once; a tag created meanwhile shows on a later page.
async fn the_owner_list_is_paged_by_id(setup: Setup) {
    let app = app(setup).await;
    let alice = member(&app, "alice").await;
    let mut ids = Vec::new();
    for n in 0..25 {
        ids.push(tag(&app, &alice, &format!("tag {n}")).await);
    }
    let first = get(&app, "/tags", Some(&alice.token)).await.json()["data"].clone();
    assert_eq!(sorted_keys(&first), ["items", "next"]);
    assert_eq!(pairs(&first["items"]).len(), 20, "the default page");
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(cursor) => format!("/tags?limit=7&cursor={cursor}"),
            None => "/tags?limit=7".to_owned(),
        };
        let page = get(&app, &path, Some(&alice.token)).await.json()["data"].clone();
        seen.extend(pairs(&page["items"]).into_iter().map(|(id, _)| id));
        pages += 1;
        if pages == 2 {
            ids.push(tag(&app, &alice, "late").await);
        }
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids, "each once, by id, the late one at the end");
    assert_eq!(pages, 4);
    for bad in [
        "/tags?limit=0",
        "/tags?limit=101",
        "/tags?cursor=nope",
        "/tags?limit=x",
    ] {
        let answer = get(&app, bad, Some(&alice.token)).await;
        assert_eq!(answer.json()["code"], 4, "{bad}: {}", answer.raw);
    }
}

/// Tags stored before the rules (by hand here, as an older release wrote them: keys only
/// trimmed and lower-cased) are keyed again at start-up: look-alikes of one owner merge into
/// the oldest, which takes over their objects (once each); other owners' tags stay apart; the
/// next create of a look-alike finds the merged tag. Done once per database: a restart keeps
/// what later creates made.
async fn tags_stored_under_older_rules_merge_at_start_up(setup: Setup) {
    let db = setup.database().await;
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let configure = |config: &mut platform::config::Config| {
        config
            .settings_mut::<webook::auth::settings::AuthSettings>()
            .auth_rate_limit = 1_000_000;
    };
    let app = setup.spawn_on(db.clone(), &prefix, configure).await;
    let alice = member(&app, "alice").await;
    let bob = member(&app, "bob").await;
    let first = publish(&app, &alice, "first").await;
    let second = publish(&app, &alice, "second").await;
    app.stop().await.unwrap();

    // As the older release stored them: name trimmed, key lower-cased.
    let mut ids = Vec::new();
    for (uid, name) in [
        (alice.uid, "Rust"),
        (alice.uid, "Ｒｕｓｔ"),
        (alice.uid, "Rust\u{200B}"),
        (alice.uid, "Ru\u{0308}st"),
        (alice.uid, "R\u{00FC}st"),
        (alice.uid, "a  b"),
        (bob.uid, "ＲＵＳＴ"),
    ] {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO tags (uid, name, name_key, ctime, utime) VALUES ($1, $2, $3, 0, 0) \
             RETURNING id",
        )
        .bind(uid)
        .bind(name)
        .bind(name.trim().to_lowercase())
        .fetch_one(db.db.writer())
        .await
        .unwrap();
        ids.push(id);
    }
    // "Rust" on the first article, "Ｒｕｓｔ" on both (the first would carry it twice).
    for (tid, article) in [
        (ids[0], first),
        (ids[1], first),
        (ids[1], second),
        (ids[2], second),
    ] {
        sqlx::query(
            "INSERT INTO tag_bizs (tid, uid, biz, biz_id, ctime) VALUES ($1, $2, 'article', $3, 0)",
        )
        .bind(tid)
        .bind(alice.uid)
        .bind(article)
        .execute(db.db.writer())
        .await
        .unwrap();
    }
    sqlx::query("DELETE FROM meta WHERE name = 'tag_key_rules'")
        .execute(db.db.writer())
        .await
        .unwrap();

    let app = setup.spawn_on(db.clone(), &prefix, configure).await;
    let alice = Member {
        token: login(&app, "alice@tags.test").await.0,
        uid: alice.uid,
    };
    let bob = Member {
        token: login(&app, "bob@tags.test").await.0,
        uid: bob.uid,
    };
    assert_eq!(
        own_tags(&app, &alice).await,
        [
            (ids[0], "Rust".to_owned()),
            (ids[3], "Ru\u{0308}st".to_owned()),
            (ids[5], "a  b".to_owned()),
        ]
    );
    assert_eq!(
        own_tags(&app, &bob).await,
        [(ids[6], "ＲＵＳＴ".to_owned())]
    );
    assert_eq!(stored_tags(&app, first).await, [ids[0]]);
    assert_eq!(stored_tags(&app, second).await, [ids[0]]);
    // The rows, written without a key as the older release did, carry the new one: the topic
    // lists both articles.
    assert_eq!(topic_ids(&app, &bob, "rust").await, [second, first]);
    assert_eq!(tag(&app, &alice, "rust").await, ids[0]);
    assert_eq!(tag(&app, &alice, "R\u{00FC}st").await, ids[3]);
    assert_eq!(tag(&app, &alice, "a b").await, ids[5]);
    assert_eq!(tag(&app, &bob, "Rust").await, ids[6]);
    let articles = get(
        &app,
        &format!("/tags/{}/articles", ids[0]),
        Some(&bob.token),
    )
    .await;
    assert_eq!(
        ids_of(articles.json()["data"]["items"].as_array().unwrap()),
        [second, first]
    );
    let gone = get(
        &app,
        &format!("/tags/{}/articles", ids[1]),
        Some(&bob.token),
    )
    .await;
    assert_eq!(gone.code(), 404001);

    // Once per database: a restart does not run it again (a row keyed by hand stays).
    let new = tag(&app, &alice, "New").await;
    app.stop().await.unwrap();
    // A row an instance of the release before the key column attached (a rolling upgrade)
    // gets its key at the next start.
    sqlx::query(
        "INSERT INTO tag_bizs (tid, uid, biz, biz_id, ctime) VALUES ($1, $2, 'article', $3, 0)",
    )
    .bind(ids[3])
    .bind(alice.uid)
    .bind(first)
    .execute(db.db.writer())
    .await
    .unwrap();
    sqlx::query("UPDATE tags SET name_key = 'by hand' WHERE id = $1")
        .bind(new)
        .execute(db.db.writer())
        .await
        .unwrap();
    let app = setup.spawn_on(db.clone(), &prefix, configure).await;
    let key: String = sqlx::query_scalar("SELECT name_key FROM tags WHERE id = $1")
        .bind(new)
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap();
    assert_eq!(key, "by hand");
    assert_eq!(topic_ids(&app, &bob, "r%C3%BCst").await, [first]);
}

/// The ids of the articles on the first page of topic `name` (as a path segment), newest first.
async fn topic_ids(app: &TestApp, reader: &Member, name: &str) -> Vec<i64> {
    let topic = get(app, &format!("/topics/{name}"), Some(&reader.token)).await;
    assert_eq!(topic.code(), 0, "{}", topic.raw);
    ids_of(
        topic.json()["data"]["articles"]["items"]
            .as_array()
            .unwrap(),
    )
}

/// Sum of the tag-list cache's hits across layers, from `/metrics` (process-wide: compared
/// before and after, as a lower bound).
async fn tag_cache_hits(app: &TestApp) -> f64 {
    app.metrics_text()
        .await
        .lines()
        .filter(|line| {
            line.starts_with("cache_requests_total{")
                && line.contains("cache=\"tag_owner_lists\"")
                && line.contains("result=\"hit\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `redis_round_trips_total` from `/metrics` (process-wide: compared before and after).
async fn redis_round_trips(app: &TestApp) -> f64 {
    app.metrics_text()
        .await
        .lines()
        .find_map(|line| line.strip_prefix("redis_round_trips_total ")?.parse().ok())
        .unwrap_or(0.0)
}

async fn the_owner_list_is_cached_and_shows_a_new_tag_at_once(setup: Setup) {
    let app = app(setup).await;
    let alice = member(&app, "alice").await;
    assert!(own_tags(&app, &alice).await.is_empty());
    let first = tag(&app, &alice, "First").await;
    assert_eq!(own_tags(&app, &alice).await, [(first, "First".to_owned())]);

    // The list is served from the cache: a row written behind the service's back is not seen…
    let hits = tag_cache_hits(&app).await;
    let round_trips = redis_round_trips(&app).await;
    sqlx::query(
        "INSERT INTO tags (uid, name, name_key, ctime, utime) VALUES ($1, 'Hidden', 'hidden', 0, 0)",
    )
    .bind(alice.uid)
    .execute(app.platform.db.writer())
    .await
    .unwrap();
    assert_eq!(own_tags(&app, &alice).await, [(first, "First".to_owned())]);
    assert!(tag_cache_hits(&app).await > hits, "a cache hit");
    if setup.cluster {
        // The hit was checked against the version in Redis, and counted.
        assert!(
            redis_round_trips(&app).await > round_trips,
            "a counted round trip"
        );
    }
    // …until a create invalidates the entry: the very next read has everything, once each.
    let second = tag(&app, &alice, "Second").await;
    let listed = own_tags(&app, &alice).await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(listed[0], (first, "First".to_owned()));
    assert_eq!(listed[1].1, "Hidden");
    assert_eq!(listed[2], (second, "Second".to_owned()));
    // A create that finds the tag changes nothing, and the list never repeats an entry.
    assert_eq!(tag(&app, &alice, "second").await, second);
    assert_eq!(own_tags(&app, &alice).await, listed);
    assert_eq!(own_tags(&app, &alice).await, listed);
}

async fn attach_replaces_and_clears_and_refusals_change_nothing(setup: Setup) {
    let app = app(setup).await;
    let alice = member(&app, "alice").await;
    let bob = member(&app, "bob").await;
    let [rust, go, sql] = [
        tag(&app, &alice, "Rust").await,
        tag(&app, &alice, "Go").await,
        tag(&app, &alice, "SQL").await,
    ];
    let bobs = tag(&app, &bob, "Bob's").await;
    let article = publish(&app, &alice, "tagged").await;
    let bobs_article = publish(&app, &bob, "bob's").await;

    // Replace, with duplicates collapsing; then replace again; then clear.
    assert_eq!(attach(&app, &alice, article, &[go, rust, go]).await, 0);
    let mut both = vec![rust, go];
    both.sort_unstable();
    assert_eq!(
        tags_on(&app, &alice, article, None).await,
        (0, both.clone())
    );
    assert_eq!(stored_tags(&app, article).await, both);
    assert_eq!(attach(&app, &alice, article, &[sql]).await, 0);
    assert_eq!(tags_on(&app, &bob, article, None).await, (0, vec![sql]));
    assert_eq!(stored_tags(&app, article).await, [sql]);
    assert_eq!(attach(&app, &alice, article, &[]).await, 0);
    assert_eq!(tags_on(&app, &alice, article, None).await, (0, vec![]));
    assert!(stored_tags(&app, article).await.is_empty());

    // Refusals leave the tags as they were.
    assert_eq!(attach(&app, &alice, article, &[rust, go]).await, 0);
    for (who, object, tids, code) in [
        (&bob, article, vec![bobs], 403_002),
        (&alice, article, vec![rust, bobs], 403_002),
        (&alice, article, vec![999_999], 403_002),
        (&alice, bobs_article, vec![rust], 403_002),
        (&alice, 999_999, vec![rust], 404_001),
        (&alice, article, vec![rust, 0], 4),
        (&alice, article, (1..=21).collect(), 4),
        (&alice, 0, vec![rust], 4),
    ] {
        assert_eq!(
            attach(&app, who, object, &tids).await,
            code,
            "{object} {tids:?}"
        );
    }
    assert_eq!(stored_tags(&app, article).await, both);
    assert!(stored_tags(&app, bobs_article).await.is_empty());
    let unknown_biz = post(
        &app,
        "/tags/attach",
        Some(&alice.token),
        json!({"biz": "comment", "bizId": article, "tids": [rust]}),
    )
    .await;
    assert_eq!(unknown_biz.code(), 4, "{}", unknown_biz.raw);
    assert_eq!(
        post(
            &app,
            "/tags/attach",
            None,
            json!({"biz": "article", "bizId": article, "tids": []})
        )
        .await
        .status,
        401
    );
    // At most 20 tags, counted after duplicates collapse.
    let mut twenty = Vec::new();
    for n in 0..20 {
        twenty.push(tag(&app, &alice, &format!("t{n}")).await);
    }
    let doubled: Vec<i64> = twenty.iter().chain(&twenty).copied().collect();
    assert_eq!(attach(&app, &alice, article, &doubled).await, 0);
    assert_eq!(stored_tags(&app, article).await.len(), 20);
    assert_eq!(attach(&app, &alice, article, &[rust, go]).await, 0);

    // Filtered by owner.
    assert_eq!(
        tags_on(&app, &bob, article, Some(alice.uid)).await,
        (0, both.clone())
    );
    assert_eq!(
        tags_on(&app, &bob, article, Some(bob.uid)).await,
        (0, vec![])
    );

    // A draft's tags: its owner tags it and sees them; anyone else gets 404001.
    let hidden = draft(&app, &alice, "draft").await;
    assert_eq!(attach(&app, &alice, hidden, &[sql]).await, 0);
    assert_eq!(tags_on(&app, &alice, hidden, None).await, (0, vec![sql]));
    assert_eq!(tags_on(&app, &bob, hidden, None).await.0, 404_001);
    assert_eq!(attach(&app, &bob, hidden, &[]).await, 403_002);
    // A withdrawn article likewise.
    withdraw(&app, &alice, article).await;
    assert_eq!(tags_on(&app, &bob, article, None).await.0, 404_001);
    assert_eq!(tags_on(&app, &alice, article, None).await, (0, both));
    // No such object, and invalid queries.
    assert_eq!(tags_on(&app, &alice, 999_999, None).await.0, 404_001);
    for bad in [
        "biz=comment&bizId=1",
        "biz=article&bizId=0",
        "biz=article&bizId=1&uid=-1",
    ] {
        let answer = get(&app, &format!("/tags/biz?{bad}"), Some(&alice.token)).await;
        assert_eq!(answer.code(), 4, "{bad}: {}", answer.raw);
    }
    // A visitor (`anonymous_reading`, on by default) sees a published object's tags only:
    // not a draft's, not a withdrawn article's.
    for object in [hidden, article] {
        let path = format!("/tags/biz?biz=article&bizId={object}");
        assert_eq!(get(&app, &path, None).await.code(), 404_001, "{path}");
    }
}

async fn concurrent_replaces_end_with_one_set_never_a_union(setup: Setup) {
    let app = app(setup).await;
    let alice = member(&app, "alice").await;
    let article = publish(&app, &alice, "contended").await;
    const WRITERS: usize = 6;
    let mut sets: Vec<Vec<i64>> = Vec::new();
    for n in 0..WRITERS {
        sets.push(vec![
            tag(&app, &alice, &format!("a{n}")).await,
            tag(&app, &alice, &format!("b{n}")).await,
        ]);
    }
    let url = app.url("/tags/attach");
    for round in 0..4 {
        let mut tasks = Vec::new();
        for set in &sets {
            let (client, url, token) = (app.client.clone(), url.clone(), alice.token.clone());
            let set = set.clone();
            tasks.push(tokio::spawn(async move {
                let attach = json!({"biz": "article", "bizId": article, "tids": set});
                let body =
                    common::envelope(&client, reqwest::Method::POST, url, &token, Some(&attach))
                        .await;
                body["code"].as_i64().unwrap()
            }));
        }
        for task in tasks {
            assert_eq!(task.await.unwrap(), 0, "round {round}");
        }
        let stored = stored_tags(&app, article).await;
        assert!(
            sets.contains(&stored),
            "round {round}: {stored:?} is none of the sets"
        );
        assert_eq!(tags_on(&app, &alice, article, None).await, (0, stored));
    }
}

/// A page of tag `tid`'s articles: (code, ids, next).
async fn article_page(
    app: &TestApp,
    who: &Member,
    tid: i64,
    cursor: Option<&str>,
    limit: usize,
) -> (Vec<Value>, Option<String>) {
    let mut path = format!("/tags/{tid}/articles?limit={limit}");
    if let Some(cursor) = cursor {
        path.push_str(&format!("&cursor={cursor}"));
    }
    let answer = get(app, &path, Some(&who.token)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    let data = &answer.json()["data"];
    let items = data["items"].as_array().unwrap().clone();
    assert!(items.len() <= limit);
    (items, data["next"].as_str().map(str::to_owned))
}

fn ids_of(items: &[Value]) -> Vec<i64> {
    items
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect()
}

async fn a_tags_articles_page_each_published_one_once_newest_first(setup: Setup) {
    let app = app(setup).await;
    let alice = member(&app, "alice").await;
    let bob = member(&app, "bob").await;
    let topic = tag(&app, &alice, "Topic").await;
    let empty = tag(&app, &alice, "Empty").await;
    let bobs = tag(&app, &bob, "Topic").await;

    let mut tagged = Vec::new();
    for n in 0..25 {
        let id = publish(&app, &alice, &format!("article {n}")).await;
        assert_eq!(attach(&app, &alice, id, &[topic]).await, 0);
        tagged.push(id);
        if n == 10 {
            // Not carrying the tag, a draft carrying it, one withdrawn, another owner's.
            publish(&app, &alice, "untagged").await;
            let hidden = draft(&app, &alice, "draft").await;
            assert_eq!(attach(&app, &alice, hidden, &[topic]).await, 0);
            let gone = publish(&app, &alice, "withdrawn").await;
            assert_eq!(attach(&app, &alice, gone, &[topic]).await, 0);
            withdraw(&app, &alice, gone).await;
            let others = publish(&app, &bob, "bob's").await;
            assert_eq!(attach(&app, &bob, others, &[bobs]).await, 0);
        }
    }
    let liked = tagged[3];
    let like = post(
        &app,
        "/articles/pub/like",
        Some(&bob.token),
        json!({"id": liked, "like": true}),
    )
    .await;
    assert_eq!(like.code(), 0);

    // Page by 7 while more tagged articles are published between pages: each of the 25 once,
    // newest first; the new ones are above the cursor and do not show on these pages.
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    let mut published_meanwhile = Vec::new();
    loop {
        let (items, next) = article_page(&app, &bob, topic, cursor.as_deref(), 7).await;
        pages += 1;
        seen.extend(items.iter().cloned());
        let id = publish(&app, &alice, &format!("meanwhile {pages}")).await;
        assert_eq!(attach(&app, &alice, id, &[topic]).await, 0);
        published_meanwhile.push(id);
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
        assert!(pages < 10, "the list does not end");
    }
    assert_eq!(pages, 4);
    let expected: Vec<i64> = tagged.iter().rev().copied().collect();
    assert_eq!(ids_of(&seen), expected);

    // The items' shape and values.
    let first = &seen[0];
    assert_eq!(
        sorted_keys(first),
        [
            "abstract",
            "author",
            "commentCnt",
            "ctime",
            "id",
            "likeCnt",
            "title",
            "utime"
        ]
    );
    assert_eq!(first["title"], "article 24");
    assert_eq!(first["abstract"], "article 24 body");
    assert_eq!(
        first["author"],
        json!({"id": alice.uid, "name": format!("user{}", alice.uid)})
    );
    assert_eq!(first["commentCnt"], 0);
    assert!(first["ctime"].as_i64().unwrap() > 0 && first["utime"].as_i64().unwrap() > 0);
    for item in &seen {
        let likes = if item["id"] == liked { 1 } else { 0 };
        assert_eq!(item["likeCnt"], likes, "{item}");
    }

    // A fresh first page starts with what was published meanwhile.
    let (items, _) = article_page(&app, &bob, topic, None, 100).await;
    let mut newest: Vec<i64> = published_meanwhile.iter().rev().copied().collect();
    newest.extend(&expected);
    assert_eq!(ids_of(&items), newest);
    // Withdrawing one takes it off the next read.
    withdraw(&app, &alice, tagged[24]).await;
    let (items, next) = article_page(&app, &bob, topic, None, 100).await;
    assert!(!ids_of(&items).contains(&tagged[24]));
    assert_eq!(items.len(), newest.len() - 1);
    assert!(next.is_none());
    // The other owner's tag of the same name has only their article.
    assert_eq!(article_page(&app, &alice, bobs, None, 20).await.0.len(), 1);
    // A tag without articles, an unknown tag, invalid queries.
    assert_eq!(
        article_page(&app, &bob, empty, None, 20).await,
        (vec![], None)
    );
    let unknown = get(&app, "/tags/999999/articles", Some(&bob.token)).await;
    assert_eq!(unknown.code(), 404_001, "{}", unknown.raw);
    for bad in ["limit=0", "limit=101", "cursor=nope", "cursor=YTA"] {
        let answer = get(
            &app,
            &format!("/tags/{topic}/articles?{bad}"),
            Some(&bob.token),
        )
        .await;
        assert_eq!(answer.code(), 4, "{bad}: {}", answer.raw);
    }
    assert_eq!(
        get(&app, "/tags/0/articles", Some(&bob.token)).await.code(),
        4
    );
    // A visitor reads a tag's articles too (`anonymous_reading`, on by default).
    assert_eq!(
        get(&app, &format!("/tags/{topic}/articles"), None)
            .await
            .code(),
        0
    );
}

async fn each_committed_replace_sends_its_event_and_refusals_none(setup: Setup) {
    let app = app(setup).await;
    // Subscribed first: in embedded mode an event is recorded only when a group consumes it.
    let seen = Arc::new(Mutex::new(Vec::<platform::events::Event>::new()));
    let stop = CancellationToken::new();
    let sink = seen.clone();
    tokio::spawn(app.platform.events.consume(
        TOPIC_TAGS_CHANGED,
        "tags_test",
        100,
        Duration::from_millis(5),
        stop.clone(),
        move |batch| {
            sink.lock().unwrap().extend(batch);
            async { Ok(()) }
        },
    ));
    let alice = member(&app, "alice").await;
    let bob = member(&app, "bob").await;
    let rust = tag(&app, &alice, "Rust").await;
    let go = tag(&app, &alice, "Go").await;
    let bobs = tag(&app, &bob, "Bob's").await;
    let article = publish(&app, &alice, "indexed").await;

    // Refused: nothing committed, so nothing recorded.
    assert_eq!(attach(&app, &bob, article, &[bobs]).await, 403_002);
    assert_eq!(attach(&app, &alice, article, &[rust, bobs]).await, 403_002);
    assert_eq!(attach(&app, &alice, 999_999, &[rust]).await, 404_001);
    // Committed: the tags after each replace, by tag id.
    assert_eq!(attach(&app, &alice, article, &[go, rust]).await, 0);
    assert_eq!(attach(&app, &alice, article, &[]).await, 0);

    wait_until("both events", || async { seen.lock().unwrap().len() >= 2 }).await;
    let events = seen.lock().unwrap().clone();
    let payloads: Vec<Value> = events
        .iter()
        .map(|event| {
            assert_eq!(event.topic, TOPIC_TAGS_CHANGED);
            assert_eq!(event.key, format!("article:{article}"));
            serde_json::from_slice(&event.payload).unwrap()
        })
        .collect();
    // Events are relayed in the order they were recorded: a refused replace's event would
    // have come first.
    assert_eq!(payloads.len(), 2, "{payloads:?}");
    for (payload, names) in payloads.iter().zip([json!(["Rust", "Go"]), json!([])]) {
        assert_eq!(
            sorted_keys(payload),
            ["biz", "bizId", "tags", "time", "uid"]
        );
        assert_eq!(payload["uid"], alice.uid);
        assert_eq!(payload["biz"], "article");
        assert_eq!(payload["bizId"], article);
        assert_eq!(payload["tags"], names);
        assert!(payload["time"].as_i64().unwrap() > 0);
    }
    stop.cancel();
}

setup_tests!(
    creating_is_idempotent_case_and_space_insensitive_and_per_owner,
    the_owner_list_is_cached_and_shows_a_new_tag_at_once,
    attach_replaces_and_clears_and_refusals_change_nothing,
    concurrent_replaces_end_with_one_set_never_a_union,
    a_tags_articles_page_each_published_one_once_newest_first,
    each_committed_replace_sends_its_event_and_refusals_none,
    look_alike_names_are_one_tag_or_refused,
    an_owner_has_at_most_the_configured_number_of_tags,
    the_owner_list_is_paged_by_id,
    tags_stored_under_older_rules_merge_at_start_up,
);

/// Many replaces of one object's tags at once, straight through the store (no HTTP in between,
/// so they overlap far more): after each round the object has exactly one writer's set.
async fn concurrent_store_replaces_of_one_object_serialise(database: TestDb) {
    const WRITERS: i64 = 12;
    let db = &database.db;
    sqlx::query(
        "INSERT INTO users (id, email, password, ctime, utime) VALUES (1, 'a@x', 'x', 0, 0)",
    )
    .execute(db.writer())
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO articles (id, author_id, title, content, abstract, status, ctime, utime) \
         VALUES (1, 1, 't', 'c', 'a', 1, 0, 0)",
    )
    .execute(db.writer())
    .await
    .unwrap();
    let store = TagStore::new(db.clone());
    let mut sets = Vec::new();
    for n in 0..WRITERS {
        let mut set = Vec::new();
        for part in ["a", "b"] {
            let name = TagName::parse(&format!("{part}{n}")).unwrap();
            let Created::New(id) = store.create(1, &name, 1000, 0).await.unwrap() else {
                panic!("{name:?} is new");
            };
            set.push(id);
        }
        sets.push(set);
    }
    for round in 0..20 {
        let start = Arc::new(tokio::sync::Barrier::new(sets.len()));
        let tasks: Vec<_> = sets
            .iter()
            .map(|set| {
                let (store, set, start) = (store.clone(), set.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store.replace(1, Biz::Article, 1, &set, round, false).await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let stored: Vec<i64> = sqlx::query_scalar(
            "SELECT tid FROM tag_bizs WHERE biz = 'article' AND biz_id = 1 ORDER BY tid",
        )
        .fetch_all(db.pool())
        .await
        .unwrap();
        assert!(
            sets.contains(&stored),
            "round {round}: {stored:?} is none of the sets"
        );
    }
}

platform::backend_tests!(webook::schema::MIGRATIONS;
    concurrent_store_replaces_of_one_object_serialise,
);
