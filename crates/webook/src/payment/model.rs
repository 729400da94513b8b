//! The payment domain: where a payment stands ([`PaymentStatus`]), the payment row
//! ([`Payment`]), what a seller records ([`NewPayment`]), how a payment settles ([`Settlement`],
//! [`Settled`]), the event telling the seller ([`PaymentEvent`] on [`TOPIC_PAYMENT_SUCCEEDED`] /
//! [`TOPIC_PAYMENT_FAILED`]) and the discrepancies reconciliation finds ([`NewDiscrepancy`],
//! [`Discrepancy`]). [`super::store`] reads and writes them; [`super::service`] and
//! [`super::reconcile`] decide with them.

use serde::{Deserialize, Serialize};

/// Topic of a payment that succeeded; key: the trade number; payload: [`PaymentEvent`].
pub const TOPIC_PAYMENT_SUCCEEDED: &str = "payment_succeeded";
/// Topic of a payment that failed (closed unpaid, refused); payload: [`PaymentEvent`].
pub const TOPIC_PAYMENT_FAILED: &str = "payment_failed";

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
    /// The event of `payment` as it stands.
    pub(super) fn of(payment: &Payment) -> Self {
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

/// What [`PaymentStore::settle`](super::store::PaymentStore::settle) did.
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
