//! Reads, likes and collects on {SQLite, PostgreSQL} × {embedded (in-process events and cache),
//! Redis (streams and cache)}: exact counts under concurrency, idempotency, reads counted in
//! batches over HTTP, and nothing lost on graceful shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use crate::common;

use std::sync::{
    atomic::{AtomicUsize, Ordering},
    Arc,
};
use webook::schema::MIGRATIONS;

use common::{get, login, post, signup, Setup};
use platform::testing::{wait_until, TestDb};
use serde_json::{json, Value};
use webook::{interactive::Counts, testing::TestApp};

const BIZ: webook::biz::Biz = webook::biz::Biz::Article;

async fn user(app: &TestApp, email: &str) -> String {
    assert_eq!(signup(app, email).await.code(), 0);
    login(app, email).await.0
}

async fn published_article(app: &TestApp, token: &str) -> i64 {
    let answer = post(
        app,
        "/articles/publish",
        Some(token),
        json!({"title": "t", "content": "<p>c</p>"}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].as_i64().unwrap()
}

async fn view(app: &TestApp, token: &str, id: i64) -> Value {
    let answer = get(app, &format!("/articles/pub/{id}"), Some(token)).await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    answer.json()["data"].clone()
}

async fn db_counts(app: &TestApp, id: i64) -> Counts {
    app.service::<webook::interactive::InteractiveService>()
        .batch_counts(BIZ, &[id])
        .await
        .unwrap()
        .remove(&id)
        .unwrap_or_default()
}

/// Everything published to `topic` on the app's stream, in order, from now on.
fn events_of(
    app: &TestApp,
    topic: &str,
    stop: &tokio_util::sync::CancellationToken,
) -> Arc<std::sync::Mutex<Vec<platform::events::Event>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    tokio::spawn(app.platform.events.consume(
        topic,
        "announcement_test",
        100,
        std::time::Duration::from_millis(5),
        stop.clone(),
        move |batch| {
            sink.lock().unwrap().extend(batch);
            async { Ok(()) }
        },
    ));
    seen
}

async fn wait_for_events(
    what: &str,
    seen: &Arc<std::sync::Mutex<Vec<platform::events::Event>>>,
    count: usize,
) -> Vec<Value> {
    wait_until(what, || async { seen.lock().unwrap().len() >= count }).await;
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen.len(),
        count,
        "{what}: exactly one event per transition"
    );
    seen.iter()
        .map(|event| serde_json::from_slice(&event.payload).unwrap())
        .collect()
}

async fn likes_collects_and_profile_edits_announce_each_transition_once(setup: Setup) {
    let app = setup.spawn(|_| {}).await;
    let author = user(&app, "a@example.com").await;
    let reader = user(&app, "r@example.com").await;
    let id = published_article(&app, &author).await;
    let stop = tokio_util::sync::CancellationToken::new();
    let likes = events_of(&app, "like_changed", &stop);
    let collects = events_of(&app, "collect_changed", &stop);
    let profiles = events_of(&app, "user_profile_changed", &stop);

    // Each list ends with a transition, so once it is seen every earlier one is too (one
    // topic's events arrive in the order they were recorded).
    for like in [true, true, false, false, true] {
        let answer = post(
            &app,
            "/articles/pub/like",
            Some(&reader),
            json!({"id": id, "like": like}),
        )
        .await;
        assert_eq!(answer.code(), 0, "{}", answer.raw);
    }
    for collect in [true, true, false, false, true] {
        let answer = post(
            &app,
            "/articles/pub/collect",
            Some(&reader),
            json!({"id": id, "cid": 0, "collect": collect}),
        )
        .await;
        assert_eq!(answer.code(), 0, "{}", answer.raw);
    }
    let answer = post(
        &app,
        "/users/edit",
        Some(&reader),
        json!({"nickname": "Reader"}),
    )
    .await;
    assert_eq!(answer.code(), 0, "{}", answer.raw);
    let uid = get(&app, "/users/profile", Some(&reader)).await.json()["Id"]
        .as_i64()
        .unwrap();

    for (what, seen) in [("like events", &likes), ("collect events", &collects)] {
        let events = wait_for_events(what, seen, 3).await;
        let turned: Vec<bool> = events
            .iter()
            .map(|event| event["on"].as_bool().unwrap())
            .collect();
        assert_eq!(
            turned,
            [true, false, true],
            "{what}: repeats announce nothing"
        );
        for event in &events {
            assert_eq!(
                (
                    event["uid"].as_i64(),
                    event["biz"].as_str(),
                    event["bizId"].as_i64()
                ),
                (Some(uid), Some("article"), Some(id)),
                "{event}"
            );
        }
    }
    let events = wait_for_events("the profile event", &profiles, 1).await;
    assert_eq!(events[0]["uid"].as_i64(), Some(uid));
    stop.cancel();
}

