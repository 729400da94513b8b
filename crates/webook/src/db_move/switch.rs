//! The switch: every instance moves to the neighbouring phase together, and no crash, timeout
//! or slow transaction can freeze the site or lose a write on the way.
//!
//! A switch is a durable task in the control row ([`super::control`]), not a request: the CLI
//! or the console starts it and may go away. Whoever runs it — the *coordinator* — holds a
//! lease ([`LEASE`], renewed every [`RENEW_EVERY`]); any instance (or a later CLI) that finds
//! the lease run out takes the switch over: it aborts a switch that has not flipped and
//! completes one that has ([`Switcher::resolve`]). `webook db-move abort` and the console's
//! abort button do the same at once ([`Switcher::abort`]).
//!
//! The steps, each a compare-and-set on the control row (epoch, stage, coordinator):
//! 1. **pause**: the next epoch, with the *members* — every instance whose sign of life is
//!    recent ([`super::control::MEMBER_WITHIN`]) — fixed now. Each member pauses its queries
//!    (waits for its transactions to end) and acknowledges; each also starts its own deadline
//!    (`db_move_pause_deadline`): past it, without seeing the outcome, it serves again
//!    ([`super::instance`]). The coordinator's own cutoff is a margin earlier
//!    ([`cutoff_margin`]); whatever is not done by then is aborted.
//! 2. **fence** (when the authority changes): the old authority's fence closes
//!    ([`Side::set_fence`]). It waits for application writes in flight there and then
//!    refuses every later one in the database itself — so an instance that was not a member,
//!    was stopped, missed the pause or outlived its deadline can never commit a write there
//!    after the drain: it gets an error instead of an acknowledgement.
//! 3. **drain**: both change logs replicated empty; **sequences** carried to the new
//!    authority; its fence opened.
//! 4. **flip**: phase := target. The commit point: from here the switch can only complete.
//!    Members route to the new authority and acknowledge; then the stage is cleared.
//!
//! Abort: stage → aborting (from then no flip can happen), fences back (the new authority
//! closed, the old one open), stage → abort. A crash in between leaves `aborting` with a
//! lease that runs out; the taker-over applies the fences again (they are idempotent).
//!
//! The model of this protocol and its check are in `model.rs` (tests).

use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use platform::db::now_millis;

use super::{
    control::{
        Control, MoveState, Phase, ACK_FLIPPED, ACK_PAUSED, MEMBER_WITHIN, STAGE_ABORT,
        STAGE_ABORTING, STAGE_FLIP, STAGE_IDLE, STAGE_PAUSE,
    },
    work::Mover,
};

/// Fault injection for the chaos tests: a coordinator whose environment has
/// `WEBOOK_DB_MOVE_STALL=<point>` stops at that point of every switch it runs and never goes on
/// (it is killed, stopped or left hanging there). Points: `paused` (stage pause written),
/// `acknowledged`, `fenced`, `drained`, `flipped` (before the members' acknowledgements).
pub const STALL_ENV: &str = "WEBOOK_DB_MOVE_STALL";

async fn stall_point(point: &str) {
    if std::env::var(STALL_ENV).is_ok_and(|stall| stall == point) {
        tracing::warn!(
            point,
            "database move: the coordinator stalls here ({STALL_ENV})"
        );
        std::future::pending::<()>().await;
    }
}

/// How long a coordinator's lease lasts without renewal.
pub const LEASE: Duration = Duration::from_secs(3);
/// How often a running coordinator renews its lease.
const RENEW_EVERY: Duration = Duration::from_millis(500);
/// How long a flipped switch waits for its members to acknowledge the new phase.
const FLIP_ACKS_WITHIN: Duration = Duration::from_secs(10);
/// How long restoring a fence may wait when aborting.
const ABORT_FENCE_WITHIN: Duration = Duration::from_secs(5);
/// The most differences of the last validation a switch to DstFirst re-checks in its pause;
/// with more it is refused before pausing.
const INLINE_VERIFY_LIMIT: i64 = 2_000;
/// How often acknowledgements are looked for (rows other processes write; there is no event).
const ACK_POLL: Duration = Duration::from_millis(10);

