//! Distributed tracing, end to end: real `webook` processes export to an OTLP/HTTP receiver
//! inside the test, which decodes the protobuf they post (`ExportTraceServiceRequest`).
//!
//! - one publish on instance A (`role = api`) and its consumption on instance B (`role =
//!   worker`), on PostgreSQL and the test Redis, is one trace: the server span of the route
//!   (continuing the client's `traceparent`, so the trace id is the client's), SQL spans under
//!   it, the outbox insert as a producer span, and on B the feed group's consumer span whose
//!   parent is that producer span, with the fan-out's SQL under it; the search feeder's consumer
//!   span continues the same trace;
//! - `otlp_sampling_ratio = 0` exports no new trace (a sampled `traceparent` from a caller is
//!   still honoured: the control that shows the exporter runs); an admin's live change of it to
//!   1 samples the next new trace, without a restart;
//! - `otlp_endpoint` unset: nothing is exported and no exporter thread runs, even with the
//!   OpenTelemetry SDK's own `OTEL_EXPORTER_OTLP_ENDPOINT` set;
//! - a job triggered by a traced request runs in that request's trace: the run's span is a
//!   child of the trigger route's server span (the trigger is kept with the job row, so any
//!   instance's worker continues it), and the `http` job's call carries the `traceparent` of
//!   the run's span, which is exported.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::{
    collections::HashMap,
    path::Path,
    sync::{Arc, Mutex},
};

use axum::{
    body::Bytes,
    http::{header, HeaderMap, StatusCode},
    routing::{any, post},
    Router,
};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{any_value::Value as AnyValue, KeyValue},
};
use platform::testing::{redis_url, wait_until, TestDb};
use prost::Message;
use serde_json::{json, Value};
use webook::schema::MIGRATIONS;

use crate::common::process::{webook, Server};

const ACCESS_SECRET: &str = "tracing-test-access-secret-0123456789";
const REFRESH_SECRET: &str = "tracing-test-refresh-secret-0123456789";
const PASSWORD: &str = "hello#world1";

/// OpenTelemetry's span kinds, as the protobuf numbers them.
const SERVER: i32 = 2;
const CLIENT: i32 = 3;
const PRODUCER: i32 = 4;
const CONSUMER: i32 = 5;

/// One span as the receiver decoded it.
#[derive(Debug, Clone)]
struct Received {
    trace_id: String,
    span_id: String,
    /// Empty for a root.
    parent: String,
    name: String,
    kind: i32,
    attributes: HashMap<String, String>,
    /// The exporting process's `service.instance.id` (`host-pid`).
    instance: String,
    service: String,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    fn exported_by(&self, pid: u32) -> bool {
        self.instance.ends_with(&format!("-{pid}"))
    }
}

/// An OTLP/HTTP receiver: `POST /v1/traces` with a protobuf body.
struct Receiver {
    endpoint: String,
    spans: Arc<Mutex<Vec<Received>>>,
    posts: Arc<Mutex<usize>>,
}

impl Receiver {
    async fn start() -> Self {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let posts = Arc::new(Mutex::new(0));
        let (kept, counted) = (spans.clone(), posts.clone());
        let app = Router::new().route(
            "/v1/traces",
            post(move |headers: HeaderMap, body: Bytes| {
                let (kept, counted) = (kept.clone(), counted.clone());
                async move {
                    assert_eq!(
                        headers[header::CONTENT_TYPE],
                        "application/x-protobuf",
                        "OTLP/HTTP protobuf"
                    );
                    let request = ExportTraceServiceRequest::decode(body.as_ref())
                        .expect("an ExportTraceServiceRequest");
                    *counted.lock().unwrap() += 1;
                    kept.lock().unwrap().extend(decode(request));
                    (
                        StatusCode::OK,
                        [(header::CONTENT_TYPE, "application/x-protobuf")],
                        Vec::<u8>::new(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            endpoint,
            spans,
            posts,
        }
    }

    fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    fn trace(&self, trace_id: &str) -> Vec<Received> {
        self.spans()
            .into_iter()
            .filter(|span| span.trace_id == trace_id)
            .collect()
    }

    fn posts(&self) -> usize {
        *self.posts.lock().unwrap()
    }
}

fn text(value: &KeyValue) -> String {
    match value.value.as_ref().and_then(|value| value.value.as_ref()) {
        Some(AnyValue::StringValue(text)) => text.clone(),
        Some(AnyValue::IntValue(number)) => number.to_string(),
        Some(AnyValue::BoolValue(flag)) => flag.to_string(),
        Some(AnyValue::DoubleValue(number)) => number.to_string(),
        other => format!("{other:?}"),
    }
}

fn decode(request: ExportTraceServiceRequest) -> Vec<Received> {
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let resource: HashMap<String, String> = resource_spans
            .resource
            .map(|resource| {
                resource
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), text(kv)))
                    .collect()
            })
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(Received {
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent: hex::encode(&span.parent_span_id),
                    name: span.name.clone(),
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv)))
                        .collect(),
                    instance: resource
                        .get("service.instance.id")
                        .cloned()
                        .unwrap_or_default(),
                    service: resource.get("service.name").cloned().unwrap_or_default(),
                });
            }
        }
    }
    spans
}

