//! What a user's inbox costs to poll and to read, against a primary-key point read measured in
//! the same run (the cheapest statement the API makes):
//!
//! - `baseline/user_by_id`: `SELECT nickname FROM users WHERE id = ?` through the store's pool;
//! - `unread/{heavy,typical}`: [`NotificationStore::unread`] — the index-only count of
//!   `(recipient, is_read)` that `GET /notifications/unread` (and every stream's wake-up) runs —
//!   for a user with 2 000 notifications, 1 000 of them unread, and for one with 20, all unread;
//! - `page/{heavy,typical}`: [`NotificationStore::page`], the first page of 20 (keyset range, the
//!   titles' join, then one statement for the actors of all its rows).
//!
//! Data: 10 000 users, 200 000 notifications spread over them (the heavy user's 2 000 among
//! them), each with one standing source, in a SQLite file in a temp dir, or with
//! `WEBOOK_BENCH_DATABASE_URL=postgres://…` in PostgreSQL (a database of its own), e.g.
//! `scripts/with-services.sh bash -c 'WEBOOK_BENCH_DATABASE_URL=$WEBOOK_TEST_DATABASE_URL cargo
//! bench -p webook --bench notifications'`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use platform::db::Db;
use tokio::runtime::Runtime;
use webook::notifications::NotificationStore;

const POOL: u32 = 8;
const USERS: i64 = 10_000;
const NOTIFICATIONS: i64 = 200_000;
/// The heavy user's notifications (every 100th row is theirs).
const HEAVY: i64 = 1;
/// A typical user: 20 notifications.
const TYPICAL: i64 = 500;
const ROWS_PER_STATEMENT: i64 = 500;

/// Users, then notifications: row `n` goes to the heavy user when `n % 100 == 0`, else to a user
/// in 2..=USERS; rows read and unread by alternating hundreds (so half of each user's);
/// one standing like source per row.
async fn fill(db: &Db) {
    let mut tx = db.writer().begin().await.unwrap();
    for first in (1..=USERS).step_by(ROWS_PER_STATEMENT as usize) {
        let values: Vec<String> = (first..(first + ROWS_PER_STATEMENT).min(USERS + 1))
            .map(|id| format!("({id}, 'user{id}@example.com', '', 'user{id}', 0, 0)"))
            .collect();
        sqlx::query(&format!(
            "INSERT INTO users (id, email, password, nickname, ctime, utime) VALUES {}",
            values.join(", ")
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    for first in (1..=NOTIFICATIONS).step_by(ROWS_PER_STATEMENT as usize) {
        let range = first..(first + ROWS_PER_STATEMENT).min(NOTIFICATIONS + 1);
        let recipient = |n: i64| {
            if n % 100 == 0 {
                HEAVY
            } else {
                2 + n % (USERS - 1)
            }
        };
        let rows: Vec<String> = range
            .clone()
            .map(|n| {
                format!(
                    "({n}, {}, 'like', '{n}:0', {n}, 0, '', 0, 1, {}, {n}, {n})",
                    recipient(n),
                    (n / 100) % 2
                )
            })
            .collect();
        sqlx::query(&format!(
            "INSERT INTO notifications (id, recipient, kind, group_key, article_id, comment_id, \
             excerpt, amt, actor_cnt, is_read, ctime, utime) VALUES {}",
            rows.join(", ")
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
        let sources: Vec<String> = range
            .map(|n| {
                format!(
                    "({}, 'like', {n}, {}, 1, {n}, {n})",
                    recipient(n),
                    1 + (n * 7919) % USERS
                )
            })
            .collect();
        sqlx::query(&format!(
            "INSERT INTO notification_sources (recipient, source, subject_id, actor_id, on_flag, \
             time, notification_id) VALUES {}",
            sources.join(", ")
        ))
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
}

fn bench(c: &mut Criterion) {
    let runtime = Runtime::new().unwrap();
    let (_dir, db, url) = runtime.block_on(common::bench_db(POOL));
    runtime.block_on(fill(&db));
    let store = NotificationStore::new(db.clone());
    let counts = runtime.block_on(async {
        (
            store.unread(HEAVY).await.unwrap(),
            store.unread(TYPICAL).await.unwrap(),
        )
    });
    eprintln!(
        "notifications bench on {url}: unread heavy {}, typical {}",
        counts.0, counts.1
    );
    assert_eq!(counts.0, 1_000, "the heavy user's unread");
    assert!(counts.1 > 0, "the typical user has unread notifications");

    let mut group = c.benchmark_group("notifications");
    group.bench_function("baseline/user_by_id", |b| {
        b.to_async(&runtime).iter(|| async {
            let name: String = sqlx::query_scalar("SELECT nickname FROM users WHERE id = $1")
                .bind(TYPICAL)
                .fetch_one(db.pool())
                .await
                .unwrap();
            name
        });
    });
    for (name, uid) in [("heavy", HEAVY), ("typical", TYPICAL)] {
        group.bench_function(format!("unread/{name}"), |b| {
            b.to_async(&runtime)
                .iter(|| async { store.unread(uid).await.unwrap() });
        });
        group.bench_function(format!("page/{name}"), |b| {
            b.to_async(&runtime).iter(|| async {
                let page = store.page(uid, None, 21).await.unwrap();
                assert!(!page.is_empty());
                page
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(50);
    targets = bench
}
criterion_main!(benches);
