//! Follows and the feed on {SQLite, PostgreSQL} × {embedded (in-process events), Redis
//! (streams)}: idempotent follows with exact counts under concurrency, keyset-paged lists,
//! a feed that merges pushed and pulled items exactly once in one order while new items arrive,
//! authors crossing the push threshold both ways, unfollow and withdrawal on the next page, and
//! a fan-out that resumes after its consumer died.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::collections::HashSet;

use common::{get, member, members, post, publish, Member, Setup};
use platform::testing::{wait_until, TestDb};
use serde_json::{json, Value};
use sqlx::Row;
use webook::{
    feed::{FeedService, FeedSettings},
    testing::TestApp,
};

/// An app whose authors push up to `threshold` followers.
async fn app_with_threshold(setup: Setup, threshold: i64) -> TestApp {
    setup
        .spawn(|config| {
            config.settings_mut::<FeedSettings>().feed_push_threshold = threshold;
            config
                .settings_mut::<webook::auth::settings::AuthSettings>()
                .auth_rate_limit = 1_000_000;
        })
        .await
}

async fn follow(app: &TestApp, who: &Member, whom: i64, on: bool) -> i64 {
    let path = if on {
        "/follow/follow"
    } else {
        "/follow/cancel"
    };
    post(app, path, Some(&who.token), json!({ "followee": whom }))
        .await
        .code()
}

/// [`follow`] from a spawned task (owning what it uses); returns the answer's code.
async fn follow_raw(client: &reqwest::Client, base: &str, token: &str, whom: i64, on: bool) -> i64 {
    let path = if on { "follow/follow" } else { "follow/cancel" };
    let body = json!({ "followee": whom });
    let answer = common::envelope(
        client,
        reqwest::Method::POST,
        format!("{base}{path}"),
        token,
        Some(&body),
    )
    .await;
    answer["code"].as_i64().unwrap()
}

async fn feed_page(app: &TestApp, reader: &Member, cursor: Option<&str>, limit: usize) -> Value {
    let path = match cursor {
        Some(cursor) => format!("/feed?limit={limit}&cursor={cursor}"),
        None => format!("/feed?limit={limit}"),
    };
    let answer = get(app, &path, Some(&reader.token)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].clone()
}

/// The whole feed, page by page, checking that no item repeats and the order holds.
async fn whole_feed(app: &TestApp, reader: &Member, limit: usize) -> Vec<Value> {
    let items = common::every_page(limit, async |cursor| {
        feed_page(app, reader, cursor.as_deref(), limit).await
    })
    .await;
    assert_in_feed_order(&items);
    items
}

/// Newest first by (ctime, id), every id once.
fn assert_in_feed_order(items: &[Value]) {
    let keys: Vec<(i64, i64)> = items
        .iter()
        .map(|item| {
            (
                item["ctime"].as_i64().unwrap(),
                item["id"].as_i64().unwrap(),
            )
        })
        .collect();
    for pair in keys.windows(2) {
        assert!(pair[0] > pair[1], "out of order or repeated: {pair:?}");
    }
}

/// (type, article id or actor) of each item, for comparing against what must be there.
fn article_ids(items: &[Value]) -> Vec<i64> {
    items
        .iter()
        .filter(|item| item["type"] == "article")
        .map(|item| item["article"]["id"].as_i64().unwrap())
        .collect()
}

async fn wait_for_articles(app: &TestApp, reader: &Member, expected: &HashSet<i64>) {
    wait_until("the feed to hold every published article", || async {
        let seen: HashSet<i64> = article_ids(&whole_feed(app, reader, 100).await)
            .into_iter()
            .collect();
        &seen == expected
    })
    .await;
}

/// How article `id`'s item was delivered (0 fanning out, 1 pushed, 2 pulled), once handled.
async fn delivery_of(app: &TestApp, id: i64) -> Option<i64> {
    sqlx::query_scalar("SELECT delivery FROM feed_events WHERE dedup_key = $1")
        .bind(format!("article:{id}"))
        .fetch_optional(app.platform.db.pool())
        .await
        .unwrap()
}

async fn wait_for_delivery(app: &TestApp, id: i64) -> i64 {
    wait_until("the article's item to be delivered", || async {
        matches!(delivery_of(app, id).await, Some(1 | 2))
    })
    .await;
    delivery_of(app, id).await.unwrap()
}

