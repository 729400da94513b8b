//! Refunds: giving a payer their money back in full, through the provider the payment was made
//! at, with the ledger reversing what the payment credited.
//!
//! Data flow: an admin asks ([`PaymentService::refund`]: console, `POST /payments/refunds`, `webook
//! payments refund`). The provider is asked first whether the trade is paid (the money to give
//! back must be there); then the refund is recorded `requested` under a new refund number (one
//! live refund per trade: asking again answers the live one), and the provider is asked for it
//! (idempotent by `out_refund_no`, so asking again after a timeout is safe). What the provider
//! says — in its answer, its `REFUND.*` notification or a query by the sweep — goes through
//! [`PaymentService::apply_refund`]: `PROCESSING` waits; `SUCCESS` completes the refund, the
//! payment (`refunded`), the ledger reversal and the seller's `payment_refunded` event in one
//! transaction ([`super::store::PaymentStore::complete_refund`]), once; `CLOSED`/`ABNORMAL` fail
//! it (nothing moved) with a `refund_failed` discrepancy for a person, who may ask again.
//!
//! The author's balance: a refund takes the author's share back. When their balance is below
//! that share the refund is refused with a message saying so, unless the admin allows the
//! balance to go below 0 (`allowNegative`); the negative balance is then shown as it is, and
//! later rewards pay it back first. A refund completes only once the credit it reverses is in
//! the ledger (a refund racing the credit of a just-settled payment waits for it).

use platform::{
    db::now_millis,
    error::{AppError, Msg},
};

use super::{
    crypto::random_nonce,
    model::{NewDiscrepancy, NewRefund, Payment, PaymentStatus, Refund, RefundStatus},
    notify::NotifyError,
    parse_time,
    provider::{ProviderError, RefundOrder, RefundResult, RefundState, TradeState},
    service::{Applied, PaymentService, SweepError},
    store::RefundCompletion,
};
use crate::account::{AccountKind, Line};

/// The longest refund reason WeChat takes (characters).
pub const MAX_REASON_CHARS: usize = 80;

fn invalid(en: &'static str, zh: &'static str) -> AppError {
    AppError::InvalidInput(Msg::new(en, zh))
}

fn provider_failure(err: ProviderError) -> AppError {
    match err {
        ProviderError::Refused { code, message } => AppError::InvalidInput(Msg::owned(
            format!("the payment provider refused: {code}: {message}"),
            format!("支付平台拒绝：{code}：{message}"),
        )),
        other => AppError::Unavailable(other.into()),
    }
}

