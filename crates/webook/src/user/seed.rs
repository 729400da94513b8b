//! Bulk writes of seeded accounts (`webook seed`, its users phase): multi-row `INSERT`s into
//! `users` with the columns and meanings the [store](super::store) reads, on a connection the
//! caller holds inside its transaction.
//!
//! Invariants: ids are explicit — the seed continues after the largest id in the table
//! ([`next_user_id`]) — and, on PostgreSQL, [`insert_seeded_users`] moves the identity sequence
//! past them in the same transaction, so accounts the application creates later get fresh ids
//! (SQLite's AUTOINCREMENT keeps track of explicit ids by itself). Emails are unique and already
//! normalised; every seeded user has the same password hash; phone and birthday are left unset.

use sqlx::AnyConnection;

use platform::{
    config::DatabaseKind,
    db::{advance_id_sequence, bulk_row_placeholders, next_free_id},
};

/// Rows per `INSERT` (7 values each): a few thousand bound values, under SQLite's limit of
/// 32 766.
const USERS_PER_STATEMENT: usize = 1_000;

/// A seeded account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeededUser {
    /// Explicit id.
    pub id: i64,
    /// Unique email, normalised.
    pub email: String,
    /// Display name ('' for none).
    pub nickname: String,
    /// Profile text ('' for none).
    pub about_me: String,
    /// Registration time (ms): `ctime` and `utime`.
    pub ctime: i64,
}

/// One past the largest user id: the id the next seeded user gets.
pub async fn next_user_id(conn: &mut AnyConnection) -> sqlx::Result<i64> {
    next_free_id(conn, "users").await
}

/// Inserts `rows` into `users`, all with the password hash `password_hash`, then moves
/// PostgreSQL's id sequence past them.
pub async fn insert_seeded_users(
    conn: &mut AnyConnection,
    kind: DatabaseKind,
    rows: &[SeededUser],
    password_hash: &str,
) -> sqlx::Result<()> {
    for chunk in rows.chunks(USERS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO users (id, email, password, nickname, about_me, ctime, utime) VALUES {}",
            bulk_row_placeholders(kind, chunk.len(), 7)
        );
        let mut query = sqlx::query(&sql);
        for row in chunk {
            query = query
                .bind(row.id)
                .bind(row.email.as_str())
                .bind(password_hash)
                .bind(row.nickname.as_str())
                .bind(row.about_me.as_str())
                .bind(row.ctime)
                .bind(row.ctime);
        }
        query.execute(&mut *conn).await?;
    }
    advance_id_sequence(conn, "users").await
}
