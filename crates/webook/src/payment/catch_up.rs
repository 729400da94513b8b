//! Reconciliation day by day, with a durable record per bill day, so that a day whose bill was
//! not ready, whose run failed or that no run reached (the deployment was down) is reconciled by
//! a later run instead of never.
//!
//! Data flow: each run of the durable job `payment_reconcile` (`pay_reconcile_schedule`, hourly
//! at :30 China Standard Time by default; one run at a time in the whole deployment) takes the
//! window of the last `pay_reconcile_lookback` days (7) whose bill can exist — a day's bill is
//! published after 10:00 China Standard Time the next day ([`latest_bill_day`]) — reads their
//! rows of `payment_reconcile_days`, and reconciles, oldest first, every day not `done` (a
//! `failed` one once its back-off is over) with [`super::reconcile::reconcile_day`]. The outcome
//! is written to the day's row:
//!
//! | outcome of `reconcile_day` | status | next try |
//! | --- | --- | --- |
//! | compared | `done` | never (cfg `{"date": …}` re-runs it) |
//! | `STATEMENT_CREATING` (the bill is being generated) | `not_ready` | the next run |
//! | any other error (timeout, provider down, database) | `failed`, with `last_error` | after 15 min, doubling per failure in a row, at most 6 h |
//!
//! A failing day does not stop the others; the run fails (listed in `job_runs`) when a day
//! failed. After each run the gauge `payment_reconcile_days_behind` counts the days of the window
//! not done, and `/readyz` of the instance that ran it reports under `details.payments` the days
//! more than two days old still not done (nothing when none is). The cfg `{"date":
//! "YYYY-MM-DD"}` reconciles that one day, done or not, and records it the same way.

use std::{collections::HashMap, time::Duration};

use anyhow::anyhow;
use async_trait::async_trait;
use chrono::{Days, NaiveDate, NaiveTime, Utc};
use platform::{
    db::{duration_millis, now_millis},
    status::StatusBoard,
};
use scheduler::{
    sql::{Executor, JobRow},
    JobContext,
};
use serde::Deserialize;

use super::{
    china_today,
    provider::ProviderError,
    reconcile::{reconcile_day, ReconcileReport, RECONCILE_JOB},
    service::PaymentService,
};
use crate::account::Ledger;

/// Gauge: bill days of the look-back window not yet reconciled, after the last run.
pub const PAYMENT_RECONCILE_DAYS_BEHIND: &str = "payment_reconcile_days_behind";
/// The default `pay_reconcile_lookback`: 7 days.
pub const DEFAULT_LOOKBACK: Duration = Duration::from_secs(7 * DAY_SECS);
/// The name `/readyz` reports a stale reconciliation under (`data.details.payments`).
pub const STATUS_NAME: &str = "payments";
/// WeChat's code for a bill still being generated.
pub const STATEMENT_CREATING: &str = "STATEMENT_CREATING";
/// Days after which a bill day still not done is reported on `/readyz`.
const STALE_AFTER_DAYS: u64 = 2;
/// The longest look-back (WeChat keeps bills for three months).
const MAX_LOOKBACK_DAYS: u64 = 90;
/// The first back-off of a failed day; it doubles per failure in a row.
const FAILED_BACKOFF_FIRST: Duration = Duration::from_secs(15 * 60);
/// The longest back-off of a failed day.
const FAILED_BACKOFF_MAX: Duration = Duration::from_secs(6 * 3600);
const DAY_SECS: u64 = 24 * 3600;

/// Checks `pay_reconcile_lookback`: whole days, 1 to 90.
pub fn check_lookback(lookback: Duration) -> anyhow::Result<()> {
    let secs = lookback.as_secs();
    if lookback.subsec_nanos() != 0
        || !secs.is_multiple_of(DAY_SECS)
        || !(1..=MAX_LOOKBACK_DAYS).contains(&(secs / DAY_SECS))
    {
        anyhow::bail!(
            "invalid pay_reconcile_lookback (WEBOOK_PAY_RECONCILE_LOOKBACK): whole days from 1d \
             to {MAX_LOOKBACK_DAYS}d"
        );
    }
    Ok(())
}

