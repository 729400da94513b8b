//! The Redis connection of cluster mode: one auto-reconnecting multiplexed connection
//! ([`redis::aio::ConnectionManager`]) shared by every task. Commands on a broken connection fail
//! (bounded timeouts) and the manager reconnects in the background, so a Redis outage shows up
//! as errors and a failing `/readyz`, never as a hung request.
//!
//! While Redis is down, each command would still wait for the manager's reconnection attempt,
//! and a request makes several (session, caches, limits, events): seconds per request. So the
//! handles given out ([`RedisConnection`]) fail at once for [`RETRY_AFTER`] after a connection
//! failure, then let one command through to probe — the circuit of the SQL pool
//! (`db::pool`), for Redis. Every Redis use already treats an error as "Redis is away"
//! and degrades (the database answers, events go to the in-process queue, rate limits count on
//! the instance).
//!
//! Traced ([`crate::tracing_otlp`]): each command or pipeline on a handle is a client span named
//! by its command(s) — never its keys or values — under the span it runs in.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, LazyLock,
    },
    time::{Duration, Instant},
};

use anyhow::Context;
use redis::{
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value,
};

use tracing::Instrument;

use crate::{redact_url, tracing_otlp};

/// How long connecting or one command may take before it fails.
const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// How long commands fail at once after a connection failure, before one probes.
pub const RETRY_AFTER: Duration = Duration::from_millis(500);

/// Counter: requests sent to Redis on the shared connection — a command, a script call or a
/// whole pipeline each count once (what a caller waits for; `INFO commandstats` counts the
/// commands inside scripts and pipelines too).
pub const REDIS_ROUND_TRIPS_TOTAL: &str = "redis_round_trips_total";

/// A shared Redis connection, cheap to clone.
#[derive(Clone)]
pub struct Redis {
    connection: ConnectionManager,
    circuit: Arc<Circuit>,
    /// [`REDIS_ROUND_TRIPS_TOTAL`], taken at connect (after the app installed the recorder):
    /// looking it up by name on every command cost more than counting it.
    round_trips: metrics::Counter,
}

/// Whether `err` says Redis cannot be reached (rather than refusing one command).
pub fn is_connection_error(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
}

fn monotonic_millis() -> u64 {
    static START: LazyLock<Instant> = LazyLock::new(Instant::now);
    u64::try_from(START.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The fail-fast state of one connection (module docs).
#[derive(Debug, Default)]
struct Circuit {
    /// 0 while closed; else the monotonic ms (plus one) until which commands fail at once.
    open_until: AtomicU64,
    probing: AtomicBool,
}

impl Circuit {
    /// `Ok(probe?)` to go ahead, or the error of a command refused at once.
    fn admit(&self) -> Result<bool, RedisError> {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Ok(false);
        }
        if monotonic_millis() >= open_until
            && self
                .probing
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Ok(true);
        }
        Err(RedisError::from((
            ErrorKind::Io,
            "redis is unreachable (failing fast until it answers again)",
        )))
    }

    fn record<T>(&self, probe: bool, result: &Result<T, RedisError>) {
        match result {
            Err(err) if is_connection_error(err) => {
                let until = monotonic_millis()
                    + 1
                    + u64::try_from(RETRY_AFTER.as_millis()).unwrap_or(u64::MAX);
                if self.open_until.swap(until, Ordering::AcqRel) == 0 {
                    tracing::warn!(error = %err, "redis unreachable; failing fast until it answers");
                }
            }
            _ => {
                if self.open_until.load(Ordering::Acquire) != 0
                    && self.open_until.swap(0, Ordering::AcqRel) != 0
                {
                    tracing::info!("redis reachable again");
                }
            }
        }
        if probe {
            self.probing.store(false, Ordering::Release);
        }
    }
}

/// A handle for commands on the shared connection, failing fast while Redis is away (module
/// docs); cheap to clone.
#[derive(Clone)]
pub struct RedisConnection {
    inner: ConnectionManager,
    circuit: Arc<Circuit>,
    round_trips: metrics::Counter,
}

/// A probe in flight: dropped before its command ended (its future cancelled), it ends
/// without a verdict, so the next command after the pause probes again — else the circuit
/// would stay open for good.
struct Probe {
    circuit: Option<Arc<Circuit>>,
}

impl Probe {
    fn new(circuit: &Arc<Circuit>, probe: bool) -> Self {
        Self {
            circuit: probe.then(|| circuit.clone()),
        }
    }

