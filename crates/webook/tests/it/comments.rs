//! Comments on {SQLite, PostgreSQL} × {embedded, Redis}: a 10 000-comment thread paged through
//! while comments keep arriving returns every comment exactly once; deleting a parent keeps its
//! replies reachable (tombstones) and removing the last reply clears tombstones away; only the
//! comment's author and the object's author may delete; counts stay exact under concurrent
//! writes and deletions; input, objects and parents are checked; the per-user rate limit holds;
//! and comments reach the feeds of the people they concern.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;

use common::{call, get, member, members, post, publish, Member, Setup};
use platform::{
    config::DatabaseKind,
    db::{bulk_row_placeholders, Db},
    testing::wait_until,
};
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;
use webook::{comment::CommentSettings, testing::TestApp};

/// An app without the rate limits (except where a test sets the comment limit).
async fn app_with_comment_limit(setup: Setup, comment_rate_limit: u32) -> TestApp {
    setup
        .spawn(|config| {
            config.settings_mut::<CommentSettings>().comment_rate_limit = comment_rate_limit;
            let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
            auth.auth_rate_limit = 1_000_000;
            auth.write_rate_limit = 0;
        })
        .await
}

async fn app(setup: Setup) -> TestApp {
    app_with_comment_limit(setup, 0).await
}

fn comment_body(article: i64, parent: Option<i64>, content: &str) -> Value {
    let mut body = json!({"biz": "article", "bizId": article, "content": content});
    if let Some(parent) = parent {
        body["parentId"] = json!(parent);
    }
    body
}

async fn comment(
    app: &TestApp,
    who: &Member,
    article: i64,
    parent: Option<i64>,
    content: &str,
) -> common::Answer {
    post(
        app,
        "/comments",
        Some(&who.token),
        comment_body(article, parent, content),
    )
    .await
}

/// Writes a comment that must be accepted; returns its id.
async fn write(
    app: &TestApp,
    who: &Member,
    article: i64,
    parent: Option<i64>,
    content: &str,
) -> i64 {
    let answer = comment(app, who, article, parent, content).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].as_i64().unwrap()
}

async fn delete(app: &TestApp, who: &Member, id: i64) -> i64 {
    let path = format!("/comments/{id}");
    call(
        app,
        reqwest::Method::DELETE,
        &path,
        Some(&who.token),
        common::UA,
        None,
    )
    .await
    .code()
}

fn with_cursor(path: String, cursor: Option<&str>) -> String {
    match cursor {
        Some(cursor) => format!("{path}&cursor={cursor}"),
        None => path,
    }
}

/// `GET /comments` answered with code 0: its `data`.
async fn thread_page(
    app: &TestApp,
    who: &Member,
    article: i64,
    cursor: Option<&str>,
    limit: usize,
) -> Value {
    let path = format!("/comments?biz=article&bizId={article}&limit={limit}");
    let answer = get(app, &with_cursor(path, cursor), Some(&who.token)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].clone()
}

async fn replies_page(
    app: &TestApp,
    who: &Member,
    root: i64,
    cursor: Option<&str>,
    limit: usize,
) -> Value {
    let path = format!("/comments/{root}/replies?limit={limit}");
    let answer = get(app, &with_cursor(path, cursor), Some(&who.token)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].clone()
}

fn ids(items: &[Value]) -> Vec<i64> {
    items
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect()
}

/// All replies under `root`, page by page, oldest first, none twice.
async fn all_replies(app: &TestApp, who: &Member, root: i64, limit: usize) -> Vec<Value> {
    let replies = common::every_page(limit, async |cursor| {
        replies_page(app, who, root, cursor.as_deref(), limit).await
    })
    .await;
    let ids = ids(&replies);
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "replies of {root} out of order or repeated"
    );
    for reply in &replies {
        assert_eq!(reply["rootId"], root, "{reply}");
    }
    replies
}

