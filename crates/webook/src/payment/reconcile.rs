//! Reconciliation with the payment provider, on the SQL scheduler (one run at a time in the
//! whole deployment), in keyset batches — never OFFSET over a set that shrinks as it is worked.
//!
//! - **Sweep** (durable job `payment_sweep`, every minute): pending payments past their expiry
//!   (plus a minute's grace) are queried at the provider each was ordered from and settled by
//!   what it says — paid → succeeded; unpaid or being paid → closed, asked again, and failed only
//!   if it then says closed ([`PaymentService::settle_expired`]). Then refunds under way are
//!   asked again (no answer heard) or queried (processing) ([`PaymentService::settle_refund`]).
//! - **Daily** ([`reconcile_day`], run by `payment_reconcile`): the providers' bills of a day —
//!   payment lines and refund lines — are compared with our payments, our refunds and the ledger
//!   from every side: each bill line against our books; each payment paid and each refund
//!   completed that day against the bill and against its posting (the exact split its seller
//!   says the share of the sale's time implies — [`super::Seller`] — or the exact negation of
//!   the credit a refund undoes); each ledger posting written that day against the paid payment
//!   or succeeded refund it stands for; the day's sums; the ledger's balance. Every difference is
//!   a row of `payment_discrepancies` (once per day, kind and trade), counted by
//!   `payment_discrepancies_total{kind}`, listed at `GET /payments/discrepancies` with the
//!   actions each kind offers ([`super::model::Action::for_kind`]; the table of kinds is under
//!   "Refunds" in `docs/API.md`). What is safe is fixed here — a paid-but-pending payment settled
//!   from the provider's signed answer, a refund the bill has done completed from the provider's
//!   answer, a lost credit's event recorded again once — and "fixed" is recorded only once the
//!   effect is verified (a later run sees the posting).
//!
//! The gauge `payment_discrepancies_open` is set by each comparison and, on every instance, once
//! a minute by [`watch_open_discrepancies`].
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
    model::{NewDiscrepancy, Payment, PaymentStatus, Refund, RefundStatus, REFUND_BIZ},
    provider::BillRow,
    service::{Applied, PaymentService},
    store::BATCH,
    PAYMENT_DISCREPANCIES_OPEN,
};
use crate::account::{AccountKind, Ledger, Line, Posting};

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
    /// Refunds under way that completed.
    pub refunded: u64,
}

/// How often every instance counts the discrepancies waiting for a person again.
pub const OPEN_GAUGE_INTERVAL: Duration = Duration::from_secs(60);

/// Until `stop`: sets [`PAYMENT_DISCREPANCIES_OPEN`] at once and every [`OPEN_GAUGE_INTERVAL`],
/// on every instance — the daily comparison sets it only where it ran, and a restart would
/// otherwise hide open discrepancies until the next one (an alert watches the gauge).
pub async fn watch_open_discrepancies(
    payments: PaymentService,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut ticks = tokio::time::interval(OPEN_GAUGE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {},
            () = stop.cancelled() => return,
        }
        match payments.store().open_discrepancies().await {
            Ok(open) => metrics::gauge!(PAYMENT_DISCREPANCIES_OPEN).set(open as f64),
            // The readiness probe reports an unreachable database; nothing to add here.
            Err(err) => tracing::debug!(%err, "cannot count open payment discrepancies"),
        }
    }
}

/// Settles the pending payments that expired before `now` (less the grace), then the refunds
/// still under way.
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
        if batch.len() < BATCH as usize || !still_owner() {
            break;
        }
    }
    // Refunds under way: asked again when the answer was lost, queried while processing.
    let mut after = 0;
    loop {
        let batch = payments.store().open_refunds(after).await?;
        for refund in &batch {
            after = refund.id;
            match payments.settle_refund(refund, now).await {
                Ok(Applied::Settled(_)) => report.refunded += 1,
                Ok(_) => report.unchanged += 1,
                Err(err) => {
                    report.errors += 1;
                    tracing::warn!(refund_no = %refund.refund_no, %err, "could not settle a refund under way");
                }
            }
        }
        if batch.len() < BATCH as usize || !still_owner() {
            return Ok(report);
        }
    }
}

