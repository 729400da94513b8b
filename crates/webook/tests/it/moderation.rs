//! Moderation on {SQLite, PostgreSQL} × {embedded, Redis}: reports are checked, filed once per
//! reporter and target, rate-limited and grouped into the review queue with the target as it
//! was; an admin's hide takes a reported article out of the reader view, the public page, the
//! lists, the hot list, the follower's feed, search and its topic (its author still sees it, and
//! why, and cannot publish it again), and a restore brings it back everywhere; a hidden comment
//! leaves its thread (a tombstone while replies point at it) and the counts, takes no replies
//! and comes back; a suspended account reads but cannot write until the suspension ends or is
//! lifted; new accounts write less; every action is logged, and repeating one changes nothing;
//! a comment the word lists hold shows only once approved; each action tells the author (or
//! the account) what happened and why, once per target and action.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use common::{get, member, post, publish, Member, Setup};
use platform::{db::now_millis, testing::wait_until};
use reqwest::StatusCode;
use serde_json::{json, Value};
use webook::{moderation::settings::ModerationSettings, testing::TestApp};

setup_tests!(
    reports_are_checked_filed_once_and_queued_with_their_target,
    a_hidden_article_leaves_every_surface_and_a_restore_brings_it_back,
    a_hidden_comment_leaves_its_thread_and_counts_and_comes_back,
    a_suspended_account_reads_but_cannot_write_until_lifted,
    new_accounts_write_less,
    word_lists_refuse_or_hold_what_is_written,
    held_comments_show_only_once_approved,
    moderation_actions_tell_whom_they_concern_once_and_why,
);

/// Two cluster instances on one database and Redis, the first account an admin, word lists
/// polled every 100 ms.
async fn pair() -> (TestApp, TestApp, Member) {
    let (first, second) = common::cluster_pair(|config| {
        let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
        auth.admins = vec![1];
        auth.auth_rate_limit = 1_000_000;
        auth.write_rate_limit = 0;
        config
            .settings_mut::<webook::screening::settings::ScreeningSettings>()
            .screening_poll = std::time::Duration::from_millis(100);
    })
    .await;
    let admin = member(&first, "admin").await;
    assert_eq!(admin.uid, 1);
    (first, second, admin)
}

/// A hide on one instance: the other, which had the reader copy cached, answers 404001 as soon
/// as the action returns (the same versioned cache as a withdrawal); a comment hidden there is
/// gone from the other's thread at once; a suspension there refuses writes here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hide_or_suspension_on_one_instance_holds_on_the_other_at_once() {
    let (first, second, admin) = pair().await;
    let author = member(&first, "author").await;
    let reader = member(&second, "reader").await;
    let article = publish(&second, &author, "Cached").await;
    let leaf = comment(&second, &reader, article, None).await;
    for _ in 0..2 {
        expect(
            &get(
                &second,
                &format!("/articles/pub/{article}"),
                Some(&reader.token),
            )
            .await,
            0,
        );
    }
    assert_eq!(thread(&second, &reader, article).await.0.len(), 1);
    act(
        &first,
        &admin,
        json!({"kind": "article", "id": article, "action": "hide", "reason": "x"}),
    )
    .await;
    expect(
        &get(
            &second,
            &format!("/articles/pub/{article}"),
            Some(&reader.token),
        )
        .await,
        404_001,
    );
    assert_eq!(
        get(&second, &format!("/a/{article}"), None).await.status,
        StatusCode::NOT_FOUND
    );
    act(
        &first,
        &admin,
        json!({"kind": "article", "id": article, "action": "restore", "reason": "x"}),
    )
    .await;
    expect(
        &get(
            &second,
            &format!("/articles/pub/{article}"),
            Some(&reader.token),
        )
        .await,
        0,
    );
    act(
        &first,
        &admin,
        json!({"kind": "comment", "id": leaf, "action": "hide", "reason": "x"}),
    )
    .await;
    assert_eq!(thread(&second, &reader, article).await, (vec![], 0));
    act(
        &first,
        &admin,
        json!({"kind": "user", "id": reader.uid, "action": "suspend", "reason": "x"}),
    )
    .await;
    expect(
        &post(
            &second,
            "/articles/pub/like",
            Some(&reader.token),
            json!({"id": article, "like": true}),
        )
        .await,
        403_003,
    );
}

/// An edit of the word lists on one instance applies on the other within its poll, without a
/// restart, and so does a deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn word_list_edits_apply_on_every_instance_without_a_restart() {
    let (first, second, admin) = pair().await;
    let author = member(&second, "author").await;
    let draft = |title: &str| json!({"title": title, "content": "<p>hello</p>"});
    expect(
        &post(
            &second,
            "/articles/publish",
            Some(&author.token),
            draft("buy spamcoin"),
        )
        .await,
        0,
    );
    expect(
        &common::call(
            &first,
            reqwest::Method::PUT,
            "/admin/moderation/word-lists/coins",
            Some(&admin.token),
            common::UA,
            Some(json!({"action": "refuse", "words": ["spamcoin"]})),
        )
        .await,
        0,
    );
    wait_until("the other instance to refuse the new word", || async {
        post(
            &second,
            "/articles/publish",
            Some(&author.token),
            draft("buy SPAM coin"),
        )
        .await
        .code()
            == 4
    })
    .await;
    expect(
        &common::call(
            &first,
            reqwest::Method::DELETE,
            "/admin/moderation/word-lists/coins",
            Some(&admin.token),
            common::UA,
            None,
        )
        .await,
        0,
    );
    wait_until("the other instance to forget the deleted list", || async {
        post(
            &second,
            "/articles/publish",
            Some(&author.token),
            draft("buy spamcoin"),
        )
        .await
        .code()
            == 0
    })
    .await;
}

async fn put_list(app: &TestApp, admin: &Member, name: &str, body: Value) -> common::Answer {
    common::call(
        app,
        reqwest::Method::PUT,
        &format!("/admin/moderation/word-lists/{name}"),
        Some(&admin.token),
        common::UA,
        Some(body),
    )
    .await
}

