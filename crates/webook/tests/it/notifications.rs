//! Notifications on {SQLite, PostgreSQL} × {embedded, Redis}: each kind (reply, comment, like,
//! collect, follow, reward) reaches the right recipient once and never the actor themself; a
//! redelivered or late event changes nothing; grouped likes count exactly under concurrent likes
//! and unlikes; the unread count follows reads of one and of all; a muted kind is not produced;
//! a deleted comment and a withdrawn article take their notifications away; pages never repeat
//! or skip; input is checked at the edge.
//!
//! Consumers of one topic apply its events in order (one consumer per topic in a test process),
//! so "nothing was written for X" is asserted after a later event of the same topic shows up.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{collections::HashSet, time::Duration};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::common::{self, call, every_page, get, members, post, publish, Member, Setup};
use crate::rewards::{confirm, reward};
use platform::{events::Event, testing::wait_until};
use webook::{
    comment::CommentSettings,
    interactive::{InteractionEvent, TOPIC_LIKE_CHANGED},
    notifications::{jobs::PurgeNotifications, NotificationService},
    testing::TestApp,
};

/// An app without the write and comment limits.
async fn app(setup: Setup) -> TestApp {
    setup
        .spawn(|config| {
            config.settings_mut::<CommentSettings>().comment_rate_limit = 0;
            let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
            auth.auth_rate_limit = 1_000_000;
            auth.write_rate_limit = 0;
        })
        .await
}

/// The `n` members of a fresh app, as an array.
async fn cast<const N: usize>(app: &TestApp, prefix: &str) -> [Member; N] {
    <[Member; N]>::try_from(members(app, prefix, N).await).unwrap_or_else(|_| unreachable!())
}

