//! Reconciliation with the payment provider, on the SQL scheduler (one run at a time in the
//! whole deployment), in keyset batches — never OFFSET over a set that shrinks as it is worked.
//!
//! - **Sweep** (durable job `payment_sweep`, every minute): pending payments past their expiry
//!   (plus a minute's grace) are queried at the provider and settled by what it says — a lost
//!   notification is settled here; an unpaid order is closed at the provider first, so it cannot
//!   be paid after we call it failed ([`PaymentService::settle_expired`]).
//! - **Daily** (durable job `payment_reconcile`, 10:30 China Standard Time, after WeChat
//!   publishes the previous day's bill; cfg `{"date": "YYYY-MM-DD"}` re-runs a given day): the
//!   provider's trade bill is compared with our payments and the ledger, in both directions.
//!   Every difference becomes a row of `payment_discrepancies` (once per day, kind and trade),
//!   counted by `payment_discrepancies_total{kind}`, listed at `GET /payments/discrepancies`:
//!
//! | kind | found when | what happens |
//! | --- | --- | --- |
//! | `missing_payment` | the bill has a paid trade we have no payment for | open, for a person |
//! | `amount_mismatch` | the bill's amount differs from ours | open, for a person |
//! | `unsettled_payment` | the bill has it paid, ours is still pending | fixed: settled from the provider's (signed) answer to a query |
//! | `paid_after_failure` | the bill has it paid, ours failed | open, for a person |
//! | `payment_not_in_bill` | ours succeeded that day, the bill does not have it | open, for a person |
//! | `payment_without_credit` | ours succeeded, the ledger has no posting for it | fixed: its event is recorded again; the seller posts once |
//! | `refunded` | the bill has a refund | open, for a person |
//! | `ledger_unbalanced` | the ledger does not sum to 0, or a balance is not its entries' sum | open, for a person |
//!
//! Notifications add `unknown_trade`, `notified_amount_mismatch`, `paid_after_failure` and
//! `refunded` rows (bill date `""`) when they are checked ([`PaymentService::apply_transaction`]).
//!
//! Which days are compared, and when, is [`super::catch_up`]'s: each run of `payment_reconcile`
//! (hourly at :30 by default) calls [`reconcile_day`] for every day of the look-back window
//! (`pay_reconcile_lookback`, 7 days) whose bill is published and that is not yet done in
//! `payment_reconcile_days`, oldest first — a bill still being generated (`STATEMENT_CREATING`)
//! is tried again next run, a failed day after a back-off, a day no run reached (the deployment
//! was down) by the next run. Before expiry, young pending payments are queried actively by
//! `payment_watch` ([`super::watch`]), so the sweep is left with the orders nobody paid.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use async_trait::async_trait;
use chrono::NaiveDate;
use scheduler::{
    sql::{Executor, JobRow, Misfire, NewJob, OverlapPolicy, SqlJobStore},
    JobContext,
};

use platform::db::{duration_millis, now_millis};

use super::{
    china_day_bounds,
    model::{NewDiscrepancy, Payment, PaymentStatus},
    provider::BillRow,
    service::{Applied, PaymentService},
    PAYMENT_DISCREPANCIES_OPEN,
};
use crate::account::Ledger;

/// Name of the sweep job and its executor.
pub const SWEEP_JOB: &str = "payment_sweep";
/// Name of the daily reconciliation job and its executor.
pub const RECONCILE_JOB: &str = "payment_reconcile";
/// Longest a run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Settled as paid.
    pub succeeded: u64,
    /// Settled as failed.
    pub failed: u64,
    /// Left as they are (still being paid, settled meanwhile, recorded for a person).
    pub unchanged: u64,
    /// Not settled this time (provider or database errors); tried again next run.
    pub errors: u64,
}

/// Settles the pending payments that expired before `now` (less the grace).
pub async fn sweep(
    payments: &PaymentService,
    now: i64,
    mut still_owner: impl FnMut() -> bool,
) -> anyhow::Result<SweepReport> {
    let mut report = SweepReport::default();
    let before = now - PaymentService::sweep_grace();
    let mut after = 0;
    loop {
        let batch = payments.store().expired_pending(before, after).await?;
        for payment in &batch {
            after = payment.id;
            match payments.settle_expired(payment, now).await {
                Ok(Applied::Settled(PaymentStatus::Succeeded)) => report.succeeded += 1,
                Ok(Applied::Settled(_)) => report.failed += 1,
                Ok(_) => report.unchanged += 1,
                Err(err) => {
                    report.errors += 1;
                    tracing::warn!(trade_no = %payment.trade_no, %err, "could not settle an expired payment");
                }
            }
        }
        if batch.len() < super::store::BATCH as usize || !still_owner() {
            return Ok(report);
        }
    }
}

