//! The move as each serving process takes part in it: a watcher of the control row that
//! routes this process's [`Db`] to the authority of the phase, takes its part in a switch
//! ([`super::switch`]: pause, acknowledge, flip, acknowledge), runs the replicator while the
//! phase copies changes across (SrcFirst, DstFirst), and takes over a switch whose coordinator
//! went away.
//!
//! **Its own deadline.** A pause this process acknowledged ends by itself after
//! `db_move_pause_deadline` if the flip or the abort has not been seen by then: a separate
//! timer drops the pause whatever the watcher is waiting for. The process serves again on the
//! phase it was in; should the switch flip after all, the old authority's fence refuses its
//! writes until it sees the flip a poll later. A sign of life is written by a task of its own,
//! so a long pause or a slow control query never makes a live process look dead. Likewise a
//! takeover runs in a task of its own: completing an orphaned switch may wait seconds for
//! acknowledgements, and a watcher busy with it would miss the next switch's pause.
//!
//! **Starting during a switch.** [`InstanceMove::route_at_start`] registers the process (so a
//! switch beginning now counts it as a member) and, when a switch is in progress, waits for
//! its outcome — taking it over if its coordinator went away — before the process serves.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio_util::sync::CancellationToken;

use platform::{
    config::Config,
    db::{now_millis, Db, Paused},
};

use super::{
    control::{
        Control, MoveState, ACK_FLIPPED, ACK_OPEN, ACK_PAUSED, STAGE_ABORT, STAGE_ABORTING,
        STAGE_FLIP, STAGE_IDLE, STAGE_PAUSE,
    },
    switch::Switcher,
    work::Mover,
};

/// How often the control row is read while a move exists, and otherwise.
const POLL_DURING_MOVE: Duration = Duration::from_millis(100);
const POLL_WITHOUT_MOVE: Duration = Duration::from_secs(1);
/// How often an instance renews its sign of life.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long routing at start or after a missed switch may wait for this process's connections.
const ROUTE_WITHIN: Duration = Duration::from_secs(5);
/// How long the replicator waits when both change logs were empty.
const REPLICATOR_IDLE: Duration = Duration::from_millis(20);
/// How long a process starting during a switch waits for its outcome before giving up.
const START_WAIT: Duration = Duration::from_secs(30);

/// Counter: pauses this process ended by its own deadline (the outcome did not come in time).
pub const PAUSE_EXPIRED_TOTAL: &str = "db_move_pause_expired_total";
/// Histogram: how long this process's queries were paused by a switch.
pub const INSTANCE_PAUSE_SECONDS: &str = "db_move_instance_pause_seconds";

/// This process's part in a move.
pub struct InstanceMove {
    pub control: Control,
    /// The source (what the configuration names), never re-routed.
    pub home: Db,
    /// The application's database, routed by the move.
    pub app: Db,
    pub instance: String,
    pub config: Config,
    /// `db_move_pause_deadline`.
    pub deadline: Duration,
    /// Where `/readyz` reads this process's part in the move (`details.db_move`).
    pub status: platform::ops::StatusBoard,
}

/// The pause of one epoch, shared with its deadline timer.
type PauseSlot = Arc<Mutex<Option<(i64, Paused, Instant)>>>;

/// What the watcher holds between polls.
#[derive(Default)]
struct Held {
    destination: Option<Db>,
    mover: Option<Mover>,
    paused: PauseSlot,
    /// The last epoch whose pause this process took part in (paused, or tried to).
    paused_epoch: i64,
    acknowledged: (i64, String),
    replicator: Option<CancellationToken>,
    /// A takeover of an orphaned switch in progress: it runs beside the watcher, which must
    /// keep acknowledging pauses meanwhile (a takeover may wait seconds for acknowledgements).
    takeover: Option<tokio::task::JoinHandle<()>>,
    /// The replicator's last failure (ms since the epoch) and its message.
    replication_failure: Arc<Mutex<Option<(i64, String)>>>,
}