/// Every notification of `who` (at most 100), newest first.
async fn inbox(app: &TestApp, who: &Member) -> Vec<Value> {
    let answer = get(app, "/notifications?limit=100", Some(&who.token)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"]["items"].as_array().unwrap().clone()
}

/// `who`'s notifications of `kind`.
async fn of_kind(app: &TestApp, who: &Member, kind: &str) -> Vec<Value> {
    inbox(app, who)
        .await
        .into_iter()
        .filter(|item| item["kind"] == kind)
        .collect()
}

/// The ids of an item's actors, newest first.
fn actor_ids(item: &Value) -> Vec<i64> {
    item["actors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|actor| actor["id"].as_i64().unwrap())
        .collect()
}

async fn unread(app: &TestApp, who: &Member) -> i64 {
    let answer = get(app, "/notifications/unread", Some(&who.token)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"]["count"].as_i64().unwrap()
}

async fn comment(
    app: &TestApp,
    who: &Member,
    article: i64,
    parent: Option<i64>,
    text: &str,
) -> i64 {
    let mut body = json!({"biz": "article", "bizId": article, "content": text});
    if let Some(parent) = parent {
        body["parentId"] = json!(parent);
    }
    let answer = post(app, "/comments", Some(&who.token), body).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].as_i64().unwrap()
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

async fn follow(app: &TestApp, who: &Member, whom: i64, on: bool) {
    let path = if on {
        "/follow/follow"
    } else {
        "/follow/cancel"
    };
    let answer = post(app, path, Some(&who.token), json!({ "followee": whom })).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
}

/// The article's like count as readers see it.
async fn like_cnt(app: &TestApp, who: &Member, article: i64) -> i64 {
    let view = get(app, &format!("/articles/pub/{article}"), Some(&who.token))
        .await
        .json();
    view["data"]["likeCnt"].as_i64().unwrap()
}

async fn each_kind_reaches_its_recipient_once_and_never_the_actor(setup: Setup) {
    let app = app(setup).await;
    let [author, reader, other] = cast::<3>(&app, "kinds").await;
    let article = publish(&app, &author, "noticed").await;

    // A comment on the author's article; the author's answer to it is a reply for the reader.
    let top = comment(&app, &reader, article, None, "<b>great</b> piece").await;
    let answer = comment(&app, &author, article, Some(top), "thanks").await;
    // The author's own comment, answered by another: one "reply" for the author, not also a
    // "comment" (it is their article).
    let own = comment(&app, &author, article, None, "an update").await;
    let reply_to_author = comment(&app, &other, article, Some(own), "nice update").await;
    // Likes and collects; the author's own like is nobody's notification.
    like(&app, &reader, article, true).await;
    like(&app, &author, article, true).await;
    let collected = post(
        &app,
        "/articles/pub/collect",
        Some(&reader.token),
        json!({"id": article}),
    )
    .await;
    assert_eq!(collected.code(), 0, "{}", collected.raw);
    follow(&app, &reader, author.uid, true).await;
    follow(&app, &author, reader.uid, true).await;
    // A reward paid: a notification for the author, with the amount.
    let (_rid, trade_no) = reward(&app, &other, article, 300).await;
    assert_eq!(confirm(&app, &trade_no, "success").await["code"], 0);

    let kinds = |items: Vec<Value>| {
        let mut kinds: Vec<String> = items
            .iter()
            .map(|item| item["kind"].as_str().unwrap().to_owned())
            .collect();
        kinds.sort();
        kinds
    };
    wait_until("the author's notifications", || async {
        kinds(inbox(&app, &author).await)
            == ["collect", "comment", "follow", "like", "reply", "reward"]
    })
    .await;
    wait_until("the reader's notifications", || async {
        kinds(inbox(&app, &reader).await) == ["follow", "reply"]
    })
    .await;

    let author_items = inbox(&app, &author).await;
    let find = |kind: &str| {
        author_items
            .iter()
            .find(|item| item["kind"] == kind)
            .unwrap()
            .clone()
    };
    let commented = find("comment");
    assert_eq!(actor_ids(&commented), [reader.uid]);
    assert_eq!(commented["comment"]["id"], top);
    assert_eq!(
        commented["comment"]["excerpt"],
        "&lt;b&gt;great&lt;/b&gt; piece"
    );
    assert_eq!(commented["article"]["id"], article);
    assert_eq!(commented["article"]["title"], "noticed");
    assert_eq!(commented["read"], false);
    let replied = find("reply");
    assert_eq!(replied["comment"]["id"], reply_to_author);
    assert_eq!(actor_ids(&replied), [other.uid]);
    let liked = find("like");
    assert_eq!(
        (actor_ids(&liked), liked["actorCnt"].clone()),
        (vec![reader.uid], json!(1))
    );
    assert_eq!(actor_ids(&find("collect")), [reader.uid]);
    assert_eq!(actor_ids(&find("follow")), [reader.uid]);
    let rewarded = find("reward");
    assert_eq!(actor_ids(&rewarded), [other.uid]);
    assert_eq!(rewarded["amt"], 300);
    assert_eq!(rewarded["article"]["id"], article);

    let reader_items = inbox(&app, &reader).await;
    let reply = reader_items.iter().find(|i| i["kind"] == "reply").unwrap();
    assert_eq!(reply["comment"]["id"], answer);
    assert_eq!(actor_ids(reply), [author.uid]);
    // The replier of the author's comment is told nothing of their own reply, nor of the
    // author's answers to others.
    assert!(inbox(&app, &other).await.is_empty());
    assert_eq!(unread(&app, &author).await, 6);
    // Counted by source topic (metrics are process-wide: a lower bound).
    let metrics = app.metrics_text().await;
    for topic in [
        "comment_changed",
        "like_changed",
        "follow_changed",
        "payment_succeeded",
    ] {
        let counted = metrics.lines().any(|line| {
            line.strip_prefix(&format!(
                "notifications_written_total{{topic=\"{topic}\"}} "
            ))
            .and_then(|value| value.parse::<f64>().ok())
            .is_some_and(|value| value >= 1.0)
        });
        assert!(counted, "no notifications_written_total for {topic}");
    }
}

/// An event of `topic` built by hand, as the stream would deliver it again.
fn like_event(id: &str, uid: i64, article: i64, on: bool, time: i64) -> Event {
    let payload = InteractionEvent {
        uid,
        biz: webook::biz::Biz::Article,
        biz_id: article,
        on,
        time,
    };
    Event {
        id: id.to_owned(),
        topic: TOPIC_LIKE_CHANGED.to_owned(),
        key: format!("article:{article}"),
        payload: serde_json::to_vec(&payload).unwrap().into(),
        time,
        traceparent: None,
    }
}

async fn a_redelivered_or_late_event_changes_nothing(setup: Setup) {
    let app = app(setup).await;
    let [author, first, second] = cast::<3>(&app, "dup").await;
    let article = publish(&app, &author, "delivered twice").await;
    let service: NotificationService = app.service();
    let now = platform::db::now_millis();

    // One like delivered twice in a batch and again in another batch: counted once.
    let liked = like_event("dup-1", first.uid, article, true, now);
    service
        .apply(TOPIC_LIKE_CHANGED, &[liked.clone(), liked.clone()])
        .await
        .unwrap();
    service.apply(TOPIC_LIKE_CHANGED, &[liked]).await.unwrap();
    // A second like, then an unlike of it older than the like (delivered late): ignored.
    service
        .apply(
            TOPIC_LIKE_CHANGED,
            &[
                like_event("dup-2", second.uid, article, true, now + 10),
                like_event("dup-3", second.uid, article, false, now + 5),
            ],
        )
        .await
        .unwrap();
    let likes = of_kind(&app, &author, "like").await;
    assert_eq!(likes.len(), 1, "{likes:?}");
    assert_eq!(likes[0]["actorCnt"], 2, "{likes:?}");
    assert_eq!(actor_ids(&likes[0]), [second.uid, first.uid]);
    // The unlike of the first like, delivered twice: one actor less, once.
    let unliked = like_event("dup-4", first.uid, article, false, now + 20);
    service
        .apply(TOPIC_LIKE_CHANGED, std::slice::from_ref(&unliked))
        .await
        .unwrap();
    service.apply(TOPIC_LIKE_CHANGED, &[unliked]).await.unwrap();
    let likes = of_kind(&app, &author, "like").await;
    assert_eq!(likes[0]["actorCnt"], 1, "{likes:?}");
    assert_eq!(actor_ids(&likes[0]), [second.uid]);
    // An event for the actor themself: nothing.
    service
        .apply(
            TOPIC_LIKE_CHANGED,
            &[like_event("dup-5", author.uid, article, true, now + 30)],
        )
        .await
        .unwrap();
    assert_eq!(of_kind(&app, &author, "like").await[0]["actorCnt"], 1);
}

async fn grouped_likes_count_exactly_under_concurrent_likes_and_unlikes(setup: Setup) {
    let app = app(setup).await;
    let [author] = cast::<1>(&app, "owner").await;
    let crowd = members(&app, "crowd", 20).await;
    // Signed up last: the largest id, first among likes of the same millisecond.
    let [last] = cast::<1>(&app, "last").await;
    let article = publish(&app, &author, "liked a lot").await;

    // Every member likes; every other one unlikes again, a third of them like once more — all
    // at once.
    let tasks: Vec<_> = crowd
        .iter()
        .enumerate()
        .map(|(n, member)| {
            let (client, base, token) = (app.client.clone(), app.url("/"), member.token.clone());
            tokio::spawn(async move {
                let mut steps = vec![true];
                if n % 2 == 0 {
                    steps.push(false);
                }
                if n % 3 == 0 {
                    steps.push(true);
                }
                for on in steps {
                    let body = json!({"id": article, "like": on});
                    let answer = common::envelope(
                        &client,
                        reqwest::Method::POST,
                        format!("{base}articles/pub/like"),
                        &token,
                        Some(&body),
                    )
                    .await;
                    assert_eq!(answer["code"], 0, "{answer}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // A last like after all of them: once it shows, every earlier like event was applied.
    like(&app, &last, article, true).await;
    let expected = like_cnt(&app, &author, article).await;
    assert_eq!(expected, 1 + 10 + 4, "the likes that stand");
    wait_until("the last like in the group", || async {
        of_kind(&app, &author, "like")
            .await
            .first()
            .is_some_and(|item| actor_ids(item).first() == Some(&last.uid))
    })
    .await;
    // One row per article and day (two around midnight UTC): their counts add up exactly.
    let likes = of_kind(&app, &author, "like").await;
    let counted: i64 = likes
        .iter()
        .map(|item| item["actorCnt"].as_i64().unwrap())
        .sum();
    assert_eq!(counted, expected, "{likes:?}");
    assert!(likes.len() <= 2, "{likes:?}");
    assert_eq!(actor_ids(&likes[0]).len(), 3, "the latest three actors");
}

async fn unread_counts_follow_reads_and_pages_never_repeat_or_skip(setup: Setup) {
    let app = app(setup).await;
    let [star, stranger] = cast::<2>(&app, "star").await;
    let fans = members(&app, "fan", 12).await;
    for fan in &fans {
        follow(&app, fan, star.uid, true).await;
    }
    wait_until("twelve follow notifications", || async {
        unread(&app, &star).await == 12
    })
    .await;

    // Pages of 5: every notification once, newest first.
    let all = every_page(5, async |cursor: Option<String>| {
        let path = match cursor {
            Some(cursor) => format!("/notifications?limit=5&cursor={cursor}"),
            None => "/notifications?limit=5".to_owned(),
        };
        let answer = get(&app, &path, Some(&star.token)).await;
        assert_eq!(answer.code(), 0, "{}", answer.raw);
        answer.json()["data"].clone()
    })
    .await;
    let ids: Vec<i64> = all
        .iter()
        .map(|item| item["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 12, "{ids:?}");
    let keys: Vec<(i64, i64)> = all
        .iter()
        .map(|item| (item["time"].as_i64().unwrap(), item["id"].as_i64().unwrap()))
        .collect();
    assert!(keys.windows(2).all(|w| w[0] > w[1]), "{keys:?}");
    let followers: HashSet<i64> = all.iter().flat_map(actor_ids).collect();
    assert_eq!(followers, fans.iter().map(|fan| fan.uid).collect());

    // One read; someone else's is not found; then all.
    let read = post(
        &app,
        "/notifications/read",
        Some(&star.token),
        json!({"id": ids[3]}),
    )
    .await;
    assert_eq!(read.code(), 0, "{}", read.raw);
    assert_eq!(unread(&app, &star).await, 11);
    let page = inbox(&app, &star).await;
    assert_eq!(
        page.iter().filter(|item| item["read"] == true).count(),
        1,
        "{page:?}"
    );
    let foreign = post(
        &app,
        "/notifications/read",
        Some(&stranger.token),
        json!({"id": ids[0]}),
    )
    .await;
    assert_eq!(foreign.code(), 404001, "{}", foreign.raw);
    assert_eq!(unread(&app, &star).await, 11);
    let all_read = post(
        &app,
        "/notifications/read",
        Some(&star.token),
        json!({"all": true}),
    )
    .await;
    assert_eq!(all_read.code(), 0, "{}", all_read.raw);
    assert_eq!(unread(&app, &star).await, 0);

    // An unfollow takes its notification away; a new follow is unread.
    follow(&app, &fans[0], star.uid, false).await;
    follow(&app, &stranger, star.uid, true).await;
    wait_until("the stranger's follow", || async {
        unread(&app, &star).await == 1
    })
    .await;
    let follows = of_kind(&app, &star, "follow").await;
    let followers: HashSet<i64> = follows.iter().flat_map(actor_ids).collect();
    assert!(!followers.contains(&fans[0].uid), "{follows:?}");
    assert!(followers.contains(&stranger.uid), "{follows:?}");
    assert_eq!(follows.len(), 12);
}

async fn a_muted_kind_is_not_produced(setup: Setup) {
    let app = app(setup).await;
    let [author, first, second, witness] = cast::<4>(&app, "quiet").await;
    let muted = call(
        &app,
        reqwest::Method::PUT,
        "/notifications/preferences",
        Some(&author.token),
        common::UA,
        Some(json!({"muted": ["follow", "like", "follow"]})),
    )
    .await;
    assert_eq!(muted.code(), 0, "{}", muted.raw);
    assert_eq!(muted.json()["data"]["muted"], json!(["like", "follow"]));
    let stored = get(&app, "/notifications/preferences", Some(&author.token)).await;
    assert_eq!(stored.json()["data"]["muted"], json!(["like", "follow"]));

    follow(&app, &first, author.uid, true).await;
    // Preferences apply when the event is handled: a later follow of someone else shows that
    // the muted one was handled (one topic, in order) before follows go on again.
    follow(&app, &second, witness.uid, true).await;
    wait_until("the witness's follow", || async {
        !of_kind(&app, &witness, "follow").await.is_empty()
    })
    .await;
    assert!(of_kind(&app, &author, "follow").await.is_empty());
    // Follows on again: a later follow shows, the muted one never did.
    let unmuted = call(
        &app,
        reqwest::Method::PUT,
        "/notifications/preferences",
        Some(&author.token),
        common::UA,
        Some(json!({"muted": ["like"]})),
    )
    .await;
    assert_eq!(unmuted.code(), 0, "{}", unmuted.raw);
    follow(&app, &second, author.uid, true).await;
    wait_until("the follow after unmuting", || async {
        !of_kind(&app, &author, "follow").await.is_empty()
    })
    .await;
    let follows = of_kind(&app, &author, "follow").await;
    assert_eq!(follows.len(), 1, "{follows:?}");
    assert_eq!(actor_ids(&follows[0]), [second.uid]);
    // The muted follow's undoing is harmless.
    follow(&app, &first, author.uid, false).await;
    follow(&app, &first, author.uid, true).await;
    wait_until("the first follower's new follow", || async {
        of_kind(&app, &author, "follow").await.len() == 2
    })
    .await;
    assert_eq!(unread(&app, &author).await, 2);
}

async fn a_deleted_comment_and_a_withdrawn_article_take_their_notifications(setup: Setup) {
    let app = app(setup).await;
    let [author, reader, fan] = cast::<3>(&app, "gone").await;
    let article = publish(&app, &author, "short-lived").await;
    let kept = publish(&app, &author, "kept").await;
    let doomed = comment(&app, &reader, article, None, "soon gone").await;
    let stays = comment(&app, &reader, kept, None, "stays").await;
    like(&app, &reader, article, true).await;
    like(&app, &fan, kept, true).await;
    follow(&app, &fan, author.uid, true).await;
    wait_until("five notifications", || async {
        inbox(&app, &author).await.len() == 5
    })
    .await;

    let deleted = call(
        &app,
        reqwest::Method::DELETE,
        &format!("/comments/{doomed}"),
        Some(&reader.token),
        common::UA,
        None,
    )
    .await;
    assert_eq!(deleted.code(), 0, "{}", deleted.raw);
    wait_until("the deleted comment's notification to go", || async {
        let comments = of_kind(&app, &author, "comment").await;
        comments.len() == 1 && comments[0]["comment"]["id"] == stays
    })
    .await;

    let withdrawn = post(
        &app,
        "/articles/withdraw",
        Some(&author.token),
        json!({"id": article}),
    )
    .await;
    assert_eq!(withdrawn.code(), 0, "{}", withdrawn.raw);
    wait_until("the withdrawn article's like to go", || async {
        let likes = of_kind(&app, &author, "like").await;
        likes.len() == 1 && likes[0]["article"]["id"] == kept
    })
    .await;
    // The rest stays: the other article's like and comment, the follow.
    assert_eq!(inbox(&app, &author).await.len(), 3);
    // The group of the kept article goes on counting.
    like(&app, &reader, kept, true).await;
    wait_until("the second like of the kept article", || async {
        of_kind(&app, &author, "like").await[0]["actorCnt"] == 2
    })
    .await;
}

async fn input_is_checked_at_the_edge(setup: Setup) {
    let app = app(setup).await;
    let [user] = cast::<1>(&app, "edge").await;
    let token = Some(user.token.as_str());
    for path in [
        "/notifications?limit=0",
        "/notifications?limit=101",
        "/notifications?cursor=not-a-cursor",
        "/notifications?cursor=MQ",
    ] {
        let answer = get(&app, path, token).await;
        assert_eq!(answer.code(), 4, "{path}: {}", answer.raw);
    }
    for body in [
        json!({}),
        json!({"all": false}),
        json!({"id": 0}),
        json!({"id": -3}),
        json!({"id": 1, "all": true}),
    ] {
        let answer = post(&app, "/notifications/read", token, body.clone()).await;
        assert_eq!(answer.code(), 4, "{body}: {}", answer.raw);
    }
    let missing = post(&app, "/notifications/read", token, json!({"id": 99_999})).await;
    assert_eq!(missing.code(), 404001, "{}", missing.raw);
    let unknown = call(
        &app,
        reqwest::Method::PUT,
        "/notifications/preferences",
        token,
        common::UA,
        Some(json!({"muted": ["likes"]})),
    )
    .await;
    assert_eq!(unknown.code(), 4, "{}", unknown.raw);
    assert!(unknown.raw.contains("muted"), "{}", unknown.raw);
    let not_a_list = call(
        &app,
        reqwest::Method::PUT,
        "/notifications/preferences",
        token,
        common::UA,
        Some(json!({"muted": "like"})),
    )
    .await;
    assert_eq!(not_a_list.code(), 4, "{}", not_a_list.raw);
    for path in [
        "/notifications",
        "/notifications/unread",
        "/notifications/preferences",
    ] {
        let anonymous = get(&app, path, None).await;
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{path}");
    }
    // Nothing happened to a new user.
    assert!(inbox(&app, &user).await.is_empty());
    assert_eq!(unread(&app, &user).await, 0);
}

async fn retention_deletes_what_is_older(setup: Setup) {
    let app = app(setup).await;
    let [author, old, recent] = cast::<3>(&app, "aged").await;
    let article = publish(&app, &author, "long ago").await;
    let service: NotificationService = app.service();
    let now = platform::db::now_millis();
    let hour = 3_600_000;
    // A like three days ago (its own day's row) and one now.
    service
        .apply(
            TOPIC_LIKE_CHANGED,
            &[
                like_event("aged-1", old.uid, article, true, now - 72 * hour),
                like_event("aged-2", recent.uid, article, true, now),
            ],
        )
        .await
        .unwrap();
    assert_eq!(of_kind(&app, &author, "like").await.len(), 2);
    let job = PurgeNotifications::new(service.store().clone(), Duration::from_secs(24 * 3600));
    assert_eq!(job.purge().await.unwrap(), 1);
    let likes = of_kind(&app, &author, "like").await;
    assert_eq!(likes.len(), 1, "{likes:?}");
    assert_eq!(actor_ids(&likes[0]), [recent.uid]);
    // The old like's undoing, after its row went, takes nothing from the recent row.
    service
        .apply(
            TOPIC_LIKE_CHANGED,
            &[like_event("aged-3", old.uid, article, false, now + 1)],
        )
        .await
        .unwrap();
    assert_eq!(of_kind(&app, &author, "like").await[0]["actorCnt"], 1);
    assert_eq!(job.purge().await.unwrap(), 0);
}

/// An open `GET /notifications/stream` of `who`.
struct Stream {
    response: reqwest::Response,
    buffer: String,
}

impl Stream {
    async fn open(app: &TestApp, who: &Member) -> Self {
        let response = app
            .client
            .get(app.url("/notifications/stream"))
            .bearer_auth(&who.token)
            .header(reqwest::header::USER_AGENT, common::UA)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers()["content-type"].to_str().unwrap();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The count of the next `unread` event (keep-alive comments skipped); fails after 10 s.
    async fn next_count(&mut self) -> i64 {
        let read = async {
            loop {
                while let Some(end) = self.buffer.find("\n\n") {
                    let event: String = self.buffer.drain(..end + 2).collect();
                    if let Some(data) = event.lines().find_map(|line| line.strip_prefix("data: ")) {
                        assert!(event.contains("event: unread"), "{event}");
                        let data: Value = serde_json::from_str(data).unwrap();
                        return data["count"].as_i64().unwrap();
                    }
                }
                let chunk = self
                    .response
                    .chunk()
                    .await
                    .unwrap()
                    .expect("the stream ended");
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        };
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .unwrap_or_else(|_| panic!("no unread event within 10 s"))
    }
}

async fn the_unread_count_streams_as_it_changes(setup: Setup) {
    let app = app(setup).await;
    let [star, fan, other] = cast::<3>(&app, "live").await;
    let mut stream = Stream::open(&app, &star).await;
    assert_eq!(stream.next_count().await, 0, "the count at once");
    // Someone else's notification wakes nobody here; the star's own do.
    follow(&app, &star, other.uid, true).await;
    follow(&app, &fan, star.uid, true).await;
    assert_eq!(stream.next_count().await, 1);
    follow(&app, &other, star.uid, true).await;
    assert_eq!(stream.next_count().await, 2);
    let read = post(
        &app,
        "/notifications/read",
        Some(&star.token),
        json!({"all": true}),
    )
    .await;
    assert_eq!(read.code(), 0, "{}", read.raw);
    assert_eq!(stream.next_count().await, 0);
    // Anonymous callers get no stream.
    let anonymous = get(&app, "/notifications/stream", None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
}

/// Two instances sharing PostgreSQL and Redis: a stream open on one hears of changes whichever
/// instance applied them (the consumers of the group run on both) and of reads made on the
/// other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_streams_hear_of_changes_made_on_another_instance() {
    let (first, second) = common::cluster_pair(|config| {
        let auth = config.settings_mut::<webook::auth::settings::AuthSettings>();
        auth.auth_rate_limit = 1_000_000;
        auth.write_rate_limit = 0;
    })
    .await;
    let [star, fan] = cast::<2>(&first, "pair").await;
    let mut stream = Stream::open(&first, &star).await;
    assert_eq!(stream.next_count().await, 0);
    follow(&second, &fan, star.uid, true).await;
    assert_eq!(stream.next_count().await, 1);
    let read = post(
        &second,
        "/notifications/read",
        Some(&star.token),
        json!({"all": true}),
    )
    .await;
    assert_eq!(read.code(), 0, "{}", read.raw);
    assert_eq!(stream.next_count().await, 0);
}

setup_tests!(
    each_kind_reaches_its_recipient_once_and_never_the_actor,
    a_redelivered_or_late_event_changes_nothing,
    grouped_likes_count_exactly_under_concurrent_likes_and_unlikes,
    unread_counts_follow_reads_and_pages_never_repeat_or_skip,
    a_muted_kind_is_not_produced,
    a_deleted_comment_and_a_withdrawn_article_take_their_notifications,
    input_is_checked_at_the_edge,
    the_unread_count_streams_as_it_changes,
    retention_deletes_what_is_older,
);

/// A stopping server ends its open notification streams at once instead of waiting for them:
/// with a minute's `shutdown_timeout`, a server whose drain waited for an open stream would
/// not exit within the wait limit (and would log that requests outlived it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_server_ends_its_streams_instead_of_waiting_for_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = common::process::webook(dir.path());
    command
        .env("WEBOOK_LOG", "warn,webook::app=info")
        .env("WEBOOK_SHUTDOWN_TIMEOUT", "60s");
    let server = common::process::Server::start(command);
    let token = server
        .sign_up_and_log_in("streamer@example.com", "Stream-Passw0rd!")
        .await;
    let mut response = reqwest::Client::new()
        .get(server.url("/notifications/stream"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let first = response.chunk().await.unwrap().expect("the first event");
    assert!(
        String::from_utf8_lossy(&first).contains("event: unread"),
        "{first:?}"
    );
    server.terminate();
    // The stream ends (the body completes) rather than being cut when the drain gives up.
    let rest = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(chunk) = response.chunk().await.transpose() {
            chunk.expect("the stream ends cleanly");
        }
    })
    .await;
    assert!(
        rest.is_ok(),
        "the stream did not end within 20 s of the signal"
    );
    let log = server.new_log_lines();
    assert!(
        !log.iter()
            .any(|line| line.contains("outlived shutdown_timeout")),
        "{log:?}"
    );
    assert_eq!(server.exit_code().await, 0);
}
