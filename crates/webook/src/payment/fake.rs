//! The `fake` payment provider, the embedded default: a payment provider inside webook, with its
//! own books (`fake_pay_orders`, what WeChat keeps on its side), its own platform key and APIv3
//! key (generated at start-up), and a payment page at the code URL (`GET /pay/fake/:tradeNo`)
//! where a person pays or fails the order.
//!
//! Data flow: a reward's prepay creates the fake's order and returns the page's URL as
//! `codeURL`; the page's buttons (`POST /pay/fake/:tradeNo/confirm`) record the payer's decision
//! in the fake's books ([`FakePay::decide`]), which then builds the notification exactly as
//! WeChat would — the transaction encrypted with AES-256-GCM under the APIv3 key, the body
//! signed with the platform key — and hands it to the same handler as `/pay/wechat/notify`
//! ([`super::PaymentService::accept_notification`]): same verification, same cross-checks. Queries,
//! closes, refunds (immediate: the money is back at once) and the trade bill read the fake's books — the bill written in WeChat's format and
//! read back by the WeChat client's parser — so the reconciliation jobs run against it as they
//! would against WeChat.
//!
//! Each process generates its keys; the notification never leaves the process that signed it,
//! so instances need not share them.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::NaiveDate;
use platform::db::{now_millis, Db};

use super::{
    china_day_bounds, china_time,
    crypto::{ApiV3Key, CryptoError, PlatformKeys, SigningKey},
    notify::{seal, SealedNotification},
    provider::{
        BillRow, NotificationKeys, Order, PaymentProvider, ProviderError, RefundAmount,
        RefundOrder, RefundResult, RefundState, TradeState, Transaction, TransactionAmount,
    },
    wechat::{parse_trade_bill, write_trade_bill},
};

/// The fake merchant's id.
pub const FAKE_MCHID: &str = "1900000001";
/// The fake app's id.
pub const FAKE_APPID: &str = "wxfakepay00000001";
/// The serial of the fake's platform key.
pub const FAKE_SERIAL: &str = "FAKE_PUB_KEY_ID_0001";

/// An order in the fake's books.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct FakeOrder {
    /// Our trade number.
    pub trade_no: String,
    /// What is bought.
    pub description: String,
    /// Fen.
    pub amt: i64,
    /// WeChat's trade state.
    #[sqlx(try_from = "String")]
    pub state: TradeState,
    /// The fake's transaction id, once decided.
    pub transaction_id: Option<String>,
    /// When it stops accepting payment (ms).
    pub expires_at: i64,
    /// When it was paid (ms).
    pub paid_at: Option<i64>,
    /// Our refund number, once refunded.
    pub refund_no: Option<String>,
    /// The fake's refund id.
    pub refund_id: Option<String>,
    /// Refunded fen.
    pub refund_amt: Option<i64>,
    /// When it was refunded (ms).
    pub refunded_at: Option<i64>,
}

fn state_text(state: TradeState) -> &'static str {
    match state {
        TradeState::Success => "SUCCESS",
        TradeState::Refund => "REFUND",
        TradeState::Notpay => "NOTPAY",
        TradeState::Closed => "CLOSED",
        TradeState::Revoked => "REVOKED",
        TradeState::Userpaying => "USERPAYING",
        TradeState::Payerror => "PAYERROR",
    }
}

/// A state as the fake's books spell it (WeChat's spelling) read back.
impl TryFrom<String> for TradeState {
    type Error = String;

    fn try_from(state: String) -> Result<Self, Self::Error> {
        serde_json::from_value(serde_json::Value::String(state.clone()))
            .map_err(|_| format!("unknown state {state}"))
    }
}

fn unavailable(err: sqlx::Error) -> ProviderError {
    ProviderError::Unavailable(format!("the fake provider's books: {err}"))
}

fn refused(code: &str, message: &str) -> ProviderError {
    ProviderError::Refused {
        code: code.to_owned(),
        message: message.to_owned(),
    }
}