async fn concurrent_likes_are_exact_and_idempotent(setup: Setup) {
    let app = Arc::new(setup.spawn(|_| {}).await);
    let author = user(&app, "author@example.com").await;
    let id = published_article(&app, &author).await;
    let service = app.service::<webook::interactive::InteractiveService>();

    let like_all = |like: bool| {
        let service = service.clone();
        async move {
            let tasks: Vec<_> = (1..=50)
                .map(|uid| {
                    let service = service.clone();
                    tokio::spawn(
                        async move { service.like(1000 + uid, BIZ, id, like).await.unwrap() },
                    )
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        }
    };
    like_all(true).await;
    assert_eq!(db_counts(&app, id).await.like_cnt, 50);
    assert_eq!(view(&app, &author, id).await["likeCnt"], 50);
    like_all(true).await;
    assert_eq!(
        db_counts(&app, id).await.like_cnt,
        50,
        "liking twice counts once"
    );
    like_all(false).await;
    assert_eq!(db_counts(&app, id).await.like_cnt, 0);
    like_all(false).await;
    service.like(9999, BIZ, id, false).await.unwrap();
    assert_eq!(db_counts(&app, id).await.like_cnt, 0, "never negative");
    assert_eq!(view(&app, &author, id).await["likeCnt"], 0);

    // The writer shows its work (the recorder is shared by the tests of this process: at least
    // these 201 likes).
    let metrics = app.metrics_text().await;
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in /metrics"))
    };
    assert!(value("likes_applied_total") >= 201.0);
    assert!(value("like_batch_duration_seconds_count") >= 1.0);
    assert!(value("likes_waiting") >= 0.0);
}

async fn likes_and_collects_over_http_show_in_the_reader_view(setup: Setup) {
    let app = setup.spawn(|_| {}).await;
    let author = user(&app, "a@example.com").await;
    let reader = user(&app, "r@example.com").await;
    let id = published_article(&app, &author).await;

    let like = |token: &str, like: bool| {
        let body = json!({"id": id, "like": like});
        let token = token.to_owned();
        let app = &app;
        async move { post(app, "/articles/pub/like", Some(&token), body).await }
    };
    assert_eq!(like(&reader, true).await.code(), 0);
    assert_eq!(like(&reader, true).await.code(), 0);
    let seen = view(&app, &reader, id).await;
    assert_eq!(
        (seen["likeCnt"].as_i64(), seen["liked"].as_bool()),
        (Some(1), Some(true))
    );
    let seen = view(&app, &author, id).await;
    assert_eq!(
        (seen["likeCnt"].as_i64(), seen["liked"].as_bool()),
        (Some(1), Some(false))
    );

    let collect = |body: Value| post(&app, "/articles/pub/collect", Some(&reader), body);
    assert_eq!(collect(json!({"id": id, "cid": 0})).await.code(), 0);
    assert_eq!(
        collect(json!({"id": id, "cid": 0, "collect": true}))
            .await
            .code(),
        0
    );
    let seen = view(&app, &reader, id).await;
    assert_eq!(
        (seen["collectCnt"].as_i64(), seen["collected"].as_bool()),
        (Some(1), Some(true))
    );
    assert_eq!(
        collect(json!({"id": id, "cid": 77})).await.code(),
        4,
        "someone else's or no folder"
    );
    assert_eq!(collect(json!({"id": id, "collect": false})).await.code(), 0);
    let seen = view(&app, &reader, id).await;
    assert_eq!(
        (seen["collectCnt"].as_i64(), seen["collected"].as_bool()),
        (Some(0), Some(false))
    );

    assert_eq!(like(&reader, false).await.code(), 0);
    let seen = view(&app, &reader, id).await;
    assert_eq!(
        (seen["likeCnt"].as_i64(), seen["liked"].as_bool()),
        (Some(0), Some(false))
    );
    assert_eq!(like(&reader, true).await.code(), 0);
    assert_eq!(
        view(&app, &reader, id).await["liked"],
        true,
        "flags follow every change"
    );

    // Only published articles can be liked.
    let draft = post(
        &app,
        "/articles/edit",
        Some(&author),
        json!({"title": "d", "content": "x"}),
    )
    .await
    .json()["data"]
        .as_i64()
        .unwrap();
    assert_eq!(
        post(
            &app,
            "/articles/pub/like",
            Some(&reader),
            json!({"id": draft, "like": true})
        )
        .await
        .code(),
        404001
    );
    assert_eq!(
        post(
            &app,
            "/articles/pub/like",
            Some(&reader),
            json!({"id": 0, "like": true})
        )
        .await
        .code(),
        4
    );
}

async fn read_count_in(db: &TestDb, id: i64) -> i64 {
    sqlx::query_scalar("SELECT read_cnt FROM interactives WHERE biz = $1 AND biz_id = $2")
        .bind(BIZ.as_str())
        .bind(id)
        .fetch_optional(db.db.pool())
        .await
        .unwrap()
        .unwrap_or(0)
}

async fn ten_thousand_reads_count_exactly_ten_thousand(setup: Setup) {
    const READS: usize = 10_000;
    const CLIENTS: usize = 32;
    let db = setup.database().await;
    let app = Arc::new(setup.spawn_on(db.clone(), &prefix(), |_| {}).await);
    let token = Arc::new(user(&app, "reads@example.com").await);
    let id = published_article(&app, &token).await;
    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (app, token, next) = (app.clone(), token.clone(), next.clone());
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::Relaxed) < READS {
                    let answer = get(&app, &format!("/articles/pub/{id}"), Some(&token)).await;
                    assert_eq!(answer.code(), 0);
                }
            })
        })
        .collect();
    for client in clients {
        client.await.unwrap();
    }
    wait_until("all reads to be counted", || async {
        read_count_in(&db, id).await >= READS as i64
    })
    .await;
    // Stop (drains the consumer); then it must be exactly, not at least, the reads made.
    Arc::into_inner(app)
        .expect("no other handles")
        .stop()
        .await
        .unwrap();
    assert_eq!(read_count_in(&db, id).await, READS as i64);
}