/// Every comment of the article reachable through the API: the top-level pages (newest first,
/// none twice) and every root's replies (each root's preview being the first 3 of them, its
/// `replyCnt` the live ones). Returns (top-level comments, every comment).
async fn reachable(
    app: &TestApp,
    who: &Member,
    article: i64,
    limit: usize,
) -> (Vec<Value>, Vec<Value>) {
    let roots = common::every_page(limit, async |cursor| {
        thread_page(app, who, article, cursor.as_deref(), limit).await
    })
    .await;
    let root_ids = ids(&roots);
    assert!(
        root_ids.windows(2).all(|w| w[0] > w[1]),
        "top-level comments out of order or repeated"
    );
    let mut all = roots.clone();
    for root in &roots {
        let id = root["id"].as_i64().unwrap();
        assert!(
            root["rootId"].is_null() && root["parentId"].is_null(),
            "{root}"
        );
        let preview = root["replies"].as_array().unwrap();
        let replies = if preview.len() < 3 {
            preview.clone()
        } else {
            all_replies(app, who, id, 100).await
        };
        let first: Vec<i64> = ids(&replies).into_iter().take(3).collect();
        // A reply may arrive between the page and the replies' walk, but never before the
        // preview's first ones.
        assert_eq!(ids(preview), first[..preview.len()], "preview of {id}");
        let live = replies.iter().filter(|r| r["deleted"] == false).count() as i64;
        assert!(root["replyCnt"].as_i64().unwrap() <= live, "{root}");
        all.extend(replies);
    }
    (roots, all)
}

/// The stored counters agree with the rows: the object's `comment_cnt` counts its live
/// comments, every `child_cnt` its children, every root's `reply_cnt` its live replies; no
/// tombstone is left without replies and no reply without its parent.
async fn assert_counters_exact(db: &Db, article: i64) {
    let scalar = |sql: &'static str| {
        let db = db.clone();
        async move {
            let value: i64 = sqlx::query_scalar(sql)
                .bind(article)
                .fetch_one(db.pool())
                .await
                .unwrap();
            value
        }
    };
    let live = scalar(
        "SELECT COUNT(*) FROM comments WHERE biz = 'article' AND biz_id = $1 AND deleted = 0",
    )
    .await;
    let counted = scalar(
        "SELECT COALESCE((SELECT comment_cnt FROM interactives \
         WHERE biz = 'article' AND biz_id = $1), 0)",
    )
    .await;
    assert_eq!(counted, live, "comment_cnt of article {article}");
    for (what, sql) in [
        (
            "child_cnt",
            "SELECT COUNT(*) FROM comments c LEFT JOIN \
             (SELECT parent_id, COUNT(*) AS n FROM comments WHERE biz_id = $1 GROUP BY parent_id) k \
             ON k.parent_id = c.id WHERE c.biz_id = $1 AND c.child_cnt <> COALESCE(k.n, 0)",
        ),
        (
            "reply_cnt",
            "SELECT COUNT(*) FROM comments c LEFT JOIN \
             (SELECT root_id, COUNT(*) AS n FROM comments WHERE biz_id = $1 AND deleted = 0 GROUP BY root_id) k \
             ON k.root_id = c.id WHERE c.biz_id = $1 AND c.root_id = 0 AND c.reply_cnt <> COALESCE(k.n, 0)",
        ),
        (
            "childless tombstones",
            "SELECT COUNT(*) FROM comments WHERE biz_id = $1 AND deleted = 1 AND child_cnt = 0",
        ),
        (
            "orphans",
            "SELECT COUNT(*) FROM comments c WHERE c.biz_id = $1 AND c.parent_id <> 0 AND NOT EXISTS \
             (SELECT 1 FROM comments p WHERE p.id = c.parent_id AND p.root_id IN (0, c.root_id))",
        ),
    ] {
        assert_eq!(scalar(sql).await, 0, "{what} of article {article}");
    }
}

async fn total(app: &TestApp, who: &Member, article: i64) -> i64 {
    thread_page(app, who, article, None, 1).await["total"]
        .as_i64()
        .unwrap()
}

async fn comment_cnt_in_reader_view(app: &TestApp, who: &Member, article: i64) -> i64 {
    let view = get(app, &format!("/articles/pub/{article}"), Some(&who.token)).await;
    assert_eq!(view.code(), 0, "{}", view.raw);
    view.json()["data"]["commentCnt"].as_i64().unwrap()
}

