//! The `payments` and `payment_discrepancies` tables.
//!
//! A payment is written `pending` with the order it stands for, before the provider hears of
//! it; its status changes once — to `succeeded` or `failed` — in a transaction that also records
//! the event telling the seller ([`TOPIC_PAYMENT_SUCCEEDED`], [`TOPIC_PAYMENT_FAILED`]) in the
//! outbox, so a status change and its event are never one without the other. The change is
//! conditional on the row still being pending: of ten identical notifications racing, one
//! changes the row and records the event, the others find it settled.

use sqlx::AnyConnection;

use platform::{
    db::{placeholders, Db},
    events::outbox,
};

use super::model::{
    Discrepancy, NewDiscrepancy, NewPayment, Payment, PaymentEvent, PaymentStatus, Settled,
    Settlement, TOPIC_PAYMENT_FAILED, TOPIC_PAYMENT_SUCCEEDED,
};

/// Rows per keyset batch of the reconciliation reads.
pub const BATCH: i64 = 200;

const COLUMNS: &str = "id, trade_no, biz, biz_id, provider, amt, currency, description, status, \
                       code_url, txn_id, expires_at, paid_at, ctime";

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
        let mut found = Vec::with_capacity(trade_nos.len());
        for chunk in trade_nos.chunks(500) {
            let sql = format!(
                "SELECT {COLUMNS} FROM payments WHERE trade_no IN ({})",
                placeholders(1, chunk.len())
            );
            let mut query = sqlx::query_as::<_, Payment>(&sql);
            for trade_no in chunk {
                query = query.bind(trade_no);
            }
            found.extend(query.fetch_all(self.db.pool()).await?);
        }
        Ok(found)
    }

    /// Gives pending payment `trade_no` its final status and records the event saying so, in
    /// one transaction; a payment already settled is left as it is.
    pub async fn settle(
        &self,
        trade_no: &str,
        settlement: &Settlement,
        now: i64,
    ) -> sqlx::Result<Settled> {
        let mut tx = self.db.writer().begin().await?;
        let changed = sqlx::query(
            "UPDATE payments SET status = $1, txn_id = COALESCE($2, txn_id), paid_at = $3, \
             utime = $4 WHERE trade_no = $5 AND status = 'pending'",
        )
        .bind(settlement.status.as_str())
        .bind(settlement.txn_id.as_deref())
        .bind(settlement.paid_at)
        .bind(now)
        .bind(trade_no)
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
             AND id > $2 ORDER BY id LIMIT $3"
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
        let columns =
            "id, bill_date, kind, trade_no, provider_amt, our_amt, detail, status, note, \
                       ctime, utime";
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

    /// Marks open discrepancy `id` resolved by a person with `note`; false when there is no
    /// open one of that id.
    pub async fn resolve_discrepancy(&self, id: i64, note: &str, now: i64) -> sqlx::Result<bool> {
        let changed = sqlx::query(
            "UPDATE payment_discrepancies SET status = 'resolved', note = $1, utime = $2 \
             WHERE id = $3 AND status = 'open'",
        )
        .bind(note)
        .bind(now)
        .bind(id)
        .execute(self.db.writer())
        .await?
        .rows_affected();
        Ok(changed == 1)
    }

    /// How many discrepancies are open (the `payment_discrepancies_open` gauge).
    pub async fn open_discrepancies(&self) -> sqlx::Result<i64> {
        sqlx::query_scalar("SELECT COUNT(*) FROM payment_discrepancies WHERE status = 'open'")
            .fetch_one(self.db.pool())
            .await
    }
}