/// A refusing list refuses articles and comments naming the list, whatever the disguise; a
/// holding list keeps an article from readers until a moderator restores (approves) it, and
/// lists it for review; lists are checked at the edge and only admins edit them.
async fn word_lists_refuse_or_hold_what_is_written(setup: Setup) {
    let (app, admin) = app(setup).await;
    let author = member(&app, "author").await;
    let reader = member(&app, "reader").await;
    let article = publish(&app, &author, "Open").await;
    expect(
        &put_list(
            &app,
            &admin,
            "contact",
            json!({"action": "refuse", "words": ["微信", "WeChat"]}),
        )
        .await,
        0,
    );
    expect(
        &put_list(
            &app,
            &admin,
            "ads",
            json!({"action": "hold", "words": ["代开发票"]}),
        )
        .await,
        0,
    );
    for (body, field) in [
        (json!({"action": "block", "words": ["x"]}), "action"),
        (json!({"action": "hold", "words": ["..."]}), "words"),
        (
            json!({"action": "hold", "words": ["x".repeat(65)]}),
            "words",
        ),
    ] {
        let answer = put_list(&app, &admin, "bad", body).await;
        assert!(
            expect(&answer, 4)["msg"].as_str().unwrap().contains(field),
            "{}",
            answer.raw
        );
    }
    expect(
        &put_list(
            &app,
            &reader,
            "mine",
            json!({"action": "hold", "words": ["x"]}),
        )
        .await,
        403_002,
    );
    let lists = expect(
        &get(&app, "/admin/moderation/word-lists", Some(&admin.token)).await,
        0,
    );
    let names: Vec<&str> = lists["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|list| list["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ads", "contact"]);

    for content in [
        "<p>加我微 信</p>",
        "<p>add me on ＷＥ-CHAT</p>",
        "<p>微<b>信</b></p>",
    ] {
        let refused = publish_as(&app, &author, json!({"title": "hi", "content": content})).await;
        let msg = expect(&refused, 4)["msg"].as_str().unwrap().to_owned();
        assert!(msg.contains("contact"), "{content}: {msg}");
    }
    let refused = post(
        &app,
        "/comments",
        Some(&reader.token),
        json!({"biz": "article", "bizId": article, "content": "ping me on we.chat"}),
    )
    .await;
    expect(&refused, 4);
    // A class of words that only contain a listed word is not refused.
    expect(
        &publish_as(
            &app,
            &author,
            json!({"title": "wechatty birds", "content": "<p>chatter</p>"}),
        )
        .await,
        0,
    );

    let held = expect(
        &publish_as(
            &app,
            &author,
            json!({"title": "Services", "content": "<p>代开<b>发票</b>, cheap</p>"}),
        )
        .await,
        0,
    )["data"]
        .as_i64()
        .unwrap();
    expect(
        &get(&app, &format!("/articles/pub/{held}"), Some(&reader.token)).await,
        404_001,
    );
    let mine = author_item(&app, &author, held).await;
    assert!(
        mine["hidden"]
            .as_str()
            .unwrap()
            .starts_with("held for review"),
        "{mine}"
    );
    assert!(mine["hidden"].as_str().unwrap().contains("ads"), "{mine}");
    let queue = expect(
        &get(&app, "/admin/moderation/held", Some(&admin.token)).await,
        0,
    );
    assert_eq!(ids(&queue["data"]), [held]);
    // The author may fix it and publish again: screened again, clean, published.
    let fixed = publish_as(
        &app,
        &author,
        json!({"id": held, "title": "Services", "content": "<p>accounting</p>"}),
    )
    .await;
    expect(&fixed, 0);
    expect(
        &get(&app, &format!("/articles/pub/{held}"), Some(&reader.token)).await,
        0,
    );
    // Held again by an edit: readers lose the published version until a moderator approves.
    expect(
        &publish_as(
            &app,
            &author,
            json!({"id": held, "title": "Services", "content": "<p>代开发票</p>"}),
        )
        .await,
        0,
    );
    expect(
        &get(&app, &format!("/articles/pub/{held}"), Some(&reader.token)).await,
        404_001,
    );
    // A moderator hides the held article: it is theirs now, its author may not publish it again
    // (not even fixed), and it leaves the held list.
    let hidden = act(
        &app,
        &admin,
        json!({"kind": "article", "id": held, "action": "hide", "reason": "looks like fraud"}),
    )
    .await;
    assert_eq!(hidden["changed"], true, "{hidden}");
    let queue = expect(
        &get(&app, "/admin/moderation/held", Some(&admin.token)).await,
        0,
    );
    assert_eq!(ids(&queue["data"]), Vec::<i64>::new());
    expect(
        &publish_as(
            &app,
            &author,
            json!({"id": held, "title": "Services", "content": "<p>accounting</p>"}),
        )
        .await,
        403_002,
    );
    assert_eq!(
        author_item(&app, &author, held).await["hidden"],
        "looks like fraud"
    );
    let approved = act(
        &app,
        &admin,
        json!({"kind": "article", "id": held, "action": "restore", "reason": "legitimate"}),
    )
    .await;
    assert_eq!(approved["changed"], true);
    expect(
        &get(&app, &format!("/articles/pub/{held}"), Some(&reader.token)).await,
        0,
    );
    let queue = expect(
        &get(&app, "/admin/moderation/held", Some(&admin.token)).await,
        0,
    );
    assert_eq!(ids(&queue["data"]), Vec::<i64>::new());
}

/// An app whose first account (signed up here) is an admin, without the general write limit
/// (and so without the new-account limit); `configure` adjusts the config last.
async fn app_with(
    setup: Setup,
    configure: impl FnOnce(&mut platform::config::Config),
) -> (TestApp, Member) {
    let app = setup
        .spawn(|config| {
            let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
            auth.admins = vec![1];
            auth.auth_rate_limit = 1_000_000;
            auth.write_rate_limit = 0;
            // The hot list is computed by the tests (rank), never by the schedule meanwhile.
            config
                .settings_mut::<webook::ranking::RankingSettings>()
                .ranking_schedule = "@yearly".to_owned();
            configure(config);
        })
        .await;
    let admin = member(&app, "admin").await;
    assert_eq!(admin.uid, 1, "the first account is the admin");
    (app, admin)
}

async fn app(setup: Setup) -> (TestApp, Member) {
    app_with(setup, |_| {}).await
}

/// Asserts an answer's HTTP status and business code; returns its JSON.
#[track_caller]
fn expect(answer: &common::Answer, code: i64) -> Value {
    assert_eq!(
        answer.status_and_code(),
        (StatusCode::OK, code),
        "{}",
        answer.raw
    );
    answer.json()
}

async fn report(app: &TestApp, who: &Member, kind: &str, id: i64, reason: &str) -> common::Answer {
    post(
        app,
        "/moderation/reports",
        Some(&who.token),
        json!({"kind": kind, "id": id, "reason": reason, "note": "look"}),
    )
    .await
}

/// `POST /articles/publish` of `body` as `who`: the answer, whatever it is.
async fn publish_as(app: &TestApp, who: &Member, body: Value) -> common::Answer {
    post(app, "/articles/publish", Some(&who.token), body).await
}

/// `POST /admin/moderation/act` as `who`: the answer, whatever it is.
async fn act_answer(app: &TestApp, who: &Member, body: Value) -> common::Answer {
    post(app, "/admin/moderation/act", Some(&who.token), body).await
}

async fn act(app: &TestApp, admin: &Member, body: Value) -> Value {
    expect(
        &post(app, "/admin/moderation/act", Some(&admin.token), body).await,
        0,
    )["data"]
        .clone()
}

fn ids(items: &Value) -> Vec<i64> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect()
}

async fn queue(app: &TestApp, admin: &Member, sort: &str) -> Vec<Value> {
    expect(
        &get(
            app,
            &format!("/admin/moderation/queue?sort={sort}"),
            Some(&admin.token),
        )
        .await,
        0,
    )["data"]
        .as_array()
        .unwrap()
        .clone()
}

