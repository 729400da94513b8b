//! The move's state, kept in the source database (the one every instance is configured with):
//! the phase, the switch protocol's epoch and stage, the running task, copy progress per table
//! and the last validation (`db_move`), and each serving instance's acknowledgements
//! (`db_move_acks`). It survives restarts: an instance starting mid-move reads the phase and
//! routes itself accordingly ([`super::instance`]).
//!
//! **A switch** ([`switch`]) moves every instance to the neighbouring phase together: the
//! coordinator (CLI or admin API) raises the epoch with stage `pause`; every live instance
//! pauses its queries, waits until its connections are back and acknowledges; the coordinator
//! waits for every acknowledgement, for the change logs to be replicated empty and carries the
//! sequences over, then sets the new phase with stage `flip`; the instances route to the new
//! authority, open again and acknowledge. No two instances ever write with different
//! authorities, and a request meanwhile waits instead of failing. An instance that does not
//! acknowledge in time aborts the switch (nothing changed).

use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use platform::db::{now_millis, Db};

use super::tables::Side;

/// The double-write patterns (the seed's 不停机数据迁移), in the order a move goes through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

    fn position(self) -> i32 {
        match self {
            Self::SrcOnly => 0,
            Self::SrcFirst => 1,
            Self::DstFirst => 2,
            Self::DstOnly => 3,
        }
    }
}

/// A long piece of work of the move and how it went.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub kind: String,
    pub state: String,
    pub message: String,
    pub started_at: i64,
    pub ended_at: Option<i64>,
}

/// Copy progress of one table.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    pub at: i64,
    pub since: Option<i64>,
    pub checked: i64,
    pub findings: i64,
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
}

/// Stages of a switch.
pub const STAGE_PAUSE: &str = "pause";
pub const STAGE_FLIP: &str = "flip";
pub const STAGE_ABORT: &str = "abort";
/// Acknowledgements an instance writes.
pub const ACK_PAUSED: &str = "paused";
pub const ACK_FLIPPED: &str = "flipped";
pub const ACK_OPEN: &str = "open";

/// An instance counts as alive while its acknowledgement row is younger than this.
pub const ALIVE_WITHIN: Duration = Duration::from_secs(3);
/// How long a switch waits for every instance at each stage.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

/// The control plane on the source database.
#[derive(Debug, Clone)]
pub struct Control {
    db: Db,
}

/// phase, destination, epoch, stage, task, tables, validation.
type Row = (String, String, i64, String, String, String, String);