/// What one daily comparison found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Lines in the providers' bills (payments and refunds).
    pub bill_rows: u64,
    /// Our payments paid that day.
    pub payments: u64,
    /// Our refunds completed that day.
    pub refunds: u64,
    /// Ledger postings of that day checked against their payment or refund.
    pub postings: u64,
    /// Discrepancies found, by kind (each also recorded, once).
    pub found: HashMap<&'static str, u64>,
}

/// One day's comparison: what it reads with, and what it found so far.
struct Day<'a> {
    payments: &'a PaymentService,
    ledger: &'a Ledger,
    bill_date: String,
    bounds: (i64, i64),
    now: i64,
    report: ReconcileReport,
    /// Trades whose lost credit this run asked for again: verified by a later run, never this
    /// one — whether the credit has landed by the end of this run is a race with its consumer.
    asked_again: HashSet<String>,
}

impl Day<'_> {
    /// Records a discrepancy of `kind` about `trade_no` (once per day, kind and trade).
    async fn found(
        &mut self,
        kind: &'static str,
        trade_no: &str,
        (provider_amt, our_amt): (Option<i64>, Option<i64>),
        detail: String,
        status: &'static str,
    ) -> sqlx::Result<bool> {
        *self.report.found.entry(kind).or_default() += 1;
        self.payments
            .record(
                &NewDiscrepancy {
                    bill_date: self.bill_date.clone(),
                    kind,
                    trade_no: trade_no.to_owned(),
                    provider_amt,
                    our_amt,
                    detail,
                    status,
                },
                self.now,
            )
            .await
    }
}

/// Compares the providers' bills of `date` (China Standard Time) with our payments, refunds
/// and `ledger`, from every side: each bill line against our books, each payment and refund of
/// the day against the bill and the ledger, each ledger posting of the day against the payment
/// or refund it stands for, and the day's sums. Re-running a day records nothing twice.
pub async fn reconcile_day(
    payments: &PaymentService,
    ledger: &Ledger,
    date: NaiveDate,
    now: i64,
) -> anyhow::Result<ReconcileReport> {
    let mut day = Day {
        payments,
        ledger,
        bill_date: date.format("%Y-%m-%d").to_string(),
        bounds: china_day_bounds(date),
        now,
        report: ReconcileReport::default(),
        asked_again: HashSet::new(),
    };
    let bill = bills(payments, date, day.bounds).await?;
    day.report.bill_rows = bill.len() as u64;
    let (paid_lines, refund_lines): (Vec<&BillRow>, Vec<&BillRow>) =
        bill.iter().partition(|row| row.trade_state != "REFUND");
    // A refund line whose money is not back yet (`退款状态` other than SUCCESS) is not a done
    // refund: it is compared on the day it succeeds.
    let refund_lines: Vec<&BillRow> = refund_lines
        .into_iter()
        .filter(|row| row.refund_status == "SUCCESS")
        .collect();

    // Settled by this run: their events were just recorded, their credit is on its way.
    let mut settled_now: HashSet<String> = HashSet::new();
    for chunk in paid_lines.chunks(BATCH as usize) {
        let trade_nos: Vec<String> = chunk.iter().map(|row| row.trade_no.clone()).collect();
        let ours: HashMap<String, Payment> = payments
            .store()
            .by_trade_nos(&trade_nos)
            .await?
            .into_iter()
            .map(|payment| (payment.trade_no.clone(), payment))
            .collect();
        for row in chunk {
            if compare_paid_line(&mut day, row, ours.get(&row.trade_no)).await? {
                settled_now.insert(row.trade_no.clone());
            }
        }
    }
    for chunk in refund_lines.chunks(BATCH as usize) {
        let refund_nos: Vec<String> = chunk.iter().map(|row| row.refund_no.clone()).collect();
        let ours: HashMap<String, Refund> = payments
            .store()
            .refunds_by_nos(&refund_nos)
            .await?
            .into_iter()
            .map(|refund| (refund.refund_no.clone(), refund))
            .collect();
        for row in chunk {
            compare_refund_line(&mut day, row, ours.get(&row.refund_no)).await?;
        }
    }

    let paid_total = check_payments(&mut day, &paid_lines, &settled_now).await?;
    let refunded_total = check_refunds(&mut day, &refund_lines).await?;
    check_postings(&mut day).await?;
    verify_fixes(&mut day).await?;

    // The day's sums: what the bill says moved, against what our books say — a difference the
    // line-by-line checks did not already explain (a repeated bill line, say).
    let bill_paid: i64 = paid_lines.iter().map(|row| row.amt).sum();
    let bill_refunded: i64 = refund_lines.iter().map(|row| row.refund_amt).sum();
    let unexplained = day.report.found.is_empty();
    if unexplained && (bill_paid != paid_total || bill_refunded != refunded_total) {
        let detail = format!(
            "the bill has {bill_paid} fen paid and {bill_refunded} fen refunded; our payments \
             {paid_total} fen and refunds {refunded_total} fen"
        );
        day.found(
            "day_total_mismatch",
            "",
            (
                Some(bill_paid - bill_refunded),
                Some(paid_total - refunded_total),
            ),
            detail,
            "open",
        )
        .await?;
    }

    let audit = ledger.audit().await?;
    if audit.total_balance != 0 || audit.total_entries != 0 || !audit.mismatched.is_empty() {
        day.found(
            "ledger_unbalanced",
            "",
            (None, Some(audit.total_balance)),
            format!("{audit:?}"),
            "open",
        )
        .await?;
    }
    metrics::gauge!(PAYMENT_DISCREPANCIES_OPEN)
        .set(payments.store().open_discrepancies().await? as f64);
    Ok(day.report)
}

