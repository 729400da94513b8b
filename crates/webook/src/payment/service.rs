//! [`PaymentService`]: what sellers (rewards) and the HTTP handlers call. Orders are recorded in
//! the seller's transaction ([`PaymentService::record_order`]), then sent to the provider
//! ([`PaymentService::prepay`]); a transaction the provider reports — by notification
//! ([`PaymentService::accept_notification`]) or in answer to a query (the sweep, the active
//! queries, reconciliation) — is checked against our payment and applied by one path
//! ([`PaymentService::apply_transaction`]). Refunds are in [`super::refund`], the fixes a person
//! makes in [`super::actions`].
//!
//! Each payment is queried, closed and refunded at the provider it was ordered from
//! (`payments.provider`), also after the deployment switched providers. An expired order is
//! closed and then queried again: only a closed (or unknown) answer fails it — a payer who was
//! entering their password when we closed (`USERPAYING`) ends paid and credited. A payment the
//! provider reports in a state we cannot settle (refunded while pending, another amount, stuck
//! unpaid a day after expiry) is parked for a person with a discrepancy saying why.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
    time::Duration,
};

use async_trait::async_trait;
use axum::http::HeaderMap;
use sqlx::AnyConnection;

use platform::{
    db::{duration_millis, now_millis},
    error::{AppError, Msg},
    events::outbox::Outbox,
};

use super::{
    crypto::CryptoError,
    model::{NewDiscrepancy, NewPayment, Payment, PaymentStatus, Settled, Settlement},
    notify::{self, NotifyError, Opened},
    parse_time,
    provider::{Order, PaymentProvider, ProviderError, TradeState, Transaction},
    store::PaymentStore,
    PAYMENT_DISCREPANCIES_TOTAL, PAYMENT_NOTIFICATIONS_TOTAL,
};
use crate::account::{Ledger, Posting};

/// How long after its expiry an order the provider still calls open is parked for a person.
const STUCK_AFTER: Duration = Duration::from_secs(24 * 3600);

/// What a seller (rewards) tells reconciliation about its sales.
#[async_trait]
pub trait Seller: Send + Sync + std::fmt::Debug {
    /// The postings the ledger must have for sales `biz_ids` (those that exist), by id — each
    /// sale's split as the settings of its time imply — read in one go per few hundred.
    async fn expected_postings(&self, biz_ids: &[i64]) -> anyhow::Result<HashMap<i64, Posting>>;
}

/// The sellers by `biz`; registered as sellers install.
#[derive(Debug, Clone, Default)]
struct Sellers(Arc<RwLock<HashMap<String, Arc<dyn Seller>>>>);

/// What applying a provider's transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The payment settled now (its event is recorded).
    Settled(PaymentStatus),
    /// It had settled that way before: nothing changed.
    AlreadySettled,
    /// The provider says it is still open (not paid, or being paid): nothing changed.
    StillOpen,
    /// Nothing changed; a discrepancy was recorded for a person (settled the other way before,
    /// or refunded).
    Recorded(&'static str),
}

/// The payments service; cheap to clone.
#[derive(Debug, Clone)]
pub struct PaymentService {
    store: PaymentStore,
    provider: Arc<dyn PaymentProvider>,
    earlier: Vec<Arc<dyn PaymentProvider>>,
    outbox: Outbox,
    ledger: Ledger,
    sellers: Sellers,
    expiry: Duration,
}

impl PaymentService {
    /// Payments in `store`, new ones through `provider` (`earlier` answers for the payments
    /// ordered from providers used before), credited in `ledger`; orders may be paid for
    /// `expiry`.
    pub fn new(
        store: PaymentStore,
        (provider, earlier): (Arc<dyn PaymentProvider>, Vec<Arc<dyn PaymentProvider>>),
        outbox: Outbox,
        ledger: Ledger,
        expiry: Duration,
    ) -> Self {
        Self {
            store,
            provider,
            earlier,
            outbox,
            ledger,
            sellers: Sellers::default(),
            expiry,
        }
    }

    /// Registers `seller` of `biz` (reconciliation checks its postings).
    pub fn register_seller(&self, biz: &str, seller: Arc<dyn Seller>) {
        self.sellers
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(biz.to_owned(), seller);
    }

    /// The seller of `biz`, if one registered.
    pub fn seller(&self, biz: &str) -> Option<Arc<dyn Seller>> {
        self.sellers
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(biz)
            .cloned()
    }

