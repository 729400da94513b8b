//! Operations endpoints: liveness (`/healthz`), readiness (`/readyz`: the database answers and
//! takes a write, and, in cluster mode, Redis answers) and Prometheus metrics (`/metrics`, on
//! `ops_listen` instead of the API port when that is set). With `debug_endpoints` on,
//! also `/debug/sleep` and `/debug/panic`, which the process tests use to observe graceful
//! shutdown and panic handling in a real binary, and `/debug/event-faults` (GET, POST a list of
//! `{group, topic, keys, failure}`), which makes event handlers fail for chosen keys.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use axum::{
    extract::{Query, State},
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Json, Router,
};
use serde::{Deserialize, Serialize};

use crate::{
    error::{Envelope, Reply, CODE_OK, CODE_SYSTEM},
    feature::Platform,
};

/// How long `/readyz` waits for each dependency.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest sleep `/debug/sleep` accepts.
const MAX_DEBUG_SLEEP: Duration = Duration::from_secs(60);

/// What features report about themselves on `/readyz` (`data.details`), by name — e.g. the
/// search index being rebuilt: the process is ready and serves everything else meanwhile.
/// Cheap to clone; a short lock, never held across an await.
#[derive(Debug, Clone, Default)]
pub struct StatusBoard(Arc<std::sync::Mutex<BTreeMap<&'static str, String>>>);

impl StatusBoard {
    /// Sets what `name` reports.
    pub fn set(&self, name: &'static str, status: impl Into<String>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(name, status.into());
    }

    /// Everything reported, by name.
    pub fn snapshot(&self) -> BTreeMap<&'static str, String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Which operations routes a listener serves beside `/healthz` and `/readyz`.
#[derive(Debug, Clone, Copy)]
pub struct Endpoints {
    /// `/metrics` (off on the API port when `ops_listen` serves it).
    pub metrics: bool,
    /// `/debug/*` (config `debug_endpoints`).
    pub debug: bool,
}

/// The operations routes on `platform`'s backends.
pub fn router(endpoints: Endpoints, platform: Arc<Platform>) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    if endpoints.metrics {
        router = router.route("/metrics", get(render_metrics));
    }
    if endpoints.debug {
        router = router
            .route("/debug/sleep", get(debug_sleep))
            .route("/debug/panic", get(debug_panic))
            .route(
                "/debug/event-faults",
                get(debug_event_faults).post(debug_set_event_faults),
            );
    }
    router.with_state(platform)
}

async fn healthz() -> Reply<&'static str> {
    Reply("alive")
}

/// What `/readyz` answers: this process's mode and how its dependencies answered.
#[derive(Debug, Clone, Serialize)]
pub struct Readiness {
    /// `embedded` or `cluster`.
    pub mode: &'static str,
    /// `up`, `down` or `not writable`.
    pub database: &'static str,
    /// `up`, `down` or `not configured`.
    pub redis: &'static str,
    /// What features report ([`StatusBoard`]).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub details: BTreeMap<&'static str, String>,
}

impl Readiness {
    /// Whether the process can serve: the database up and writable, Redis not down.
    pub fn ready(&self) -> bool {
        self.database == "up" && self.redis != "down"
    }
}

async fn readyz(State(state): State<Arc<Platform>>) -> Response {
    let data = readiness(&state).await;
    let (status, code, msg) = if data.ready() {
        (StatusCode::OK, CODE_OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, CODE_SYSTEM, "not ready")
    };
    (
        status,
        Json(Envelope {
            code,
            msg,
            data: Some(data),
        }),
    )
        .into_response()
}

/// Probes the database (a read and a write) and Redis, each bounded by a 2 s timeout.
pub async fn readiness(state: &Platform) -> Readiness {
    let database = match state.db.ping(PROBE_TIMEOUT).await {
        // Reachable is not enough: a full disk leaves reads working and every write failing.
        Ok(()) => match state.db.probe_writer(PROBE_TIMEOUT).await {
            Ok(()) => "up",
            Err(err) => {
                tracing::warn!(
                    error = format!("{err:#}"),
                    "readiness: database not writable"
                );
                "not writable"
            }
        },
        Err(err) => {
            tracing::warn!(error = format!("{err:#}"), "readiness: database down");
            "down"
        }
    };
    let redis = match &state.redis {
        None => "not configured",
        Some(redis) => match redis.ping(PROBE_TIMEOUT).await {
            Ok(()) => "up",
            Err(err) => {
                tracing::warn!(error = format!("{err:#}"), "readiness: redis down");
                "down"
            }
        },
    };
    Readiness {
        mode: if state.config.is_cluster() {
            "cluster"
        } else {
            "embedded"
        },
        database,
        redis,
        details: state.status.snapshot(),
    }
}

async fn render_metrics(State(state): State<Arc<Platform>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
struct SleepParams {
    ms: u64,
}

async fn debug_sleep(Query(params): Query<SleepParams>) -> Reply<u64> {
    let duration = Duration::from_millis(params.ms).min(MAX_DEBUG_SLEEP);
    tokio::time::sleep(duration).await;
    Reply(params.ms)
}

/// The faults injected into this process's event handlers.
async fn debug_event_faults(
    State(state): State<Arc<Platform>>,
) -> Reply<Vec<crate::events::delivery::InjectedFault>> {
    Reply(state.events.faults())
}

/// Replaces them (`[]` clears): `[{group, topic, keys, failure}]`.
async fn debug_set_event_faults(
    State(state): State<Arc<Platform>>,
    crate::error::ApiJson(faults): crate::error::ApiJson<
        Vec<crate::events::delivery::InjectedFault>,
    >,
) -> Reply<usize> {
    let count = faults.len();
    tracing::warn!(count, "event handler faults injected (debug endpoint)");
    state.events.set_faults(faults);
    Reply(count)
}

async fn debug_panic() -> Reply<()> {
    panic!("debug panic requested");
}
