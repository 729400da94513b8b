//! The scheduler's integration tests, one binary (one link instead of one per file):
//! - `engine`: the in-process engine under tokio's paused clock (no services needed);
//! - `locks`: the lock contract on in-process and real Redis locks (feature `redis`);
//! - `processes`: lock handover between real `scheduler-probe` processes (feature `probe`).
//!
//! The Redis tests need `SCHEDULER_TEST_REDIS_URL`: run them through `scripts/with-services.sh`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "redis")]
mod common;
mod engine;
#[cfg(feature = "redis")]
mod locks;
#[cfg(feature = "probe")]
mod processes;
