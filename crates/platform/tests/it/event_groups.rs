//! Consumer groups on their own (`platform::events::delivery`), on {SQLite, PostgreSQL} ×
//! {in-process, Redis Streams}: one group failing — permanently on some events, or transiently
//! on all — delays no other group of the same topic; a permanent failure parks exactly the
//! poisoned events (a panic and an unclassified error too), which a replay applies once after
//! the fix; a transient one heals without parking. Embedded, every group resumes from its own
//! position after a restart, and the outbox is trimmed to the slowest group.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::Duration,
};

use platform::schema::MIGRATIONS;
use platform::{
    config::DatabaseKind,
    db::{now_millis, Db},
    events::{
        failure, outbox,
        outbox::Outbox,
        parked::{self, Filter},
        DeliveryPolicy, Event, EventStream, RedisStreamOptions,
    },
    redis::Redis,
    testing::{redis_url, wait_until, TestDb},
};
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "groups_test";

/// One test body, four runs: {SQLite, PostgreSQL} × {in-process, Redis Streams}.
macro_rules! group_tests {
    ($($name:ident),+ $(,)?) => {
        group_tests!(@mode sqlite_in_process, Sqlite, false, $($name),+);
        group_tests!(@mode postgres_in_process, Postgres, false, $($name),+);
        group_tests!(@mode sqlite_redis, Sqlite, true, $($name),+);
        group_tests!(@mode postgres_redis, Postgres, true, $($name),+);
    };
    (@mode $module:ident, $db:ident, $redis:expr, $($name:ident),+) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(platform::config::DatabaseKind::$db, $redis).await
                }
            )+
        }
    };
}

group_tests!(
    a_poisoned_group_parks_exactly_its_poison_and_a_replay_applies_it_once,
    a_transiently_failing_group_heals_without_parking_and_holds_no_one_else,
);

/// A stream of the kind under test, its outbox, and a short policy.
async fn stream(db: &Db, redis: bool) -> (EventStream, Outbox) {
    let events = if redis {
        let url = redis_url();
        let prefix = format!("test-{}", uuid::Uuid::new_v4().simple());
        let connection = Redis::connect(&url).await.unwrap();
        EventStream::redis(connection, &url, &prefix, RedisStreamOptions::default()).unwrap()
    } else {
        EventStream::in_process()
    };
    events.set_policy(DeliveryPolicy {
        unclassified_park_after: Duration::from_millis(300),
        unclassified_min_attempts: 3,
        stuck_after: Duration::from_millis(300),
        ..DeliveryPolicy::default()
    });
    let outbox = Outbox::new(db.clone(), events.clone());
    (events, outbox)
}

/// Records one event per key, each in a transaction of its own, and wakes the relay.
async fn publish(db: &Db, outbox: &Outbox, keys: &[String]) {
    for key in keys {
        let mut tx = db.writer().begin().await.unwrap();
        outbox::record(
            &mut tx,
            TOPIC,
            key,
            &serde_json::json!({ "key": key }),
            now_millis(),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        outbox.committed();
    }
}

/// Publishes `keys` three at a time, 10 ms apart: steady traffic while groups work.
async fn publish_steadily(db: &Db, outbox: &Outbox, keys: &[String]) {
    for chunk in keys.chunks(3) {
        publish(db, outbox, chunk).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn keys(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|n| format!("k{n}")).collect()
}

/// What a group applied: (key, event id, lag in ms at the moment it was applied).
#[derive(Clone, Default)]
struct Applied(Arc<Mutex<Vec<(String, String, i64)>>>);

impl Applied {
    fn add(&self, batch: &[Event]) {
        let now = now_millis();
        let mut applied = self.0.lock().unwrap();
        for event in batch {
            applied.push((event.key.clone(), event.id.clone(), now - event.time));
        }
    }

    fn keys(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(key, _, _)| key.clone())
            .collect()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    fn max_lag_ms(&self) -> i64 {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, lag)| *lag)
            .max()
            .unwrap_or(0)
    }

    /// Each key applied exactly once.
    fn assert_once(&self, expected: &[String]) {
        let mut got = self.keys();
        got.sort();
        let mut want = expected.to_vec();
        want.sort();
        assert_eq!(got, want, "each event applied exactly once");
    }
}

