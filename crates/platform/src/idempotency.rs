//! `Idempotency-Key` on creating POSTs: a client (or a proxy) that retries a request whose answer
//! it never saw gets the first answer again instead of a second article.
//!
//! A route opts in with `route_layer(axum::middleware::from_fn_with_state(idempotency,
//! idempotency::layer))`, where `idempotency` is the platform's [`Idempotency`]
//! ([`crate::feature::Platform::idempotency`]). For a request carrying the header, the layer
//! (after authenticating the caller, as the handler would: [`crate::caller`]) claims `(user, key)` in table `idempotency_keys` together with a
//! hash of the method, path, query string and body, runs the handler, and stores its answer (status and body):
//! - the same key with the same request later gets that answer again, with header
//!   `Idempotent-Replayed: true`, for [`RETENTION`] (24 h, then the `purge_idempotency_keys` job
//!   deletes it);
//! - the same key with another request answers code 4;
//! - a repeat that arrives while the first is still running waits for its answer (up to
//!   [`WAIT_FOR_FIRST`], 20 s), then answers 409001 if it is still running;
//! - an answer that says "try again" (5xx, 429) is not stored: the claim is dropped, so the
//!   retry runs the request anew.
//!
//! The claim and the answer are two statements around the handler, not one transaction with the
//! handler's write: a process that dies after the handler committed and before the answer was
//! stored leaves a claim without answer, which a retry takes over once it is older than
//! [`ABANDONED_AFTER`] — and then runs the request a second time. That window (a crash between
//! two statements) is the one case where a retry can still duplicate.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use axum::{
    body::{to_bytes, Body},
    extract::{FromRequestParts, Request, State},
    http::{header, HeaderName, HeaderValue, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
};
use scheduler::{Job, JobContext};
use sha2::Digest;

use crate::{
    caller::AuthUser,
    db::{now_millis, Db, Migration},
    error::{AppError, Msg},
};

/// The key table.
pub const IDEMPOTENCY_MIGRATION: Migration = Migration::new(
    8,
    "idempotency",
    include_str!("../migrations/0008_idempotency.sql"),
);

/// The request header.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// The header marking a replayed answer.
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
/// How long an answer is kept for replay.
pub const RETENTION: Duration = Duration::from_secs(24 * 3600);
/// How long a repeat waits for the first request's answer (the request timeout, 30 s by
/// default, bounds it too).
pub const WAIT_FOR_FIRST: Duration = Duration::from_secs(20);
/// A claim without an answer older than this belongs to a request that died.
pub const ABANDONED_AFTER: Duration = Duration::from_secs(120);
/// Longest key accepted.
const MAX_KEY_LEN: usize = 255;
/// Largest answer stored (creating POSTs answer small envelopes).
const MAX_STORED_ANSWER: usize = 64 * 1024;

/// The `Idempotency-Key` request header of the creating POSTs that honour it
/// (`params(platform::idempotency::IdempotencyKey)`; this module).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // describes a header; never built
pub struct IdempotencyKey {
    /// 1–255 visible ASCII characters, per user: a repeat of the same request with the same
    /// key within 24 h replays the first answer (header `Idempotent-Replayed: true`); the same
    /// key with another request is code 4; a repeat while the first still runs waits up to
    /// 20 s, then answers 409001.
    #[param(rename = "Idempotency-Key", nullable = false)]
    idempotency_key: Option<String>,
}

/// What the claim found.
enum Claim {
    /// Ours: run the request.
    Fresh,
    /// Answered before: replay (status, body).
    Answered(u16, String),
    /// The key came with another request.
    OtherRequest,
    /// Another request with this key is running.
    Running,
}

/// What the middleware needs: the key table and the body limit.
#[derive(Debug)]
pub struct Idempotency {
    store: Store,
    body_limit: usize,
}

impl Idempotency {
    /// Keys in `db`, bodies up to `body_limit` bytes.
    pub fn new(db: Db, body_limit: usize) -> Arc<Self> {
        Arc::new(Self {
            store: Store(db),
            body_limit,
        })
    }
}

/// The middleware (module docs).
pub async fn layer(
    State(state): State<Arc<Idempotency>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(key) = request.headers().get(&IDEMPOTENCY_KEY).cloned() else {
        return next.run(request).await;
    };
    match with_key(&state, key, request, next).await {
        Ok(response) | Err(response) => response,
    }
}

