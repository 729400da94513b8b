//! `/jobs…` routes (API.md → Jobs (admin)): thin handlers over [`SqlJobStore`] and
//! [`JobSpec`]. Every route takes an [`Admin`]: a logged-in caller (401 otherwise) with admin
//! rights (403002 otherwise; see [`crate::auth::admin`]).
//!
//! Store outcomes map to the envelope: invalid input (schedule, time zone, name, policies,
//! timeout, executor, `cfg`) and triggering a stopped job answer code 4 with the store's or the
//! parser's message; a taken name answers 409001; an unknown id 404001.

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use platform::caller::{Admin, AdminArea};
use platform::idempotency::Idempotency;
use std::sync::Arc;

use scheduler::sql::{Executors, JobRow, JobStatus, RunRow, SqlJobStore, StoreError};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::jobs::service::{self, JobEdit, JobSpec};
use platform::{
    error::{ApiJson, ApiPath, ApiQuery, ApiResult, AppError, Msg, Reply},
    openapi::{Envelope, Null},
};

/// Runs listed when `limit` is not given.
const DEFAULT_RUNS_LIMIT: i64 = 50;
/// Most runs one request may list.
const MAX_RUNS_LIMIT: i64 = 500;

/// What the `/jobs` handlers reach.
pub struct JobRoutes {
    /// The durable jobs.
    pub job_store: SqlJobStore,
    /// The executors jobs may name (creation is checked against them).
    pub job_executors: Executors,
    /// How long a running owner's claim lasts past its last heartbeat (config `job_lease`).
    pub lease: std::time::Duration,
}

/// What these routes guard: Durable jobs (`/jobs…`); a non-admin's refusal names it.
const ADMIN_AREA: AdminArea =
    AdminArea::new("only admins may manage jobs", "只有管理员可以管理任务");

/// The `/jobs` routes; creating a job honours `Idempotency-Key`.
pub fn router(routes: JobRoutes, idempotency: Arc<Idempotency>) -> Router {
    let idempotent =
        axum::middleware::from_fn_with_state(idempotency, platform::idempotency::layer);
    Router::new()
        .route(
            "/jobs",
            get(list).merge(post(create).route_layer(idempotent)),
        )
        .route("/jobs/{id}/stop", post(stop))
        .route("/jobs/{id}/resume", post(resume))
        .route("/jobs/{id}/trigger", post(trigger))
        .route("/jobs/{id}/edit", post(edit))
        .route("/jobs/{id}/runs", get(runs))
        .with_state(Arc::new(routes))
        .layer(axum::Extension(ADMIN_AREA))
}

const NO_SUCH_JOB: AppError = AppError::NotFound(Msg::new("no such job", "任务不存在"));

/// The envelope of a store outcome (see the module docs).
fn store_error(err: StoreError) -> AppError {
    match err {
        StoreError::NotFound => NO_SUCH_JOB,
        StoreError::Duplicate(_) => AppError::Conflict(Msg::new(
            "a job with this name already exists",
            "同名任务已存在",
        )),
        StoreError::Invalid(_) | StoreError::Paused(_) => {
            AppError::InvalidInput(Msg::owned(err.to_string(), format!("任务参数无效：{err}")))
        }
        StoreError::Database(err) => err.into(),
    }
}

/// A durable job.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct JobView {
    id: i64,
    name: String,
    cron: String,
    timezone: String,
    executor: String,
    status: &'static str,
    /// `null` when the schedule never fires again.
    next_time: Option<i64>,
    owner: String,
    utime: i64,
    /// The executor's configuration: the object (its text when it is not JSON).
    cfg: serde_json::Value,
    misfire: &'static str,
    timeout_ms: i64,
    /// Fire time of the current or last claim (ms).
    scheduled_at: i64,
    /// While running: when the owner's claim lapses unless it heartbeats (ms); else `null`.
    lease_until: Option<i64>,
}

impl JobView {
    fn new(job: JobRow, lease: std::time::Duration) -> Self {
        let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
        let running = job.status == JobStatus::Running;
        Self {
            cfg: serde_json::from_str(&job.cfg)
                .unwrap_or_else(|_| serde_json::Value::String(job.cfg.clone())),
            misfire: job.misfire.as_str(),
            timeout_ms: job.timeout_ms,
            scheduled_at: job.scheduled_at,
            lease_until: running.then(|| job.utime.saturating_add(lease_ms)),
            id: job.id,
            name: job.name,
            cron: job.cron,
            timezone: job.timezone,
            executor: job.executor,
            status: job.status.as_str(),
            next_time: service::next_time(job.next_time),
            owner: job.owner,
            utime: job.utime,
        }
    }
}

