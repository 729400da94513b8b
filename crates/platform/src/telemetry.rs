//! Logs, metrics and the subscriber traces are exported through.
//!
//! Logs: `tracing` to stderr, filtered by `log` (`WEBOOK_LOG`, EnvFilter syntax; changed while
//! the process runs with [`set_log_filter`]), as text or JSON (`log_format`). The filter is the
//! log's own (a per-layer filter): the trace exporter, when `otlp_endpoint` is set, sits beside
//! it in the same subscriber with a filter of its own ([`crate::tracing_otlp`]; its sampling
//! ratio is changed with [`set_trace_sampling_ratio`]). Logging never fails or stalls the code that logs: a formatted line goes into a
//! bounded queue ([`LOG_QUEUE_LINES`]) and one thread of its own writes the queue to stderr. A
//! line that finds the queue full (the output is slower than the logging, or blocked: a pipe
//! nobody reads) or that the output refuses (a full disk, a closed pipe) is dropped and counted
//! in [`LOG_LINES_DROPPED_TOTAL`]; the server keeps answering either way. [`flush_logs`] waits
//! (bounded) for the queue to be written, at the end of the process. Metrics: one process-wide Prometheus recorder ([`install_metrics`], then
//! [`metrics_handle`]); any module records with the `metrics` macros and `GET /metrics` renders
//! the registry. This module names no feature: a feature hands its histogram buckets and metric
//! descriptions over as a [`MetricsSpec`] when the app installs the recorder.

use std::{
    io::{IsTerminal, Write},
    sync::{
        atomic::{AtomicU64, Ordering},
        OnceLock,
    },
    time::Duration,
};

use anyhow::Context;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{
    fmt::MakeWriter, layer::SubscriberExt, reload, util::SubscriberInitExt, EnvFilter, Layer,
    Registry,
};

use crate::config::{Config, LogFormat};

/// Counter: HTTP requests by `method`, `route` (the matched route pattern) and `status`.
pub const HTTP_REQUESTS_TOTAL: &str = "http_requests_total";
/// Histogram: HTTP request latency in seconds, labelled like [`HTTP_REQUESTS_TOTAL`].
pub const HTTP_REQUEST_DURATION: &str = "http_request_duration_seconds";
/// Gauge: HTTP requests being served right now.
pub const HTTP_REQUESTS_IN_FLIGHT: &str = "http_requests_in_flight";

/// Counter: log lines dropped instead of written: the queue to the log writer was full, or the
/// output (stderr) refused the write (a full disk, a closed pipe).
pub const LOG_LINES_DROPPED_TOTAL: &str = "log_lines_dropped_total";

/// Log lines queued for the writer thread at most; beyond it lines are dropped (and counted).
pub const LOG_QUEUE_LINES: usize = 8_192;

/// Latency buckets (seconds): fine below 10 ms where cached reads live, coarse above.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Job duration buckets (seconds): jobs run from milliseconds (a purge) to minutes (a computation
/// over every article). A full-name matcher takes precedence over the latency suffix matcher.
pub const JOB_DURATION_BUCKETS: &[f64] = &[
    0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Schedule lag buckets (seconds): a fire time is normally claimed within one poll (≤ 1 s);
/// beyond that, a takeover (≤ lease) or a backlog.
const SCHEDULE_LAG_BUCKETS: &[f64] = &[0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0];

/// Installs the global log subscriber, writing through the log queue (module docs), with the
/// trace exporter's layers when `otlp_endpoint` is set. A second call (tests start many apps)
/// keeps the first, and builds no exporter.
pub fn init_logging(config: &Config) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&config.log).context("invalid log (WEBOOK_LOG)")?;
    if tracing::dispatcher::has_been_set() {
        return Ok(());
    }
    let ansi = std::io::stderr().is_terminal();
    let writer = LogQueue::get().context("starting the log writer")?;
    let (filter, handle) = reload::Layer::new(filter);
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        // Our writer never fails; tracing's own report of a failed write goes to stderr with
        // `eprintln!`, which panics when stderr cannot be written.
        .log_internal_errors(false)
        .with_ansi(ansi);
    let lines: crate::tracing_otlp::BoxedLayer<Registry> = match config.log_format {
        LogFormat::Text => lines.with_filter(filter).boxed(),
        LogFormat::Json => lines.json().flatten_event(true).with_filter(filter).boxed(),
    };
    let tracing = crate::tracing_otlp::layers::<Registry>(config)?;
    let mut layers = vec![lines];
    let tracing = tracing.map(|mut tracing| {
        layers.append(&mut tracing.layers);
        tracing
    });
    let installed = tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .is_ok();
    if installed {
        let _first = LOG_FILTER.set(handle);
    }
    if let Some(tracing) = tracing {
        if installed {
            tracing.installed();
        } else {
            tracing.discarded();
        }
    }
    Ok(())
}