async fn with_key(
    state: &Idempotency,
    key: HeaderValue,
    request: Request,
    next: Next,
) -> Result<Response, Response> {
    let key = key
        .to_str()
        .ok()
        .filter(|key| {
            !key.is_empty() && key.len() <= MAX_KEY_LEN && key.bytes().all(|b| b.is_ascii_graphic())
        })
        .ok_or_else(|| {
            AppError::InvalidInput(Msg::new(
                "Idempotency-Key: 1-255 visible ASCII characters",
                "Idempotency-Key：须为 1 到 255 个可见 ASCII 字符",
            ))
            .into_response()
        })?
        .to_owned();
    let (mut parts, body) = request.into_parts();
    let user = AuthUser::from_request_parts(&mut parts, &())
        .await
        .map_err(IntoResponse::into_response)?;
    let body = to_bytes(body, state.body_limit).await.map_err(|_| {
        AppError::BadRequest(Msg::new("request body is too large", "请求体过大")).into_response()
    })?;
    let mut hasher = sha2::Sha256::new();
    hasher.update(parts.method.as_str());
    hasher.update(b" ");
    hasher.update(parts.uri.path());
    // The query is part of the request (a path never holds a `?`, so the two cannot run into
    // each other). A request without one hashes as before the query counted, so keys claimed
    // then still replay.
    if let Some(query) = parts.uri.query() {
        hasher.update(b"?");
        hasher.update(query);
    }
    hasher.update(b"\n");
    hasher.update(&body);
    let hash = hex::encode(hasher.finalize());

    let store = &state.store;
    let deadline = tokio::time::Instant::now() + WAIT_FOR_FIRST;
    let mut pause = Duration::from_millis(20);
    loop {
        match store.claim(user.uid, &key, &hash).await.map_err(internal)? {
            Claim::Fresh => break,
            Claim::Answered(status, body) => return Ok(replay(status, body)),
            Claim::OtherRequest => {
                return Err(AppError::InvalidInput(Msg::new(
                    "Idempotency-Key: already used for another request",
                    "Idempotency-Key：已用于另一个请求",
                ))
                .into_response())
            }
            Claim::Running if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(250));
            }
            Claim::Running => {
                return Err(AppError::Conflict(Msg::new(
                    "a request with this Idempotency-Key is still running",
                    "使用该 Idempotency-Key 的请求仍在处理中",
                ))
                .into_response())
            }
        }
    }

    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    let status = response.status();
    if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
        // Not an answer to keep: the retry runs the request anew.
        if let Err(err) = store.release(user.uid, &key).await {
            tracing::error!(
                error = format!("{err:#}"),
                "cannot release an idempotency key"
            );
        }
        return Ok(response);
    }
    let (parts, body) = response.into_parts();
    let body = to_bytes(body, MAX_STORED_ANSWER).await.map_err(internal)?;
    let text = String::from_utf8_lossy(&body).into_owned();
    if let Err(err) = store.answer(user.uid, &key, status.as_u16(), &text).await {
        // The request ran and its answer goes out; a retry would not be recognised.
        tracing::error!(
            error = format!("{err:#}"),
            "cannot store an idempotent answer"
        );
    }
    Ok(Response::from_parts(parts, Body::from(body)))
}

fn internal(err: impl Into<anyhow::Error>) -> Response {
    AppError::from(err.into()).into_response()
}

fn replay(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}

/// The `idempotency_keys` table.
#[derive(Debug)]
struct Store(Db);

impl Store {
    async fn claim(&self, uid: i64, key: &str, hash: &str) -> sqlx::Result<Claim> {
        let now = now_millis();
        let inserted = sqlx::query(
            "INSERT INTO idempotency_keys (uid, idem_key, request_hash, status, body, ctime) \
             VALUES ($1, $2, $3, 0, '', $4) ON CONFLICT (uid, idem_key) DO NOTHING",
        )
        .bind(uid)
        .bind(key)
        .bind(hash)
        .bind(now)
        .execute(self.0.writer())
        .await?
        .rows_affected();
        if inserted == 1 {
            return Ok(Claim::Fresh);
        }
        let row: Option<(String, i64, String, i64)> = sqlx::query_as(
            "SELECT request_hash, status, body, ctime FROM idempotency_keys \
             WHERE uid = $1 AND idem_key = $2",
        )
        .bind(uid)
        .bind(key)
        .fetch_optional(self.0.pool())
        .await?;
        let Some((stored_hash, status, body, ctime)) = row else {
            // Released or purged between the two statements: claim again.
            return Box::pin(self.claim(uid, key, hash)).await;
        };
        if stored_hash != hash {
            return Ok(Claim::OtherRequest);
        }
        if status != 0 {
            return Ok(Claim::Answered(u16::try_from(status).unwrap_or(200), body));
        }
        let abandoned = now - i64::try_from(ABANDONED_AFTER.as_millis()).unwrap_or(i64::MAX);
        if ctime < abandoned {
            let taken = sqlx::query(
                "UPDATE idempotency_keys SET ctime = $3 \
                 WHERE uid = $1 AND idem_key = $2 AND status = 0 AND ctime = $4",
            )
            .bind(uid)
            .bind(key)
            .bind(now)
            .bind(ctime)
            .execute(self.0.writer())
            .await?
            .rows_affected();
            if taken == 1 {
                tracing::warn!(
                    uid,
                    key,
                    "taking over an idempotency key whose request died"
                );
                return Ok(Claim::Fresh);
            }
        }
        Ok(Claim::Running)
    }

    async fn answer(&self, uid: i64, key: &str, status: u16, body: &str) -> sqlx::Result<()> {
        sqlx::query(
            "UPDATE idempotency_keys SET status = $3, body = $4 WHERE uid = $1 AND idem_key = $2",
        )
        .bind(uid)
        .bind(key)
        .bind(i64::from(status))
        .bind(body)
        .execute(self.0.writer())
        .await?;
        Ok(())
    }

    async fn release(&self, uid: i64, key: &str) -> sqlx::Result<()> {
        sqlx::query("DELETE FROM idempotency_keys WHERE uid = $1 AND idem_key = $2 AND status = 0")
            .bind(uid)
            .bind(key)
            .execute(self.0.writer())
            .await?;
        Ok(())
    }
}

/// Deletes answers older than [`RETENTION`].
#[derive(Debug, Clone)]
pub struct PurgeIdempotencyKeys {
    db: Db,
}

impl PurgeIdempotencyKeys {
    /// The job's name in logs, metrics and lock keys.
    pub const NAME: &'static str = "purge_idempotency_keys";

    /// The job on `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }
}

#[async_trait]
impl Job for PurgeIdempotencyKeys {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn run(&self, _ctx: JobContext) -> anyhow::Result<()> {
        let before = now_millis() - i64::try_from(RETENTION.as_millis()).unwrap_or(i64::MAX);
        let deleted = sqlx::query("DELETE FROM idempotency_keys WHERE ctime < $1")
            .bind(before)
            .execute(self.db.writer())
            .await?
            .rows_affected();
        tracing::info!(deleted, "purged idempotency keys");
        Ok(())
    }
}
