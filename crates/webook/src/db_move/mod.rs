//! The online database move: from the embedded SQLite (or one PostgreSQL) to a PostgreSQL while
//! the site keeps serving — the seed's 不停机数据迁移, double write, validate, fix — then
//! restart on the destination and scale out.
//!
//! How data flows, phase by phase ([`control::Phase`]):
//! - **start** ([`work::start`]): the destination is migrated to this schema, the move recorded
//!   in the source's `db_move` row (phase SrcOnly) and capture triggers installed on every table
//!   on both sides: from then on each transaction that changes a row also logs its key in
//!   `db_move_changes`, atomically with the change.
//! - **SrcFirst**: queries go to the source; every serving instance's replicator
//!   ([`instance`]) copies the current rows of logged keys to the destination after the
//!   source's commit. A failure there is recorded (metrics, log) and retried — never returned
//!   to a caller, whose write is already durable on the authoritative side. The bulk copy
//!   ([`work::Mover::copy`], keyset batches, resumable) runs meanwhile, never overwriting rows the
//!   replicator brought.
//! - **validate / fix** ([`work::Mover::validate`], [`work::Mover::fix`]): both directions in
//!   keyset batches, all rows or those changed since a time; the fixer overwrites from the
//!   authoritative side only rows unchanged since compared.
//! - **DstFirst**: the switch ([`switch`]) pauses every instance, fences the source, drains
//!   the logs, carries the sequences, and routes every instance's [`platform::db::Db`] to the
//!   destination; the replicator now copies changes back to the source, so falling back stays
//!   possible. It needs a clean full validation made in SrcFirst after the copy. A switch is a
//!   durable task: whoever started it may go away, and it still ends flipped or aborted.
//! - **DstOnly**, then **finish**: nothing is copied back; the triggers and logs go and the
//!   operator restarts with the destination's URL ([`StatusView::restart_with`]).
//!
//! The double write happens below the stores, which keep their single `Db`: the routing of
//! that `Db` ([`platform::db::Db::pause`]) and the change log written in the same transaction
//! as the change make every store and every table take part without a line of their own.

mod cli;
mod control;
mod http;
mod instance;
#[cfg(test)]
mod model;
mod settings;
mod switch;
mod tables;
mod work;

use async_trait::async_trait;
use clap::FromArgMatches;
use serde::Serialize;

use platform::{
    config::SettingsSpec,
    db::{Db, Migration},
    feature::{CliCommands, Feature, Platform, Registry, Service},
    redact_url,
    telemetry::MetricsSpec,
};

use control::{Control, MoveState, Phase, TableProgress, Task, Validation};
use work::Mover;

/// Counter: change-log entries replicated to the other side.
pub const CHANGES_REPLICATED_TOTAL: &str = "db_move_changes_replicated_total";
/// Counter: replication passes that failed (retried).
pub const REPLICATION_FAILURES_TOTAL: &str = "db_move_replication_failures_total";

const METRICS: MetricsSpec = MetricsSpec {
    histogram_buckets: &[],
    describe: describe_metrics,
};

fn describe_metrics() {
    metrics::describe_counter!(
        CHANGES_REPLICATED_TOTAL,
        "Change-log entries of an online database move copied to the other side"
    );
    metrics::describe_counter!(
        REPLICATION_FAILURES_TOTAL,
        "Replication passes of an online database move that failed (retried)"
    );
    metrics::describe_counter!(
        switch::SWITCHES_TOTAL,
        "Switches of an online database move run or taken over here, by outcome"
    );
    metrics::describe_histogram!(
        switch::SWITCH_PAUSE_SECONDS,
        metrics::Unit::Seconds,
        "How long a switch coordinated here held the site paused (pause to flip)"
    );
    metrics::describe_counter!(
        instance::PAUSE_EXPIRED_TOTAL,
        "Switch pauses this instance ended by its own deadline"
    );
    metrics::describe_histogram!(
        instance::INSTANCE_PAUSE_SECONDS,
        metrics::Unit::Seconds,
        "How long a switch paused this instance's queries"
    );
}