/// A random W3C `traceparent` (sampled) and its trace and span ids.
fn client_traceparent() -> (String, String, String) {
    let trace = uuid::Uuid::new_v4().simple().to_string();
    let span = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
    (format!("00-{trace}-{span}-01"), trace, span)
}

/// Whether the process `pid` has a thread named like the exporter's batch processor
/// (`OpenTelemetry.Traces.BatchProcessor`, cut to 15 bytes by the kernel).
fn has_exporter_thread(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .any(|name| name.starts_with("OpenTelemetry"))
}

/// `POST /articles/publish` on `server` with `headers`; the article id.
async fn publish(server: &Server, token: &str, title: &str, headers: &[(&str, &str)]) -> i64 {
    let mut request = reqwest::Client::new()
        .post(server.url("/articles/publish"))
        .bearer_auth(token)
        .json(&json!({"title": title, "content": format!("<p>{title}</p>")}));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer: Value = request.send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["code"], 0, "{answer}");
    answer["data"].as_i64().unwrap()
}

/// A cluster-mode instance on `database_url` with role `role`, exporting to `receiver`.
fn cluster_instance(
    dir: &Path,
    name: &str,
    database_url: &str,
    prefix: &str,
    role: &str,
    receiver: &Receiver,
) -> Server {
    let data_dir = dir.join(name);
    std::fs::create_dir_all(&data_dir).unwrap();
    let mut command = webook(&data_dir);
    command
        .env("WEBOOK_DATABASE_URL", database_url)
        .env("WEBOOK_REDIS_URL", redis_url())
        .env("WEBOOK_REDIS_PREFIX", prefix)
        .env("WEBOOK_ROLE", role)
        .env("WEBOOK_JWT_ACCESS_SECRET", ACCESS_SECRET)
        .env("WEBOOK_JWT_REFRESH_SECRET", REFRESH_SECRET)
        .env(
            "WEBOOK_LOG",
            "warn,webook::app=info,platform::tracing_otlp=info",
        )
        .env("WEBOOK_RANKING_SCHEDULE", "@yearly")
        .env("WEBOOK_OTLP_ENDPOINT", &receiver.endpoint)
        .env("WEBOOK_OTLP_SERVICE_NAME", "webook-it")
        // Export every 100 ms rather than every 5 s.
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    Server::start(command)
}

/// An embedded instance with `env`, exporting wherever `env` says.
fn embedded_instance(dir: &Path, env: &[(&str, &str)]) -> Server {
    let mut command = webook(dir);
    command
        .env(
            "WEBOOK_LOG",
            "warn,webook::app=info,platform::tracing_otlp=info",
        )
        .env("WEBOOK_RANKING_SCHEDULE", "@yearly")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    for (key, value) in env {
        command.env(key, value);
    }
    Server::start(command)
}

/// Whether `span` is `ancestor` or below it in `trace`.
fn descends_from(trace: &[Received], span: &Received, ancestor: &str) -> bool {
    let mut current = Some(span);
    for _ in 0..64 {
        let Some(at) = current else { return false };
        if at.span_id == ancestor {
            return true;
        }
        current = trace.iter().find(|parent| parent.span_id == at.parent);
    }
    false
}