/// The bill lines of `date` of every provider that has business that day: the one new orders
/// go to, and those used before while payments or refunds of theirs fall on the day.
async fn bills(
    payments: &PaymentService,
    date: NaiveDate,
    (from, to): (i64, i64),
) -> anyhow::Result<Vec<BillRow>> {
    let mut names = vec![payments.provider().name().to_owned()];
    for name in payments.store().providers_between(from, to).await? {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let mut bill = Vec::new();
    for name in names {
        bill.extend(payments.provider_named(&name)?.trade_bill(date).await?);
    }
    Ok(bill)
}

/// Checks a payment line of the bill against our payment of it, fixing what is safe; true when
/// this settled the payment now.
async fn compare_paid_line(
    day: &mut Day<'_>,
    row: &BillRow,
    ours: Option<&Payment>,
) -> anyhow::Result<bool> {
    let amounts = (Some(row.amt), ours.map(|payment| payment.amt));
    let Some(payment) = ours else {
        let detail = format!(
            "the provider was paid (transaction {}) for a trade we never made",
            row.transaction_id
        );
        day.found("missing_payment", &row.trade_no, amounts, detail, "open")
            .await?;
        return Ok(false);
    };
    if payment.amt != row.amt {
        let detail = format!(
            "the bill has {} fen, our payment {} fen",
            row.amt, payment.amt
        );
        day.found("amount_mismatch", &row.trade_no, amounts, detail, "open")
            .await?;
        return Ok(false);
    }
    match payment.status {
        PaymentStatus::Succeeded | PaymentStatus::Refunded => Ok(false),
        PaymentStatus::Failed => {
            let detail = "the bill has it paid; we settled it as failed: credit it or refund it";
            day.found(
                "paid_after_failure",
                &row.trade_no,
                amounts,
                detail.to_owned(),
                "open",
            )
            .await?;
            Ok(false)
        }
        PaymentStatus::Pending => {
            // Settled from the provider's own answer, through the notification's checks.
            let transaction = day
                .payments
                .provider_of(payment)?
                .query(&payment.trade_no)
                .await?;
            let applied = match transaction {
                Some(transaction) => Some(
                    day.payments
                        .apply_transaction(&transaction, day.now)
                        .await?,
                ),
                None => None,
            };
            let fixed = matches!(applied, Some(Applied::Settled(PaymentStatus::Succeeded)));
            let detail = format!(
                "the bill has it paid, ours was pending; the provider's query: {applied:?}"
            );
            let status = if fixed { "fixed" } else { "open" };
            day.found("unsettled_payment", &row.trade_no, amounts, detail, status)
                .await?;
            Ok(fixed)
        }
    }
}

/// Checks a refund line of the bill against our refund of it, completing one the provider has
/// finished.
async fn compare_refund_line(
    day: &mut Day<'_>,
    row: &BillRow,
    ours: Option<&Refund>,
) -> anyhow::Result<()> {
    let amounts = (Some(row.refund_amt), ours.map(|refund| refund.amt));
    let Some(refund) = ours else {
        let detail = format!(
            "the bill has refund {} of {} fen that we never asked for: book it (refund) once \
             you know why",
            row.refund_no, row.refund_amt
        );
        day.found("refunded", &row.trade_no, amounts, detail, "open")
            .await?;
        return Ok(());
    };
    if refund.amt != row.refund_amt || refund.trade_no != row.trade_no {
        let detail = format!(
            "the bill has refund {} of {} fen of {}; ours is {} fen of {}",
            row.refund_no, row.refund_amt, row.trade_no, refund.amt, refund.trade_no
        );
        day.found("refund_mismatch", &row.trade_no, amounts, detail, "open")
            .await?;
        return Ok(());
    }
    if refund.status == RefundStatus::Succeeded {
        return Ok(());
    }
    let applied = day.payments.settle_refund(refund, day.now).await;
    let fixed = matches!(applied, Ok(Applied::Settled(PaymentStatus::Refunded)));
    let detail = format!(
        "the bill has refund {} done, ours was {}; asking the provider: {applied:?}",
        refund.refund_no,
        refund.status.as_str()
    );
    let status = if fixed { "fixed" } else { "open" };
    day.found("unsettled_refund", &row.trade_no, amounts, detail, status)
        .await?;
    Ok(())
}

/// Checks our payments paid that day against the bill and the ledger; returns their total.
async fn check_payments(
    day: &mut Day<'_>,
    paid_lines: &[&BillRow],
    settled_now: &HashSet<String>,
) -> anyhow::Result<i64> {
    let in_bill: HashSet<&str> = paid_lines.iter().map(|row| row.trade_no.as_str()).collect();
    let (from, to) = day.bounds;
    let (mut after, mut total) = (0, 0);
    loop {
        let batch = day.payments.store().paid_between(from, to, after).await?;
        day.report.payments += batch.len() as u64;
        let mut by_biz: HashMap<String, Vec<&Payment>> = HashMap::new();
        for payment in &batch {
            after = payment.id;
            if !matches!(
                payment.status,
                PaymentStatus::Succeeded | PaymentStatus::Refunded
            ) {
                continue;
            }
            total += payment.amt;
            if !in_bill.contains(payment.trade_no.as_str()) {
                let detail = "we settled this payment as paid; the provider's bill does not \
                              have it";
                day.found(
                    "payment_not_in_bill",
                    &payment.trade_no,
                    (None, Some(payment.amt)),
                    detail.to_owned(),
                    "open",
                )
                .await?;
            }
            by_biz.entry(payment.biz.clone()).or_default().push(payment);
        }
        for (biz, paid) in by_biz {
            let ids: Vec<i64> = paid.iter().map(|payment| payment.biz_id).collect();
            let mut posted = day.ledger.lines(&biz, &ids).await?;
            // What the seller says each sale's posting must be: one read per batch.
            let expected = match day.payments.seller(&biz) {
                Some(seller) => seller.expected_postings(&ids).await?,
                None => HashMap::new(),
            };
            for payment in paid {
                match posted.remove(&payment.biz_id) {
                    Some(lines) => {
                        check_posting(day, payment, &lines, expected.get(&payment.biz_id)).await?
                    }
                    // Settled by this run (its credit is on its way), or refunded before it
                    // was ever credited (paid after we gave up on it).
                    None if settled_now.contains(&payment.trade_no)
                        || payment.status == PaymentStatus::Refunded => {}
                    None => {
                        let detail = format!(
                            "paid, but the ledger has no posting for {} {}: its event was \
                             recorded again; fixed once the posting is there",
                            payment.biz, payment.biz_id
                        );
                        let amounts = (None, Some(payment.amt));
                        // Asked again once, when first found; verified on later runs.
                        if day
                            .found(
                                "payment_without_credit",
                                &payment.trade_no,
                                amounts,
                                detail,
                                "open",
                            )
                            .await?
                        {
                            day.payments.store().republish(payment, day.now).await?;
                            day.asked_again.insert(payment.trade_no.clone());
                        }
                    }
                }
            }
        }
        if batch.len() < BATCH as usize {
            return Ok(total);
        }
    }
}

/// Checks the `lines` posted for `payment`: the clearing account gives up exactly its amount,
/// and the split is the one its seller says the settings of the sale's time imply.
async fn check_posting(
    day: &mut Day<'_>,
    payment: &Payment,
    lines: &[Line],
    expected: Option<&Posting>,
) -> anyhow::Result<()> {
    let cleared: i64 = lines
        .iter()
        .filter(|line| line.account.kind == AccountKind::Clearing)
        .map(|line| line.amt)
        .sum();
    let split_ok = expected.is_none_or(|expected| same_lines(&expected.lines, lines));
    if cleared != -payment.amt || !split_ok {
        let detail = format!(
            "the posting of {} {} is {}; the payment of {} fen implies another",
            payment.biz,
            payment.biz_id,
            describe(lines),
            payment.amt
        );
        day.found(
            "posting_mismatch",
            &payment.trade_no,
            (Some(-cleared), Some(payment.amt)),
            detail,
            "open",
        )
        .await?;
    }
    Ok(())
}

/// Checks our refunds completed that day against the bill and their reversal in the ledger;
/// returns their total.
async fn check_refunds(day: &mut Day<'_>, refund_lines: &[&BillRow]) -> anyhow::Result<i64> {
    let in_bill: HashSet<&str> = refund_lines
        .iter()
        .map(|row| row.refund_no.as_str())
        .collect();
    let (from, to) = day.bounds;
    let (mut after, mut total) = (0, 0);
    loop {
        let batch = day
            .payments
            .store()
            .refunded_between(from, to, after)
            .await?;
        day.report.refunds += batch.len() as u64;
        let ids: Vec<i64> = batch.iter().map(|refund| refund.id).collect();
        let reversals = day.ledger.lines(REFUND_BIZ, &ids).await?;
        // The credits the refunds undo, one read per kind of sale.
        let mut sales: HashMap<&str, Vec<i64>> = HashMap::new();
        for refund in &batch {
            sales
                .entry(refund.biz.as_str())
                .or_default()
                .push(refund.biz_id);
        }
        let mut credits = HashMap::new();
        for (biz, ids) in sales {
            credits.insert(biz, day.ledger.lines(biz, &ids).await?);
        }
        for refund in &batch {
            after = refund.id;
            // Booked from the provider's own refund (its console): not ours to find in the bill
            // under our number.
            let external = refund.refund_no.starts_with("ext");
            if !external {
                total += refund.amt;
            }
            if !external && !in_bill.contains(refund.refund_no.as_str()) {
                let detail = format!(
                    "refund {} succeeded here; the provider's bill does not have it",
                    refund.refund_no
                );
                day.found(
                    "refund_not_in_bill",
                    &refund.trade_no,
                    (None, Some(refund.amt)),
                    detail,
                    "open",
                )
                .await?;
            }
            let expected: Vec<Line> = credits
                .get(refund.biz.as_str())
                .and_then(|credited| credited.get(&refund.biz_id))
                .map(|lines| lines.iter().map(negated).collect())
                .unwrap_or_default();
            let actual = reversals.get(&refund.id).cloned().unwrap_or_default();
            if !same_lines(&expected, &actual) {
                let detail = format!(
                    "refund {} reverses {} in the ledger; the credit it undoes implies {}",
                    refund.refund_no,
                    describe(&actual),
                    describe(&expected)
                );
                day.found(
                    "reversal_mismatch",
                    &refund.trade_no,
                    (None, Some(refund.amt)),
                    detail,
                    "open",
                )
                .await?;
            }
        }
        if batch.len() < BATCH as usize {
            return Ok(total);
        }
    }
}

/// Checks every ledger posting written that day, from the ledger's side: a sale's posting
/// needs a paid (or since refunded) payment of the same amount, a reversal a succeeded refund.
async fn check_postings(day: &mut Day<'_>) -> anyhow::Result<()> {
    for biz in day.payments.seller_bizs() {
        let mut after = 0;
        loop {
            let ids = day
                .ledger
                .posted_between(&biz, day.bounds, after, BATCH)
                .await?;
            day.report.postings += ids.len() as u64;
            let lines = day.ledger.lines(&biz, &ids).await?;
            let ours: HashMap<i64, Payment> = day
                .payments
                .store()
                .by_biz_ids(&biz, &ids)
                .await?
                .into_iter()
                .map(|payment| (payment.biz_id, payment))
                .collect();
            for id in &ids {
                after = *id;
                let posted = lines.get(id).map(Vec::as_slice).unwrap_or_default();
                let cleared: i64 = posted
                    .iter()
                    .filter(|line| line.account.kind == AccountKind::Clearing)
                    .map(|line| line.amt)
                    .sum();
                let payment = ours.get(id).filter(|payment| {
                    matches!(
                        payment.status,
                        PaymentStatus::Succeeded | PaymentStatus::Refunded
                    )
                });
                match payment {
                    Some(payment) if payment.amt == -cleared => {}
                    Some(payment) => {
                        let detail = format!(
                            "the ledger clears {} fen for {biz} {id}; its payment is {} fen",
                            -cleared, payment.amt
                        );
                        day.found(
                            "posting_mismatch",
                            &payment.trade_no,
                            (Some(-cleared), Some(payment.amt)),
                            detail,
                            "open",
                        )
                        .await?;
                    }
                    None => {
                        let state = ours
                            .get(id)
                            .map_or("no payment", |payment| payment.status.as_str());
                        let detail = format!(
                            "the ledger has a posting for {biz} {id} ({}); its payment: {state}",
                            describe(posted)
                        );
                        let trade_no = ours
                            .get(id)
                            .map_or_else(|| format!("{biz}:{id}"), |p| p.trade_no.clone());
                        day.found(
                            "posting_without_payment",
                            &trade_no,
                            (None, Some(-cleared)),
                            detail,
                            "open",
                        )
                        .await?;
                    }
                }
            }
            if ids.len() < BATCH as usize {
                break;
            }
        }
    }
    // Reversals need a succeeded refund.
    let mut after = 0;
    loop {
        let ids = day
            .ledger
            .posted_between(REFUND_BIZ, day.bounds, after, BATCH)
            .await?;
        day.report.postings += ids.len() as u64;
        let refunds: HashMap<i64, Refund> = day
            .payments
            .store()
            .refunds_by_ids(&ids)
            .await?
            .into_iter()
            .map(|refund| (refund.id, refund))
            .collect();
        for id in &ids {
            after = *id;
            match refunds.get(id) {
                Some(refund) if refund.status == RefundStatus::Succeeded => {}
                other => {
                    let detail = format!(
                        "the ledger has a reversal for refund {id}; the refund: {}",
                        other.map_or("none", |refund| refund.status.as_str())
                    );
                    let trade_no =
                        other.map_or_else(|| format!("refund:{id}"), |r| r.trade_no.clone());
                    day.found(
                        "reversal_without_refund",
                        &trade_no,
                        (None, None),
                        detail,
                        "open",
                    )
                    .await?;
                }
            }
        }
        if ids.len() < BATCH as usize {
            return Ok(());
        }
    }
}

/// Marks `payment_without_credit` discrepancies fixed once their posting is there — verified,
/// not assumed from having asked again, and by a run after the one that asked.
async fn verify_fixes(day: &mut Day<'_>) -> anyhow::Result<()> {
    let mut after = 0;
    loop {
        let open = day
            .payments
            .store()
            .open_of_kind("payment_without_credit", after)
            .await?;
        let trade_nos: Vec<String> = open.iter().map(|(_, trade_no)| trade_no.clone()).collect();
        let payments = day.payments.store().by_trade_nos(&trade_nos).await?;
        for payment in payments
            .iter()
            .filter(|payment| !day.asked_again.contains(&payment.trade_no))
        {
            let posted = day.ledger.posted(&payment.biz, &[payment.biz_id]).await?;
            if posted.contains(&payment.biz_id) {
                day.payments
                    .store()
                    .mark_fixed(
                        "payment_without_credit",
                        &payment.trade_no,
                        "verified: the posting is in the ledger",
                        day.now,
                    )
                    .await?;
            }
        }
        match open.last() {
            Some((id, _)) if open.len() == BATCH as usize => after = *id,
            _ => return Ok(()),
        }
    }
}

/// `line` with its amount negated (a reversal's line).
fn negated(line: &Line) -> Line {
    Line {
        account: line.account,
        amt: -line.amt,
        memo: String::new(),
    }
}

/// Whether `a` and `b` move the same fen on the same accounts (memos aside).
fn same_lines(a: &[Line], b: &[Line]) -> bool {
    let key = |lines: &[Line]| {
        let mut moves: Vec<_> = lines.iter().map(|line| (line.account, line.amt)).collect();
        moves.sort_unstable();
        moves
    };
    key(a) == key(b)
}

/// `lines` for a person: `user 7 +90, platform_revenue 0 +10, clearing 0 -100`.
fn describe(lines: &[Line]) -> String {
    if lines.is_empty() {
        return "nothing".to_owned();
    }
    lines
        .iter()
        .map(|line| {
            format!(
                "{} {} {:+}",
                line.account.kind.as_str(),
                line.account.owner,
                line.amt
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
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
