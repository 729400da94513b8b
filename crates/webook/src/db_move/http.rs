//! The admin API of the move (`/admin/db-move…`, admins only): status, start (then the copy
//! in the background), switch, abort, validate, fix, finish, and the findings in keyset pages.
//! Long work runs as the move's one background task; its progress is in the status. A switch
//! runs in a task of its own, not in the request: the request waits for it (at most
//! [`SWITCH_WAIT`]) and answers its outcome, but a closed tab or a proxy's timeout does not
//! end it ([`super::switch`]).

use platform::caller::{Admin, AdminArea};
use std::sync::{
    atomic::{AtomicBool, Ordering},
    Arc,
};

use axum::{
    extract::State,
    routing::{get, post},
    Router,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{
    control::{Control, Phase},
    status,
    switch::Switcher,
    work, Mover, StatusView,
};
use platform::{
    db::Migration,
    error::{ApiJson, ApiQuery, ApiResult, AppError, Msg, Reply},
    openapi::Envelope,
};

/// How long a switch request waits for the outcome before answering the status as it is.
const SWITCH_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Who runs the switches this process starts, and the instances' pause deadline.
#[derive(Debug, Clone)]
pub struct Coordinator {
    pub name: String,
    pub deadline: std::time::Duration,
}

/// State of the routes.
pub struct MoveRoutes {
    coordinator: Coordinator,
    control: Control,
    source_url: String,
    schema: &'static [Migration],
    mover: tokio::sync::Mutex<Option<Mover>>,
    busy: AtomicBool,
}

impl MoveRoutes {
    pub fn new(
        control: Control,
        source_url: String,
        schema: &'static [Migration],
        coordinator: Coordinator,
    ) -> Self {
        Self {
            coordinator,
            control,
            source_url,
            schema,
            mover: tokio::sync::Mutex::new(None),
            busy: AtomicBool::new(false),
        }
    }

    /// The mover of the recorded move (opened once).
    async fn mover(&self) -> anyhow::Result<Option<Mover>> {
        let mut mover = self.mover.lock().await;
        if mover.is_none() {
            *mover = super::open_mover(&self.control, &self.source_url).await?;
        }
        Ok(mover.clone())
    }

    /// A switcher of this process (its coordinator's name and deadline) with `mover`.
    fn switcher(&self, mover: Mover) -> Switcher {
        Switcher {
            control: self.control.clone(),
            mover,
            me: self.coordinator.name.clone(),
            deadline: self.coordinator.deadline,
        }
    }

    /// The mover, or the refusal that no move has been started.
    async fn started_mover(&self) -> Result<Mover, AppError> {
        self.mover()
            .await
            .map_err(refused)?
            .ok_or_else(|| invalid("no move has been started"))
    }

    async fn status(&self) -> ApiResult<StatusView> {
        let mover = self.mover().await.map_err(refused)?;
        Ok(Reply(
            status(&self.control, &self.source_url, mover.as_ref(), false)
                .await
                .map_err(refused)?,
        ))
    }

    /// Runs `work` as the one background task, or refuses while another runs.
    fn spawn<F>(self: &Arc<Self>, work: F) -> Result<(), AppError>
    where
        F: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(invalid("another task of the move is running"));
        }
        let routes = self.clone();
        tokio::spawn(async move {
            if let Err(err) = work.await {
                tracing::warn!(error = %format!("{err:#}"), "database move task failed");
            }
            routes.busy.store(false, Ordering::Release);
        });
        Ok(())
    }
}

/// What these routes guard: The database move (`/admin/db-move…`); a non-admin's refusal names it.
const ADMIN_AREA: AdminArea = AdminArea::new(
    "only admins may move the database",
    "只有管理员可以迁移数据库",
);

/// The routes.
pub fn router(routes: MoveRoutes) -> Router {
    Router::new()
        .route("/admin/db-move", get(show))
        .route("/admin/db-move/start", post(start))
        .route("/admin/db-move/switch", post(switch_phase))
        .route("/admin/db-move/abort", post(abort))
        .route("/admin/db-move/validate", post(validate))
        .route("/admin/db-move/fix", post(fix))
        .route("/admin/db-move/finish", post(finish))
        .route("/admin/db-move/findings", get(findings))
        .with_state(Arc::new(routes))
        .layer(axum::Extension(ADMIN_AREA))
}

fn invalid(message: &str) -> AppError {
    AppError::InvalidInput(Msg::owned(message.to_owned(), message.to_owned()))
}

/// A refusal with the reason (code 4): every failure of the move's operations is one the
/// operator reads and acts on.
fn refused(err: anyhow::Error) -> AppError {
    invalid(&format!("{err:#}"))
}