/// Writes a thread of `count` comments under `article` straight into the tables (as the seeder
/// would), counters included: 1 000 top-level comments; replies go mostly to two big threads
/// (alternately to the root and to the previous reply, so conversations nest deeply), the rest
/// three per root. Ids are 1..=count in writing order. Returns the ids.
async fn bulk_thread(
    db: &Db,
    kind: DatabaseKind,
    article: i64,
    author: i64,
    count: i64,
) -> Vec<i64> {
    const ROOTS: i64 = 1000;
    // (id, root_id, parent_id)
    let mut rows: Vec<(i64, i64, i64)> = (1..=ROOTS).map(|id| (id, 0, 0)).collect();
    let mut last_reply: std::collections::HashMap<i64, i64> = Default::default();
    for id in ROOTS + 1..=count {
        let root = match id {
            id if id <= 5000 => 1,
            id if id <= 7000 => 2,
            id => 3 + id % (ROOTS - 2),
        };
        let parent = match last_reply.get(&root) {
            Some(previous) if id % 2 == 0 => *previous,
            _ => root,
        };
        last_reply.insert(root, id);
        rows.push((id, root, parent));
    }
    let mut child_cnt: std::collections::HashMap<i64, i64> = Default::default();
    let mut reply_cnt: std::collections::HashMap<i64, i64> = Default::default();
    for (_, root, parent) in &rows {
        if *parent != 0 {
            *child_cnt.entry(*parent).or_default() += 1;
            *reply_cnt.entry(*root).or_default() += 1;
        }
    }
    for chunk in rows.chunks(500) {
        let sql = format!(
            "INSERT INTO comments (id, biz, biz_id, uid, root_id, parent_id, content, deleted, \
             child_cnt, reply_cnt, ctime, utime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 12)
        );
        let mut query = sqlx::query(&sql);
        for (id, root, parent) in chunk {
            query = query
                .bind(*id)
                .bind("article")
                .bind(article)
                .bind(author)
                .bind(*root)
                .bind(*parent)
                .bind(format!("comment {id}"))
                .bind(0_i64)
                .bind(child_cnt.get(id).copied().unwrap_or(0))
                .bind(reply_cnt.get(id).copied().unwrap_or(0))
                .bind(*id)
                .bind(*id);
        }
        query.execute(db.writer()).await.unwrap();
    }
    sqlx::query(
        "INSERT INTO interactives (biz, biz_id, comment_cnt, ctime, utime) VALUES ('article', $1, $2, 0, 0) \
         ON CONFLICT (biz, biz_id) DO UPDATE SET comment_cnt = excluded.comment_cnt",
    )
    .bind(article)
    .bind(count)
    .execute(db.writer())
    .await
    .unwrap();
    if kind == DatabaseKind::Postgres {
        sqlx::query("SELECT setval(pg_get_serial_sequence('comments', 'id'), $1)")
            .bind(count)
            .execute(db.writer())
            .await
            .unwrap();
    }
    rows.into_iter().map(|(id, _, _)| id).collect()
}

/// A comment written from a spawned task (owning what it uses): (code, id).
async fn comment_raw(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    body: Value,
) -> (i64, Option<i64>) {
    let url = format!("{base}comments");
    let answer = common::envelope(client, reqwest::Method::POST, url, token, Some(&body)).await;
    (answer["code"].as_i64().unwrap(), answer["data"].as_i64())
}

async fn delete_raw(client: &reqwest::Client, base: &str, token: &str, id: i64) -> i64 {
    let url = format!("{base}comments/{id}");
    let answer = common::envelope(client, reqwest::Method::DELETE, url, token, None).await;
    answer["code"].as_i64().unwrap()
}

async fn a_thread_of_ten_thousand_pages_every_comment_once_while_comments_arrive(setup: Setup) {
    let app = app(setup).await;
    let author = member(&app, "author").await;
    let reader = member(&app, "reader").await;
    let writer = member(&app, "writer").await;
    let article = publish(&app, &author, "a busy thread").await;
    let db = app.platform.db.clone();
    let existing = bulk_thread(&db, setup.db, article, writer.uid, 10_000).await;

    // New top-level comments and replies to the big threads keep arriving during the walk.
    let stop = CancellationToken::new();
    let arriving = tokio::spawn({
        let (client, base, token, stop) = (
            app.client.clone(),
            app.url("/"),
            writer.token.clone(),
            stop.clone(),
        );
        async move {
            let mut written = Vec::new();
            for n in 0.. {
                if stop.is_cancelled() {
                    break;
                }
                let parent = [None, Some(1), Some(2), Some(5001)][n % 4];
                let (code, id) =
                    comment_raw(&client, &base, &token, comment_body(article, parent, "new")).await;
                assert_eq!(code, 0);
                written.push(id.unwrap());
            }
            written
        }
    });
    let (roots, all) = reachable(&app, &reader, article, 97).await;
    stop.cancel();
    let arrived = arriving.await.unwrap();
    assert!(!arrived.is_empty(), "comments arrived during the walk");

    let seen = ids(&all);
    let unique: HashSet<i64> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "a comment was returned twice");
    let missing: Vec<i64> = existing
        .iter()
        .filter(|id| !unique.contains(id))
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "unreachable: {} comments, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(roots.len() >= 1000);
    // Depth does not hide anything: the deepest chain of the first thread is all there.
    let big = all_replies(&app, &reader, 1, 100).await;
    assert!(big.len() >= 3999, "{}", big.len());
    assert_counters_exact(&db, article).await;
    let final_total = total(&app, &reader, article).await;
    assert_eq!(final_total, 10_000 + arrived.len() as i64);
}