/// A healthy group: applies everything at once.
fn healthy(events: &EventStream, stop: &CancellationToken) -> Applied {
    let applied = Applied::default();
    let sink = applied.clone();
    tokio::spawn(events.consume(
        TOPIC,
        "healthy",
        50,
        Duration::from_millis(5),
        stop.clone(),
        move |batch| {
            sink.add(&batch);
            async { Ok(()) }
        },
    ));
    applied
}

/// How the sick group fails, by key, while `faulty` says so.
#[derive(Clone, Copy)]
enum Fault {
    Permanent,
    Panic,
    Unclassified,
    Transient,
}

type Faults = Arc<Mutex<Vec<(String, Fault)>>>;

/// A group that, like a handler applying its batch in one transaction, applies a batch only if
/// no event of it is faulty, else fails the whole batch with the first fault's kind.
fn sick(events: &EventStream, stop: &CancellationToken, faults: Faults) -> Applied {
    let applied = Applied::default();
    let sink = applied.clone();
    tokio::spawn(events.consume(
        TOPIC,
        "sick",
        50,
        Duration::from_millis(5),
        stop.clone(),
        move |batch: Vec<Event>| {
            let fault = {
                let faults = faults.lock().unwrap();
                batch.iter().find_map(|event| {
                    faults
                        .iter()
                        .find(|(key, _)| *key == event.key || key == "*")
                        .map(|(_, fault)| *fault)
                })
            };
            if matches!(fault, Some(Fault::Panic)) {
                panic!("a bug in the handler");
            }
            if fault.is_none() {
                sink.add(&batch);
            }
            async move {
                match fault {
                    None => Ok(()),
                    Some(Fault::Permanent) => Err(failure::permanent(anyhow::anyhow!(
                        "this event can never be applied"
                    ))),
                    Some(Fault::Unclassified) => Err(anyhow::anyhow!("something odd")),
                    Some(Fault::Transient) => Err(anyhow::Error::new(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "the index directory is gone",
                    ))),
                    Some(Fault::Panic) => unreachable!(),
                }
            }
        },
    ));
    applied
}

/// Runs the relay until `stop` (it wakes on commits, announces and trims).
fn relay(outbox: &Outbox, stop: &CancellationToken) {
    tokio::spawn(outbox.clone().run(stop.clone()));
}

async fn parked_rows(db: &Db, group: &str) -> Vec<parked::Parked> {
    parked::list(
        db,
        &Filter {
            group: Some(group.to_owned()),
            ..Filter::default()
        },
        1000,
    )
    .await
    .unwrap()
}

async fn outbox_rows(db: &Db) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM event_outbox")
        .fetch_one(db.pool())
        .await
        .unwrap()
}