async fn buffered_reads_survive_a_graceful_restart(setup: Setup) {
    const READS: i64 = 300;
    let db = setup.database().await;
    let prefix = prefix();
    let app = setup.spawn_on(db.clone(), &prefix, |_| {}).await;
    let token = user(&app, "restart@example.com").await;
    let id = published_article(&app, &token).await;
    for _ in 0..READS {
        get(&app, &format!("/articles/pub/{id}"), Some(&token)).await;
    }
    // Stop at once: reads still sit in the consumer's batch window (in-process) or unread in
    // the stream (Redis).
    app.stop().await.unwrap();
    let restarted = setup.spawn_on(db.clone(), &prefix, |_| {}).await;
    wait_until("buffered reads to be applied", || async {
        read_count_in(&db, id).await >= READS
    })
    .await;
    restarted.stop().await.unwrap();
    assert_eq!(read_count_in(&db, id).await, READS);
}

fn prefix() -> String {
    format!("test-{}", uuid::Uuid::new_v4().simple())
}

setup_tests!(
    likes_collects_and_profile_edits_announce_each_transition_once,
    concurrent_likes_are_exact_and_idempotent,
    likes_and_collects_over_http_show_in_the_reader_view,
    ten_thousand_reads_count_exactly_ten_thousand,
    buffered_reads_survive_a_graceful_restart,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_likes_succeed_and_reads_are_still_counted() {
    use platform::testing::RedisServer;
    use platform::{
        events::{EventStream, RedisStreamOptions, Subscription},
        redis::Redis,
    };
    use tokio_util::sync::CancellationToken;
    use webook::interactive::{store::InteractiveStore, InteractiveService};

    let mut server = RedisServer::start().await;
    let redis = Redis::connect(&server.url()).await.unwrap();
    let db = TestDb::sqlite(&MIGRATIONS).await;
    let events = EventStream::redis(
        redis.clone(),
        &server.url(),
        "test",
        RedisStreamOptions::default(),
    )
    .unwrap();
    let service = InteractiveService::new(
        InteractiveStore::new(db.db.clone()),
        events.clone(),
        platform::events::outbox::Outbox::new(db.db.clone(), events),
        Some((&redis, "test")),
        platform::config::Config::default().cache_memory_bytes,
    );
    let stop = CancellationToken::new();
    let counter = tokio::spawn(service.read_counter(Subscription::Stream, stop.clone()));

    // Up: a read goes through the stream.
    service.record_read(BIZ, 1, 7).await;
    wait_until("the first read to be counted", || async {
        read_count_in(&db, 1).await == 1
    })
    .await;

    server.stop();
    // Likes take the database path; the cache failing does not fail them.
    service.like(7, BIZ, 1, true).await.unwrap();
    service.like(8, BIZ, 1, true).await.unwrap();
    assert_eq!(service.counts(BIZ, 1).await.unwrap().like_cnt, 2);
    // Reads fall back to the in-process queue of this process and are still counted.
    for uid in 0..20 {
        service.record_read(BIZ, 1, uid).await;
    }
    wait_until("reads made while Redis is down to be counted", || async {
        read_count_in(&db, 1).await == 21
    })
    .await;

    stop.cancel();
    counter.await.unwrap();
    assert_eq!(read_count_in(&db, 1).await, 21);
}

/// A read counter that dies mid-batch — before or after its transaction committed, in both cases
/// before acknowledging — leaves its entries pending; another process's counter takes them over
/// and the reads end up counted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_counter_killed_mid_batch_is_taken_over_without_double_counting() {
    use platform::testing::redis_url;
    use platform::{
        events::{EventStream, RedisStreamOptions, Subscription},
        redis::Redis,
    };
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;
    use webook::interactive::{
        service::{READ_GROUP, READ_TOPIC},
        store::InteractiveStore,
        InteractiveService,
    };

    for (case, commit_before_dying) in [("died after commit", true), ("died before commit", false)]
    {
        let db = TestDb::postgres(&MIGRATIONS).await;
        let redis = Redis::connect(&redis_url()).await.unwrap();
        let prefix = prefix();
        let options = RedisStreamOptions {
            min_idle: Duration::from_millis(300),
            reclaim_interval: Duration::from_millis(100),
            ..RedisStreamOptions::default()
        };
        // Two processes' worth of stream clients and services on one database and key space.
        let process = || {
            let events =
                EventStream::redis(redis.clone(), &redis_url(), &prefix, options.clone()).unwrap();
            InteractiveService::new(
                InteractiveStore::new(db.db.clone()),
                events.clone(),
                platform::events::outbox::Outbox::new(db.db.clone(), events),
                Some((&redis, &prefix)),
                platform::config::Config::default().cache_memory_bytes,
            )
        };
        let (doomed, survivor) = (process(), process());

        // Reads wait in the stream; the doomed counter then takes them as one batch, maybe
        // commits it, and hangs without acknowledging.
        for uid in 0..100 {
            doomed.record_read(BIZ, 1, uid).await;
        }
        let (took_batch, mut batch_taken) = tokio::sync::mpsc::unbounded_channel();
        let doomed_service = doomed.clone();
        let doomed_consumer = tokio::spawn(doomed_events(&doomed).consume(
            READ_TOPIC,
            READ_GROUP,
            1000,
            Duration::from_millis(300),
            CancellationToken::new(),
            move |events| {
                let (service, took_batch) = (doomed_service.clone(), took_batch.clone());
                async move {
                    let taken = i64::try_from(events.len()).unwrap();
                    if commit_before_dying {
                        service.apply_read_batch(events).await?;
                    }
                    took_batch.send(taken).unwrap();
                    std::future::pending::<anyhow::Result<()>>().await
                }
            },
        ));
        // Usually all 100 in one batch; what matters is that the batch it took is left pending
        // (once seen with 42: the batch's size is not what this test is about).
        let taken = batch_taken.recv().await.unwrap();
        doomed_consumer.abort();
        assert!((1..=100).contains(&taken), "{case}: a batch of {taken}");
        let expected_before_takeover = if commit_before_dying { taken } else { 0 };
        assert_eq!(
            read_count_in(&db, 1).await,
            expected_before_takeover,
            "{case}"
        );
        let stream = platform::events::stream_key(&prefix, READ_TOPIC);
        let orphaned: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
            .arg(&stream)
            .arg(READ_GROUP)
            .query_async(&mut redis.connection())
            .await
            .unwrap();
        assert_eq!(
            i64::try_from(orphaned.count()).unwrap(),
            taken,
            "{case}: the batch is left pending"
        );

        let stop = CancellationToken::new();
        let survivor_counter =
            tokio::spawn(survivor.read_counter(Subscription::Stream, stop.clone()));
        // More reads through the survivor while it also takes over the orphaned batch.
        for uid in 100..150 {
            survivor.record_read(BIZ, 1, uid).await;
        }
        // Done when nothing is pending any more: the orphaned batch was taken over, handled
        // and acknowledged, and the new reads too.
        wait_until(
            "the orphaned batch and the new reads to be applied",
            || async {
                let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
                    .arg(&stream)
                    .arg(READ_GROUP)
                    .query_async(&mut redis.connection())
                    .await
                    .unwrap();
                pending.count() == 0 && read_count_in(&db, 1).await >= 150
            },
        )
        .await;
        stop.cancel();
        survivor_counter.await.unwrap();
        assert_eq!(
            read_count_in(&db, 1).await,
            150,
            "{case}: counted exactly once"
        );
    }
}

