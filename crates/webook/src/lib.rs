//! webook — the backend of a content community (accounts, articles with drafts and publishing,
//! reads/likes/collects, a hot list, follows, a feed, comments, tags, search, rewards paid
//! through WeChat Pay into a double-entry ledger) with its own job scheduler.
//!
//! One binary, two ways to run (see `docs/ARCHITECTURE.md`):
//! - **embedded** (default): SQLite in the data dir, in-process cache/locks/queue;
//! - **cluster**: PostgreSQL + Redis, any number of instances behind a load balancer.
//!
//! The switch is configuration only. Data flows from [`cli`] (parse the command line) through the
//! configuration core of the `platform` crate (defaults → `webook.toml` → `WEBOOK_*` env →
//! flags; each feature brings its own settings section) into [`app`], which opens the platform's
//! backends, installs every feature of [`features::FEATURES`] — [`auth`], [`user`], [`interactive`],
//! [`article`], [`ranking`], [`feed`], [`comment`], [`tag`], [`search`], [`account`],
//! [`payment`], [`reward`], [`notifications`], [`jobs`], [`events_admin`], [`console`] and more, each a folder with one public face, its `mod.rs` — and
//! serves their routes until a shutdown signal drains it. [`schema`] is every feature's tables;
//! [`biz`] the kinds of object interactions attach to; [`seed`] fills a database with realistic
//! data; [`outside_http`] what the clients of outside providers share.

#![allow(
    rustdoc::private_intra_doc_links,
    reason = "module docs are for the maintainers and link the private items they describe; \
              read them with `cargo doc --document-private-items`"
)]

pub mod account;
pub mod app;
pub mod article;
pub mod auth;
pub mod backup;
pub mod biz;
pub mod cli;
pub mod comment;
#[cfg(test)]
mod config_contract;
pub mod console;
pub mod db_move;
pub mod events_admin;
pub mod features;
pub mod feed;
pub mod interactive;
pub mod jobs;
#[cfg(test)]
mod layering;
pub mod live_settings;
pub mod moderation;
pub mod notifications;
pub mod openapi;
pub mod outside_http;
pub mod payment;
pub mod phone_login;
pub mod ranking;
pub mod reward;
pub mod schema;
pub mod screening;
pub mod search;
pub mod seed;
pub mod site;
pub mod sms;
pub mod tag;
pub mod terminal;
pub mod user;
pub mod wechat_login;

#[cfg(feature = "test-support")]
pub mod testing;