/// Counter: switches, by outcome (`flipped`, `aborted`, `taken_over`).
pub const SWITCHES_TOTAL: &str = "db_move_switches_total";
/// Histogram: how long a switch held the site paused, from its pause to its flip.
pub const SWITCH_PAUSE_SECONDS: &str = "db_move_switch_pause_seconds";

/// How much earlier than the instances' deadline the coordinator gives up: time for the flip
/// to reach them (they look every 100 ms).
pub fn cutoff_margin(deadline: Duration) -> Duration {
    (deadline / 4).min(Duration::from_secs(1))
}

/// The lease end for a lease taken now.
fn lease_from_now() -> i64 {
    now_millis() + platform::db::duration_millis(LEASE)
}

/// Runs, aborts and takes over switches for one process; owns what it needs, so a switch can
/// run in a task of its own (a request or a watcher only starts it).
pub struct Switcher {
    pub control: Control,
    pub mover: Mover,
    /// Who this coordinator is (an instance's name, or the CLI's).
    pub me: String,
    /// The instances' pause deadline (`db_move_pause_deadline`).
    pub deadline: Duration,
}

/// The sides of a switch from `phase` to `target`: (old authority, new authority), and whether
/// the authority changes at all.
fn sides(
    mover: &Mover,
    phase: Phase,
    target: Phase,
) -> (&super::tables::Side, &super::tables::Side, bool) {
    let (old, other) = mover.authority(phase);
    let changes = phase.destination_authoritative() != target.destination_authoritative();
    (old, other, changes)
}

impl Switcher {
    /// Switches every instance to `target`, a neighbour of the current phase. Returns what
    /// happened (for the operator); an error when it was refused or aborted — then every
    /// instance keeps the old phase and the site serves again.
    pub async fn switch(&self, target: Phase) -> anyhow::Result<String> {
        let mut state = self
            .control
            .load()
            .await?
            .context("no move has been started")?;
        if state.orphaned(now_millis()) {
            self.resolve(&state).await?;
            state = self.control.load().await?.context("the move vanished")?;
        }
        check_switch(&state, target)?;
        let members = self.control.alive(MEMBER_WITHIN).await?;
        let began = Instant::now();
        let Some(token) = self
            .control
            .begin_switch(&state, target, &members, &self.me, lease_from_now())
            .await?
        else {
            anyhow::bail!("another switch began meanwhile: see the status");
        };
        let begin = began.elapsed();
        let epoch = state.epoch + 1;
        tracing::info!(epoch, target = target.as_str(), members = ?members, "database move: switch paused");
        let lost = CancellationToken::new();
        let renewing = CancellationToken::new();
        let cutoff = began + self.deadline.saturating_sub(cutoff_margin(self.deadline));
        // Renewed up to the cutoff only: a coordinator that hangs past it (alive, but stuck
        // with the old authority fenced) loses the switch to a taker-over that aborts it.
        tokio::spawn(renew(
            self.control.clone(),
            epoch,
            self.me.to_owned(),
            cutoff,
            renewing.clone(),
            lost.clone(),
        ));
        let paused = self
            .pause_to_flip(&state, target, (epoch, token), &members, cutoff, &lost)
            .await;
        let result = match paused {
            Ok(steps) => {
                stall_point("flipped").await;
                let pause = began.elapsed();
                metrics::histogram!(SWITCH_PAUSE_SECONDS).record(pause.as_secs_f64());
                let message = format!(
                    "switched to {} (epoch {epoch}): paused {} ms (begin {} ms, {steps})",
                    target.as_str(),
                    pause.as_millis(),
                    begin.as_millis()
                );
                self.complete(epoch, &members, &message).await?;
                metrics::counter!(SWITCHES_TOTAL, "outcome" => "flipped").increment(1);
                Ok(message)
            }
            Err(err) => {
                let reason = format!("{err:#}");
                self.abort_epoch((epoch, token), state.phase, target, &reason)
                    .await?;
                metrics::counter!(SWITCHES_TOTAL, "outcome" => "aborted").increment(1);
                Err(anyhow::anyhow!(
                    "the switch was aborted, every instance keeps {}: {reason}",
                    state.phase.as_str()
                ))
            }
        };
        renewing.cancel();
        result
    }