const ORDER_COLUMNS: &str = "trade_no, description, amt, state, transaction_id, expires_at, \
                             paid_at, refund_no, refund_id, refund_amt, refunded_at";

/// The fake provider; cheap to clone.
#[derive(Debug, Clone)]
pub struct FakePay {
    db: Db,
    platform_key: Arc<SigningKey>,
    keys: NotificationKeys,
    base_url: String,
}

impl FakePay {
    /// The fake on `db`'s `fake_pay_orders`, with new keys; code URLs start with `base_url`.
    pub fn new(db: Db, base_url: &str) -> Result<Self, CryptoError> {
        let platform_key = SigningKey::generate(FAKE_SERIAL)?;
        let platform_keys = PlatformKeys::new();
        platform_keys.add_der(FAKE_SERIAL, &platform_key.public_key_der()?)?;
        Ok(Self {
            db,
            platform_key: Arc::new(platform_key),
            keys: NotificationKeys {
                mchid: FAKE_MCHID.to_owned(),
                appid: FAKE_APPID.to_owned(),
                api_v3_key: ApiV3Key::generate(),
                platform_keys,
            },
            base_url: base_url.trim_end_matches('/').to_owned(),
        })
    }

    /// The payment page of `trade_no`.
    pub fn code_url(&self, trade_no: &str) -> String {
        format!("{}/pay/fake/{trade_no}", self.base_url)
    }

    /// The order of `trade_no` in the fake's books.
    pub async fn order(&self, trade_no: &str) -> Result<Option<FakeOrder>, ProviderError> {
        sqlx::query_as(&format!(
            "SELECT {ORDER_COLUMNS} FROM fake_pay_orders WHERE trade_no = $1"
        ))
        .bind(trade_no)
        .fetch_optional(self.db.pool())
        .await
        .map_err(unavailable)
    }

    /// The payer pays (`paid`) or fails the unpaid, unexpired order `trade_no`; returns the
    /// notification to deliver. Deciding an order again the same way gives its notification
    /// again (WeChat repeats notifications too); deciding it differently is refused.
    pub async fn decide(
        &self,
        trade_no: &str,
        paid: bool,
    ) -> Result<SealedNotification, ProviderError> {
        let now = now_millis();
        let (state, transaction_id) = if paid {
            (
                TradeState::Success,
                format!("fake{now}{}", &super::crypto::random_nonce()[..8]),
            )
        } else {
            (TradeState::Payerror, String::new())
        };
        sqlx::query(
            "UPDATE fake_pay_orders SET state = $1, transaction_id = $2, paid_at = $3 \
             WHERE trade_no = $4 AND state = 'NOTPAY' AND expires_at > $5",
        )
        .bind(state_text(state))
        .bind((!transaction_id.is_empty()).then_some(transaction_id))
        .bind(paid.then_some(now))
        .bind(trade_no)
        .bind(now)
        .execute(self.db.writer())
        .await
        .map_err(unavailable)?;
        let order = self
            .order(trade_no)
            .await?
            .ok_or_else(|| refused("ORDER_NOT_EXIST", "no such order"))?;
        if order.state != state {
            return Err(match order.state {
                TradeState::Notpay => refused("ORDER_CLOSED", "the order has expired"),
                TradeState::Closed => refused("ORDER_CLOSED", "the order is closed"),
                _ => refused("ORDERPAID", "the order has already been decided"),
            });
        }
        self.notification(&self.transaction(&order), now / 1000)
            .map_err(|err| ProviderError::Unavailable(err.to_string()))
    }

    /// The notification of `transaction`, sealed with the fake's keys at `timestamp_secs`.
    pub fn notification(
        &self,
        transaction: &Transaction,
        timestamp_secs: i64,
    ) -> Result<SealedNotification, CryptoError> {
        seal(
            &self.keys.api_v3_key,
            &self.platform_key,
            transaction,
            timestamp_secs,
        )
    }