/// What one daily comparison found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Order lines in the provider's bill.
    pub bill_rows: u64,
    /// Our payments paid that day.
    pub payments: u64,
    /// Discrepancies found, by kind (each also recorded, once).
    pub found: HashMap<&'static str, u64>,
}

/// Compares the provider's bill of `date` (China Standard Time) with our payments and `ledger`.
pub async fn reconcile_day(
    payments: &PaymentService,
    ledger: &Ledger,
    date: NaiveDate,
    now: i64,
) -> anyhow::Result<ReconcileReport> {
    let bill_date = date.format("%Y-%m-%d").to_string();
    let mut report = ReconcileReport::default();
    let found = |report: &mut ReconcileReport, discrepancy: NewDiscrepancy| {
        *report.found.entry(discrepancy.kind).or_default() += 1;
        discrepancy
    };
    let bill = payments.provider().trade_bill(date).await?;
    report.bill_rows = bill.len() as u64;
    let in_bill: HashSet<&str> = bill.iter().map(|row| row.trade_no.as_str()).collect();
    // Settled by this run: their events were just recorded, their credit is on its way.
    let mut settled_now: HashSet<String> = HashSet::new();

    // The bill against our payments, a chunk of trade numbers per query.
    for chunk in bill.chunks(super::store::BATCH as usize) {
        let trade_nos: Vec<String> = chunk.iter().map(|row| row.trade_no.clone()).collect();
        let ours: HashMap<String, Payment> = payments
            .store()
            .by_trade_nos(&trade_nos)
            .await?
            .into_iter()
            .map(|payment| (payment.trade_no.clone(), payment))
            .collect();
        for row in chunk {
            let discrepancy =
                compare_line(payments, row, ours.get(&row.trade_no), &bill_date, now).await?;
            if let Some(discrepancy) = discrepancy {
                if discrepancy.status == "fixed" {
                    settled_now.insert(row.trade_no.clone());
                }
                let discrepancy = found(&mut report, discrepancy);
                payments.record(&discrepancy, now).await?;
            }
        }
    }

    // Our payments of that day against the bill, and against the ledger.
    let (from, to) = china_day_bounds(date);
    let mut after = 0;
    loop {
        let batch = payments.store().paid_between(from, to, after).await?;
        report.payments += batch.len() as u64;
        let mut by_biz: HashMap<&str, Vec<&Payment>> = HashMap::new();
        for payment in &batch {
            after = payment.id;
            if payment.status != PaymentStatus::Succeeded {
                continue;
            }
            if !in_bill.contains(payment.trade_no.as_str()) {
                let discrepancy = found(
                    &mut report,
                    NewDiscrepancy {
                        bill_date: bill_date.clone(),
                        kind: "payment_not_in_bill",
                        trade_no: payment.trade_no.clone(),
                        provider_amt: None,
                        our_amt: Some(payment.amt),
                        detail: "we settled this payment as paid; the provider's bill does not \
                                 have it"
                            .to_owned(),
                        status: "open",
                    },
                );
                payments.record(&discrepancy, now).await?;
            }
            by_biz
                .entry(payment.biz.as_str())
                .or_default()
                .push(payment);
        }
        for (biz, paid) in by_biz {
            let ids: Vec<i64> = paid.iter().map(|payment| payment.biz_id).collect();
            let posted = ledger.posted(biz, &ids).await?;
            let uncredited = paid.into_iter().filter(|payment| {
                !posted.contains(&payment.biz_id) && !settled_now.contains(&payment.trade_no)
            });
            for payment in uncredited {
                payments.store().republish(payment, now).await?;
                let discrepancy = found(
                    &mut report,
                    NewDiscrepancy {
                        bill_date: bill_date.clone(),
                        kind: "payment_without_credit",
                        trade_no: payment.trade_no.clone(),
                        provider_amt: None,
                        our_amt: Some(payment.amt),
                        detail: format!(
                            "paid, but the ledger has no posting for {} {}: its event was \
                             recorded again",
                            payment.biz, payment.biz_id
                        ),
                        status: "fixed",
                    },
                );
                payments.record(&discrepancy, now).await?;
            }
        }
        if batch.len() < super::store::BATCH as usize {
            break;
        }
    }

    let audit = ledger.audit().await?;
    if audit.total_balance != 0 || audit.total_entries != 0 || !audit.mismatched.is_empty() {
        let discrepancy = found(
            &mut report,
            NewDiscrepancy {
                bill_date: bill_date.clone(),
                kind: "ledger_unbalanced",
                trade_no: String::new(),
                provider_amt: None,
                our_amt: Some(audit.total_balance),
                detail: format!("{audit:?}"),
                status: "open",
            },
        );
        payments.record(&discrepancy, now).await?;
    }
    metrics::gauge!(PAYMENT_DISCREPANCIES_OPEN)
        .set(payments.store().open_discrepancies().await? as f64);
    Ok(report)
}