    /// Steps 1–4 of the module docs, up to the flip; a description of how long each took.
    async fn pause_to_flip(
        &self,
        state: &MoveState,
        target: Phase,
        (epoch, token): (i64, i64),
        members: &[String],
        cutoff: Instant,
        lost: &CancellationToken,
    ) -> anyhow::Result<String> {
        let remaining = || cutoff.saturating_duration_since(Instant::now());
        stall_point("paused").await;
        let step = Instant::now();
        loop {
            let waiting = self
                .control
                .not_acknowledged(members, epoch, ACK_PAUSED)
                .await?;
            if waiting.is_empty() {
                break;
            }
            if remaining().is_zero() {
                anyhow::bail!(
                    "instances {} did not pause in time (a transaction still running, or the \
                     instance stopped)",
                    waiting.join(", ")
                );
            }
            if lost.is_cancelled() {
                anyhow::bail!("this coordinator lost the switch to another");
            }
            tokio::time::sleep(ACK_POLL).await;
        }
        let acks = step.elapsed();
        stall_point("acknowledged").await;
        let (old, new, authority_changes) = sides(&self.mover, state.phase, target);
        let step = Instant::now();
        if authority_changes {
            old.set_fence(true, token, remaining())
                .await
                .context("closing the old authority's fence (a write transaction still running)")?;
        }
        let fence = step.elapsed();
        stall_point("fenced").await;
        let step = Instant::now();
        if state.phase.replicates() {
            tokio::time::timeout(remaining(), self.mover.drain())
                .await
                .map_err(|_| anyhow::anyhow!("the change logs did not drain in time"))??;
        }
        let drain = step.elapsed();
        stall_point("drained").await;
        let step = Instant::now();
        if state.phase == Phase::SrcFirst && target == Phase::DstFirst {
            // The validation's differences compared again now that nothing changes: those
            // that were only in flight are gone; any left is a real one.
            let at = state
                .validation
                .as_ref()
                .map_or(0, |validation| validation.at);
            let differing = tokio::time::timeout(remaining(), self.mover.verify_findings(at))
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "re-checking the validation's differences did not finish in time"
                    )
                })??;
            if !differing.is_empty() {
                anyhow::bail!(
                    "{} rows still differ with nothing in flight ({}{}): fix them (webook \
                     db-move fix), validate again, then switch",
                    differing.len(),
                    differing
                        .iter()
                        .take(5)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                    if differing.len() > 5 { ", …" } else { "" }
                );
            }
        }
        let verify = step.elapsed();
        let step = Instant::now();
        let authority = if target.destination_authoritative() {
            &self.mover.destination
        } else {
            &self.mover.source
        };
        tokio::time::timeout(remaining(), authority.carry_sequences(&self.mover.tables))
            .await
            .map_err(|_| anyhow::anyhow!("carrying the sequences did not finish in time"))??;
        if authority_changes {
            new.set_fence(false, token, remaining())
                .await
                .context("opening the new authority's fence")?;
        }
        let sequences = step.elapsed();
        let step = Instant::now();
        if remaining().is_zero() {
            anyhow::bail!("the pause reached its deadline before the flip");
        }
        if lost.is_cancelled()
            || !self
                .control
                .advance(epoch, &self.me, &[STAGE_PAUSE], STAGE_FLIP, target, None)
                .await?
        {
            anyhow::bail!("this coordinator lost the switch to another");
        }
        Ok(format!(
            "acknowledgements {} ms, fence {} ms, drain {} ms, verify {} ms, sequences {} ms, \
             flip {} ms",
            acks.as_millis(),
            fence.as_millis(),
            drain.as_millis(),
            verify.as_millis(),
            sequences.as_millis(),
            step.elapsed().as_millis()
        ))
    }

    /// After the flip: waits (bounded) for the members to acknowledge the new phase, then
    /// clears the stage with `message` as the outcome.
    async fn complete(&self, epoch: i64, members: &[String], message: &str) -> anyhow::Result<()> {
        let until = Instant::now() + FLIP_ACKS_WITHIN;
        let mut outcome = message.to_owned();
        loop {
            // The flip is made: this wait only reports who has not routed yet. It renews the
            // lease itself (a coordinator that hangs here stops renewing), so that the others
            // do not take over a switch that is only waiting — and deposed, it stops.
            if !self
                .control
                .renew(epoch, &self.me, lease_from_now())
                .await?
            {
                return Ok(());
            }
            let waiting = self
                .control
                .not_acknowledged(members, epoch, ACK_FLIPPED)
                .await?;
            if waiting.is_empty() {
                break;
            }
            if Instant::now() >= until {
                // They route when they look again (or at their restart); the fence keeps
                // their writes off the old authority meanwhile.
                outcome = format!("{message}; not yet acknowledged by {}", waiting.join(", "));
                break;
            }
            tokio::time::sleep(ACK_POLL).await;
        }
        let state = self.control.load().await?.context("the move vanished")?;
        self.control
            .advance(
                epoch,
                &self.me,
                &[STAGE_FLIP],
                STAGE_IDLE,
                state.phase,
                Some(&outcome),
            )
            .await?;
        Ok(())
    }

    /// Aborts the switch of `epoch` (from `phase` to `target`) that this coordinator runs with
    /// fence token `token`: stage aborting (from then no flip can happen), fences restored,
    /// stage abort. A coordinator deposed meanwhile touches nothing: its successor ends the
    /// switch, and the fences would refuse its older token anyway.
    async fn abort_epoch(
        &self,
        (epoch, token): (i64, i64),
        phase: Phase,
        target: Phase,
        reason: &str,
    ) -> anyhow::Result<()> {
        tracing::warn!(epoch, reason, "database move: aborting the switch");
        if !self
            .control
            .advance(
                epoch,
                &self.me,
                &[STAGE_PAUSE, STAGE_ABORTING],
                STAGE_ABORTING,
                phase,
                Some(reason),
            )
            .await?
        {
            return Ok(());
        }
        let (old, new, authority_changes) = sides(&self.mover, phase, target);
        if authority_changes {
            new.set_fence(true, token, ABORT_FENCE_WITHIN)
                .await
                .context("closing the new authority's fence again")?;
            old.set_fence(false, token, ABORT_FENCE_WITHIN)
                .await
                .context("opening the old authority's fence again")?;
        }
        self.control
            .advance(epoch, &self.me, &[STAGE_ABORTING], STAGE_ABORT, phase, None)
            .await?;
        Ok(())
    }

    /// Ends the switch of an orphaned `state` (its coordinator's lease ran out): aborts it
    /// before the flip, completes it after. Returns what it did, or `None` when another was
    /// quicker.
    pub async fn resolve(&self, state: &MoveState) -> anyhow::Result<Option<String>> {
        let Some(token) = self
            .control
            .take_over(state, &self.me, lease_from_now())
            .await?
        else {
            return Ok(None);
        };
        metrics::counter!(SWITCHES_TOTAL, "outcome" => "taken_over").increment(1);
        let gone = if state.coordinator.is_empty() {
            "nobody".to_owned()
        } else {
            state.coordinator.clone()
        };
        self.finish_taken(state, token, &format!("the coordinator {gone} went away"))
            .await
            .map(Some)
    }

    /// Aborts the switch in progress at once, whoever runs it (the operator's abort); a switch
    /// that already flipped is completed instead.
    pub async fn abort(&self) -> anyhow::Result<String> {
        let state = self
            .control
            .load()
            .await?
            .context("no move has been started")?;
        if !state.switching() {
            anyhow::bail!("no switch is in progress (stage {:?})", state.stage);
        }
        let Some(token) = self
            .control
            .take_over(&state, &self.me, lease_from_now())
            .await?
        else {
            anyhow::bail!("the switch moved on meanwhile: see the status and try again");
        };
        self.finish_taken(&state, token, "aborted by the operator")
            .await
    }

    async fn finish_taken(
        &self,
        state: &MoveState,
        token: i64,
        why: &str,
    ) -> anyhow::Result<String> {
        // Keeps the lease while ending it.
        let renewing = CancellationToken::new();
        tokio::spawn(renew(
            self.control.clone(),
            state.epoch,
            self.me.to_owned(),
            Instant::now() + FLIP_ACKS_WITHIN + ABORT_FENCE_WITHIN * 2,
            renewing.clone(),
            CancellationToken::new(),
        ));
        let ended = async {
            if state.stage == STAGE_FLIP {
                let message = format!(
                    "switched to {} (epoch {}); completed by {} after {why}",
                    state.phase.as_str(),
                    state.epoch,
                    self.me
                );
                self.complete(state.epoch, &state.members, &message).await?;
                anyhow::Ok(message)
            } else {
                let reason = format!("{why} at stage {}; aborted by {}", state.stage, self.me);
                self.abort_epoch((state.epoch, token), state.phase, state.target, &reason)
                    .await?;
                Ok(format!(
                    "the switch to {} was aborted, every instance keeps {}: {reason}",
                    state.target.as_str(),
                    state.phase.as_str()
                ))
            }
        }
        .await;
        renewing.cancel();
        ended
    }
}