impl Control {
    /// Control on `db`, which must stay on the source (a [`Db::detached`] one in instances).
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The move, if one was started.
    pub async fn load(&self) -> anyhow::Result<Option<MoveState>> {
        let row: Option<Row> = sqlx::query_as(
            "SELECT phase, destination, epoch, stage, task, tables, validation \
             FROM db_move WHERE id = 1",
        )
        .fetch_optional(self.db.pool())
        .await?;
        let Some((phase, destination, epoch, stage, task, tables, validation)) = row else {
            return Ok(None);
        };
        let phase_of =
            |name: &str| Phase::parse(name).with_context(|| format!("unknown phase {name:?}"));
        Ok(Some(MoveState {
            phase: phase_of(&phase)?,
            destination,
            epoch,
            stage,
            task: serde_json::from_str(&task)?,
            tables: serde_json::from_str(&tables)?,
            validation: serde_json::from_str(&validation)?,
        }))
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

    async fn set_stage(
        &self,
        epoch: i64,
        stage: &str,
        phase: Phase,
        target: Phase,
    ) -> anyhow::Result<()> {
        sqlx::query(
            "UPDATE db_move SET epoch = $1, stage = $2, phase = $3, target = $4, utime = $5 \
             WHERE id = 1",
        )
        .bind(epoch)
        .bind(stage)
        .bind(phase.as_str())
        .bind(target.as_str())
        .bind(now_millis())
        .execute(self.db.writer())
        .await?;
        Ok(())
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

    /// Live instances that have not yet acknowledged `stage` of `epoch`.
    async fn waiting_for(&self, epoch: i64, stage: &str) -> anyhow::Result<Vec<String>> {
        let alive_since = now_millis() - i64::try_from(ALIVE_WITHIN.as_millis())?;
        Ok(sqlx::query_scalar(
            "SELECT instance FROM db_move_acks WHERE seen_at >= $1 \
             AND NOT (epoch = $2 AND stage = $3) ORDER BY instance",
        )
        .bind(alive_since)
        .bind(epoch)
        .bind(stage)
        .fetch_all(self.db.pool())
        .await?)
    }

    /// Whether any instance is serving this move (acknowledged recently).
    pub async fn any_instance_alive(&self) -> anyhow::Result<bool> {
        let alive_since = now_millis() - i64::try_from(ALIVE_WITHIN.as_millis())?;
        let alive: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM db_move_acks WHERE seen_at >= $1")
                .bind(alive_since)
                .fetch_one(self.db.pool())
                .await?;
        Ok(alive > 0)
    }

    async fn await_acks(&self, epoch: i64, stage: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + ACK_TIMEOUT;
        loop {
            let waiting = self.waiting_for(epoch, stage).await?;
            if waiting.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                anyhow::bail!(
                    "instances {} did not acknowledge {stage} within {ACK_TIMEOUT:?}",
                    waiting.join(", ")
                );
            }
            // The acknowledgements are rows other processes write; polled.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Moves every instance to `target`, a neighbour of the current phase (module docs). `drain`
/// replicates what is left in the change logs when no instance is there to do it; `prepare`
/// runs while everything is paused, before the flip (sequences).
pub async fn switch(
    control: &Control,
    source: &Side,
    destination: &Side,
    target: Phase,
    drain: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let state = control.load().await?.context("no move has been started")?;
    if state.stage == super::STAGE_FINISHED {
        anyhow::bail!("the move is finished");
    }
    if !state.stage.is_empty() && state.stage != STAGE_ABORT {
        anyhow::bail!("another switch is in progress (stage {})", state.stage);
    }
    if (state.phase.position() - target.position()).abs() != 1 {
        anyhow::bail!(
            "from {} the move can only switch to a neighbouring phase (SrcOnly ↔ SrcFirst ↔ \
             DstFirst ↔ DstOnly), not to {}",
            state.phase.as_str(),
            target.as_str()
        );
    }
    if target == Phase::DstFirst
        && !state.tables.is_empty()
        && state.tables.iter().any(|table| !table.done)
    {
        anyhow::bail!("the copy has not finished: the destination is not complete yet");
    }
    if target == Phase::DstFirst && state.tables.is_empty() {
        anyhow::bail!("nothing has been copied yet: run the copy first");
    }
    let epoch = state.epoch + 1;
    control
        .set_stage(epoch, STAGE_PAUSE, state.phase, target)
        .await?;
    let paused = async {
        control.await_acks(epoch, ACK_PAUSED).await?;
        if state.phase.replicates() {
            // Everything written before the pause reaches the other side first.
            if control.any_instance_alive().await? {
                await_drained(source, destination).await?;
            } else {
                drain.await?;
            }
        }
        if target.destination_authoritative() {
            destination
                .carry_sequences(&destination.tables().await?)
                .await?;
        } else {
            source.carry_sequences(&source.tables().await?).await?;
        }
        anyhow::Ok(())
    }
    .await;
    if let Err(err) = paused {
        control
            .set_stage(epoch, STAGE_ABORT, state.phase, state.phase)
            .await?;
        return Err(err.context("the switch was aborted; every instance kept the old phase"));
    }
    control.set_stage(epoch, STAGE_FLIP, target, target).await?;
    let flipped = control.await_acks(epoch, ACK_FLIPPED).await;
    control.set_stage(epoch, "", target, target).await?;
    flipped.context("switched, but not every instance acknowledged it yet")
}

/// Waits until both change logs are empty (the instances' replicators drain them).
async fn await_drained(source: &Side, destination: &Side) -> anyhow::Result<()> {
    let deadline = Instant::now() + ACK_TIMEOUT;
    loop {
        let pending = source.pending_changes().await? + destination.pending_changes().await?;
        if pending == 0 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!("{pending} changes still not replicated after {ACK_TIMEOUT:?}");
        }
        // Drained by the instances' replicators; polled.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
