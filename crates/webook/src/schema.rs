//! The database schema: the platform's tables ([`platform::schema`]) and every feature's ([`Feature::migrations`](platform::feature::Feature::migrations)), in
//! version order.
//!
//! A feature's tables live in its own file under `migrations/` and its [`Feature::migrations`](platform::feature::Feature::migrations)
//! names them with versions no other feature uses (versions never change once released: a
//! database records which it applied); the tests below check that the versions are unique.

use std::sync::LazyLock;

use platform::db::Migration;

/// Every migration, in version order; [`platform::db::Db::migrate`] applies the missing ones.
pub static MIGRATIONS: LazyLock<Vec<Migration>> = LazyLock::new(|| {
    let mut migrations = platform::schema::MIGRATIONS.to_vec();
    for feature in crate::features::FEATURES {
        migrations.extend_from_slice(feature.migrations());
    }
    migrations.sort_by_key(|migration| migration.version);
    migrations
});

#[cfg(test)]
mod tests {
    use platform::{config::DatabaseKind, db::expand_dialect};

    use super::MIGRATIONS;

    #[test]
    fn migration_versions_are_unique() {
        let versions: Vec<i64> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    }

    #[test]
    fn every_migration_expands_for_both_engines() {
        for migration in MIGRATIONS.iter() {
            for kind in [DatabaseKind::Sqlite, DatabaseKind::Postgres] {
                assert!(
                    !expand_dialect(migration.sql_for(kind).0, kind).contains("{{"),
                    "unexpanded placeholder in migration {}",
                    migration.version
                );
            }
        }
    }
}