async fn counts(app: &TestApp, asker: &Member, uid: i64) -> (i64, i64) {
    let answer = get(
        app,
        &format!("/follow/static?uid={uid}"),
        Some(&asker.token),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    let data = &answer.json()["data"];
    (
        data["followers"].as_i64().unwrap(),
        data["followees"].as_i64().unwrap(),
    )
}

async fn follow_counts_in_db(db: &platform::db::Db, uid: i64) -> (i64, i64) {
    let followers: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM follows WHERE followee = $1 AND status = 1")
            .bind(uid)
            .fetch_one(db.pool())
            .await
            .unwrap();
    let followees: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM follows WHERE follower = $1 AND status = 1")
            .bind(uid)
            .fetch_one(db.pool())
            .await
            .unwrap();
    (followers, followees)
}

async fn follows_are_idempotent_and_counts_exact_under_concurrency(setup: Setup) {
    let app = app_with_threshold(setup, 1000).await;
    let star = member(&app, "star").await;
    let fans = members(&app, "fan", 20).await;

    assert_eq!(follow(&app, &star, star.uid, true).await, 4, "yourself");
    assert_eq!(follow(&app, &star, 999_999, true).await, 404_001);
    assert_eq!(follow(&app, &star, 0, true).await, 4);
    assert_eq!(
        follow(&app, &star, 999_999, false).await,
        0,
        "nothing to cancel"
    );

    // 200 operations at once: each fan runs its own sequence on (fan → star) and (fan → next
    // fan); the pairs differ, so each pair's final state is its sequence's last step. The same
    // pair is also followed ten times at once.
    let pattern = [
        true, true, false, true, false, false, true, true, false, true,
    ];
    let mut tasks = Vec::new();
    for (n, fan) in fans.iter().enumerate() {
        let (client, base, token) = (app.client.clone(), app.url("/"), fan.token.clone());
        let (star, next) = (star.uid, fans[(n + 1) % fans.len()].uid);
        tasks.push(tokio::spawn(async move {
            for (step, on) in pattern.iter().enumerate() {
                let whom = if step % 2 == 0 { star } else { next };
                let on = if n % 2 == 0 { *on } else { !*on };
                assert_eq!(follow_raw(&client, &base, &token, whom, on).await, 0);
            }
        }));
    }
    for _ in 0..10 {
        let (client, base, token) = (app.client.clone(), app.url("/"), fans[0].token.clone());
        let whom = fans[5].uid;
        tasks.push(tokio::spawn(async move {
            assert_eq!(follow_raw(&client, &base, &token, whom, true).await, 0);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }

    // Last steps: even fans end on pattern[8] (false) for the star and pattern[9] (true) for
    // the next fan; odd fans the opposite.
    let star_followers = fans.iter().enumerate().filter(|(n, _)| n % 2 == 1).count() as i64;
    assert_eq!(counts(&app, &star, star.uid).await, (star_followers, 0));
    let db = &app.platform.db;
    for (n, fan) in fans.iter().enumerate() {
        let stored = follow_counts_in_db(db, fan.uid).await;
        assert_eq!(counts(&app, &star, fan.uid).await, stored, "fan {n}");
    }
    assert_eq!(follow_counts_in_db(db, star.uid).await, (star_followers, 0));
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM follows")
        .fetch_one(db.pool())
        .await
        .unwrap();
    // 20 fans × (star, next fan), plus fan 0 → fan 5: one row per pair, whatever happened.
    assert_eq!(rows, 41);
    let check = get(
        &app,
        &format!("/follow/check?followee={}", fans[5].uid),
        Some(&fans[0].token),
    )
    .await;
    assert_eq!(check.json()["data"]["followed"], true);
}

async fn lists_page_with_cursors_and_show_whom_the_caller_follows(setup: Setup) {
    let app = app_with_threshold(setup, 1000).await;
    let star = member(&app, "star").await;
    let viewer = member(&app, "viewer").await;
    let fans = members(&app, "fan", 12).await;
    for fan in &fans {
        assert_eq!(follow(&app, fan, star.uid, true).await, 0);
    }
    // The viewer follows every third fan.
    let followed_by_viewer: HashSet<i64> = fans.iter().step_by(3).map(|fan| fan.uid).collect();
    for uid in &followed_by_viewer {
        assert_eq!(follow(&app, &viewer, *uid, true).await, 0);
    }

    let list = |cursor: Option<String>| {
        let (app, viewer, star) = (&app, &viewer, star.uid);
        async move {
            let mut path = format!("/follow/followers?uid={star}&limit=5");
            if let Some(cursor) = cursor {
                path.push_str(&format!("&cursor={cursor}"));
            }
            let answer = get(app, &path, Some(&viewer.token)).await;
            assert_eq!(answer.code(), 0, "{}", answer.raw);
            answer.json()["data"].clone()
        }
    };
    let first = list(None).await;
    // A follow arriving mid-way lands before the cursor: no page repeats or skips for it.
    let late = member(&app, "late").await;
    assert_eq!(follow(&app, &late, star.uid, true).await, 0);
    let mut seen = Vec::new();
    let mut page = first;
    loop {
        for item in page["items"].as_array().unwrap() {
            let id = item["id"].as_i64().unwrap();
            assert_eq!(
                item["followed"].as_bool().unwrap(),
                followed_by_viewer.contains(&id),
                "{item}"
            );
            assert!(item.get("nickname").is_some() && item.get("aboutMe").is_some());
            seen.push(id);
        }
        match page["next"].as_str() {
            Some(next) => page = list(Some(next.to_owned())).await,
            None => break,
        }
    }
    let expected: Vec<i64> = fans.iter().rev().map(|fan| fan.uid).collect();
    assert_eq!(seen, expected, "newest follow first, each once");

    // The caller's own followees, by default.
    let own = get(&app, "/follow/followees", Some(&viewer.token)).await;
    let own: HashSet<i64> = own.json()["data"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect();
    assert_eq!(own, followed_by_viewer);
    for bad in ["limit=0", "limit=101", "cursor=nope", "uid=-1"] {
        let answer = get(
            &app,
            &format!("/follow/followers?{bad}"),
            Some(&viewer.token),
        )
        .await;
        assert_eq!(answer.code(), 4, "{bad}: {}", answer.raw);
    }
    // A visitor reads anyone's lists (`anonymous_reading`), naming whose; a token that does
    // not check out is refused, not taken for a visitor.
    let visitor = get(&app, "/follow/followers", None).await;
    assert_eq!(visitor.code(), 4, "{}", visitor.raw);
    let visitor = get(
        &app,
        &format!("/follow/followers?uid={}&limit=5", star.uid),
        None,
    )
    .await;
    assert_eq!(visitor.code(), 0, "{}", visitor.raw);
    assert_eq!(
        get(&app, "/follow/followers", Some("not-a-token"))
            .await
            .status,
        401
    );
}

async fn a_reader_sees_every_item_once_in_order_while_authors_publish(setup: Setup) {
    let app = app_with_threshold(setup, 3).await;
    let reader = member(&app, "reader").await;
    let small = members(&app, "small", 2).await;
    let big = members(&app, "big", 2).await;
    let crowd = members(&app, "crowd", 3).await;
    for author in small.iter().chain(&big) {
        assert_eq!(follow(&app, &reader, author.uid, true).await, 0);
    }
    for author in &big {
        for fan in &crowd {
            assert_eq!(follow(&app, fan, author.uid, true).await, 0);
        }
    }
    let mut expected = HashSet::new();
    for round in 0..6 {
        for author in small.iter().chain(&big) {
            expected.insert(publish(&app, author, &format!("r{round}")).await);
        }
    }
    // Others like the reader's article and follow the reader: those reach the reader too.
    let own = publish(&app, &reader, "mine").await;
    for fan in &crowd {
        let like = post(
            &app,
            "/articles/pub/like",
            Some(&fan.token),
            json!({"id": own, "like": true}),
        )
        .await;
        assert_eq!(like.code(), 0);
        assert_eq!(follow(&app, fan, reader.uid, true).await, 0);
    }
    wait_for_articles(&app, &reader, &expected).await;
    for id in &expected {
        assert!(matches!(delivery_of(&app, *id).await, Some(1 | 2)));
    }
    wait_until("the likes and follows to reach the reader", || async {
        let items = whole_feed(&app, &reader, 100).await;
        let count = |kind: &str| items.iter().filter(|item| item["type"] == kind).count();
        count("like") == 3 && count("follow") == 3
    })
    .await;
    let before = whole_feed(&app, &reader, 100).await;

    // Page through it in small pages while the authors keep publishing.
    let publishing = {
        let (app_authors, stop) = (
            [small[0].token.clone(), big[0].token.clone()],
            std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        );
        let (client, base, flag) = (app.client.clone(), app.url("/"), stop.clone());
        let task = tokio::spawn(async move {
            let mut n = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let token = &app_authors[n % 2];
                let answer: Value = client
                    .post(format!("{base}articles/publish"))
                    .bearer_auth(token)
                    .header("user-agent", common::UA)
                    .json(&json!({"title": format!("new {n}"), "content": "<p>x</p>"}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(answer["code"], 0);
                n += 1;
            }
            n
        });
        (task, stop)
    };
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = feed_page(&app, &reader, cursor.as_deref(), 7).await;
        paged.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    publishing
        .1
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let published_meanwhile = publishing.0.await.unwrap();
    assert!(published_meanwhile > 0);
    assert_in_feed_order(&paged);
    // Paging started after `before` was read: what it saw is `before` plus items newer than
    // `before`'s first, which all come from the authors still publishing.
    let newest_before = (
        before[0]["ctime"].as_i64().unwrap(),
        before[0]["id"].as_i64().unwrap(),
    );
    let (newer, older): (Vec<Value>, Vec<Value>) = paged.into_iter().partition(|item| {
        (
            item["ctime"].as_i64().unwrap(),
            item["id"].as_i64().unwrap(),
        ) > newest_before
    });
    assert_eq!(older, before, "every earlier item exactly once, in order");
    for item in newer {
        let actor = item["actor"]["id"].as_i64().unwrap();
        assert!(actor == small[0].uid || actor == big[0].uid, "{item}");
    }
    let items = before;
    let like = items.iter().find(|item| item["type"] == "like").unwrap();
    assert_eq!(like["article"]["id"], own);
    assert_eq!(like["article"]["likeCnt"], 3);
    let article = items.iter().find(|item| item["type"] == "article").unwrap();
    assert!(
        article["article"]["title"].is_string() && article["article"]["author"]["name"].is_string()
    );
    assert!(article.get("comment").is_none());
    assert_eq!(article_ids(&items).len(), expected.len());
}

async fn authors_crossing_the_threshold_both_ways_leave_no_duplicate_or_gap(setup: Setup) {
    let app = app_with_threshold(setup, 2).await;
    let author = member(&app, "author").await;
    let reader = member(&app, "reader").await;
    let fans = members(&app, "fan", 2).await;
    assert_eq!(follow(&app, &reader, author.uid, true).await, 0);

    let first = publish(&app, &author, "one follower: pushed").await;
    assert_eq!(wait_for_delivery(&app, first).await, 1);
    for fan in &fans {
        assert_eq!(follow(&app, fan, author.uid, true).await, 0);
    }
    let second = publish(&app, &author, "three followers: pulled").await;
    assert_eq!(wait_for_delivery(&app, second).await, 2);
    for fan in &fans {
        assert_eq!(follow(&app, fan, author.uid, false).await, 0);
    }
    let third = publish(&app, &author, "one follower again: pushed").await;
    assert_eq!(wait_for_delivery(&app, third).await, 1);
    assert_eq!(follow(&app, &fans[0], author.uid, true).await, 0);
    let fourth = publish(&app, &author, "two followers: pushed").await;
    assert_eq!(wait_for_delivery(&app, fourth).await, 1);

    let all = vec![fourth, third, second, first];
    assert_eq!(article_ids(&whole_feed(&app, &reader, 1).await), all);
    assert_eq!(article_ids(&whole_feed(&app, &reader, 3).await), all);
    // The fan who came back: pushed ones back-filled on follow, the pulled one merged.
    assert_eq!(article_ids(&whole_feed(&app, &fans[0], 2).await), all);
    assert!(article_ids(&whole_feed(&app, &fans[1], 2).await).is_empty());
}

async fn unfollow_withdrawal_and_follow_take_effect_on_the_next_page(setup: Setup) {
    let app = app_with_threshold(setup, 1).await;
    let reader = member(&app, "reader").await;
    let small = member(&app, "small").await;
    let big = member(&app, "big").await;
    let other = member(&app, "other").await;
    assert_eq!(follow(&app, &reader, small.uid, true).await, 0);
    assert_eq!(follow(&app, &reader, big.uid, true).await, 0);
    assert_eq!(follow(&app, &other, big.uid, true).await, 0);
    let small_articles = [
        publish(&app, &small, "s1").await,
        publish(&app, &small, "s2").await,
    ];
    let big_articles = [
        publish(&app, &big, "b1").await,
        publish(&app, &big, "b2").await,
    ];
    for id in small_articles {
        assert_eq!(wait_for_delivery(&app, id).await, 1);
    }
    for id in big_articles {
        assert_eq!(wait_for_delivery(&app, id).await, 2);
    }
    let ids = |items: Vec<Value>| -> HashSet<i64> { article_ids(&items).into_iter().collect() };
    let everything: HashSet<i64> = small_articles
        .iter()
        .chain(&big_articles)
        .copied()
        .collect();
    assert_eq!(ids(whole_feed(&app, &reader, 10).await), everything);

    // No waiting from here on: each change shows on the very next read.
    let withdraw = |author: &Member, id: i64| {
        let token = author.token.clone();
        let app = &app;
        async move {
            let answer = post(app, "/articles/withdraw", Some(&token), json!({ "id": id })).await;
            assert_eq!(answer.code(), 0);
        }
    };
    withdraw(&big, big_articles[0]).await;
    withdraw(&small, small_articles[0]).await;
    assert_eq!(
        ids(whole_feed(&app, &reader, 10).await),
        HashSet::from([small_articles[1], big_articles[1]])
    );
    assert_eq!(follow(&app, &reader, small.uid, false).await, 0);
    assert_eq!(
        ids(whole_feed(&app, &reader, 10).await),
        HashSet::from([big_articles[1]])
    );
    assert_eq!(follow(&app, &reader, big.uid, false).await, 0);
    assert!(ids(whole_feed(&app, &reader, 10).await).is_empty());
    assert_eq!(follow(&app, &reader, small.uid, true).await, 0);
    assert_eq!(follow(&app, &reader, big.uid, true).await, 0);
    assert_eq!(
        ids(whole_feed(&app, &reader, 10).await),
        HashSet::from([small_articles[1], big_articles[1]]),
        "a follow brings the author's recent articles at once"
    );
    // Republishing a withdrawn article brings it back (once the consumers ran).
    let republish = post(
        &app,
        "/articles/publish",
        Some(&small.token),
        json!({"id": small_articles[0], "title": "s1 again", "content": "<p>s1</p>"}),
    )
    .await;
    assert_eq!(republish.code(), 0);
    wait_until("the republished article to return", || async {
        ids(whole_feed(&app, &reader, 10).await).contains(&small_articles[0])
    })
    .await;
    // The withdrawal consumers removed the other withdrawn item from storage too.
    wait_until("the withdrawn item to be deleted", || async {
        delivery_of(&app, big_articles[0]).await.is_none()
    })
    .await;
}

/// `who`'s inbox rows (pushed items), whatever they show.
async fn inbox_rows(app: &TestApp, who: &Member) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM feed_inbox WHERE uid = $1")
        .bind(who.uid)
        .fetch_one(app.platform.db.pool())
        .await
        .unwrap()
}

async fn like(app: &TestApp, who: &Member, article: i64, on: bool) {
    let answer = post(
        app,
        "/articles/pub/like",
        Some(&who.token),
        json!({"id": article, "like": on}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
}

async fn withdraw(app: &TestApp, author: &Member, article: i64) {
    let answer = post(
        app,
        "/articles/withdraw",
        Some(&author.token),
        json!({ "id": article }),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
}

/// How many items of `kind` `items` has.
fn count_of(items: &[Value], kind: &str) -> usize {
    items.iter().filter(|item| item["type"] == kind).count()
}

/// 40 likes of an article, then its withdrawal: the author's first page of 5 is the older
/// `follow` item at once (not an empty page with a cursor), the consumer then deletes the like
/// items from the inbox, and republishing the article brings them back.
async fn a_withdrawn_liked_article_leaves_no_empty_page(setup: Setup) {
    let app = app_with_threshold(setup, 1000).await;
    let writer = member(&app, "writer").await;
    let fan = member(&app, "fan").await;
    assert_eq!(follow(&app, &fan, writer.uid, true).await, 0);
    let article = publish(&app, &writer, "liked, then withdrawn").await;
    let likers = members(&app, "liker", 40).await;
    for liker in &likers {
        like(&app, liker, article, true).await;
    }
    wait_until("the likes and the follow to reach the writer", || async {
        let items = whole_feed(&app, &writer, 100).await;
        count_of(&items, "like") == 40 && count_of(&items, "follow") == 1
    })
    .await;

    withdraw(&app, &writer, article).await;
    // No waiting: the page is read before or after the consumer ran, and must be right either way.
    let page = feed_page(&app, &writer, None, 5).await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{page}");
    assert_eq!(items[0]["type"], "follow", "{page}");
    assert_eq!(items[0]["actor"]["id"], fan.uid, "{page}");
    assert!(page["next"].is_null(), "the end: {page}");

    wait_until(
        "the consumer to delete the like items from the inbox",
        || async { inbox_rows(&app, &writer).await == 1 },
    )
    .await;
    assert_eq!(whole_feed(&app, &writer, 5).await.len(), 1);

    // Republished, the article is liked 40 times again: the notices come back.
    let republish = post(
        &app,
        "/articles/publish",
        Some(&writer.token),
        json!({"id": article, "title": "back", "content": "<p>back</p>"}),
    )
    .await;
    assert_eq!(republish.code(), 0, "{}", republish.raw);
    wait_until("the like items to return with the article", || async {
        count_of(&whole_feed(&app, &writer, 7).await, "like") == 40
    })
    .await;
}

/// Deleting a comment, undoing a like and withdrawing the article each take the items they
/// caused out of the feed on the very next read (before the consumers ran), and the consumers
/// then delete them from the inboxes.
async fn comments_and_likes_leave_the_feed_with_their_source(setup: Setup) {
    let app = app_with_threshold(setup, 1000).await;
    let writer = member(&app, "writer").await;
    let fan = member(&app, "fan").await;
    let first = member(&app, "first").await;
    let second = member(&app, "second").await;
    assert_eq!(follow(&app, &fan, writer.uid, true).await, 0);
    let article = publish(&app, &writer, "commented").await;
    let comment = |who: &Member, content: &str| {
        let (app, token) = (&app, who.token.clone());
        let body = json!({"biz": "article", "bizId": article, "content": content});
        async move {
            let answer = post(app, "/comments", Some(&token), body).await;
            assert_eq!(answer.code(), 0, "{}", answer.raw);
            answer.json()["data"].as_i64().unwrap()
        }
    };
    let gone = comment(&first, "words to be deleted").await;
    comment(&second, "words under a withdrawn article").await;
    like(&app, &first, article, true).await;
    wait_until("the comments and the like to reach the writer", || async {
        let items = whole_feed(&app, &writer, 100).await;
        count_of(&items, "comment") == 2 && count_of(&items, "like") == 1
    })
    .await;

    let deleted = common::call(
        &app,
        reqwest::Method::DELETE,
        &format!("/comments/{gone}"),
        Some(&first.token),
        common::UA,
        None,
    )
    .await;
    assert_eq!(deleted.code(), 0, "{}", deleted.raw);
    let items = whole_feed(&app, &writer, 100).await;
    assert!(
        !Value::from(items.clone())
            .to_string()
            .contains("to be deleted"),
        "{items:?}"
    );
    assert_eq!(count_of(&items, "comment"), 1);

    like(&app, &first, article, false).await;
    assert_eq!(count_of(&whole_feed(&app, &writer, 100).await, "like"), 0);
    wait_until(
        "the consumers to delete the comment and like items",
        || async { inbox_rows(&app, &writer).await == 2 },
    )
    .await;

    withdraw(&app, &writer, article).await;
    let comments = get(
        &app,
        &format!("/comments?biz=article&bizId={article}"),
        Some(&writer.token),
    )
    .await;
    assert_eq!(comments.code(), 404_001, "{}", comments.raw);
    let items = whole_feed(&app, &writer, 100).await;
    assert!(
        !Value::from(items.clone())
            .to_string()
            .contains("withdrawn article"),
        "{items:?}"
    );
    assert_eq!(count_of(&items, "follow"), 1);
    assert_eq!(items.len(), 1, "{items:?}");
    wait_until("the consumer to delete the comment item", || async {
        inbox_rows(&app, &writer).await == 1
    })
    .await;
}

/// Tags `article` of `author` with a tag named `name` (creating it).
async fn tag_article(app: &TestApp, author: &Member, article: i64, name: &str) {
    let tid = post(app, "/tags", Some(&author.token), json!({ "name": name })).await;
    assert_eq!(tid.code(), 0, "{}", tid.raw);
    let attach = json!({"biz": "article", "bizId": article, "tids": [tid.json()["data"]]});
    let attached = post(app, "/tags/attach", Some(&author.token), attach).await;
    assert_eq!(attached.code(), 0, "{}", attached.raw);
}

async fn follow_topic(app: &TestApp, who: &Member, name: &str, on: bool) -> i64 {
    let body = json!({ "name": name, "follow": on });
    post(app, "/topics/follow", Some(&who.token), body)
        .await
        .code()
}

/// The reader follows a pushing author, a pulling author and a topic that articles of both and
/// of a stranger carry: each article is in the feed once (the topic brings the same item its
/// author's delivery does), the stranger's only while the topic is followed and the article
/// carries it (tags attached after publication count), drafts never.
async fn a_followed_topic_brings_its_articles_once_across_push_and_pull(setup: Setup) {
    // Authors with more than one follower pull.
    let app = app_with_threshold(setup, 1).await;
    let reader = member(&app, "reader").await;
    let (small, big, fan) = (
        member(&app, "small").await,
        member(&app, "big").await,
        member(&app, "fan").await,
    );
    let stranger = member(&app, "stranger").await;
    assert_eq!(follow(&app, &reader, small.uid, true).await, 0);
    assert_eq!(follow(&app, &reader, big.uid, true).await, 0);
    assert_eq!(follow(&app, &fan, big.uid, true).await, 0);
    // No tag has the name yet; a name no tag could have.
    assert_eq!(follow_topic(&app, &reader, "rust", true).await, 404001);
    assert_eq!(follow_topic(&app, &reader, "  ", true).await, 4);

    let pushed = publish(&app, &small, "pushed").await;
    tag_article(&app, &small, pushed, "Rust").await;
    let pulled = publish(&app, &big, "pulled").await;
    tag_article(&app, &big, pulled, "rust").await;
    let topical = publish(&app, &stranger, "topical").await;
    tag_article(&app, &stranger, topical, "RUST").await;
    let unrelated = publish(&app, &stranger, "unrelated").await;
    tag_article(&app, &stranger, unrelated, "go").await;
    let draft = post(
        &app,
        "/articles/edit",
        Some(&stranger.token),
        json!({"title": "draft", "content": "<p>x</p>"}),
    )
    .await;
    tag_article(
        &app,
        &stranger,
        draft.json()["data"].as_i64().unwrap(),
        "rust",
    )
    .await;
    assert_eq!(wait_for_delivery(&app, pushed).await, 1);
    assert_eq!(wait_for_delivery(&app, pulled).await, 2);

    // Any spelling follows the one topic, twice is once.
    assert_eq!(follow_topic(&app, &reader, "Ｒｕｓｔ", true).await, 0);
    assert_eq!(follow_topic(&app, &reader, "rust", true).await, 0);
    let followed = get(&app, "/topics/followed", Some(&reader.token)).await;
    assert_eq!(followed.json()["data"], json!(["rust"]));
    let expected: HashSet<i64> = [pushed, pulled, topical].into();
    wait_for_articles(&app, &reader, &expected).await;
    for limit in [1, 2, 100] {
        let ids = article_ids(&whole_feed(&app, &reader, limit).await);
        assert_eq!(
            ids.len(),
            expected.len(),
            "an article twice (pages of {limit}): {ids:?}"
        );
    }

    // Unfollowed: the stranger's article goes, the followed authors' stay.
    assert_eq!(follow_topic(&app, &reader, "rust", false).await, 0);
    let ids: HashSet<i64> = article_ids(&whole_feed(&app, &reader, 100).await)
        .into_iter()
        .collect();
    assert_eq!(ids, [pushed, pulled].into());
    // Followed again, then the article withdrawn: gone again.
    assert_eq!(follow_topic(&app, &reader, "rust", true).await, 0);
    wait_for_articles(&app, &reader, &expected).await;
    withdraw(&app, &stranger, topical).await;
    let ids: HashSet<i64> = article_ids(&whole_feed(&app, &reader, 100).await)
        .into_iter()
        .collect();
    assert_eq!(ids, [pushed, pulled].into());
    // Tags changed after publication: an article joins the topic, then leaves it.
    tag_article(&app, &stranger, unrelated, "Rust").await;
    wait_for_articles(&app, &reader, &[pushed, pulled, unrelated].into()).await;
    tag_article(&app, &stranger, unrelated, "go").await;
    let ids: HashSet<i64> = article_ids(&whole_feed(&app, &reader, 100).await)
        .into_iter()
        .collect();
    assert_eq!(
        ids,
        [pushed, pulled].into(),
        "gone at once, not when indexed"
    );
    app.stop().await.unwrap();
}

setup_tests!(
    a_followed_topic_brings_its_articles_once_across_push_and_pull,
    follows_are_idempotent_and_counts_exact_under_concurrency,
    lists_page_with_cursors_and_show_whom_the_caller_follows,
    a_reader_sees_every_item_once_in_order_while_authors_publish,
    authors_crossing_the_threshold_both_ways_leave_no_duplicate_or_gap,
    unfollow_withdrawal_and_follow_take_effect_on_the_next_page,
    a_withdrawn_liked_article_leaves_no_empty_page,
    comments_and_likes_leave_the_feed_with_their_source,
);

/// Users 1..=`count` and `followers` following user 1 (bulk SQL: the fan-out reads rows, not
/// requests).
async fn crowd(db: &platform::db::Db, followers: i64) {
    for chunk in (1..=followers + 1).collect::<Vec<_>>().chunks(500) {
        let values: Vec<String> = chunk
            .iter()
            .map(|id| format!("({id}, 'u{id}@x', 'x', 0, 0)"))
            .collect();
        sqlx::query(&format!(
            "INSERT INTO users (id, email, password, ctime, utime) VALUES {}",
            values.join(", ")
        ))
        .execute(db.writer())
        .await
        .unwrap();
        let follows: Vec<String> = chunk
            .iter()
            .filter(|id| **id != 1)
            .map(|id| format!("({id}, 1, 1, {id}, {id})"))
            .collect();
        if !follows.is_empty() {
            sqlx::query(&format!(
                "INSERT INTO follows (follower, followee, status, ctime, utime) VALUES {}",
                follows.join(", ")
            ))
            .execute(db.writer())
            .await
            .unwrap();
        }
    }
    sqlx::query(
        "INSERT INTO follow_counts (uid, followers, followees, utime) VALUES (1, $1, 0, 0)",
    )
    .bind(followers)
    .execute(db.writer())
    .await
    .unwrap();
    for table in ["articles", "published_articles"] {
        sqlx::query(&format!(
            "INSERT INTO {table} (id, author_id, title, content, abstract, status, ctime, utime) \
             VALUES (1, 1, 't', 'c', 'a', 2, 1000, 1000)"
        ))
        .execute(db.writer())
        .await
        .unwrap();
    }
    if db.kind() == platform::config::DatabaseKind::Postgres {
        sqlx::query("SELECT setval(pg_get_serial_sequence('users', 'id'), 100000)")
            .execute(db.writer())
            .await
            .unwrap();
    }
}

fn published_event() -> platform::events::Event {
    platform::events::Event {
        id: "outbox-1".to_owned(),
        topic: webook::article::TOPIC_PUBLISHED.to_owned(),
        key: "1".to_owned(),
        payload: serde_json::to_vec(&json!({"id": 1, "author": 1, "time": 5000}))
            .unwrap()
            .into(),
        time: 5000,
        traceparent: None,
    }
}

async fn inbox_stats(db: &platform::db::Db) -> (i64, i64) {
    let row = sqlx::query("SELECT COUNT(*) AS total, COUNT(DISTINCT uid) AS users FROM feed_inbox")
        .fetch_one(db.pool())
        .await
        .unwrap();
    (row.get("total"), row.get("users"))
}

/// A fan-out of 2 500 followers in batches of 1 000 whose consumer dies after the first batch:
/// the redelivered event resumes from the cursor and every follower ends with the item once.
async fn a_fan_out_killed_mid_way_resumes_without_duplicates(database: TestDb) {
    let db = &database.db;
    crowd(db, 2500).await;
    let feed = FeedService::new(webook::feed::store::FeedStore::new(db.clone()), 10_000)
        .with_fanout_batch(1000);
    let item = feed
        .store()
        .add_article(1, 1, 5000, 10_000)
        .await
        .unwrap()
        .expect("a fan-out to do");
    let step = feed.store().fan_out_batch(item, 1000).await.unwrap();
    assert_eq!((step.followers, step.done), (1000, false));
    assert_eq!(inbox_stats(db).await, (1000, 1000));
    // The consumer "died" here; the event is delivered again, whole.
    feed.apply_published(&[published_event()]).await.unwrap();
    assert_eq!(inbox_stats(db).await, (2500, 2500));
    let delivery: i64 = sqlx::query_scalar("SELECT delivery FROM feed_events WHERE id = $1")
        .bind(item)
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(delivery, 1);
    // And once more, after it finished: nothing changes.
    feed.apply_published(&[published_event()]).await.unwrap();
    assert_eq!(inbox_stats(db).await, (2500, 2500));
    let items: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM feed_events")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(items, 1);
}

/// Followers filling exactly one batch are written, and the item marked pushed, in one
/// transaction: the batch looks one follower ahead instead of needing an empty second batch.
async fn a_fan_out_of_exactly_one_batch_takes_one_transaction(database: TestDb) {
    let db = &database.db;
    crowd(db, 1000).await;
    let store = webook::feed::store::FeedStore::new(db.clone());
    let item = store
        .add_article(1, 1, 5000, 10_000)
        .await
        .unwrap()
        .unwrap();
    let step = store.fan_out_batch(item, 1000).await.unwrap();
    assert_eq!((step.followers, step.done), (1000, true));
    assert_eq!(inbox_stats(db).await, (1000, 1000));
}

/// The prune job keeps the newest `feed_inbox_cap` items of each inbox and leaves smaller
/// inboxes alone.
async fn inboxes_are_pruned_to_the_cap(database: TestDb) {
    let db = &database.db;
    let rows: Vec<String> = (1..=150)
        .map(|n| format!("(1, {n}, 9, 'like', {})", 1000 + n))
        .chain((1..=20).map(|n| format!("(2, {}, 9, 'like', {n})", 1000 + n)))
        .collect();
    sqlx::query(&format!(
        "INSERT INTO feed_inbox (uid, event_id, actor, kind, ctime) VALUES {}",
        rows.join(", ")
    ))
    .execute(db.writer())
    .await
    .unwrap();
    let job = webook::feed::jobs::PruneFeedInboxes::new(
        webook::feed::store::FeedStore::new(db.clone()),
        100,
    );
    assert_eq!(job.prune().await.unwrap().0, 50);
    let kept: Vec<i64> =
        sqlx::query_scalar("SELECT event_id FROM feed_inbox WHERE uid = 1 ORDER BY event_id")
            .fetch_all(db.pool())
            .await
            .unwrap();
    assert_eq!(kept, (51..=150).collect::<Vec<i64>>());
    assert_eq!(inbox_stats(db).await, (120, 2));
    assert_eq!(job.prune().await.unwrap().0, 0);
}

/// The reader's pull authors are the same whichever side the lookup probes from: the reader's
/// followees, or every pull author. (Cancelled follows and pull authors not followed are out.)
async fn both_probes_find_the_same_pull_authors(database: TestDb) {
    let db = &database.db;
    sqlx::query(
        "INSERT INTO follows (follower, followee, status, ctime, utime) VALUES \
         (1, 2, 1, 0, 0), (1, 3, 1, 0, 0), (1, 4, 1, 0, 0), (1, 5, 1, 0, 0), (1, 9, 0, 0, 0), (8, 7, 1, 0, 0)",
    )
    .execute(db.writer())
    .await
    .unwrap();
    sqlx::query("INSERT INTO feed_pull_authors (uid, ctime) VALUES (3, 0), (5, 0), (7, 0), (9, 0)")
        .execute(db.writer())
        .await
        .unwrap();
    let store = webook::feed::store::FeedStore::new(db.clone());
    for from_followees in [false, true] {
        let mut found = store
            .followed_pull_authors(1, from_followees)
            .await
            .unwrap();
        found.sort_unstable();
        assert_eq!(found, vec![3, 5], "from_followees = {from_followees}");
    }
    assert_eq!(store.pull_author_count().await.unwrap(), 4);
}

/// Users 1..=`users`; article 1 by user 1, published; user 2 following user 1, with its
/// `follow` item (dated 1500) in user 1's inbox. Reading user 1's feed through the service,
/// with no consumer running, shows what a reader sees before the consumers catch up.
async fn seed_author(db: &platform::db::Db, users: i64) -> FeedService {
    let values: Vec<String> = (1..=users)
        .map(|id| format!("({id}, 'u{id}@x', 'x', 0, 0)"))
        .collect();
    sqlx::query(&format!(
        "INSERT INTO users (id, email, password, ctime, utime) VALUES {}",
        values.join(", ")
    ))
    .execute(db.writer())
    .await
    .unwrap();
    for table in ["articles", "published_articles"] {
        sqlx::query(&format!(
            "INSERT INTO {table} (id, author_id, title, content, abstract, status, ctime, utime) \
             VALUES (1, 1, 't', 'c', 'a', 2, 1000, 1000)"
        ))
        .execute(db.writer())
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO follows (follower, followee, status, ctime, utime) VALUES (2, 1, 1, 1500, 1500)",
    )
    .execute(db.writer())
    .await
    .unwrap();
    let store = webook::feed::store::FeedStore::new(db.clone());
    store.sync_follow(2, 1, 1500).await.unwrap();
    FeedService::new(store, 1000)
}

/// `uid` likes article 1 at `time`, and the like consumer ran.
async fn seed_like(db: &platform::db::Db, feed: &FeedService, uid: i64, time: i64) {
    sqlx::query(
        "INSERT INTO user_likes (uid, biz, biz_id, status, ctime, utime) VALUES ($1, 'article', 1, 1, $2, $2)",
    )
    .bind(uid)
    .bind(time)
    .execute(db.writer())
    .await
    .unwrap();
    feed.store().sync_like(uid, 1, time).await.unwrap();
}

/// `uid` comments `content` on article 1 at `time`, and the comment consumer ran; returns the
/// comment's id.
async fn seed_comment(
    db: &platform::db::Db,
    feed: &FeedService,
    uid: i64,
    content: &str,
    time: i64,
) -> i64 {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO comments (biz, biz_id, uid, root_id, parent_id, content, deleted, child_cnt, \
         reply_cnt, ctime, utime) VALUES ('article', 1, $1, 0, 0, $2, 0, 0, 0, $3, $3) RETURNING id",
    )
    .bind(uid)
    .bind(content)
    .bind(time)
    .fetch_one(db.writer())
    .await
    .unwrap();
    let event = webook::comment::CommentEvent {
        id,
        uid,
        recipient: 1,
        article_id: 1,
        content: content.to_owned(),
        on: true,
        time,
    };
    feed.store().sync_comment(&event).await.unwrap();
    id
}

async fn set_article_status(db: &platform::db::Db, status: i64) {
    for table in ["articles", "published_articles"] {
        sqlx::query(&format!("UPDATE {table} SET status = $1 WHERE id = 1"))
            .bind(status)
            .execute(db.writer())
            .await
            .unwrap();
    }
}

fn article_event(topic: &str, time: i64) -> platform::events::Event {
    platform::events::Event {
        id: format!("outbox-{time}"),
        topic: topic.to_owned(),
        key: "1".to_owned(),
        payload: serde_json::to_vec(&json!({"id": 1, "author": 1, "time": time}))
            .unwrap()
            .into(),
        time,
        traceparent: None,
    }
}

/// (type, actor) of each item of a page, newest first.
fn kinds_and_actors(
    page: &webook::feed::model::Page<webook::feed::model::FeedItem>,
) -> Vec<(&str, i64)> {
    page.items
        .iter()
        .map(|item| (item.kind, item.actor.id))
        .collect()
}

/// 300 likes of an article, then its withdrawal, before the withdrawal's consumer ran: the
/// author's first page of 5 is the older `follow` item and the end — however many hidden items
/// lie before it. Then the consumer deletes the like items from the inbox; republishing brings
/// them back.
async fn hidden_items_never_leave_a_page_empty_before_the_end(database: TestDb) {
    let db = &database.db;
    let feed = seed_author(db, 302).await;
    for uid in 3..=302 {
        seed_like(db, &feed, uid, 2000 + uid).await;
    }
    let page = feed.page(1, None, 5).await.unwrap();
    assert_eq!(page.items.len(), 5);
    assert!(page.items.iter().all(|item| item.kind == "like"));

    set_article_status(db, 3).await;
    let (page, cost) = feed.page_with_cost(1, None, 5).await.unwrap();
    assert_eq!(kinds_and_actors(&page), vec![("follow", 2)]);
    assert_eq!(page.next, None, "the end");
    // The database skips the 300 hidden items within one statement: one round, four
    // statements (the pull authors followed — their site-wide count is cached from the first
    // page —, the topics followed, the inbox's heads, their items).
    assert_eq!(
        cost,
        webook::feed::service::PageCost {
            rounds: 1,
            statements: 4
        }
    );

    // The withdrawal's consumer takes the like items out of the inbox; the purge keeps them
    // while the article may come back, and a republication brings them back.
    feed.apply_withdrawn(&[article_event(webook::article::TOPIC_WITHDRAWN, 9000)])
        .await
        .unwrap();
    let inbox = |db: &platform::db::Db| {
        let pool = db.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM feed_inbox WHERE uid = 1")
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(inbox(db).await, 1);
    assert_eq!(
        feed.store()
            .purge_orphan_notices(i64::MAX, 1000)
            .await
            .unwrap(),
        0
    );
    set_article_status(db, 2).await;
    feed.apply_published(&[article_event(webook::article::TOPIC_PUBLISHED, 9100)])
        .await
        .unwrap();
    assert_eq!(inbox(db).await, 301);
    let page = feed.page(1, None, 5).await.unwrap();
    assert_eq!(
        kinds_and_actors(&page),
        (298..=302)
            .rev()
            .map(|uid| ("like", uid))
            .collect::<Vec<_>>()
    );
}

/// A pull author's 30 newest articles withdrawn, before the consumer ran: a follower's first
/// page of 5 is the author's older article, and the end.
async fn hidden_pulled_articles_never_leave_a_page_empty_before_the_end(database: TestDb) {
    let db = &database.db;
    let feed = seed_author(db, 3).await;
    sqlx::query(
        "INSERT INTO follows (follower, followee, status, ctime, utime) VALUES (2, 3, 1, 1500, 1500)",
    )
    .execute(db.writer())
    .await
    .unwrap();
    sqlx::query("INSERT INTO follow_counts (uid, followers, followees, utime) VALUES (3, 1, 0, 0)")
        .execute(db.writer())
        .await
        .unwrap();
    for id in 99..=129 {
        let time = 5000 + id;
        for table in ["articles", "published_articles"] {
            sqlx::query(&format!(
                "INSERT INTO {table} (id, author_id, title, content, abstract, status, ctime, utime) \
                 VALUES ($1, 3, 't', 'c', 'a', 2, $2, $2)"
            ))
            .bind(id)
            .bind(time)
            .execute(db.writer())
            .await
            .unwrap();
        }
        // Pulled: the author has more followers (1) than the threshold (0).
        assert_eq!(
            feed.store().add_article(id, 3, time, 0).await.unwrap(),
            None
        );
    }
    for table in ["articles", "published_articles"] {
        sqlx::query(&format!("UPDATE {table} SET status = 3 WHERE id >= 100"))
            .execute(db.writer())
            .await
            .unwrap();
    }
    let page = feed.page(2, None, 5).await.unwrap();
    assert_eq!(kinds_and_actors(&page), vec![("article", 3)]);
    assert_eq!(page.items[0].article.as_ref().unwrap().id, 99);
    assert_eq!(page.next, None, "the end");
}

/// A deleted comment, an undone like, a withdrawn article's comments and a cancelled follow are
/// out of the very next page, before any consumer ran: the feed shows only what the source
/// tables show.
async fn what_the_source_tables_no_longer_show_the_feed_never_shows(database: TestDb) {
    let db = &database.db;
    let feed = seed_author(db, 5).await;
    seed_like(db, &feed, 3, 2000).await;
    let gone = seed_comment(db, &feed, 4, "words to be deleted", 3000).await;
    let kept = seed_comment(db, &feed, 5, "words under a withdrawn article", 3100).await;
    let page = feed.page(1, None, 10).await.unwrap();
    assert_eq!(
        kinds_and_actors(&page),
        vec![("comment", 5), ("comment", 4), ("like", 3), ("follow", 2)]
    );

    sqlx::query("UPDATE comments SET deleted = 1, content = '' WHERE id = $1")
        .bind(gone)
        .execute(db.writer())
        .await
        .unwrap();
    let page = feed.page(1, None, 10).await.unwrap();
    assert_eq!(
        kinds_and_actors(&page),
        vec![("comment", 5), ("like", 3), ("follow", 2)]
    );
    assert_eq!(page.items[0].comment.as_ref().unwrap().id, kept);

    sqlx::query("UPDATE user_likes SET status = 0 WHERE uid = 3")
        .execute(db.writer())
        .await
        .unwrap();
    let page = feed.page(1, None, 10).await.unwrap();
    assert_eq!(kinds_and_actors(&page), vec![("comment", 5), ("follow", 2)]);

    set_article_status(db, 3).await;
    let page = feed.page(1, None, 10).await.unwrap();
    assert_eq!(kinds_and_actors(&page), vec![("follow", 2)]);

    sqlx::query("UPDATE follows SET status = 0 WHERE follower = 2")
        .execute(db.writer())
        .await
        .unwrap();
    let page = feed.page(1, None, 10).await.unwrap();
    assert!(page.items.is_empty() && page.next.is_none(), "{page:?}");
}

/// Like rows of article 1 by `uids`, on or off (bulk SQL, no events).
async fn liked_by(db: &platform::db::Db, uids: std::ops::RangeInclusive<i64>, on: bool) {
    let rows: Vec<String> = uids
        .map(|uid| format!("({uid}, 'article', 1, {}, 0, 0)", i64::from(on)))
        .collect();
    sqlx::query(&format!(
        "INSERT INTO user_likes (uid, biz, biz_id, status, ctime, utime) VALUES {}",
        rows.join(", ")
    ))
    .execute(db.writer())
    .await
    .unwrap();
}

/// Each liker's `like` item: (actor, ctime), in actor order; and the like rows in inboxes.
async fn like_items(db: &platform::db::Db) -> (Vec<(i64, i64)>, i64) {
    let items: Vec<(i64, i64)> =
        sqlx::query_as("SELECT actor, ctime FROM feed_events WHERE kind = 'like' ORDER BY actor")
            .fetch_all(db.pool())
            .await
            .unwrap();
    let inbox: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM feed_inbox i JOIN feed_events e ON e.id = i.event_id \
         WHERE e.kind = 'like' AND i.uid = 1",
    )
    .fetch_one(db.pool())
    .await
    .unwrap();
    (items, inbox)
}

/// A batch of like notices larger than one statement, with repeats, an undone like that had
/// an item, the author's own like and an item already there: the feed ends as the likes table
/// says, each added item dated by its pair's first notice and in the author's inbox; then a
/// batch after nearly every like was undone takes their items and inbox rows away.
async fn a_batch_of_likes_agrees_with_the_likes_table(database: TestDb) {
    use webook::feed::store::{FeedStore, LikeNotice, LIKES_PER_STATEMENT};
    let db = &database.db;
    let likers = 2 * LIKES_PER_STATEMENT as i64 + 50;
    crowd(db, likers).await;
    liked_by(db, 1..=likers + 1, true).await;
    let store = FeedStore::new(db.clone());
    // Items there before the batch: liker 4's (kept, with its date), liker 3's (undone since).
    store.sync_like(4, 1, 100).await.unwrap();
    store.sync_like(3, 1, 100).await.unwrap();
    sqlx::query("UPDATE user_likes SET status = 0 WHERE uid = 3")
        .execute(db.writer())
        .await
        .unwrap();
    let notice = |liker: i64, time: i64| LikeNotice {
        liker,
        article: 1,
        time,
    };
    let mut batch: Vec<LikeNotice> = (1..=likers + 1)
        .map(|uid| notice(uid, 1000 + uid))
        .collect();
    batch.push(notice(2, 5));
    batch.push(notice(3, 6));
    store.sync_likes(&batch).await.unwrap();
    let expected: Vec<(i64, i64)> = (2..=likers + 1)
        .filter(|uid| *uid != 3)
        .map(|uid| (uid, if uid == 4 { 100 } else { 1000 + uid }))
        .collect();
    let (items, inbox) = like_items(db).await;
    assert_eq!(
        items, expected,
        "one item per like on, the author's own excepted"
    );
    assert_eq!(inbox, expected.len() as i64);
    // Applying the same batch again changes nothing.
    store.sync_likes(&batch).await.unwrap();
    assert_eq!(like_items(db).await, (expected, inbox));

    sqlx::query("UPDATE user_likes SET status = 0 WHERE uid <> 5")
        .execute(db.writer())
        .await
        .unwrap();
    store.sync_likes(&batch).await.unwrap();
    assert_eq!(like_items(db).await, (vec![(5, 1005)], 1));
}

/// Two instances' batches over the same likes, one in the other's reverse order, applied at
/// the same time, both commit — adding the items, then taking them away — and the feed ends as
/// the likes table says: each step takes its rows in key order.
async fn overlapping_like_batches_synced_concurrently_never_deadlock(database: TestDb) {
    use webook::feed::store::{FeedStore, LikeNotice};
    const LIKERS: i64 = 300;
    const ROUNDS: i64 = 6;
    let db = &database.db;
    crowd(db, LIKERS).await;
    liked_by(db, 2..=LIKERS + 1, false).await;
    let store = FeedStore::new(db.clone());
    for round in 0..ROUNDS {
        let on = round % 2 == 0;
        sqlx::query("UPDATE user_likes SET status = $1")
            .bind(i64::from(on))
            .execute(db.writer())
            .await
            .unwrap();
        let batches = [false, true].map(|reversed| {
            let mut likes: Vec<LikeNotice> = (2..=LIKERS + 1)
                .map(|liker| LikeNotice {
                    liker,
                    article: 1,
                    time: round,
                })
                .collect();
            if reversed {
                likes.reverse();
            }
            let store = store.clone();
            tokio::spawn(async move { store.sync_likes(&likes).await })
        });
        for batch in batches {
            batch
                .await
                .unwrap()
                .unwrap_or_else(|err| panic!("round {round}: {err}"));
        }
        let (items, inbox) = like_items(db).await;
        let expected = if on { LIKERS } else { 0 };
        assert_eq!(
            (items.len() as i64, inbox),
            (expected, expected),
            "round {round}"
        );
    }
}

platform::backend_tests!(webook::schema::MIGRATIONS;
    a_fan_out_killed_mid_way_resumes_without_duplicates,
    a_batch_of_likes_agrees_with_the_likes_table,
    overlapping_like_batches_synced_concurrently_never_deadlock,
    a_fan_out_of_exactly_one_batch_takes_one_transaction,
    inboxes_are_pruned_to_the_cap,
    both_probes_find_the_same_pull_authors,
    hidden_items_never_leave_a_page_empty_before_the_end,
    hidden_pulled_articles_never_leave_a_page_empty_before_the_end,
    what_the_source_tables_no_longer_show_the_feed_never_shows,
);

/// Two instances behind a load balancer (one PostgreSQL, one Redis): follows made on one count
/// on the other, and articles published on either reach feeds read on either, once each —
/// whichever instance's consumer handled their events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_follows_and_feeds() {
    let (first, second) = common::cluster_pair(|config| {
        config.settings_mut::<FeedSettings>().feed_push_threshold = 1;
        config
            .settings_mut::<webook::auth::settings::AuthSettings>()
            .auth_rate_limit = 1_000_000;
    })
    .await;
    let reader = member(&first, "reader").await;
    let small = member(&first, "small").await;
    let big = member(&first, "big").await;
    let fan = member(&first, "fan").await;
    assert_eq!(follow(&second, &reader, small.uid, true).await, 0);
    assert_eq!(follow(&first, &reader, big.uid, true).await, 0);
    assert_eq!(follow(&second, &fan, big.uid, true).await, 0);
    assert_eq!(counts(&first, &reader, big.uid).await, (2, 0));
    assert_eq!(counts(&second, &reader, reader.uid).await, (0, 2));
    let mut expected = HashSet::new();
    for n in 0..10 {
        let (instance, author) = if n % 2 == 0 {
            (&first, &small)
        } else {
            (&second, &big)
        };
        expected.insert(publish(instance, author, &format!("a{n}")).await);
    }
    wait_for_articles(&second, &reader, &expected).await;
    let on_first = article_ids(&whole_feed(&first, &reader, 3).await);
    assert_eq!(on_first.len(), expected.len());
    assert_eq!(on_first.into_iter().collect::<HashSet<_>>(), expected);
    first.stop().await.unwrap();
    second.stop().await.unwrap();
}