/// The event stream a service publishes to (the doomed consumer registers on the same one).
fn doomed_events(
    service: &webook::interactive::InteractiveService,
) -> platform::events::EventStream {
    service.events().clone()
}

/// An `InteractiveService` without the rest of the app on each of {SQLite, PostgreSQL} ×
/// {in-process cache, Redis cache} (in-process events), with its database and a label.
async fn standalone_services() -> Vec<(String, TestDb, webook::interactive::InteractiveService)> {
    use platform::testing::redis_url;
    use platform::{
        config::{Config, DatabaseKind},
        events::EventStream,
        redis::Redis,
    };
    use webook::interactive::{store::InteractiveStore, InteractiveService};

    let redis = Redis::connect(&redis_url()).await.unwrap();
    let mut services = Vec::new();
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        for shared in [false, true] {
            let db = TestDb::new(kind, &MIGRATIONS).await;
            let prefix = prefix();
            let events = EventStream::in_process();
            let service = InteractiveService::new(
                InteractiveStore::new(db.db.clone()),
                events.clone(),
                platform::events::outbox::Outbox::new(db.db.clone(), events),
                shared.then_some((&redis, prefix.as_str())),
                Config::default().cache_memory_bytes,
            );
            services.push((format!("{kind:?}, redis {shared}"), db, service));
        }
    }
    services
}

