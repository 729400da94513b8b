//! Visitors without an account read the community's public content — lists of published
//! articles, author pages, comments, tags — and write nothing; with `anonymous_reading` off,
//! every one of those routes needs a login, as in the course's backend.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::time::{Duration, Instant};

use platform::testing::{wait_until, TestDb};
use reqwest::header::{COOKIE, SET_COOKIE};
use serde_json::{json, Value};
use webook::{article::settings::ArticleSettings, auth::settings::AuthSettings, testing::TestApp};

use crate::common::{self, call, get, member, post, publish, Member, Setup, UA};

async fn app(setup: Setup, anonymous_reading: bool) -> TestApp {
    setup
        .spawn(|config| {
            let auth = config.settings_mut::<AuthSettings>();
            auth.auth_rate_limit = 1_000_000;
            auth.write_rate_limit = 0;
            auth.anonymous_reading = anonymous_reading;
        })
        .await
}

/// What a visitor reads: an author, a published article with a comment and a reply, a tag on
/// it, and a draft with a tag of its own.
struct Content {
    author: Member,
    fan: Member,
    article: i64,
    root: i64,
    tag: i64,
    draft: i64,
}

async fn content(app: &TestApp) -> Content {
    let author = member(app, "author").await;
    let fan = member(app, "fan").await;
    let followed = post(
        app,
        "/follow/follow",
        Some(&fan.token),
        json!({"followee": author.uid}),
    )
    .await;
    assert_eq!(followed.code(), 0, "{}", followed.raw);
    let article = publish(app, &author, "Read me without an account").await;
    let ok = |answer: common::Answer| {
        assert_eq!(answer.code(), 0, "{}", answer.raw);
        answer.json()["data"].clone()
    };
    let comment = |parent: Option<i64>| {
        let mut body = json!({"biz": "article", "bizId": article, "content": "first"});
        if let Some(parent) = parent {
            body["parentId"] = json!(parent);
        }
        post(app, "/comments", Some(&author.token), body)
    };
    let root = ok(comment(None).await).as_i64().unwrap();
    ok(comment(Some(root)).await);
    let tag = ok(post(app, "/tags", Some(&author.token), json!({"name": "rust"})).await)
        .as_i64()
        .unwrap();
    let draft = ok(post(
        app,
        "/articles/edit",
        Some(&author.token),
        json!({"title": "a draft", "content": "<p>not yet</p>"}),
    )
    .await)
    .as_i64()
    .unwrap();
    for object in [article, draft] {
        let attach = json!({"biz": "article", "bizId": object, "tids": [tag]});
        ok(post(app, "/tags/attach", Some(&author.token), attach).await);
    }
    Content {
        author,
        fan,
        article,
        root,
        tag,
        draft,
    }
}

/// What an answer's data must show.
type Shows = Box<dyn Fn(&Value) -> bool>;

/// The routes a visitor may read, with what each answer's data must show.
fn readable(c: &Content) -> Vec<(String, Shows)> {
    let article = c.article;
    let has_article = move |items: &Value| {
        items
            .as_array()
            .is_some_and(|items| items.iter().any(|item| item["id"] == json!(article)))
    };
    let (author, fan, root, tag) = (c.author.uid, c.fan.uid, c.root, c.tag);
    vec![
        (
            format!("/articles/pub/{article}"),
            Box::new(move |data: &Value| data["id"] == json!(article)),
        ),
        (
            "/articles/pub".to_owned(),
            Box::new(move |data: &Value| has_article(&data["items"])),
        ),
        (
            format!("/articles/pub?author={author}"),
            Box::new(move |data: &Value| has_article(&data["items"])),
        ),
        (
            format!("/users/{author}"),
            Box::new(move |data: &Value| data["id"] == json!(author)),
        ),
        (
            format!("/follow/static?uid={author}"),
            Box::new(|data: &Value| data["followers"] == json!(1)),
        ),
        (
            format!("/follow/followers?uid={author}"),
            Box::new(move |data: &Value| {
                data["items"][0]["id"] == json!(fan) && data["items"][0]["followed"] == json!(false)
            }),
        ),
        (
            format!("/follow/followees?uid={fan}"),
            Box::new(move |data: &Value| data["items"][0]["id"] == json!(author)),
        ),
        (
            "/topics/rust".to_owned(),
            Box::new(move |data: &Value| has_article(&data["articles"]["items"])),
        ),
        (
            format!("/comments?biz=article&bizId={article}"),
            Box::new(move |data: &Value| {
                data["total"] == json!(2) && data["items"][0]["id"] == json!(root)
            }),
        ),
        (
            format!("/comments/{root}/replies"),
            Box::new(|data: &Value| data["items"].as_array().is_some_and(|r| r.len() == 1)),
        ),
        (
            format!("/tags/biz?biz=article&bizId={article}"),
            Box::new(move |data: &Value| data[0]["id"] == json!(tag)),
        ),
        (
            format!("/tags/{tag}/articles"),
            Box::new(move |data: &Value| has_article(&data["items"])),
        ),
    ]
}

