//! The move as each serving process takes part in it: a watcher of the control row that
//! routes this process's [`Db`] to the authority of the phase, takes its part in a switch
//! (pause, acknowledge, flip, acknowledge — [`super::control`]) and runs the replicator while
//! the phase copies changes across (SrcFirst, DstFirst).

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use platform::{
    config::Config,
    db::{Db, Paused},
};

use super::{
    control::{
        Control, MoveState, ACK_FLIPPED, ACK_OPEN, ACK_PAUSED, STAGE_ABORT, STAGE_FLIP, STAGE_PAUSE,
    },
    work::Mover,
};

/// How often the control row is read while a move exists, and otherwise.
const POLL_DURING_MOVE: Duration = Duration::from_millis(100);
const POLL_WITHOUT_MOVE: Duration = Duration::from_secs(1);
/// How often an instance renews its acknowledgement row (its sign of life).
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long pausing may wait for this process's connections to come back.
const PAUSE_WITHIN: Duration = Duration::from_secs(5);
/// How long the replicator waits when both change logs were empty.
const REPLICATOR_IDLE: Duration = Duration::from_millis(20);

/// This process's part in a move.
pub struct InstanceMove {
    pub control: Control,
    /// The source (what the configuration names), never re-routed.
    pub home: Db,
    /// The application's database, routed by the move.
    pub app: Db,
    pub instance: String,
    pub config: Config,
}

/// What the watcher holds between polls.
#[derive(Default)]
struct Held {
    destination: Option<Db>,
    mover: Option<Mover>,
    paused: Option<(i64, Paused)>,
    acknowledged: (i64, String),
    beat: Option<Instant>,
    replicator: Option<CancellationToken>,
}

impl InstanceMove {
    /// Routes to the authority of a move in progress before the process serves (no pause
    /// needed: nothing runs yet).
    pub async fn route_at_start(&self) -> anyhow::Result<()> {
        let Some(state) = self.control.load().await? else {
            return Ok(());
        };
        if state.phase.destination_authoritative() {
            let destination = self.connect_destination(&state).await?;
            let paused = self.app.pause(PAUSE_WITHIN).await?;
            self.app.route_to(&paused, &destination);
            tracing::info!(
                phase = state.phase.as_str(),
                "serving from the move's destination"
            );
        }
        Ok(())
    }

    async fn connect_destination(&self, state: &MoveState) -> anyhow::Result<Db> {
        Db::connect_with(
            &state.destination,
            self.config.database_max_connections,
            self.config.database_acquire_timeout,
        )
        .await
    }

