//! `webook jobs …`: the admin API's operations from the command line, straight on the database
//! the layered config names (the same settings `serve` uses; migrations are applied first, so it
//! works on a fresh database too). Nothing here needs a running server: workers pick changes up
//! at their next poll.
//!
//! Output is for people: aligned tables for `list` and `runs` (times in RFC 3339, UTC), one line
//! for the other commands. Failures are errors (one `error: …` line, exit code 1, from `main`).

use anyhow::{anyhow, Context};
use scheduler::sql::{Executors, JobRow, RunRow, SqlJobStore, StoreError};

use clap::{Args, Subcommand};

use crate::{
    jobs::service::{self, JobSpec},
    terminal::{table, time_text},
};
use platform::{
    config::Config,
    db::{Db, Migration},
};

/// The jobs feature's subcommand of `webook`.
#[derive(Debug, Subcommand)]
pub enum JobsCli {
    /// Manage durable jobs directly in the database (the admin API's operations, offline).
    Jobs {
        /// What to do.
        #[command(subcommand)]
        command: JobsCommand,
    },
}

/// `webook jobs …`: the operations of the admin API (API.md → Jobs (admin)) on the database the
/// layered config names. Jobs are named by id or by name.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List every job: status, schedule, next fire time.
    List,
    /// Create a job; prints its id.
    Add(AddJobArgs),
    /// Stop a job: no further runs; a running run is told at its next heartbeat.
    Stop {
        /// Job id or name.
        job: String,
    },
    /// Resume a stopped job from its next fire time after now.
    Resume {
        /// Job id or name.
        job: String,
    },
    /// Ask for one run now; a running instance picks it up at its next poll.
    Trigger {
        /// Job id or name.
        job: String,
    },
    /// Show a job's runs, newest first.
    Runs {
        /// Job id or name.
        job: String,
        /// How many runs to show (1-500).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=500))]
        limit: i64,
    },
}

/// Flags of `webook jobs add`.
#[derive(Debug, Args)]
pub struct AddJobArgs {
    /// Unique name: 1-64 letters, digits, '.', '_' or '-'.
    #[arg(long)]
    pub name: String,
    /// Schedule: cron with optional seconds and year, `@every 10m`, `@daily`, …
    #[arg(long)]
    pub cron: String,
    /// Executor that runs it, e.g. `http`.
    #[arg(long)]
    pub executor: String,
    /// Executor configuration, a JSON object (e.g. '{"url": "http://host/hook"}'). Default: {}.
    #[arg(long, value_name = "JSON")]
    pub cfg: Option<String>,
    /// IANA time zone the schedule is read in. Default: UTC.
    #[arg(long, value_name = "TZ")]
    pub timezone: Option<String>,
    /// Misfire policy: skip, fire_once or catch_up. Default: fire_once.
    #[arg(long, value_name = "POLICY")]
    pub misfire: Option<String>,
    /// Overlap policy: forbid. Default: forbid.
    #[arg(long, value_name = "POLICY")]
    pub overlap: Option<String>,
    /// Run timeout in milliseconds (at least 1000). Default: 600000.
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<i64>,
}

/// Connects to the configured database, applies `schema` and runs `command`, printing its
/// output on stdout. New jobs are checked against the executors `executors` gives for the
/// database (every installed feature's).
pub async fn run(
    config: &Config,
    schema: &[Migration],
    executors: impl FnOnce(&Db) -> anyhow::Result<Executors>,
    command: JobsCommand,
) -> anyhow::Result<()> {
    let db = Db::connect(config).await?;
    let result = async {
        db.migrate(schema).await.context("applying migrations")?;
        execute(&super::store(&db), &executors(&db)?, command).await
    }
    .await;
    db.close().await;
    print!("{}", result?);
    Ok(())
}

