//! What webook asks of a payment provider, in WeChat Pay v3 Native's terms: create an order and
//! get the code URL to show as a QR code, query an order, close it, download a day's trade
//! bill, and refund a paid order (and query the refund). Two providers implement it: [`super::wechat`] (WeChat Pay) and [`super::fake`] (the
//! embedded default, a provider inside webook that signs like WeChat).
//!
//! Notifications are not part of the trait: a provider only names the keys they are checked
//! with ([`NotificationKeys`]); [`super::notify`] checks them the same way for both.

use std::fmt::Debug;

use async_trait::async_trait;
use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use super::crypto::{ApiV3Key, PlatformKeys};

/// An order to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// Our trade number (`out_trade_no`): 6–32 characters of `[0-9A-Za-z_-|*]`, unique.
    pub trade_no: String,
    /// What is bought (shown to the payer).
    pub description: String,
    /// Fen, above 0.
    pub amt: i64,
    /// When the order stops accepting payment (ms since the epoch; `time_expire`).
    pub expires_at: i64,
}

/// WeChat's `trade_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TradeState {
    /// Paid.
    Success,
    /// Paid, then (partly) refunded.
    Refund,
    /// Not paid (yet).
    Notpay,
    /// Closed without payment.
    Closed,
    /// Revoked (card payments).
    Revoked,
    /// The payer is entering their password.
    Userpaying,
    /// The payment failed (e.g. the bank refused).
    Payerror,
}

/// WeChat's `amount` of a transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionAmount {
    /// Order total in fen.
    pub total: i64,
    /// What the payer paid, in fen (absent before payment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer_total: Option<i64>,
    /// `CNY`.
    #[serde(default)]
    pub currency: String,
    /// The payer's currency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer_currency: Option<String>,
}

/// A transaction as WeChat describes it: a query's answer and a notification's decrypted
/// resource have this shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    /// The app the order was made for.
    pub appid: String,
    /// The merchant.
    pub mchid: String,
    /// Our trade number.
    pub out_trade_no: String,
    /// WeChat's transaction id (absent before payment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<String>,
    /// `NATIVE`.
    #[serde(default)]
    pub trade_type: String,
    /// The state.
    pub trade_state: TradeState,
    /// Its description.
    #[serde(default)]
    pub trade_state_desc: String,
    /// When it was paid (RFC 3339), after payment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_time: Option<String>,
    /// The amounts.
    pub amount: TransactionAmount,
}

/// A refund to ask for (WeChat: `POST /v3/refund/domestic/refunds`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefundOrder {
    /// Our refund number (`out_refund_no`): asking again with it is safe.
    pub refund_no: String,
    /// The paid order's trade number.
    pub trade_no: String,
    /// Fen to refund.
    pub amt: i64,
    /// The order's total in fen.
    pub total: i64,
    /// Shown to the payer.
    pub reason: String,
}

/// WeChat's refund `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RefundState {
    /// The money is back with the payer.
    Success,
    /// Closed: nothing moved.
    Closed,
    /// Being returned.
    Processing,
    /// The return failed (e.g. the payer's card is closed): for a person.
    Abnormal,
}

/// A refund as the provider describes it: the answer to a refund request or a query, and a
/// refund notification's decrypted resource (whose fields WeChat names slightly differently:
/// both spellings are read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundResult {
    /// Our refund number.
    pub out_refund_no: String,
    /// The order's trade number.
    pub out_trade_no: String,
    /// The provider's refund id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refund_id: Option<String>,
    /// Where it stands (`status` in answers, `refund_status` in notifications).
    #[serde(alias = "refund_status")]
    pub status: RefundState,
    /// When the money was back (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_time: Option<String>,
    /// The amounts.
    pub amount: RefundAmount,
}

/// A refund's `amount`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefundAmount {
    /// Refunded, fen.
    pub refund: i64,
    /// The order's total, fen.
    pub total: i64,
}

/// One order line of a trade bill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BillRow {
    /// Our trade number (`商户订单号`).
    pub trade_no: String,
    /// The provider's transaction id (`微信订单号`).
    pub transaction_id: String,
    /// `交易状态`: `SUCCESS`, `REFUND`, `REVOKED`.
    pub trade_state: String,
    /// The order amount in fen (`订单金额`).
    pub amt: i64,
    /// When it was paid (`交易时间`, as the bill writes it).
    pub trade_time: String,
    /// A refund line's refund number (`商户退款单号`), `""` on a payment line.
    pub refund_no: String,
    /// A refund line's refunded fen (`退款金额`), 0 on a payment line.
    pub refund_amt: i64,
    /// A refund line's `退款状态` (`SUCCESS` once the money is back), `""` on a payment line.
    pub refund_status: String,
}

