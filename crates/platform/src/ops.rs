//! Operations endpoints: liveness (`/healthz`), readiness (`/readyz`: the database answers and
//! takes a write, and, in cluster mode, Redis answers) and Prometheus metrics (`/metrics`, on
//! `ops_listen` instead of the API port when that is set). Every readiness probe also sets the
//! health gauges ([`crate::health`]); [`watch_health`] repeats its read-only probes periodically
//! so they stay current.
//!
//! On the API port `/metrics` is not public ([`MetricsAccess::Guarded`]): it answers a client in
//! `metrics_allowed_networks` (default: loopback) or one presenting `metrics_token` as a bearer
//! token, and anyone else as if there were no such route (404). The client is the address
//! [`crate::client_ip`] finds — the TCP peer, or, behind a trusted proxy, the address that proxy
//! names; a request that a proxy not in `trusted_proxies` forwarded (it carries
//! `X-Forwarded-For`, `Forwarded` or `X-Real-IP`) has no known client and needs the token, so a
//! reverse proxy on the same host does not open the metrics to the internet. On `ops_listen` it
//! answers everyone who can reach that address ([`MetricsAccess::Anyone`]).
//!
//! With `debug_endpoints` on,
//! also `/debug/sleep` and `/debug/panic`, which the process tests use to observe graceful
//! shutdown and panic handling in a real binary, and `/debug/event-faults` (GET, POST a list of
//! `{group, topic, keys, failure}`), which makes event handlers fail for chosen keys.

use std::{
    collections::BTreeMap,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use axum::{
    extract::{ConnectInfo, Query, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Json, Router,
};
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

pub use crate::status::StatusBoard;

use crate::{
    client_ip::TrustedProxies,
    config::{Config, Secret},
    error::{AppError, Envelope, Reply, CODE_OK, CODE_SYSTEM},
    feature::Platform,
};

/// How long `/readyz` waits for each dependency.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest sleep `/debug/sleep` accepts.
const MAX_DEBUG_SLEEP: Duration = Duration::from_secs(60);

/// Which operations routes a listener serves beside `/healthz` and `/readyz`.
#[derive(Debug, Clone)]
pub struct Endpoints {
    /// Who may read `/metrics` there.
    pub metrics: MetricsAccess,
    /// `/debug/*` (config `debug_endpoints`).
    pub debug: bool,
}

/// Who may read `/metrics` on a listener (module docs).
#[derive(Debug, Clone)]
pub enum MetricsAccess {
    /// Not served (the API port when `ops_listen` serves it).
    Off,
    /// Everyone who reaches the listener (`ops_listen`).
    Anyone,
    /// Clients in these networks, or presenting the token (the API port).
    Guarded {
        /// `metrics_allowed_networks`.
        networks: Vec<IpNet>,
        /// `metrics_token` (empty: none).
        token: Secret,
    },
}

impl MetricsAccess {
    /// The guard of the API port, from `metrics_allowed_networks` and `metrics_token`.
    pub fn guarded(config: &Config) -> anyhow::Result<Self> {
        Ok(Self::Guarded {
            networks: config.metrics_networks()?,
            token: config.metrics_token.clone(),
        })
    }

    /// Whether a request from `peer` with `headers` may read the metrics.
    fn allows(&self, peer: IpAddr, headers: &HeaderMap, proxies: &TrustedProxies) -> bool {
        let (networks, token) = match self {
            Self::Off => return false,
            Self::Anyone => return true,
            Self::Guarded { networks, token } => (networks, token.expose()),
        };
        if let Some(presented) = crate::http::bearer_token(headers) {
            if !token.is_empty() && bool::from(presented.as_bytes().ct_eq(token.as_bytes())) {
                return true;
            }
        }
        let forwarded = ["x-forwarded-for", "forwarded", "x-real-ip"]
            .iter()
            .any(|name| headers.contains_key(*name));
        if forwarded && !proxies.contains(&peer) {
            return false;
        }
        let client = proxies.client_ip(
            peer,
            headers
                .get_all("x-forwarded-for")
                .iter()
                .filter_map(|value| value.to_str().ok()),
        );
        networks.iter().any(|net| net.contains(&client))
    }
}

/// The operations routes on `platform`'s backends.
pub fn router(endpoints: Endpoints, platform: Arc<Platform>) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz));
    if !matches!(endpoints.metrics, MetricsAccess::Off) {
        let access = Arc::new(endpoints.metrics);
        router = router.route(
            "/metrics",
            get(
                move |state: State<Arc<Platform>>, request: axum::extract::Request| {
                    let access = access.clone();
                    async move {
                        let peer = request
                            .extensions()
                            .get::<ConnectInfo<SocketAddr>>()
                            .map(|ConnectInfo(peer)| peer.ip());
                        let allowed = peer.is_some_and(|peer| {
                            access.allows(peer, request.headers(), &state.trusted_proxies)
                        });
                        if allowed {
                            render_metrics(state).await
                        } else {
                            AppError::NoRoute.into_response()
                        }
                    }
                },
            ),
        );
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

/// The OpenAPI description of the operations routes ([`crate::openapi`]); `/metrics` and
/// `/debug/*` are served only where [`Endpoints`] says.
#[derive(utoipa::OpenApi)]
#[openapi(paths(
    healthz,
    readyz,
    metrics,
    debug_sleep,
    debug_panic,
    debug_event_faults,
    debug_set_event_faults
))]
pub struct OpsApi;

