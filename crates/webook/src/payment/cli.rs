//! `webook payments …`: discrepancies, their fixes and refunds from the command line, straight on
//! the database the layered config names (migrations applied first), through the same
//! [`PaymentService`] as the admin routes — the provider the config names is asked, and the
//! events it records are relayed by any running instance (or the first one that starts). The
//! operator is recorded as admin 0 via `cli:<user>@<host>` (`actedVia`, `requestedVia`; never in
//! a refund's reason, which the payer sees). Output is for
//! people: aligned tables, times in RFC 3339 (UTC); failures are one `error: …` line and exit
//! code 1 (from `main`).

use anyhow::Context;
use clap::Subcommand;

use platform::{
    config::Config,
    db::{Db, Migration},
    error::{AppError, Lang},
    events::{outbox::Outbox, EventStream},
};

use super::{
    actions::{with_actions, Act},
    model::{Action, Discrepancy, NewRefund, Refund, RefundStatus},
    service::PaymentService,
};
use crate::{
    account::Ledger,
    terminal::{operator, table, time_text},
};

/// The subcommand of `webook`.
#[derive(Debug, Subcommand)]
pub enum PaymentsCli {
    /// Payment discrepancies and their fixes, and refunds.
    Payments {
        /// What to do.
        #[command(subcommand)]
        command: PaymentsCommand,
    },
}

/// `webook payments …`.
#[derive(Debug, Subcommand)]
pub enum PaymentsCommand {
    /// What reconciliation and the notification checks found, newest first, with the actions
    /// each offers.
    Discrepancies {
        /// Only this status: open, fixed, resolved (default: open).
        #[arg(long, default_value = "open", value_parser = ["open", "fixed", "resolved", "all"])]
        status: String,
        /// How many to show (1-500).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=500))]
        limit: i64,
    },
    /// Fixes an open discrepancy: credit (settle as paid so the seller credits it), refund
    /// (give the money back) or resolve (close with the note).
    Act {
        /// The discrepancy (the `id` column of `webook payments discrepancies`).
        id: i64,
        /// credit, refund or resolve.
        #[arg(value_parser = ["credit", "refund", "resolve"])]
        action: String,
        /// What was done and why (recorded).
        #[arg(long)]
        note: String,
        /// For refund: let the author's balance go below 0.
        #[arg(long)]
        allow_negative: bool,
    },
    /// Refunds, newest first.
    Refunds {
        /// Only this status: requested, processing, succeeded, failed (default: all).
        #[arg(long, value_parser = ["requested", "processing", "abnormal", "succeeded", "failed"])]
        status: Option<String>,
        /// How many to show (1-500).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=500))]
        limit: i64,
    },
    /// Refunds a paid payment in full.
    Refund {
        /// The payment's trade number.
        trade_no: String,
        /// Why, up to 80 characters (the payer sees it).
        #[arg(long)]
        reason: String,
        /// Let the author's balance go below 0 when the credit is reversed.
        #[arg(long)]
        allow_negative: bool,
    },
}

/// Connects to the configured database, applies `schema` and runs `command`, printing its
/// output.
pub async fn run(
    config: &Config,
    schema: &[Migration],
    command: PaymentsCommand,
) -> anyhow::Result<()> {
    let db = Db::connect(config).await?;
    let result = async {
        db.migrate(schema).await.context("applying migrations")?;
        let outbox = Outbox::new(db.clone(), EventStream::in_process());
        let (payments, _) = super::service(config, &db, outbox, Ledger::new(db.clone()))?;
        execute(&payments, command, &operator()).await
    }
    .await;
    db.close().await;
    print!("{}", result?);
    Ok(())
}

/// An [`AppError`] as one line for a person (with its cause, for a failure of ours or the
/// provider's).
fn refused(err: AppError) -> anyhow::Error {
    match err {
        AppError::Internal(cause) | AppError::Unavailable(cause) => cause,
        other => anyhow::anyhow!("{}", other.msg(Lang::En)),
    }
}

/// Runs `command` through `payments` as `by`; returns what to print.
pub async fn execute(
    payments: &PaymentService,
    command: PaymentsCommand,
    by: &str,
) -> anyhow::Result<String> {
    match command {
        PaymentsCommand::Discrepancies { status, limit } => {
            let status = (status != "all").then_some(status);
            let found = payments
                .store()
                .discrepancies(status.as_deref(), i64::MAX, limit)
                .await?;
            Ok(discrepancy_table(found.into_iter().map(with_actions)))
        }
        PaymentsCommand::Act {
            id,
            action,
            note,
            allow_negative,
        } => {
            let action =
                Action::parse(&action).ok_or_else(|| anyhow::anyhow!("no such action {action}"))?;
            let act = Act {
                action,
                note,
                admin: 0,
                via: by.to_owned(),
                allow_negative,
            };
            let done = payments.act(id, &act).await.map_err(refused)?;
            Ok(discrepancy_table([done]))
        }
        PaymentsCommand::Refunds { status, limit } => {
            let status = status.as_deref().and_then(RefundStatus::parse);
            let refunds = payments.store().refunds(status, i64::MAX, limit).await?;
            Ok(refund_table(refunds))
        }
        PaymentsCommand::Refund {
            trade_no,
            reason,
            allow_negative,
        } => {
            let refund = payments
                .refund(&NewRefund {
                    trade_no,
                    reason,
                    requested_by: 0,
                    requested_via: by.to_owned(),
                    allow_negative,
                })
                .await
                .map_err(refused)?;
            tracing::info!(refund_no = %refund.refund_no, by, "refund asked from the command line");
            Ok(refund_table([refund]))
        }
    }
}

fn amount(fen: Option<i64>) -> String {
    fen.map_or_else(String::new, |fen| fen.to_string())
}

fn discrepancy_table(found: impl IntoIterator<Item = Discrepancy>) -> String {
    let rows = found
        .into_iter()
        .map(|found| {
            let actions: Vec<&str> = found.actions.iter().map(|action| action.as_str()).collect();
            let by = match (found.acted_via.as_str(), found.acted_by) {
                ("", Some(admin)) => format!("admin {admin}"),
                ("", None) => String::new(),
                (via, _) => via.to_owned(),
            };
            vec![
                found.id.to_string(),
                found.kind,
                found.trade_no,
                amount(found.provider_amt),
                amount(found.our_amt),
                found.status,
                if actions.is_empty() {
                    found.action
                } else {
                    actions.join(",")
                },
                by,
                found.note,
                time_text(found.utime),
                found.detail,
            ]
        })
        .collect();
    table(
        &[
            "id", "kind", "trade", "provider", "ours", "status", "actions", "by", "note",
            "changed", "detail",
        ],
        rows,
    )
}

fn refund_table(refunds: impl IntoIterator<Item = Refund>) -> String {
    let rows = refunds
        .into_iter()
        .map(|refund| {
            vec![
                refund.id.to_string(),
                refund.refund_no,
                refund.trade_no,
                refund.amt.to_string(),
                refund.status.as_str().to_owned(),
                refund.reason,
                refund.refunded_at.map(time_text).unwrap_or_default(),
                refund.detail,
            ]
        })
        .collect();
    table(
        &[
            "id", "refund", "trade", "fen", "status", "reason", "refunded", "detail",
        ],
        rows,
    )
}
