//! The move's state, kept in the source database (the one every instance is configured with):
//! the phase, the switch protocol's epoch and stage, the running task, copy progress per table
//! and the last validation (`db_move`), and each serving instance's acknowledgements
//! (`db_move_acks`). It survives restarts: an instance starting mid-move reads the phase and
//! routes itself accordingly ([`super::instance`]).
//!
//! **A switch** is a durable task recorded here (epoch, stage, target, members, coordinator
//! and its lease); [`super::switch`] runs it and says how it is made safe against every crash.

use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use platform::db::{now_millis, Db};

/// The double-write patterns (the seed's 不停机数据迁移), in the order a move goes through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = MovePhase)]
pub enum Phase {
    /// Only the source, as before the move.
    SrcOnly,
    /// The source is authoritative; every change is copied to the destination after it.
    SrcFirst,
    /// The destination is authoritative; every change is copied back to the source after it.
    DstFirst,
    /// Only the destination.
    DstOnly,
}

impl Phase {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SrcOnly => "SrcOnly",
            Self::SrcFirst => "SrcFirst",
            Self::DstFirst => "DstFirst",
            Self::DstOnly => "DstOnly",
        }
    }

    /// The phase named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::SrcOnly, Self::SrcFirst, Self::DstFirst, Self::DstOnly]
            .into_iter()
            .find(|phase| phase.as_str().eq_ignore_ascii_case(name))
    }

    /// Whether queries go to the destination.
    pub fn destination_authoritative(self) -> bool {
        matches!(self, Self::DstFirst | Self::DstOnly)
    }

    /// Whether changes are copied to the other side.
    pub fn replicates(self) -> bool {
        matches!(self, Self::SrcFirst | Self::DstFirst)
    }

    /// Where the phase is in the order of a move.
    pub fn position(self) -> i32 {
        match self {
            Self::SrcOnly => 0,
            Self::SrcFirst => 1,
            Self::DstFirst => 2,
            Self::DstOnly => 3,
        }
    }
}

/// A long piece of work of the move and how it went.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MoveTask)]
pub struct Task {
    pub kind: String,
    pub state: String,
    pub message: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
}

/// Copy progress of one table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TableProgress {
    pub name: String,
    pub rows: i64,
    pub copied: i64,
    pub done: bool,
    /// The last key copied (JSON), where a resumed copy goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// The last validation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = MoveValidation)]
pub struct Validation {
    pub at: i64,
    pub since: Option<i64>,
    pub checked: i64,
    pub findings: i64,
    /// The phase it ran in.
    #[serde(default)]
    pub phase: Option<Phase>,
    /// Whether the copy had finished when it began.
    #[serde(default)]
    pub after_copy: bool,
    /// Change-log entries waiting to be replicated when it began (both sides).
    #[serde(default)]
    pub backlog: i64,
    /// How long (ms) it waited, in all, for changes in flight to be replicated before
    /// confirming what it had found different: one wait of at most 5 s per 10 000 suspected
    /// rows.
    #[serde(default)]
    pub replication_wait_ms: i64,
    /// Whether a wait ran out before replication caught up: some findings may be rows that
    /// were only in flight (validate again).
    #[serde(default)]
    pub replication_behind: bool,
}

/// The `db_move` row.
#[derive(Debug, Clone)]
pub struct MoveState {
    pub phase: Phase,
    pub destination: String,
    pub epoch: i64,
    pub stage: String,
    pub task: Option<Task>,
    pub tables: Vec<TableProgress>,
    pub validation: Option<Validation>,
    /// The phase the switch in progress goes to.
    pub target: Phase,
    /// The instances that must acknowledge the pause of this epoch (fixed when it began).
    pub members: Vec<String>,
    /// Who runs the switch in progress, and until when (ms) it counts as alive.
    pub coordinator: String,
    pub lease_until: i64,
    /// When the pause of this epoch began (ms).
    pub paused_at: i64,
    /// How the last switch ended, for the operator.
    pub outcome: String,
    /// The fence token of whoever runs the switch (raised by every begin and takeover).
    pub fence_token: i64,
}

