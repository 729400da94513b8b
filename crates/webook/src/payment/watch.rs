//! Active queries of young payments: a pending payment is queried at the provider at the ages
//! of `pay_query_after` (default 1, 5 and 15 minutes after it was recorded), so a payment whose
//! notification was lost is settled within a minute or so rather than by the sweep after its
//! expiry.
//!
//! Data flow: the durable job `payment_watch` (`pay_watch_schedule`, every 15 s; one run at a
//! time in the whole deployment) reads, step by step and in keyset batches, the pending
//! payments that have taken `queries_done` = *n* steps and are older than step *n*'s age. For
//! each it first **claims** the steps now due with a conditional `UPDATE` (from *n* to the
//! number of steps due; a row another run claimed meanwhile is skipped), then asks the provider
//! and applies what it says through the notification's own path
//! ([`PaymentService::apply_transaction`]: `NOTPAY`/`USERPAYING` leave it pending). So each step
//! is taken once per payment whatever the instances and restarts; several steps overdue (a
//! deployment that was down) are taken by one query. A crash between the claim and the answer
//! loses that step (the next step, or the sweep after expiry, covers it).
//!
//! When the provider fails (timeout, 5xx, unreachable) the claim is given back and the payment
//! backs off (`next_query_at`: 15 s, doubling per consecutive failure, at most 5 min); after
//! [`MAX_PROVIDER_FAILURES_PER_RUN`] consecutive failures the run stops, leaving the rest to
//! the next run — a down provider is not hammered. Payments past their expiry are the sweep's
//! ([`super::reconcile`]). Every query is counted by `payment_active_queries_total{outcome}`.

use std::time::Duration;

use async_trait::async_trait;
use scheduler::{
    sql::{Executor, JobRow, Misfire, NewJob, OverlapPolicy, SqlJobStore},
    JobContext,
};

use platform::db::{duration_millis, now_millis};

use super::{
    model::PaymentStatus,
    notify::NotifyError,
    service::{Applied, PaymentService},
    store::BATCH,
};

/// Name of the active-query job and its executor.
pub const WATCH_JOB: &str = "payment_watch";
/// Counter: active queries of young payments, by `outcome` (settled, open, already_settled,
/// recorded, not_found, mismatch, error).
pub const PAYMENT_ACTIVE_QUERIES_TOTAL: &str = "payment_active_queries_total";
/// The default `pay_query_after`: 1, 5 and 15 minutes.
pub const DEFAULT_QUERY_AFTER: [Duration; 3] = [
    Duration::from_secs(60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(15 * 60),
];
/// Consecutive provider failures after which a run stops (the rest wait for the next run).
pub const MAX_PROVIDER_FAILURES_PER_RUN: u32 = 3;
/// The first back-off of a payment whose query failed; it doubles per consecutive failure.
const BACKOFF_FIRST: Duration = Duration::from_secs(15);
/// The longest back-off.
const BACKOFF_MAX: Duration = Duration::from_secs(5 * 60);
/// Longest a run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// Checks `pay_query_after`: ascending, each above 0 and below `expiry`.
pub fn check_query_after(steps: &[Duration], expiry: Duration) -> anyhow::Result<()> {
    let ascending = steps.windows(2).all(|pair| pair[0] < pair[1]);
    let in_range = steps.iter().all(|step| !step.is_zero() && *step < expiry);
    if !ascending || !in_range {
        anyhow::bail!(
            "invalid pay_query_after (WEBOOK_PAY_QUERY_AFTER): ages in ascending order, each \
             above 0 and below pay_expiry, e.g. [\"1m\", \"5m\", \"15m\"] or \"1m, 5m, 15m\""
        );
    }
    Ok(())
}

/// Serde of `pay_query_after`: a list of durations (`["1m", "5m"]`) or one comma-separated
/// text (`"1m, 5m"`, as an environment variable spells it); written as a list.
pub mod durations {
    use std::time::Duration;

    use serde::{de::Error as _, Deserializer, Serialize, Serializer};

    /// Writes each as humantime does (`1m`, `1m 30s`).
    pub fn serialize<S: Serializer>(steps: &[Duration], serializer: S) -> Result<S::Ok, S::Error> {
        steps
            .iter()
            .map(|step| humantime_serde::re::humantime::format_duration(*step).to_string())
            .collect::<Vec<_>>()
            .serialize(serializer)
    }

    /// Reads a list or a comma-separated text of humantime durations.
    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<Duration>, D::Error> {
        platform::config::list_or_comma_separated(de)?
            .iter()
            .map(|text| {
                humantime_serde::re::humantime::parse_duration(text)
                    .map_err(|err| D::Error::custom(format!("{text:?}: {err}")))
            })
            .collect()
    }
}

/// What one run of the watch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchReport {
    /// Queried (each counted once, however many steps its query took).
    pub queried: u64,
    /// Settled by what the provider said (paid or failed).
    pub settled: u64,
    /// Left pending: not paid yet, being paid, or unknown to the provider.
    pub open: u64,
    /// Settled meanwhile, or recorded for a person (a mismatch, a refund).
    pub unchanged: u64,
    /// Not answered (provider or database errors): the step is tried again after a back-off.
    pub errors: u64,
    /// The run stopped early: the provider failed [`MAX_PROVIDER_FAILURES_PER_RUN`] times in a
    /// row, or the run lost its claim.
    pub stopped: bool,
}

