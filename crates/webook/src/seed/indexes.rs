//! Index suspension for the seed's bulk loads ([`super`]): a phase that writes millions of rows
//! into a table drops the table's indexes that enforce nothing before its first row and builds
//! them again, each in one sort, just before it commits. The tables are named by their
//! features ([`crate::feed::seeded_bulk_tables`], [`crate::tag::SEEDED_BULK_TABLES`]); the
//! indexes are found in the engine's catalog, so this module names no table of its own.

use sqlx::AnyConnection;

use platform::config::DatabaseKind;

/// Drops the indexes of `tables` that enforce nothing (neither primary keys nor unique ones)
/// and returns the statements that create them again, for after a bulk load: each index is
/// then built once, from sorted rows, instead of taking millions of inserts at random places
/// (an inbox written by user gets its items' ids in random order). Both engines' DDL is
/// transactional, so the drop rolls back with the rows if the transaction does not commit.
pub(super) async fn suspend_indexes(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    tables: &[&str],
) -> sqlx::Result<Vec<String>> {
    let catalog = match kind {
        DatabaseKind::Sqlite => {
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = $1 \
             AND sql IS NOT NULL AND UPPER(sql) NOT LIKE 'CREATE UNIQUE%' ORDER BY name"
        }
        DatabaseKind::Postgres => {
            "SELECT i.relname::text, pg_get_indexdef(i.oid) FROM pg_index x \
             JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid \
             WHERE t.relname = $1 AND pg_table_is_visible(t.oid) \
             AND NOT x.indisunique AND NOT x.indisprimary ORDER BY i.relname"
        }
    };
    let mut statements = Vec::new();
    for table in tables {
        let indexes: Vec<(String, String)> = sqlx::query_as(catalog)
            .bind(*table)
            .fetch_all(&mut *conn)
            .await?;
        for (name, create) in indexes {
            sqlx::query(&format!("DROP INDEX \"{}\"", name.replace('"', "\"\"")))
                .execute(&mut *conn)
                .await?;
            statements.push(create);
        }
    }
    Ok(statements)
}

/// Runs the statements [`suspend_indexes`] returned.
pub(super) async fn restore_indexes(
    conn: &mut AnyConnection,
    statements: &[String],
) -> sqlx::Result<()> {
    for create in statements {
        sqlx::query(create).execute(&mut *conn).await?;
    }
    Ok(())
}