impl MoveState {
    /// Whether a switch is in progress (paused, aborting or flipped but not yet done).
    pub fn switching(&self) -> bool {
        matches!(
            self.stage.as_str(),
            STAGE_PAUSE | STAGE_ABORTING | STAGE_FLIP
        )
    }

    /// Whether a switch is in progress whose coordinator stopped renewing its lease.
    pub fn orphaned(&self, now: i64) -> bool {
        self.switching() && self.lease_until < now
    }
}

/// Stages of a switch: none (""), pause → flip → none, or pause → aborting → abort.
pub const STAGE_IDLE: &str = "";
pub const STAGE_PAUSE: &str = "pause";
pub const STAGE_FLIP: &str = "flip";
pub const STAGE_ABORTING: &str = "aborting";
pub const STAGE_ABORT: &str = "abort";
/// Acknowledgements an instance writes.
pub const ACK_PAUSED: &str = "paused";
pub const ACK_FLIPPED: &str = "flipped";
pub const ACK_OPEN: &str = "open";

/// An instance is a member of a switch (must acknowledge its pause) when its row was renewed
/// within this: a stopped or killed instance drops out after it, and its writes meet the fence.
pub const MEMBER_WITHIN: Duration = Duration::from_secs(10);

/// The control plane on the source database.
#[derive(Debug, Clone)]
pub struct Control {
    db: Db,
}

/// The `db_move` row as stored: phases by name, the task, tables, validation and members as
/// JSON text.
#[derive(sqlx::FromRow)]
struct ControlRow {
    phase: String,
    destination: String,
    epoch: i64,
    stage: String,
    task: String,
    tables: String,
    validation: String,
    target: String,
    members: String,
    coordinator: String,
    lease_until: i64,
    paused_at: i64,
    outcome: String,
    fence_token: i64,
}

impl TryFrom<ControlRow> for MoveState {
    type Error = anyhow::Error;

    fn try_from(row: ControlRow) -> anyhow::Result<Self> {
        let phase_of =
            |name: &str| Phase::parse(name).with_context(|| format!("unknown phase {name:?}"));
        Ok(Self {
            phase: phase_of(&row.phase)?,
            destination: row.destination,
            epoch: row.epoch,
            stage: row.stage,
            task: serde_json::from_str(&row.task)?,
            tables: serde_json::from_str(&row.tables)?,
            validation: serde_json::from_str(&row.validation)?,
            target: phase_of(&row.target)?,
            members: serde_json::from_str(&row.members)?,
            coordinator: row.coordinator,
            lease_until: row.lease_until,
            paused_at: row.paused_at,
            outcome: row.outcome,
            fence_token: row.fence_token,
        })
    }
}