/// A pending payment due for a query.
#[derive(Debug, sqlx::FromRow)]
struct Due {
    id: i64,
    trade_no: String,
    provider: String,
    ctime: i64,
    query_errors: i64,
}

/// Queries the pending payments due at `now` for a step of `steps` and applies the answers.
pub async fn watch(
    payments: &PaymentService,
    steps: &[Duration],
    now: i64,
    mut still_owner: impl FnMut() -> bool,
) -> anyhow::Result<WatchReport> {
    let mut report = WatchReport::default();
    let mut failures_in_a_row = 0;
    let ages: Vec<i64> = steps.iter().map(|step| duration_millis(*step)).collect();
    for (step, age) in ages.iter().enumerate() {
        let mut after = 0;
        loop {
            let batch = due(payments, step as i64, now - age, now, after).await?;
            for payment in &batch {
                after = payment.id;
                if !still_owner() || failures_in_a_row >= MAX_PROVIDER_FAILURES_PER_RUN {
                    report.stopped = true;
                    return Ok(report);
                }
                // Every step due now, taken by this one query.
                let reached = ages
                    .iter()
                    .filter(|age| payment.ctime + **age <= now)
                    .count();
                if !claim(payments, payment.id, step as i64, reached as i64).await? {
                    continue;
                }
                report.queried += 1;
                let outcome = query(payments, payment, now).await;
                let label = match &outcome {
                    Outcome::Applied(Applied::Settled(_)) => "settled",
                    Outcome::Applied(Applied::StillOpen) => "open",
                    Outcome::Applied(Applied::AlreadySettled) => "already_settled",
                    Outcome::Applied(Applied::Recorded(_)) => "recorded",
                    Outcome::NotFound => "not_found",
                    Outcome::Mismatch => "mismatch",
                    Outcome::ProviderFailed(_) | Outcome::Failed(_) => "error",
                };
                metrics::counter!(PAYMENT_ACTIVE_QUERIES_TOTAL, "outcome" => label).increment(1);
                match outcome {
                    Outcome::Applied(Applied::Settled(_)) => report.settled += 1,
                    Outcome::Applied(Applied::StillOpen) | Outcome::NotFound => report.open += 1,
                    Outcome::Applied(_) | Outcome::Mismatch => report.unchanged += 1,
                    Outcome::ProviderFailed(err) | Outcome::Failed(err) => {
                        report.errors += 1;
                        tracing::warn!(trade_no = %payment.trade_no, error = %err, "could not query a young payment; backing off");
                        give_back(payments, payment, step as i64, reached as i64, now).await?;
                    }
                }
                if label == "error" {
                    failures_in_a_row += 1;
                } else {
                    failures_in_a_row = 0;
                }
            }
            if batch.len() < BATCH as usize {
                break;
            }
        }
    }
    Ok(report)
}

/// What one query came to.
enum Outcome {
    /// The provider answered and its transaction was applied.
    Applied(Applied),
    /// The provider has no such order (never created, e.g. its prepay failed): left pending.
    NotFound,
    /// The provider's transaction does not match ours: recorded for a person.
    Mismatch,
    /// The provider did not answer.
    ProviderFailed(String),
    /// Our side failed.
    Failed(String),
}

async fn query(payments: &PaymentService, payment: &Due, now: i64) -> Outcome {
    // Asked where it was ordered, also after the deployment switched providers.
    let provider = match payments.provider_named(&payment.provider) {
        Ok(provider) => provider,
        Err(err) => return Outcome::ProviderFailed(err.to_string()),
    };
    match provider.query(&payment.trade_no).await {
        Err(err) => Outcome::ProviderFailed(err.to_string()),
        Ok(None) => Outcome::NotFound,
        Ok(Some(transaction)) => match payments.apply_transaction(&transaction, now).await {
            Ok(applied) => Outcome::Applied(applied),
            Err(NotifyError::Mismatch(_)) => Outcome::Mismatch,
            Err(err) => Outcome::Failed(err.to_string()),
        },
    }
}

/// Up to [`BATCH`] pending payments at step `step` recorded at or before `recorded_by`, not
/// expired and not backing off at `now`, with ids above `after`, by id.
async fn due(
    payments: &PaymentService,
    step: i64,
    recorded_by: i64,
    now: i64,
    after: i64,
) -> sqlx::Result<Vec<Due>> {
    sqlx::query_as(
        "SELECT id, trade_no, provider, ctime, query_errors FROM payments WHERE status = $1 \
         AND queries_done = $2 AND id > $3 AND ctime <= $4 AND expires_at > $5 \
         AND next_query_at <= $5 AND parked_at IS NULL ORDER BY id LIMIT $6",
    )
    .bind(PaymentStatus::Pending.as_str())
    .bind(step)
    .bind(after)
    .bind(recorded_by)
    .bind(now)
    .bind(BATCH)
    .fetch_all(payments.store().db().pool())
    .await
}

