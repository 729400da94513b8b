//! The webook crate's integration tests, in one test binary: the crate and its dependencies are
//! linked once, not once per test file. Each module is one area (what was one `tests/<name>.rs`
//! binary); `common` holds the helpers they share.
//!
//! Run one module with a name filter, with the services up:
//! `scripts/with-services.sh cargo test -p webook --test it cluster::`.
//!
//! The modules share one process: the metrics registry, the log subscriber and the detached
//! writes are process-wide, so tests assert lower bounds on metrics, and a test that must be
//! alone in its process starts one of its own (`statement_counts`).

// First: it defines `setup_tests!`, which the modules below use.
#[macro_use]
mod common;

mod account;
mod anonymous_reading;
mod articles;
mod backup;
mod chaos;
mod cluster;
mod comments;
mod console;
mod db_move;
mod db_move_chaos;
mod deploy;
mod event_chaos;
mod events_admin;
mod feed;
mod full_disk;
mod http_conventions;
mod interactive;
mod jobs;
mod jobs_admin;
mod live_settings;
mod migrations;
mod moderation;
mod notifications;
mod openapi;
mod otlp_tracing;
mod payment;
mod payment_jobs;
mod phone_login;
mod platform_keys;
mod process;
mod ranking;
mod rate_limits;
mod readiness;
mod refunds;
mod rewards;
mod search;
mod search_pruning;
mod search_quality;
mod search_recall;
mod seed;
mod site;
mod sms_providers;
mod sql_scheduler;
mod statement_counts;
mod tags;
mod users;
mod wechat_login;
