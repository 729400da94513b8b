//! Exactly-once application (`events::dedup`) on the platform's own schema: a consumer group
//! needs no feature's tables, and a database whose `consumed_events` came from an older feature
//! migration takes the platform's migration without harm. Both engines.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use platform::{
    db::{Db, Migration, META_MIGRATION},
    events::dedup::{first_deliveries, purge_before, CONSUMED_EVENTS_MIGRATION},
    testing::TestDb,
};

/// Only the platform's migrations that dedup needs.
const PLATFORM_ONLY: [Migration; 2] = [META_MIGRATION, CONSUMED_EVENTS_MIGRATION];

/// A database created before the platform owned the table: an earlier migration (as the
/// interactive feature's version 4 did) created it without `IF NOT EXISTS`.
const CREATED_EARLIER: [Migration; 3] = [
    META_MIGRATION,
    Migration::new(
        4,
        "an older feature migration creating consumed_events",
        "CREATE TABLE consumed_events (group_name TEXT NOT NULL, event_id TEXT NOT NULL, \
         ctime BIGINT NOT NULL, PRIMARY KEY (group_name, event_id)); \
         CREATE INDEX consumed_events_ctime ON consumed_events (ctime);",
    ),
    CONSUMED_EVENTS_MIGRATION,
];

/// Applies `ids` as `group` at `now` in one transaction; returns the ids applied the first time.
async fn deliver(db: &Db, group: &str, ids: &[&str], now: i64) -> Vec<String> {
    let mut tx = db.writer().begin().await.unwrap();
    let items: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    let fresh = first_deliveries(&mut tx, db.kind(), group, items, String::as_str, now)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    fresh
}

async fn each_id_is_applied_once_per_group(test: TestDb) {
    let db = &test.db;
    assert_eq!(
        deliver(db, "counts", &["e1", "e2", "e1"], 10).await,
        ["e1", "e2"]
    );
    assert_eq!(deliver(db, "counts", &["e2", "e3"], 20).await, ["e3"]);
    assert_eq!(
        deliver(db, "feed", &["e1", "e2"], 20).await,
        ["e1", "e2"],
        "another group applies the same events on its own"
    );
    assert_eq!(
        purge_before(db, 15).await.unwrap(),
        2,
        "the two ids recorded at 10"
    );
    assert_eq!(
        deliver(db, "counts", &["e1", "e3"], 30).await,
        ["e1"],
        "a purged id is new again; a kept one is not"
    );
}

platform::backend_tests!(crate::dedup::PLATFORM_ONLY; each_id_is_applied_once_per_group);

async fn migrating_over_an_earlier_table(test: TestDb) {
    assert_eq!(deliver(&test.db, "counts", &["e1"], 10).await, ["e1"]);
    assert!(deliver(&test.db, "counts", &["e1"], 11).await.is_empty());
}

mod created_earlier {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        migrating_over_an_earlier_table(TestDb::sqlite(&CREATED_EARLIER).await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        migrating_over_an_earlier_table(TestDb::postgres(&CREATED_EARLIER).await).await;
    }
}
