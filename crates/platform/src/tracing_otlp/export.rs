//! The export pipeline, built only when `otlp_endpoint` is set: a tracer provider with a
//! parent-based sampler reading the live ratio, a batch processor, and the OTLP/HTTP protobuf
//! exporter posting to `{otlp_endpoint}/v1/traces` through reqwest on the server's runtime;
//! and the subscriber layers that feed it ([`layers`]).
//!
//! The batch processor runs on a thread of its own and drives each export with a blocking
//! executor; reqwest needs tokio, so [`RuntimeClient`] hands each POST to the runtime the
//! pipeline was built on and waits for its answer. An export that fails is dropped after the
//! exporter's retries (telemetry never holds the server up); the spans it carried are lost.

use std::{sync::OnceLock, time::Duration};

use anyhow::Context as _;
use opentelemetry::{
    trace::{Link, SpanKind, TraceId, TracerProvider as _},
    KeyValue,
};
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{
    trace::{Sampler, SamplingResult, SdkTracerProvider, ShouldSample},
    Resource,
};
use tracing::Subscriber;
use tracing_subscriber::{registry::LookupSpan, Layer};

use super::{filter::TraceFilter, sampling_ratio, sql::SqlSpans, ENABLED};
use crate::config::Config;

/// How long one export may take (connect, send, answer) before it fails.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The provider of this process, once its layers are installed: flushed and stopped by
/// [`shutdown`].
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// A subscriber layer, boxed (the log subscriber holds its layers in one list).
pub type BoxedLayer<S> = Box<dyn Layer<S> + Send + Sync + 'static>;

/// What [`layers`] made: the layers to install, and what to do once the subscriber is (or is
/// not) installed.
pub struct Tracing<S> {
    /// The bridge and the SQL layer, each with its filter.
    pub layers: Vec<BoxedLayer<S>>,
    provider: SdkTracerProvider,
    /// What the start-up line says: where, at which ratio, as which service.
    announce: (String, f64, String),
}

impl<S> Tracing<S> {
    /// The subscriber holding the layers is the process's: tracing is on from now.
    pub fn installed(self) {
        let _first = PROVIDER.set(self.provider);
        ENABLED.store(true, std::sync::atomic::Ordering::Release);
        let (endpoint, ratio, service) = self.announce;
        tracing::info!(endpoint, ratio, service, "exporting traces over OTLP/HTTP");
    }

    /// The subscriber could not be installed (another one is): the exporter is stopped.
    pub fn discarded(self) {
        let _ = self.provider.shutdown();
    }
}

/// The tracing layers for `config`: `None` when `otlp_endpoint` is unset (nothing is built: no
/// exporter, no thread). Must run on the tokio runtime the exports are to use.
pub fn layers<S>(config: &Config) -> anyhow::Result<Option<Tracing<S>>>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let Some(endpoint) = config.otlp_endpoint.as_deref() else {
        return Ok(None);
    };
    super::set_sampling_ratio(config.otlp_sampling_ratio);
    let runtime = tokio::runtime::Handle::try_current()
        .context("exporting traces needs the async runtime")?;
    let client = reqwest::Client::builder()
        .timeout(EXPORT_TIMEOUT)
        .build()
        .context("building the trace exporter's HTTP client")?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url(endpoint))
        .with_timeout(EXPORT_TIMEOUT)
        .with_http_client(RuntimeClient { client, runtime })
        .build()
        .context("invalid otlp_endpoint (WEBOOK_OTLP_ENDPOINT)")?;
    let resource = Resource::builder()
        .with_service_name(config.otlp_service_name.clone())
        .with_attribute(KeyValue::new("service.instance.id", instance_id()))
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(LiveRatio)))
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("webook");
    let bridge = tracing_opentelemetry::layer()
        .with_tracer(tracer.clone())
        .with_threads(false)
        .with_location(false)
        .with_filter(TraceFilter);
    let sql = SqlSpans::new(tracer).with_filter(
        tracing_subscriber::filter::filter_fn(|meta| {
            meta.is_event() && meta.target() == super::sql::SQLX_TARGET
        })
        .with_max_level_hint(tracing::level_filters::LevelFilter::DEBUG),
    );
    Ok(Some(Tracing {
        layers: vec![Box::new(bridge), Box::new(sql)],
        provider,
        announce: (
            crate::redact_url(&traces_url(endpoint)),
            config.otlp_sampling_ratio,
            config.otlp_service_name.clone(),
        ),
    }))
}

/// `{endpoint}/v1/traces`, the OTLP/HTTP path of traces under a collector's base URL.
fn traces_url(endpoint: &str) -> String {
    format!("{}/v1/traces", endpoint.trim_end_matches('/'))
}

/// `host-pid`: which process a span comes from (the resource's `service.instance.id`).
fn instance_id() -> String {
    format!("{}-{}", crate::host_name(), std::process::id())
}

/// Sends what is still buffered and stops the exporter, waiting at most `limit`: the end of
/// the process. Nothing to do when tracing is off.
pub async fn shutdown(limit: Duration) {
    let Some(provider) = PROVIDER.get().cloned() else {
        return;
    };
    let stopped = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(limit));
    if let Ok(Ok(Err(err))) =
        tokio::time::timeout(limit + Duration::from_millis(100), stopped).await
    {
        tracing::warn!(error = %err, "could not send the last traces");
    }
}

/// The sampler of new traces: a trace-id ratio read from [`sampling_ratio`] at each decision,
/// so it changes at run time ([`super::set_sampling_ratio`]).
#[derive(Debug, Clone)]
struct LiveRatio;

impl ShouldSample for LiveRatio {
    fn should_sample(
        &self,
        parent_context: Option<&opentelemetry::Context>,
        trace_id: TraceId,
        name: &str,
        span_kind: &SpanKind,
        attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        Sampler::TraceIdRatioBased(sampling_ratio()).should_sample(
            parent_context,
            trace_id,
            name,
            span_kind,
            attributes,
            links,
        )
    }
}

/// The exporter's HTTP client: reqwest, run on the server's runtime (module docs).
#[derive(Debug)]
struct RuntimeClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for RuntimeClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let exchange = async move {
            let request = reqwest::Request::try_from(request)?;
            let response = client.execute(request).await?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            let mut answer = Response::new(body);
            *answer.status_mut() = status;
            *answer.headers_mut() = headers;
            Ok::<_, HttpError>(answer)
        };
        self.runtime.spawn(exchange).await?
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn the_traces_path_follows_the_base_url() {
        assert_eq!(
            traces_url("http://collector:4318"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/"),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/base"),
            "https://otel.example/base/v1/traces"
        );
    }
}
