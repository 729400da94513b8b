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

use super::{
    control::{Control, Phase},
    status,
    switch::Switcher,
    work, Mover, StatusView,
};
use platform::{
    db::Migration,
    error::{ApiJson, ApiQuery, ApiResult, AppError, Msg, Reply},
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

async fn show(_admin: Admin, State(routes): State<Arc<MoveRoutes>>) -> ApiResult<StatusView> {
    routes.status().await
}

#[derive(Debug, Deserialize)]
struct StartRequest {
    destination: String,
}

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

#[derive(Debug, Deserialize)]
struct SwitchRequest {
    phase: String,
}

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

#[derive(Debug, Deserialize)]
struct ValidateRequest {
    since: Option<i64>,
}

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

async fn fix(_admin: Admin, State(routes): State<Arc<MoveRoutes>>) -> ApiResult<StatusView> {
    let mover = routes.started_mover().await?;
    let control = routes.control.clone();
    routes.spawn(async move {
        work::as_task(&control, "fix", mover.fix()).await?;
        Ok(())
    })?;
    routes.status().await
}

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

#[derive(Debug, Deserialize)]
struct FindingsQuery {
    cursor: Option<String>,
    limit: Option<i64>,
}

/// One finding.
#[derive(Debug, Serialize)]
struct FindingView {
    id: i64,
    table: String,
    key: String,
    kind: String,
    state: String,
    detail: String,
}

#[derive(Debug, Serialize)]
struct FindingsPage {
    items: Vec<FindingView>,
    next: Option<String>,
}

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