/// After a read batch, the read counter refills the counters it changed (one query for the
/// batch): the next `counts` is served from the cache — here told apart from a database load by
/// changing the row behind the cache's back — on both engines, in-process and through Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_batch_refills_the_counters_it_changed() {
    use platform::events::Event;
    use webook::interactive::model::ReadEvent;

    for (label, db, service) in standalone_services().await {
        // Cached before the reads, as a reader's view leaves it.
        assert_eq!(service.counts(BIZ, 5).await.unwrap().read_cnt, 0);
        let events = (0..3)
            .map(|n| Event {
                id: format!("e{n}"),
                topic: "interactive_read".into(),
                key: "5".into(),
                payload: serde_json::to_vec(&ReadEvent {
                    biz: BIZ,
                    biz_id: 5,
                    uid: n,
                })
                .unwrap()
                .into(),
                time: 0,
                traceparent: None,
            })
            .collect();
        service.apply_read_batch(events).await.unwrap();
        sqlx::query("UPDATE interactives SET read_cnt = 999 WHERE biz_id = 5")
            .execute(db.db.pool())
            .await
            .unwrap();
        assert_eq!(
            service.counts(BIZ, 5).await.unwrap().read_cnt,
            3,
            "{label}: the batch's counts were not refilled into the cache"
        );
    }
}

/// A like and a collect whose callers went away right after asking (a client that disconnected,
/// a request that timed out) still complete: the database changes and the cached counters and
/// flags follow, on both engines, in-process and through Redis. Before the writes ran on tasks of
/// their own, the invalidation was dropped with the caller and the cache kept the old counts
/// until its TTL (this test then timed out waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn likes_and_collects_complete_when_their_caller_goes_away() {
    use futures_util::FutureExt;

    for (label, _db, service) in standalone_services().await {
        // Cached before the writes, as a reader's view leaves them.
        assert_eq!(service.counts(BIZ, 9).await.unwrap(), Counts::default());
        assert!(!service.user_flags(3, BIZ, 9).await.unwrap().liked);
        // Each polled once, then dropped (unless already done in that one poll).
        let _ = service.like(3, BIZ, 9, true).now_or_never();
        let _ = service.collect(3, BIZ, 9, 0, true).now_or_never();
        wait_until(
            &format!("{label}: the cache to show the dropped like and collect"),
            || async {
                let counts = service.counts(BIZ, 9).await.unwrap();
                let flags = service.user_flags(3, BIZ, 9).await.unwrap();
                counts.like_cnt == 1 && counts.collect_cnt == 1 && flags.liked && flags.collected
            },
        )
        .await;
        let stored = service.batch_counts(BIZ, &[9]).await.unwrap()[&9];
        assert_eq!((stored.like_cnt, stored.collect_cnt), (1, 1));
    }
}

