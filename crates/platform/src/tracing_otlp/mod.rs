//! Distributed tracing: `tracing` spans exported as OpenTelemetry traces over OTLP/HTTP
//! (protobuf), and the W3C trace context carried across processes.
//!
//! **Off unless `otlp_endpoint` is set**, and then free: no exporter, no thread, no layer; the
//! spans below are `DEBUG` spans of target [`TARGET`] (which the default log filter leaves
//! disabled at their call sites) or are made only when [`enabled`] says so.
//!
//! On, [`layers`] gives the log subscriber ([`crate::telemetry::init_logging`]) two more layers,
//! each with a filter of its own (the log filter stays the log's):
//! - the `tracing-opentelemetry` bridge: every `INFO`-or-above span becomes an OpenTelemetry span
//!   (warnings and errors inside become span events), and [`TARGET`]'s `DEBUG` spans too — but
//!   only under a span (they are parts of something: a Redis command, a cache lookup, an
//!   outbox insert, an outgoing call), never as roots of traces of their own;
//! - [`sql`]: every SQL statement, from the event sqlx emits when it finishes (target
//!   `sqlx::query`: the statement text with its placeholders, never the values), becomes a
//!   client span under the span it ran in — pool statements, transactions and connections alike,
//!   on both engines (SQLite's worker thread enters the caller's span).
//!
//! Spans go through a batch processor (a thread of its own) to `{otlp_endpoint}/v1/traces`,
//! posted with the workspace's reqwest on the server's runtime ([`export`]). Sampling is
//! parent-based: a trace that arrives with a decision keeps it, a new one is sampled with
//! probability `otlp_sampling_ratio`, which [`set_sampling_ratio`] changes at run time.
//!
//! Context across processes, as W3C `traceparent` (`00-<trace>-<span>-<flags>`):
//! - HTTP in: [`continue_from_headers`] makes the server span a child of the caller's;
//! - HTTP out: [`inject`] adds the current span's `traceparent` to a request's headers;
//! - durable jobs: a trigger stores the current `traceparent` with the job, and the run it
//!   causes continues it ([`continue_from`]);
//! - events: a publish (and an outbox insert) is a producer span whose `traceparent`
//!   ([`traceparent_of`]) travels with the event — in the outbox row, the Redis Streams entry,
//!   the in-process queue — and the batch that consumes it runs in a consumer span
//!   ([`consumer_span`]) whose parent is the first traced event's producer (the others are
//!   links). So a publish on one instance and the fan-out and indexing it causes on another are
//!   one trace.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use opentelemetry::{
    propagation::{Extractor, TextMapPropagator},
    trace::{SpanContext, TraceContextExt},
    Context,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

mod export;
mod filter;
mod sql;

pub use export::{layers, shutdown, BoxedLayer, Tracing};

/// The target of the spans this module makes for parts of a traced operation (Redis commands,
/// cache lookups, publishes, outgoing calls, consumed batches). Their `DEBUG` ones are traced
/// only under another span.
pub const TARGET: &str = "platform::trace";

/// The W3C trace context header.
pub const TRACEPARENT: &str = "traceparent";

/// Whether the process exports traces (`otlp_endpoint` set and the layers installed).
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The sampling ratio of new traces, as `f64` bits ([`set_sampling_ratio`]).
static RATIO: AtomicU64 = AtomicU64::new(0x3FF0_0000_0000_0000); // 1.0

/// Whether this process exports traces: one atomic load, for code that would do work only
/// for a trace.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Changes the share of new traces sampled (0 to 1; out-of-range values are clamped, NaN is
/// 0). Traces continued from a caller keep the caller's decision.
pub fn set_sampling_ratio(ratio: f64) {
    let ratio = if ratio.is_nan() {
        0.0
    } else {
        ratio.clamp(0.0, 1.0)
    };
    RATIO.store(ratio.to_bits(), Ordering::Relaxed);
}

/// The share of new traces sampled now.
pub fn sampling_ratio() -> f64 {
    f64::from_bits(RATIO.load(Ordering::Relaxed))
}

