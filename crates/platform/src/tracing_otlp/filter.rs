//! What the OpenTelemetry bridge sees, apart from the log filter: spans at `INFO` and above
//! (request, job, consumer spans and the features' own), the `DEBUG` spans of
//! [`super::TARGET`] only under a span of the bridge's (parts of an operation never start a
//! trace of their own), and warnings and errors as span events.

use tracing::{level_filters::LevelFilter, subscriber::Interest, Level, Metadata, Subscriber};
use tracing_subscriber::{
    layer::{Context, Filter},
    registry::LookupSpan,
};

/// The bridge's filter (module docs).
#[derive(Debug, Clone, Copy)]
pub(super) struct TraceFilter;

impl TraceFilter {
    /// Whether `meta` is a part that is traced only under a span.
    fn is_part(meta: &Metadata<'_>) -> bool {
        meta.is_span() && meta.target() == super::TARGET && *meta.level() > Level::INFO
    }

    fn statically_enabled(meta: &Metadata<'_>) -> bool {
        if meta.is_span() {
            *meta.level() <= Level::INFO
        } else {
            *meta.level() <= Level::WARN
        }
    }
}

impl<S> Filter<S> for TraceFilter
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        if Self::is_part(meta) {
            return cx.lookup_current().is_some();
        }
        Self::statically_enabled(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if Self::is_part(meta) {
            Interest::sometimes()
        } else if Self::statically_enabled(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::DEBUG)
    }
}