async fn deleting_a_parent_keeps_its_replies_reachable(setup: Setup) {
    let app = app(setup).await;
    let [author, a, b, c] =
        <[Member; 4]>::try_from(members(&app, "user", 4).await).unwrap_or_else(|_| unreachable!());
    let article = publish(&app, &author, "discussed").await;
    let root = write(&app, &a, article, None, "root").await;
    let first = write(&app, &b, article, Some(root), "first reply").await;
    let second = write(&app, &c, article, Some(first), "reply to the reply").await;
    let db = app.platform.db.clone();

    // The root has replies: it stays, as a tombstone naming no one.
    assert_eq!(delete(&app, &a, root).await, 0);
    let page = thread_page(&app, &b, article, None, 10).await;
    let tombstone = &page["items"][0];
    assert_eq!(tombstone["id"], root);
    assert_eq!(tombstone["deleted"], true);
    assert_eq!(tombstone["content"], "");
    assert!(tombstone["author"].is_null(), "{tombstone}");
    assert_eq!(
        ids(tombstone["replies"].as_array().unwrap()),
        [first, second]
    );
    assert_eq!(tombstone["replyCnt"], 2);
    assert_eq!(page["total"], 2);
    assert_counters_exact(&db, article).await;
    // A tombstone takes no new replies.
    assert_eq!(
        comment(&app, &b, article, Some(root), "late").await.code(),
        404001
    );

    // The first reply has a reply of its own: a tombstone too.
    assert_eq!(delete(&app, &b, first).await, 0);
    let replies = all_replies(&app, &c, root, 10).await;
    assert_eq!(ids(&replies), [first, second]);
    assert_eq!(replies[0]["deleted"], true);
    assert_eq!(replies[1]["deleted"], false);
    assert_eq!(replies[1]["parentId"], first);
    assert_eq!(
        thread_page(&app, &c, article, None, 10).await["items"][0]["replyCnt"],
        1
    );
    assert_eq!(total(&app, &c, article).await, 1);
    assert_counters_exact(&db, article).await;

    // The last reply goes, and the tombstones it kept go with it.
    assert_eq!(delete(&app, &c, second).await, 0);
    let page = thread_page(&app, &c, article, None, 10).await;
    assert_eq!(page["items"], json!([]));
    assert_eq!(page["total"], 0);
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM comments WHERE biz_id = $1")
        .bind(article)
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0);
    assert_eq!(comment_cnt_in_reader_view(&app, &c, article).await, 0);
    for id in [root, first, second] {
        assert_eq!(delete(&app, &a, id).await, 404001);
    }
    assert_counters_exact(&db, article).await;
}

async fn only_the_comment_author_and_the_object_author_may_delete(setup: Setup) {
    let app = app(setup).await;
    let [author, writer, stranger] =
        <[Member; 3]>::try_from(members(&app, "user", 3).await).unwrap_or_else(|_| unreachable!());
    let article = publish(&app, &author, "moderated").await;
    let by_writer = write(&app, &writer, article, None, "mine").await;
    let also_by_writer = write(&app, &writer, article, None, "mine too").await;
    let by_author = write(&app, &author, article, None, "the author's").await;

    assert_eq!(delete(&app, &stranger, by_writer).await, 403002);
    assert_eq!(delete(&app, &writer, by_author).await, 403002);
    assert_eq!(
        total(&app, &stranger, article).await,
        3,
        "nothing was deleted"
    );
    assert_eq!(delete(&app, &writer, by_writer).await, 0);
    assert_eq!(delete(&app, &author, also_by_writer).await, 0);
    assert_eq!(delete(&app, &author, by_author).await, 0);
    assert_eq!(total(&app, &stranger, article).await, 0);
    assert_eq!(delete(&app, &writer, 999_999).await, 404001);
    assert_eq!(delete(&app, &writer, 0).await, 4);
    assert_counters_exact(&app.platform.db, article).await;
}

