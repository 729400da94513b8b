//! Health gauges: what `/readyz` finds about the database and Redis, and the space left on the
//! data directory's filesystem, as metrics an alert can watch (deploy/prometheus).
//!
//! Data flow: the readiness probes of [`crate::ops`] — on every `/readyz` request and, so the
//! gauges stay current when nobody asks, every [`PROBE_INTERVAL`] ([`crate::ops::watch_health`],
//! which skips `/readyz`'s write) — hand what they found to [`record`], which sets
//! [`DATABASE_UP`], [`REDIS_UP`] (cluster mode only) and, read from the filesystem at that moment,
//! [`DATA_DIR_AVAILABLE_BYTES`] and [`DATA_DIR_SIZE_BYTES`]. This module names neither the
//! probes nor the routes: it only turns their answers into gauges.

use std::{path::Path, time::Duration};

/// Gauge: 1 when the database answers the readiness probe's query, else 0 (`/readyz` says
/// `down`). Whether it takes writes is `/readyz`'s (`not writable`); on SQLite, a full disk shows
/// in [`DATA_DIR_AVAILABLE_BYTES`] first.
pub const DATABASE_UP: &str = "database_up";
/// Gauge: 1 when Redis answered `/readyz`'s PING, else 0. Not exported in embedded mode (no
/// Redis).
pub const REDIS_UP: &str = "redis_up";
/// Gauge: bytes of the data directory's filesystem an unprivileged writer can still use.
pub const DATA_DIR_AVAILABLE_BYTES: &str = "data_dir_available_bytes";
/// Gauge: size in bytes of the data directory's filesystem.
pub const DATA_DIR_SIZE_BYTES: &str = "data_dir_size_bytes";

/// How often the gauges are refreshed when no `/readyz` request does it.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// Describes the gauges to the installed recorder; harmless to repeat.
pub fn describe_metrics() {
    metrics::describe_gauge!(
        DATABASE_UP,
        "1 when the database answers the readiness probe's query, else 0"
    );
    metrics::describe_gauge!(
        REDIS_UP,
        "1 when Redis answers PING (readiness probe), else 0; cluster mode only"
    );
    metrics::describe_gauge!(
        DATA_DIR_AVAILABLE_BYTES,
        metrics::Unit::Bytes,
        "Bytes still available to webook on the data directory's filesystem"
    );
    metrics::describe_gauge!(
        DATA_DIR_SIZE_BYTES,
        metrics::Unit::Bytes,
        "Size of the data directory's filesystem"
    );
}

/// Sets the gauges from a readiness probe's findings: whether the database answers, whether
/// Redis does (`None`: not configured, the gauge is left out), and the space on `data_dir`'s
/// filesystem (left as it was when the directory cannot be read).
pub fn record(database_up: bool, redis_up: Option<bool>, data_dir: &Path) {
    metrics::gauge!(DATABASE_UP).set(f64::from(u8::from(database_up)));
    if let Some(up) = redis_up {
        metrics::gauge!(REDIS_UP).set(f64::from(u8::from(up)));
    }
    match space(data_dir) {
        Ok((available, size)) => {
            metrics::gauge!(DATA_DIR_AVAILABLE_BYTES).set(available as f64);
            metrics::gauge!(DATA_DIR_SIZE_BYTES).set(size as f64);
        }
        Err(err) => tracing::debug!(
            data_dir = %data_dir.display(),
            %err,
            "cannot read the data directory's free space"
        ),
    }
}

/// (bytes available to an unprivileged writer, filesystem size) of `dir`'s filesystem.
pub fn space(dir: &Path) -> std::io::Result<(u64, u64)> {
    let stats = rustix::fs::statvfs(dir)?;
    Ok((
        stats.f_bavail.saturating_mul(stats.f_frsize),
        stats.f_blocks.saturating_mul(stats.f_frsize),
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_space_of_a_directory_is_its_filesystems() {
        let dir = tempfile::tempdir().unwrap();
        let (available, size) = space(dir.path()).unwrap();
        assert!(size > 0, "size {size}");
        assert!(available <= size, "available {available} of {size}");
        assert!(space(&dir.path().join("missing")).is_err());
    }
}
