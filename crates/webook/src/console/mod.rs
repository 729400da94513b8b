//! The web console: webook's own browser front end, served by the same binary at `/`.
//!
//! It is a set of hand-written ES modules and one stylesheet under `assets/` (no build step, no
//! Node toolchain), embedded in the binary ([`assets::Bundle`]) and talking to the public JSON
//! API like any other client — readers (home, article, author, search, tag pages), writers
//! (sign-up and login, profile, editor, their articles and account), every signed-in user
//! (notifications at `#/notifications`: each kind in words, mark one or all read, the kinds not
//! to be told about; an unread badge in the top bar fed live by `GET /notifications/stream`,
//! read with `fetch` since the token goes in a header, polling `GET /notifications/unread` while
//! the stream is down) and operators (jobs dashboard; reconciliation findings at
//! `#/ops/findings`, each open one offering the actions its kind allows — credit, refund,
//! resolve — with a note; refunds at `#/ops/refunds`, listed by status, and a form refunding a
//! paid payment by its trade number; parked events; moderation at `#/ops/moderation` — the
//! review queue with each target's content as reported and the actions its kind allows, held
//! articles to approve or reject, the word lists, the audit log; the database move;
//! instances). Pages are `#/…` fragments of the one page at `/`, so no console
//! path collides with an API route. What the console needs beyond the other features' routes
//! lives here too: the QR code of a payment URL and the instance overview ([`instances`]), fed
//! by every process's heartbeat.

mod assets;
mod http;
mod instances;
mod shell;

pub use shell::{ConsoleShell, ShellPage};

use async_trait::async_trait;

use platform::{
    db::Migration,
    feature::{Feature, Platform, Registry, Service},
};

use assets::Bundle;

/// The console feature.
pub struct Console;

#[async_trait]
impl Feature for Console {
    fn name(&self) -> &'static str {
        "console"
    }

    fn provides(&self) -> &'static [Service] {
        const { &[Service::of::<ConsoleShell>()] }
    }

    fn needs(&self) -> &'static [Service] {
        const { &[Service::of::<crate::jobs::WorkerInstance>()] }
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[Migration::new(
            21,
            "instances",
            include_str!("../../migrations/0021_instances.sql"),
        )];
        MIGRATIONS
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::ConsoleApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let bundle = Bundle::load()?;
        tracing::debug!(version = %bundle.version, files = bundle.files.len(), "console loaded");
        let instance = registry.get::<crate::jobs::WorkerInstance>()?;
        let role = match platform.config.role {
            platform::config::Role::All => "all",
            platform::config::Role::Api => "api",
            platform::config::Role::Worker => "worker",
        };
        let instances = instances::InstanceRegistry::new(platform.db.clone(), instance.0, role);
        let reporter = instances.clone();
        let reporting = platform.clone();
        registry.background("instance_reports", move |background| {
            reporter.run(reporting, background.stop)
        });
        let index = std::str::from_utf8(&bundle.index.bytes)?;
        registry.provide(ConsoleShell::new(index, &bundle.version)?);
        registry.routes(http::router(http::ConsoleRoutes { bundle, instances }));
        Ok(())
    }
}
