//! Consumer groups, administered: what every event consumer group is doing and the events it
//! parked, with replay and discard — the console's operator page, the admin API
//! (`/admin/events/…`, API.md → Events (admin)) and `webook events …` (offline, on the configured
//! database). The mechanism itself is the platform's ([`platform::events::delivery`],
//! [`platform::events::parked`]); this feature only shows it and lets operators act on it.
//!
//! Data flow: a view reads this process's live group health
//! ([`platform::events::EventStream::groups`]: lag, failures, counters) and the database's
//! ([`platform::events::parked::stored_groups`]: outbox positions, parked events by state); a
//! replay or discard changes rows of `event_parked`, which the groups' consumers — of this
//! process or any other, now or when one starts — act on within a few seconds.

pub mod cli;
mod http;

use async_trait::async_trait;
use clap::FromArgMatches;

use platform::feature::{CliCommands, Feature, Platform, Registry};

/// The consumer-groups operator feature.
pub struct EventsAdmin;

#[async_trait]
impl Feature for EventsAdmin {
    fn name(&self) -> &'static str {
        "events_admin"
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<cli::EventsCli>(|matches, context| {
            Box::pin(async move {
                let cli::EventsCli::Events { command } =
                    cli::EventsCli::from_arg_matches(&matches)?;
                cli::run(&context.config, context.schema, command).await
            })
        }))
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::EventsAdminApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        registry.routes(http::router(http::EventRoutes {
            db: platform.db.clone(),
            events: platform.events.clone(),
        }));
        Ok(())
    }
}

/// The filter of a replay or discard, as the API and the CLI take it: ids, or a group (and
/// optionally a topic); an empty filter is refused unless `all` says so.
pub fn filter(
    ids: Vec<i64>,
    group: Option<String>,
    topic: Option<String>,
    all: bool,
) -> Result<platform::events::parked::Filter, &'static str> {
    if ids.is_empty() && group.is_none() && topic.is_none() && !all {
        return Err("name the parked events: ids, a group (and topic), or all");
    }
    Ok(platform::events::parked::Filter {
        ids,
        group,
        topic,
        ..platform::events::parked::Filter::default()
    })
}