async fn a_poisoned_group_parks_exactly_its_poison_and_a_replay_applies_it_once(
    kind: DatabaseKind,
    redis: bool,
) {
    let test_db = TestDb::new(kind, &MIGRATIONS).await;
    let db = &test_db.db;
    let stop = CancellationToken::new();
    let (events, outbox) = stream(db, redis).await;
    let faults: Faults = Arc::new(Mutex::new(vec![
        ("k3".to_owned(), Fault::Permanent),
        ("k7".to_owned(), Fault::Panic),
        ("k15".to_owned(), Fault::Unclassified),
    ]));
    let healthy = healthy(&events, &stop);
    let sick = sick(&events, &stop, faults.clone());
    relay(&outbox, &stop);

    // Steady traffic: 30 events, a few milliseconds apart.
    let all = keys(0..30);
    publish_steadily(db, &outbox, &all).await;
    wait_until("the healthy group to apply every event", || async {
        healthy.count() >= all.len()
    })
    .await;
    healthy.assert_once(&all);
    assert!(
        healthy.max_lag_ms() < 1000,
        "the healthy group waited {} ms for an event",
        healthy.max_lag_ms()
    );

    // The sick group applied every other event and parked exactly the three.
    let poisoned: Vec<String> = ["k3", "k7", "k15"].map(str::to_owned).to_vec();
    let clean: Vec<String> = all
        .iter()
        .filter(|key| !poisoned.contains(key))
        .cloned()
        .collect();
    wait_until("the sick group to park its poison and go on", || async {
        sick.count() >= clean.len() && parked_rows(db, "sick").await.len() == 3
    })
    .await;
    sick.assert_once(&clean);
    let parked = parked_rows(db, "sick").await;
    let mut parked_keys: Vec<&str> = parked.iter().map(|row| row.key.as_str()).collect();
    parked_keys.sort();
    assert_eq!(parked_keys, ["k15", "k3", "k7"]);
    for row in &parked {
        assert_eq!(row.state, "parked");
        assert_eq!(row.topic, TOPIC);
        let (failure, error) = match row.key.as_str() {
            "k3" => ("permanent", "can never be applied"),
            "k7" => ("permanent", "the handler panicked: a bug in the handler"),
            _ => ("unclassified", "something odd"),
        };
        assert_eq!(row.failure, failure, "{row:?}");
        assert!(row.last_error.contains(error), "{row:?}");
        assert!(row.attempts >= 3, "{row:?}");
        assert!(row.event_id.starts_with("outbox-"), "{row:?}");
    }
    assert!(
        parked_rows(db, "healthy").await.is_empty(),
        "nothing parked for the healthy group"
    );
    let groups = events.groups();
    let sick_status = groups.iter().find(|group| group.group == "sick").unwrap();
    assert_eq!(sick_status.parked, 3, "{sick_status:?}");
    assert!(!sick_status.stuck, "parking is progress: {sick_status:?}");

    // A replay before the fix fails again: parked again with the new attempt, and the group,
    // which goes on with its events, is not reported failing for it (it was, until a replay's
    // failure stopped counting as the group's).
    let k3 = parked.iter().find(|row| row.key == "k3").unwrap().id;
    let again = parked::replay(
        db,
        &Filter {
            ids: vec![k3],
            ..Filter::default()
        },
        "operator@test",
    )
    .await
    .unwrap();
    assert_eq!(again, 1);
    wait_until("the failed replay to be parked again", || async {
        parked_rows(db, "sick")
            .await
            .iter()
            .any(|row| row.id == k3 && row.state == "parked" && row.attempts > 3)
    })
    .await;
    // Longer than the policy's stuck_after (300 ms): a false alarm would show by now.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let groups = events.groups();
    let sick_status = groups.iter().find(|group| group.group == "sick").unwrap();
    assert!(!sick_status.stuck, "{sick_status:?}");
    assert_eq!(sick_status.failing_seconds, 0.0, "{sick_status:?}");
    assert_eq!(sick_status.lag_seconds, 0.0, "{sick_status:?}");

    // Discarding is explicit and audited; a discarded event is never replayed.
    let discarded = parked::discard(
        db,
        &Filter {
            group: Some("sick".to_owned()),
            ids: parked
                .iter()
                .filter(|row| row.key == "k15")
                .map(|row| row.id)
                .collect(),
            ..Filter::default()
        },
        "operator@test",
        "a test payload",
    )
    .await
    .unwrap();
    assert_eq!(discarded, 1);

    // The fix: the handler accepts them now. A replay of the group applies each once.
    faults.lock().unwrap().clear();
    let replayed = parked::replay(
        db,
        &Filter {
            group: Some("sick".to_owned()),
            ..Filter::default()
        },
        "operator@test",
    )
    .await
    .unwrap();
    assert_eq!(replayed, 2, "the discarded one is not replayed");
    let mut expected = clean.clone();
    expected.extend(["k3".to_owned(), "k7".to_owned()]);
    wait_until("the replayed events to be applied", || async {
        sick.count() >= expected.len()
            && parked_rows(db, "sick")
                .await
                .iter()
                .filter(|row| row.state == "replayed")
                .count()
                == 2
    })
    .await;
    sick.assert_once(&expected);
    let after: Vec<(String, String, Option<String>)> = parked_rows(db, "sick")
        .await
        .into_iter()
        .map(|row| (row.key, row.state, row.resolved_by))
        .collect();
    assert!(
        after.contains(&(
            "k15".to_owned(),
            "discarded".to_owned(),
            Some("operator@test".to_owned())
        )),
        "{after:?}"
    );
    // A second replay finds nothing open.
    assert_eq!(
        parked::replay(&test_db.db, &Filter::default(), "operator@test")
            .await
            .unwrap(),
        0
    );
    healthy.assert_once(&all);
    if !redis {
        wait_until("the outbox to be trimmed behind both groups", || async {
            outbox_rows(db).await == 0
        })
        .await;
    }
    stop.cancel();
}