    /// The order as WeChat describes a transaction.
    pub fn transaction(&self, order: &FakeOrder) -> Transaction {
        let paid = order.state == TradeState::Success;
        Transaction {
            appid: FAKE_APPID.to_owned(),
            mchid: FAKE_MCHID.to_owned(),
            out_trade_no: order.trade_no.clone(),
            transaction_id: order.transaction_id.clone(),
            trade_type: "NATIVE".to_owned(),
            trade_state: order.state,
            trade_state_desc: state_text(order.state).to_owned(),
            success_time: order.paid_at.filter(|_| paid).map(china_time),
            amount: TransactionAmount {
                total: order.amt,
                payer_total: paid.then_some(order.amt),
                currency: "CNY".to_owned(),
                payer_currency: paid.then(|| "CNY".to_owned()),
            },
        }
    }

    /// The refund of `order`, as WeChat describes one (refunds are immediate here).
    fn refund_result(order: &FakeOrder) -> Option<RefundResult> {
        Some(RefundResult {
            out_refund_no: order.refund_no.clone()?,
            out_trade_no: order.trade_no.clone(),
            refund_id: order.refund_id.clone(),
            status: RefundState::Success,
            success_time: order.refunded_at.map(china_time),
            amount: RefundAmount {
                refund: order.refund_amt?,
                total: order.amt,
            },
        })
    }
}

/// `ms` as WeChat's bill writes times: `2026-12-01 10:34:56` (China Standard Time).
fn bill_time(ms: i64) -> String {
    china_time(ms)
        .replacen('T', " ", 1)
        .chars()
        .take(19)
        .collect()
}