/// Every durable job **(admins)**.
#[utoipa::path(
    get,
    path = "/jobs",
    security(("access_token" = [])),
    responses((status = 200, description = "The jobs; 403002 for anyone but an admin.",
               body = Envelope<Vec<JobView>>))
)]
async fn list(_admin: Admin, State(state): State<Arc<JobRoutes>>) -> ApiResult<Vec<JobView>> {
    let jobs = state.job_store.list().await?;
    Ok(Reply(
        jobs.into_iter()
            .map(|job| JobView::new(job, state.lease))
            .collect(),
    ))
}

/// A new job (an unknown field is HTTP 400).
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = NewJob)]
struct CreateRequest {
    /// 1–64 of `A-Za-z0-9._-`, unique.
    name: String,
    /// Cron with seconds, `@every …` or a descriptor.
    cron: String,
    /// `http`, or another registered executor.
    executor: String,
    /// A JSON object, or a string holding one.
    #[serde(default)]
    cfg: Option<serde_json::Value>,
    /// IANA time zone (default `UTC`).
    timezone: Option<String>,
    /// `fire_once` (the default), `skip` or `catch_up`.
    misfire: Option<String>,
    /// `forbid` (the default and only policy).
    overlap: Option<String>,
    /// The run timeout, at least 1000 (default 600000).
    timeout_ms: Option<i64>,
}

/// Creates a durable job **(admins)**.
#[utoipa::path(
    post,
    path = "/jobs",
    security(("access_token" = [])),
    params(platform::idempotency::IdempotencyKey),
    request_body = CreateRequest,
    responses((status = 200, description = "`data`: the job's id. Code 4 names an invalid \
               field; 409001: the name is taken.", body = Envelope<i64>))
)]
async fn create(
    _admin: Admin,
    State(state): State<Arc<JobRoutes>>,
    ApiJson(request): ApiJson<CreateRequest>,
) -> ApiResult<i64> {
    let cfg = cfg_text(request.cfg)?;
    let spec = JobSpec {
        name: request.name,
        cron: request.cron,
        executor: request.executor,
        cfg,
        timezone: request.timezone,
        misfire: request.misfire,
        overlap: request.overlap,
        timeout_ms: request.timeout_ms,
    };
    let id = service::create(&state.job_store, &state.job_executors, &spec)
        .await
        .map_err(store_error)?;
    Ok(Reply(id))
}

/// What to change in a job (an unknown field is HTTP 400).
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schema(as = JobChange)]
struct EditRequest {
    cron: Option<String>,
    timezone: Option<String>,
    /// A JSON object, or a string holding one.
    #[serde(default)]
    cfg: Option<serde_json::Value>,
    misfire: Option<String>,
    timeout_ms: Option<i64>,
}

/// `POST /jobs/:id/edit` **(webook)**: changes a job's schedule, time zone, `cfg`, misfire
/// policy or timeout; refused (code 4) while it runs.
#[utoipa::path(
    post,
    path = "/jobs/{id}/edit",
    security(("access_token" = [])),
    params(("id" = i64, Path, description = "The job.")),
    request_body = EditRequest,
    responses((status = 200, description = "Changed, checked like a new job (code 4 naming \
               the problem, also while it runs); 404001: no such job.", body = Envelope<Null>))
)]
async fn edit(
    _admin: Admin,
    State(state): State<Arc<JobRoutes>>,
    ApiPath(id): ApiPath<i64>,
    ApiJson(request): ApiJson<EditRequest>,
) -> ApiResult<()> {
    let edit = JobEdit {
        cron: request.cron,
        timezone: request.timezone,
        cfg: cfg_text(request.cfg)?,
        misfire: request.misfire,
        timeout_ms: request.timeout_ms,
    };
    service::edit(&state.job_store, &state.job_executors, id, edit)
        .await
        .map_err(store_error)?;
    Ok(Reply(()))
}