#[tokio::test]
async fn a_publish_and_its_consumers_on_another_instance_are_one_trace() {
    let receiver = Receiver::start().await;
    let db = TestDb::postgres(&MIGRATIONS).await;
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("trace-{}", uuid::Uuid::new_v4().simple());
    let a = cluster_instance(dir.path(), "a", &db.url, &prefix, "api", &receiver);
    let b = cluster_instance(dir.path(), "b", &db.url, &prefix, "worker", &receiver);
    let (a_pid, b_pid) = (a.child.id(), b.child.id());
    assert!(has_exporter_thread(a_pid) && has_exporter_thread(b_pid));

    let token = a.sign_up_and_log_in("tracer@example.com", PASSWORD).await;
    let (traceparent, trace_id, client_span) = client_traceparent();
    let article = publish(&a, &token, "Traced", &[("traceparent", &traceparent)]).await;

    // The whole shape arrives: A's server span and producer, B's feed consumer with its SQL.
    let shape = || {
        let trace = receiver.trace(&trace_id);
        let producer = trace.iter().find(|span| {
            span.kind == PRODUCER
                && span.attribute("messaging.destination.name") == Some("article_published")
        });
        let feed = producer.and_then(|producer| {
            trace.iter().find(|span| {
                span.kind == CONSUMER
                    && span.parent == producer.span_id
                    && span.attribute("messaging.consumer.group.name") == Some("feed")
            })
        });
        let feed_sql = feed.is_some_and(|feed| {
            trace
                .iter()
                .any(|span| span.kind == CLIENT && descends_from(&trace, span, &feed.span_id))
        });
        // The server span ends last on A (after the answer), so it may come in a later batch.
        let server = trace.iter().any(|span| {
            span.kind == SERVER && span.attribute("http.route") == Some("/articles/publish")
        });
        (feed_sql && server).then_some(trace.clone())
    };
    wait_until(
        "the publish's trace, its server span and B's feed consumer",
        || async { shape().is_some() },
    )
    .await;
    let trace = shape().unwrap();
    let describe = || {
        trace
            .iter()
            .map(|span| {
                format!(
                    "{} {} parent={} kind={} {}",
                    span.span_id, span.name, span.parent, span.kind, span.instance
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };

    // The server span continues the client's trace: its parent is the client's span.
    let server = trace
        .iter()
        .find(|span| {
            span.kind == SERVER && span.attribute("http.route") == Some("/articles/publish")
        })
        .unwrap_or_else(|| panic!("no server span of the route:\n{}", describe()));
    assert_eq!(server.parent, client_span, "{}", describe());
    assert_eq!(server.name, "POST /articles/publish");
    assert_eq!(server.attribute("http.response.status_code"), Some("200"));
    assert!(server.exported_by(a_pid), "{}", server.instance);
    assert_eq!(server.service, "webook-it");

    // SQL statements of the publish are client spans under the server span, with their text
    // (placeholders, never values); the outbox insert is under the producer span.
    let sql_under_server: Vec<&Received> = trace
        .iter()
        .filter(|span| {
            span.kind == CLIENT
                && span.attributes.contains_key("db.query.text")
                && span.exported_by(a_pid)
                && descends_from(&trace, span, &server.span_id)
        })
        .collect();
    assert!(
        sql_under_server
            .iter()
            .any(|span| span.name.ends_with("articles")),
        "the article's write is traced:\n{}",
        describe()
    );
    assert!(
        sql_under_server
            .iter()
            .all(|span| !span.attribute("db.query.text").unwrap().contains("Traced")),
        "no bound value in a statement's text"
    );
    let producer = trace
        .iter()
        .find(|span| {
            span.kind == PRODUCER
                && span.attribute("messaging.destination.name") == Some("article_published")
        })
        .unwrap();
    assert!(producer.exported_by(a_pid));
    assert!(
        descends_from(&trace, producer, &server.span_id),
        "the producer is part of the request:\n{}",
        describe()
    );
    assert!(
        trace.iter().any(|span| span.parent == producer.span_id
            && span.name == "INSERT event_outbox"
            && span
                .attribute("db.query.text")
                .unwrap()
                .contains("traceparent")),
        "the outbox insert is under the producer:\n{}",
        describe()
    );

    // On B: the feed group's consumer span continues the producer, its work under it.
    let feed = trace
        .iter()
        .find(|span| {
            span.kind == CONSUMER && span.attribute("messaging.consumer.group.name") == Some("feed")
        })
        .unwrap();
    assert!(feed.exported_by(b_pid), "consumed on B: {}", feed.instance);
    assert_eq!(feed.parent, producer.span_id);
    assert_eq!(feed.name, "article_published process");
    assert!(
        trace.iter().any(|span| span.kind == CLIENT
            && span.exported_by(b_pid)
            && descends_from(&trace, span, &feed.span_id)),
        "the fan-out's statements are under the consumer span:\n{}",
        describe()
    );

    // The search feeder indexes the same event in the same trace.
    wait_until("the search feeder's span in the trace", || async {
        receiver.trace(&trace_id).iter().any(|span| {
            span.kind == CONSUMER
                && span.attribute("messaging.consumer.group.name") == Some("search")
                && span.parent == producer.span_id
        })
    })
    .await;

    // Every span of the trace came from A or B.
    assert!(receiver
        .trace(&trace_id)
        .iter()
        .all(|span| span.exported_by(a_pid) || span.exported_by(b_pid)));

    // A read of the article: its cache lookups are spans saying whether they hit, and its Redis
    // commands are spans named by command (never by key).
    let (traceparent, read_trace, _) = client_traceparent();
    let answer: Value = reqwest::Client::new()
        .get(a.url(&format!("/articles/pub/{article}")))
        .bearer_auth(&token)
        .header("traceparent", &traceparent)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["code"], 0, "{answer}");
    wait_until("the read's cache and Redis spans", || async {
        let trace = receiver.trace(&read_trace);
        let Some(server) = trace.iter().find(|span| span.kind == SERVER) else {
            return false;
        };
        let cache = trace.iter().any(|span| {
            span.name == "cache get"
                && span.parent == server.span_id
                && span.attribute("cache.name") == Some("article_reader_copy")
                && matches!(span.attribute("cache.hit"), Some("true" | "false"))
        });
        let redis = trace.iter().any(|span| {
            span.kind == CLIENT
                && span.attribute("db.system.name") == Some("redis")
                && matches!(span.name.as_str(), "EVALSHA" | "HGET")
                && descends_from(&trace, span, &server.span_id)
        });
        cache && redis
    })
    .await;
}

#[tokio::test]
async fn a_sampling_ratio_of_zero_exports_no_new_trace_until_it_is_raised_live() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = embedded_instance(
        dir.path(),
        &[
            ("WEBOOK_OTLP_ENDPOINT", &receiver.endpoint),
            ("WEBOOK_OTLP_SAMPLING_RATIO", "0"),
            ("WEBOOK_ADMINS", "1"),
        ],
    );
    assert!(has_exporter_thread(server.child.id()), "the exporter runs");
    assert!(
        server.startup_lines().iter().any(
            |line| line.contains("exporting traces over OTLP/HTTP") && line.contains("ratio=0")
        ),
        "{:?}",
        server.startup_lines()
    );
    let token = server
        .sign_up_and_log_in("unsampled@example.com", PASSWORD)
        .await;
    for n in 0..5 {
        publish(&server, &token, &format!("Unsampled {n}"), &[]).await;
    }
    // The control: a caller's sampled trace is continued whatever the ratio (parent-based), and
    // spans are exported in the order they ended, so once it has arrived every span of the
    // requests before it would have too.
    let (traceparent, trace_id, _) = client_traceparent();
    publish(
        &server,
        &token,
        "Sampled by its caller",
        &[("traceparent", &traceparent)],
    )
    .await;
    wait_until("the caller-sampled trace", || async {
        !receiver.trace(&trace_id).is_empty()
    })
    .await;
    let others: Vec<Received> = receiver
        .spans()
        .into_iter()
        .filter(|span| span.trace_id != trace_id)
        .collect();
    assert!(
        others.is_empty(),
        "unsampled spans were exported: {others:?}"
    );

    // The ratio is a live setting: raised to 1 by the admin (user 1), the next request without
    // a caller's trace is sampled, by the same process.
    let changed: Value = reqwest::Client::new()
        .put(server.url("/admin/settings/otlp_sampling_ratio"))
        .bearer_auth(&token)
        .json(&json!({"value": 1}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(changed["code"], 0, "{changed}");
    publish(&server, &token, "Sampled by the live ratio", &[]).await;
    wait_until("a new trace of the publish", || async {
        receiver.spans().iter().any(|span| {
            span.trace_id != trace_id
                && span.kind == SERVER
                && span.name == "POST /articles/publish"
                && span.parent.is_empty()
        })
    })
    .await;
}

#[tokio::test]
async fn without_an_endpoint_nothing_is_exported_and_no_exporter_runs() {
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    // The SDK's own variable does not turn tracing on: only otlp_endpoint does.
    let server = embedded_instance(
        dir.path(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint)],
    );
    assert!(
        !has_exporter_thread(server.child.id()),
        "no exporter thread without otlp_endpoint"
    );
    assert!(
        !server
            .startup_lines()
            .iter()
            .any(|line| line.contains("exporting traces")),
        "{:?}",
        server.startup_lines()
    );
    let token = server
        .sign_up_and_log_in("untraced@example.com", PASSWORD)
        .await;
    let (traceparent, _, _) = client_traceparent();
    publish(
        &server,
        &token,
        "Untraced",
        &[("traceparent", &traceparent)],
    )
    .await;
    // No exporter thread: nothing can be sent, now or later (its absence is the proof; the
    // receiver has nothing either).
    assert!(!has_exporter_thread(server.child.id()));
    assert_eq!(receiver.posts(), 0);
    let (status, answer) = server.get_json("/healthz").await;
    assert_eq!(status, reqwest::StatusCode::OK, "{answer}");
}

#[tokio::test]
async fn a_triggered_job_runs_in_its_triggers_trace_and_its_call_carries_it() {
    let receiver = Receiver::start().await;
    // The job's target: records the traceparent of each call.
    let calls = Arc::new(Mutex::new(Vec::<Option<String>>::new()));
    let seen = calls.clone();
    let hook = Router::new().route(
        "/hook",
        any(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(
                    headers
                        .get("traceparent")
                        .map(|value| value.to_str().unwrap().to_owned()),
                );
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, hook).await.unwrap() });

    let dir = tempfile::tempdir().unwrap();
    let server = embedded_instance(
        dir.path(),
        &[
            ("WEBOOK_OTLP_ENDPOINT", &receiver.endpoint),
            ("WEBOOK_ADMINS", "1"),
            ("WEBOOK_JOB_HTTP_ALLOWED_NETWORKS", "127.0.0.0/8"),
            ("WEBOOK_JOB_POLL_MAX", "200ms"),
        ],
    );
    let admin = server
        .sign_up_and_log_in("admin@example.com", PASSWORD)
        .await;
    let client = reqwest::Client::new();
    let created: Value = client
        .post(server.url("/jobs"))
        .bearer_auth(&admin)
        .json(
            &json!({"name": "traced-hook", "cron": "@yearly", "executor": "http",
                      "cfg": {"url": hook_url}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(created["code"], 0, "{created}");
    let id = created["data"].as_i64().unwrap();
    let (client_traceparent, client_trace, client_span) = client_traceparent();
    let triggered: Value = client
        .post(server.url(&format!("/jobs/{id}/trigger")))
        .bearer_auth(&admin)
        .header("traceparent", &client_traceparent)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(triggered["code"], 0, "{triggered}");

    wait_until("the job's call", || async {
        !calls.lock().unwrap().is_empty()
    })
    .await;
    let traceparent = calls.lock().unwrap()[0]
        .clone()
        .expect("the call carries a traceparent");
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    let (trace_id, span_id) = (parts[1].to_owned(), parts[2].to_owned());
    // The run continues the trigger's trace: the client's trace id.
    assert_eq!(trace_id, client_trace, "{traceparent}");
    // The span it names is the run's, exported with the job's name, and a child of the trigger
    // route's server span, itself the child of the client's span.
    wait_until("the run's span", || async {
        receiver.trace(&trace_id).iter().any(|span| {
            span.span_id == span_id
                && span.name == "job"
                && span.attribute("job") == Some("traced-hook")
        })
    })
    .await;
    let trace = receiver.trace(&trace_id);
    let run = trace.iter().find(|span| span.span_id == span_id).unwrap();
    let trigger = trace
        .iter()
        .find(|span| span.span_id == run.parent)
        .unwrap_or_else(|| panic!("the run's parent is exported: {trace:#?}"));
    assert_eq!(trigger.kind, SERVER, "{trigger:?}");
    assert_eq!(trigger.name, "POST /jobs/{id}/trigger", "{trigger:?}");
    assert_eq!(trigger.parent, client_span, "{trigger:?}");
}