impl PaymentService {
    /// Refunds payment `request.trade_no` in full: checks it, records the refund and asks the
    /// provider. Asking again while a refund of the trade is live answers that refund.
    pub async fn refund(&self, request: &NewRefund) -> Result<Refund, AppError> {
        let reason = request.reason.trim();
        if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
            return Err(invalid(
                "reason: say why, up to 80 characters (the payer sees it)",
                "reason：请写明退款原因，最多 80 字（付款人可见）",
            ));
        }
        if let Some(live) = self.store().live_refund(&request.trade_no).await? {
            return Ok(live);
        }
        let payment = self
            .store()
            .by_trade_no(&request.trade_no)
            .await?
            .ok_or_else(|| AppError::NotFound(Msg::new("no such payment", "支付不存在")))?;
        self.check_paid_at_provider(&payment).await?;
        let lines = self.credited_lines(&payment).await?;
        if !request.allow_negative {
            self.check_balances(&lines).await?;
        }
        let refund = self
            .store()
            .request_refund(
                &NewRefund {
                    reason: reason.to_owned(),
                    ..request.clone()
                },
                &new_refund_no(),
                (&payment.biz, payment.biz_id, payment.amt),
                now_millis(),
            )
            .await?;
        self.push_refund(&refund, &payment.provider).await
    }

    /// Refunds trade `trade_no` of `amt` fen that we have no payment for (money the provider
    /// took for a trade we never made), at the provider new orders go to.
    pub async fn refund_unknown_trade(
        &self,
        request: &NewRefund,
        amt: i64,
    ) -> Result<Refund, AppError> {
        if let Some(live) = self.store().live_refund(&request.trade_no).await? {
            return Ok(live);
        }
        let transaction = self
            .provider()
            .query(&request.trade_no)
            .await
            .map_err(provider_failure)?;
        match transaction {
            Some(paid) if paid.trade_state == TradeState::Success && paid.amount.total == amt => {}
            _ => {
                return Err(invalid(
                    "the provider does not have this trade as paid with that amount",
                    "支付平台没有该笔金额相符的已支付交易",
                ))
            }
        }
        let refund = self
            .store()
            .request_refund(request, &new_refund_no(), ("", 0, amt), now_millis())
            .await?;
        let provider = self.provider().name().to_owned();
        self.push_refund(&refund, &provider).await
    }

    /// The provider must have `payment` paid (not refunded) for its full amount.
    async fn check_paid_at_provider(&self, payment: &Payment) -> Result<(), AppError> {
        let provider = self
            .provider_of(payment)
            .map_err(|err| AppError::Unavailable(err.into()))?;
        let transaction = provider
            .query(&payment.trade_no)
            .await
            .map_err(provider_failure)?;
        match transaction {
            Some(paid)
                if paid.trade_state == TradeState::Success && paid.amount.total == payment.amt =>
            {
                // Paid after we gave up on it (or never heard): the day it was paid on is the
                // provider's, for the day's reconciliation.
                if payment.paid_at.is_none() {
                    let paid_at = paid.success_time.as_deref().and_then(parse_time);
                    self.store()
                        .note_paid(&payment.trade_no, paid.transaction_id.as_deref(), paid_at)
                        .await?;
                }
                Ok(())
            }
            Some(refunded) if refunded.trade_state == TradeState::Refund => Err(invalid(
                "the provider has already refunded this payment",
                "支付平台已退款",
            )),
            _ => Err(invalid(
                "only a paid payment can be refunded",
                "只能退款已支付的订单",
            )),
        }
    }

    /// The lines the payment credited, which a refund reverses; refused while a succeeded
    /// payment's credit is still on its way (asking again in a moment works).
    async fn credited_lines(&self, payment: &Payment) -> Result<Vec<Line>, AppError> {
        let mut tx = self.store().db().writer().begin().await?;
        let lines = crate::account::lines_of(&mut tx, &payment.biz, payment.biz_id).await?;
        tx.commit().await?;
        if lines.is_empty() && payment.status == PaymentStatus::Succeeded {
            return Err(AppError::Conflict(Msg::new(
                "the payment's credit is still being posted; try again in a moment",
                "该笔支付仍在入账，请稍后再试",
            )));
        }
        Ok(lines)
    }

    /// Refuses a refund that would take a user's balance below 0.
    async fn check_balances(&self, lines: &[Line]) -> Result<(), AppError> {
        for line in lines {
            if line.account.kind != AccountKind::User || line.amt <= 0 {
                continue;
            }
            let balance = self.ledger().user_balance(line.account.owner).await?;
            if balance < line.amt {
                return Err(AppError::InvalidInput(Msg::owned(
                    format!(
                        "user {}'s balance ({balance} fen) is below the {} fen this refund takes \
                         back; refund with allowNegative to let it go below 0",
                        line.account.owner, line.amt
                    ),
                    format!(
                        "用户 {} 的余额（{balance} 分）低于本次退款需扣回的 {} 分；如允许余额为负，\
                         请带 allowNegative 退款",
                        line.account.owner, line.amt
                    ),
                )));
            }
        }
        Ok(())
    }

    /// Asks `provider` for `refund` (again) and applies its answer; a provider that does not
    /// answer leaves it `requested` for the sweep.
    async fn push_refund(&self, refund: &Refund, provider: &str) -> Result<Refund, AppError> {
        let asked = match self.provider_named(provider) {
            Ok(provider) => provider.refund(&order_of(refund)).await,
            Err(err) => Err(err),
        };
        match asked {
            Ok(result) => {
                if let Err(err) = self.apply_refund(&result, now_millis()).await {
                    tracing::warn!(refund_no = %refund.refund_no, %err, "a refund's answer was not applied");
                }
            }
            Err(ProviderError::Refused { code, message }) => {
                let detail = format!("refused: {code}: {message}");
                self.store()
                    .update_refund(
                        &refund.refund_no,
                        RefundStatus::Failed,
                        None,
                        &detail,
                        now_millis(),
                    )
                    .await?;
                return Err(provider_failure(ProviderError::Refused { code, message }));
            }
            Err(err) => {
                tracing::warn!(refund_no = %refund.refund_no, %err, "refund asked, outcome unknown: the sweep asks again");
            }
        }
        self.store()
            .refund_by_no(&refund.refund_no)
            .await?
            .ok_or_else(|| {
                AppError::Internal(anyhow::anyhow!("refund {} vanished", refund.refund_no))
            })
    }

    /// Applies what the provider says of a refund (its answer, notification or query).
    pub async fn apply_refund(
        &self,
        result: &RefundResult,
        now: i64,
    ) -> Result<Applied, NotifyError> {
        let internal = |err: sqlx::Error| NotifyError::Internal(err.into());
        let found = |kind, our_amt, detail| NewDiscrepancy {
            bill_date: String::new(),
            kind,
            trade_no: result.out_trade_no.clone(),
            provider_amt: Some(result.amount.refund),
            our_amt,
            detail,
            status: "open",
        };
        let Some(refund) = self
            .store()
            .refund_by_no(&result.out_refund_no)
            .await
            .map_err(internal)?
        else {
            let detail = format!(
                "the provider reports refund {} ({:?}) we never asked for",
                result.out_refund_no, result.status
            );
            self.record(&found("unknown_refund", None, detail), now)
                .await
                .map_err(internal)?;
            return Err(NotifyError::Mismatch("unknown refund".to_owned()));
        };
        if refund.trade_no != result.out_trade_no || refund.amt != result.amount.refund {
            let detail = format!(
                "the provider reports refund {} of {} fen of {}; ours is {} fen of {}",
                refund.refund_no,
                result.amount.refund,
                result.out_trade_no,
                refund.amt,
                refund.trade_no
            );
            self.record(&found("refund_mismatch", Some(refund.amt), detail), now)
                .await
                .map_err(internal)?;
            return Err(NotifyError::Mismatch("refund differs".to_owned()));
        }
        match result.status {
            RefundState::Processing => {
                self.store()
                    .update_refund(
                        &refund.refund_no,
                        RefundStatus::Processing,
                        result.refund_id.as_deref(),
                        "",
                        now,
                    )
                    .await
                    .map_err(internal)?;
                Ok(Applied::StillOpen)
            }
            RefundState::Success => {
                let refunded_at = result
                    .success_time
                    .as_deref()
                    .and_then(parse_time)
                    .unwrap_or(now);
                match self
                    .store()
                    .complete_refund(
                        &refund.refund_no,
                        result.refund_id.as_deref(),
                        refunded_at,
                        now,
                    )
                    .await
                    .map_err(|err| NotifyError::Internal(err.into()))?
                {
                    RefundCompletion::Completed(_) => {
                        self.outbox().committed();
                        tracing::info!(refund_no = %refund.refund_no, trade_no = %refund.trade_no, "refund completed");
                        Ok(Applied::Settled(PaymentStatus::Refunded))
                    }
                    RefundCompletion::AwaitingCredit => Ok(Applied::StillOpen),
                    RefundCompletion::NotUnderWay if refund.status == RefundStatus::Failed => {
                        let detail = format!(
                            "the provider reports refund {} succeeded; we had it failed",
                            refund.refund_no
                        );
                        self.record(
                            &found("refund_after_failure", Some(refund.amt), detail),
                            now,
                        )
                        .await
                        .map_err(internal)?;
                        Ok(Applied::Recorded("refund_after_failure"))
                    }
                    RefundCompletion::NotUnderWay => Ok(Applied::AlreadySettled),
                }
            }
            RefundState::Closed | RefundState::Abnormal => {
                let detail = match result.status {
                    RefundState::Abnormal => {
                        "abnormal: the money could not be returned to the \
                                              payer's account (ask again, or return it offline)"
                    }
                    _ => "closed by the provider: nothing moved",
                };
                let changed = self
                    .store()
                    .update_refund(
                        &refund.refund_no,
                        RefundStatus::Failed,
                        result.refund_id.as_deref(),
                        detail,
                        now,
                    )
                    .await
                    .map_err(internal)?;
                if !changed {
                    return Ok(Applied::AlreadySettled);
                }
                let detail = format!("refund {} failed: {detail}", refund.refund_no);
                self.record(&found("refund_failed", Some(refund.amt), detail), now)
                    .await
                    .map_err(internal)?;
                Ok(Applied::Recorded("refund_failed"))
            }
        }
    }

    /// Settles refund `refund`, still under way: asked again when the provider's answer was
    /// never heard (`requested`), queried when it is `processing`.
    pub async fn settle_refund(&self, refund: &Refund, now: i64) -> Result<Applied, SweepError> {
        let provider_name = match self.store().by_trade_no(&refund.trade_no).await? {
            Some(payment) => payment.provider,
            None => self.provider().name().to_owned(),
        };
        let provider = self.provider_named(&provider_name)?;
        let result = match refund.status {
            RefundStatus::Requested => match provider.refund(&order_of(refund)).await {
                Ok(result) => Some(result),
                Err(ProviderError::Refused { code, message }) => {
                    let detail = format!("refused: {code}: {message}");
                    self.store()
                        .update_refund(&refund.refund_no, RefundStatus::Failed, None, &detail, now)
                        .await?;
                    return Ok(Applied::Recorded("refund_failed"));
                }
                Err(err) => return Err(err.into()),
            },
            _ => provider.query_refund(&refund.refund_no).await?,
        };
        match result {
            Some(result) => Ok(self.apply_refund(&result, now).await?),
            None => Ok(Applied::StillOpen),
        }
    }
}

/// What the provider is asked for `refund`.
fn order_of(refund: &Refund) -> RefundOrder {
    RefundOrder {
        refund_no: refund.refund_no.clone(),
        trade_no: refund.trade_no.clone(),
        amt: refund.amt,
        total: refund.amt,
        reason: refund.reason.clone(),
    }
}

/// A new refund number: `rf` and 24 random characters (WeChat: up to 64 of `[0-9A-Za-z_-|*@]`).
fn new_refund_no() -> String {
    format!("rf{}", &random_nonce()[..24])
}
