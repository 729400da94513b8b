//! A tiny process that runs one job under a Redis lock and logs each run — what the multi-process
//! tests start several of, and a way to watch lock handover by hand:
//!
//! ```text
//! scheduler-probe redis=redis://127.0.0.1:6379/ prefix=probe: job=tick schedule='@every 1s' \
//!     guard=long ttl=3s log=/tmp/runs.log
//! ```
//!
//! Each run appends one line `<scheduled_at ms> <fencing token> <pid>` to `log`, after checking
//! that it still owns the lock (a fenced write). SIGTERM or SIGINT stops it gracefully (the long
//! lock is released); exit status 0.

use std::{io::Write, sync::Arc, time::Duration};

use anyhow::{bail, Context};
use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use scheduler::{Guard, Job, JobContext, JobOptions, RedisLocks, Schedule, Scheduler};

struct Options {
    redis: String,
    prefix: String,
    job: String,
    schedule: String,
    guard: String,
    ttl: Duration,
    log: String,
}

fn parse_options() -> anyhow::Result<Options> {
    let mut options = Options {
        redis: String::new(),
        prefix: "probe:".to_owned(),
        job: "probe".to_owned(),
        schedule: "@every 1s".to_owned(),
        guard: "long".to_owned(),
        ttl: Duration::from_secs(3),
        log: String::new(),
    };
    for arg in std::env::args().skip(1) {
        let Some((key, value)) = arg.split_once('=') else {
            bail!("arguments are key=value; got {arg:?}");
        };
        let value = value.to_owned();
        match key {
            "redis" => options.redis = value,
            "prefix" => options.prefix = value,
            "job" => options.job = value,
            "schedule" => options.schedule = value,
            "guard" => options.guard = value,
            "ttl" => {
                let millis: u64 = value
                    .strip_suffix("ms")
                    .map(str::parse)
                    .or_else(|| {
                        value
                            .strip_suffix('s')
                            .map(|s| s.parse().map(|s: u64| s * 1000))
                    })
                    .context("ttl needs a unit: ms or s")?
                    .context("ttl is not a number")?;
                options.ttl = Duration::from_millis(millis);
            }
            "log" => options.log = value,
            _ => bail!("unknown argument {key:?}"),
        }
    }
    if options.redis.is_empty() || options.log.is_empty() {
        bail!("redis=… and log=… are required");
    }
    Ok(options)
}

/// Appends one line per run to the log file.
struct RunLogger {
    name: String,
    log: String,
}

#[async_trait]
impl Job for RunLogger {
    fn name(&self) -> &str {
        &self.name
    }

    async fn run(&self, ctx: JobContext) -> anyhow::Result<()> {
        if !ctx.still_owner() {
            bail!("no longer the owner; not writing");
        }
        let line = format!(
            "{} {} {}\n",
            ctx.scheduled_at().timestamp_millis(),
            ctx.fencing_token(),
            std::process::id()
        );
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log))?;
        file.write_all(line.as_bytes())?;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = parse_options()?;
    let client = redis::Client::open(options.redis.as_str()).context("redis URL")?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(1)));
    let connection = ConnectionManager::new_with_config(client, config)
        .await
        .context("connecting to redis")?;
    let guard = match options.guard.as_str() {
        "long" => Guard::LongLock { ttl: options.ttl },
        "short" => Guard::ShortLock,
        "none" => Guard::None,
        other => bail!("guard must be long, short or none; got {other:?}"),
    };
    let mut scheduler = Scheduler::new(Arc::new(RedisLocks::new(connection, options.prefix)));
    scheduler.add(
        RunLogger {
            name: options.job,
            log: options.log,
        },
        JobOptions::new(Schedule::parse(&options.schedule)?)
            .guard(guard)
            .timeout(options.ttl),
    )?;
    let running = scheduler.start();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    running.stop(Duration::from_secs(5)).await;
    Ok(())
}