/// The move's status **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/db-move",
    security(("access_token" = [])),
    responses((status = 200, description = "The status; 403002 for anyone but an admin.", body = Envelope<StatusView>))
)]
async fn show(_admin: Admin, State(routes): State<Arc<MoveRoutes>>) -> ApiResult<StatusView> {
    routes.status().await
}

/// Where to move.
#[derive(Debug, Deserialize, ToSchema)]
struct StartRequest {
    /// `postgres://…`
    destination: String,
}

/// Starts the move to a PostgreSQL **(admins)**: migrates the destination, installs change
/// capture and starts the copy in the background (resumes a stopped one).
#[utoipa::path(
    post,
    path = "/admin/db-move/start",
    security(("access_token" = [])),
    request_body = StartRequest,
    responses((status = 200, description = "The status. Code 4 with the reason: not a PostgreSQL URL, the source itself, another destination, a task running.", body = Envelope<StatusView>))
)]
async fn start(
    _admin: Admin,
    State(routes): State<Arc<MoveRoutes>>,
    ApiJson(request): ApiJson<StartRequest>,
) -> ApiResult<StatusView> {
    let destination = request.destination.trim().to_owned();
    if !destination.starts_with("postgres://") && !destination.starts_with("postgresql://") {
        return Err(invalid(
            "destination must be a PostgreSQL URL (postgres://…)",
        ));
    }
    if routes.busy.load(Ordering::Acquire) {
        return Err(invalid("another task of the move is running"));
    }
    let mover = work::start(
        &routes.control,
        &routes.source_url,
        &destination,
        routes.schema,
    )
    .await
    .map_err(refused)?;
    *routes.mover.lock().await = Some(mover.clone());
    let control = routes.control.clone();
    routes.spawn(async move {
        work::as_task(&control, "copy", mover.copy(&|_, _, _| {})).await?;
        Ok(())
    })?;
    routes.status().await
}

/// The neighbouring phase to switch every instance to.
#[derive(Debug, Deserialize, ToSchema)]
struct SwitchRequest {
    /// `SrcOnly`, `SrcFirst`, `DstFirst` or `DstOnly`.
    phase: String,
}

/// Switches every instance to the neighbouring phase together **(admins)**; waits for the
/// outcome at most 60 s.
#[utoipa::path(
    post,
    path = "/admin/db-move/switch",
    security(("access_token" = [])),
    request_body = SwitchRequest,
    responses((status = 200, description = "The status. Code 4 with the reason when refused or aborted.", body = Envelope<StatusView>))
)]
async fn switch_phase(
    _admin: Admin,
    State(routes): State<Arc<MoveRoutes>>,
    ApiJson(request): ApiJson<SwitchRequest>,
) -> ApiResult<StatusView> {
    let target = Phase::parse(&request.phase)
        .ok_or_else(|| invalid("phase must be SrcOnly, SrcFirst, DstFirst or DstOnly"))?;
    let mover = routes.started_mover().await?;
    let switcher = routes.switcher(mover);
    let running = tokio::spawn(async move { switcher.switch(target).await });
    match tokio::time::timeout(SWITCH_WAIT, running).await {
        Ok(Ok(Ok(_))) | Err(_) => routes.status().await,
        Ok(Ok(Err(err))) => Err(refused(err)),
        Ok(Err(panicked)) => Err(refused(anyhow::anyhow!("the switch failed: {panicked}"))),
    }
}

/// Aborts the switch in progress, whoever runs it (a flipped one is completed instead).
#[utoipa::path(
    post,
    path = "/admin/db-move/abort",
    summary = "Ends the switch in progress now (admins): aborted before the flip, completed after it.",
    description = "",
    security(("access_token" = [])),
    responses((status = 200, description = "The status; code 4 when no switch is in progress.", body = Envelope<StatusView>))
)]
async fn abort(_admin: Admin, State(routes): State<Arc<MoveRoutes>>) -> ApiResult<StatusView> {
    let mover = routes.started_mover().await?;
    let switcher = routes.switcher(mover);
    let running = tokio::spawn(async move { switcher.abort().await });
    match running.await {
        Ok(Ok(_)) => routes.status().await,
        Ok(Err(err)) => Err(refused(err)),
        Err(panicked) => Err(refused(anyhow::anyhow!("the abort failed: {panicked}"))),
    }
}

/// What to validate.
#[derive(Debug, Deserialize, ToSchema)]
struct ValidateRequest {
    /// Only rows with `utime >= since` (ms; tables without `utime` in full); absent: every row.
    since: Option<i64>,
}