/// Why a provider call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// No answer in time: the outcome is unknown (an order may exist).
    #[error("the payment provider did not answer in time")]
    Timeout,
    /// The provider answered with an error (`code`, `message` as it sent them).
    #[error("the payment provider refused: {code}: {message}")]
    Refused {
        /// WeChat's error code, e.g. `ORDER_NOT_EXIST`, `ORDERPAID`, `SIGN_ERROR`.
        code: String,
        /// Its message.
        message: String,
    },
    /// The answer was not what the protocol promises (bad signature, malformed body, hash
    /// mismatch of a bill): not trusted.
    #[error("the payment provider's answer is not trusted: {0}")]
    Untrusted(String),
    /// The provider could not be reached, or answered 5xx.
    #[error("the payment provider is unavailable: {0}")]
    Unavailable(String),
}

/// What notifications of a provider are checked against.
#[derive(Debug, Clone)]
pub struct NotificationKeys {
    /// Our merchant id: a transaction of another merchant is refused.
    pub mchid: String,
    /// Our app id: a transaction of another app is refused.
    pub appid: String,
    /// Decrypts the resource.
    pub api_v3_key: ApiV3Key,
    /// Verifies the signature.
    pub platform_keys: PlatformKeys,
}

/// A payment provider.
#[async_trait]
pub trait PaymentProvider: Send + Sync + Debug {
    /// `wechat` or `fake`: stored with each payment.
    fn name(&self) -> &'static str;

    /// Creates `order` (Native) and returns the code URL to show. Creating the same trade
    /// number again with the same details returns the same URL (WeChat: idempotent by
    /// `out_trade_no`), so a retry after a timeout is safe.
    async fn prepay(&self, order: &Order) -> Result<String, ProviderError>;

    /// The order's transaction; `None` when the provider has no such order
    /// (`ORDER_NOT_EXIST`).
    async fn query(&self, trade_no: &str) -> Result<Option<Transaction>, ProviderError>;

    /// Closes an unpaid order so that it can no longer be paid. Closing a closed order is
    /// success; closing a paid one is [`ProviderError::Refused`] with code `ORDERPAID`.
    async fn close(&self, trade_no: &str) -> Result<(), ProviderError>;

    /// The order lines of the trade bill of `date` (China Standard Time), every state.
    async fn trade_bill(&self, date: NaiveDate) -> Result<Vec<BillRow>, ProviderError>;

    /// Asks for `refund` of a paid order; asking again with the same refund number answers the
    /// same refund (WeChat: idempotent by `out_refund_no`).
    async fn refund(&self, refund: &RefundOrder) -> Result<RefundResult, ProviderError>;

    /// The refund of `refund_no`; `None` when the provider has none (`RESOURCE_NOT_EXISTS`).
    async fn query_refund(&self, refund_no: &str) -> Result<Option<RefundResult>, ProviderError>;

    /// What this provider's notifications are checked against.
    fn notification_keys(&self) -> &NotificationKeys;
}

/// No provider (cluster mode without `pay_provider`): every call is
/// [`ProviderError::Unavailable`], every notification is refused (no platform key is known).
#[derive(Debug)]
pub struct Unconfigured {
    keys: NotificationKeys,
}

impl Default for Unconfigured {
    fn default() -> Self {
        Self {
            keys: NotificationKeys {
                mchid: String::new(),
                appid: String::new(),
                api_v3_key: ApiV3Key::generate(),
                platform_keys: PlatformKeys::new(),
            },
        }
    }
}

fn unconfigured() -> ProviderError {
    ProviderError::Unavailable("no payment provider is configured (pay_provider)".to_owned())
}

#[async_trait]
impl PaymentProvider for Unconfigured {
    fn name(&self) -> &'static str {
        "none"
    }

    async fn prepay(&self, _order: &Order) -> Result<String, ProviderError> {
        Err(unconfigured())
    }

    async fn query(&self, _trade_no: &str) -> Result<Option<Transaction>, ProviderError> {
        Err(unconfigured())
    }

    async fn close(&self, _trade_no: &str) -> Result<(), ProviderError> {
        Err(unconfigured())
    }

    async fn trade_bill(&self, _date: NaiveDate) -> Result<Vec<BillRow>, ProviderError> {
        Err(unconfigured())
    }

    async fn refund(&self, _refund: &RefundOrder) -> Result<RefundResult, ProviderError> {
        Err(unconfigured())
    }

    async fn query_refund(&self, _refund_no: &str) -> Result<Option<RefundResult>, ProviderError> {
        Err(unconfigured())
    }

    fn notification_keys(&self) -> &NotificationKeys {
        &self.keys
    }
}