impl Control {
    /// Control on `db`, which must stay on the source (a [`Db::detached`] one in instances).
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The writer pool of the database the control row is on, as it is now (the mover's turn
    /// to write to a SQLite source: [`super::tables::Side::gate`]).
    pub fn writer_pool(&self) -> sqlx::AnyPool {
        self.db.writer().any_pool()
    }

    /// The move, if one was started.
    pub async fn load(&self) -> anyhow::Result<Option<MoveState>> {
        let row: Option<ControlRow> = sqlx::query_as(
            "SELECT phase, destination, epoch, stage, task, tables, validation, \
             target, members, coordinator, lease_until, paused_at, outcome, fence_token \
             FROM db_move WHERE id = 1",
        )
        .fetch_optional(self.db.pool())
        .await?;
        row.map(MoveState::try_from).transpose()
    }

    /// Records a new move to `destination` in phase SrcOnly; refuses when one exists.
    pub async fn create(&self, destination: &str) -> anyhow::Result<bool> {
        let now = now_millis();
        let created = sqlx::query(
            "INSERT INTO db_move (id, phase, target, destination, epoch, stage, started_at, \
             task, tables, validation, utime) \
             VALUES (1, 'SrcOnly', 'SrcOnly', $1, 0, '', $2, 'null', '[]', 'null', $2) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(destination)
        .bind(now)
        .execute(self.db.writer())
        .await?;
        Ok(created.rows_affected() == 1)
    }

    /// Records the running task's state.
    pub async fn save_task(&self, task: &Task) -> anyhow::Result<()> {
        self.set("task", serde_json::to_string(task)?).await
    }

    /// Records copy progress.
    pub async fn save_tables(&self, tables: &[TableProgress]) -> anyhow::Result<()> {
        self.set("tables", serde_json::to_string(tables)?).await
    }

    /// Records a validation's outcome.
    pub async fn save_validation(&self, validation: &Validation) -> anyhow::Result<()> {
        self.set("validation", serde_json::to_string(validation)?)
            .await
    }

    async fn set(&self, column: &'static str, value: String) -> anyhow::Result<()> {
        sqlx::query(&format!(
            "UPDATE db_move SET {column} = $1, utime = $2 WHERE id = 1"
        ))
        .bind(value)
        .bind(now_millis())
        .execute(self.db.writer())
        .await?;
        Ok(())
    }

    /// Begins a switch to `target` if the move is still as `seen` (same epoch and fence token)
    /// with no switch in progress: the next epoch, stage pause, `members`, `coordinator`
    /// holding the lease until `lease_until`, the next fence token. The token, if it began
    /// (another coordinator may have been quicker).
    pub async fn begin_switch(
        &self,
        seen: &MoveState,
        target: Phase,
        members: &[String],
        coordinator: &str,
        lease_until: i64,
    ) -> anyhow::Result<Option<i64>> {
        let now = now_millis();
        let token = seen.fence_token + 1;
        let begun = sqlx::query(
            "UPDATE db_move SET epoch = epoch + 1, stage = $1, target = $2, members = $3, \
             coordinator = $4, lease_until = $5, paused_at = $6, outcome = '', utime = $6, \
             fence_token = $10 \
             WHERE id = 1 AND epoch = $7 AND stage IN ($8, $9) AND fence_token = $11",
        )
        .bind(STAGE_PAUSE)
        .bind(target.as_str())
        .bind(serde_json::to_string(members)?)
        .bind(coordinator)
        .bind(lease_until)
        .bind(now)
        .bind(seen.epoch)
        .bind(STAGE_IDLE)
        .bind(STAGE_ABORT)
        .bind(token)
        .bind(seen.fence_token)
        .execute(self.db.writer())
        .await?;
        Ok((begun.rows_affected() == 1).then_some(token))
    }

    /// Moves the switch of `epoch` from one of `from` to `stage` with `phase` (and `outcome`,
    /// when given), if `coordinator` still runs it. Whether it did.
    pub async fn advance(
        &self,
        epoch: i64,
        coordinator: &str,
        from: &[&str],
        stage: &str,
        phase: Phase,
        outcome: Option<&str>,
    ) -> anyhow::Result<bool> {
        let sql = format!(
            "UPDATE db_move SET stage = $1, phase = $2, outcome = COALESCE($3, outcome), \
             utime = $4 WHERE id = 1 AND epoch = $5 AND coordinator = $6 AND stage IN ({})",
            platform::db::placeholders(7, from.len())
        );
        let mut query = sqlx::query(&sql)
            .bind(stage)
            .bind(phase.as_str())
            .bind(outcome)
            .bind(now_millis())
            .bind(epoch)
            .bind(coordinator);
        for from in from {
            query = query.bind(*from);
        }
        Ok(query.execute(self.db.writer()).await?.rows_affected() == 1)
    }

    /// Renews `coordinator`'s lease on the switch of `epoch`; false when it no longer runs it.
    pub async fn renew(
        &self,
        epoch: i64,
        coordinator: &str,
        lease_until: i64,
    ) -> anyhow::Result<bool> {
        let renewed = sqlx::query(
            "UPDATE db_move SET lease_until = $1 WHERE id = 1 AND epoch = $2 \
             AND coordinator = $3 AND stage IN ($4, $5, $6)",
        )
        .bind(lease_until)
        .bind(epoch)
        .bind(coordinator)
        .bind(STAGE_PAUSE)
        .bind(STAGE_ABORTING)
        .bind(STAGE_FLIP)
        .execute(self.db.writer())
        .await?;
        Ok(renewed.rows_affected() == 1)
    }

    /// Makes `coordinator` the one running the switch `seen` shows, with the next fence
    /// token, if it is still exactly that (same epoch, stage, coordinator, lease and token): an
    /// orphan's takeover, or an operator's abort. The token, if it did.
    pub async fn take_over(
        &self,
        seen: &MoveState,
        coordinator: &str,
        lease_until: i64,
    ) -> anyhow::Result<Option<i64>> {
        let token = seen.fence_token + 1;
        let taken = sqlx::query(
            "UPDATE db_move SET coordinator = $1, lease_until = $2, utime = $3, fence_token = $8 \
             WHERE id = 1 AND epoch = $4 AND stage = $5 AND coordinator = $6 \
             AND lease_until = $7 AND fence_token = $9",
        )
        .bind(coordinator)
        .bind(lease_until)
        .bind(now_millis())
        .bind(seen.epoch)
        .bind(&seen.stage)
        .bind(&seen.coordinator)
        .bind(seen.lease_until)
        .bind(token)
        .bind(seen.fence_token)
        .execute(self.db.writer())
        .await?;
        Ok((taken.rows_affected() == 1).then_some(token))
    }

    /// Marks the move finished (it stays recorded: see [`super::STAGE_FINISHED`]).
    pub async fn mark_finished(&self) -> anyhow::Result<()> {
        sqlx::query("UPDATE db_move SET stage = $1, utime = $2 WHERE id = 1")
            .bind(super::STAGE_FINISHED)
            .bind(now_millis())
            .execute(self.db.writer())
            .await?;
        Ok(())
    }

    /// Instance `instance` saw `epoch` and is at `stage` (also its sign of life).
    pub async fn ack(&self, instance: &str, epoch: i64, stage: &str) -> anyhow::Result<()> {
        sqlx::query(
            "INSERT INTO db_move_acks (instance, epoch, stage, seen_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (instance) DO UPDATE SET epoch = excluded.epoch, \
             stage = excluded.stage, seen_at = excluded.seen_at",
        )
        .bind(instance)
        .bind(epoch)
        .bind(stage)
        .bind(now_millis())
        .execute(self.db.writer())
        .await?;
        Ok(())
    }

    /// Removes `instance`'s acknowledgement row (it stops).
    pub async fn leave(&self, instance: &str) -> anyhow::Result<()> {
        sqlx::query("DELETE FROM db_move_acks WHERE instance = $1")
            .bind(instance)
            .execute(self.db.writer())
            .await?;
        Ok(())
    }

    /// Renews `instance`'s sign of life (creating its row if it has none).
    pub async fn heartbeat(&self, instance: &str) -> anyhow::Result<()> {
        sqlx::query(
            "INSERT INTO db_move_acks (instance, epoch, stage, seen_at) VALUES ($1, 0, $2, $3) \
             ON CONFLICT (instance) DO UPDATE SET seen_at = excluded.seen_at",
        )
        .bind(instance)
        .bind(ACK_OPEN)
        .bind(now_millis())
        .execute(self.db.writer())
        .await?;
        Ok(())
    }

    /// Instances whose row was renewed within `within`, by name.
    pub async fn alive(&self, within: Duration) -> anyhow::Result<Vec<String>> {
        let since = now_millis() - i64::try_from(within.as_millis())?;
        Ok(sqlx::query_scalar(
            "SELECT instance FROM db_move_acks WHERE seen_at >= $1 ORDER BY instance",
        )
        .bind(since)
        .fetch_all(self.db.pool())
        .await?)
    }

    /// Those of `members` that have not acknowledged `stage` of `epoch`.
    pub async fn not_acknowledged(
        &self,
        members: &[String],
        epoch: i64,
        stage: &str,
    ) -> anyhow::Result<Vec<String>> {
        let acknowledged: Vec<String> =
            sqlx::query_scalar("SELECT instance FROM db_move_acks WHERE epoch = $1 AND stage = $2")
                .bind(epoch)
                .bind(stage)
                .fetch_all(self.db.pool())
                .await?;
        Ok(members
            .iter()
            .filter(|member| !acknowledged.contains(member))
            .cloned()
            .collect())
    }
}