/// [`OpsApi`] as a document fragment.
pub fn openapi() -> utoipa::openapi::OpenApi {
    <OpsApi as utoipa::OpenApi>::openapi()
}

/// Prometheus metrics.
// Served by a closure in `router`: described here.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    security((), ("metrics_token" = [])),
    responses(
        (status = 200, description = "Prometheus text exposition format (version 0.0.4).",
         content_type = "text/plain; version=0.0.4", body = String),
        (status = 404, description = "On the API port, to a client neither in \
          `metrics_allowed_networks` nor presenting `metrics_token` (the answer of an unknown \
          route, code 404001); not served there at all when `ops_listen` is set.",
         body = crate::openapi::ErrorEnvelope),
    )
)]
#[allow(dead_code)]
fn metrics() {}

/// Liveness: the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses((status = 200, description = "`data` is `alive`.",
               body = crate::openapi::Envelope<String>))
)]
async fn healthz() -> Reply<&'static str> {
    Reply("alive")
}

/// What `/readyz` answers: this process's mode and how its dependencies answered.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
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

/// Readiness: the database answers and takes a write, and, in cluster mode, Redis answers.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready (`msg` `ready`).",
         body = crate::openapi::Envelope<Readiness>),
        (status = 503, description = "Not ready (code 5, `msg` `not ready`): `data` says \
          which dependency.", body = crate::openapi::Envelope<Readiness>),
    )
)]
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

/// Probes the database (a read and a write) and Redis, each bounded by a 2 s timeout, and sets
/// the health gauges from what it found ([`crate::health::record`]).
pub async fn readiness(state: &Platform) -> Readiness {
    let answers = database_answers(state).await;
    let database = if answers {
        // Reachable is not enough: a full disk leaves reads working and every write failing.
        match state.db.probe_writer(PROBE_TIMEOUT).await {
            Ok(()) => "up",
            Err(err) => {
                tracing::warn!(
                    error = format!("{err:#}"),
                    "readiness: database not writable"
                );
                "not writable"
            }
        }
    } else {
        "down"
    };
    let redis = redis_status(state).await;
    record_health(state, answers, redis);
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

/// Whether the database answers a trivial query within the probe timeout (logged when not).
async fn database_answers(state: &Platform) -> bool {
    match state.db.ping(PROBE_TIMEOUT).await {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(error = format!("{err:#}"), "readiness: database down");
            false
        }
    }
}

/// `up`, `down` (logged) or `not configured` (embedded mode).
async fn redis_status(state: &Platform) -> &'static str {
    match &state.redis {
        None => "not configured",
        Some(redis) => match redis.ping(PROBE_TIMEOUT).await {
            Ok(()) => "up",
            Err(err) => {
                tracing::warn!(error = format!("{err:#}"), "readiness: redis down");
                "down"
            }
        },
    }
}

fn record_health(state: &Platform, database_answers: bool, redis: &str) {
    crate::health::record(
        database_answers,
        state.redis.as_ref().map(|_| redis == "up"),
        &state.config.data_dir,
    );
}

/// Until `stop`: every [`crate::health::PROBE_INTERVAL`], the probes of [`readiness`] that write
/// nothing (the database and Redis answer) and the health gauges ([`crate::health`]) from them,
/// so the gauges stay current when no `/readyz` request refreshes them. The writer probe stays
/// with `/readyz`: a write every few seconds would be one more change for an online database
/// move to copy and compare.
pub async fn watch_health(state: Platform, stop: tokio_util::sync::CancellationToken) {
    crate::health::describe_metrics();
    let mut ticks = tokio::time::interval(crate::health::PROBE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {},
            () = stop.cancelled() => return,
        }
        let probe = async {
            let answers = database_answers(&state).await;
            let redis = redis_status(&state).await;
            record_health(&state, answers, redis);
        };
        tokio::select! {
            () = probe => {},
            () = stop.cancelled() => return,
        }
    }
}