/// The handle of the installed log filter ([`set_log_filter`]).
static LOG_FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Replaces the log filter (EnvFilter syntax, as `log`) of the running process; an invalid
/// filter is refused and the old one stays. Traces are not affected (their filter is their own).
pub fn set_log_filter(filter: &str) -> anyhow::Result<()> {
    let parsed = EnvFilter::try_new(filter)
        .map_err(|err| anyhow::anyhow!("invalid log filter {filter:?}: {err}"))?;
    let handle = LOG_FILTER
        .get()
        .context("logging is not initialised in this process")?;
    handle
        .reload(parsed)
        .context("the log subscriber has gone away")?;
    Ok(())
}

/// Changes the share of new traces exported (0 to 1; clamped) while the process runs; traces
/// continued from a caller keep the caller's decision. No effect when tracing is off.
pub fn set_trace_sampling_ratio(ratio: f64) {
    crate::tracing_otlp::set_sampling_ratio(ratio);
}

/// Sends the spans still buffered for export and stops the exporter, waiting at most `limit`
/// (the end of the process; nothing when tracing is off).
pub async fn flush_traces(limit: Duration) {
    crate::tracing_otlp::shutdown(limit).await;
}

/// Waits up to `limit` until every log line queued so far is written (or dropped): the end of
/// the process, whose last lines would otherwise be lost with the writer thread.
pub fn flush_logs(limit: Duration) {
    let Some(queue) = LOG_QUEUE.get() else {
        return;
    };
    let (done, flushed) = flume::bounded(1);
    if queue
        .lines
        .send_timeout(Message::Flush(done), limit)
        .is_ok()
    {
        let _ = flushed.recv_timeout(limit);
    }
}

/// Log lines dropped since the process started ([`LOG_LINES_DROPPED_TOTAL`]).
pub fn log_lines_dropped() -> u64 {
    DROPPED_LINES.load(Ordering::Relaxed)
}

static LOG_QUEUE: OnceLock<LogQueue> = OnceLock::new();
static DROPPED_LINES: AtomicU64 = AtomicU64::new(0);

/// Counts one dropped line. The counter is set from the process-wide count rather than
/// incremented, so lines dropped before the recorder was installed are in it too.
fn line_dropped() {
    let dropped = DROPPED_LINES.fetch_add(1, Ordering::Relaxed) + 1;
    metrics::counter!(LOG_LINES_DROPPED_TOTAL).absolute(dropped);
}

enum Message {
    Line(Vec<u8>),
    Flush(flume::Sender<()>),
}

/// The sending end of the log queue: what the subscriber writes formatted lines to.
#[derive(Clone)]
struct LogQueue {
    lines: flume::Sender<Message>,
}

impl LogQueue {
    /// The process's queue, its writer thread started by the first call.
    fn get() -> anyhow::Result<Self> {
        if let Some(queue) = LOG_QUEUE.get() {
            return Ok(queue.clone());
        }
        let (lines, queued) = flume::bounded(LOG_QUEUE_LINES);
        // Two first callers at once each start a writer on a channel of their own; the loser's
        // channel loses its sender below, so its thread ends at once.
        std::thread::Builder::new()
            .name("log-writer".to_owned())
            .spawn(move || write_lines(&queued))
            .context("spawning the log writer thread")?;
        Ok(LOG_QUEUE.get_or_init(|| Self { lines }).clone())
    }
}

/// The writer thread: writes each queued line to stderr; a line stderr refuses is dropped and
/// counted. Stderr is locked per line only, so the rest of the process may write to it too (the
/// panic hook, the exit's last line).
fn write_lines(queued: &flume::Receiver<Message>) {
    let stderr = std::io::stderr();
    for message in queued.iter() {
        match message {
            Message::Line(line) => {
                if stderr.lock().write_all(&line).is_err() {
                    line_dropped();
                }
            }
            Message::Flush(done) => {
                let _ = stderr.lock().flush();
                let _ = done.send(());
            }
        }
    }
}

impl<'a> MakeWriter<'a> for LogQueue {
    type Writer = QueuedLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        QueuedLine {
            queue: self,
            line: Vec::new(),
        }
    }
}

/// One event's formatted text, queued whole when the subscriber is done with it.
struct QueuedLine<'a> {
    queue: &'a LogQueue,
    line: Vec<u8>,
}

