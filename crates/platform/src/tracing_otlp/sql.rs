//! SQL statements as client spans. sqlx reports every statement it finishes as an event of
//! target [`SQLX_TARGET`] (its summary, the statement text with its placeholders — never the
//! bound values —, rows, elapsed time), from inside the span the statement ran in: the caller's
//! future on PostgreSQL, SQLite's worker thread entering the caller's span. That is the one
//! place every statement passes (pools, transactions, connections, both engines), so this layer
//! turns each such event into a span of its own, ended now and started `elapsed` before, under
//! the OpenTelemetry context the event ran in. Statements outside any traced span (the relay's
//! polls, background loops) make no span: they would be traces of one statement each.

use std::{
    fmt,
    time::{Duration, SystemTime},
};

use opentelemetry::{
    trace::{Span as _, SpanKind, TraceContextExt, Tracer as _},
    KeyValue,
};
use opentelemetry_sdk::trace::SdkTracer;
use tracing::{field::Field, Event, Subscriber};
use tracing_subscriber::{layer::Context, registry::LookupSpan, Layer};

/// The target of sqlx's per-statement events.
pub(super) const SQLX_TARGET: &str = "sqlx::query";

/// Longest statement text kept on a span (multi-row inserts repeat their placeholders).
const MAX_STATEMENT: usize = 2048;

/// The layer (module docs).
pub(super) struct SqlSpans {
    tracer: SdkTracer,
}

impl SqlSpans {
    pub(super) fn new(tracer: SdkTracer) -> Self {
        Self { tracer }
    }
}

impl<S> Layer<S> for SqlSpans
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_event(&self, event: &Event<'_>, _cx: Context<'_, S>) {
        // The context of the span the statement ran in (the bridge activates it on entry).
        let parent = opentelemetry::Context::current();
        if !parent.span().span_context().is_sampled() {
            return;
        }
        let mut fields = Statement::default();
        event.record(&mut fields);
        let Some(text) = fields.text() else { return };
        let end = SystemTime::now();
        let start = end
            .checked_sub(Duration::from_secs_f64(fields.elapsed_secs.max(0.0)))
            .unwrap_or(end);
        let mut attributes = vec![
            KeyValue::new("db.query.text", clip(&text)),
            KeyValue::new("db.operation.name", operation(&text)),
        ];
        if let Some(rows) = fields.rows_returned.filter(|rows| *rows > 0) {
            attributes.push(KeyValue::new("db.response.returned_rows", rows));
        }
        if let Some(rows) = fields.rows_affected.filter(|rows| *rows > 0) {
            attributes.push(KeyValue::new("db.response.affected_rows", rows));
        }
        let mut span = self
            .tracer
            .span_builder(span_name(&text))
            .with_kind(SpanKind::Client)
            .with_start_time(start)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        span.end_with_timestamp(end);
    }
}

/// What one sqlx event says about its statement.
#[derive(Default)]
struct Statement {
    summary: Option<String>,
    statement: Option<String>,
    rows_returned: Option<i64>,
    rows_affected: Option<i64>,
    elapsed_secs: f64,
}

impl Statement {
    /// The statement's text: sqlx gives the whole text in `db.statement` only when it is longer
    /// than the summary (its first four words), else just the summary.
    fn text(&self) -> Option<String> {
        let whole = self
            .statement
            .as_deref()
            .map(str::trim)
            .filter(|text| !text.is_empty());
        whole
            .or(self.summary.as_deref().map(str::trim))
            .filter(|text| !text.is_empty())
            .map(str::to_owned)
    }
}

impl tracing::field::Visit for Statement {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => self.summary = Some(value.to_owned()),
            "db.statement" => self.statement = Some(value.to_owned()),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let value = i64::try_from(value).unwrap_or(i64::MAX);
        match field.name() {
            "rows_returned" => self.rows_returned = Some(value),
            "rows_affected" => self.rows_affected = Some(value),
            _ => {}
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "elapsed_secs" {
            self.elapsed_secs = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "summary" => self.summary = Some(format!("{value:?}").trim_matches('"').to_owned()),
            "db.statement" => {
                self.statement = Some(format!("{value:?}").trim_matches('"').to_owned());
            }
            _ => {}
        }
    }
}

fn clip(text: &str) -> String {
    if text.len() <= MAX_STATEMENT {
        return text.to_owned();
    }
    let mut end = MAX_STATEMENT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} …", &text[..end])
}

/// The statement's first keyword, upper-cased (`SELECT`, `INSERT`, `BEGIN`, …).
fn operation(text: &str) -> String {
    text.split_whitespace()
        .next()
        .unwrap_or("SQL")
        .trim_matches(|c: char| !c.is_ascii_alphabetic())
        .to_ascii_uppercase()
}

/// `OPERATION table` when the statement names its table plainly (`SELECT … FROM t`,
/// `INSERT INTO t`, `UPDATE t`, `DELETE FROM t`), else the operation alone.
fn span_name(text: &str) -> String {
    let operation = operation(text);
    let words: Vec<&str> = text.split_whitespace().collect();
    let after = |keyword: &str| {
        words
            .iter()
            .position(|word| word.eq_ignore_ascii_case(keyword))
            .and_then(|at| words.get(at + 1))
    };
    let table = match operation.as_str() {
        "INSERT" => after("INTO"),
        "UPDATE" => words.get(1),
        "SELECT" | "DELETE" | "WITH" => after("FROM"),
        _ => None,
    };
    match table
        .map(|table| table.trim_matches(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|table| !table.is_empty() && !table.eq_ignore_ascii_case("select"))
    {
        Some(table) => format!("{operation} {table}"),
        None => operation,
    }
}

#[cfg(test)]
mod tests {
    use super::{clip, span_name, MAX_STATEMENT};

    #[test]
    fn spans_are_named_by_operation_and_table() {
        assert_eq!(
            span_name("SELECT id, topic FROM event_outbox ORDER BY id LIMIT $1"),
            "SELECT event_outbox"
        );
        assert_eq!(
            span_name("INSERT INTO event_outbox (topic) VALUES ($1)"),
            "INSERT event_outbox"
        );
        assert_eq!(span_name("update articles SET x = 1"), "UPDATE articles");
        assert_eq!(
            span_name("DELETE FROM event_outbox WHERE id IN ($1)"),
            "DELETE event_outbox"
        );
        assert_eq!(span_name("SELECT (SELECT 1)"), "SELECT");
        assert_eq!(span_name("BEGIN"), "BEGIN");
        assert_eq!(span_name("SELECT pg_advisory_xact_lock($1)"), "SELECT");
    }

    #[test]
    fn long_statements_are_clipped_on_a_character() {
        let long = "é".repeat(MAX_STATEMENT);
        let clipped = clip(&long);
        assert!(clipped.len() <= MAX_STATEMENT + 4, "{}", clipped.len());
        assert!(clipped.ends_with(" …"));
    }
}