/// Takes steps `from`..`to` of payment `id` unless another run took them (or it settled).
async fn claim(payments: &PaymentService, id: i64, from: i64, to: i64) -> sqlx::Result<bool> {
    let changed = sqlx::query(
        "UPDATE payments SET queries_done = $1 WHERE id = $2 AND queries_done = $3 \
         AND status = $4",
    )
    .bind(to)
    .bind(id)
    .bind(from)
    .bind(PaymentStatus::Pending.as_str())
    .execute(payments.store().db().writer())
    .await?
    .rows_affected();
    Ok(changed == 1)
}

/// Gives the steps `from`..`to` of `payment` back after a failed query, backing it off.
async fn give_back(
    payments: &PaymentService,
    payment: &Due,
    from: i64,
    to: i64,
    now: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE payments SET queries_done = $1, query_errors = query_errors + 1, \
         next_query_at = $2 WHERE id = $3 AND queries_done = $4",
    )
    .bind(from)
    .bind(now + duration_millis(backoff(payment.query_errors)))
    .bind(payment.id)
    .bind(to)
    .execute(payments.store().db().writer())
    .await?;
    Ok(())
}

/// How long a payment whose query failed after `errors` earlier failures waits.
fn backoff(errors: i64) -> Duration {
    let doublings = u32::try_from(errors.clamp(0, 16)).unwrap_or(16);
    BACKOFF_FIRST
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(BACKOFF_MAX)
}

/// Creates the durable job `payment_watch` on `schedule` (UTC) unless it exists.
pub async fn ensure_job(jobs: &SqlJobStore, schedule: &str) -> anyhow::Result<()> {
    crate::jobs::ensure_job(
        jobs,
        &NewJob {
            name: WATCH_JOB.to_owned(),
            cron: schedule.to_owned(),
            timezone: "UTC".to_owned(),
            executor: WATCH_JOB.to_owned(),
            cfg: "{}".to_owned(),
            misfire: Misfire::Skip,
            overlap: OverlapPolicy::Forbid,
            timeout_ms: duration_millis(RUN_TIMEOUT),
        },
    )
    .await
}

/// The `payment_watch` executor.
#[derive(Debug, Clone)]
pub struct WatchJob {
    payments: PaymentService,
    steps: Vec<Duration>,
}

impl WatchJob {
    /// The executor querying `payments` at the ages `steps`.
    pub fn new(payments: PaymentService, steps: Vec<Duration>) -> Self {
        Self { payments, steps }
    }
}

#[async_trait]
impl Executor for WatchJob {
    fn name(&self) -> &str {
        WATCH_JOB
    }

    fn check_cfg(&self, cfg: &serde_json::Value) -> Result<(), String> {
        match cfg.as_object() {
            Some(fields) if fields.is_empty() => Ok(()),
            _ => Err(format!("the {WATCH_JOB} executor takes no cfg; use {{}}")),
        }
    }

    async fn execute(&self, _job: &JobRow, ctx: JobContext) -> anyhow::Result<()> {
        let report = watch(&self.payments, &self.steps, now_millis(), || {
            ctx.still_owner()
        })
        .await?;
        if report != WatchReport::default() {
            tracing::info!(?report, "queried young payments");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_bound() {
        assert_eq!(backoff(0), Duration::from_secs(15));
        assert_eq!(backoff(1), Duration::from_secs(30));
        assert_eq!(backoff(3), Duration::from_secs(120));
        assert_eq!(backoff(5), BACKOFF_MAX);
        assert_eq!(backoff(i64::MAX), BACKOFF_MAX);
    }

    #[test]
    fn query_ages_must_ascend_below_the_expiry() {
        let expiry = Duration::from_secs(30 * 60);
        let minutes = |list: &[u64]| -> Vec<Duration> {
            list.iter().map(|m| Duration::from_secs(m * 60)).collect()
        };
        assert!(check_query_after(&DEFAULT_QUERY_AFTER, expiry).is_ok());
        assert!(check_query_after(&[], expiry).is_ok());
        for bad in [&[5, 1][..], &[1, 1], &[1, 30], &[0, 5]] {
            assert!(check_query_after(&minutes(bad), expiry).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn query_ages_read_as_a_list_or_a_comma_separated_text() {
        #[derive(serde::Deserialize, serde::Serialize)]
        struct Steps {
            #[serde(with = "durations")]
            steps: Vec<Duration>,
        }
        let from_text: Steps =
            serde_json::from_value(serde_json::json!({"steps": "1m, 90s,15m"})).unwrap();
        let from_list: Steps =
            serde_json::from_value(serde_json::json!({"steps": ["1m", "1m 30s", "15m"]})).unwrap();
        assert_eq!(from_text.steps, from_list.steps);
        assert_eq!(
            serde_json::to_value(&from_text).unwrap(),
            serde_json::json!({"steps": ["1m", "1m 30s", "15m"]})
        );
        assert!(serde_json::from_value::<Steps>(serde_json::json!({"steps": "soon"})).is_err());
    }
}