/// Runs `command` on `store` (new jobs checked against `executors`); returns what to print.
pub async fn execute(
    store: &SqlJobStore,
    executors: &scheduler::sql::Executors,
    command: JobsCommand,
) -> anyhow::Result<String> {
    match command {
        JobsCommand::List => Ok(jobs_table(&store.list().await?)),
        JobsCommand::Add(args) => {
            let name = args.name.clone();
            let id = service::create(store, executors, &spec(args))
                .await
                .map_err(|err| described(err, &name))
                .with_context(|| format!("cannot create job {name:?}"))?;
            Ok(format!("created job {id}\n"))
        }
        JobsCommand::Stop { job } => {
            let job = find(store, &job).await?;
            store
                .stop(job.id)
                .await
                .map_err(|err| described(err, &job.name))?;
            Ok(format!("stopped job {} ({})\n", job.id, job.name))
        }
        JobsCommand::Resume { job } => {
            let job = find(store, &job).await?;
            store
                .resume(job.id)
                .await
                .map_err(|err| described(err, &job.name))?;
            let next = store
                .get(job.id)
                .await?
                .map_or_else(|| "-".to_owned(), |job| next_time_text(job.next_time));
            Ok(format!(
                "resumed job {} ({}), next run at {next}\n",
                job.id, job.name
            ))
        }
        JobsCommand::Trigger { job } => {
            let job = find(store, &job).await?;
            store
                .trigger(job.id)
                .await
                .map_err(|err| described(err, &job.name))?;
            Ok(format!(
                "triggered job {} ({}): a running instance runs it at its next poll\n",
                job.id, job.name
            ))
        }
        JobsCommand::Runs { job, limit } => {
            let job = find(store, &job).await?;
            Ok(runs_table(&store.runs(job.id, limit).await?))
        }
    }
}

fn spec(args: AddJobArgs) -> JobSpec {
    JobSpec {
        name: args.name,
        cron: args.cron,
        executor: args.executor,
        cfg: args.cfg,
        timezone: args.timezone,
        misfire: args.misfire,
        overlap: args.overlap,
        timeout_ms: args.timeout_ms,
    }
}

/// The job with this id or name; an error naming it when there is none.
async fn find(store: &SqlJobStore, id_or_name: &str) -> anyhow::Result<JobRow> {
    store
        .find(id_or_name)
        .await?
        .ok_or_else(|| anyhow!("no such job {id_or_name:?} (give a job id or name)"))
}

/// A store error as one line (the store's messages already name the problem).
fn described(err: StoreError, name: &str) -> anyhow::Error {
    match err {
        StoreError::NotFound => anyhow!("no such job {name:?}"),
        StoreError::Database(err) => anyhow::Error::new(err).context("database error"),
        other => anyhow!("{other}"),
    }
}

fn next_time_text(next_time: i64) -> String {
    service::next_time(next_time).map_or_else(|| "never".to_owned(), time_text)
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".to_owned()
    } else {
        text.to_owned()
    }
}

fn jobs_table(jobs: &[JobRow]) -> String {
    let rows = jobs
        .iter()
        .map(|job| {
            vec![
                job.id.to_string(),
                job.name.clone(),
                job.status.to_string(),
                job.cron.clone(),
                job.timezone.clone(),
                job.executor.clone(),
                next_time_text(job.next_time),
                or_dash(&job.owner),
            ]
        })
        .collect();
    table(
        &[
            "ID", "NAME", "STATUS", "CRON", "TIMEZONE", "EXECUTOR", "NEXT", "OWNER",
        ],
        rows,
    )
}

fn runs_table(runs: &[RunRow]) -> String {
    let optional_time = |ms: Option<i64>| ms.map_or_else(|| "-".to_owned(), time_text);
    let rows = runs
        .iter()
        .map(|run| {
            vec![
                run.id.to_string(),
                time_text(run.scheduled_at),
                run.status.to_string(),
                optional_time(run.started_at),
                optional_time(run.finished_at),
                run.token.to_string(),
                or_dash(&run.owner),
                // Keep the table one line per run.
                run.error
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |error| error.replace('\n', " ")),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "SCHEDULED",
            "STATUS",
            "STARTED",
            "FINISHED",
            "TOKEN",
            "OWNER",
            "ERROR",
        ],
        rows,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_job_that_never_runs_again_says_so() {
        assert_eq!(next_time_text(scheduler::sql::NEVER), "never");
    }
}
