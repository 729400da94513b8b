//! The database schema: every migration of the platform and the features, in version order.
//!
//! A feature's tables live in its own file under `migrations/`; its line here gives it a version
//! after the last one (versions never change once released: a database records which it applied).

use platform::db::{Migration, META_MIGRATION, OUTBOX_MIGRATION};

/// Every migration, in order; [`platform::db::Db::migrate`] applies the missing ones.
pub const MIGRATIONS: &[Migration] = &[
    META_MIGRATION,
    migration(2, "users", include_str!("../migrations/0002_users.sql")),
    migration(
        3,
        "articles",
        include_str!("../migrations/0003_articles.sql"),
    ),
    migration(
        4,
        "interactive",
        include_str!("../migrations/0004_interactive.sql"),
    ),
    migration(5, "jobs", scheduler::sql::SCHEMA),
    migration(6, "ranking", include_str!("../migrations/0006_ranking.sql")),
    migration(7, "admins", include_str!("../migrations/0007_admins.sql")),
    migration(
        8,
        "idempotency",
        include_str!("../migrations/0008_idempotency.sql"),
    ),
    migration(
        9,
        "job runs retention",
        scheduler::sql::RUNS_RETENTION_SCHEMA,
    ),
    OUTBOX_MIGRATION,
];

const fn migration(version: i64, description: &'static str, sql: &'static str) -> Migration {
    Migration {
        version,
        description,
        sql,
    }
}

#[cfg(test)]
mod tests {
    use platform::{config::DatabaseKind, db::expand_dialect};

    use super::MIGRATIONS;

    #[test]
    fn migration_versions_are_strictly_increasing() {
        let versions: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    }

    #[test]
    fn every_migration_expands_for_both_engines() {
        for migration in MIGRATIONS {
            for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
                assert!(
                    !expand_dialect(migration.sql, kind).contains("{{"),
                    "unexpanded placeholder in migration {}",
                    migration.version
                );
            }
        }
    }
}