/// The most recent bill day whose bill exists at `now` (ms): yesterday from 10:00 China
/// Standard Time, the day before yesterday before 10:00.
pub fn latest_bill_day(now: i64) -> NaiveDate {
    let now = chrono::DateTime::<Utc>::from_timestamp_millis(now).unwrap_or_default();
    let published = NaiveTime::from_hms_opt(10, 0, 0).unwrap_or(NaiveTime::MIN);
    let local = now.with_timezone(&super::china());
    let back = if local.time() >= published { 1 } else { 2 };
    local
        .date_naive()
        .checked_sub_days(Days::new(back))
        .unwrap_or(NaiveDate::MIN)
}

/// Where a bill day stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DayStatus {
    /// Compared.
    Done,
    /// The provider was still generating its bill: tried again next run.
    NotReady,
    /// The comparison failed: tried again after a back-off.
    Failed,
}

impl DayStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::NotReady => "not_ready",
            Self::Failed => "failed",
        }
    }
}

/// What reconciling one day came to.
#[derive(Debug)]
pub struct DayOutcome {
    /// The bill day.
    pub date: NaiveDate,
    /// Where it stands now.
    pub status: DayStatus,
    /// What the comparison found, when it was done.
    pub report: Option<ReconcileReport>,
    /// Why not, when it was not.
    pub error: Option<String>,
}

/// What one catch-up run did.
#[derive(Debug, Default)]
pub struct CatchUpReport {
    /// The days reconciled this run, oldest first.
    pub days: Vec<DayOutcome>,
    /// Days of the window not done after the run, oldest first, each with its status
    /// (`not_ready`, `failed`, or `never` when no run reached it).
    pub behind: Vec<(NaiveDate, &'static str)>,
    /// The run stopped before the end of the window (it lost its claim).
    pub stopped: bool,
}

impl CatchUpReport {
    /// The days that failed this run, with why.
    pub fn failed(&self) -> Vec<String> {
        self.days
            .iter()
            .filter(|day| day.status == DayStatus::Failed)
            .map(|day| format!("{}: {}", day.date, day.error.as_deref().unwrap_or("")))
            .collect()
    }
}

/// A row of `payment_reconcile_days`.
#[derive(Debug, sqlx::FromRow)]
struct DayRow {
    bill_date: String,
    status: String,
    next_try_at: i64,
}

fn text(date: NaiveDate) -> String {
    date.format("%Y-%m-%d").to_string()
}

/// The last `lookback_days` bill days up to [`latest_bill_day`] at `now`, oldest first.
fn window(lookback_days: u64, now: i64) -> Vec<NaiveDate> {
    let latest = latest_bill_day(now);
    (0..lookback_days.max(1))
        .rev()
        .filter_map(|back| latest.checked_sub_days(Days::new(back)))
        .collect()
}

async fn rows(
    payments: &PaymentService,
    from: NaiveDate,
    to: NaiveDate,
) -> sqlx::Result<HashMap<String, DayRow>> {
    let rows: Vec<DayRow> = sqlx::query_as(
        "SELECT bill_date, status, next_try_at FROM payment_reconcile_days \
         WHERE bill_date >= $1 AND bill_date <= $2",
    )
    .bind(text(from))
    .bind(text(to))
    .fetch_all(payments.store().db().pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.bill_date.clone(), row))
        .collect())
}

