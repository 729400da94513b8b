//! The gate every query of a [`super::DbPool`] passes: a small circuit breaker per database, and
//! the classification of database errors that says which failures are the database's (answered
//! 503) rather than the request's or the code's (500).
//!
//! **Why a gate.** When PostgreSQL stops, every query waits for a connection until the pool's
//! acquire timeout and only then fails; a server under load piles up requests that each hold a
//! task and a socket for that long. So a connection-class failure ([`is_connection_failure`]:
//! refused, reset, pool timeout, the server shutting down) opens the circuit for [`RETRY_AFTER`]
//! — except a pool timeout on SQLite, which only means that pool's connections are all busy and
//! must not refuse the writer's transactions, a pool of their own — and while it is open every
//! query fails at once (an I/O error, [`UNREACHABLE`]) instead of waiting. When the pause is over,
//! the next query is let through as a probe (the others keep failing fast); its success closes
//! the circuit, its failure opens it again. A success of any query closes it too. Storage
//! failures such as a full disk do not open it: reads still work then, and only the failing
//! writes fail.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        LazyLock,
    },
    time::{Duration, Instant},
};

use crate::config::DatabaseKind;

/// How long the circuit stays open after a connection failure before a probe is let through.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Counter: queries refused at once because the database was unreachable moments before.
pub const DB_FAST_FAILURES_TOTAL: &str = "db_fast_failures_total";

/// The message of a query refused while the circuit is open (an I/O error, so it is answered
/// like any other connection failure).
pub const UNREACHABLE: &str = "the database is unreachable (failing fast until it answers again)";

/// Whether `err` says the database cannot be reached (as opposed to refusing this one query):
/// these open the circuit.
pub fn is_connection_failure(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        // PostgreSQL: connection exceptions (08…), the server shutting down or starting
        // (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now).
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P0")),
        _ => false,
    }
}

/// Whether `err` is the database failing rather than the query: unreachable, out of disk or
/// other resources, an I/O error, locked for longer than the busy timeout. Such a request is
/// answered 503 (a dependency is down; retry later), never 500.
pub fn is_unavailable(err: &sqlx::Error) -> bool {
    if is_connection_failure(err) {
        return true;
    }
    let sqlx::Error::Database(db) = err else {
        return false;
    };
    let Some(code) = db.code() else {
        return false;
    };
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
        // SQLite reports (extended) result codes as numbers; the primary code is the low byte:
        // SQLITE_BUSY 5, SQLITE_READONLY 8, SQLITE_IOERR 10, SQLITE_FULL 13, SQLITE_CANTOPEN 14.
        return code
            .parse::<i32>()
            .is_ok_and(|code| matches!(code & 0xff, 5 | 8 | 10 | 13 | 14));
    }
    // PostgreSQL's SQLSTATE: insufficient resources (53…: disk full, out of memory, too many
    // connections) and system errors (58…: I/O error, undefined file).
    code.starts_with("53") || code.starts_with("58")
}

/// Whether `err`, or anything in its cause chain, is a database failure ([`is_unavailable`];
/// a query refused by an open circuit is one).
pub fn caused_by_unavailable_database(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<sqlx::Error>()
            .is_some_and(is_unavailable)
    })
}

/// The process-wide monotonic clock the circuit keeps its deadline on, in milliseconds.
fn monotonic_millis() -> u64 {
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    u64::try_from(START.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The circuit breaker of one database (module docs).
#[derive(Debug)]
pub(super) struct Circuit {
    /// 0 while closed; otherwise the [`monotonic_millis`] until which queries fail fast.
    open_until: AtomicU64,
    /// A probe is in flight.
    probing: AtomicBool,
    /// Whether a pool timeout opens the circuit. On PostgreSQL it is how an unreachable server
    /// shows (no connection can be made). On SQLite it only says that every connection of one
    /// pool is busy — the file is as reachable as ever — and opening the circuit for it would
    /// refuse the writer's transactions, which have a pool of their own.
    pool_timeout_opens: bool,
}

/// How a query got through the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// The circuit was closed.
    Normal,
    /// The circuit was open and its pause over: this query finds out whether the database is
    /// back.
    Probe,
}

/// A query's way through the gate ([`Circuit::pass`]): records how its acquisition ended. A
/// probe dropped before that — its future cancelled, e.g. a `try_join!` sibling failed fast —
/// ends without a verdict, so the next query after the pause probes again (before, the circuit
/// stayed open for good: every later query failed fast and none could probe).
#[must_use = "record how the query ended"]
pub(super) struct Pass<'c> {
    circuit: &'c Circuit,
    admission: Option<Admission>,
}

impl Pass<'_> {
    /// Records how the admitted acquisition ended: `failure` is its error, if any.
    pub(super) fn record(mut self, failure: Option<&sqlx::Error>) {
        if let Some(admission) = self.admission.take() {
            self.circuit.record(admission, failure);
        }
    }
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        if self.admission.take() == Some(Admission::Probe) {
            self.circuit.probing.store(false, Ordering::Release);
        }
    }
}

