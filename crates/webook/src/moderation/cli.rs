//! `webook moderation …`: the review queue, held articles and the audit log from the command
//! line, and the actions that live in the database alone — suspending and lifting accounts,
//! dismissing reports — straight on the database the layered config names (migrations applied
//! first; no server needed: every instance's write gate reads suspensions on each write).
//! Hiding, restoring and deleting content go through the admin API or the console: they must
//! reach the running instances' caches and event consumers. Output is for people: aligned
//! tables, times in RFC 3339 (UTC); failures are one `error: …` line and exit code 1.

use anyhow::Context;
use clap::Subcommand;

use crate::{
    moderation::{model::Kind, store::ModerationStore},
    terminal::{operator, table, time_text},
};
use platform::{
    config::Config,
    db::{now_millis, Db, Migration},
};

/// The subcommand of `webook`.
#[derive(Debug, Subcommand)]
pub enum ModerationCli {
    /// Reports, held articles, suspensions and the moderators' audit log.
    Moderation {
        /// What to do.
        #[command(subcommand)]
        command: ModerationCommand,
    },
}

/// `webook moderation …`.
#[derive(Debug, Subcommand)]
pub enum ModerationCommand {
    /// Targets with open reports, most reported first.
    Queue {
        /// Newest report first instead.
        #[arg(long)]
        newest: bool,
        /// How many targets (1-200).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=200))]
        limit: i64,
    },
    /// Articles the word lists hold for review, the longest waiting first.
    Held {
        /// How many (1-200).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=200))]
        limit: i64,
    },
    /// The audit log, newest first.
    Log {
        /// Only this kind of target (article, comment, user), with --id.
        #[arg(long, requires = "id", value_parser = ["article", "comment", "user"])]
        kind: Option<String>,
        /// Only this target, with --kind.
        #[arg(long, requires = "kind")]
        id: Option<i64>,
        /// How many (1-200).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=200))]
        limit: i64,
    },
    /// Suspend an account: it may sign in and read, not write.
    Suspend {
        /// The user's id.
        #[arg(long)]
        user: i64,
        /// For how long (e.g. 7d, 12h); for good without it.
        #[arg(long = "for", value_parser = humantime_serde::re::humantime::parse_duration)]
        period: Option<std::time::Duration>,
        /// Why (shown to the user with every refused write).
        #[arg(long)]
        reason: String,
    },
    /// End an account's suspension.
    Lift {
        /// The user's id.
        #[arg(long)]
        user: i64,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Close a target's open reports, changing nothing else.
    Dismiss {
        /// article, comment or user.
        #[arg(long, value_parser = ["article", "comment", "user"])]
        kind: String,
        /// The target's id.
        #[arg(long)]
        id: i64,
        /// Why.
        #[arg(long)]
        reason: String,
    },
}

/// Connects to the configured database, applies `schema` and runs `command`, printing its
/// output.
pub async fn run(
    config: &Config,
    schema: &[Migration],
    command: ModerationCommand,
) -> anyhow::Result<()> {
    let db = Db::connect(config).await?;
    let result = async {
        db.migrate(schema).await.context("applying migrations")?;
        execute(&ModerationStore::new(db.clone()), command, &operator()).await
    }
    .await;
    db.close().await;
    print!("{}", result?);
    Ok(())
}

fn kind(name: &str) -> anyhow::Result<Kind> {
    Kind::parse(name).with_context(|| format!("unknown kind {name}"))
}

fn reason(reason: &str) -> anyhow::Result<String> {
    let reason = reason.trim();
    anyhow::ensure!(!reason.is_empty(), "--reason must say why");
    Ok(format!("{reason} (webook moderation, by {})", operator()))
}

/// Runs `command` on `store` as `by`; returns what to print. Actions are logged as admin 0,
/// the operator named in the reason.
pub async fn execute(
    store: &ModerationStore,
    command: ModerationCommand,
    by: &str,
) -> anyhow::Result<String> {
    let now = now_millis();
    match command {
        ModerationCommand::Queue { newest, limit } => {
            let items = store.queue(!newest, 0, limit).await?;
            if items.is_empty() {
                return Ok("no open reports\n".to_owned());
            }
            let rows = items
                .into_iter()
                .map(|item| {
                    let latest = item.reports.first();
                    vec![
                        item.kind.as_str().to_owned(),
                        item.id.to_string(),
                        item.open.to_string(),
                        time_text(item.latest),
                        latest.map_or(String::new(), |report| report.reason.clone()),
                        latest.map_or(String::new(), |report| {
                            report
                                .snapshot
                                .chars()
                                .take(60)
                                .collect::<String>()
                                .replace('\n', " ")
                        }),
                    ]
                })
                .collect();
            Ok(table(
                &["KIND", "ID", "OPEN", "LATEST", "REASON", "AS REPORTED"],
                rows,
            ))
        }
        ModerationCommand::Held { limit } => {
            let articles = store.held(0, limit).await?;
            let comments = store.held_comments(0, limit).await?;
            if articles.is_empty() && comments.is_empty() {
                return Ok("nothing is held for review\n".to_owned());
            }
            let rows = articles
                .into_iter()
                .map(|article| {
                    vec![
                        "article".to_owned(),
                        article.id.to_string(),
                        article.author_id.to_string(),
                        time_text(article.utime),
                        article.title,
                        article.reason,
                    ]
                })
                .chain(comments.into_iter().map(|comment| {
                    vec![
                        "comment".to_owned(),
                        comment.id.to_string(),
                        comment.author_id.to_string(),
                        time_text(comment.ctime),
                        comment
                            .content
                            .chars()
                            .take(60)
                            .collect::<String>()
                            .replace('\n', " "),
                        comment.reason,
                    ]
                }))
                .collect();
            Ok(table(
                &["KIND", "ID", "AUTHOR", "SUBMITTED", "TEXT", "WHY"],
                rows,
            ))
        }
        ModerationCommand::Log {
            kind: name,
            id,
            limit,
        } => {
            let target = match (name, id) {
                (Some(name), Some(id)) => Some((kind(&name)?, id)),
                _ => None,
            };
            let entries = store.log(target, None, limit).await?;
            if entries.is_empty() {
                return Ok("no moderation actions\n".to_owned());
            }
            let rows = entries
                .into_iter()
                .map(|entry| {
                    vec![
                        entry.id.to_string(),
                        time_text(entry.ctime),
                        entry.admin.to_string(),
                        entry.action,
                        format!("{} {}", entry.kind, entry.target),
                        entry.outcome,
                        entry.reason,
                    ]
                })
                .collect();
            Ok(table(
                &[
                    "ID", "WHEN", "ADMIN", "ACTION", "TARGET", "OUTCOME", "REASON",
                ],
                rows,
            ))
        }
        ModerationCommand::Suspend {
            user,
            period,
            reason: why,
        } => {
            let until = match period {
                Some(period) => {
                    anyhow::ensure!(!period.is_zero(), "--for must be above 0");
                    now.saturating_add(i64::try_from(period.as_millis()).unwrap_or(i64::MAX))
                }
                None => i64::MAX,
            };
            let (changed, closed, _) = store
                .suspend(0, user, until, &reason(&why)?, now, true)
                .await?
                .with_context(|| format!("no user {user}"))?;
            let when = if until == i64::MAX {
                "for good".to_owned()
            } else {
                format!("until {}", time_text(until))
            };
            let note = if changed { "" } else { " (unchanged)" };
            Ok(format!(
                "user {user} suspended {when}{note}; {closed} open report(s) closed; by {by}\n"
            ))
        }
        ModerationCommand::Lift { user, reason: why } => {
            let (changed, _) = store.lift(0, user, &reason(&why)?, now, true).await?;
            Ok(if changed {
                format!("user {user}'s suspension lifted; by {by}\n")
            } else {
                format!("user {user} was not suspended\n")
            })
        }
        ModerationCommand::Dismiss {
            kind: name,
            id,
            reason: why,
        } => {
            let (closed, _) = store
                .close_and_log(
                    0,
                    "dismiss",
                    kind(&name)?,
                    id,
                    "dismissed",
                    &reason(&why)?,
                    "dismissed",
                    now,
                    None,
                )
                .await?;
            Ok(format!(
                "{closed} open report(s) of {name} {id} dismissed; by {by}\n"
            ))
        }
    }
}