/// Reconciles every day of the window at `now` not done (a failed one once its back-off is
/// over), oldest first, recording each outcome; stops early when `still_owner` says so. Errors
/// only when the record itself cannot be read or written.
pub async fn catch_up(
    payments: &PaymentService,
    ledger: &Ledger,
    lookback_days: u64,
    now: i64,
    mut still_owner: impl FnMut() -> bool,
) -> anyhow::Result<CatchUpReport> {
    let days = window(lookback_days, now);
    let (Some(first), Some(last)) = (days.first().copied(), days.last().copied()) else {
        return Ok(CatchUpReport::default());
    };
    let known = rows(payments, first, last).await?;
    let mut report = CatchUpReport::default();
    for date in days {
        let row = known.get(&text(date));
        let (due, standing) = match row.map(|row| row.status.as_str()) {
            Some("done") => continue,
            Some("failed") => (row.is_some_and(|row| row.next_try_at <= now), "failed"),
            Some(_) => (true, "not_ready"),
            None => (true, "never"),
        };
        if !due {
            report.behind.push((date, standing));
            continue;
        }
        if report.stopped || !still_owner() {
            report.stopped = true;
            report.behind.push((date, standing));
            continue;
        }
        let outcome = reconcile_and_record(payments, ledger, date, now).await?;
        if outcome.status != DayStatus::Done {
            report.behind.push((date, outcome.status.as_str()));
        }
        report.days.push(outcome);
    }
    Ok(report)
}

/// Reconciles `date` at `now` and records the outcome in its row of `payment_reconcile_days`.
pub async fn reconcile_and_record(
    payments: &PaymentService,
    ledger: &Ledger,
    date: NaiveDate,
    now: i64,
) -> anyhow::Result<DayOutcome> {
    let (status, report, error) = match reconcile_day(payments, ledger, date, now).await {
        Ok(report) => (DayStatus::Done, Some(report), None),
        Err(err) if bill_not_ready(&err) => (DayStatus::NotReady, None, Some(format!("{err:#}"))),
        Err(err) => (DayStatus::Failed, None, Some(format!("{err:#}"))),
    };
    let next_try_at = match status {
        DayStatus::Failed => now + duration_millis(failed_backoff(payments, date).await?),
        DayStatus::Done | DayStatus::NotReady => 0,
    };
    sqlx::query(
        "INSERT INTO payment_reconcile_days (bill_date, status, attempts, last_error, \
         next_try_at, ctime, utime) VALUES ($1, $2, 1, $3, $4, $5, $5) \
         ON CONFLICT (bill_date) DO UPDATE SET status = excluded.status, \
         attempts = payment_reconcile_days.attempts + 1, last_error = excluded.last_error, \
         next_try_at = excluded.next_try_at, utime = excluded.utime",
    )
    .bind(text(date))
    .bind(status.as_str())
    .bind(error.as_deref().unwrap_or(""))
    .bind(next_try_at)
    .bind(now)
    .execute(payments.store().db().writer())
    .await?;
    match (&status, &error) {
        (DayStatus::Done, _) => tracing::info!(%date, ?report, "reconciled a day's payments"),
        (DayStatus::NotReady, _) => {
            tracing::info!(%date, "the provider's bill is not ready yet; tried again next run");
        }
        (DayStatus::Failed, error) => {
            tracing::warn!(%date, error = error.as_deref().unwrap_or(""), "could not reconcile a day's payments");
        }
    }
    Ok(DayOutcome {
        date,
        status,
        report,
        error,
    })
}

/// Whether `err` is the provider saying the bill is still being generated.
fn bill_not_ready(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<ProviderError>(),
            Some(ProviderError::Refused { code, .. }) if code == STATEMENT_CREATING
        )
    })
}

/// How long `date` waits after failing now: [`FAILED_BACKOFF_FIRST`], or twice its last wait when
/// its last try failed too, at most [`FAILED_BACKOFF_MAX`].
async fn failed_backoff(payments: &PaymentService, date: NaiveDate) -> sqlx::Result<Duration> {
    let last: Option<(String, i64, i64)> = sqlx::query_as(
        "SELECT status, next_try_at, utime FROM payment_reconcile_days WHERE bill_date = $1",
    )
    .bind(text(date))
    .fetch_optional(payments.store().db().pool())
    .await?;
    Ok(match last {
        Some((status, next_try_at, utime)) if status == DayStatus::Failed.as_str() => {
            let waited = u64::try_from(next_try_at - utime).unwrap_or(0);
            Duration::from_millis(waited.saturating_mul(2))
                .clamp(FAILED_BACKOFF_FIRST, FAILED_BACKOFF_MAX)
        }
        _ => FAILED_BACKOFF_FIRST,
    })
}