/// An API-only instance (`role = api`) whose `XADD`s Redis refuses (out of memory) still gets
/// its reads counted: it applies what it had to keep in process itself. (Before, only roles
/// that run work consumed the in-process fallback, so an API instance dropped those reads while
/// its log said they were delivered: 10 reads answered code 0, 3 counted.) An article published
/// meanwhile keeps its event in the outbox until Redis takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_instance_counts_the_reads_redis_refused_to_take() {
    use platform::config::Role;
    use platform::testing::RedisServer;

    let server = RedisServer::start().await;
    let db = Arc::new(TestDb::postgres(&MIGRATIONS).await);
    let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
    let spawn = |role: Role| {
        let (db, url, prefix) = (db.clone(), server.url(), prefix.clone());
        async move {
            TestApp::spawn_shared(db, |config| {
                config.redis_url = Some(url);
                config.redis_prefix = prefix;
                config.role = role;
            })
            .await
        }
    };
    let worker = spawn(Role::Worker).await;
    let api = spawn(Role::Api).await;
    let author = user(&api, "api-author@example.com").await;
    let id = published_article(&api, &author).await;
    let reader = user(&api, "api-reader@example.com").await;
    // Up: a read goes through the stream to the worker.
    assert_eq!(
        get(&api, &format!("/articles/pub/{id}"), Some(&reader))
            .await
            .code(),
        0
    );
    wait_until("the first read to be counted", || async {
        read_count_in(&db, id).await == 1
    })
    .await;

    // Redis now refuses every write (reads, such as session look-ups, still work).
    server.refuse_writes(true).await;
    for _ in 0..10 {
        let answer = get(&api, &format!("/articles/pub/{id}"), Some(&reader)).await;
        assert_eq!(answer.code(), 0, "{}", answer.raw);
    }
    wait_until("the ten reads Redis refused to be counted", || async {
        read_count_in(&db, id).await == 11
    })
    .await;
    // An article published meanwhile keeps its event in the outbox (the publish succeeds) until
    // Redis takes it again; nothing is lost.
    let second = published_article(&api, &author).await;
    let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM event_outbox")
        .fetch_one(db.db.pool())
        .await
        .unwrap();
    assert_eq!(waiting, 1);
    server.refuse_writes(false).await;
    wait_until("the outbox to reach redis", || async {
        let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM event_outbox")
            .fetch_one(db.db.pool())
            .await
            .unwrap();
        waiting == 0
    })
    .await;
    let stream = platform::events::stream_key(&prefix, webook::article::service::TOPIC_PUBLISHED);
    let mut redis = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let last: redis::streams::StreamRangeReply = redis::cmd("XREVRANGE")
        .arg(&stream)
        .arg("+")
        .arg("-")
        .arg("COUNT")
        .arg(1)
        .query_async(&mut redis)
        .await
        .unwrap();
    let payload: Vec<u8> = redis::from_redis_value(last.ids[0].map["p"].clone()).unwrap();
    let event: serde_json::Value = serde_json::from_slice(&payload).unwrap();
    assert_eq!(event["id"], second);
    api.stop().await.unwrap();
    worker.stop().await.unwrap();
    assert_eq!(read_count_in(&db, id).await, 11);
}

platform::backend_tests!(
    webook::schema::MIGRATIONS;
    overlapping_read_batches_applied_concurrently_never_deadlock,
    the_counters_of_seventy_thousand_objects_are_one_query,
    a_batch_of_likes_applies_in_order_and_counts_each_transition_once,
    an_unlike_of_an_object_without_a_counter_leaves_it_at_zero,
    overlapping_like_batches_applied_concurrently_never_deadlock,
);

fn like(uid: i64, biz_id: i64, like: bool) -> webook::interactive::store::LikeChange {
    webook::interactive::store::LikeChange {
        uid,
        biz: BIZ,
        biz_id,
        like,
    }
}

async fn like_counts(
    store: &webook::interactive::store::InteractiveStore,
    ids: &[i64],
) -> Vec<i64> {
    let counts = store.batch_counts(BIZ, ids).await.unwrap();
    ids.iter()
        .map(|id| counts.get(id).map_or(0, |counts| counts.like_cnt))
        .collect()
}

/// One batch (one transaction, a few set-based statements) holding repeats, unlikes of what was
/// never liked, and a like–unlike–like of one pair: each change reports whether it changed
/// anything as if applied alone and in order, and each counter moves by its real transitions.
async fn a_batch_of_likes_applies_in_order_and_counts_each_transition_once(db: TestDb) {
    use webook::interactive::store::InteractiveStore;

    let store = InteractiveStore::new(db.db.clone());
    let (x, y) = (10, 20);
    let batch = [
        like(1, x, true),
        like(1, x, true),
        like(2, x, false),
        like(3, x, true),
        like(3, x, false),
        like(3, x, true),
        like(4, y, true),
        like(1, y, false),
    ];
    let changed = store.set_likes(&batch, 1, true).await.unwrap();
    assert_eq!(changed, [true, false, false, true, true, true, true, false]);
    assert_eq!(like_counts(&store, &[x, y]).await, [2, 1]);

    let batch = [
        like(1, x, false),
        like(3, x, false),
        like(4, y, false),
        like(4, y, false),
        like(5, y, true),
    ];
    let changed = store.set_likes(&batch, 2, true).await.unwrap();
    assert_eq!(changed, [true, true, true, false, true]);
    assert_eq!(like_counts(&store, &[x, y]).await, [0, 1]);
    let again = store.set_likes(&batch, 3, true).await.unwrap();
    assert_eq!(
        again,
        [false, false, false, false, false],
        "nothing left to change"
    );
    assert_eq!(like_counts(&store, &[x, y]).await, [0, 1]);
}