/// The move feature.
pub struct DbMove;

#[async_trait]
impl Feature for DbMove {
    fn name(&self) -> &'static str {
        "db_move"
    }

    fn needs(&self) -> &'static [Service] {
        const { &[Service::of::<crate::jobs::WorkerInstance>()] }
    }

    fn migrations(&self) -> &'static [Migration] {
        const MIGRATIONS: &[Migration] = &[
            Migration::new(
                22,
                "database move",
                include_str!("../../migrations/0022_db_move.sql"),
            ),
            Migration::new(
                24,
                "database move fence",
                include_str!("../../migrations/0024_db_move_fence.sql"),
            ),
        ];
        MIGRATIONS
    }

    fn settings(&self) -> &'static [SettingsSpec] {
        &[settings::SETTINGS]
    }

    fn metrics(&self) -> &'static [MetricsSpec] {
        &[METRICS]
    }

    fn cli(&self) -> Option<CliCommands> {
        Some(CliCommands::of::<cli::DbMoveCli>(|matches, context| {
            Box::pin(async move {
                let cli::DbMoveCli::DbMove(command) = cli::DbMoveCli::from_arg_matches(&matches)?;
                cli::run(&context.config, context.schema, command).await
            })
        }))
    }

    fn openapi(&self) -> utoipa::openapi::OpenApi {
        <http::DbMoveApi as utoipa::OpenApi>::openapi()
    }

    async fn install(&self, platform: &Platform, registry: &mut Registry) -> anyhow::Result<()> {
        let home = platform.db.detached();
        let control = Control::new(home.clone());
        let deadline = platform
            .config
            .settings::<settings::MoveSettings>()?
            .db_move_pause_deadline;
        let name = registry.get::<crate::jobs::WorkerInstance>()?.0;
        let instance = instance::InstanceMove {
            control: control.clone(),
            home,
            app: platform.db.clone(),
            instance: name.clone(),
            config: (*platform.config).clone(),
            deadline,
            status: platform.status.clone(),
        };
        instance.route_at_start().await?;
        registry.background("db_move", move |background| instance.run(background.stop));
        registry.routes(http::router(http::MoveRoutes::new(
            control,
            platform.config.database_url(),
            platform.schema,
            http::Coordinator { name, deadline },
        )));
        Ok(())
    }
}

/// The move as the CLI prints it and the admin API answers it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MoveStatus)]
struct StatusView {
    pub phase: Phase,
    pub source: String,
    pub destination: Option<String>,
    pub epoch: i64,
    pub stage: String,
    /// The switch in progress (or the last one): where to, who must acknowledge, who runs
    /// it and until when its lease holds, when it paused, and how the last one ended.
    pub target: Option<Phase>,
    pub members: Vec<String>,
    pub coordinator: String,
    pub lease_until: i64,
    pub paused_at: i64,
    pub outcome: String,
    pub task: Option<Task>,
    pub tables: Vec<TableProgress>,
    pub pending: Pending,
    /// Whether each side's write fence is closed (refuses application writes).
    pub fenced: Fenced,
    pub validation: Option<Validation>,
    pub open_findings: i64,
    pub restart_with: Option<String>,
}

/// The write fences of both sides.
#[derive(Debug, Serialize, Default, utoipa::ToSchema)]
#[schema(as = MoveFences)]
struct Fenced {
    pub source: bool,
    pub destination: bool,
}

/// Change-log entries not yet replicated.
#[derive(Debug, Serialize, Default, utoipa::ToSchema)]
#[schema(as = MovePending)]
struct Pending {
    pub source: i64,
    pub destination: i64,
}

/// The stage a finished move keeps (the control row stays, so an instance restarted on the old
/// configuration still serves from the destination).
const STAGE_FINISHED: &str = "finished";

