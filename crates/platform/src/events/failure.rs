//! What a consumer's failure means for its event: wait and retry (transient), or give up on the
//! event after a few tries and park it (permanent). The consumer loops ([`super::delivery`]) ask
//! [`classify`] about every error a handler returns.
//!
//! - **Transient** — the infrastructure failing: the database unreachable, busy, out of disk or
//!   failing I/O ([`crate::db::circuit::is_unavailable`]), Redis unreachable, any `std::io::Error`
//!   in the cause chain (an index directory gone), or an error a handler marked with
//!   [`transient`]. Retried with a growing pause and never parked: it heals when the fault does.
//! - **Permanent** — the event itself can never be applied: a handler marked it with
//!   [`permanent`] (its own validation refused the event), the payload does not decode (a
//!   `serde_json::Error` in the chain, e.g. from [`super::Event::decode`]), a database constraint
//!   the data can never meet (check, not-null, foreign key), or a panic in the handler.
//! - **Unclassified** — anything else: treated as transient (a pause, another try), but parked
//!   once the same event has failed for longer than the policy's bound ([`super::delivery`]).

use std::fmt;

/// How an error counts for the event that caused it (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The infrastructure failed: retry with a growing pause, never park.
    Transient,
    /// The event can never be applied: a few more tries, then park it.
    Permanent,
    /// Unknown: retry like a transient failure, park after the policy's bound on age.
    Unclassified,
}

impl Failure {
    /// `transient`, `permanent` or `unclassified` (metric labels, the dead-letter store).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Permanent => "permanent",
            Self::Unclassified => "unclassified",
        }
    }
}

/// The marker [`permanent`] attaches (as anyhow context).
#[derive(Debug, Clone, Copy)]
pub struct PermanentMarker;

impl fmt::Display for PermanentMarker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("permanent failure")
    }
}

/// The marker [`transient`] attaches (as anyhow context).
#[derive(Debug, Clone, Copy)]
pub struct TransientMarker;

impl fmt::Display for TransientMarker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("transient failure")
    }
}

/// Marks `err` as permanent: retrying the event cannot succeed (a handler's own validation
/// refused it). The message gains the prefix `permanent failure: `.
pub fn permanent(err: impl Into<anyhow::Error>) -> anyhow::Error {
    err.into().context(PermanentMarker)
}

/// Marks `err` as transient: the infrastructure failed and retrying later will succeed (an
/// index that cannot be written, a provider that is down). Never parked.
pub fn transient(err: impl Into<anyhow::Error>) -> anyhow::Error {
    err.into().context(TransientMarker)
}

/// The text of `err` (`{:#}`) without the markers' prefixes, for an error rebuilt from its text
/// with its [`Failure`] marked again.
pub fn unmarked(err: &anyhow::Error) -> String {
    let text = format!("{err:#}");
    let mut rest = text.as_str();
    loop {
        let stripped = rest
            .strip_prefix("permanent failure: ")
            .or_else(|| rest.strip_prefix("transient failure: "));
        match stripped {
            Some(inner) => rest = inner,
            None => return rest.to_owned(),
        }
    }
}

/// How `err` counts (module docs). A marker wins over what the cause chain says.
pub fn classify(err: &anyhow::Error) -> Failure {
    // A context layer is found by downcasting to its type, however deep it lies.
    if err.downcast_ref::<PermanentMarker>().is_some() {
        return Failure::Permanent;
    }
    if err.downcast_ref::<TransientMarker>().is_some() {
        return Failure::Transient;
    }
    let mut failure = Failure::Unclassified;
    for cause in err.chain() {
        if let Some(sql) = cause.downcast_ref::<sqlx::Error>() {
            if crate::db::circuit::is_unavailable(sql) {
                return Failure::Transient;
            }
            if is_constraint(sql) {
                failure = Failure::Permanent;
            }
        } else if let Some(redis) = cause.downcast_ref::<redis::RedisError>() {
            if crate::redis::is_connection_error(redis) || redis.is_timeout() {
                return Failure::Transient;
            }
        } else if cause.is::<std::io::Error>() {
            return Failure::Transient;
        } else if cause.is::<serde_json::Error>() {
            failure = Failure::Permanent;
        }
    }
    failure
}

/// Whether the database refused the data itself: a check, not-null or foreign-key constraint
/// (SQLite: SQLITE_CONSTRAINT's check, not-null and foreign-key codes; PostgreSQL: 23502,
/// 23503, 23514). A unique violation is not among them: it usually means a race or a retry.
fn is_constraint(err: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    matches!(
        db.kind(),
        sqlx::error::ErrorKind::CheckViolation
            | sqlx::error::ErrorKind::NotNullViolation
            | sqlx::error::ErrorKind::ForeignKeyViolation
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_survive_further_context() {
        let err = permanent(anyhow::anyhow!("share leaves the author nothing"));
        assert_eq!(classify(&err), Failure::Permanent);
        let wrapped = err.context("applying a payment").context("rewards");
        assert_eq!(classify(&wrapped), Failure::Permanent, "{wrapped:#}");
        assert!(format!("{wrapped:#}").contains("permanent failure: share leaves"));

        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "index dir gone");
        let marked = transient(anyhow::Error::new(io).context("committing")).context("search");
        assert_eq!(classify(&marked), Failure::Transient);
        // Rebuilt from its text and marked again, it does not say so twice.
        let rebuilt = transient(anyhow::Error::msg(unmarked(&transient(anyhow::anyhow!(
            "x"
        )))));
        assert_eq!(format!("{rebuilt:#}"), "transient failure: x");
    }

    #[test]
    fn causes_are_read_from_the_chain() {
        let io = std::io::Error::other("disk");
        assert_eq!(
            classify(&anyhow::Error::new(io).context("writing")),
            Failure::Transient
        );
        assert_eq!(
            classify(&anyhow::Error::new(sqlx::Error::PoolTimedOut).context("q")),
            Failure::Transient
        );
        let json = serde_json::from_str::<u32>("{").unwrap_err();
        assert_eq!(
            classify(&anyhow::Error::new(json).context("payload")),
            Failure::Permanent
        );
        assert_eq!(
            classify(&anyhow::anyhow!("something else")),
            Failure::Unclassified
        );
        assert_eq!(
            classify(&anyhow::Error::new(sqlx::Error::RowNotFound)),
            Failure::Unclassified
        );
    }
}
