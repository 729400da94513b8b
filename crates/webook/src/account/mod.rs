//! Accounts and the double-entry ledger (API.md → Rewards, payments and accounts: `GET
//! /account`). Money features (rewards) post balanced transactions through [`Ledger`] — in
//! their own transaction ([`ledger::post`]) or in one of the ledger's ([`Ledger::post_once`]) —
//! and users read their balance and entries here.
//!
//! Data flow: [`http`] reads the caller's account through [`Ledger`] ([`service`]); postings
//! write `account_entries` and `accounts.balance` together ([`ledger`]), so a balance is always
//! the sum of its entries and the whole ledger sums to 0.

pub mod http;
pub mod ledger;
pub mod service;

pub use ledger::{
    is_duplicate_posting, lines_of, post, AccountKind, AccountRef, Line, PostError, Posted,
    Posting, Unbalanced,
};
pub use service::{AccountView, Audit, EntryView, Ledger};

use async_trait::async_trait;

use platform::{
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
};

/// The accounts feature: provides [`Ledger`].
pub struct Accounts;

#[async_trait]
impl Feature for Accounts {
    fn name(&self) -> &'static str {
        "accounts"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<Ledger>()] }
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(
                17,
                "ledger",
                include_str!("../../migrations/0017_ledger.sql"),
            ),
            Migration::new(
                31,
                "entries by time",
                include_str!("../../migrations/0031_entries_by_time.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::AccountApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let ledger = Ledger::new(platform.db.clone());
        registry.routes(http::router(http::AccountRoutes {
            ledger: ledger.clone(),
        }));
        registry.provide(ledger);
        Ok(())
    }
}