/// The discrepancy of bill line `row` against our payment `ours`, fixing what is safe.
async fn compare_line(
    payments: &PaymentService,
    row: &BillRow,
    ours: Option<&Payment>,
    bill_date: &str,
    now: i64,
) -> anyhow::Result<Option<NewDiscrepancy>> {
    let discrepancy = |kind, ours: Option<&Payment>, detail: String, status| NewDiscrepancy {
        bill_date: bill_date.to_owned(),
        kind,
        trade_no: row.trade_no.clone(),
        provider_amt: Some(row.amt),
        our_amt: ours.map(|payment| payment.amt),
        detail,
        status,
    };
    if row.trade_state != "SUCCESS" {
        return Ok(Some(discrepancy(
            "refunded",
            ours,
            format!("the bill has a {} line", row.trade_state),
            "open",
        )));
    }
    let Some(payment) = ours else {
        return Ok(Some(discrepancy(
            "missing_payment",
            None,
            format!(
                "the provider was paid (transaction {}) for a trade we never made",
                row.transaction_id
            ),
            "open",
        )));
    };
    if payment.amt != row.amt {
        return Ok(Some(discrepancy(
            "amount_mismatch",
            ours,
            format!(
                "the bill has {} fen, our payment {} fen",
                row.amt, payment.amt
            ),
            "open",
        )));
    }
    Ok(match payment.status {
        PaymentStatus::Succeeded => None,
        PaymentStatus::Failed => Some(discrepancy(
            "paid_after_failure",
            ours,
            "the bill has it paid; we settled it as failed".to_owned(),
            "open",
        )),
        PaymentStatus::Pending => {
            // Settled from the provider's own answer, through the notification's checks.
            let transaction = payments.provider().query(&payment.trade_no).await?;
            let applied = match transaction {
                Some(transaction) => Some(payments.apply_transaction(&transaction, now).await?),
                None => None,
            };
            let fixed = matches!(applied, Some(Applied::Settled(PaymentStatus::Succeeded)));
            Some(discrepancy(
                "unsettled_payment",
                ours,
                format!(
                    "the bill has it paid, ours was pending; the provider's query: {applied:?}"
                ),
                if fixed { "fixed" } else { "open" },
            ))
        }
    })
}

/// Creates the durable job `name` on `schedule` in `timezone` unless a job of that name exists
/// (operators' changes are kept). Safe when several instances start at once.
pub async fn ensure_job(
    jobs: &SqlJobStore,
    name: &str,
    schedule: &str,
    timezone: &str,
) -> anyhow::Result<()> {
    crate::jobs::ensure_job(
        jobs,
        &NewJob {
            name: name.to_owned(),
            cron: schedule.to_owned(),
            timezone: timezone.to_owned(),
            executor: name.to_owned(),
            cfg: "{}".to_owned(),
            misfire: Misfire::Skip,
            overlap: OverlapPolicy::Forbid,
            timeout_ms: duration_millis(RUN_TIMEOUT),
        },
    )
    .await
}

/// The `payment_sweep` executor.
#[derive(Debug, Clone)]
pub struct SweepJob {
    payments: PaymentService,
}

impl SweepJob {
    /// The executor over `payments`.
    pub fn new(payments: PaymentService) -> Self {
        Self { payments }
    }
}

fn no_cfg(name: &str, cfg: &serde_json::Value) -> Result<(), String> {
    match cfg.as_object() {
        Some(fields) if fields.is_empty() => Ok(()),
        _ => Err(format!("the {name} executor takes no cfg; use {{}}")),
    }
}

#[async_trait]
impl Executor for SweepJob {
    fn name(&self) -> &str {
        SWEEP_JOB
    }

    fn check_cfg(&self, cfg: &serde_json::Value) -> Result<(), String> {
        no_cfg(SWEEP_JOB, cfg)
    }

    async fn execute(&self, _job: &JobRow, ctx: JobContext) -> anyhow::Result<()> {
        let report = sweep(&self.payments, now_millis(), || ctx.still_owner()).await?;
        if report != SweepReport::default() {
            tracing::info!(?report, "swept expired payments");
        }
        Ok(())
    }
}