/// A signed-in reader reads `path`, and the answer shows what it must.
async fn signed_in_reads(app: &TestApp, c: &Content, path: &str, shows: &Shows) {
    let answer = get(app, path, Some(&c.author.token)).await;
    assert_eq!(answer.code(), 0, "{path}: {}", answer.raw);
    assert!(shows(&answer.json()["data"]), "{path}: {}", answer.raw);
}

async fn a_visitor_reads_lists_authors_comments_and_tags_and_writes_nothing(setup: Setup) {
    let app = app(setup, true).await;
    let c = content(&app).await;
    for (path, shows) in readable(&c) {
        let answer = get(&app, &path, None).await;
        assert_eq!(answer.code(), 0, "{path}: {}", answer.raw);
        assert!(shows(&answer.json()["data"]), "{path}: {}", answer.raw);
        // A signed-in reader gets the same (but counters: the reader view counts reads).
        signed_in_reads(&app, &c, &path, &shows).await;
        // A token that does not check out is refused, not taken for a visitor.
        let stale = get(&app, &path, Some("not-a-token")).await;
        assert_eq!(stale.status, 401, "{path}: {}", stale.raw);
    }
    // A visitor names whose follow counts they read.
    assert_eq!(get(&app, "/follow/static", None).await.code(), 4);
    // A draft's tags stay its author's.
    let draft_tags = format!("/tags/biz?biz=article&bizId={}", c.draft);
    assert_eq!(get(&app, &draft_tags, None).await.code(), 404001);
    assert_eq!(
        get(&app, &draft_tags, Some(&c.author.token)).await.code(),
        0
    );
    // Writing anything needs an account.
    let writes = [
        (
            "/comments",
            json!({"biz": "article", "bizId": c.article, "content": "hi"}),
        ),
        ("/articles/pub/like", json!({"id": c.article, "like": true})),
        (
            "/articles/pub/collect",
            json!({"id": c.article, "cid": 0, "collect": true}),
        ),
        ("/tags", json!({"name": "go"})),
        ("/articles/publish", json!({"title": "t", "content": "c"})),
    ];
    for (path, body) in writes {
        let answer = post(&app, path, None, body).await;
        assert_eq!(
            (answer.status.as_u16(), answer.code()),
            (401, 401001),
            "{path}: {}",
            answer.raw
        );
    }
    // Nothing a visitor did was written: one comment and its reply, no like.
    let thread = get(
        &app,
        &format!("/comments?biz=article&bizId={}", c.article),
        None,
    )
    .await;
    assert_eq!(thread.json()["data"]["total"], 2);
}

async fn with_anonymous_reading_off_every_reader_route_needs_a_login(setup: Setup) {
    let app = app(setup, false).await;
    let c = content(&app).await;
    for (path, shows) in readable(&c) {
        let answer = get(&app, &path, None).await;
        assert_eq!(
            (answer.status.as_u16(), answer.code()),
            (401, 401001),
            "{path}: {}",
            answer.raw
        );
        signed_in_reads(&app, &c, &path, &shows).await;
    }
}