impl InstanceMove {
    /// Registers this process and routes it to the authority of a move in progress before it
    /// serves; waits for a switch in progress to end first (module docs).
    pub async fn route_at_start(&self) -> anyhow::Result<()> {
        let Some(mut state) = self.control.load().await? else {
            return Ok(());
        };
        self.control.heartbeat(&self.instance).await?;
        let until = Instant::now() + START_WAIT;
        while state.switching() && state.stage != STAGE_FLIP {
            if state.orphaned(now_millis()) {
                let source_url = self.config.database_url();
                let mover = Mover::open(self.control.clone(), &source_url, &state).await?;
                let switcher = self.switcher(mover);
                if let Some(done) = switcher.resolve(&state).await? {
                    tracing::warn!(outcome = %done, "database move: ended a switch at start");
                }
            } else if Instant::now() >= until {
                anyhow::bail!(
                    "a database move switch (stage {}) did not end within {START_WAIT:?}: \
                     see webook db-move status, or webook db-move abort",
                    state.stage
                );
            } else {
                tracing::info!(stage = %state.stage, "database move: waiting for the switch in progress");
                // Another process's switch; its end is a row it writes.
                tokio::time::sleep(POLL_DURING_MOVE).await;
            }
            state = self
                .control
                .load()
                .await?
                .ok_or_else(|| anyhow::anyhow!("the move vanished"))?;
        }
        if state.phase.destination_authoritative() {
            let destination = self.connect_destination(&state).await?;
            let paused = self.app.pause(ROUTE_WITHIN).await?;
            self.app.route_to(&paused, &destination);
            tracing::info!(
                phase = state.phase.as_str(),
                "serving from the move's destination"
            );
        }
        Ok(())
    }