/// Compares both databases in both directions in the background **(admins)**.
#[utoipa::path(
    post,
    path = "/admin/db-move/validate",
    security(("access_token" = [])),
    request_body = ValidateRequest,
    responses((status = 200, description = "The status; code 4 while another task runs or before a start.", body = Envelope<StatusView>))
)]
async fn validate(
    _admin: Admin,
    State(routes): State<Arc<MoveRoutes>>,
    ApiJson(request): ApiJson<ValidateRequest>,
) -> ApiResult<StatusView> {
    let mover = routes.started_mover().await?;
    let control = routes.control.clone();
    routes.spawn(async move {
        work::as_task(
            &control,
            "validate",
            mover.validate(request.since, &|_, _, _| {}),
        )
        .await?;
        Ok(())
    })?;
    routes.status().await
}

/// Writes each open finding's row from the authoritative side to the other **(admins)**.
#[utoipa::path(
    post,
    path = "/admin/db-move/fix",
    security(("access_token" = [])),
    responses((status = 200, description = "The status; code 4 while another task runs or before a start.", body = Envelope<StatusView>))
)]
async fn fix(_admin: Admin, State(routes): State<Arc<MoveRoutes>>) -> ApiResult<StatusView> {
    let mover = routes.started_mover().await?;
    let control = routes.control.clone();
    routes.spawn(async move {
        work::as_task(&control, "fix", mover.fix()).await?;
        Ok(())
    })?;
    routes.status().await
}

/// In `DstOnly`: removes change capture and logs; `restartWith` is set **(admins)**.
#[utoipa::path(
    post,
    path = "/admin/db-move/finish",
    security(("access_token" = [])),
    responses((status = 200, description = "The status; code 4 with the reason when refused.", body = Envelope<StatusView>))
)]
async fn finish(_admin: Admin, State(routes): State<Arc<MoveRoutes>>) -> ApiResult<StatusView> {
    let mover = routes.started_mover().await?;
    if routes.busy.load(Ordering::Acquire) {
        return Err(invalid("another task of the move is running"));
    }
    super::finish(&routes.control, &mover)
        .await
        .map_err(refused)?;
    routes.status().await
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct FindingsQuery {
    /// The `next` of the previous page.
    cursor: Option<String>,
    /// 1–200 (default 50).
    limit: Option<i64>,
}

/// One finding.
#[derive(Debug, Serialize, ToSchema)]
struct FindingView {
    id: i64,
    table: String,
    key: String,
    kind: String,
    state: String,
    detail: String,
}

/// A page of findings, by id.
#[derive(Debug, Serialize, ToSchema)]
struct FindingsPage {
    items: Vec<FindingView>,
    next: Option<String>,
}

/// The validation's findings, in keyset pages by id **(admins)**.
#[utoipa::path(
    get,
    path = "/admin/db-move/findings",
    security(("access_token" = [])),
    params(FindingsQuery),
    responses((status = 200, description = "A page (`key`: the JSON array of the row's \
               primary key; `kind` `missing_in_destination`, `extra_in_destination` or \
               `different`; `state` `open`, `fixed` or `skipped`).",
               body = Envelope<FindingsPage>))
)]
async fn findings(
    _admin: Admin,
    State(routes): State<Arc<MoveRoutes>>,
    ApiQuery(query): ApiQuery<FindingsQuery>,
) -> ApiResult<FindingsPage> {
    let limit = query.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(invalid("limit must be 1 to 200"));
    }
    let after: i64 = match query.cursor.as_deref() {
        None | Some("") => 0,
        Some(cursor) => cursor.parse().map_err(|_| invalid("invalid cursor"))?,
    };
    let Some(mover) = routes.mover().await.map_err(refused)? else {
        return Ok(Reply(FindingsPage {
            items: Vec::new(),
            next: None,
        }));
    };
    let mut items: Vec<FindingView> = mover
        .findings_after(after, limit + 1)
        .await?
        .into_iter()
        .map(|finding| FindingView {
            id: finding.id,
            table: finding.table,
            key: finding.key,
            kind: finding.kind,
            state: finding.state,
            detail: finding.detail,
        })
        .collect();
    let next = (items.len() > usize::try_from(limit).unwrap_or(usize::MAX)).then(|| {
        items.pop();
        items.last().map(|item| item.id.to_string())
    });
    Ok(Reply(FindingsPage {
        items,
        next: next.flatten(),
    }))
}

/// The `/admin/db-move` routes' description ([`platform::openapi`]).
#[derive(utoipa::OpenApi)]
#[openapi(paths(show, start, switch_phase, abort, validate, fix, finish, findings))]
pub struct DbMoveApi;
