//! `webook events …`: consumer groups and their parked events from the command line, straight
//! on the database the layered config names (migrations applied first). No server is needed:
//! a replay marked here is taken by the group's consumers of any running instance within a few
//! seconds, or by the first one that starts. Output is for people: aligned tables, times in
//! RFC 3339 (UTC); failures are one `error: …` line and exit code 1 (from `main`).

use anyhow::Context;
use clap::Subcommand;

use crate::terminal::{operator, table, time_text};
use platform::{
    config::Config,
    db::{Db, Migration},
    events::parked::{self, Filter},
};

/// The subcommand of `webook`.
#[derive(Debug, Subcommand)]
pub enum EventsCli {
    /// Event consumer groups: positions, backlog and parked events; replay or discard them.
    Events {
        /// What to do.
        #[command(subcommand)]
        command: EventsCommand,
    },
}

/// `webook events …`.
#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Every group the database knows: outbox position and what waits behind it (embedded
    /// mode), parked events by state.
    Groups,
    /// Parked events, newest first.
    Parked {
        /// Only this group.
        #[arg(long)]
        group: Option<String>,
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
        /// Only this state: parked, replay, replaying, replayed, discarded (default: the open
        /// ones — parked, replay, replaying).
        #[arg(long, value_parser = [
            parked::PARKED, parked::REPLAY, parked::REPLAYING, parked::REPLAYED, parked::DISCARDED,
        ])]
        state: Option<String>,
        /// How many to show (1-500).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=500))]
        limit: i64,
    },
    /// Mark parked events for replay: their group applies them as if they had arrived late.
    Replay {
        /// Parked event ids (the `id` column of `webook events parked`).
        #[arg(long = "id")]
        ids: Vec<i64>,
        /// Every parked event of this group.
        #[arg(long)]
        group: Option<String>,
        /// Only this topic (with --group, or alone).
        #[arg(long)]
        topic: Option<String>,
        /// Every parked event.
        #[arg(long)]
        all: bool,
    },
    /// Discard parked events: never applied, kept as `discarded` with who and why.
    Discard {
        /// Parked event ids.
        #[arg(long = "id")]
        ids: Vec<i64>,
        /// Every parked event of this group.
        #[arg(long)]
        group: Option<String>,
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
        /// Why (recorded with the events).
        #[arg(long)]
        reason: String,
    },
}

/// Connects to the configured database, applies `schema` and runs `command`, printing its
/// output.
pub async fn run(
    config: &Config,
    schema: &[Migration],
    command: EventsCommand,
) -> anyhow::Result<()> {
    let db = Db::connect(config).await?;
    let result = async {
        db.migrate(schema).await.context("applying migrations")?;
        execute(&db, command, &operator()).await
    }
    .await;
    db.close().await;
    print!("{}", result?);
    Ok(())
}

/// Runs `command` on `db` as `by`; returns what to print.
pub async fn execute(db: &Db, command: EventsCommand, by: &str) -> anyhow::Result<String> {
    match command {
        EventsCommand::Groups => groups(db).await,
        EventsCommand::Parked {
            group,
            topic,
            state,
            limit,
        } => {
            let filter = Filter {
                group,
                topic,
                open: state.is_none(),
                state,
                ..Filter::default()
            };
            list(db, &filter, limit).await
        }
        EventsCommand::Replay {
            ids,
            group,
            topic,
            all,
        } => {
            let filter = super::filter(ids, group, topic, all).map_err(anyhow::Error::msg)?;
            let count = parked::replay(db, &filter, by).await?;
            Ok(format!(
                "{count} parked event(s) marked for replay; their groups apply them within a few \
                 seconds of a server running\n"
            ))
        }
        EventsCommand::Discard {
            ids,
            group,
            topic,
            reason,
        } => {
            anyhow::ensure!(!reason.trim().is_empty(), "--reason must say why");
            let filter = super::filter(ids, group, topic, false).map_err(anyhow::Error::msg)?;
            let count = parked::discard(db, &filter, by, reason.trim()).await?;
            Ok(format!("{count} parked event(s) discarded\n"))
        }
    }
}

async fn groups(db: &Db) -> anyhow::Result<String> {
    let groups = parked::stored_groups(db).await?;
    if groups.is_empty() {
        return Ok("no consumer group has recorded anything yet\n".to_owned());
    }
    let mut rows = Vec::with_capacity(groups.len());
    for group in groups {
        rows.push(vec![
            group.group,
            group.topic,
            group.position.map_or("-".to_owned(), |at| at.to_string()),
            group
                .waiting
                .map_or("-".to_owned(), |count| count.to_string()),
            group
                .oldest_waiting_seconds
                .map_or("-".to_owned(), |age| format!("{age:.1}s")),
            group.parked.to_string(),
            group.replaying.to_string(),
            group.replayed.to_string(),
            group.discarded.to_string(),
        ]);
    }
    Ok(table(
        &[
            "GROUP",
            "TOPIC",
            "POSITION",
            "WAITING",
            "OLDEST",
            "PARKED",
            "REPLAYING",
            "REPLAYED",
            "DISCARDED",
        ],
        rows,
    ))
}

async fn list(db: &Db, filter: &Filter, limit: i64) -> anyhow::Result<String> {
    let parked = parked::list(db, filter, limit).await?;
    if parked.is_empty() {
        return Ok("no parked events\n".to_owned());
    }
    let mut rows = Vec::with_capacity(parked.len());
    for event in parked {
        let mut error: String = event.last_error.chars().take(120).collect();
        if error.len() < event.last_error.len() {
            error.push('…');
        }
        rows.push(vec![
            event.id.to_string(),
            event.group,
            event.topic,
            event.key,
            event.state,
            event.failure,
            event.attempts.to_string(),
            time_text(event.parked_at),
            error.replace('\n', " "),
        ]);
    }
    Ok(table(
        &[
            "ID",
            "GROUP",
            "TOPIC",
            "KEY",
            "STATE",
            "FAILURE",
            "ATTEMPTS",
            "PARKED AT",
            "LAST ERROR",
        ],
        rows,
    ))
}