    fn switcher(&self, mover: Mover) -> Switcher {
        Switcher {
            control: self.control.clone(),
            mover,
            me: self.instance.clone(),
            deadline: self.deadline,
        }
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
        let beating = CancellationToken::new();
        tokio::spawn(heartbeat(
            self.control.clone(),
            self.instance.clone(),
            beating.clone(),
        ));
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
        beating.cancel();
        if let Some(takeover) = held.takeover.take() {
            // Its switch is left to the other instances' (or the next start's) takeover.
            takeover.abort();
        }
        if let Some(replicator) = held.replicator.take() {
            replicator.cancel();
        }
        unpause(&held.paused);
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
            STAGE_PAUSE if held.paused_epoch < state.epoch => {
                held.paused_epoch = state.epoch;
                // Waits for this process's transactions, at most the deadline: one that runs
                // longer makes the coordinator abort at its cutoff. The deadline counts from
                // here, the wait included.
                let started = Instant::now();
                let paused = self.app.pause(self.deadline).await?;
                *lock(&held.paused) = Some((state.epoch, paused, started));
                tokio::spawn(expire(
                    held.paused.clone(),
                    state.epoch,
                    self.deadline.saturating_sub(started.elapsed()),
                ));
                self.acknowledge(held, state.epoch, ACK_PAUSED).await?;
            }
            STAGE_FLIP | STAGE_IDLE
                if held.acknowledged != (state.epoch, ACK_FLIPPED.to_owned()) =>
            {
                // Flipped (or a switch this process missed: started late, stopped meanwhile):
                // routed while still paused, then open again.
                self.route(held, &state, &destination).await?;
                unpause(&held.paused);
                if state.stage == STAGE_FLIP {
                    self.acknowledge(held, state.epoch, ACK_FLIPPED).await?;
                }
            }
            STAGE_ABORTING | STAGE_ABORT if unpause(&held.paused) => {
                self.acknowledge(held, state.epoch, ACK_OPEN).await?;
            }
            _ => {}
        }
        if state.orphaned(now_millis()) {
            self.take_over(held, state.clone());
        }
        self.keep_replicating(held, state.phase.replicates());
        self.status.set("db_move", describe(held, &state));
        Ok(true)
    }

    /// Ends the orphaned switch of `state` in a task of its own, unless one runs already.
    fn take_over(&self, held: &mut Held, state: MoveState) {
        if held
            .takeover
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let Some(mover) = held.mover.clone() else {
            return;
        };
        let switcher = self.switcher(mover);
        held.takeover = Some(tokio::spawn(async move {
            match switcher.resolve(&state).await {
                Ok(Some(done)) => tracing::warn!(
                    outcome = %done,
                    "database move: took over a switch whose coordinator went away"
                ),
                Ok(None) => {}
                Err(err) => tracing::warn!(
                    error = %format!("{err:#}"),
                    "database move: taking over a switch whose coordinator went away"
                ),
            }
        }));
    }

    /// Routes the application's database to the authority of `state.phase`, under the pause
    /// this process holds or a short one of its own.
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
        let routed = match lock(&held.paused).as_ref() {
            Some((_, paused, _)) => {
                self.app.route_to(paused, authority);
                true
            }
            None => false,
        };
        if !routed {
            let paused = self.app.pause(ROUTE_WITHIN).await?;
            self.app.route_to(&paused, authority);
        }
        tracing::info!(phase = state.phase.as_str(), "database move: routed");
        Ok(())
    }

    async fn acknowledge(&self, held: &mut Held, epoch: i64, stage: &str) -> anyhow::Result<()> {
        self.control.ack(&self.instance, epoch, stage).await?;
        held.acknowledged = (epoch, stage.to_owned());
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
                tokio::spawn(replicate(mover, stop, held.replication_failure.clone()));
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

fn lock(slot: &PauseSlot) -> std::sync::MutexGuard<'_, Option<(i64, Paused, Instant)>> {
    // A panic while holding it cannot leave the slot half-written: take the value as it is.
    slot.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Ends the pause this process holds, if any; whether there was one.
fn unpause(slot: &PauseSlot) -> bool {
    let Some((_, paused, since)) = lock(slot).take() else {
        return false;
    };
    drop(paused);
    metrics::histogram!(INSTANCE_PAUSE_SECONDS).record(since.elapsed().as_secs_f64());
    true
}

/// The deadline of the pause of `epoch` (module docs).
async fn expire(slot: PauseSlot, epoch: i64, deadline: Duration) {
    tokio::time::sleep(deadline).await;
    let expired = {
        let mut held = lock(&slot);
        match held.as_ref() {
            Some((paused_epoch, _, _)) if *paused_epoch == epoch => held.take(),
            _ => None,
        }
    };
    if let Some((_, paused, since)) = expired {
        drop(paused);
        metrics::histogram!(INSTANCE_PAUSE_SECONDS).record(since.elapsed().as_secs_f64());
        metrics::counter!(PAUSE_EXPIRED_TOTAL).increment(1);
        tracing::warn!(
            epoch,
            ?deadline,
            "database move: the switch did not end within the pause deadline; serving again \
             on the current phase"
        );
    }
}

/// Renews this process's sign of life until `stop`.
async fn heartbeat(control: Control, instance: String, stop: CancellationToken) {
    loop {
        if let Err(err) = control.heartbeat(&instance).await {
            tracing::warn!(error = %format!("{err:#}"), "database move: sign of life");
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(HEARTBEAT) => {}
        }
    }
}

/// How this process takes part in the move, for `/readyz`: `ok: …` or `degraded: …` (a pause
/// that outlived its deadline while the switch still runs, a replicator failing now).
fn describe(held: &Held, state: &MoveState) -> String {
    let paused = lock(&held.paused)
        .as_ref()
        .map(|(epoch, _, since)| (*epoch, since.elapsed()));
    if let Some((epoch, since)) = paused {
        return format!(
            "ok: paused by the switch to {} (epoch {epoch}) for {} ms",
            state.target.as_str(),
            since.as_millis()
        );
    }
    if state.stage == STAGE_PAUSE && held.paused_epoch == state.epoch {
        return format!(
            "degraded: the switch to {} (epoch {}) outlived this instance's pause deadline; \
             serving on {}",
            state.target.as_str(),
            state.epoch,
            state.phase.as_str()
        );
    }
    let failure = held
        .replication_failure
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    match failure {
        Some((at, error)) if state.phase.replicates() && now_millis() - at < 5_000 => {
            format!("degraded: replication failing: {error}")
        }
        _ if state.switching() => format!(
            "ok: switch to {} at stage {}",
            state.target.as_str(),
            state.stage
        ),
        _ => format!("ok: phase {}", state.phase.as_str()),
    }
}

/// Copies logged changes across, both ways, until `stop`; records its last failure.
async fn replicate(
    mover: Mover,
    stop: CancellationToken,
    failure: Arc<Mutex<Option<(i64, String)>>>,
) {
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
                *failure
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some((now_millis(), format!("{err:#}")));
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