/// The status of the move recorded in `control` (of the source `source_url`).
async fn status(
    control: &Control,
    source_url: &str,
    mover: Option<&Mover>,
    show_secrets: bool,
) -> anyhow::Result<StatusView> {
    let Some(state) = control.load().await? else {
        return Ok(StatusView {
            phase: Phase::SrcOnly,
            source: redact_url(source_url),
            destination: None,
            epoch: 0,
            stage: String::new(),
            target: None,
            members: Vec::new(),
            coordinator: String::new(),
            lease_until: 0,
            paused_at: 0,
            outcome: String::new(),
            task: None,
            tables: Vec::new(),
            pending: Pending::default(),
            fenced: Fenced::default(),
            validation: None,
            open_findings: 0,
            restart_with: None,
        });
    };
    let (pending, open_findings, fenced) = match mover {
        Some(mover) => (
            Pending {
                source: mover.source.pending_changes().await?,
                destination: mover.destination.pending_changes().await?,
            },
            sqlx::query_scalar("SELECT COUNT(*) FROM db_move_findings WHERE state = 'open'")
                .fetch_one(&mover.source.pool)
                .await?,
            Fenced {
                source: mover.source.fence_closed().await?,
                destination: mover.destination.fence_closed().await?,
            },
        ),
        None => (Pending::default(), 0, Fenced::default()),
    };
    Ok(StatusView {
        restart_with: (state.stage == STAGE_FINISHED).then(|| restart_with(&state, show_secrets)),
        phase: state.phase,
        source: redact_url(source_url),
        destination: Some(redact_url(&state.destination)),
        epoch: state.epoch,
        stage: state.stage,
        target: Some(state.target),
        members: state.members,
        coordinator: state.coordinator,
        lease_until: state.lease_until,
        paused_at: state.paused_at,
        outcome: state.outcome,
        task: state.task,
        tables: state
            .tables
            .into_iter()
            .map(|table| TableProgress {
                after: None,
                ..table
            })
            .collect(),
        pending,
        fenced,
        validation: state.validation,
        open_findings,
    })
}

/// The configuration to restart every instance with after finishing.
fn restart_with(state: &MoveState, show_secrets: bool) -> String {
    let url = if show_secrets {
        state.destination.clone()
    } else {
        redact_url(&state.destination)
    };
    format!(
        "database_url = \"{url}\"\n# or WEBOOK_DATABASE_URL={url}, or --database-url {url};\n\
         # add redis_url = \"redis://…\" to run several instances"
    )
}

/// Removes the triggers and change logs of a move in DstOnly and marks it finished.
async fn finish(control: &Control, mover: &Mover) -> anyhow::Result<()> {
    let state = control
        .load()
        .await?
        .ok_or_else(|| anyhow::anyhow!("no move has been started"))?;
    if state.phase != Phase::DstOnly {
        anyhow::bail!(
            "finish comes after the switch to DstOnly (now {})",
            state.phase.as_str()
        );
    }
    mover.source.remove_capture(&mover.tables).await?;
    mover.destination.remove_capture(&mover.tables).await?;
    for side in [&mover.source, &mover.destination] {
        sqlx::query("DELETE FROM db_move_changes")
            .execute(&side.pool)
            .await?;
    }
    control.mark_finished().await
}

/// Opens the mover of the move recorded in `control`, if there is one.
async fn open_mover(control: &Control, source_url: &str) -> anyhow::Result<Option<Mover>> {
    match control.load().await? {
        Some(state) => Ok(Some(
            Mover::open(control.clone(), source_url, &state).await?,
        )),
        None => Ok(None),
    }
}

/// The source `Db` of `config`, for the CLI.
async fn control_of(config: &platform::config::Config) -> anyhow::Result<Control> {
    Ok(Control::new(Db::connect(config).await?))
}