#[async_trait]
impl PaymentProvider for FakePay {
    fn name(&self) -> &'static str {
        "fake"
    }

    async fn prepay(&self, order: &Order) -> Result<String, ProviderError> {
        sqlx::query(
            "INSERT INTO fake_pay_orders (trade_no, description, amt, state, expires_at, ctime) \
             VALUES ($1, $2, $3, 'NOTPAY', $4, $5) ON CONFLICT (trade_no) DO NOTHING",
        )
        .bind(&order.trade_no)
        .bind(&order.description)
        .bind(order.amt)
        .bind(order.expires_at)
        .bind(now_millis())
        .execute(self.db.writer())
        .await
        .map_err(unavailable)?;
        match self.order(&order.trade_no).await? {
            Some(existing) if existing.amt == order.amt => Ok(self.code_url(&order.trade_no)),
            Some(_) => Err(refused(
                "INVALID_REQUEST",
                "an order of that out_trade_no exists with other details",
            )),
            None => Err(ProviderError::Unavailable(
                "the fake provider lost an order".to_owned(),
            )),
        }
    }

    async fn query(&self, trade_no: &str) -> Result<Option<Transaction>, ProviderError> {
        Ok(self
            .order(trade_no)
            .await?
            .map(|order| self.transaction(&order)))
    }

    async fn close(&self, trade_no: &str) -> Result<(), ProviderError> {
        sqlx::query(
            "UPDATE fake_pay_orders SET state = 'CLOSED' WHERE trade_no = $1 AND state = 'NOTPAY'",
        )
        .bind(trade_no)
        .execute(self.db.writer())
        .await
        .map_err(unavailable)?;
        match self.order(trade_no).await?.map(|order| order.state) {
            None => Err(refused("ORDER_NOT_EXIST", "no such order")),
            Some(TradeState::Success | TradeState::Refund) => {
                Err(refused("ORDERPAID", "the order is paid"))
            }
            Some(_) => Ok(()),
        }
    }

    async fn trade_bill(&self, date: NaiveDate) -> Result<Vec<BillRow>, ProviderError> {
        let (from, to) = china_day_bounds(date);
        // WeChat's bill of a day: a SUCCESS line for each order paid that day (whatever became
        // of it later) and a REFUND line for each refund made that day.
        let orders: Vec<FakeOrder> = sqlx::query_as(&format!(
            "SELECT {ORDER_COLUMNS} FROM fake_pay_orders \
             WHERE (paid_at >= $1 AND paid_at < $2) OR (refunded_at >= $1 AND refunded_at < $2) \
             ORDER BY paid_at, trade_no"
        ))
        .bind(from)
        .bind(to)
        .fetch_all(self.db.pool())
        .await
        .map_err(unavailable)?;
        let within = |at: Option<i64>| at.is_some_and(|at| (from..to).contains(&at));
        let mut lines = Vec::new();
        for order in orders {
            let transaction_id = order.transaction_id.clone().unwrap_or_default();
            if within(order.paid_at) {
                lines.push(BillRow {
                    trade_time: order.paid_at.map(bill_time).unwrap_or_default(),
                    trade_no: order.trade_no.clone(),
                    transaction_id: transaction_id.clone(),
                    trade_state: "SUCCESS".to_owned(),
                    amt: order.amt,
                    refund_no: String::new(),
                    refund_amt: 0,
                    refund_status: String::new(),
                });
            }
            if within(order.refunded_at) {
                lines.push(BillRow {
                    trade_time: order.refunded_at.map(bill_time).unwrap_or_default(),
                    trade_no: order.trade_no.clone(),
                    transaction_id,
                    trade_state: "REFUND".to_owned(),
                    amt: order.amt,
                    refund_no: order.refund_no.clone().unwrap_or_default(),
                    refund_amt: order.refund_amt.unwrap_or_default(),
                    refund_status: "SUCCESS".to_owned(),
                });
            }
        }
        // Served in WeChat's bill format and read back by its parser, as the real bill is.
        parse_trade_bill(&write_trade_bill(&lines, FAKE_MCHID, FAKE_APPID))
    }

    async fn refund(&self, refund: &RefundOrder) -> Result<RefundResult, ProviderError> {
        let now = now_millis();
        let refund_id = format!("fakerf{now}{}", &super::crypto::random_nonce()[..8]);
        sqlx::query(
            "UPDATE fake_pay_orders SET state = 'REFUND', refund_no = $1, refund_id = $2, \
             refund_amt = $3, refunded_at = $4 \
             WHERE trade_no = $5 AND state = 'SUCCESS' AND amt = $6 AND amt = $3",
        )
        .bind(&refund.refund_no)
        .bind(refund_id)
        .bind(refund.amt)
        .bind(now)
        .bind(&refund.trade_no)
        .bind(refund.total)
        .execute(self.db.writer())
        .await
        .map_err(unavailable)?;
        let order = self
            .order(&refund.trade_no)
            .await?
            .ok_or_else(|| refused("RESOURCE_NOT_EXISTS", "no such order"))?;
        match Self::refund_result(&order) {
            Some(done) if done.out_refund_no == refund.refund_no => Ok(done),
            Some(_) => Err(refused("INVALID_REQUEST", "the order is refunded in full")),
            None if order.amt != refund.total || refund.amt != order.amt => {
                Err(refused("PARAM_ERROR", "the amount is not the order's"))
            }
            None => Err(refused("INVALID_REQUEST", "the order is not paid")),
        }
    }

    async fn query_refund(&self, refund_no: &str) -> Result<Option<RefundResult>, ProviderError> {
        let order: Option<FakeOrder> = sqlx::query_as(&format!(
            "SELECT {ORDER_COLUMNS} FROM fake_pay_orders WHERE refund_no = $1"
        ))
        .bind(refund_no)
        .fetch_optional(self.db.pool())
        .await
        .map_err(unavailable)?;
        Ok(order.as_ref().and_then(Self::refund_result))
    }

    fn notification_keys(&self) -> &NotificationKeys {
        &self.keys
    }
}
