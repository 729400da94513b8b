//! The `payments`, `payment_refunds` and `payment_discrepancies` tables.
//!
//! A payment is written `pending` with the order it stands for, before the provider hears of
//! it; its status changes once — to `succeeded` or `failed` — in a transaction that also records
//! the event telling the seller ([`TOPIC_PAYMENT_SUCCEEDED`], [`TOPIC_PAYMENT_FAILED`]) in the
//! outbox, so a status change and its event are never one without the other. The change is
//! conditional on the row still being pending: of ten identical notifications racing, one
//! changes the row and records the event, the others find it settled.
//!
//! A refund is written `requested` before the provider hears of it; its success changes the
//! refund, the payment (`refunded`) and the ledger (the reversal) and records the event in one
//! transaction ([`PaymentStore::complete_refund`]), once.

use sqlx::{Any, AnyConnection, Transaction};

use platform::{
    db::{placeholders, Db},
    events::outbox,
};

use super::model::{
    Action, Discrepancy, NewDiscrepancy, NewPayment, NewRefund, Payment, PaymentEvent,
    PaymentStatus, Refund, RefundStatus, Settled, Settlement, REFUND_BIZ, TOPIC_PAYMENT_FAILED,
    TOPIC_PAYMENT_REFUNDED, TOPIC_PAYMENT_SUCCEEDED,
};
use crate::account::{self, Line, PostError, Posting};

/// Rows per keyset batch of the reconciliation reads.
pub const BATCH: i64 = 200;

const COLUMNS: &str = "id, trade_no, biz, biz_id, provider, amt, currency, description, status, \
                       code_url, txn_id, expires_at, paid_at, ctime, parked_at";
const REFUND_COLUMNS: &str = "id, refund_no, trade_no, biz, biz_id, amt, reason, status, \
                              provider_refund_id, requested_by, requested_via, allow_negative, \
                              detail, refunded_at, ctime, utime";
const DISCREPANCY_COLUMNS: &str = "id, bill_date, kind, trade_no, provider_amt, our_amt, detail, \
                                   status, note, action, acted_by, acted_via, ctime, utime";
/// Refunds under way: asked, being paid back, or not paid back yet.
const UNDER_WAY: &str = "('requested', 'processing', 'abnormal')";

/// What [`PaymentStore::complete_refund`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundCompletion {
    /// Completed now: refund, payment, reversal and event are committed.
    Completed(Box<Refund>),
    /// The refund was not under way (completed or failed before): nothing changed.
    NotUnderWay,
    /// The payment's credit is not in the ledger yet: nothing changed; complete it later.
    AwaitingCredit,
}

/// The payment tables; cheap to clone.
#[derive(Debug, Clone)]
pub struct PaymentStore {
    db: Db,
}

impl PaymentStore {
    /// The tables in `db`.
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// Records `payment` as pending with `provider`, in the caller's transaction (the seller's
    /// own row is written in the same one); returns its id.
    pub async fn insert_pending(
        tx: &mut AnyConnection,
        payment: &NewPayment,
        provider: &str,
        now: i64,
    ) -> sqlx::Result<i64> {
        sqlx::query_scalar(
            "INSERT INTO payments (trade_no, biz, biz_id, provider, amt, description, status, \
             expires_at, ctime, utime) VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $8) \
             RETURNING id",
        )
        .bind(&payment.trade_no)
        .bind(payment.biz)
        .bind(payment.biz_id)
        .bind(provider)
        .bind(payment.amt)
        .bind(&payment.description)
        .bind(payment.expires_at)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
    }

    /// Stores the code URL the provider gave for `trade_no`.
    pub async fn set_code_url(&self, trade_no: &str, code_url: &str, now: i64) -> sqlx::Result<()> {
        sqlx::query("UPDATE payments SET code_url = $1, utime = $2 WHERE trade_no = $3")
            .bind(code_url)
            .bind(now)
            .bind(trade_no)
            .execute(self.db.writer())
            .await?;
        Ok(())
    }