async fn counts_stay_exact_under_concurrent_creates_and_deletes(setup: Setup) {
    let app = app(setup).await;
    let author = member(&app, "author").await;
    let writers = members(&app, "writer", 4).await;
    let article = publish(&app, &author, "contested").await;
    let roots: Vec<i64> = {
        let mut roots = Vec::new();
        for n in 0..3 {
            roots.push(write(&app, &author, article, None, &format!("root {n}")).await);
        }
        roots
    };
    let roots = Arc::new(roots);
    let base = app.url("/");
    // Each writer replies to the roots and to its own and others' comments while deleting
    // some of its own: replies race deletions of their parents.
    let mut tasks = Vec::new();
    for (w, writer) in writers.iter().enumerate() {
        let (client, base, token, roots) = (
            app.client.clone(),
            base.clone(),
            writer.token.clone(),
            roots.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut mine: Vec<i64> = Vec::new();
            let mut kept = 0;
            for n in 0..24 {
                let parent = match n % 3 {
                    0 => None,
                    1 => Some(roots[(n + w) % roots.len()]),
                    _ => mine.last().copied().or(Some(roots[0])),
                };
                let (code, id) =
                    comment_raw(&client, &base, &token, comment_body(article, parent, "hi")).await;
                // A parent deleted meanwhile is the one allowed refusal.
                assert!(code == 0 || code == 404001, "create: {code}");
                if let Some(id) = id.filter(|_| code == 0) {
                    mine.push(id);
                }
                if n % 4 == 3 {
                    if let Some(victim) = mine.first().copied() {
                        assert_eq!(delete_raw(&client, &base, &token, victim).await, 0);
                        mine.remove(0);
                    }
                } else {
                    kept += 1;
                }
            }
            kept
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let db = app.platform.db.clone();
    assert_counters_exact(&db, article).await;
    let live: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM comments WHERE biz_id = $1 AND deleted = 0")
            .bind(article)
            .fetch_one(db.pool())
            .await
            .unwrap();
    assert!(live > 3, "{live}");
    assert_eq!(total(&app, &author, article).await, live);
    assert_eq!(
        comment_cnt_in_reader_view(&app, &author, article).await,
        live
    );
    let (_, all) = reachable(&app, &author, article, 7).await;
    let shown_live = all.iter().filter(|c| c["deleted"] == false).count() as i64;
    assert_eq!(shown_live, live, "every live comment is reachable");
}

async fn input_objects_and_parents_are_checked(setup: Setup) {
    let app = app(setup).await;
    let [author, reader, other] =
        <[Member; 3]>::try_from(members(&app, "user", 3).await).unwrap_or_else(|_| unreachable!());
    let article = publish(&app, &author, "checked").await;
    let elsewhere = publish(&app, &author, "elsewhere").await;

    for (body, code) in [
        (comment_body(article, None, ""), 4),
        (comment_body(article, None, " \n "), 4),
        (comment_body(article, None, &"好".repeat(2001)), 4),
        (comment_body(article, None, "a\u{0}b"), 4),
        (comment_body(0, None, "x"), 4),
        (comment_body(article, Some(-2), "x"), 4),
        (json!({"biz": "video", "bizId": article, "content": "x"}), 4),
        (comment_body(article + 100, None, "x"), 404001),
        (comment_body(article, Some(999_999), "x"), 404001),
    ] {
        let answer = post(&app, "/comments", Some(&reader.token), body.clone()).await;
        assert_eq!(answer.code(), code, "{body}: {}", answer.raw);
    }
    assert_eq!(
        comment(&app, &reader, article, None, &"好".repeat(2000))
            .await
            .code(),
        0
    );

    // Text is stored as written and shown escaped.
    let raw = r#"<img src=x onerror="alert(1)"> & 'quotes'"#;
    let id = write(&app, &reader, article, None, raw).await;
    let stored: String = sqlx::query_scalar("SELECT content FROM comments WHERE id = $1")
        .bind(id)
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap();
    assert_eq!(stored, raw);
    let page = thread_page(&app, &other, article, None, 1).await;
    assert_eq!(
        page["items"][0]["content"],
        "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; &#39;quotes&#39;"
    );
    assert_eq!(page["items"][0]["author"]["id"], reader.uid);
    assert_eq!(page["items"][0]["bizId"], article);

    // A reply to a reply joins the root's thread; a parent must be on the same object.
    let root = write(&app, &reader, article, None, "root").await;
    let reply = write(&app, &other, article, Some(root), "reply").await;
    let nested = write(&app, &reader, article, Some(reply), "nested").await;
    let replies = all_replies(&app, &other, root, 10).await;
    assert_eq!(ids(&replies), [reply, nested]);
    assert_eq!(replies[1]["parentId"], reply);
    assert_eq!(replies[1]["rootId"], root);
    assert_eq!(
        comment(&app, &reader, elsewhere, Some(root), "x")
            .await
            .code(),
        404001
    );
    let not_a_root = get(
        &app,
        &format!("/comments/{reply}/replies"),
        Some(&other.token),
    )
    .await;
    assert_eq!(not_a_root.code(), 404001);

    assert_eq!(comment_cnt_in_reader_view(&app, &other, article).await, 5);
    assert_eq!(total(&app, &other, article).await, 5);

    // Idempotency-Key: a repeat replays the first answer and writes nothing.
    let keyed = |key: &'static str| {
        app.client
            .post(app.url("/comments"))
            .bearer_auth(&reader.token)
            .header("user-agent", common::UA)
            .header("idempotency-key", key)
            .json(&comment_body(elsewhere, None, "once"))
    };
    let first: Value = keyed("k1").send().await.unwrap().json().await.unwrap();
    let again: Value = keyed("k1").send().await.unwrap().json().await.unwrap();
    assert_eq!(first["code"], 0);
    assert_eq!(first, again);
    assert_eq!(total(&app, &other, elsewhere).await, 1);

    // A draft or a withdrawn article has no readable or writable comments.
    let draft = post(
        &app,
        "/articles/edit",
        Some(&author.token),
        json!({"title": "draft", "content": "<p>d</p>"}),
    )
    .await
    .json()["data"]
        .as_i64()
        .unwrap();
    assert_eq!(
        comment(&app, &reader, draft, None, "x").await.code(),
        404001
    );
    let withdraw = post(
        &app,
        "/articles/withdraw",
        Some(&author.token),
        json!({"id": article}),
    )
    .await;
    assert_eq!(withdraw.code(), 0, "{}", withdraw.raw);
    let listing = get(
        &app,
        &format!("/comments?biz=article&bizId={article}"),
        Some(&other.token),
    )
    .await;
    assert_eq!(listing.code(), 404001);
    let thread = get(
        &app,
        &format!("/comments/{root}/replies"),
        Some(&other.token),
    )
    .await;
    assert_eq!(thread.code(), 404001);
    assert_eq!(
        comment(&app, &reader, article, None, "x").await.code(),
        404001
    );
    // Its author may still clean up.
    assert_eq!(delete(&app, &author, root).await, 0);

    // Not logged in: 401.
    let anonymous = post(&app, "/comments", None, comment_body(elsewhere, None, "x")).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    let cursor = get(
        &app,
        &format!("/comments?biz=article&bizId={elsewhere}&cursor=zz"),
        Some(&other.token),
    )
    .await;
    assert_eq!(cursor.code(), 4);
    assert_counters_exact(&app.platform.db, article).await;
}

async fn each_user_may_write_only_so_many_comments_per_window(setup: Setup) {
    let app = app_with_comment_limit(setup, 3).await;
    let [author, chatty, calm] =
        <[Member; 3]>::try_from(members(&app, "user", 3).await).unwrap_or_else(|_| unreachable!());
    let article = publish(&app, &author, "limited").await;
    for n in 0..3 {
        assert_eq!(
            comment(&app, &chatty, article, None, &format!("{n}"))
                .await
                .code(),
            0
        );
    }
    let refused = comment(&app, &chatty, article, None, "one too many").await;
    assert_eq!(
        refused.status_and_code(),
        (StatusCode::TOO_MANY_REQUESTS, 429001)
    );
    assert!(!refused.header("retry-after").is_empty());
    assert_eq!(comment(&app, &calm, article, None, "mine").await.code(), 0);
    assert_eq!(total(&app, &calm, article).await, 4);
}

/// The `comment` items of `who`'s feed: (actor, comment id, content).
async fn comment_items(app: &TestApp, who: &Member) -> Vec<(i64, i64, String)> {
    let answer = get(app, "/feed?limit=100", Some(&who.token)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "comment")
        .map(|item| {
            (
                item["actor"]["id"].as_i64().unwrap(),
                item["comment"]["id"].as_i64().unwrap(),
                item["comment"]["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

async fn comments_reach_the_feeds_of_the_author_and_the_user_replied_to(setup: Setup) {
    let app = app(setup).await;
    let [author, first, second] =
        <[Member; 3]>::try_from(members(&app, "user", 3).await).unwrap_or_else(|_| unreachable!());
    let article = publish(&app, &author, "talked about").await;
    let root = write(&app, &first, article, None, "<b>nice</b>").await;
    let reply = write(&app, &second, article, Some(root), "agreed").await;
    let own = write(&app, &author, article, None, "thanks").await;

    let expected_author = vec![
        (second.uid, reply, "agreed".to_owned()),
        (first.uid, root, "&lt;b&gt;nice&lt;/b&gt;".to_owned()),
    ];
    wait_until("the author's comment items", || async {
        comment_items(&app, &author).await == expected_author
    })
    .await;
    wait_until("the reply in the feed of the user replied to", || async {
        comment_items(&app, &first).await == vec![(second.uid, reply, "agreed".to_owned())]
    })
    .await;
    // Nobody is told of their own comment; the item carries the article and its count.
    assert!(comment_items(&app, &second).await.is_empty());
    let feed = get(&app, "/feed?limit=100", Some(&author.token))
        .await
        .json();
    let item = feed["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "comment")
        .unwrap()
        .clone();
    assert_eq!(item["article"]["id"], article);
    assert_eq!(item["article"]["commentCnt"], 3);
    let _ = own;

    // A deleted reply leaves both feeds.
    assert_eq!(delete(&app, &second, reply).await, 0);
    wait_until("the deleted reply to leave the feeds", || async {
        comment_items(&app, &first).await.is_empty()
            && comment_items(&app, &author).await.len() == 1
    })
    .await;
}

/// An `Idempotency-Key` names one request: the same key on the same route with another query
/// string is another request (code 4, nothing written), not a replay of the first answer.
async fn an_idempotency_key_covers_the_query_string(setup: Setup) {
    let app = app(setup).await;
    let [author, reader] =
        <[Member; 2]>::try_from(members(&app, "idem", 2).await).unwrap_or_else(|_| unreachable!());
    let article = publish(&app, &author, "keyed").await;
    let keyed = |path: &str| {
        app.client
            .post(app.url(path))
            .bearer_auth(&reader.token)
            .header("user-agent", common::UA)
            .header("idempotency-key", "query-1")
            .json(&comment_body(article, None, "once"))
    };
    let first = keyed("/comments").send().await.unwrap();
    assert!(!first.headers().contains_key("idempotent-replayed"));
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["code"], 0, "{first}");
    // The same request again: a replay.
    let again = keyed("/comments").send().await.unwrap();
    assert!(again.headers().contains_key("idempotent-replayed"));
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    // Another query string: another request, refused like another body.
    let other = keyed("/comments?x=1").send().await.unwrap();
    assert!(!other.headers().contains_key("idempotent-replayed"));
    let other: Value = other.json().await.unwrap();
    assert_eq!(other["code"], 4, "{other}");
    assert!(
        other["msg"].as_str().unwrap().contains("Idempotency-Key"),
        "{other}"
    );
    assert_eq!(
        total(&app, &author, article).await,
        1,
        "one comment written"
    );
}

setup_tests!(
    a_thread_of_ten_thousand_pages_every_comment_once_while_comments_arrive,
    deleting_a_parent_keeps_its_replies_reachable,
    only_the_comment_author_and_the_object_author_may_delete,
    counts_stay_exact_under_concurrent_creates_and_deletes,
    input_objects_and_parents_are_checked,
    each_user_may_write_only_so_many_comments_per_window,
    comments_reach_the_feeds_of_the_author_and_the_user_replied_to,
    an_idempotency_key_covers_the_query_string,
);