/// The text of a `cfg` field: an object, or a string holding one (absent or `null`: none).
fn cfg_text(cfg: Option<serde_json::Value>) -> Result<Option<String>, AppError> {
    match cfg {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(text)) => Ok(Some(text)),
        Some(value @ serde_json::Value::Object(_)) => Ok(Some(value.to_string())),
        Some(_) => Err(AppError::InvalidInput(Msg::field(
            "cfg",
            "must be a JSON object (or a string holding one)",
            "须为 JSON 对象（或内容为 JSON 对象的字符串）",
        ))),
    }
}

/// Stops a job before its next fire **(admins)**; idempotent.
#[utoipa::path(
    post,
    path = "/jobs/{id}/stop",
    security(("access_token" = [])),
    params(("id" = i64, Path, description = "The job.")),
    responses((status = 200, description = "Stopped; 404001: no such job.",
               body = Envelope<Null>))
)]
async fn stop(
    _admin: Admin,
    State(state): State<Arc<JobRoutes>>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<()> {
    state.job_store.stop(id).await.map_err(store_error)?;
    Ok(Reply(()))
}

/// Resumes a stopped job **(admins)**; idempotent.
#[utoipa::path(
    post,
    path = "/jobs/{id}/resume",
    security(("access_token" = [])),
    params(("id" = i64, Path, description = "The job.")),
    responses((status = 200, description = "Resumed; 404001: no such job.",
               body = Envelope<Null>))
)]
async fn resume(
    _admin: Admin,
    State(state): State<Arc<JobRoutes>>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<()> {
    state.job_store.resume(id).await.map_err(store_error)?;
    Ok(Reply(()))
}

/// Runs a job once now **(admins)**.
#[utoipa::path(
    post,
    path = "/jobs/{id}/trigger",
    security(("access_token" = [])),
    params(("id" = i64, Path, description = "The job.")),
    responses((status = 200, description = "Triggered; code 4 for a stopped job; 404001: no \
               such job.", body = Envelope<Null>))
)]
async fn trigger(
    _admin: Admin,
    State(state): State<Arc<JobRoutes>>,
    ApiPath(id): ApiPath<i64>,
) -> ApiResult<()> {
    state.job_store.trigger(id).await.map_err(store_error)?;
    Ok(Reply(()))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct RunsQuery {
    /// 1–500 (default 50).
    limit: Option<i64>,
}

/// A run of a job.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct RunView {
    id: i64,
    scheduled_at: i64,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    owner: String,
    token: i64,
    status: &'static str,
    error: Option<String>,
}

impl From<RunRow> for RunView {
    fn from(run: RunRow) -> Self {
        Self {
            id: run.id,
            scheduled_at: run.scheduled_at,
            started_at: run.started_at,
            finished_at: run.finished_at,
            owner: run.owner,
            token: run.token,
            status: run.status.as_str(),
            error: run.error,
        }
    }
}

/// A job's runs, newest first **(admins)**.
#[utoipa::path(
    get,
    path = "/jobs/{id}/runs",
    security(("access_token" = [])),
    params(("id" = i64, Path, description = "The job."), RunsQuery),
    responses((status = 200, description = "The runs (status ok, failed, timeout, skipped, \
               misfired or fenced); 404001: no such job.", body = Envelope<Vec<RunView>>))
)]
async fn runs(
    _admin: Admin,
    State(state): State<Arc<JobRoutes>>,
    ApiPath(id): ApiPath<i64>,
    ApiQuery(query): ApiQuery<RunsQuery>,
) -> ApiResult<Vec<RunView>> {
    let limit = query.limit.unwrap_or(DEFAULT_RUNS_LIMIT);
    if !(1..=MAX_RUNS_LIMIT).contains(&limit) {
        return Err(AppError::InvalidInput(Msg::field(
            "limit",
            format!("must be 1-{MAX_RUNS_LIMIT}"),
            format!("须在 1 到 {MAX_RUNS_LIMIT} 之间"),
        )));
    }
    let runs = runs_of(&state.job_store, id, limit).await?;
    Ok(Reply(runs.into_iter().map(RunView::from).collect()))
}

/// The runs of job `id`, newest first; 404001 when there is no such job.
async fn runs_of(store: &SqlJobStore, id: i64, limit: i64) -> Result<Vec<RunRow>, AppError> {
    if store.get(id).await?.is_none() {
        return Err(NO_SUCH_JOB);
    }
    Ok(store.runs(id, limit).await?)
}

/// The `/jobs` routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(list, create, edit, stop, resume, trigger, runs))]
pub struct JobsApi;