impl Write for QueuedLine<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for QueuedLine<'_> {
    fn drop(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let line = std::mem::take(&mut self.line);
        if self.queue.lines.try_send(Message::Line(line)).is_err() {
            line_dropped();
        }
    }
}

/// What a feature tells the recorder about its metrics: histogram buckets by full metric name
/// (taken when the recorder is installed) and a function that describes its metrics.
#[derive(Debug, Clone, Copy)]
pub struct MetricsSpec {
    /// (metric name, bucket bounds in the metric's unit).
    pub histogram_buckets: &'static [(&'static str, &'static [f64])],
    /// Describes the feature's metrics (`metrics::describe_*!`).
    pub describe: fn(),
}

/// The process-wide Prometheus registry. The first call installs it with `features`' buckets and
/// descriptions (concurrent first callers wait for that one installation); later calls return
/// the same registry whatever they pass. The app calls it first, with every feature.
pub fn install_metrics(features: &[MetricsSpec]) -> anyhow::Result<PrometheusHandle> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| install_recorder(features).map_err(|err| format!("{err:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

/// The process-wide registry ([`install_metrics`], installed without feature specs if nothing
/// installed it yet).
pub fn metrics_handle() -> anyhow::Result<PrometheusHandle> {
    install_metrics(&[])
}

fn install_recorder(features: &[MetricsSpec]) -> anyhow::Result<PrometheusHandle> {
    let mut builder = PrometheusBuilder::new();
    for (metric, buckets) in features.iter().flat_map(|spec| spec.histogram_buckets) {
        builder = builder
            .set_buckets_for_metric(Matcher::Full((*metric).to_owned()), buckets)
            .with_context(|| format!("configuring the buckets of {metric}"))?;
    }
    let handle = builder
        .set_buckets_for_metric(
            Matcher::Suffix("duration_seconds".to_owned()),
            LATENCY_BUCKETS,
        )
        .context("configuring metric buckets")?
        .set_buckets_for_metric(
            Matcher::Full(scheduler::JOB_DURATION.to_owned()),
            JOB_DURATION_BUCKETS,
        )
        .context("configuring job duration buckets")?
        .set_buckets_for_metric(
            Matcher::Full(scheduler::sql::SQL_SCHEDULE_LAG.to_owned()),
            SCHEDULE_LAG_BUCKETS,
        )
        .context("configuring schedule lag buckets")?
        .install_recorder()
        .context("installing the metrics recorder")?;
    metrics::describe_counter!(HTTP_REQUESTS_TOTAL, "HTTP requests served");
    metrics::describe_histogram!(
        HTTP_REQUEST_DURATION,
        metrics::Unit::Seconds,
        "HTTP request latency"
    );
    metrics::describe_gauge!(HTTP_REQUESTS_IN_FLIGHT, "HTTP requests being served");
    metrics::describe_counter!(
        LOG_LINES_DROPPED_TOTAL,
        "Log lines dropped: the log queue was full or stderr refused them (a full disk)"
    );
    // Shown from the start (0 until a line is dropped), with any dropped before this point.
    metrics::counter!(LOG_LINES_DROPPED_TOTAL).absolute(log_lines_dropped());
    metrics::describe_counter!(
        crate::redis::REDIS_ROUND_TRIPS_TOTAL,
        "Requests sent to Redis on the shared connection (a pipeline or script call counts once)"
    );
    crate::rate_limit::describe_metrics();
    crate::live::describe_metrics();
    scheduler::describe_job_metrics();
    scheduler::sql::describe_metrics();
    for spec in features {
        (spec.describe)();
    }
    Ok(handle)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tracing::Level;

    use super::{init_logging, set_log_filter};
    use crate::config::Config;

    /// The one test of this crate that installs the global subscriber.
    #[test]
    fn the_log_filter_changes_while_the_process_runs() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            init_logging(&Config::default()).unwrap();
        });
        assert!(
            !crate::tracing_otlp::enabled(),
            "no endpoint: no tracing layers"
        );
        assert!(!tracing::enabled!(target: "telemetry_test", Level::DEBUG));
        set_log_filter("info,telemetry_test=debug").unwrap();
        assert!(tracing::enabled!(target: "telemetry_test", Level::DEBUG));
        assert!(!tracing::enabled!(target: "elsewhere", Level::DEBUG));
        let refused = set_log_filter("info,telemetry_test=loud").unwrap_err();
        assert!(
            refused.to_string().contains("invalid log filter"),
            "{refused}"
        );
        assert!(
            tracing::enabled!(target: "telemetry_test", Level::DEBUG),
            "a refused filter leaves the last one"
        );
        set_log_filter("info").unwrap();
        assert!(!tracing::enabled!(target: "telemetry_test", Level::DEBUG));
    }
}