    /// The `biz` of every registered seller.
    pub fn seller_bizs(&self) -> Vec<String> {
        self.sellers
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The outbox (a caller that committed an event wakes its relay).
    pub(super) fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// The provider `payment` was ordered from; [`ProviderError::Unavailable`] when it is no
    /// longer configured.
    pub fn provider_of(
        &self,
        payment: &Payment,
    ) -> Result<&Arc<dyn PaymentProvider>, ProviderError> {
        self.provider_named(&payment.provider)
    }

    /// The provider called `name`.
    pub fn provider_named(&self, name: &str) -> Result<&Arc<dyn PaymentProvider>, ProviderError> {
        std::iter::once(&self.provider)
            .chain(&self.earlier)
            .find(|provider| provider.name() == name)
            .ok_or_else(|| {
                ProviderError::Unavailable(format!(
                    "the payment provider {name:?} is not configured (pay_provider)"
                ))
            })
    }

    /// The tables.
    pub fn store(&self) -> &PaymentStore {
        &self.store
    }

    /// The provider new orders go to.
    pub fn provider(&self) -> &Arc<dyn PaymentProvider> {
        &self.provider
    }

    /// How long an order may be paid.
    pub fn expiry(&self) -> Duration {
        self.expiry
    }

    /// Records the order `payment` as pending in the seller's transaction `tx`.
    pub async fn record_order(
        &self,
        tx: &mut AnyConnection,
        payment: &NewPayment,
        now: i64,
    ) -> sqlx::Result<i64> {
        PaymentStore::insert_pending(tx, payment, self.provider.name(), now).await
    }

    /// Creates the provider's order of pending payment `trade_no` (again, if an earlier try's
    /// outcome is unknown: the provider is idempotent by trade number) and returns the code URL.
    pub async fn prepay(&self, trade_no: &str) -> Result<String, AppError> {
        let payment = self
            .store
            .by_trade_no(trade_no)
            .await?
            .ok_or_else(|| AppError::Internal(anyhow::anyhow!("no payment {trade_no}")))?;
        // Settled (or parked for a person): its code must not be paid (again).
        if payment.status != PaymentStatus::Pending || payment.parked_at.is_some() {
            return Err(AppError::InvalidInput(Msg::new(
                "this payment is already settled",
                "该支付已结束",
            )));
        }
        if let Some(code_url) = payment.code_url {
            return Ok(code_url);
        }
        let order = Order {
            trade_no: payment.trade_no.clone(),
            description: payment.description.clone(),
            amt: payment.amt,
            expires_at: payment.expires_at,
        };
        let provider = self
            .provider_of(&payment)
            .map_err(|err| AppError::Unavailable(err.into()))?;
        let code_url = provider.prepay(&order).await.map_err(|err| {
            AppError::Unavailable(anyhow::anyhow!(
                "prepay of {trade_no} at {}: {err}",
                provider.name()
            ))
        })?;
        self.store
            .set_code_url(trade_no, &code_url, now_millis())
            .await?;
        Ok(code_url)
    }

    /// Whether payment `trade_no` can still be paid: pending and not parked for a person.
    pub async fn payable(&self, trade_no: &str) -> sqlx::Result<bool> {
        Ok(self
            .store
            .by_trade_no(trade_no)
            .await?
            .is_some_and(|payment| {
                payment.status == PaymentStatus::Pending && payment.parked_at.is_none()
            }))
    }

    /// Handles a notification as `/pay/wechat/notify` receives it: verified, decrypted, checked
    /// and applied; `Ok` only once the outcome is durable.
    pub async fn accept_notification(
        &self,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Applied, NotifyError> {
        let outcome = self.accept(headers, body).await;
        let label = match &outcome {
            Ok(Applied::Settled(_)) => "settled",
            Ok(Applied::AlreadySettled) => "duplicate",
            Ok(Applied::StillOpen) => "open",
            Ok(Applied::Recorded(_)) => "recorded",
            Err(err) => err.outcome(),
        };
        metrics::counter!(PAYMENT_NOTIFICATIONS_TOTAL, "outcome" => label).increment(1);
        match &outcome {
            Err(NotifyError::Internal(err)) => {
                tracing::error!(error = format!("{err:#}"), "payment notification failed");
            }
            Err(err) => tracing::warn!(%err, "payment notification refused"),
            Ok(applied) => tracing::info!(?applied, "payment notification"),
        }
        outcome
    }

    async fn accept(&self, headers: &HeaderMap, body: &[u8]) -> Result<Applied, NotifyError> {
        let now = now_millis();
        // Each provider's keys in turn: a notification about a payment ordered from a provider
        // used before is still heard while that provider is configured.
        let mut opened = Err(NotifyError::Malformed("no provider".to_owned()));
        for provider in std::iter::once(&self.provider).chain(&self.earlier) {
            opened = notify::receive(provider.notification_keys(), headers, body, now / 1000).await;
            if !matches!(
                opened,
                Err(NotifyError::Unverified(CryptoError::UnknownSerial(_)))
            ) {
                break;
            }
        }
        match opened? {
            Opened::Transaction(transaction) => self.apply_transaction(&transaction, now).await,
            Opened::Refund(notice) => self.apply_refund(&notice.refund, now).await,
        }
    }

    /// Applies what the provider says of a transaction to our payment: checks merchant, app,
    /// trade and amount (a mismatch changes nothing and is recorded), then settles a paid or
    /// failed order.
    pub async fn apply_transaction(
        &self,
        transaction: &Transaction,
        now: i64,
    ) -> Result<Applied, NotifyError> {
        let trade_no = transaction.out_trade_no.as_str();
        let internal = |err: sqlx::Error| NotifyError::Internal(err.into());
        let payment = self.store.by_trade_no(trade_no).await.map_err(internal)?;
        let keys = match &payment {
            Some(payment) => self.provider_of(payment).unwrap_or(&self.provider),
            None => &self.provider,
        }
        .notification_keys();
        if transaction.mchid != keys.mchid || transaction.appid != keys.appid {
            return Err(NotifyError::Mismatch(
                "another merchant's or app's transaction".to_owned(),
            ));
        }
        let found = |kind, our_amt, detail| NewDiscrepancy {
            bill_date: String::new(),
            kind,
            trade_no: trade_no.to_owned(),
            provider_amt: Some(transaction.amount.total),
            our_amt,
            detail,
            status: "open",
        };
        let Some(payment) = payment else {
            let detail = format!(
                "the provider reports {:?} for a trade we never made",
                transaction.trade_state
            );
            self.record(&found("unknown_trade", None, detail), now)
                .await
                .map_err(internal)?;
            return Err(NotifyError::Mismatch("unknown trade".to_owned()));
        };
        let currency_ok = transaction.amount.currency.is_empty()
            || transaction.amount.currency == payment.currency;
        if transaction.amount.total != payment.amt || !currency_ok {
            let detail = format!(
                "the provider reports {} {} for a payment of {} {}",
                transaction.amount.total,
                transaction.amount.currency,
                payment.amt,
                payment.currency
            );
            self.park_with(
                &payment,
                &found("notified_amount_mismatch", Some(payment.amt), detail),
                now,
            )
            .await
            .map_err(internal)?;
            return Err(NotifyError::Mismatch("amount differs".to_owned()));
        }
        let settlement = match transaction.trade_state {
            TradeState::Success => Settlement {
                status: PaymentStatus::Succeeded,
                txn_id: transaction.transaction_id.clone(),
                paid_at: Some(
                    transaction
                        .success_time
                        .as_deref()
                        .and_then(parse_time)
                        .unwrap_or(now),
                ),
            },
            TradeState::Payerror | TradeState::Closed | TradeState::Revoked => Settlement {
                status: PaymentStatus::Failed,
                txn_id: transaction.transaction_id.clone(),
                paid_at: None,
            },
            TradeState::Notpay | TradeState::Userpaying => return Ok(Applied::StillOpen),
            TradeState::Refund => {
                // Ours: a refund we asked for (its own notification settles it).
                let ours = self.store.live_refund(trade_no).await.map_err(internal)?;
                if ours.is_some() || payment.status == PaymentStatus::Refunded {
                    return Ok(Applied::AlreadySettled);
                }
                let detail = format!(
                    "the provider reports a refund we did not ask for; our payment is {}",
                    payment.status.as_str()
                );
                self.park_with(&payment, &found("refunded", Some(payment.amt), detail), now)
                    .await
                    .map_err(internal)?;
                return Ok(Applied::Recorded("refunded"));
            }
        };
        // Settled before (a repeated or late notification): answered from the read above,
        // without taking the writer.
        let settled = match payment.status {
            PaymentStatus::Pending => self
                .store
                .settle(trade_no, &settlement, now)
                .await
                .map_err(internal)?,
            status if status == settlement.status => Settled::Already(payment),
            _ => Settled::Contrary(payment),
        };
        match settled {
            Settled::Changed(_) => {
                self.outbox.committed();
                Ok(Applied::Settled(settlement.status))
            }
            Settled::Already(_) => Ok(Applied::AlreadySettled),
            Settled::Contrary(earlier)
                if settlement.status == PaymentStatus::Succeeded
                    && earlier.status == PaymentStatus::Failed =>
            {
                // Money arrived for a payment we had given up on: a person credits or refunds
                // it (one action each, see `actions`).
                let detail = "the provider reports a payment we had settled as failed: credit \
                              it or refund it"
                    .to_owned();
                self.record(&found("paid_after_failure", Some(earlier.amt), detail), now)
                    .await
                    .map_err(internal)?;
                Ok(Applied::Recorded("paid_after_failure"))
            }
            // A failure reported after the success (or the refund): the success stands.
            Settled::Contrary(_) => Ok(Applied::AlreadySettled),
            Settled::Unknown => Err(NotifyError::Mismatch("unknown trade".to_owned())),
        }
    }

    /// Records `found` about pending `payment` and parks it: the provider reports what we
    /// cannot settle, so the sweep stops asking and a person decides.
    async fn park_with(
        &self,
        payment: &Payment,
        found: &NewDiscrepancy,
        now: i64,
    ) -> sqlx::Result<()> {
        self.record(found, now).await?;
        if payment.status == PaymentStatus::Pending {
            self.store.park(&payment.trade_no, now).await?;
        }
        Ok(())
    }

    /// Asks the provider about pending payment `trade_no` now and applies its answer (a status
    /// poll of a payer still waiting); a payment that is settled or parked is left alone.
    pub async fn query_now(&self, trade_no: &str) -> Result<Applied, SweepError> {
        let Some(payment) = self.store.by_trade_no(trade_no).await? else {
            return Ok(Applied::StillOpen);
        };
        if payment.status != PaymentStatus::Pending || payment.parked_at.is_some() {
            return Ok(Applied::AlreadySettled);
        }
        match self.provider_of(&payment)?.query(trade_no).await? {
            Some(transaction) => Ok(self.apply_transaction(&transaction, now_millis()).await?),
            None => Ok(Applied::StillOpen),
        }
    }

    /// Records `found` (once) and counts it.
    pub async fn record(&self, found: &NewDiscrepancy, now: i64) -> sqlx::Result<bool> {
        let new = self.store.record_discrepancy(found, now).await?;
        if new {
            tracing::warn!(kind = found.kind, trade_no = %found.trade_no, detail = %found.detail, "payment discrepancy");
            metrics::counter!(PAYMENT_DISCREPANCIES_TOTAL, "kind" => found.kind).increment(1);
        }
        Ok(new)
    }

    /// Settles what the provider says of expired pending payment `payment`: paid → succeeded;
    /// unpaid (or being paid) → closed at the provider and asked again, and failed only when it
    /// then says closed (a payer who finished meanwhile is credited); unknown to the provider →
    /// failed. Still open a day after expiry → parked for a person.
    pub async fn settle_expired(&self, payment: &Payment, now: i64) -> Result<Applied, SweepError> {
        let provider = self.provider_of(payment)?;
        let applied = match provider.query(&payment.trade_no).await? {
            Some(transaction)
                if matches!(
                    transaction.trade_state,
                    TradeState::Notpay | TradeState::Userpaying
                ) =>
            {
                // Closed first, so it cannot be paid after we call it failed. WeChat answers
                // 202 USER_PAYING while the payer is entering their password, 400 ORDERPAID
                // when they finished: either way the second look decides.
                match provider.close(&payment.trade_no).await {
                    Ok(()) => {}
                    Err(ProviderError::Refused { code, .. })
                        if code == "ORDERPAID" || code == "USER_PAYING" => {}
                    Err(err) => return Err(err.into()),
                }
                match provider.query(&payment.trade_no).await? {
                    Some(after) => self.apply_transaction(&after, now).await?,
                    None => self.fail_unknown(payment, now).await?,
                }
            }
            Some(transaction) => self.apply_transaction(&transaction, now).await?,
            None => self.fail_unknown(payment, now).await?,
        };
        if applied == Applied::StillOpen && now - payment.expires_at > duration_millis(STUCK_AFTER)
        {
            let stuck = NewDiscrepancy {
                bill_date: String::new(),
                kind: "stuck_payment",
                trade_no: payment.trade_no.clone(),
                provider_amt: None,
                our_amt: Some(payment.amt),
                detail: "the provider still calls this order open a day after it expired, after \
                         we closed it"
                    .to_owned(),
                status: "open",
            };
            self.park_with(payment, &stuck, now).await?;
            return Ok(Applied::Recorded("stuck_payment"));
        }
        Ok(applied)
    }

    /// Fails `payment`, which its provider does not know (never ordered there).
    async fn fail_unknown(&self, payment: &Payment, now: i64) -> sqlx::Result<Applied> {
        let settled = self
            .store
            .settle(
                &payment.trade_no,
                &Settlement {
                    status: PaymentStatus::Failed,
                    txn_id: None,
                    paid_at: None,
                },
                now,
            )
            .await?;
        if matches!(settled, Settled::Changed(_)) {
            self.outbox.committed();
            Ok(Applied::Settled(PaymentStatus::Failed))
        } else {
            Ok(Applied::AlreadySettled)
        }
    }

    /// The grace after expiry before the sweep asks the provider (clock differences).
    pub fn sweep_grace() -> i64 {
        duration_millis(Duration::from_secs(60))
    }
}

/// Why settling one expired payment failed (the sweep goes on with the next).
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The provider failed or refused.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// Our answer to the provider's transaction failed.
    #[error(transparent)]
    Notify(#[from] NotifyError),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}