async fn a_transiently_failing_group_heals_without_parking_and_holds_no_one_else(
    kind: DatabaseKind,
    redis: bool,
) {
    let test_db = TestDb::new(kind, &MIGRATIONS).await;
    let db = &test_db.db;
    let stop = CancellationToken::new();
    let (events, outbox) = stream(db, redis).await;
    let faults: Faults = Arc::new(Mutex::new(vec![("*".to_owned(), Fault::Transient)]));
    let healthy = healthy(&events, &stop);
    let sick = sick(&events, &stop, faults.clone());
    relay(&outbox, &stop);

    let first = keys(0..12);
    publish_steadily(db, &outbox, &first).await;
    wait_until("the healthy group to apply every event", || async {
        healthy.count() >= first.len()
    })
    .await;
    assert!(healthy.max_lag_ms() < 1000, "{}", healthy.max_lag_ms());
    // The sick group is seen stuck, its lag growing, with the error.
    wait_until("the sick group to be reported stuck", || async {
        events
            .groups()
            .iter()
            .any(|group| group.group == "sick" && group.stuck && group.lag_seconds > 0.3)
    })
    .await;
    let status = events.groups();
    let sick_status = status.iter().find(|group| group.group == "sick").unwrap();
    assert_eq!(
        sick_status.last_failure,
        Some("transient"),
        "{sick_status:?}"
    );
    assert!(
        sick_status
            .last_error
            .as_deref()
            .is_some_and(|error| error.contains("index directory is gone")),
        "{sick_status:?}"
    );
    assert_eq!(sick.count(), 0);
    // More traffic while it is sick: the healthy group keeps up.
    let second = keys(12..24);
    publish(db, &outbox, &second).await;
    wait_until("the healthy group to keep up", || async {
        healthy.count() >= first.len() + second.len()
    })
    .await;
    assert!(healthy.max_lag_ms() < 1000, "{}", healthy.max_lag_ms());
    if !redis {
        // Its rows wait in the outbox for it (not for the healthy group).
        assert!(outbox_rows(db).await > 0);
    }

    // The fault goes: everything arrives, once, and nothing was parked.
    faults.lock().unwrap().clear();
    let mut all = first.clone();
    all.extend(second.iter().cloned());
    wait_until("the sick group to catch up", || async {
        sick.count() >= all.len()
    })
    .await;
    sick.assert_once(&all);
    healthy.assert_once(&all);
    assert!(
        parked_rows(db, "sick").await.is_empty(),
        "transient failures are never parked"
    );
    wait_until("the group to be reported healthy", || async {
        events
            .groups()
            .iter()
            .any(|group| group.group == "sick" && !group.stuck && group.lag_seconds == 0.0)
    })
    .await;
    if !redis {
        wait_until("the outbox to be trimmed", || async {
            outbox_rows(db).await == 0
        })
        .await;
    }
    stop.cancel();
}

