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
/// Topic of a payment refunded in full (its reversal is posted); payload: [`PaymentEvent`].
pub const TOPIC_PAYMENT_REFUNDED: &str = "payment_refunded";
/// The `biz` of a refund's reversal in the ledger (`biz_id`: the refund's id).
pub const REFUND_BIZ: &str = "refund";

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
    /// Paid, then refunded in full.
    Refunded,
}

impl PaymentStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Refunded => "refunded",
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
            "refunded" => Ok(Self::Refunded),
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
    /// When it was parked for a person (the sweep leaves it alone), if it was.
    pub parked_at: Option<i64>,
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
    /// The bill day it was found in (`YYYY-MM-DD`), or `""` outside a bill comparison — or,
    /// for a discrepancy about one refund, its refund number (each failed refund is its own).
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
    /// Bill day, `""`, or the refund number of a discrepancy about one refund.
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
    /// What they did: `credit`, `refund`, `resolve` (`""` while open or fixed automatically).
    pub action: String,
    /// Who did it (admin uid; 0 from the command line).
    pub acted_by: Option<i64>,
    /// Where, outside the admin API: `cli:<user>@<host>`.
    pub acted_via: String,
    /// What can be done about it now (see [`Action::for_kind`]); empty once it is closed.
    #[sqlx(skip)]
    pub actions: Vec<Action>,
    /// Found (ms).
    pub ctime: i64,
    /// Last changed (ms).
    pub utime: i64,
}

/// What a person can do about a discrepancy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Settle the payment as paid so the seller credits it (money arrived for it).
    Credit,
    /// Give the payer their money back (through the provider), reversing any credit.
    Refund,
    /// Close it with a note saying what was done elsewhere.
    Resolve,
}

impl Action {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Credit => "credit",
            Self::Refund => "refund",
            Self::Resolve => "resolve",
        }
    }

    /// The action spelled `text` (`credit`, `refund`, `resolve`).
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Credit, Self::Refund, Self::Resolve]
            .into_iter()
            .find(|action| action.as_str() == text)
    }

    /// The actions a discrepancy of `kind` offers (every kind can be resolved with a note).
    pub fn for_kind(kind: &str) -> &'static [Action] {
        match kind {
            // Money arrived for a payment we gave up on: book it, or give it back.
            "paid_after_failure" => &[Self::Credit, Self::Refund, Self::Resolve],
            // Paid at the provider, not settled here (the query did not settle it).
            "unsettled_payment" => &[Self::Credit, Self::Refund, Self::Resolve],
            // Money arrived for a trade we never made, or of another amount: give it back.
            "missing_payment"
            | "unknown_trade"
            | "amount_mismatch"
            | "notified_amount_mismatch" => &[Self::Refund, Self::Resolve],
            // The provider refunded without us (its console): book the refund (reverse the
            // credit); a closed refund: ask again.
            "refunded" | "refund_failed" => &[Self::Refund, Self::Resolve],
            // The provider reports a refund succeeded that we had as failed: book it.
            "refund_after_failure" => &[Self::Refund, Self::Resolve],
            _ => &[Self::Resolve],
        }
    }
}

/// Where a refund stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefundStatus {
    /// Asked of the provider; its answer is not known yet (asked again by the sweep).
    Requested,
    /// The provider accepted it and is returning the money.
    Processing,
    /// The payer has the money back; the reversal is posted.
    Succeeded,
    /// The provider closed it: nothing moved, it may be asked again.
    Failed,
    /// The provider could not pay it back yet (e.g. the payer's card is closed): it may still
    /// succeed once handled at the provider; queried by the sweep meanwhile.
    Abnormal,
}

impl RefundStatus {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Abnormal => "abnormal",
        }
    }
}

/// The stored spelling read back.
impl TryFrom<String> for RefundStatus {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        match text.as_str() {
            "requested" => Ok(Self::Requested),
            "processing" => Ok(Self::Processing),
            "succeeded" => Ok(Self::Succeeded),
            "failed" => Ok(Self::Failed),
            "abnormal" => Ok(Self::Abnormal),
            other => Err(format!("unknown refund status {other:?}")),
        }
    }
}

/// A refund row, as the admin routes show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema, sqlx::FromRow)]
#[serde(rename_all = "camelCase")]
pub struct Refund {
    /// Id (the reversal's `biz_id`).
    pub id: i64,
    /// Our refund number at the provider (`out_refund_no`).
    pub refund_no: String,
    /// The payment's trade number.
    pub trade_no: String,
    /// What was sold: its kind…
    pub biz: String,
    /// …and id.
    pub biz_id: i64,
    /// Fen (the whole payment).
    pub amt: i64,
    /// Why (shown to the payer by the provider).
    pub reason: String,
    /// Where it stands.
    #[sqlx(try_from = "String")]
    pub status: RefundStatus,
    /// The provider's refund id, once it has one.
    pub provider_refund_id: Option<String>,
    /// The admin who asked for it (0 from the command line).
    pub requested_by: i64,
    /// Where, outside the admin API: `cli:<user>@<host>`.
    pub requested_via: String,
    /// Whether a balance may go below 0 to reverse the credit.
    #[sqlx(try_from = "i64")]
    #[schema(value_type = bool)]
    pub allow_negative: Flag,
    /// The provider's last word (e.g. why it failed).
    pub detail: String,
    /// When the money was back with the payer (ms).
    pub refunded_at: Option<i64>,
    /// Asked (ms).
    pub ctime: i64,
    /// Last changed (ms).
    pub utime: i64,
}

impl RefundStatus {
    /// The status spelled `text`.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Requested,
            Self::Processing,
            Self::Succeeded,
            Self::Failed,
            Self::Abnormal,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }
}

/// A boolean stored as 0/1 (portable across SQLite and PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Flag(pub bool);

impl From<i64> for Flag {
    fn from(value: i64) -> Self {
        Self(value != 0)
    }
}

/// A refund to ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRefund {
    /// The payment to refund (in full).
    pub trade_no: String,
    /// Why, 1–80 characters (WeChat shows it to the payer).
    pub reason: String,
    /// The admin asking (0 from the command line).
    pub requested_by: i64,
    /// Where, outside the admin API: `cli:<user>@<host>` (recorded, never sent to the payer).
    pub requested_via: String,
    /// Let a balance go below 0 when the credit is reversed (else such a refund is refused).
    pub allow_negative: bool,
}
