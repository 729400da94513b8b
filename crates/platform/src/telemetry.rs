//! Logs and metrics.
//!
//! Logs: `tracing` to stderr, filtered by `log` (`WEBOOK_LOG`, EnvFilter syntax), as text or JSON
//! (`log_format`). Metrics: one process-wide Prometheus recorder ([`install_metrics`], then
//! [`metrics_handle`]); any module records with the `metrics` macros and `GET /metrics` renders
//! the registry. This module names no feature: a feature hands its histogram buckets and metric
//! descriptions over as a [`MetricsSpec`] when the app installs the recorder.

use std::{io::IsTerminal, sync::OnceLock};

use anyhow::Context;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// Counter: HTTP requests by `method`, `route` (the matched route pattern) and `status`.
pub const HTTP_REQUESTS_TOTAL: &str = "http_requests_total";
/// Histogram: HTTP request latency in seconds, labelled like [`HTTP_REQUESTS_TOTAL`].
pub const HTTP_REQUEST_DURATION: &str = "http_request_duration_seconds";
/// Gauge: HTTP requests being served right now.
pub const HTTP_REQUESTS_IN_FLIGHT: &str = "http_requests_in_flight";

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

/// Installs the global log subscriber. A second call (tests start many apps) keeps the first.
pub fn init_logging(config: &Config) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(&config.log).context("invalid log (WEBOOK_LOG)")?;
    let ansi = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _already_installed = match config.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Ok(())
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
        crate::redis::REDIS_ROUND_TRIPS_TOTAL,
        "Requests sent to Redis on the shared connection (a pipeline or script call counts once)"
    );
    crate::rate_limit::describe_metrics();
    scheduler::describe_job_metrics();
    scheduler::sql::describe_metrics();
    for spec in features {
        (spec.describe)();
    }
    Ok(handle)
}