async fn comment(app: &TestApp, who: &Member, article: i64, parent: Option<i64>) -> i64 {
    let mut body = json!({"biz": "article", "bizId": article, "content": "a comment"});
    if let Some(parent) = parent {
        body["parentId"] = json!(parent);
    }
    expect(&post(app, "/comments", Some(&who.token), body).await, 0)["data"]
        .as_i64()
        .unwrap()
}

/// Reports: every field checked at the edge, a target readers cannot see is 404001, one's own is
/// refused, one open report per reporter and target (409001), the limit per window holds; the
/// queue groups open reports by target (most reported or newest first) with the snapshot of the
/// target as reported; dismissing closes them; only admins see the queue.
async fn reports_are_checked_filed_once_and_queued_with_their_target(setup: Setup) {
    let (app, admin) = app_with(setup, |config| {
        config
            .settings_mut::<ModerationSettings>()
            .moderation_report_limit = 5;
    })
    .await;
    let author = member(&app, "author").await;
    let readers = [member(&app, "r1").await, member(&app, "r2").await];
    let article = publish(&app, &author, "Spam here").await;
    let other = publish(&app, &author, "Another").await;

    for (body, field) in [
        (
            json!({"kind": "post", "id": article, "reason": "spam"}),
            "kind",
        ),
        (json!({"kind": "article", "id": 0, "reason": "spam"}), "id"),
        (
            json!({"kind": "article", "id": article, "reason": "bad"}),
            "reason",
        ),
        (
            json!({"kind": "article", "id": article, "reason": "other"}),
            "note",
        ),
        (
            json!({"kind": "article", "id": article, "reason": "spam", "note": "x".repeat(501)}),
            "note",
        ),
    ] {
        let answer = post(&app, "/moderation/reports", Some(&readers[0].token), body).await;
        assert!(
            expect(&answer, 4)["msg"].as_str().unwrap().contains(field),
            "{}",
            answer.raw
        );
    }
    expect(
        &report(&app, &readers[0], "article", 999_999, "spam").await,
        404_001,
    );
    expect(&report(&app, &author, "article", article, "spam").await, 4);
    expect(&report(&app, &author, "user", author.uid, "abuse").await, 4);
    assert_eq!(
        post(
            &app,
            "/moderation/reports",
            None,
            json!({"kind": "article", "id": article, "reason": "spam"})
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );

    let first = expect(
        &report(&app, &readers[0], "article", article, "spam").await,
        0,
    );
    assert!(first["data"].as_i64().unwrap() > 0);
    expect(
        &report(&app, &readers[0], "article", article, "abuse").await,
        409_001,
    );
    expect(
        &report(&app, &readers[1], "article", article, "illegal").await,
        0,
    );
    expect(
        &report(&app, &readers[1], "article", other, "spam").await,
        0,
    );
    // Reader 0 has used 2 of 5 (a refused duplicate counts too: 3); two more pass, then 429.
    expect(
        &report(&app, &readers[0], "article", other, "spam").await,
        0,
    );
    expect(
        &report(&app, &readers[0], "user", author.uid, "spam").await,
        0,
    );
    let limited = report(&app, &readers[0], "user", readers[1].uid, "spam").await;
    assert_eq!(
        limited.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        limited.raw
    );

    // Editing the article after the reports does not change what the queue shows.
    expect(
        &publish_as(
            &app,
            &author,
            json!({"id": article, "title": "Clean now", "content": "<p>clean</p>"}),
        )
        .await,
        0,
    );
    let by_count = queue(&app, &admin, "count").await;
    let targets: Vec<(String, i64, i64)> = by_count
        .iter()
        .map(|item| {
            (
                item["kind"].as_str().unwrap().to_owned(),
                item["id"].as_i64().unwrap(),
                item["open"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        targets,
        [
            ("article".to_owned(), other, 2),
            ("article".to_owned(), article, 2),
            ("user".to_owned(), author.uid, 1)
        ],
        "most reported first, ties by newest report: {by_count:?}"
    );
    let reports = by_count[1]["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 2);
    assert_eq!(reports[0]["reason"], "illegal", "newest first");
    assert!(
        reports[0]["snapshot"]
            .as_str()
            .unwrap()
            .starts_with("Spam here"),
        "{reports:?}"
    );
    let newest: Vec<i64> = queue(&app, &admin, "newest")
        .await
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect();
    assert_eq!(newest, [author.uid, other, article]);
    expect(
        &get(
            &app,
            "/admin/moderation/queue?sort=worst",
            Some(&admin.token),
        )
        .await,
        4,
    );
    let refused = get(&app, "/admin/moderation/queue", Some(&readers[0].token)).await;
    assert!(
        expect(&refused, 403_002)["msg"]
            .as_str()
            .unwrap()
            .contains("moderate"),
        "{}",
        refused.raw
    );

    let dismissed = act(
        &app,
        &admin,
        json!({"kind": "article", "id": other, "action": "dismiss", "reason": "not spam"}),
    )
    .await;
    assert_eq!(dismissed["closed"], 2, "{dismissed}");
    let left: Vec<i64> = queue(&app, &admin, "count")
        .await
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect();
    assert_eq!(left, [article, author.uid]);
    // Closed, a reporter may report it again.
    expect(
        &report(&app, &readers[1], "article", other, "spam").await,
        0,
    );
    let all = expect(
        &get(
            &app,
            &format!("/admin/moderation/reports?kind=article&id={other}"),
            Some(&admin.token),
        )
        .await,
        0,
    );
    let states: Vec<&str> = all["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|report| report["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["open", "dismissed", "dismissed"]);
}

/// Computes the hot list now, as the `n`th computation (the scheduled one is yearly here).
async fn rank(app: &TestApp, n: i64) {
    app.service::<webook::ranking::RankingService>()
        .compute((n, 0), now_millis(), |_| {}, || true)
        .await
        .unwrap();
}

/// What each surface shows of article `id` right now.
struct Surfaces {
    reader_view: i64,
    public_page: StatusCode,
    latest: bool,
    by_author: bool,
    hot: bool,
    feed: bool,
    search: bool,
    topic: bool,
    sitemap: bool,
}

async fn surfaces(
    app: &TestApp,
    reader: &Member,
    author: &Member,
    id: i64,
    word: &str,
) -> Surfaces {
    let token = Some(reader.token.as_str());
    let contains = |items: &Value| ids(items).contains(&id);
    let latest = get(app, "/articles/pub?limit=50", token).await.json();
    let by_author = get(
        app,
        &format!("/articles/pub?author={}&limit=50", author.uid),
        token,
    )
    .await
    .json();
    let hot = get(app, "/ranking/top", None).await.json();
    let feed = get(app, "/feed?limit=50", token).await.json();
    let feed_ids: Vec<i64> = feed["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|item| item["article"]["id"].as_i64())
        .collect();
    let search = get(app, &format!("/search?q={word}&type=article"), token)
        .await
        .json();
    let topic = get(app, "/topics/moderated", token).await.json();
    let sitemap = get(
        app,
        &format!("/sitemaps/articles/{}", id / webook::site::SITEMAP_PAGE),
        None,
    )
    .await;
    Surfaces {
        reader_view: get(app, &format!("/articles/pub/{id}"), token).await.code(),
        public_page: get(app, &format!("/a/{id}"), None).await.status,
        latest: contains(&latest["data"]["items"]),
        by_author: contains(&by_author["data"]["items"]),
        hot: contains(&hot["data"]),
        feed: feed_ids.contains(&id),
        search: contains(&search["data"]["articles"]["items"]),
        topic: contains(&topic["data"]["articles"]["items"]),
        sitemap: sitemap.raw.contains(&format!("/a/{id}</loc>")),
    }
}

impl Surfaces {
    fn everywhere(&self) -> bool {
        self.reader_view == 0
            && self.public_page == StatusCode::OK
            && self.latest
            && self.by_author
            && self.hot
            && self.feed
            && self.search
            && self.topic
            && self.sitemap
    }

    fn nowhere(&self) -> bool {
        self.reader_view == 404_001
            && self.public_page == StatusCode::NOT_FOUND
            && !self.latest
            && !self.by_author
            && !self.hot
            && !self.feed
            && !self.search
            && !self.topic
            && !self.sitemap
    }
}

async fn author_item(app: &TestApp, author: &Member, id: i64) -> Value {
    let list = expect(
        &post(
            app,
            "/articles/list",
            Some(&author.token),
            json!({"offset": 0, "limit": 10}),
        )
        .await,
        0,
    );
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["id"] == id)
        .cloned()
        .unwrap()
}

async fn a_hidden_article_leaves_every_surface_and_a_restore_brings_it_back(setup: Setup) {
    let (app, admin) = app(setup).await;
    let author = member(&app, "author").await;
    let reader = member(&app, "reader").await;
    expect(
        &post(
            &app,
            "/follow/follow",
            Some(&reader.token),
            json!({"followee": author.uid}),
        )
        .await,
        0,
    );
    let word = "zanzibarquokka";
    let id = expect(
        &publish_as(
            &app,
            &author,
            json!({"title": format!("About {word}"), "content": format!("<p>{word} facts</p>")}),
        )
        .await,
        0,
    )["data"]
        .as_i64()
        .unwrap();
    let tag = expect(
        &post(
            &app,
            "/tags",
            Some(&author.token),
            json!({"name": "Moderated"}),
        )
        .await,
        0,
    )["data"]
        .as_i64()
        .unwrap();
    expect(
        &post(
            &app,
            "/tags/attach",
            Some(&author.token),
            json!({"biz": "article", "bizId": id, "tids": [tag]}),
        )
        .await,
        0,
    );
    expect(
        &post(
            &app,
            "/articles/pub/like",
            Some(&reader.token),
            json!({"id": id, "like": true}),
        )
        .await,
        0,
    );
    rank(&app, 1).await;
    wait_until("the article to be on every surface", || async {
        surfaces(&app, &reader, &author, id, word)
            .await
            .everywhere()
    })
    .await;
    expect(&report(&app, &reader, "article", id, "spam").await, 0);

    let non_admin = act_answer(
        &app,
        &reader,
        json!({"kind": "article", "id": id, "action": "hide", "reason": "spam"}),
    )
    .await;
    expect(&non_admin, 403_002);
    for (body, field) in [
        (
            json!({"kind": "article", "id": id, "action": "suspend", "reason": "x"}),
            "action",
        ),
        (
            json!({"kind": "article", "id": id, "action": "hide", "reason": " "}),
            "reason",
        ),
        (
            json!({"kind": "article", "id": id, "action": "erase", "reason": "x"}),
            "action",
        ),
    ] {
        let answer = post(&app, "/admin/moderation/act", Some(&admin.token), body).await;
        assert!(
            expect(&answer, 4)["msg"].as_str().unwrap().contains(field),
            "{}",
            answer.raw
        );
    }
    expect(
        &act_answer(
            &app,
            &admin,
            json!({"kind": "article", "id": 999_999, "action": "hide", "reason": "x"}),
        )
        .await,
        404_001,
    );

    let hidden = act(
        &app,
        &admin,
        json!({"kind": "article", "id": id, "action": "hide", "reason": "advertising"}),
    )
    .await;
    assert_eq!(
        (&hidden["changed"], &hidden["closed"], &hidden["outcome"]),
        (&json!(true), &json!(1), &json!("hidden")),
        "{hidden}"
    );
    // The reader view, the public page and the (kept) sitemap at once (the write fixed the
    // caches); the rest as their consumers apply the withdrawal event.
    let now = surfaces(&app, &reader, &author, id, word).await;
    assert_eq!(
        (now.reader_view, now.public_page, now.sitemap),
        (404_001, StatusCode::NOT_FOUND, false)
    );
    wait_until("the hidden article to leave every surface", || async {
        surfaces(&app, &reader, &author, id, word).await.nowhere()
    })
    .await;
    let mine = author_item(&app, &author, id).await;
    assert_eq!(mine["hidden"], "advertising", "{mine}");
    let detail = expect(
        &get(&app, &format!("/articles/detail/{id}"), Some(&author.token)).await,
        0,
    );
    assert_eq!(detail["data"]["hidden"], "advertising");
    let republish = publish_as(
        &app,
        &author,
        json!({"id": id, "title": "again", "content": "<p>again</p>"}),
    )
    .await;
    expect(&republish, 403_002);
    assert_eq!(
        author_item(&app, &author, id).await["title"],
        format!("About {word}"),
        "a refused publish changes nothing"
    );
    // Withdrawn meanwhile, it stays hidden.
    expect(
        &post(
            &app,
            "/articles/withdraw",
            Some(&author.token),
            json!({"id": id}),
        )
        .await,
        0,
    );
    assert_eq!(
        author_item(&app, &author, id).await["hidden"],
        "advertising"
    );
    // A draft saved since (the author's copy is no longer "withdrawn") changes nothing either:
    // a restore gives back what the author left, a withdrawn article.
    expect(
        &post(
            &app,
            "/articles/edit",
            Some(&author.token),
            json!({"id": id, "title": format!("About {word}"), "content": "<p>draft</p>"}),
        )
        .await,
        0,
    );
    expect(
        &publish_as(
            &app,
            &author,
            json!({"id": id, "title": "t", "content": "<p>c</p>"}),
        )
        .await,
        403_002,
    );

    let again = act(
        &app,
        &admin,
        json!({"kind": "article", "id": id, "action": "hide", "reason": "advertising"}),
    )
    .await;
    assert_eq!(again["changed"], false, "{again}");

    // Restored while withdrawn: back to the author's private copy, not to readers.
    let restored = act(
        &app,
        &admin,
        json!({"kind": "article", "id": id, "action": "restore", "reason": "appeal upheld"}),
    )
    .await;
    assert_eq!(restored["changed"], true, "{restored}");
    assert!(author_item(&app, &author, id).await.get("hidden").is_none());
    assert_eq!(
        get(&app, &format!("/articles/pub/{id}"), Some(&reader.token))
            .await
            .code(),
        404_001
    );
    // The author publishes it again: every surface has it back.
    expect(
        &publish_as(&app, &author, json!({"id": id, "title": format!("About {word}"), "content": format!("<p>{word} facts</p>")})).await,
        0,
    );
    rank(&app, 2).await;
    wait_until("the restored article to be back everywhere", || async {
        surfaces(&app, &reader, &author, id, word)
            .await
            .everywhere()
    })
    .await;

    // Hidden again, then restored straight away: readers get it back without its author.
    act(
        &app,
        &admin,
        json!({"kind": "article", "id": id, "action": "hide", "reason": "again"}),
    )
    .await;
    wait_until("hidden again", || async {
        surfaces(&app, &reader, &author, id, word).await.nowhere()
    })
    .await;
    act(
        &app,
        &admin,
        json!({"kind": "article", "id": id, "action": "restore", "reason": "ok"}),
    )
    .await;
    rank(&app, 3).await;
    wait_until("restored to readers", || async {
        surfaces(&app, &reader, &author, id, word)
            .await
            .everywhere()
    })
    .await;

    // Removed for good: no restore brings it back.
    let removed = act(
        &app,
        &admin,
        json!({"kind": "article", "id": id, "action": "delete", "reason": "illegal"}),
    )
    .await;
    assert_eq!(removed["outcome"], "deleted");
    let restore = act(
        &app,
        &admin,
        json!({"kind": "article", "id": id, "action": "restore", "reason": "oops"}),
    )
    .await;
    assert_eq!(restore["changed"], false, "{restore}");
    assert_eq!(
        get(&app, &format!("/articles/pub/{id}"), Some(&reader.token))
            .await
            .code(),
        404_001
    );

    let log = expect(
        &get(
            &app,
            &format!("/admin/moderation/log?kind=article&id={id}"),
            Some(&admin.token),
        )
        .await,
        0,
    );
    let entries: Vec<(String, String, i64)> = log["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["action"].as_str().unwrap().to_owned(),
                entry["reason"].as_str().unwrap().to_owned(),
                entry["admin"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, String, i64)> = [
        ("restore", "oops"),
        ("delete", "illegal"),
        ("restore", "ok"),
        ("hide", "again"),
        ("restore", "appeal upheld"),
        ("hide", "advertising"),
        ("hide", "advertising"),
    ]
    .iter()
    .map(|(action, reason)| ((*action).to_owned(), (*reason).to_owned(), admin.uid))
    .collect();
    assert_eq!(entries, expected, "newest first");
    assert!(log["data"][0]["outcome"]
        .as_str()
        .unwrap()
        .starts_with("unchanged"));
}

/// The comments of an article's thread, as (id, deleted, content) top level and replies.
async fn thread(app: &TestApp, reader: &Member, article: i64) -> (Vec<(i64, bool, String)>, i64) {
    let page = expect(
        &get(
            app,
            &format!("/comments?biz=article&bizId={article}&limit=50"),
            Some(&reader.token),
        )
        .await,
        0,
    );
    let mut shown = Vec::new();
    for item in page["data"]["items"].as_array().unwrap() {
        for comment in std::iter::once(item).chain(item["replies"].as_array().unwrap().iter()) {
            shown.push((
                comment["id"].as_i64().unwrap(),
                comment["deleted"].as_bool().unwrap(),
                comment["content"].as_str().unwrap().to_owned(),
            ));
        }
    }
    (shown, page["data"]["total"].as_i64().unwrap())
}

async fn a_hidden_comment_leaves_its_thread_and_counts_and_comes_back(setup: Setup) {
    let (app, admin) = app(setup).await;
    let author = member(&app, "author").await;
    let reader = member(&app, "reader").await;
    let troll = member(&app, "troll").await;
    let article = publish(&app, &author, "Thread").await;
    let root = comment(&app, &troll, article, None).await;
    let reply = comment(&app, &reader, article, Some(root)).await;
    let leaf = comment(&app, &troll, article, None).await;
    let text = "a comment".to_owned();
    assert_eq!(
        thread(&app, &reader, article).await,
        (
            vec![
                (leaf, false, text.clone()),
                (root, false, text.clone()),
                (reply, false, text.clone())
            ],
            3
        )
    );
    for id in [root, leaf] {
        expect(&report(&app, &reader, "comment", id, "abuse").await, 0);
    }
    for id in [root, leaf] {
        let hidden = act(
            &app,
            &admin,
            json!({"kind": "comment", "id": id, "action": "hide", "reason": "abuse"}),
        )
        .await;
        assert_eq!(
            (&hidden["changed"], &hidden["closed"]),
            (&json!(true), &json!(1))
        );
    }
    // The root has a reply: a tombstone; the leaf is gone; the counts left both.
    assert_eq!(
        thread(&app, &reader, article).await,
        (
            vec![(root, true, String::new()), (reply, false, text.clone())],
            1
        )
    );
    let view = expect(
        &get(
            &app,
            &format!("/articles/pub/{article}"),
            Some(&reader.token),
        )
        .await,
        0,
    );
    assert_eq!(view["data"]["commentCnt"], 1, "{view}");
    expect(
        &report(&app, &reader, "comment", leaf, "spam").await,
        404_001,
    );
    let answer = post(
        &app,
        "/comments",
        Some(&reader.token),
        json!({"biz": "article", "bizId": article, "content": "re", "parentId": leaf}),
    )
    .await;
    expect(&answer, 404_001);
    // Its author cannot delete it either: it is the moderators' now.
    assert_eq!(
        common::call(
            &app,
            reqwest::Method::DELETE,
            &format!("/comments/{leaf}"),
            Some(&troll.token),
            common::UA,
            None
        )
        .await
        .code(),
        404_001
    );
    let again = act(
        &app,
        &admin,
        json!({"kind": "comment", "id": leaf, "action": "hide", "reason": "abuse"}),
    )
    .await;
    assert_eq!(again["changed"], false);

    let restored = act(
        &app,
        &admin,
        json!({"kind": "comment", "id": leaf, "action": "restore", "reason": "fine"}),
    )
    .await;
    assert_eq!(restored["changed"], true);
    assert_eq!(
        thread(&app, &reader, article).await,
        (
            vec![
                (leaf, false, text.clone()),
                (root, true, String::new()),
                (reply, false, text.clone())
            ],
            2
        )
    );
    // A moderator deletes the hidden root: the tombstone stays for its reply, counts unchanged;
    // then the restored leaf: gone, counted out.
    for id in [root, leaf] {
        let deleted = act(
            &app,
            &admin,
            json!({"kind": "comment", "id": id, "action": "delete", "reason": "abuse"}),
        )
        .await;
        assert_eq!(deleted["outcome"], "deleted");
    }
    assert_eq!(
        thread(&app, &reader, article).await,
        (
            vec![(root, true, String::new()), (reply, false, text.clone())],
            1
        )
    );
    let restore = act_answer(
        &app,
        &admin,
        json!({"kind": "comment", "id": root, "action": "restore", "reason": "no"}),
    )
    .await;
    expect(&restore, 404_001);
    let missing = act_answer(
        &app,
        &admin,
        json!({"kind": "comment", "id": 999_999, "action": "delete", "reason": "x"}),
    )
    .await;
    expect(&missing, 404_001);
    assert_eq!(
        thread(&app, &reader, article).await.0[0],
        (root, true, String::new()),
        "a deleted comment stays deleted"
    );
}

async fn a_suspended_account_reads_but_cannot_write_until_lifted(setup: Setup) {
    let (app, admin) = app(setup).await;
    let author = member(&app, "author").await;
    let user = member(&app, "suspect").await;
    let article = publish(&app, &author, "Readable").await;
    let own = publish(&app, &user, "Mine").await;
    let own_comment = comment(&app, &user, article, None).await;
    expect(&report(&app, &author, "user", user.uid, "spam").await, 0);

    let past = act_answer(
        &app,
        &admin,
        json!({"kind": "user", "id": user.uid, "action": "suspend", "reason": "spam",
               "until": now_millis() - 1}),
    )
    .await;
    expect(&past, 4);
    let myself = act_answer(
        &app,
        &admin,
        json!({"kind": "user", "id": admin.uid, "action": "suspend", "reason": "x"}),
    )
    .await;
    expect(&myself, 4);
    let until = now_millis() + 3_600_000;
    let suspended = act(
        &app,
        &admin,
        json!({"kind": "user", "id": user.uid, "action": "suspend", "reason": "spam links",
               "until": until, "hideContent": true}),
    )
    .await;
    assert_eq!(
        (&suspended["changed"], &suspended["closed"]),
        (&json!(true), &json!(1)),
        "{suspended}"
    );

    let token = Some(user.token.as_str());
    let writes = [
        (
            "/articles/publish",
            json!({"title": "t", "content": "<p>c</p>"}),
        ),
        (
            "/articles/edit",
            json!({"title": "t", "content": "<p>c</p>"}),
        ),
        ("/articles/pub/like", json!({"id": article, "like": true})),
        (
            "/comments",
            json!({"biz": "article", "bizId": article, "content": "hi"}),
        ),
        ("/follow/follow", json!({"followee": author.uid})),
        ("/users/edit", json!({"nickname": "new"})),
        (
            "/moderation/reports",
            json!({"kind": "article", "id": article, "reason": "spam"}),
        ),
    ];
    for (path, body) in &writes {
        let answer = post(&app, path, token, body.clone()).await;
        let msg = expect(&answer, 403_003)["msg"].as_str().unwrap().to_owned();
        assert!(
            msg.contains("suspended") && msg.contains("spam links"),
            "{path}: {msg}"
        );
    }
    // Reads work, and the account can see why.
    expect(
        &get(&app, &format!("/articles/pub/{article}"), token).await,
        0,
    );
    expect(&get(&app, "/feed", token).await, 0);
    let me = expect(&get(&app, "/moderation/me", token).await, 0);
    assert_eq!(
        (&me["data"]["until"], &me["data"]["reason"]),
        (&json!(until), &json!("spam links"))
    );
    // Its content was hidden with it.
    assert_eq!(
        get(&app, &format!("/articles/pub/{own}"), Some(&author.token))
            .await
            .code(),
        404_001
    );
    let (shown, _) = thread(&app, &author, article).await;
    assert!(
        !shown.iter().any(|(id, _, _)| *id == own_comment),
        "{shown:?}"
    );
    // Each hidden item is logged as its own hide.
    let log = expect(
        &get(
            &app,
            &format!("/admin/moderation/log?kind=article&id={own}"),
            Some(&admin.token),
        )
        .await,
        0,
    );
    assert_eq!(log["data"][0]["action"], "hide", "{log}");
    assert_eq!(log["data"][0]["reason"], "spam links", "{log}");
    // Others are untouched.
    expect(
        &post(
            &app,
            "/articles/pub/like",
            Some(&author.token),
            json!({"id": own, "like": true}),
        )
        .await,
        404_001,
    );
    expect(
        &publish_as(&app, &author, json!({"title": "t", "content": "<p>c</p>"})).await,
        0,
    );

    let lifted = act(
        &app,
        &admin,
        json!({"kind": "user", "id": user.uid, "action": "lift", "reason": "appeal"}),
    )
    .await;
    assert_eq!(lifted["changed"], true);
    let again = act(
        &app,
        &admin,
        json!({"kind": "user", "id": user.uid, "action": "lift", "reason": "appeal"}),
    )
    .await;
    assert_eq!(again["changed"], false);
    expect(&get(&app, "/moderation/me", token).await, 0)["data"]
        .is_null()
        .then_some(())
        .expect("no suspension");
    for (path, body) in &writes[..6] {
        expect(&post(&app, path, token, body.clone()).await, 0);
    }

    // For good, without hiding content: its articles stay readable.
    let forever = act(
        &app,
        &admin,
        json!({"kind": "user", "id": user.uid, "action": "suspend", "reason": "repeat"}),
    )
    .await;
    assert_eq!(forever["outcome"], "suspended");
    let msg = expect(
        &post(
            &app,
            "/articles/pub/like",
            token,
            json!({"id": article, "like": false}),
        )
        .await,
        403_003,
    )["msg"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(msg.contains("for good"), "{msg}");
    assert!(expect(&get(&app, "/moderation/me", token).await, 0)["data"]["until"].is_null());
    expect(
        &act_answer(
            &app,
            &admin,
            json!({"kind": "user", "id": 999_999, "action": "suspend", "reason": "x"}),
        )
        .await,
        404_001,
    );
    expect(
        &act_answer(
            &app,
            &admin,
            json!({"kind": "user", "id": 999_998, "action": "lift", "reason": "x"}),
        )
        .await,
        404_001,
    );
}

/// An account younger than the new-account period makes at most the new-account number of
/// writes per window; an older one is not held to it; with the general write limit off (load
/// tests), neither is a new account.
async fn new_accounts_write_less(setup: Setup) {
    let limits = |config: &mut platform::config::Config| {
        let moderation = config.settings_mut::<ModerationSettings>();
        moderation.moderation_new_account_period = std::time::Duration::from_secs(3600);
        moderation.moderation_new_account_write_limit = 3;
    };
    let (app, _admin) = app_with(setup, |config| {
        limits(config);
        config
            .settings_mut::<webook::auth::settings::AuthSettings>()
            .write_rate_limit = 1_000;
    })
    .await;
    let newcomer = member(&app, "newcomer").await;
    let veteran = member(&app, "veteran").await;
    sqlx::query("UPDATE users SET ctime = ctime - 7200000 WHERE id = $1")
        .bind(veteran.uid)
        .execute(app.platform.db.writer())
        .await
        .unwrap();
    let draft = json!({"title": "t", "content": "<p>c</p>"});
    for _ in 0..3 {
        expect(
            &post(&app, "/articles/edit", Some(&newcomer.token), draft.clone()).await,
            0,
        );
    }
    // A course route: HTTP 200 with code 429001, as the course's frontend expects.
    let limited = post(&app, "/articles/edit", Some(&newcomer.token), draft.clone()).await;
    expect(&limited, 429_001);
    for _ in 0..5 {
        expect(
            &post(&app, "/articles/edit", Some(&veteran.token), draft.clone()).await,
            0,
        );
    }
    app.stop().await.unwrap();

    let (unlimited, _admin) = app_with(setup, limits).await;
    let newcomer = member(&unlimited, "newcomer").await;
    for _ in 0..5 {
        expect(
            &post(
                &unlimited,
                "/articles/edit",
                Some(&newcomer.token),
                draft.clone(),
            )
            .await,
            0,
        );
    }
}

/// `POST path` on a real server with `token`: the answer's envelope.
async fn server_post(
    server: &common::process::Server,
    token: &str,
    path: &str,
    body: Value,
) -> Value {
    reqwest::Client::new()
        .post(server.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `webook moderation …` on a running embedded server's data: the queue shows the report, a
/// suspension made offline refuses the user's next write on the server at once, lifting it lets
/// them write again, dismissing closes the report, and the log names each action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_moderation_command_suspends_lifts_and_dismisses_on_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut command = common::process::webook(dir);
    command.env("WEBOOK_LOG", "warn,webook::app=info");
    let server = common::process::Server::start(command);
    let password = "Moderation-Passw0rd!";
    let author = server
        .sign_up_and_log_in("author@example.com", password)
        .await;
    let reader = server
        .sign_up_and_log_in("reader@example.com", password)
        .await;
    let article = server_post(
        &server,
        &author,
        "/articles/publish",
        json!({"title": "Reported", "content": "<p>spam spam</p>"}),
    )
    .await["data"]
        .as_i64()
        .unwrap();
    let filed = server_post(
        &server,
        &reader,
        "/moderation/reports",
        json!({"kind": "article", "id": article, "reason": "spam", "note": "ads"}),
    )
    .await;
    assert_eq!(filed["code"], 0, "{filed}");
    let run = |args: &[&str]| {
        common::cli_succeeded(
            common::process::webook(dir)
                .env("WEBOOK_LOG", "warn")
                .args(args)
                .output()
                .unwrap(),
            args,
        )
    };
    let queue = common::table_cells(&run(&["moderation", "queue"]));
    assert_eq!(
        queue[0],
        ["KIND", "ID", "OPEN", "LATEST", "REASON", "AS REPORTED"]
    );
    assert_eq!(queue[1][..3], ["article", &article.to_string(), "1"]);
    assert_eq!(queue[1][4], "spam");
    assert!(queue[1][5].starts_with("Reported"), "{queue:?}");

    let suspended = run(&[
        "moderation",
        "suspend",
        "--user",
        "1",
        "--for",
        "1h",
        "--reason",
        "spam",
    ]);
    assert!(suspended.contains("user 1 suspended until"), "{suspended}");
    let refused = server_post(
        &server,
        &author,
        "/articles/edit",
        json!({"title": "t", "content": "<p>c</p>"}),
    )
    .await;
    assert_eq!(refused["code"], 403_003, "{refused}");
    assert!(
        refused["msg"].as_str().unwrap().contains("spam"),
        "{refused}"
    );
    let lifted = run(&["moderation", "lift", "--user", "1", "--reason", "appeal"]);
    assert!(lifted.contains("lifted"), "{lifted}");
    let written = server_post(
        &server,
        &author,
        "/articles/edit",
        json!({"title": "t", "content": "<p>c</p>"}),
    )
    .await;
    assert_eq!(written["code"], 0, "{written}");

    let dismissed = run(&[
        "moderation",
        "dismiss",
        "--kind",
        "article",
        "--id",
        &article.to_string(),
        "--reason",
        "fine",
    ]);
    assert!(dismissed.starts_with("1 open report(s)"), "{dismissed}");
    assert_eq!(run(&["moderation", "queue"]), "no open reports\n");
    let log = common::table_cells(&run(&["moderation", "log"]));
    let actions: Vec<&str> = log[1..].iter().map(|row| row[3].as_str()).collect();
    assert_eq!(actions, ["dismiss", "lift", "suspend"]);
    assert!(
        log[1][6].contains("fine (webook moderation, by "),
        "{log:?}"
    );
    let bad = common::cli_refused(
        common::process::webook(dir)
            .env("WEBOOK_LOG", "warn")
            .args(["moderation", "suspend", "--user", "999", "--reason", "x"])
            .output()
            .unwrap(),
        &[],
    );
    assert!(bad.contains("no user 999"), "{bad}");
}

/// `who`'s `moderation` notifications, newest first.
async fn notices(app: &TestApp, who: &Member) -> Vec<Value> {
    let answer = expect(
        &get(app, "/notifications?limit=100", Some(&who.token)).await,
        0,
    );
    answer["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["kind"] == "moderation")
        .cloned()
        .collect()
}

/// Waits until `who`'s newest moderation notification is `action` on `target`; returns it.
async fn notice_of(app: &TestApp, who: &Member, action: &str, target: &str) -> Value {
    wait_until(
        &format!("{} told {action} of a {target}", who.uid),
        || async {
            notices(app, who).await.first().is_some_and(|notice| {
                notice["moderation"]["action"] == action && notice["moderation"]["target"] == target
            })
        },
    )
    .await;
    notices(app, who).await.remove(0)
}

async fn held_comments(app: &TestApp, admin: &Member) -> Vec<i64> {
    ids(&expect(
        &get(app, "/admin/moderation/held-comments", Some(&admin.token)).await,
        0,
    )["data"])
}

/// A comment with a word of a holding list is written but shown to nobody, counted nowhere
/// and answerable by no one until an admin approves it (`restore`): then it shows, counts, and
/// its article's author hears of it; its own author is told it was approved. A delete rejects
/// one for good.
async fn held_comments_show_only_once_approved(setup: Setup) {
    let (app, admin) = app(setup).await;
    let author = member(&app, "author").await;
    let reader = member(&app, "reader").await;
    let article = publish(&app, &author, "Open").await;
    expect(
        &put_list(
            &app,
            &admin,
            "ads",
            json!({"action": "hold", "words": ["代开发票"]}),
        )
        .await,
        0,
    );
    let before = thread(&app, &reader, article).await;
    let shown = comment(&app, &reader, article, None).await;
    let posted = expect(
        &post(
            &app,
            "/comments",
            Some(&reader.token),
            json!({"biz": "article", "bizId": article, "content": "代开 发票, 找我"}),
        )
        .await,
        0,
    );
    let held = posted["data"].as_i64().unwrap();
    let msg = posted["msg"].as_str().unwrap();
    assert!(
        msg.contains("held for review") && msg.contains("ads"),
        "{msg}"
    );
    let (comments, total) = thread(&app, &reader, article).await;
    assert_eq!(total, before.1 + 1, "only the clean comment counts");
    assert!(
        comments.iter().all(|(id, _, _)| *id != held),
        "{comments:?}"
    );
    assert!(comments.iter().any(|(id, _, _)| *id == shown));
    let reply = post(
        &app,
        "/comments",
        Some(&author.token),
        json!({"biz": "article", "bizId": article, "parentId": held, "content": "what?"}),
    )
    .await;
    expect(&reply, 404_001);
    assert_eq!(held_comments(&app, &admin).await, [held]);
    expect(
        &get(&app, "/admin/moderation/held-comments", Some(&reader.token)).await,
        403_002,
    );
    let listed = expect(
        &get(&app, "/admin/moderation/held-comments", Some(&admin.token)).await,
        0,
    );
    assert_eq!(listed["data"][0]["authorId"], reader.uid);
    assert_eq!(listed["data"][0]["bizId"], article);
    assert!(listed["data"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("ads"));

    let approved = act(
        &app,
        &admin,
        json!({"kind": "comment", "id": held, "action": "restore", "reason": "an invoice joke"}),
    )
    .await;
    assert_eq!(approved["changed"], true, "{approved}");
    let (comments, total) = thread(&app, &reader, article).await;
    assert_eq!(total, before.1 + 2);
    assert!(comments
        .iter()
        .any(|(id, deleted, _)| *id == held && !deleted));
    assert_eq!(held_comments(&app, &admin).await, Vec::<i64>::new());
    let told = notice_of(&app, &reader, "approve", "comment").await;
    assert_eq!(told["comment"]["id"], held, "{told}");
    assert_eq!(told["moderation"]["reason"], "an invoice joke");
    // The article's author hears of the comment once it shows (never while it was held).
    wait_until("the author hears of the approved comment", || async {
        let answer = get(&app, "/notifications?limit=100", Some(&author.token)).await;
        answer.json()["data"]["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|item| item["kind"] == "comment" && item["comment"]["id"] == held)
    })
    .await;

    // Rejected: deleted, it never shows and nothing counts it.
    let rejected = expect(
        &post(
            &app,
            "/comments",
            Some(&reader.token),
            json!({"biz": "article", "bizId": article, "content": "代开发票 again"}),
        )
        .await,
        0,
    )["data"]
        .as_i64()
        .unwrap();
    assert_eq!(held_comments(&app, &admin).await, [rejected]);
    let deleted = act(
        &app,
        &admin,
        json!({"kind": "comment", "id": rejected, "action": "delete", "reason": "spam"}),
    )
    .await;
    assert_eq!(deleted["changed"], true, "{deleted}");
    assert_eq!(held_comments(&app, &admin).await, Vec::<i64>::new());
    let (comments, total) = thread(&app, &reader, article).await;
    assert_eq!(total, before.1 + 2);
    assert!(comments.iter().all(|(id, _, _)| *id != rejected));
    let told = notice_of(&app, &reader, "delete", "comment").await;
    assert_eq!(told["comment"]["id"], rejected);
}

/// Each action tells whom it concerns — the author of an article or a comment, the suspended
/// account — what was done and why, in one notification per target kept at its latest action:
/// a repeated action (an admin's retry) tells nothing twice, a restore turns the same
/// notification into "restored" and makes it unread again. Nobody is told of their own action,
/// and a muted kind is not produced.
async fn moderation_actions_tell_whom_they_concern_once_and_why(setup: Setup) {
    let (app, admin) = app(setup).await;
    let author = member(&app, "author").await;
    let reader = member(&app, "reader").await;
    let article = publish(&app, &author, "Reported").await;
    let unread = |who: &Member| {
        let (app, token) = (&app, who.token.clone());
        async move {
            get(app, "/notifications/unread", Some(&token)).await.json()["data"]["count"]
                .as_i64()
                .unwrap()
        }
    };

    let hide = json!({"kind": "article", "id": article, "action": "hide", "reason": "spam links"});
    assert_eq!(act(&app, &admin, hide.clone()).await["changed"], true);
    let told = notice_of(&app, &author, "hide", "article").await;
    assert_eq!(told["article"]["id"], article, "{told}");
    assert_eq!(
        told["article"]["title"], "Reported",
        "its author sees which: {told}"
    );
    assert_eq!(told["moderation"]["reason"], "spam links");
    assert_eq!(told["read"], false);
    assert_eq!(told["actorCnt"], 0, "moderators stay anonymous: {told}");
    assert_eq!(told["actors"], json!([]));
    let notice = told["id"].as_i64().unwrap();
    expect(
        &post(
            &app,
            "/notifications/read",
            Some(&author.token),
            json!({"id": notice}),
        )
        .await,
        0,
    );
    assert_eq!(unread(&author).await, 0);
    // A retry changes nothing; the admin's action on their own article tells nobody.
    assert_eq!(act(&app, &admin, hide).await["changed"], false);
    let own = publish(&app, &admin, "Mine").await;
    act(
        &app,
        &admin,
        json!({"kind": "article", "id": own, "action": "hide", "reason": "test"}),
    )
    .await;
    // The restore comes after both on the same topic: once it shows, they were applied.
    act(
        &app,
        &admin,
        json!({"kind": "article", "id": article, "action": "restore", "reason": "on appeal"}),
    )
    .await;
    let told = notice_of(&app, &author, "restore", "article").await;
    assert_eq!(told["id"], notice, "the same notification, now restored");
    assert_eq!(told["read"], false);
    assert_eq!(told["moderation"]["reason"], "on appeal");
    assert_eq!(notices(&app, &author).await.len(), 1);
    assert_eq!(unread(&author).await, 1);
    assert_eq!(notices(&app, &admin).await, Vec::<Value>::new());

    // A hidden comment: its author sees which comment (its text) and why.
    let reply = comment(&app, &reader, article, None).await;
    act(
        &app,
        &admin,
        json!({"kind": "comment", "id": reply, "action": "hide", "reason": "rude"}),
    )
    .await;
    let told = notice_of(&app, &reader, "hide", "comment").await;
    assert_eq!(told["comment"]["id"], reply);
    assert_eq!(told["comment"]["excerpt"], "a comment");
    assert_eq!(told["article"]["id"], article);

    // A suspension says until when; its lift turns the same notification into "lifted".
    let until = now_millis() + 3_600_000;
    act(
        &app,
        &admin,
        json!({"kind": "user", "id": reader.uid, "action": "suspend", "reason": "abuse", "until": until}),
    )
    .await;
    let told = notice_of(&app, &reader, "suspend", "user").await;
    assert_eq!(told["moderation"]["until"], until, "{told}");
    assert_eq!(told["moderation"]["reason"], "abuse");
    act(
        &app,
        &admin,
        json!({"kind": "user", "id": reader.uid, "action": "lift", "reason": "appeal granted"}),
    )
    .await;
    let lifted = notice_of(&app, &reader, "lift", "user").await;
    assert_eq!(lifted["id"], told["id"]);
    assert!(lifted["moderation"].get("until").is_none(), "{lifted}");

    // Muted: nothing is produced for the author; the reader's later notice proves the author's
    // event was applied first.
    expect(
        &common::call(
            &app,
            reqwest::Method::PUT,
            "/notifications/preferences",
            Some(&author.token),
            common::UA,
            Some(json!({"muted": ["moderation"]})),
        )
        .await,
        0,
    );
    let second = publish(&app, &author, "Another").await;
    act(
        &app,
        &admin,
        json!({"kind": "article", "id": second, "action": "hide", "reason": "spam"}),
    )
    .await;
    act(
        &app,
        &admin,
        json!({"kind": "comment", "id": reply, "action": "restore", "reason": "fine"}),
    )
    .await;
    notice_of(&app, &reader, "restore", "comment").await;
    let author_notices = notices(&app, &author).await;
    assert_eq!(author_notices.len(), 1, "{author_notices:?}");
    assert_eq!(author_notices[0]["article"]["id"], article);
}