    /// The payment of `trade_no`.
    pub async fn by_trade_no(&self, trade_no: &str) -> sqlx::Result<Option<Payment>> {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM payments WHERE trade_no = $1"
        ))
        .bind(trade_no)
        .fetch_optional(self.db.pool())
        .await
    }

    /// The payments of `trade_nos` (those that exist), in one query per few hundred.
    pub async fn by_trade_nos(&self, trade_nos: &[String]) -> sqlx::Result<Vec<Payment>> {
        let select = format!("SELECT {COLUMNS} FROM payments WHERE trade_no");
        self.rows_in(&select, None, trade_nos).await
    }

    /// The payments of `biz` with `biz_ids` (those that exist).
    pub async fn by_biz_ids(&self, biz: &str, biz_ids: &[i64]) -> sqlx::Result<Vec<Payment>> {
        let select = format!("SELECT {COLUMNS} FROM payments WHERE biz = $1 AND biz_id");
        self.rows_in(&select, Some(biz), biz_ids).await
    }

    /// The rows of `select` — a query ending in the column to match, with `$1` bound to `lead`
    /// when given — whose column is one of `values`, in one query per few hundred values.
    async fn rows_in<T, V>(
        &self,
        select: &str,
        lead: Option<&str>,
        values: &[V],
    ) -> sqlx::Result<Vec<T>>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::any::AnyRow> + Send + Unpin,
        V: for<'q> sqlx::Encode<'q, sqlx::Any> + sqlx::Type<sqlx::Any> + Clone + Send + 'static,
    {
        let first = if lead.is_some() { 2 } else { 1 };
        let mut found = Vec::with_capacity(values.len());
        for chunk in values.chunks(500) {
            let sql = format!("{select} IN ({})", placeholders(first, chunk.len()));
            let mut query = sqlx::query_as::<_, T>(&sql);
            if let Some(lead) = lead {
                query = query.bind(lead.to_owned());
            }
            for value in chunk {
                query = query.bind(value.clone());
            }
            found.extend(query.fetch_all(self.db.pool()).await?);
        }
        Ok(found)
    }

    /// The providers of payments paid, or refunds made, in `[from, to)` (ms).
    pub async fn providers_between(&self, from: i64, to: i64) -> sqlx::Result<Vec<String>> {
        sqlx::query_scalar(
            "SELECT DISTINCT provider FROM payments WHERE paid_at >= $1 AND paid_at < $2 \
             UNION SELECT DISTINCT p.provider FROM payment_refunds r \
             JOIN payments p ON p.trade_no = r.trade_no \
             WHERE r.refunded_at >= $1 AND r.refunded_at < $2",
        )
        .bind(from)
        .bind(to)
        .fetch_all(self.db.pool())
        .await
    }

    /// Gives pending payment `trade_no` its final status and records the event saying so, in
    /// one transaction; a payment already settled is left as it is.
    pub async fn settle(
        &self,
        trade_no: &str,
        settlement: &Settlement,
        now: i64,
    ) -> sqlx::Result<Settled> {
        self.settle_from(trade_no, PaymentStatus::Pending, settlement, now)
            .await
    }

    /// [`Self::settle`] of a payment that has status `from` (a person crediting a failed payment
    /// the provider was paid for settles it from `failed`).
    pub async fn settle_from(
        &self,
        trade_no: &str,
        from: PaymentStatus,
        settlement: &Settlement,
        now: i64,
    ) -> sqlx::Result<Settled> {
        let mut tx = self.db.writer().begin().await?;
        let changed = sqlx::query(
            "UPDATE payments SET status = $1, txn_id = COALESCE($2, txn_id), paid_at = $3, \
             utime = $4, parked_at = NULL WHERE trade_no = $5 AND status = $6",
        )
        .bind(settlement.status.as_str())
        .bind(settlement.txn_id.as_deref())
        .bind(settlement.paid_at)
        .bind(now)
        .bind(trade_no)
        .bind(from.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        let payment: Option<Payment> = sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM payments WHERE trade_no = $1"
        ))
        .bind(trade_no)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(payment) = payment else {
            return Ok(Settled::Unknown);
        };
        if !changed {
            return Ok(if payment.status == settlement.status {
                Settled::Already(payment)
            } else {
                Settled::Contrary(payment)
            });
        }
        Self::record_event(&mut tx, &payment, now).await?;
        tx.commit().await?;
        Ok(Settled::Changed(payment))
    }

    async fn record_event(tx: &mut AnyConnection, payment: &Payment, now: i64) -> sqlx::Result<()> {
        let topic = match payment.status {
            PaymentStatus::Succeeded => TOPIC_PAYMENT_SUCCEEDED,
            PaymentStatus::Failed => TOPIC_PAYMENT_FAILED,
            PaymentStatus::Refunded => TOPIC_PAYMENT_REFUNDED,
            PaymentStatus::Pending => return Ok(()),
        };
        outbox::record(
            tx,
            topic,
            &payment.trade_no,
            &PaymentEvent::of(payment),
            now,
        )
        .await
    }

    /// Records the settled `payment`'s event again (reconciliation found its effect missing;
    /// the seller applies it once however often it comes).
    pub async fn republish(&self, payment: &Payment, now: i64) -> sqlx::Result<()> {
        let mut tx = self.db.writer().begin().await?;
        Self::record_event(&mut tx, payment, now).await?;
        tx.commit().await
    }

    /// Up to [`BATCH`] pending payments that stopped accepting payment before `before`, with
    /// ids above `after`, by id.
    pub async fn expired_pending(&self, before: i64, after: i64) -> sqlx::Result<Vec<Payment>> {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM payments WHERE status = 'pending' AND expires_at < $1 \
             AND id > $2 AND parked_at IS NULL ORDER BY id LIMIT $3"
        ))
        .bind(before)
        .bind(after)
        .bind(BATCH)
        .fetch_all(self.db.pool())
        .await
    }

    /// Up to [`BATCH`] payments paid in `[from, to)` (ms) with ids above `after`, by id.
    pub async fn paid_between(&self, from: i64, to: i64, after: i64) -> sqlx::Result<Vec<Payment>> {
        sqlx::query_as(&format!(
            "SELECT {COLUMNS} FROM payments WHERE paid_at >= $1 AND paid_at < $2 AND id > $3 \
             ORDER BY id LIMIT $4"
        ))
        .bind(from)
        .bind(to)
        .bind(after)
        .bind(BATCH)
        .fetch_all(self.db.pool())
        .await
    }

    /// Records `found` unless the same (day, kind, trade) is recorded; returns whether it was
    /// new.
    pub async fn record_discrepancy(&self, found: &NewDiscrepancy, now: i64) -> sqlx::Result<bool> {
        let inserted = sqlx::query(
            "INSERT INTO payment_discrepancies (bill_date, kind, trade_no, provider_amt, our_amt, \
             detail, status, ctime, utime) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) \
             ON CONFLICT (bill_date, kind, trade_no) DO NOTHING",
        )
        .bind(&found.bill_date)
        .bind(found.kind)
        .bind(&found.trade_no)
        .bind(found.provider_amt)
        .bind(found.our_amt)
        .bind(&found.detail)
        .bind(found.status)
        .bind(now)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }

    /// Discrepancies with ids below `before`, newest first; only `status` ones when given.
    pub async fn discrepancies(
        &self,
        status: Option<&str>,
        before: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<Discrepancy>> {
        let columns = DISCREPANCY_COLUMNS;
        match status {
            Some(status) => {
                sqlx::query_as(&format!(
                    "SELECT {columns} FROM payment_discrepancies WHERE status = $1 AND id < $2 \
                     ORDER BY id DESC LIMIT $3"
                ))
                .bind(status)
                .bind(before)
                .bind(limit)
                .fetch_all(self.db.pool())
                .await
            }
            None => {
                sqlx::query_as(&format!(
                    "SELECT {columns} FROM payment_discrepancies WHERE id < $1 \
                     ORDER BY id DESC LIMIT $2"
                ))
                .bind(before)
                .bind(limit)
                .fetch_all(self.db.pool())
                .await
            }
        }
    }

    /// Discrepancy `id`.
    pub async fn discrepancy(&self, id: i64) -> sqlx::Result<Option<Discrepancy>> {
        sqlx::query_as(&format!(
            "SELECT {DISCREPANCY_COLUMNS} FROM payment_discrepancies WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.db.pool())
        .await
    }

    /// Claims open discrepancy `id` for a person's action (status `acting`): false when it is
    /// not open — another person acted, or is acting — unless their claim is older than
    /// `stale_before` (a process that died mid-action).
    pub async fn claim_discrepancy(
        &self,
        id: i64,
        (action, admin, via): (Action, i64, &str),
        stale_before: i64,
        now: i64,
    ) -> sqlx::Result<bool> {
        let claimed = sqlx::query(
            "UPDATE payment_discrepancies SET status = 'acting', action = $1, acted_by = $2, \
             acted_via = $3, utime = $4 \
             WHERE id = $5 AND (status = 'open' OR (status = 'acting' AND utime < $6))",
        )
        .bind(action.as_str())
        .bind(admin)
        .bind(via)
        .bind(now)
        .bind(id)
        .bind(stale_before)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        Ok(claimed == 1)
    }

    /// Gives claimed discrepancy `id` back (its action failed): open again.
    pub async fn release_discrepancy(&self, id: i64, now: i64) -> sqlx::Result<()> {
        sqlx::query(
            "UPDATE payment_discrepancies SET status = 'open', action = '', acted_by = NULL, \
             acted_via = '', utime = $1 WHERE id = $2 AND status = 'acting'",
        )
        .bind(now)
        .bind(id)
        .execute(self.db.writer())
        .await?;
        Ok(())
    }

    /// Closes claimed discrepancy `id` — its action done — with `note`, and with it the other
    /// open ones of the same kind and trade (found again by another run or a notification):
    /// one fix answers them all.
    pub async fn close_discrepancy(&self, id: i64, note: &str, now: i64) -> sqlx::Result<()> {
        let mut tx = self.db.writer().begin().await?;
        let closed: Option<(String, String, String, Option<i64>, String)> = sqlx::query_as(
            "UPDATE payment_discrepancies SET status = 'resolved', note = $1, utime = $2 \
             WHERE id = $3 AND status = 'acting' RETURNING kind, trade_no, action, acted_by, \
             acted_via",
        )
        .bind(note)
        .bind(now)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((kind, trade_no, action, acted_by, acted_via)) = closed {
            sqlx::query(
                "UPDATE payment_discrepancies SET status = 'resolved', action = $1, \
                 acted_by = $2, acted_via = $3, note = $4, utime = $5 \
                 WHERE kind = $6 AND trade_no = $7 AND status = 'open'",
            )
            .bind(action)
            .bind(acted_by)
            .bind(acted_via)
            .bind(format!("{note} (with #{id})"))
            .bind(now)
            .bind(kind)
            .bind(trade_no)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await
    }

    /// Marks open discrepancy (`kind`, `trade_no`) of any day fixed, with `note` saying how the
    /// fix was verified; returns how many.
    pub async fn mark_fixed(
        &self,
        kind: &str,
        trade_no: &str,
        note: &str,
        now: i64,
    ) -> sqlx::Result<u64> {
        Ok(sqlx::query(
            "UPDATE payment_discrepancies SET status = 'fixed', note = $1, utime = $2 \
             WHERE kind = $3 AND trade_no = $4 AND status = 'open'",
        )
        .bind(note)
        .bind(now)
        .bind(kind)
        .bind(trade_no)
        .execute(self.db.writer())
        .await?
        .rows_affected())
    }

    /// Trade numbers of open discrepancies of `kind`, ids above `after`, by id (keyset).
    pub async fn open_of_kind(&self, kind: &str, after: i64) -> sqlx::Result<Vec<(i64, String)>> {
        sqlx::query_as(
            "SELECT id, trade_no FROM payment_discrepancies WHERE kind = $1 AND status = 'open' \
             AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(kind)
        .bind(after)
        .bind(BATCH)
        .fetch_all(self.db.pool())
        .await
    }

    /// Keeps the provider's transaction id and payment time of `trade_no` where ours has none
    /// (a payment that arrived after we failed it, about to be refunded).
    pub async fn note_paid(
        &self,
        trade_no: &str,
        txn_id: Option<&str>,
        paid_at: Option<i64>,
    ) -> sqlx::Result<()> {
        sqlx::query(
            "UPDATE payments SET txn_id = COALESCE(txn_id, $1), paid_at = COALESCE(paid_at, $2) \
             WHERE trade_no = $3",
        )
        .bind(txn_id)
        .bind(paid_at)
        .bind(trade_no)
        .execute(self.db.writer())
        .await?;
        Ok(())
    }

    /// Parks pending payment `trade_no` for a person: the sweep no longer queries it.
    pub async fn park(&self, trade_no: &str, now: i64) -> sqlx::Result<bool> {
        let changed = sqlx::query(
            "UPDATE payments SET parked_at = $1, utime = $1 WHERE trade_no = $2 \
             AND status = 'pending' AND parked_at IS NULL",
        )
        .bind(now)
        .bind(trade_no)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        Ok(changed == 1)
    }

    /// Records refund `refund` (number `refund_no`) of `payment` — or of a trade we have no
    /// payment for (`biz` `""`) — as requested, unless a live one of that trade exists; returns
    /// the live refund of the trade either way.
    pub async fn request_refund(
        &self,
        refund: &NewRefund,
        refund_no: &str,
        (biz, biz_id, amt): (&str, i64, i64),
        now: i64,
    ) -> sqlx::Result<Refund> {
        sqlx::query(
            "INSERT INTO payment_refunds (refund_no, trade_no, biz, biz_id, amt, reason, status, \
             requested_by, requested_via, allow_negative, ctime, utime) \
             VALUES ($1, $2, $3, $4, $5, $6, 'requested', $7, $8, $9, $10, $10) \
             ON CONFLICT DO NOTHING",
        )
        .bind(refund_no)
        .bind(&refund.trade_no)
        .bind(biz)
        .bind(biz_id)
        .bind(amt)
        .bind(&refund.reason)
        .bind(refund.requested_by)
        .bind(&refund.requested_via)
        .bind(i64::from(refund.allow_negative))
        .bind(now)
        .execute(self.db.writer())
        .await?;
        self.live_refund(&refund.trade_no)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }

    /// The refund of `trade_no` that is not failed, if any.
    pub async fn live_refund(&self, trade_no: &str) -> sqlx::Result<Option<Refund>> {
        sqlx::query_as(&format!(
            "SELECT {REFUND_COLUMNS} FROM payment_refunds WHERE trade_no = $1 \
             AND status <> 'failed'"
        ))
        .bind(trade_no)
        .fetch_optional(self.db.writer())
        .await
    }

    /// The refund of `refund_no`.
    pub async fn refund_by_no(&self, refund_no: &str) -> sqlx::Result<Option<Refund>> {
        sqlx::query_as(&format!(
            "SELECT {REFUND_COLUMNS} FROM payment_refunds WHERE refund_no = $1"
        ))
        .bind(refund_no)
        .fetch_optional(self.db.pool())
        .await
    }

    /// Refunds with ids below `before`, newest first; only `status` ones when given.
    pub async fn refunds(
        &self,
        status: Option<RefundStatus>,
        before: i64,
        limit: i64,
    ) -> sqlx::Result<Vec<Refund>> {
        let filter = if status.is_some() {
            "status = $3"
        } else {
            "$3 = $3"
        };
        sqlx::query_as(&format!(
            "SELECT {REFUND_COLUMNS} FROM payment_refunds WHERE id < $1 AND {filter} \
             ORDER BY id DESC LIMIT $2"
        ))
        .bind(before)
        .bind(limit)
        .bind(status.map_or("", RefundStatus::as_str))
        .fetch_all(self.db.pool())
        .await
    }

    /// Up to [`BATCH`] refunds still under way (requested, processing or abnormal) with ids
    /// above `after`, by id.
    pub async fn open_refunds(&self, after: i64) -> sqlx::Result<Vec<Refund>> {
        sqlx::query_as(&format!(
            "SELECT {REFUND_COLUMNS} FROM payment_refunds \
             WHERE status IN {UNDER_WAY} AND id > $1 ORDER BY id LIMIT $2"
        ))
        .bind(after)
        .bind(BATCH)
        .fetch_all(self.db.pool())
        .await
    }

    /// Up to [`BATCH`] refunds that succeeded in `[from, to)` (ms), ids above `after`, by id.
    pub async fn refunded_between(
        &self,
        from: i64,
        to: i64,
        after: i64,
    ) -> sqlx::Result<Vec<Refund>> {
        sqlx::query_as(&format!(
            "SELECT {REFUND_COLUMNS} FROM payment_refunds WHERE refunded_at >= $1 \
             AND refunded_at < $2 AND id > $3 ORDER BY id LIMIT $4"
        ))
        .bind(from)
        .bind(to)
        .bind(after)
        .bind(BATCH)
        .fetch_all(self.db.pool())
        .await
    }

    /// The refunds of `ids` (those that exist).
    pub async fn refunds_by_ids(&self, ids: &[i64]) -> sqlx::Result<Vec<Refund>> {
        let select = format!("SELECT {REFUND_COLUMNS} FROM payment_refunds WHERE id");
        self.rows_in(&select, None, ids).await
    }

    /// The refunds of `refund_nos` (those that exist).
    pub async fn refunds_by_nos(&self, refund_nos: &[String]) -> sqlx::Result<Vec<Refund>> {
        let select = format!("SELECT {REFUND_COLUMNS} FROM payment_refunds WHERE refund_no");
        self.rows_in(&select, None, refund_nos).await
    }

    /// Moves refund `refund_no`, still under way, to `status` (processing, abnormal or failed)
    /// with the provider's id and last word; false when it is no longer under way or already
    /// had that status.
    pub async fn update_refund(
        &self,
        refund_no: &str,
        status: RefundStatus,
        provider_refund_id: Option<&str>,
        detail: &str,
        now: i64,
    ) -> sqlx::Result<bool> {
        let changed = sqlx::query(&format!(
            "UPDATE payment_refunds SET status = $1, \
             provider_refund_id = COALESCE($2, provider_refund_id), detail = $3, utime = $4 \
             WHERE refund_no = $5 AND status IN {UNDER_WAY} AND status <> $1"
        ))
        .bind(status.as_str())
        .bind(provider_refund_id)
        .bind(detail)
        .bind(now)
        .bind(refund_no)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        Ok(changed == 1)
    }

    /// Completes refund `refund_no` in one transaction: the refund succeeded, its payment is
    /// `refunded`, the ledger reverses the payment's posting (biz [`REFUND_BIZ`], the refund's
    /// id: each line of the original negated, so the author's and the platform's shares go back
    /// to clearing), and the event telling the seller is recorded. Nothing changes when the
    /// refund was not under way (completed before: a repeated notification) or when the credit
    /// it reverses is not in the ledger yet ([`RefundCompletion`]).
    pub async fn complete_refund(
        &self,
        refund_no: &str,
        provider_refund_id: Option<&str>,
        refunded_at: i64,
        now: i64,
    ) -> Result<RefundCompletion, PostError> {
        let mut tx = self.db.writer().begin().await?;
        let refund: Option<Refund> = sqlx::query_as(&format!(
            "SELECT {REFUND_COLUMNS} FROM payment_refunds WHERE refund_no = $1"
        ))
        .bind(refund_no)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(refund) = refund else {
            return Ok(RefundCompletion::NotUnderWay);
        };
        if Self::lock_awaiting_credit(&mut tx, &refund, now).await? {
            return Ok(RefundCompletion::AwaitingCredit);
        }
        let changed = sqlx::query(&format!(
            "UPDATE payment_refunds SET status = 'succeeded', \
             provider_refund_id = COALESCE($1, provider_refund_id), refunded_at = $2, \
             detail = '', utime = $3 WHERE refund_no = $4 AND status IN {UNDER_WAY}"
        ))
        .bind(provider_refund_id)
        .bind(refunded_at)
        .bind(now)
        .bind(refund_no)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !changed {
            return Ok(RefundCompletion::NotUnderWay);
        }
        Self::reverse_and_refund(&mut tx, &refund, now).await?;
        tx.commit().await?;
        Ok(RefundCompletion::Completed(Box::new(refund)))
    }

    /// Books a refund the provider made without us (its merchant console) as `refund`, already
    /// succeeded, in one transaction with its reversal, the payment's `refunded` status and the
    /// event — never asked of the provider. Refused (`NotUnderWay`) while another refund of the
    /// trade is live.
    pub async fn book_external_refund(
        &self,
        refund: &NewRefund,
        refund_no: &str,
        (biz, biz_id, amt): (&str, i64, i64),
        now: i64,
    ) -> Result<RefundCompletion, PostError> {
        let mut tx = self.db.writer().begin().await?;
        let booked = Refund {
            id: 0,
            refund_no: refund_no.to_owned(),
            trade_no: refund.trade_no.clone(),
            biz: biz.to_owned(),
            biz_id,
            amt,
            reason: refund.reason.clone(),
            status: RefundStatus::Succeeded,
            provider_refund_id: None,
            requested_by: refund.requested_by,
            requested_via: refund.requested_via.clone(),
            allow_negative: super::model::Flag(refund.allow_negative),
            detail: "refunded at the provider without webook; booked by a person".to_owned(),
            refunded_at: Some(now),
            ctime: now,
            utime: now,
        };
        if Self::lock_awaiting_credit(&mut tx, &booked, now).await? {
            return Ok(RefundCompletion::AwaitingCredit);
        }
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO payment_refunds (refund_no, trade_no, biz, biz_id, amt, reason, status, \
             requested_by, requested_via, allow_negative, detail, refunded_at, ctime, utime) \
             VALUES ($1, $2, $3, $4, $5, $6, 'succeeded', $7, $8, $9, $10, $11, $11, $11) \
             ON CONFLICT DO NOTHING RETURNING id",
        )
        .bind(&booked.refund_no)
        .bind(&booked.trade_no)
        .bind(&booked.biz)
        .bind(booked.biz_id)
        .bind(booked.amt)
        .bind(&booked.reason)
        .bind(booked.requested_by)
        .bind(&booked.requested_via)
        .bind(i64::from(refund.allow_negative))
        .bind(&booked.detail)
        .bind(now)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(id) = id else {
            return Ok(RefundCompletion::NotUnderWay);
        };
        let booked = Refund { id, ..booked };
        Self::reverse_and_refund(&mut tx, &booked, now).await?;
        tx.commit().await?;
        Ok(RefundCompletion::Completed(Box::new(booked)))
    }

    /// Locks `refund`'s payment row for the rest of `tx` (so no settlement of it interleaves
    /// with the refund's completion) and says whether its credit is still on its way: a
    /// succeeded payment whose posting is not in the ledger yet.
    async fn lock_awaiting_credit(
        tx: &mut Transaction<'static, Any>,
        refund: &Refund,
        now: i64,
    ) -> sqlx::Result<bool> {
        let status: Option<String> = sqlx::query_scalar(
            "UPDATE payments SET utime = $1 WHERE trade_no = $2 RETURNING status",
        )
        .bind(now)
        .bind(&refund.trade_no)
        .fetch_optional(&mut **tx)
        .await?;
        if status.as_deref() != Some(PaymentStatus::Succeeded.as_str()) {
            return Ok(false);
        }
        let posted: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM account_entries WHERE biz = $1 AND biz_id = $2 LIMIT 1",
        )
        .bind(&refund.biz)
        .bind(refund.biz_id)
        .fetch_optional(&mut **tx)
        .await?;
        Ok(posted.is_none())
    }

    /// In `tx`, after `refund` succeeded: the ledger's reversal of what its payment credited
    /// (biz [`REFUND_BIZ`], the refund's id: each line negated), the payment `refunded`, and —
    /// when that changed it — the event telling the seller.
    async fn reverse_and_refund(
        tx: &mut Transaction<'static, Any>,
        refund: &Refund,
        now: i64,
    ) -> Result<(), PostError> {
        let original = account::lines_of(tx, &refund.biz, refund.biz_id).await?;
        if !original.is_empty() {
            let memo = format!("refund {} of {} {}", refund.id, refund.biz, refund.biz_id);
            let reversal = Posting {
                biz: REFUND_BIZ,
                biz_id: refund.id,
                lines: original
                    .into_iter()
                    .map(|line| Line {
                        account: line.account,
                        amt: -line.amt,
                        memo: memo.clone(),
                    })
                    .collect(),
            };
            account::post(tx, &reversal, now).await?;
        }
        let payment: Option<Payment> = sqlx::query_as(&format!(
            "UPDATE payments SET status = 'refunded', parked_at = NULL, utime = $1 \
             WHERE trade_no = $2 AND status <> 'refunded' RETURNING {COLUMNS}"
        ))
        .bind(now)
        .bind(&refund.trade_no)
        .fetch_optional(&mut **tx)
        .await?;
        if let Some(payment) = payment {
            Self::record_event(tx, &payment, now).await?;
        }
        Ok(())
    }

    /// How many discrepancies wait for a person — open, or claimed by one still acting (the
    /// `payment_discrepancies_open` gauge).
    pub async fn open_discrepancies(&self) -> sqlx::Result<i64> {
        sqlx::query_scalar(
            "SELECT COUNT(*) FROM payment_discrepancies WHERE status IN ('open', 'acting')",
        )
        .fetch_one(self.db.pool())
        .await
    }
}