/// A liked row whose object has no counter row (or a zero one, after a repair) is unliked: the
/// user's row turns off and the counter is zero, never negative.
async fn an_unlike_of_an_object_without_a_counter_leaves_it_at_zero(db: TestDb) {
    use webook::interactive::store::InteractiveStore;

    let store = InteractiveStore::new(db.db.clone());
    for (uid, biz_id) in [(1, 30), (2, 30), (1, 31)] {
        sqlx::query(
            "INSERT INTO user_likes (uid, biz, biz_id, status, ctime, utime) VALUES ($1, 'article', $2, 1, 0, 0)",
        )
        .bind(uid)
        .bind(biz_id)
        .execute(db.db.pool())
        .await
        .unwrap();
    }
    let changed = store
        .set_likes(
            &[like(1, 30, false), like(2, 30, false), like(1, 31, false)],
            1,
            true,
        )
        .await
        .unwrap();
    assert_eq!(changed, [true, true, true]);
    assert_eq!(like_counts(&store, &[30, 31]).await, [0, 0]);
    assert_eq!(
        store
            .set_likes(&[like(1, 30, true)], 2, true)
            .await
            .unwrap(),
        [true]
    );
    assert_eq!(like_counts(&store, &[30, 31]).await, [1, 0]);
}

/// Two instances' like batches over the same objects, in opposite orders, applied at the same
/// time, both commit and count exactly: counters are locked in key order.
async fn overlapping_like_batches_applied_concurrently_never_deadlock(db: TestDb) {
    use webook::interactive::store::InteractiveStore;

    const OBJECTS: i64 = 300;
    const ROUNDS: i64 = 6;
    let store = InteractiveStore::new(db.db.clone());
    for round in 0..ROUNDS {
        let on = round % 2 == 0;
        let batches = [1_i64, 2].map(|uid| {
            let mut likes: Vec<_> = (1..=OBJECTS).map(|id| like(uid, id, on)).collect();
            if uid == 2 {
                likes.reverse();
            }
            let store = store.clone();
            tokio::spawn(async move { store.set_likes(&likes, round, true).await })
        });
        for batch in batches {
            let changed = batch
                .await
                .unwrap()
                .unwrap_or_else(|err| panic!("round {round}: {err}"));
            assert!(changed.iter().all(|changed| *changed), "round {round}");
        }
        let expected = if on { 2 } else { 0 };
        let ids: Vec<i64> = (1..=OBJECTS).collect();
        assert!(
            like_counts(&store, &ids)
                .await
                .iter()
                .all(|count| *count == expected),
            "round {round}"
        );
    }
}

/// Two instances' read batches over the same objects, applied at the same time, both commit:
/// rows are locked in key order. (In `HashMap` order — different in every batch — PostgreSQL
/// answered one of them "deadlock detected".)
async fn overlapping_read_batches_applied_concurrently_never_deadlock(db: TestDb) {
    use webook::interactive::store::InteractiveStore;

    const OBJECTS: i64 = 300;
    const ROUNDS: i64 = 8;
    let store = InteractiveStore::new(db.db.clone());
    for round in 0..ROUNDS {
        let batches = ["a", "b"].map(|instance| {
            let reads: Vec<(webook::biz::Biz, i64, String)> = (1..=OBJECTS)
                .map(|id| (BIZ, id, format!("{round}-{instance}-{id}")))
                .collect();
            let store = store.clone();
            tokio::spawn(async move { store.apply_reads(&reads, Some("reads"), 1).await })
        });
        for batch in batches {
            let applied = batch
                .await
                .unwrap()
                .unwrap_or_else(|err| panic!("round {round}: {err}"));
            assert_eq!(applied.len(), OBJECTS as usize);
        }
    }
    let counts = store
        .batch_counts(BIZ, &(1..=OBJECTS).collect::<Vec<_>>())
        .await
        .unwrap();
    assert_eq!(counts.len(), OBJECTS as usize);
    assert!(counts.values().all(|counts| counts.read_cnt == 2 * ROUNDS));
}

/// `batch_counts` takes any number of ids: they travel as one parameter. (As an `IN` list of one
/// placeholder per id, SQLite refused these 70 001 parameters, "too many SQL variables", and
/// sqlx anything over PostgreSQL's 65 535.)
async fn the_counters_of_seventy_thousand_objects_are_one_query(db: TestDb) {
    use webook::interactive::store::InteractiveStore;

    let store = InteractiveStore::new(db.db.clone());
    let read: Vec<(webook::biz::Biz, i64, String)> = [5, 35_000, 69_999, 70_001]
        .into_iter()
        .map(|id| (BIZ, id, format!("read-{id}")))
        .collect();
    store.apply_reads(&read, None, 1).await.unwrap();
    store.apply_reads(&read[..1], None, 2).await.unwrap();
    let ids: Vec<i64> = (1..=70_000).collect();
    let counts = store.batch_counts(BIZ, &ids).await.unwrap();
    let mut found: Vec<(i64, i64)> = counts
        .iter()
        .map(|(id, counts)| (*id, counts.read_cnt))
        .collect();
    found.sort_unstable();
    assert_eq!(found, [(5, 2), (35_000, 1), (69_999, 1)]);
    assert!(store.batch_counts(BIZ, &[70_002]).await.unwrap().is_empty());
}