    /// Records how the command ended (`probe` as admitted).
    fn record<T>(mut self, circuit: &Circuit, result: &Result<T, RedisError>) {
        circuit.record(self.circuit.take().is_some(), result);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Some(circuit) = self.circuit.take() {
            circuit.probing.store(false, Ordering::Release);
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let probe = match self.circuit.admit() {
            Ok(probe) => Probe::new(&self.circuit, probe),
            Err(err) => return Box::pin(async move { Err(err) }),
        };
        self.round_trips.increment(1);
        let span = tracing::debug_span!(
            target: tracing_otlp::TARGET,
            "redis",
            otel.name = %command_name(cmd),
            otel.kind = "client",
            db.system.name = "redis",
        );
        Box::pin(
            async move {
                let result = self.inner.req_packed_command(cmd).await;
                probe.record(&self.circuit, &result);
                result
            }
            .instrument(span),
        )
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let probe = match self.circuit.admit() {
            Ok(probe) => Probe::new(&self.circuit, probe),
            Err(err) => return Box::pin(async move { Err(err) }),
        };
        self.round_trips.increment(1);
        let span = tracing::debug_span!(
            target: tracing_otlp::TARGET,
            "redis",
            otel.name = %pipeline_name(pipeline),
            otel.kind = "client",
            db.system.name = "redis",
            db.operation.batch.size = pipeline.len(),
        );
        Box::pin(
            async move {
                let result = self
                    .inner
                    .req_packed_commands(pipeline, offset, count)
                    .await;
                probe.record(&self.circuit, &result);
                result
            }
            .instrument(span),
        )
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// A command's name (its first argument, upper-cased: `GET`, `EVALSHA`), for its span; never its
/// keys or values.
fn command_name(cmd: &Cmd) -> String {
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).to_ascii_uppercase(),
        _ => "COMMAND".to_owned(),
    }
}

/// `PIPELINE XADD` (or `PIPELINE GET SET`): the distinct commands of a pipeline, in order.
fn pipeline_name(pipeline: &Pipeline) -> String {
    let mut name = "PIPELINE".to_owned();
    let mut seen = Vec::new();
    for command in pipeline.cmd_iter().map(command_name) {
        if !seen.contains(&command) && seen.len() < 4 {
            name.push(' ');
            name.push_str(&command);
            seen.push(command);
        }
    }
    name
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redis")
    }
}

impl Redis {
    /// Connects to `url`; fails with a message naming the setting when Redis cannot be reached.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let context = || {
            format!(
                "cannot connect to redis_url (WEBOOK_REDIS_URL) {}",
                redact_url(url)
            )
        };
        let client = redis::Client::open(url).with_context(context)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(IO_TIMEOUT))
            .set_response_timeout(Some(IO_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let connection = ConnectionManager::new_with_config(client, config)
            .await
            .with_context(context)?;
        Ok(Self {
            connection,
            circuit: Arc::default(),
            round_trips: metrics::counter!(REDIS_ROUND_TRIPS_TOTAL),
        })
    }

    /// The underlying connection without the fail-fast gate, for components with their own
    /// handling of an unreachable Redis (the scheduler's locks).
    pub fn manager(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// Whether `other` is a clone of this handle (the same connection).
    pub fn same_connection(&self, other: &Redis) -> bool {
        Arc::ptr_eq(&self.circuit, &other.circuit)
    }

    /// A handle for issuing commands (clones share the one underlying connection).
    pub fn connection(&self) -> RedisConnection {
        RedisConnection {
            inner: self.connection.clone(),
            circuit: self.circuit.clone(),
            round_trips: self.round_trips.clone(),
        }
    }

    /// Checks that Redis answers `PING` within `timeout`.
    pub async fn ping(&self, timeout: Duration) -> anyhow::Result<()> {
        let mut connection = self.connection();
        let pong: String =
            tokio::time::timeout(timeout, redis::cmd("PING").query_async(&mut connection))
                .await
                .context("redis did not answer in time")??;
        anyhow::ensure!(pong == "PONG", "redis answered PING with {pong:?}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_dropped_before_its_end_lets_the_next_command_probe() {
        let circuit = Arc::new(Circuit::default());
        circuit.open_until.store(1, Ordering::Release);
        while monotonic_millis() < 1 {
            std::thread::yield_now();
        }
        let probe = Probe::new(&circuit, circuit.admit().unwrap());
        assert!(
            probe.circuit.is_some(),
            "the first command after the pause probes"
        );
        assert!(circuit.admit().is_err(), "only one probe at a time");
        // Its future is dropped mid-flight: nothing recorded.
        drop(probe);
        assert!(circuit.admit().unwrap(), "the next command probes");
    }
}