/// Refuses a switch that may not begin now (module docs of [`super`]).
fn check_switch(state: &MoveState, target: Phase) -> anyhow::Result<()> {
    if state.stage == super::STAGE_FINISHED {
        anyhow::bail!("the move is finished");
    }
    if state.switching() {
        anyhow::bail!(
            "another switch is in progress (stage {}, run by {}): wait for it, or abort it \
             (webook db-move abort)",
            state.stage,
            state.coordinator
        );
    }
    if (state.phase.position() - target.position()).abs() != 1 {
        anyhow::bail!(
            "from {} the move can only switch to a neighbouring phase (SrcOnly ↔ SrcFirst ↔ \
             DstFirst ↔ DstOnly), not to {}",
            state.phase.as_str(),
            target.as_str()
        );
    }
    if target == Phase::DstFirst && state.phase == Phase::SrcFirst {
        if state.tables.is_empty() {
            anyhow::bail!("nothing has been copied yet: run the copy first");
        }
        if state.tables.iter().any(|table| !table.done) {
            anyhow::bail!("the copy has not finished: the destination is not complete yet");
        }
        let refusal = match &state.validation {
            None => Some("no validation has run".to_owned()),
            Some(validation) if validation.since.is_some() => {
                Some("the last validation covered only recent changes".to_owned())
            }
            Some(validation) if validation.phase != Some(Phase::SrcFirst) => {
                Some("the last validation ran before SrcFirst".to_owned())
            }
            Some(validation) if !validation.after_copy => {
                Some("the last validation began before the copy finished".to_owned())
            }
            Some(validation) if validation.findings > INLINE_VERIFY_LIMIT => Some(format!(
                "the last validation found {} differences, more than the pause re-checks \
                 ({INLINE_VERIFY_LIMIT})",
                validation.findings
            )),
            Some(_) => None,
        };
        if let Some(refusal) = refusal {
            anyhow::bail!(
                "the destination becomes authoritative only after a full validation in SrcFirst \
                 begun after the copy ({refusal}): validate (and fix) first"
            );
        }
    }
    Ok(())
}

/// Renews `coordinator`'s lease on `epoch` until `stop`, but not past `until`; cancels `lost`
/// when it no longer runs the switch.
async fn renew(
    control: Control,
    epoch: i64,
    coordinator: String,
    until: Instant,
    stop: CancellationToken,
    lost: CancellationToken,
) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(RENEW_EVERY) => {}
        }
        if Instant::now() >= until {
            return;
        }
        match control.renew(epoch, &coordinator, lease_from_now()).await {
            Ok(true) => {}
            Ok(false) => {
                lost.cancel();
                return;
            }
            Err(err) => {
                tracing::warn!(error = %format!("{err:#}"), "database move: renewing the switch's lease");
            }
        }
    }
}
