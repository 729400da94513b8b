//! webook — the backend of a content community (accounts, articles with drafts and publishing,
//! reads/likes/collects, a hot list) with its own job scheduler. Follows and a feed, comments,
//! tags, search and rewards are not built yet.
//!
//! One binary, two ways to run (see `docs/ARCHITECTURE.md` and `DESIGN.md` §1):
//! - **embedded** (default): SQLite in the data dir, in-process cache/locks/queue;
//! - **cluster**: PostgreSQL + Redis, any number of instances behind a load balancer.
//!
//! The switch is configuration only. Data flows from [`cli`] (parse the command line) through
//! [`config`] (defaults → `webook.toml` → `WEBOOK_*` env → flags) into [`app`], which opens the
//! [`infra`] backends, assembles the HTTP router from the feature modules and serves it until a
//! shutdown signal drains it.

pub mod app;
pub mod article;
pub mod auth;
pub mod biz;
pub mod cli;
#[cfg(test)]
mod config_contract;
pub mod idempotency;
pub mod interactive;
pub mod jobs;
pub mod ranking;
pub mod schema;
pub mod seed;
pub mod user;

#[cfg(feature = "test-support")]
pub mod testing;