/// The days not done of the window at `now`, oldest first, with their status (after a run of
/// one given day, which does not go through [`catch_up`]).
async fn behind(
    payments: &PaymentService,
    lookback_days: u64,
    now: i64,
) -> sqlx::Result<Vec<(NaiveDate, &'static str)>> {
    let days = window(lookback_days, now);
    let (Some(first), Some(last)) = (days.first().copied(), days.last().copied()) else {
        return Ok(Vec::new());
    };
    let known = rows(payments, first, last).await?;
    Ok(days
        .into_iter()
        .filter_map(
            |date| match known.get(&text(date)).map(|row| row.status.as_str()) {
                Some("done") => None,
                Some("failed") => Some((date, "failed")),
                Some(_) => Some((date, "not_ready")),
                None => Some((date, "never")),
            },
        )
        .collect())
}

/// Sets the gauge and `/readyz`'s `details.payments` from the days `behind` at `now`.
fn publish(status: &StatusBoard, behind: &[(NaiveDate, &'static str)], now: i64) {
    metrics::gauge!(PAYMENT_RECONCILE_DAYS_BEHIND).set(behind.len() as f64);
    let today =
        china_today(chrono::DateTime::<Utc>::from_timestamp_millis(now).unwrap_or_default());
    let stale: Vec<String> = behind
        .iter()
        .filter(|(date, _)| {
            today
                .checked_sub_days(Days::new(STALE_AFTER_DAYS))
                .is_some_and(|limit| *date < limit)
        })
        .map(|(date, standing)| format!("{date} {standing}"))
        .collect();
    if stale.is_empty() {
        status.remove(STATUS_NAME);
    } else {
        status.set(
            STATUS_NAME,
            format!("reconciliation behind: {}", stale.join(", ")),
        );
    }
}

/// `payment_reconcile`'s cfg: one day to reconcile (default: every day of the window not done).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReconcileCfg {
    date: Option<String>,
}

impl ReconcileCfg {
    /// The given day, if any.
    fn date(&self) -> Result<Option<NaiveDate>, String> {
        self.date
            .as_deref()
            .map(|text| {
                NaiveDate::parse_from_str(text, "%Y-%m-%d").map_err(|err| {
                    format!("payment_reconcile cfg date {text:?}: {err}; use YYYY-MM-DD")
                })
            })
            .transpose()
    }
}

/// The `payment_reconcile` executor.
#[derive(Debug, Clone)]
pub struct ReconcileJob {
    payments: PaymentService,
    ledger: Ledger,
    lookback_days: u64,
    status: StatusBoard,
}

impl ReconcileJob {
    /// The executor over `payments` and `ledger`, looking `lookback` back (whole days), reporting
    /// a stale reconciliation on `status`.
    pub fn new(
        payments: PaymentService,
        ledger: Ledger,
        lookback: Duration,
        status: StatusBoard,
    ) -> Self {
        Self {
            payments,
            ledger,
            lookback_days: (lookback.as_secs() / DAY_SECS).max(1),
            status,
        }
    }
}

#[async_trait]
impl Executor for ReconcileJob {
    fn name(&self) -> &str {
        RECONCILE_JOB
    }

    fn check_cfg(&self, cfg: &serde_json::Value) -> Result<(), String> {
        serde_json::from_value::<ReconcileCfg>(cfg.clone())
            .map_err(|err| {
                format!("payment_reconcile cfg: {err}; e.g. {{\"date\": \"2026-12-01\"}} or {{}}")
            })?
            .date()
            .map(drop)
    }

    async fn execute(&self, job: &JobRow, ctx: JobContext) -> anyhow::Result<()> {
        let cfg: ReconcileCfg = serde_json::from_str(&job.cfg)?;
        let now = now_millis();
        if let Some(date) = cfg.date().map_err(|err| anyhow!(err))? {
            let outcome = reconcile_and_record(&self.payments, &self.ledger, date, now).await?;
            publish(
                &self.status,
                &behind(&self.payments, self.lookback_days, now).await?,
                now,
            );
            return match outcome.status {
                DayStatus::Done => Ok(()),
                _ => Err(anyhow!(
                    "{date} is {}: {}",
                    outcome.status.as_str(),
                    outcome.error.unwrap_or_default()
                )),
            };
        }
        let report = catch_up(
            &self.payments,
            &self.ledger,
            self.lookback_days,
            now,
            || ctx.still_owner(),
        )
        .await?;
        publish(&self.status, &report.behind, now);
        let failed = report.failed();
        if !failed.is_empty() {
            return Err(anyhow!(
                "could not reconcile {} day(s) (tried again later): {}",
                failed.len(),
                failed.join("; ")
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap()
            .timestamp_millis()
    }

    fn day(text: &str) -> NaiveDate {
        NaiveDate::parse_from_str(text, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn a_days_bill_counts_from_ten_the_next_morning_in_china() {
        assert_eq!(
            latest_bill_day(at("2026-12-02T09:59:59+08:00")),
            day("2026-11-30")
        );
        assert_eq!(
            latest_bill_day(at("2026-12-02T10:00:00+08:00")),
            day("2026-12-01")
        );
        // 01:30 UTC is already 09:30 in China; 02:30 UTC is 10:30.
        assert_eq!(
            latest_bill_day(at("2026-12-02T01:30:00Z")),
            day("2026-11-30")
        );
        assert_eq!(
            latest_bill_day(at("2026-12-02T02:30:00Z")),
            day("2026-12-01")
        );
    }

    #[test]
    fn the_window_ends_at_the_latest_bill_day_oldest_first() {
        let days = window(3, at("2026-03-01T10:30:00+08:00"));
        assert_eq!(
            days,
            [day("2026-02-26"), day("2026-02-27"), day("2026-02-28")]
        );
    }

    #[test]
    fn the_lookback_is_whole_days_from_one_to_ninety() {
        assert!(check_lookback(DEFAULT_LOOKBACK).is_ok());
        assert!(check_lookback(Duration::from_secs(90 * DAY_SECS)).is_ok());
        for bad in [
            Duration::ZERO,
            Duration::from_secs(3600),
            Duration::from_secs(DAY_SECS + 1),
            Duration::from_secs(91 * DAY_SECS),
        ] {
            assert!(check_lookback(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn statement_creating_is_told_from_other_refusals_even_under_context() {
        let creating = ProviderError::Refused {
            code: STATEMENT_CREATING.to_owned(),
            message: "对账单生成中".to_owned(),
        };
        assert!(bill_not_ready(&anyhow::Error::from(creating.clone())));
        assert!(bill_not_ready(
            &anyhow::Error::from(creating).context("the trade bill of 2026-12-01")
        ));
        let other = ProviderError::Refused {
            code: "SYSTEM_ERROR".to_owned(),
            message: String::new(),
        };
        assert!(!bill_not_ready(&anyhow::Error::from(other)));
        assert!(!bill_not_ready(&anyhow!("timeout")));
    }

    #[test]
    fn stale_days_are_reported_and_cleared_once_caught_up() {
        let status = StatusBoard::default();
        let now = at("2026-12-10T11:00:00+08:00");
        publish(
            &status,
            &[
                (day("2026-12-07"), "failed"),
                (day("2026-12-09"), "not_ready"),
            ],
            now,
        );
        assert_eq!(
            status.snapshot().get(STATUS_NAME).map(String::as_str),
            Some("reconciliation behind: 2026-12-07 failed")
        );
        // Two days old is not yet stale.
        publish(&status, &[(day("2026-12-08"), "never")], now);
        assert_eq!(status.snapshot().get(STATUS_NAME), None);
    }
}