impl Circuit {
    /// Lets a query through (a [`Pass`] to record its end with), or refuses it at once while
    /// the circuit is open.
    pub(super) fn pass(&self) -> Result<Pass<'_>, sqlx::Error> {
        self.pass_at(monotonic_millis())
    }

    fn pass_at(&self, now: u64) -> Result<Pass<'_>, sqlx::Error> {
        Ok(Pass {
            circuit: self,
            admission: Some(self.admit_at(now)?),
        })
    }

    /// A closed circuit for a database of `kind`.
    pub(super) fn new(kind: DatabaseKind) -> Self {
        Self {
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
            pool_timeout_opens: kind == DatabaseKind::Postgres,
        }
    }

    fn admit_at(&self, now: u64) -> Result<Admission, sqlx::Error> {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Ok(Admission::Normal);
        }
        if now >= open_until
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(Admission::Probe);
        }
        metrics::counter!(DB_FAST_FAILURES_TOTAL).increment(1);
        Err(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            UNREACHABLE,
        )))
    }

    /// Records how an admitted query ended: `failure` is its error, if any.
    pub(super) fn record(&self, admission: Admission, failure: Option<&sqlx::Error>) {
        self.record_at(monotonic_millis(), admission, failure);
    }

    fn record_at(&self, now: u64, admission: Admission, failure: Option<&sqlx::Error>) {
        match failure {
            // SQLite's pool busy: says nothing about reachability, so opens and closes nothing.
            Some(sqlx::Error::PoolTimedOut) if !self.pool_timeout_opens => {}
            Some(err) if is_connection_failure(err) => {
                // +1: a deadline is never 0, which means closed.
                let until = now + 1 + u64::try_from(RETRY_AFTER.as_millis()).unwrap_or(u64::MAX);
                if self.open_until.swap(until, Ordering::AcqRel) == 0 {
                    tracing::warn!(error = %err, "database unreachable; failing fast until it answers");
                }
            }
            _ => {
                if self.open_until.swap(0, Ordering::AcqRel) != 0 {
                    tracing::info!("database reachable again");
                }
            }
        }
        if admission == Admission::Probe {
            self.probing.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn refused() -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
    }

    const PAUSE: u64 = RETRY_AFTER.as_millis() as u64;

    // Times are milliseconds on the circuit's clock.

    #[test]
    fn a_connection_failure_opens_the_circuit_and_one_probe_closes_it() {
        let circuit = Circuit::new(DatabaseKind::Postgres);
        let admission = circuit.admit_at(100).unwrap();
        assert_eq!(admission, Admission::Normal);
        circuit.record_at(100, admission, Some(&refused()));
        let refused_at_once = circuit.admit_at(100 + PAUSE).unwrap_err();
        assert!(is_connection_failure(&refused_at_once));
        assert!(
            caused_by_unavailable_database(&anyhow::Error::from(refused_at_once)),
            "a fast failure is answered as unavailable"
        );

        // After the pause exactly one query probes; the others keep failing fast.
        let probe = circuit.admit_at(101 + PAUSE).unwrap();
        assert_eq!(probe, Admission::Probe);
        assert!(
            circuit.admit_at(102 + PAUSE).is_err(),
            "a second query while probing"
        );
        circuit.record_at(103 + PAUSE, probe, None);
        assert_eq!(circuit.admit_at(104 + PAUSE).unwrap(), Admission::Normal);
    }

    #[test]
    fn a_probe_dropped_before_its_end_lets_the_next_query_probe() {
        let circuit = Circuit::new(DatabaseKind::Postgres);
        circuit.record_at(0, Admission::Normal, Some(&refused()));
        let probe = circuit.pass_at(1 + PAUSE).unwrap();
        assert_eq!(probe.admission, Some(Admission::Probe));
        // Its future is dropped mid-flight: nothing recorded.
        drop(probe);
        assert!(
            !circuit.probing.load(Ordering::Acquire),
            "the dropped probe is over"
        );
        let next = circuit.pass_at(2 + PAUSE).unwrap();
        assert_eq!(
            next.admission,
            Some(Admission::Probe),
            "the next query probes"
        );
        next.record(None);
        assert_eq!(
            circuit.pass_at(3 + PAUSE).unwrap().admission,
            Some(Admission::Normal),
            "closed by the probe that answered"
        );
    }

    #[test]
    fn a_failed_probe_opens_the_circuit_again_and_query_errors_do_not_open_it() {
        let circuit = Circuit::new(DatabaseKind::Postgres);
        circuit.record_at(0, Admission::Normal, Some(&sqlx::Error::RowNotFound));
        assert_eq!(circuit.admit_at(0).unwrap(), Admission::Normal);

        circuit.record_at(10, Admission::Normal, Some(&sqlx::Error::PoolTimedOut));
        let probe = circuit.admit_at(11 + PAUSE).unwrap();
        circuit.record_at(12 + PAUSE, probe, Some(&refused()));
        assert!(
            circuit.admit_at(13 + PAUSE).is_err(),
            "open again after a failed probe"
        );
        assert!(!circuit.probing.load(Ordering::Acquire));
        assert_eq!(circuit.admit_at(13 + 2 * PAUSE).unwrap(), Admission::Probe);
    }

    #[test]
    fn on_sqlite_a_busy_pool_neither_opens_nor_closes_the_circuit() {
        let circuit = Circuit::new(DatabaseKind::Sqlite);
        circuit.record_at(0, Admission::Normal, Some(&sqlx::Error::PoolTimedOut));
        assert_eq!(
            circuit.admit_at(1).unwrap(),
            Admission::Normal,
            "busy is not unreachable"
        );

        circuit.record_at(2, Admission::Normal, Some(&refused()));
        assert!(
            circuit.admit_at(3).is_err(),
            "a refused connection opens it"
        );
        let probe = circuit.admit_at(3 + PAUSE).unwrap();
        circuit.record_at(4 + PAUSE, probe, Some(&sqlx::Error::PoolTimedOut));
        assert!(
            !circuit.probing.load(Ordering::Acquire),
            "the probe is over"
        );
        assert_eq!(
            circuit.admit_at(5 + PAUSE).unwrap(),
            Admission::Probe,
            "still open: the next query probes again"
        );
    }
}