/// The read count of article `id` in `db`.
async fn reads_in(db: &TestDb, id: i64) -> i64 {
    sqlx::query_scalar("SELECT read_cnt FROM interactives WHERE biz = 'article' AND biz_id = $1")
        .bind(id)
        .fetch_optional(db.db.pool())
        .await
        .unwrap()
        .unwrap_or(0)
}

/// A visitor's view of article `id` from `agent`, with `cookie` if given: the answer and the
/// visitor cookie it sets, if any.
async fn visit(app: &TestApp, id: i64, agent: &str, cookie: Option<&str>) -> Option<String> {
    let mut request = app
        .client
        .get(app.url(&format!("/articles/pub/{id}")))
        .header(reqwest::header::USER_AGENT, agent);
    if let Some(cookie) = cookie {
        request = request.header(COOKIE, cookie);
    }
    let response = request.send().await.unwrap();
    let set = response.headers().get(SET_COOKIE).map(|value| {
        value
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_owned()
    });
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["data"]["id"], id, "{body}");
    assert_eq!(body["data"]["liked"], false, "{body}");
    set
}

async fn a_visitor_counts_one_read_per_window_and_a_crawler_none(setup: Setup) {
    const WINDOW: Duration = Duration::from_secs(3);
    let db = setup.database().await;
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let configure = |config: &mut platform::config::Config| {
        let auth = config.settings_mut::<AuthSettings>();
        auth.auth_rate_limit = 1_000_000;
        auth.write_rate_limit = 0;
        config
            .settings_mut::<ArticleSettings>()
            .anonymous_read_window = WINDOW;
    };
    let app = setup.spawn_on(db.clone(), &prefix, configure).await;
    let author = member(&app, "author").await;
    let id = publish(&app, &author, "Counted once per visitor").await;

    // A first visit: counted, and the answer sets the visitor cookie.
    let started = Instant::now();
    let cookie = visit(&app, id, UA, None).await.expect("a visitor cookie");
    assert!(cookie.starts_with("webook_visitor="), "{cookie}");
    // The same browser again, with and without its cookie: not counted, no new cookie.
    assert_eq!(visit(&app, id, UA, Some(&cookie)).await, None);
    assert!(visit(&app, id, UA, None).await.is_some());
    // Another browser at the same address is another visitor; so is another cookie.
    visit(&app, id, "Mozilla/5.0 (another browser)", None).await;
    let stranger = format!("webook_visitor={}", "ab".repeat(16));
    assert_eq!(visit(&app, id, UA, Some(&stranger)).await, None);
    // Crawlers and link previews: never counted.
    for crawler in [
        "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
        "",
    ] {
        visit(&app, id, crawler, None).await;
    }
    // A signed-in reader counts every view, as in the course.
    for _ in 0..2 {
        let view = call(
            &app,
            reqwest::Method::GET,
            &format!("/articles/pub/{id}"),
            Some(&author.token),
            UA,
            None,
        )
        .await;
        assert_eq!(view.code(), 0, "{}", view.raw);
    }
    // 3 visitors + 2 signed-in views.
    let counted = 5;
    assert!(
        started.elapsed() < WINDOW,
        "the visits outlasted the window"
    );
    // The window over, the first visitor counts again.
    tokio::time::sleep(
        (started + WINDOW + Duration::from_millis(200)).saturating_duration_since(Instant::now()),
    )
    .await;
    visit(&app, id, UA, Some(&cookie)).await;
    let counted = counted + 1;

    // Exact: the reads applied, and no more once everything is drained.
    wait_until("the reads to be applied", || async {
        reads_in(&db, id).await >= counted
    })
    .await;
    app.stop().await.unwrap();
    assert_eq!(reads_in(&db, id).await, counted);
}

setup_tests!(
    a_visitor_counts_one_read_per_window_and_a_crawler_none,
    a_visitor_reads_lists_authors_comments_and_tags_and_writes_nothing,
    with_anonymous_reading_off_every_reader_route_needs_a_login,
);