/// The `traceparent` of `span` (`00-<trace id>-<span id>-<flags>`), if it is traced.
pub fn traceparent_of(span: &Span) -> Option<String> {
    if !enabled() || span.is_disabled() {
        return None;
    }
    let context = span.context();
    let span_ref = context.span();
    format_traceparent(span_ref.span_context())
}

/// The `traceparent` of the current span, if it is traced.
pub fn current_traceparent() -> Option<String> {
    if !enabled() {
        return None;
    }
    traceparent_of(&Span::current())
}

fn format_traceparent(context: &SpanContext) -> Option<String> {
    context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        )
    })
}

/// The remote context a `traceparent` value names (`None` when it is malformed).
pub fn parse_traceparent(traceparent: &str) -> Option<Context> {
    struct One<'a>(&'a str);
    impl Extractor for One<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            (key == TRACEPARENT).then_some(self.0)
        }
        fn keys(&self) -> Vec<&str> {
            vec![TRACEPARENT]
        }
    }
    let context = TraceContextPropagator::new().extract(&One(traceparent));
    context
        .span()
        .span_context()
        .is_valid()
        .then_some(context.clone())
}

/// Makes `span` (not yet entered) a child of the `traceparent` in `headers`, if there is a valid
/// one: the incoming side of HTTP.
pub fn continue_from_headers(span: &Span, headers: &axum::http::HeaderMap) {
    if !enabled() {
        return;
    }
    let Some(parent) = headers
        .get(TRACEPARENT)
        .and_then(|value| value.to_str().ok())
        .and_then(parse_traceparent)
    else {
        return;
    };
    let _ = span.set_parent(parent);
}

/// Makes `span` (not yet entered) a child of the span `traceparent` names, if it is valid: how
/// work started later from a stored context continues its trace (a durable job run its
/// trigger's request asked for: `scheduler::sql::WorkerOptions::continue_trace`).
pub fn continue_from(span: &Span, traceparent: &str) {
    if !enabled() {
        return;
    }
    if let Some(parent) = parse_traceparent(traceparent) {
        let _ = span.set_parent(parent);
    }
}

/// Adds the `traceparent` of `span` to `headers` (an outgoing request), if it is traced.
pub fn inject(span: &Span, headers: &mut axum::http::HeaderMap) {
    if let Some(value) =
        traceparent_of(span).and_then(|text| axum::http::HeaderValue::from_str(&text).ok())
    {
        headers.insert(TRACEPARENT, value);
    }
}

/// [`inject`] with the current span (a hook for clients that make their requests themselves,
/// such as the durable scheduler's http executor).
pub fn inject_current(headers: &mut axum::http::HeaderMap) {
    if enabled() {
        inject(&Span::current(), headers);
    }
}

/// The span of an outgoing HTTP call to `host`: a client span under the current one (none
/// outside a span, or when tracing is off). Never given the URL: queries may hold secrets.
pub fn http_client_span(method: &str, host: &str) -> Span {
    tracing::debug_span!(
        target: TARGET,
        "http.client",
        otel.name = method,
        otel.kind = "client",
        http.request.method = method,
        server.address = host,
        http.response.status_code = tracing::field::Empty,
    )
}

/// The producer span of `count` events of `topic` recorded or published now (none outside a
/// span, or when tracing is off). The events carry its [`traceparent_of`].
pub fn producer_span(topic: &str, count: usize) -> Span {
    tracing::debug_span!(
        target: TARGET,
        "publish",
        otel.name = %format_args!("{topic} publish"),
        otel.kind = "producer",
        messaging.operation.type = "send",
        messaging.destination.name = topic,
        messaging.batch.message_count = count,
    )
}

/// Most links a consumer span keeps to the producers of its batch's other events.
const MAX_LINKS: usize = 32;