async fn render_metrics(State(state): State<Arc<Platform>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct SleepParams {
    /// How long to sleep, in milliseconds (at most a minute).
    ms: u64,
}

/// Sleeps, then answers `ms` (graceful-shutdown tests).
#[utoipa::path(
    get,
    path = "/debug/sleep",
    tag = "debug",
    description = "Only with `debug_endpoints` on.",
    params(SleepParams),
    responses((status = 200, description = "`data`: the `ms` asked for.",
               body = crate::openapi::Envelope<u64>))
)]
async fn debug_sleep(Query(params): Query<SleepParams>) -> Reply<u64> {
    let duration = Duration::from_millis(params.ms).min(MAX_DEBUG_SLEEP);
    tokio::time::sleep(duration).await;
    Reply(params.ms)
}

/// The faults injected into this process's event handlers.
#[utoipa::path(
    get,
    path = "/debug/event-faults",
    tag = "debug",
    description = "Only with `debug_endpoints` on.",
    responses((status = 200, description = "The faults in force.",
               body = crate::openapi::Envelope<Vec<crate::events::delivery::InjectedFault>>))
)]
async fn debug_event_faults(
    State(state): State<Arc<Platform>>,
) -> Reply<Vec<crate::events::delivery::InjectedFault>> {
    Reply(state.events.faults())
}

/// Replaces them (`[]` clears): `[{group, topic, keys, failure}]`.
#[utoipa::path(
    post,
    path = "/debug/event-faults",
    tag = "debug",
    description = "Only with `debug_endpoints` on.",
    request_body = Vec<crate::events::delivery::InjectedFault>,
    responses((status = 200, description = "`data`: how many faults are now in force.",
               body = crate::openapi::Envelope<usize>))
)]
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

/// Panics in the handler (the panic catcher answers 500, code 5).
#[utoipa::path(
    get,
    path = "/debug/panic",
    tag = "debug",
    description = "Only with `debug_endpoints` on.",
    responses((status = 500, description = "Always: the handler panics (code 5).",
               body = crate::openapi::ErrorEnvelope))
)]
async fn debug_panic() -> Reply<()> {
    panic!("debug panic requested");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::http::HeaderValue;

    use super::*;

    fn guarded(token: &str) -> MetricsAccess {
        MetricsAccess::Guarded {
            networks: vec!["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()],
            token: Secret::new(token),
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn metrics_on_the_api_port_answer_allowed_networks_and_the_token_only() {
        let none = TrustedProxies::default();
        let access = guarded("metrics-token-0123456789");
        assert!(access.allows(ip("127.0.0.1"), &headers(&[]), &none));
        assert!(access.allows(ip("::1"), &headers(&[]), &none));
        assert!(!access.allows(ip("203.0.113.5"), &headers(&[]), &none));
        let bearer = [("authorization", "Bearer metrics-token-0123456789")];
        assert!(access.allows(ip("203.0.113.5"), &headers(&bearer), &none));
        let wrong = [("authorization", "Bearer metrics-token-0123456780")];
        assert!(!access.allows(ip("203.0.113.5"), &headers(&wrong), &none));
        // Without a token configured, no bearer opens it (an empty one least of all).
        let empty = [("authorization", "Bearer ")];
        assert!(!guarded("").allows(ip("203.0.113.5"), &headers(&empty), &none));
        assert!(!MetricsAccess::Off.allows(ip("127.0.0.1"), &headers(&[]), &none));
        assert!(MetricsAccess::Anyone.allows(ip("203.0.113.5"), &headers(&[]), &none));
    }

    #[test]
    fn a_forwarded_request_is_judged_by_the_client_a_trusted_proxy_names() {
        // A reverse proxy on the same host that is not trusted: its clients look like loopback.
        let none = TrustedProxies::default();
        let access = guarded("");
        for forwarded in [
            ("x-forwarded-for", "203.0.113.5"),
            ("forwarded", "for=203.0.113.5"),
            ("x-real-ip", "203.0.113.5"),
        ] {
            assert!(
                !access.allows(ip("127.0.0.1"), &headers(&[forwarded]), &none),
                "{forwarded:?}"
            );
        }
        // Trusted: the client it names counts.
        let trusted = TrustedProxies::new(vec!["127.0.0.1/32".parse().unwrap()], 64);
        let public = [("x-forwarded-for", "203.0.113.5")];
        assert!(!access.allows(ip("127.0.0.1"), &headers(&public), &trusted));
        let local = [("x-forwarded-for", "127.0.0.9")];
        assert!(access.allows(ip("127.0.0.1"), &headers(&local), &trusted));
    }
}