/// An authenticated read in cluster mode, once its near caches are warm, asks Redis twice on its
/// way: the session's revoked flag, then one probe script for the reader copy, the counters and
/// the reader's flags together (its read event leaves later, batched with others). Watched with
/// `MONITOR` on a private Redis, between two markers the test sends around the read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_authenticated_read_asks_redis_twice() {
    use futures_util::StreamExt;
    use platform::{config::DatabaseKind, testing::RedisServer};

    let server = RedisServer::start().await;
    let db = TestDb::new(DatabaseKind::Postgres, &MIGRATIONS).await;
    let app = TestApp::spawn_with(db, |config| {
        webook::testing::make_cluster(config, server.url());
    })
    .await;
    let token = user(&app, "round-trips@example.com").await;
    let id = published_article(&app, &token).await;
    // Warm: near copies filled, the probe script loaded.
    view(&app, &token, id).await;
    view(&app, &token, id).await;

    let client = redis::Client::open(server.url()).unwrap();
    let mut monitor = client
        .get_async_monitor()
        .await
        .unwrap()
        .into_on_message::<String>();
    let marks = client.get_multiplexed_async_connection().await.unwrap();
    let mark = |text: &'static str| {
        let mut marks = marks.clone();
        async move {
            let _: String = redis::cmd("ECHO")
                .arg(text)
                .query_async(&mut marks)
                .await
                .unwrap();
        }
    };
    mark("before-the-read").await;
    view(&app, &token, id).await;
    mark("after-the-read").await;

    let mut seen = Vec::new();
    let mut started = false;
    while let Some(line) = tokio::time::timeout(platform::testing::WAIT_LIMIT, monitor.next())
        .await
        .expect("monitor stalled")
    {
        if line.contains("\"after-the-read\"") {
            break;
        }
        if started && !line.contains("[0 lua]") {
            seen.push(line);
        } else if line.contains("\"before-the-read\"") {
            started = true;
        }
    }
    let probe = redis::Script::new(platform::redis_probe::PROBE_SCRIPT)
        .get_hash()
        .to_owned();
    let asked: Vec<&String> = seen
        .iter()
        .filter(|line| line.contains(":session:") || line.contains(":cache:"))
        .collect();
    assert_eq!(asked.len(), 2, "{seen:#?}");
    assert!(
        asked[0].contains("\"HGET\"") && asked[0].contains(":session:"),
        "{seen:#?}"
    );
    assert!(
        asked[1].contains(&format!("\"EVALSHA\" \"{probe}\" \"3\"")),
        "one probe of three keys: {seen:#?}"
    );
    app.stop().await.unwrap();
}

/// A like whose row another instance inserts between the batch's read (nothing to lock yet) and
/// its upsert: the upsert waits for that commit, finds the row already liked and flips nothing,
/// and the batch starts from that state — the like changed nothing and the counter is not
/// counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_like_racing_another_instances_insert_of_its_row_counts_once() {
    use webook::interactive::store::InteractiveStore;

    let db = TestDb::postgres(&MIGRATIONS).await;
    let store = InteractiveStore::new(db.db.clone());
    let mut other = db.db.writer().begin().await.unwrap();
    sqlx::query(
        "INSERT INTO user_likes (uid, biz, biz_id, status, ctime, utime) VALUES (7, 'article', 40, 1, 0, 0)",
    )
    .execute(&mut *other)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO interactives (biz, biz_id, like_cnt, ctime, utime) VALUES ('article', 40, 1, 0, 0)",
    )
    .execute(&mut *other)
    .await
    .unwrap();
    let batch = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .set_likes(
                    &[like(7, 40, true), like(7, 40, false), like(7, 40, true)],
                    1,
                    true,
                )
                .await
        }
    });
    wait_until(
        "the batch's upsert to wait for the other insert",
        || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO user_likes%'",
            )
            .fetch_one(db.db.pool())
            .await
            .unwrap();
            waiting == 1
        },
    )
    .await;
    other.commit().await.unwrap();
    let changed = batch.await.unwrap().unwrap();
    assert_eq!(
        changed,
        [false, true, true],
        "the first like found it liked"
    );
    assert_eq!(like_counts(&store, &[40]).await, [1]);
}