/// Embedded: a group failing transiently for long keeps at most `max_backlog` outbox rows behind
/// it — the batches it holds beyond that are parked as `overflow` (not lost), the outbox is
/// trimmed behind the healthy group, and a replay after the fault applies them once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_a_stuck_group_parks_its_overflow_and_the_outbox_stays_bounded() {
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        let test_db = TestDb::new(kind, &MIGRATIONS).await;
        let db = &test_db.db;
        let stop = CancellationToken::new();
        let events = EventStream::in_process();
        events.set_policy(DeliveryPolicy {
            max_backlog: 5,
            backlog_check: Duration::from_millis(100),
            ..DeliveryPolicy::default()
        });
        let outbox = Outbox::new(db.clone(), events.clone());
        let faults: Faults = Arc::new(Mutex::new(vec![("*".to_owned(), Fault::Transient)]));
        let healthy = healthy(&events, &stop);
        let sick = sick(&events, &stop, faults.clone());
        relay(&outbox, &stop);
        let all = keys(0..40);
        publish(db, &outbox, &all).await;
        wait_until("the healthy group to apply every event", || async {
            healthy.count() >= all.len()
        })
        .await;
        // The sick one parks what is beyond the bound, oldest first, and no more.
        wait_until(
            "the outbox behind the sick group to shrink to the bound",
            || async { outbox_rows(db).await <= 5 },
        )
        .await;
        let parked = parked_rows(db, "sick").await;
        assert!(parked.len() >= 35, "{kind:?}: {}", parked.len());
        assert!(
            parked.iter().all(|row| row.failure == "overflow"),
            "{kind:?}"
        );
        assert!(
            parked[0].last_error.contains("index directory is gone"),
            "{kind:?}: {}",
            parked[0].last_error
        );
        assert_eq!(sick.count(), 0);

        // The fault goes: the rest arrives, the overflow is replayed, each event once.
        faults.lock().unwrap().clear();
        let replayed = parked::replay(
            db,
            &Filter {
                group: Some("sick".to_owned()),
                ..Filter::default()
            },
            "operator@test",
        )
        .await
        .unwrap();
        assert_eq!(replayed as usize, parked.len());
        wait_until("every event to reach the sick group", || async {
            sick.count() >= all.len()
        })
        .await;
        sick.assert_once(&all);
        stop.cancel();
    }
}

/// Embedded: each group's position is its own and durable. A restart finds the healthy group
/// past every event and the sick one where it stopped, and hands the sick one only its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_each_group_resumes_from_its_own_position_after_a_restart() {
    for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
        let test_db = TestDb::new(kind, &MIGRATIONS).await;
        let db = &test_db.db;
        let first_stop = CancellationToken::new();
        let (events, outbox) = stream(db, false).await;
        let faults: Faults = Arc::new(Mutex::new(vec![("*".to_owned(), Fault::Transient)]));
        let healthy_before = healthy(&events, &first_stop);
        let sick_before = sick(&events, &first_stop, faults);
        relay(&outbox, &first_stop);
        let all = keys(0..10);
        publish(db, &outbox, &all).await;
        wait_until("the healthy group to apply every event", || async {
            healthy_before.count() >= all.len()
        })
        .await;
        let progress = || async {
            sqlx::query_as::<_, (String, i64)>(
                "SELECT group_name, last_id FROM event_progress ORDER BY group_name",
            )
            .fetch_all(db.pool())
            .await
            .unwrap()
        };
        // Recorded within a quarter of a second of being handled: wait for all of it (the
        // sick group holds every row, so the newest is still there), then stop.
        let newest: i64 = sqlx::query_scalar("SELECT MAX(id) FROM event_outbox")
            .fetch_one(db.pool())
            .await
            .unwrap();
        wait_until(
            "the healthy group's position to be recorded past every event",
            || async {
                let progress = progress().await;
                progress.len() == 2 && progress[0].1 == newest && progress[1].1 < newest
            },
        )
        .await;
        first_stop.cancel();
        assert_eq!(sick_before.count(), 0);

        // The next process: the healthy group gets nothing again, the sick (now well) one all.
        let stop = CancellationToken::new();
        let (events, outbox) = stream(db, false).await;
        let healthy_after = healthy(&events, &stop);
        let sick_after = sick(&events, &stop, Arc::default());
        relay(&outbox, &stop);
        wait_until("the sick group to catch up after the restart", || async {
            sick_after.count() >= all.len()
        })
        .await;
        sick_after.assert_once(&all);
        wait_until("the outbox to be trimmed", || async {
            outbox_rows(db).await == 0
        })
        .await;
        assert_eq!(
            healthy_after.count(),
            0,
            "{kind:?}: nothing handed over twice"
        );
        let seen: HashSet<String> = healthy_before.keys().into_iter().collect();
        assert_eq!(seen.len(), all.len());
        stop.cancel();
    }
}
