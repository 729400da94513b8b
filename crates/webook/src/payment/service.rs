//! [`PaymentService`]: what sellers (rewards) and the HTTP handlers call. Orders are recorded in
//! the seller's transaction ([`PaymentService::record_order`]), then sent to the provider
//! ([`PaymentService::prepay`]); a transaction the provider reports — by notification
//! ([`PaymentService::accept_notification`]) or in answer to a query (the sweep, reconciliation) —
//! is checked against our payment and applied by one path ([`PaymentService::apply_transaction`]).

use std::{sync::Arc, time::Duration};

use axum::http::HeaderMap;
use sqlx::AnyConnection;

use platform::{
    db::{duration_millis, now_millis},
    error::{AppError, Msg},
    events::outbox::Outbox,
};

use super::{
    model::{NewDiscrepancy, NewPayment, Payment, PaymentStatus, Settled, Settlement},
    notify::{self, NotifyError},
    parse_time,
    provider::{Order, PaymentProvider, ProviderError, TradeState, Transaction},
    store::PaymentStore,
    PAYMENT_DISCREPANCIES_TOTAL, PAYMENT_NOTIFICATIONS_TOTAL,
};

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
    outbox: Outbox,
    expiry: Duration,
}

impl PaymentService {
    /// Payments in `store` through `provider`; orders may be paid for `expiry`.
    pub fn new(
        store: PaymentStore,
        provider: Arc<dyn PaymentProvider>,
        outbox: Outbox,
        expiry: Duration,
    ) -> Self {
        Self {
            store,
            provider,
            outbox,
            expiry,
        }
    }

    /// The tables.
    pub fn store(&self) -> &PaymentStore {
        &self.store
    }

    /// The provider.
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
        if let Some(code_url) = payment.code_url {
            return Ok(code_url);
        }
        if payment.status != PaymentStatus::Pending {
            return Err(AppError::InvalidInput(Msg::new(
                "this payment is already settled",
                "该支付已结束",
            )));
        }
        let order = Order {
            trade_no: payment.trade_no.clone(),
            description: payment.description.clone(),
            amt: payment.amt,
            expires_at: payment.expires_at,
        };
        let code_url = self.provider.prepay(&order).await.map_err(|err| {
            AppError::Unavailable(anyhow::anyhow!(
                "prepay of {trade_no} at {}: {err}",
                self.provider.name()
            ))
        })?;
        self.store
            .set_code_url(trade_no, &code_url, now_millis())
            .await?;
        Ok(code_url)
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
        let transaction =
            notify::receive(self.provider.notification_keys(), headers, body, now / 1000).await?;
        self.apply_transaction(&transaction, now).await
    }

    /// Applies what the provider says of a transaction to our payment: checks merchant, app,
    /// trade and amount (a mismatch changes nothing and is recorded), then settles a paid or
    /// failed order.
    pub async fn apply_transaction(
        &self,
        transaction: &Transaction,
        now: i64,
    ) -> Result<Applied, NotifyError> {
        let keys = self.provider.notification_keys();
        if transaction.mchid != keys.mchid || transaction.appid != keys.appid {
            return Err(NotifyError::Mismatch(
                "another merchant's or app's transaction".to_owned(),
            ));
        }
        let trade_no = transaction.out_trade_no.as_str();
        let internal = |err: sqlx::Error| NotifyError::Internal(err.into());
        let Some(payment) = self.store.by_trade_no(trade_no).await.map_err(internal)? else {
            self.record(
                &NewDiscrepancy {
                    bill_date: String::new(),
                    kind: "unknown_trade",
                    trade_no: trade_no.to_owned(),
                    provider_amt: Some(transaction.amount.total),
                    our_amt: None,
                    detail: format!(
                        "the provider reports {:?} for a trade we never made",
                        transaction.trade_state
                    ),
                    status: "open",
                },
                now,
            )
            .await
            .map_err(internal)?;
            return Err(NotifyError::Mismatch("unknown trade".to_owned()));
        };
        let currency_ok = transaction.amount.currency.is_empty()
            || transaction.amount.currency == payment.currency;
        if transaction.amount.total != payment.amt || !currency_ok {
            self.record(
                &NewDiscrepancy {
                    bill_date: String::new(),
                    kind: "notified_amount_mismatch",
                    trade_no: trade_no.to_owned(),
                    provider_amt: Some(transaction.amount.total),
                    our_amt: Some(payment.amt),
                    detail: format!(
                        "the provider reports {} {} for a payment of {} {}",
                        transaction.amount.total,
                        transaction.amount.currency,
                        payment.amt,
                        payment.currency
                    ),
                    status: "open",
                },
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
                self.record(
                    &NewDiscrepancy {
                        bill_date: String::new(),
                        kind: "refunded",
                        trade_no: trade_no.to_owned(),
                        provider_amt: Some(transaction.amount.total),
                        our_amt: Some(payment.amt),
                        detail: "the provider reports a refund; its effect on the seller's \
                                 books is for a person"
                            .to_owned(),
                        status: "open",
                    },
                    now,
                )
                .await
                .map_err(internal)?;
                return Ok(Applied::Recorded("refunded"));
            }
        };
        // Settled before (a repeated or late notification): answered from the read above,
        // without taking the writer.
        let settled = if payment.status == PaymentStatus::Pending {
            self.store
                .settle(trade_no, &settlement, now)
                .await
                .map_err(internal)?
        } else if payment.status == settlement.status {
            Settled::Already(payment)
        } else {
            Settled::Contrary(payment)
        };
        match settled {
            Settled::Changed(_) => {
                self.outbox.committed();
                Ok(Applied::Settled(settlement.status))
            }
            Settled::Already(_) => Ok(Applied::AlreadySettled),
            Settled::Contrary(earlier) if settlement.status == PaymentStatus::Succeeded => {
                // Money arrived for a payment we had given up on: a person refunds or credits.
                self.record(
                    &NewDiscrepancy {
                        bill_date: String::new(),
                        kind: "paid_after_failure",
                        trade_no: trade_no.to_owned(),
                        provider_amt: Some(transaction.amount.total),
                        our_amt: Some(earlier.amt),
                        detail: "the provider reports a payment we had settled as failed"
                            .to_owned(),
                        status: "open",
                    },
                    now,
                )
                .await
                .map_err(internal)?;
                Ok(Applied::Recorded("paid_after_failure"))
            }
            // A failure reported after the success: the success stands.
            Settled::Contrary(_) => Ok(Applied::AlreadySettled),
            Settled::Unknown => Err(NotifyError::Mismatch("unknown trade".to_owned())),
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
    /// unpaid → closed at the provider, then failed; unknown to the provider → failed.
    pub async fn settle_expired(&self, payment: &Payment, now: i64) -> Result<Applied, SweepError> {
        match self.provider.query(&payment.trade_no).await? {
            Some(transaction) if transaction.trade_state == TradeState::Notpay => {
                // Closed first, so it cannot be paid after we call it failed.
                self.provider.close(&payment.trade_no).await?;
                let closed = Transaction {
                    trade_state: TradeState::Closed,
                    ..transaction
                };
                Ok(self.apply_transaction(&closed, now).await?)
            }
            Some(transaction) => Ok(self.apply_transaction(&transaction, now).await?),
            None => {
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
