//! The `payments` and `payment_discrepancies` tables.
//!
//! A payment is written `pending` with the order it stands for, before the provider hears of
//! it; its status changes once — to `succeeded` or `failed` — in a transaction that also records
//! the event telling the seller ([`TOPIC_PAYMENT_SUCCEEDED`], [`TOPIC_PAYMENT_FAILED`]) in the
//! outbox, so a status change and its event are never one without the other. The change is
//! conditional on the row still being pending: of ten identical notifications racing, one
//! changes the row and records the event, the others find it settled.

use serde::{Deserialize, Serialize};
use sqlx::AnyConnection;

use platform::{
    db::{placeholders, Db},
    events::outbox,
};

/// Topic of a payment that succeeded; key: the trade number; payload: [`PaymentEvent`].
pub const TOPIC_PAYMENT_SUCCEEDED: &str = "payment_succeeded";
/// Topic of a payment that failed (closed unpaid, refused); payload: [`PaymentEvent`].
pub const TOPIC_PAYMENT_FAILED: &str = "payment_failed";

/// Rows per keyset batch of the reconciliation reads.
pub const BATCH: i64 = 200;

/// Where a payment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentStatus {
    /// Ordered, not (yet) paid.
    Pending,
    /// Paid.
    Succeeded,
    /// Will never be paid: closed unpaid, or refused.
    Failed,
}

impl PaymentStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }
}

/// The stored spelling read back (how rows decode the `status` column).
impl TryFrom<String> for PaymentStatus {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        match text.as_str() {
            "pending" => Ok(Self::Pending),
            "succeeded" => Ok(Self::Succeeded),
            "failed" => Ok(Self::Failed),
            other => Err(format!("unknown payment status {other:?}")),
        }
    }
}

/// A payment row.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Payment {
    /// Row id.
    pub id: i64,
    /// Our trade number at the provider (`out_trade_no`).
    pub trade_no: String,
    /// What was sold: its kind…
    pub biz: String,
    /// …and id.
    pub biz_id: i64,
    /// `wechat` or `fake`.
    pub provider: String,
    /// Fen.
    pub amt: i64,
    /// `CNY`.
    pub currency: String,
    /// Shown to the payer.
    pub description: String,
    /// Where it stands.
    #[sqlx(try_from = "String")]
    pub status: PaymentStatus,
    /// What the payer scans, once the provider has the order.
    pub code_url: Option<String>,
    /// The provider's transaction id, once paid.
    pub txn_id: Option<String>,
    /// When the order stops accepting payment (ms).
    pub expires_at: i64,
    /// When it was paid (ms).
    pub paid_at: Option<i64>,
    /// Created (ms).
    pub ctime: i64,
}

const COLUMNS: &str = "id, trade_no, biz, biz_id, provider, amt, currency, description, status, \
                       code_url, txn_id, expires_at, paid_at, ctime";

/// A payment to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPayment {
    /// Our trade number (unique).
    pub trade_no: String,
    /// What is sold: its kind…
    pub biz: &'static str,
    /// …and id (one payment per thing sold).
    pub biz_id: i64,
    /// Fen, above 0.
    pub amt: i64,
    /// Shown to the payer.
    pub description: String,
    /// When the order stops accepting payment (ms).
    pub expires_at: i64,
}

/// What the seller is told when a payment settles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentEvent {
    /// Our trade number.
    pub trade_no: String,
    /// What was sold: its kind…
    pub biz: String,
    /// …and id.
    pub biz_id: i64,
    /// Fen.
    pub amt: i64,
    /// The provider's transaction id (succeeded payments).
    pub txn_id: Option<String>,
}

impl PaymentEvent {
    fn of(payment: &Payment) -> Self {
        Self {
            trade_no: payment.trade_no.clone(),
            biz: payment.biz.clone(),
            biz_id: payment.biz_id,
            amt: payment.amt,
            txn_id: payment.txn_id.clone(),
        }
    }
}

/// A final status to give a pending payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// [`PaymentStatus::Succeeded`] or [`PaymentStatus::Failed`].
    pub status: PaymentStatus,
    /// The provider's transaction id, if it has one.
    pub txn_id: Option<String>,
    /// When it was paid (ms), for a success.
    pub paid_at: Option<i64>,
}

/// What [`PaymentStore::settle`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The payment was pending and now has the new status; its event is recorded.
    Changed(Payment),
    /// It already had that status: nothing changed (a repeated notification).
    Already(Payment),
    /// It already had the other final status: nothing changed.
    Contrary(Payment),
    /// No payment has that trade number.
    Unknown,
}

/// A discrepancy to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDiscrepancy {
    /// The bill day it was found in (`YYYY-MM-DD`), or `""` outside a bill comparison.
    pub bill_date: String,
    /// What is wrong (see [`super::reconcile`]).
    pub kind: &'static str,
    /// The trade it is about.
    pub trade_no: String,
    /// The provider's amount, if it has one.
    pub provider_amt: Option<i64>,
    /// Ours, if we have one.
    pub our_amt: Option<i64>,
    /// For the person who looks at it.
    pub detail: String,
    /// `open` (for a person) or `fixed` (repaired automatically).
    pub status: &'static str,
}

/// A recorded discrepancy, as the admin route shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Discrepancy {
    /// Id.
    pub id: i64,
    /// Bill day, or `""`.
    pub bill_date: String,
    /// What is wrong.
    pub kind: String,
    /// The trade.
    pub trade_no: String,
    /// The provider's amount (fen).
    pub provider_amt: Option<i64>,
    /// Ours (fen).
    pub our_amt: Option<i64>,
    /// Details.
    pub detail: String,
    /// `open`, `fixed` or `resolved`.
    pub status: String,
    /// What the person who resolved it wrote.
    pub note: String,
    /// Found (ms).
    pub ctime: i64,
    /// Last changed (ms).
    pub utime: i64,
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
