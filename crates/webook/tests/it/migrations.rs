//! Migrations and portable SQL, on SQLite and PostgreSQL alike.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use platform::{
    config::DatabaseKind,
    db::{expand_dialect, migrator, Db},
};
use webook::schema::MIGRATIONS;

use platform::testing::TestDb;

async fn fresh_database_is_fully_migrated(test: TestDb) {
    let expected: Vec<i64> = migrator(test.db.kind(), &MIGRATIONS)
        .iter()
        .map(|m| m.version)
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(test.db.applied_versions().await.unwrap(), expected);
    let version: String =
        sqlx::query_scalar("SELECT value FROM meta WHERE name = 'last_migrated_by'")
            .fetch_one(test.db.pool())
            .await
            .unwrap();
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
}

async fn migrating_again_applies_nothing_and_keeps_data(test: TestDb) {
    let created: String =
        sqlx::query_scalar("SELECT value FROM meta WHERE name = 'schema_created_at'")
            .fetch_one(test.db.pool())
            .await
            .unwrap();
    // A second process (or a restart) opening the same database.
    let again = Db::connect_url(&test.url, 2).await.unwrap();
    assert_eq!(again.migrate(&MIGRATIONS).await.unwrap(), 0);
    let still: String =
        sqlx::query_scalar("SELECT value FROM meta WHERE name = 'schema_created_at'")
            .fetch_one(again.pool())
            .await
            .unwrap();
    assert_eq!(
        created, still,
        "re-migrating must not reset schema_created_at"
    );
    again.close().await;
}

async fn portable_sql_runs_on_both_engines(test: TestDb) {
    let pool = test.db.pool();
    let ddl = expand_dialect(
        "CREATE TABLE portable_probe (id {{id}}, name TEXT NOT NULL UNIQUE, hits BIGINT NOT NULL)",
        test.db.kind(),
    );
    sqlx::query(&ddl).execute(pool).await.unwrap();
    let mut ids = Vec::new();
    for name in ["a", "b"] {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO portable_probe (name, hits) VALUES ($1, $2) RETURNING id",
        )
        .bind(name)
        .bind(1_i64)
        .fetch_one(pool)
        .await
        .unwrap();
        ids.push(id);
    }
    assert!(ids[0] > 0 && ids[1] > ids[0], "ids auto-increment: {ids:?}");
    // Upsert: the conflict path increments instead of inserting.
    let hits: i64 = sqlx::query_scalar(
        "INSERT INTO portable_probe (name, hits) VALUES ($1, 1) \
         ON CONFLICT (name) DO UPDATE SET hits = portable_probe.hits + excluded.hits \
         RETURNING hits",
    )
    .bind("a")
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(hits, 2);
    // Ids are 64-bit on both engines.
    let big: i64 = sqlx::query_scalar(
        "INSERT INTO portable_probe (id, name, hits) VALUES ($1, 'big', 0) RETURNING id",
    )
    .bind(i64::MAX - 1)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(big, i64::MAX - 1);
}

platform::backend_tests!(webook::schema::MIGRATIONS;
    fresh_database_is_fully_migrated,
    migrating_again_applies_nothing_and_keeps_data,
    portable_sql_runs_on_both_engines,
);

#[tokio::test]
async fn empty_postgres_database_migrates_from_scratch() {
    let empty = TestDb::empty_postgres().await;
    let db = Db::connect_url(&empty.url, 2).await.unwrap();
    assert_eq!(db.kind(), DatabaseKind::Postgres);
    assert!(db.applied_versions().await.unwrap().is_empty());
    let applied = db.migrate(&MIGRATIONS).await.unwrap();
    assert_eq!(
        applied,
        migrator(DatabaseKind::Postgres, &MIGRATIONS).iter().count()
    );
    db.close().await;
}

#[tokio::test]
async fn sqlite_is_set_up_for_concurrent_access() {
    let test = TestDb::sqlite(&MIGRATIONS).await;
    let mut conn = test.db.pool().acquire().await.unwrap();
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    let busy_timeout: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(journal.to_lowercase(), "wal");
    assert_eq!(foreign_keys, 1);
    assert!(busy_timeout >= 1000, "busy_timeout {busy_timeout}");
}

/// Migration 15 rebuilds `users` on SQLite outside sqlx's transaction (foreign keys off): on a
/// database that already has accounts and rows referring to them, every row, every reference
/// and the id sequence survive, and the password becomes optional.
#[tokio::test]
async fn sqlite_users_rebuild_keeps_rows_references_and_ids() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("webook.db").display());
    let db = Db::connect_url(&url, 2).await.unwrap();
    let before_15: Vec<_> = MIGRATIONS
        .iter()
        .filter(|migration| migration.version < 15)
        .copied()
        .collect();
    db.migrate(&before_15).await.unwrap();
    for (id, email, phone) in [
        (1_i64, "a@x.test", Some("")),
        (2, "b@x.test", None),
        (3, "gone@x.test", None),
    ] {
        sqlx::query(
            "INSERT INTO users (id, email, password, phone, ctime, utime) \
             VALUES ($1, $2, 'hash', $3, 1, 1)",
        )
        .bind(id)
        .bind(email)
        .bind(phone)
        .execute(db.writer())
        .await
        .unwrap();
    }
    sqlx::query("DELETE FROM users WHERE id = 3")
        .execute(db.writer())
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO articles (author_id, title, content, abstract, status, ctime, utime) \
         VALUES (2, 't', 'c', 'a', 1, 1, 1)",
    )
    .execute(db.writer())
    .await
    .unwrap();

    assert_eq!(
        db.migrate(&MIGRATIONS).await.unwrap(),
        MIGRATIONS.len() - before_15.len()
    );
    assert_eq!(
        db.migrate(&MIGRATIONS).await.unwrap(),
        0,
        "recorded as applied"
    );
    let emails: Vec<String> = sqlx::query_scalar("SELECT email FROM users ORDER BY id")
        .fetch_all(db.writer())
        .await
        .unwrap();
    assert_eq!(emails, ["a@x.test", "b@x.test"]);
    let empty_phones: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM users WHERE phone IS NOT NULL")
            .fetch_one(db.writer())
            .await
            .unwrap();
    assert_eq!(empty_phones, 0, "'' became NULL");
    let dangling: Vec<String> =
        sqlx::query_scalar("SELECT \"table\" FROM pragma_foreign_key_check")
            .fetch_all(db.writer())
            .await
            .unwrap();
    assert!(dangling.is_empty(), "{dangling:?}");
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO users (wechat_open_id, ctime, utime) VALUES ('o', 2, 2) RETURNING id",
    )
    .fetch_one(db.writer())
    .await
    .unwrap();
    assert_eq!(id, 4, "ids of deleted accounts are not handed out again");
    let foreign_keys: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(foreign_keys, 1);
    db.close().await;
}
