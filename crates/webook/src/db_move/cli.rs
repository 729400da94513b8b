//! `webook db-move …`: the move operated from a shell, with progress bars for the long work.
//! The serving instances take part through the control row ([`super::control`]); this process
//! does the copy, validation and fixes itself and coordinates switches.

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};

use platform::{config::Config, db::Migration};

use super::{
    control::Phase, control_of, open_mover, settings::MoveSettings, status, switch::Switcher, work,
};

#[derive(Debug, clap::Subcommand)]
pub enum DbMoveCli {
    /// Move the database online to PostgreSQL (start, status, switch, validate, fix, finish).
    #[command(subcommand)]
    DbMove(DbMoveCommand),
}

#[derive(Debug, clap::Subcommand)]
pub enum DbMoveCommand {
    /// Migrate the destination, install change capture and copy every table (resumes a copy
    /// that stopped).
    Start {
        /// The PostgreSQL database to move to (postgres://user:password@host/db).
        #[arg(long)]
        destination: String,
    },
    /// Print the phase, copy progress, replication backlog and last validation (JSON).
    Status,
    /// Switch every instance to the neighbouring phase (SrcOnly, SrcFirst, DstFirst, DstOnly).
    /// If this command is stopped, the switch still ends: an instance aborts or completes it.
    Switch {
        /// The phase to switch to.
        phase: String,
    },
    /// End the switch in progress now, whoever runs it: every instance keeps the phase it had
    /// (a switch that already flipped is completed instead).
    Abort,
    /// Compare both databases both ways; with --since only rows changed since then.
    Validate {
        /// Milliseconds since the epoch.
        #[arg(long)]
        since: Option<i64>,
    },
    /// Fix the open findings from the authoritative side (guarded by what validation saw).
    Fix,
    /// After DstOnly: remove the change capture and print the configuration to restart with.
    Finish,
}

pub async fn run(
    config: &Config,
    schema: &[Migration],
    command: DbMoveCommand,
) -> anyhow::Result<()> {
    let control = control_of(config).await?;
    let source_url = config.database_url();
    let mover = || async {
        open_mover(&control, &source_url)
            .await?
            .context("no move has been started (webook db-move start --destination …)")
    };
    let switcher = || async {
        anyhow::Ok(Switcher {
            control: control.clone(),
            mover: mover().await?,
            me: cli_name(),
            deadline: config.settings::<MoveSettings>()?.db_move_pause_deadline,
        })
    };
    match command {
        DbMoveCommand::Start { destination } => {
            let mover = work::start(&control, &source_url, &destination, schema).await?;
            let bar = progress_bar();
            let report = |table: &str, done: i64, rows: i64| {
                bar.set_length(u64::try_from(rows).unwrap_or(0));
                bar.set_position(u64::try_from(done).unwrap_or(0));
                bar.set_message(table.to_owned());
            };
            let copied = work::as_task(&control, "copy", mover.copy(&report)).await?;
            bar.finish_and_clear();
            println!("copied {copied} rows; now: webook db-move switch SrcFirst (if not yet), validate, switch DstFirst");
        }
        DbMoveCommand::Status => {}
        DbMoveCommand::Switch { phase } => {
            let target = Phase::parse(&phase)
                .context("phase must be SrcOnly, SrcFirst, DstFirst or DstOnly")?;
            let switched = switcher().await?.switch(target).await?;
            println!("{switched}");
        }
        DbMoveCommand::Abort => {
            let ended = switcher().await?.abort().await?;
            println!("{ended}");
        }
        DbMoveCommand::Validate { since } => {
            let mover = mover().await?;
            let bar = progress_bar();
            let report = |table: &str, done: i64, _rows: i64| {
                bar.set_position(u64::try_from(done).unwrap_or(0));
                bar.set_message(table.to_owned());
            };
            let validation =
                work::as_task(&control, "validate", mover.validate(since, &report)).await?;
            bar.finish_and_clear();
            println!(
                "compared {} rows: {} differences",
                validation.checked, validation.findings
            );
        }
        DbMoveCommand::Fix => {
            let mover = mover().await?;
            let (fixed, skipped) = work::as_task(&control, "fix", mover.fix()).await?;
            println!("fixed {fixed}, skipped {skipped} (changed since validation: validate again)");
        }
        DbMoveCommand::Finish => {
            let mover = mover().await?;
            super::finish(&control, &mover).await?;
        }
    }
    let mover = open_mover(&control, &source_url).await?;
    let view = status(&control, &source_url, mover.as_ref(), true).await?;
    println!("{}", serde_json::to_string_pretty(&view)?);
    if let Some(restart_with) = &view.restart_with {
        println!("\nRestart every instance with:\n{restart_with}");
    }
    if let Some(task) = &view.task {
        println!("last task: {} {}: {}", task.kind, task.state, task.message);
    }
    Ok(())
}

/// This command's name as a switch's coordinator.
fn cli_name() -> String {
    format!("cli-{}", std::process::id())
}

fn progress_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg:>24} [{bar:40}] {pos}/{len} rows ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}