    /// Watches the control row until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        let mut held = Held::default();
        let mut poll = POLL_WITHOUT_MOVE;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(poll) => {}
            }
            match self.step(&mut held).await {
                Ok(moving) => {
                    poll = if moving {
                        POLL_DURING_MOVE
                    } else {
                        POLL_WITHOUT_MOVE
                    };
                }
                Err(err) => tracing::warn!(error = %format!("{err:#}"), "database move watcher"),
            }
        }
        if let Some(replicator) = held.replicator.take() {
            replicator.cancel();
        }
        drop(held.paused.take());
        if let Err(err) = self.control.leave(&self.instance).await {
            tracing::warn!(error = %err, "could not remove this instance's move acknowledgement");
        }
    }

    /// One look at the control row; whether a move exists.
    async fn step(&self, held: &mut Held) -> anyhow::Result<bool> {
        let Some(state) = self.control.load().await? else {
            return Ok(false);
        };
        if held.destination.is_none() {
            held.destination = Some(self.connect_destination(&state).await?);
        }
        if held.mover.is_none() {
            let source_url = self.config.database_url();
            held.mover = Some(Mover::open(self.control.clone(), &source_url, &state).await?);
        }
        let destination = held
            .destination
            .clone()
            .ok_or_else(|| anyhow::anyhow!("connected above"))?;
        match state.stage.as_str() {
            STAGE_PAUSE if held.acknowledged.0 < state.epoch => {
                let paused = self.app.pause(PAUSE_WITHIN).await?;
                held.paused = Some((state.epoch, paused));
                self.acknowledge(held, state.epoch, ACK_PAUSED).await?;
            }
            STAGE_FLIP if held.acknowledged != (state.epoch, ACK_FLIPPED.to_owned()) => {
                self.route(held, &state, &destination).await?;
                held.paused = None;
                self.acknowledge(held, state.epoch, ACK_FLIPPED).await?;
            }
            STAGE_ABORT if held.paused.is_some() => {
                held.paused = None;
                self.acknowledge(held, state.epoch, ACK_OPEN).await?;
            }
            "" => {
                // Missed a switch (started late, or a flip without this instance): catch up.
                held.paused = None;
                self.route(held, &state, &destination).await?;
            }
            _ => {}
        }
        if held.beat.is_none_or(|beat| beat.elapsed() >= HEARTBEAT) {
            let (epoch, stage) = held.acknowledged.clone();
            self.acknowledge(
                held,
                epoch.max(0),
                if stage.is_empty() { ACK_OPEN } else { &stage },
            )
            .await?;
        }
        self.keep_replicating(held, state.phase.replicates());
        Ok(true)
    }

    /// Routes the application's database to the authority of `state.phase` (pausing first
    /// unless the switch already paused it).
    async fn route(
        &self,
        held: &mut Held,
        state: &MoveState,
        destination: &Db,
    ) -> anyhow::Result<()> {
        let authority = if state.phase.destination_authoritative() {
            destination
        } else {
            &self.home
        };
        if self.app.routes_like(authority) {
            return Ok(());
        }
        match &held.paused {
            Some((_, paused)) => self.app.route_to(paused, authority),
            None => {
                let paused = self.app.pause(PAUSE_WITHIN).await?;
                self.app.route_to(&paused, authority);
            }
        }
        tracing::info!(phase = state.phase.as_str(), "database move: routed");
        Ok(())
    }

    async fn acknowledge(&self, held: &mut Held, epoch: i64, stage: &str) -> anyhow::Result<()> {
        self.control.ack(&self.instance, epoch, stage).await?;
        held.acknowledged = (epoch, stage.to_owned());
        held.beat = Some(Instant::now());
        Ok(())
    }

    fn keep_replicating(&self, held: &mut Held, wanted: bool) {
        match (wanted, held.replicator.is_some()) {
            (true, false) => {
                let Some(mover) = held.mover.clone() else {
                    return;
                };
                let stop = CancellationToken::new();
                held.replicator = Some(stop.clone());
                tokio::spawn(replicate(mover, stop));
            }
            (false, true) => {
                if let Some(replicator) = held.replicator.take() {
                    replicator.cancel();
                }
            }
            _ => {}
        }
    }
}

/// Copies logged changes across, both ways, until `stop`.
async fn replicate(mover: Mover, stop: CancellationToken) {
    let mut idle = REPLICATOR_IDLE;
    while !stop.is_cancelled() {
        let taken = async {
            anyhow::Ok(
                mover
                    .replicate_once(&mover.source, &mover.destination)
                    .await?
                    + mover
                        .replicate_once(&mover.destination, &mover.source)
                        .await?,
            )
        }
        .await;
        match taken {
            Ok(0) => idle = REPLICATOR_IDLE,
            Ok(taken) => {
                metrics::counter!(super::CHANGES_REPLICATED_TOTAL).increment(taken as u64);
                continue;
            }
            Err(err) => {
                metrics::counter!(super::REPLICATION_FAILURES_TOTAL).increment(1);
                tracing::warn!(error = %format!("{err:#}"), "database move: replication failed; retrying");
                idle = (idle * 2).min(Duration::from_secs(1));
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(idle) => {}
        }
    }
}