/// The consumer span of a batch of `count` events of `topic` handed to `group`, whose events
/// carry `traceparents`: its parent is the first sampled one's producer (the batch follows a
/// sampled publish, whatever unsampled ones came before it), the others are links. Only when
/// tracing is on (else none, and no work).
pub fn consumer_span<'a>(
    topic: &str,
    group: &str,
    count: usize,
    traceparents: impl IntoIterator<Item = &'a str>,
) -> Span {
    if !enabled() {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: TARGET,
        "consume",
        otel.name = %format_args!("{topic} process"),
        otel.kind = "consumer",
        messaging.operation.type = "process",
        messaging.destination.name = topic,
        messaging.consumer.group.name = group,
        messaging.batch.message_count = count,
    );
    let contexts = traceparents
        .into_iter()
        .filter_map(parse_traceparent)
        .map(|context| context.span().span_context().clone());
    let (parent, links) = parent_and_links(contexts);
    if let Some(parent) = parent {
        let _ = span.set_parent(Context::new().with_remote_span_context(parent));
    }
    for link in links {
        span.add_link(link);
    }
    span
}

/// The parent of a consumed batch among its events' producers — the first sampled one, else
/// the first — and the others as links (distinct, at most [`MAX_LINKS`]).
fn parent_and_links(
    contexts: impl IntoIterator<Item = SpanContext>,
) -> (Option<SpanContext>, Vec<SpanContext>) {
    let mut all: Vec<SpanContext> = Vec::new();
    for context in contexts {
        if !all.contains(&context) {
            all.push(context);
        }
    }
    let chosen = all
        .iter()
        .position(SpanContext::is_sampled)
        .or((!all.is_empty()).then_some(0));
    let Some(chosen) = chosen else {
        return (None, Vec::new());
    };
    let parent = all.remove(chosen);
    all.truncate(MAX_LINKS);
    (Some(parent), all)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use opentelemetry::trace::TraceContextExt;

    use super::{parse_traceparent, set_sampling_ratio};

    #[test]
    fn traceparents_parse_and_malformed_ones_do_not() {
        let context =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        let span = context.span();
        let span_context = span.span_context();
        assert_eq!(
            span_context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(span_context.span_id().to_string(), "00f067aa0ba902b7");
        assert!(span_context.is_sampled() && span_context.is_remote());
        assert!(
            parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
        assert!(parse_traceparent("garbage").is_none());
    }

    #[test]
    fn a_batch_follows_its_first_sampled_producer_and_links_the_others_once() {
        let context = |text: &str| {
            parse_traceparent(text)
                .unwrap()
                .span()
                .span_context()
                .clone()
        };
        let unsampled = context("00-11111111111111111111111111111111-1111111111111111-00");
        let sampled = context("00-22222222222222222222222222222222-2222222222222222-01");
        let other = context("00-33333333333333333333333333333333-3333333333333333-01");
        let (parent, links) = super::parent_and_links([
            unsampled.clone(),
            sampled.clone(),
            unsampled.clone(),
            other.clone(),
        ]);
        assert_eq!(parent, Some(sampled));
        assert_eq!(links, vec![unsampled.clone(), other]);
        // None sampled: the first, so the decision "not sampled" is kept.
        let (parent, links) = super::parent_and_links([unsampled.clone()]);
        assert_eq!(parent, Some(unsampled));
        assert!(links.is_empty());
        assert_eq!(super::parent_and_links([]), (None, Vec::new()));
        // Links are bounded.
        let many = (0..100).map(|n| context(&format!("00-{:032x}-{:016x}-01", n + 1, n + 1)));
        let (_, links) = super::parent_and_links(many);
        assert_eq!(links.len(), super::MAX_LINKS);
    }

    #[test]
    fn the_ratio_is_clamped() {
        set_sampling_ratio(7.0);
        assert_eq!(super::sampling_ratio(), 1.0);
        set_sampling_ratio(f64::NAN);
        assert_eq!(super::sampling_ratio(), 0.0);
        set_sampling_ratio(0.25);
        assert_eq!(super::sampling_ratio(), 0.25);
        set_sampling_ratio(1.0);
    }
}
