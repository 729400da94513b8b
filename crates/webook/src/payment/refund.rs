//! Refunds: giving a payer their money back in full, through the provider the payment was made
//! at, with the ledger reversing what the payment credited.
//!
//! Data flow: an admin asks ([`PaymentService::refund`]: console, `POST /payments/refunds`, `webook
//! payments refund`; or a discrepancy's `refund` action, [`super::actions`]). The provider is
//! asked first whether the trade is paid for the amount to give back ([`PaymentService::confirm_paid`]);
//! then the refund is recorded `requested` under a new refund number (one live refund per trade:
//! asking again answers the live one), and the provider is asked for it (idempotent by
//! `out_refund_no`, so asking again after a timeout is safe). What the provider says — in its
//! answer, its `REFUND.*` notification or a query by the sweep — goes through
//! [`PaymentService::apply_refund`]:
//!
//! - `PROCESSING` waits;
//! - `SUCCESS` completes the refund, the payment (`refunded`), the ledger reversal and the
//!   seller's `payment_refunded` event in one transaction, once
//!   ([`super::store::PaymentStore::complete_refund`], which locks the payment row first, so no
//!   settlement interleaves);
//! - `ABNORMAL` (the money could not be paid back, e.g. the payer's card is closed) keeps it under
//!   way as `abnormal` with a `refund_abnormal` discrepancy for a person — handled at the
//!   provider, the same refund later reports `SUCCESS` (the sweep keeps asking) and completes;
//! - `CLOSED` fails it (nothing moved) with a `refund_failed` discrepancy, whose `refund` action
//!   asks again under a new number.
//!
//! A refund's discrepancies are keyed by its refund number (their `bill_date`), so each failed
//! refund of a trade is its own. The author's balance: a refund takes the author's share back.
//! When their balance is below that share the refund is refused with a message saying so,
//! unless the admin allows the balance to go below 0 (`allowNegative`); the negative balance is
//! then shown as it is, and later rewards pay it back first. A refund completes only once the
//! credit it reverses is in the ledger (a refund racing the credit of a just-settled payment
//! waits for it).

use platform::{
    db::now_millis,
    error::{AppError, Msg},
};

use super::{
    crypto::random_nonce,
    model::{NewDiscrepancy, NewRefund, Payment, PaymentStatus, Refund, RefundStatus},
    notify::NotifyError,
    parse_time,
    provider::{ProviderError, RefundOrder, RefundResult, RefundState, TradeState, Transaction},
    service::{Applied, PaymentService, SweepError},
    store::RefundCompletion,
};
use crate::account::{AccountKind, Line};

/// The longest refund reason WeChat takes (characters).
pub const MAX_REASON_CHARS: usize = 80;

pub(super) fn invalid(en: &'static str, zh: &'static str) -> AppError {
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

/// What a refund discrepancy records: about `refund`, keyed by its refund number.
fn about(
    refund: &Refund,
    kind: &'static str,
    provider_amt: Option<i64>,
    detail: String,
) -> NewDiscrepancy {
    NewDiscrepancy {
        bill_date: refund.refund_no.clone(),
        kind,
        trade_no: refund.trade_no.clone(),
        provider_amt,
        our_amt: Some(refund.amt),
        detail,
        status: "open",
    }
}

impl PaymentService {
    /// Refunds payment `request.trade_no` in full: checks it, records the refund and asks the
    /// provider. Asking again while a refund of the trade is live answers that refund.
    pub async fn refund(&self, request: &NewRefund) -> Result<Refund, AppError> {
        let payment = self.payment_to_refund(request).await?;
        self.refund_amount(request, &payment, payment.amt).await
    }

    /// Refunds `amt` fen of `payment` — its amount, or the provider's when the two differ (a
    /// discrepancy's refund) — once the provider confirms it has that much paid.
    pub(super) async fn refund_amount(
        &self,
        request: &NewRefund,
        payment: &Payment,
        amt: i64,
    ) -> Result<Refund, AppError> {
        let request = checked(request)?;
        if let Some(live) = self.store().live_refund(&request.trade_no).await? {
            return Ok(live);
        }
        if payment.status == PaymentStatus::Refunded {
            return Err(invalid(
                "this payment is refunded already",
                "该笔支付已退款",
            ));
        }
        let paid = self.confirm_paid(payment, amt).await?;
        if payment.paid_at.is_none() {
            // Paid after we gave up on it (or never heard): the day it was paid on is the
            // provider's, for the day's reconciliation.
            let paid_at = paid.success_time.as_deref().and_then(parse_time);
            self.store()
                .note_paid(&payment.trade_no, paid.transaction_id.as_deref(), paid_at)
                .await?;
        }
        let lines = self.credited_lines(payment).await?;
        if !request.allow_negative {
            self.check_balances(&lines).await?;
        }
        let refund = self
            .store()
            .request_refund(
                &request,
                &new_refund_no(),
                (&payment.biz, payment.biz_id, amt),
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
        let request = checked(request)?;
        if let Some(live) = self.store().live_refund(&request.trade_no).await? {
            return Ok(live);
        }
        let provider = self.provider().clone();
        let transaction = provider
            .query(&request.trade_no)
            .await
            .map_err(provider_failure)?;
        paid_for(transaction, amt)?;
        let refund = self
            .store()
            .request_refund(&request, &new_refund_no(), ("", 0, amt), now_millis())
            .await?;
        self.push_refund(&refund, provider.name()).await
    }

    /// The payment `request` names, refused when there is none.
    pub(super) async fn payment_to_refund(&self, request: &NewRefund) -> Result<Payment, AppError> {
        self.store()
            .by_trade_no(&request.trade_no)
            .await?
            .ok_or_else(|| AppError::NotFound(Msg::new("no such payment", "支付不存在")))
    }

    /// What `payment`'s provider says of it, which must be paid (not refunded) for `amt` fen.
    pub(super) async fn confirm_paid(
        &self,
        payment: &Payment,
        amt: i64,
    ) -> Result<Transaction, AppError> {
        let provider = self
            .provider_of(payment)
            .map_err(|err| AppError::Unavailable(err.into()))?;
        let transaction = provider
            .query(&payment.trade_no)
            .await
            .map_err(provider_failure)?;
        paid_for(transaction, amt)
    }

    /// The lines the payment credited, which a refund reverses; refused while a succeeded
    /// payment's credit is still on its way (asking again in a moment works).
    async fn credited_lines(&self, payment: &Payment) -> Result<Vec<Line>, AppError> {
        let lines = self
            .ledger()
            .lines(&payment.biz, &[payment.biz_id])
            .await?
            .remove(&payment.biz_id)
            .unwrap_or_default();
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
                self.fail_refund(refund, &detail, None, now_millis())
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

    /// Fails `refund`, still under way (the provider closed or refused it: nothing moved), and
    /// records `refund_failed` for a person — once per refund.
    async fn fail_refund(
        &self,
        refund: &Refund,
        detail: &str,
        refund_id: Option<&str>,
        now: i64,
    ) -> sqlx::Result<bool> {
        let failed = self
            .store()
            .update_refund(
                &refund.refund_no,
                RefundStatus::Failed,
                refund_id,
                detail,
                now,
            )
            .await?;
        if failed {
            let detail = format!("refund {} failed: {detail}", refund.refund_no);
            self.record(&about(refund, "refund_failed", None, detail), now)
                .await?;
        }
        Ok(failed)
    }

    /// Applies what the provider says of a refund (its answer, notification or query).
    pub async fn apply_refund(
        &self,
        result: &RefundResult,
        now: i64,
    ) -> Result<Applied, NotifyError> {
        let internal = |err: sqlx::Error| NotifyError::Internal(err.into());
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
            let found = NewDiscrepancy {
                bill_date: result.out_refund_no.clone(),
                kind: "unknown_refund",
                trade_no: result.out_trade_no.clone(),
                provider_amt: Some(result.amount.refund),
                our_amt: None,
                detail,
                status: "open",
            };
            self.record(&found, now).await.map_err(internal)?;
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
            let found = about(
                &refund,
                "refund_mismatch",
                Some(result.amount.refund),
                detail,
            );
            self.record(&found, now).await.map_err(internal)?;
            return Err(NotifyError::Mismatch("refund differs".to_owned()));
        }
        let refund_id = result.refund_id.as_deref();
        match result.status {
            RefundState::Processing => {
                self.store()
                    .update_refund(
                        &refund.refund_no,
                        RefundStatus::Processing,
                        refund_id,
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
                    .complete_refund(&refund.refund_no, refund_id, refunded_at, now)
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
                            "the provider reports refund {} succeeded; we had it closed: book it \
                             (refund)",
                            refund.refund_no
                        );
                        let found = about(&refund, "refund_after_failure", None, detail);
                        self.record(&found, now).await.map_err(internal)?;
                        Ok(Applied::Recorded("refund_after_failure"))
                    }
                    RefundCompletion::NotUnderWay => Ok(Applied::AlreadySettled),
                }
            }
            RefundState::Abnormal => {
                let detail = "abnormal: the money could not be paid back to the payer's account; \
                              handle it at the provider (the refund completes when it reports \
                              success) or return it offline";
                let changed = self
                    .store()
                    .update_refund(
                        &refund.refund_no,
                        RefundStatus::Abnormal,
                        refund_id,
                        detail,
                        now,
                    )
                    .await
                    .map_err(internal)?;
                if changed {
                    let found = about(&refund, "refund_abnormal", None, detail.to_owned());
                    self.record(&found, now).await.map_err(internal)?;
                    return Ok(Applied::Recorded("refund_abnormal"));
                }
                Ok(Applied::StillOpen)
            }
            RefundState::Closed => {
                let failed = self
                    .fail_refund(
                        &refund,
                        "closed by the provider: nothing moved",
                        refund_id,
                        now,
                    )
                    .await
                    .map_err(internal)?;
                Ok(if failed {
                    Applied::Recorded("refund_failed")
                } else {
                    Applied::AlreadySettled
                })
            }
        }
    }

    /// Settles refund `refund`, still under way: asked again when the provider's answer was
    /// never heard (`requested`), queried when it is `processing` or `abnormal`.
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
                    self.fail_refund(refund, &detail, None, now).await?;
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

/// `request` with its reason trimmed, refused when the reason is empty or too long.
fn checked(request: &NewRefund) -> Result<NewRefund, AppError> {
    let reason = request.reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
        return Err(invalid(
            "reason: say why, up to 80 characters (the payer sees it)",
            "reason：请写明退款原因，最多 80 字（付款人可见）",
        ));
    }
    Ok(NewRefund {
        reason: reason.to_owned(),
        ..request.clone()
    })
}

/// `transaction` when it is paid (not refunded) for `amt` fen; else why not.
fn paid_for(transaction: Option<Transaction>, amt: i64) -> Result<Transaction, AppError> {
    match transaction {
        Some(paid) if paid.trade_state == TradeState::Success && paid.amount.total == amt => {
            Ok(paid)
        }
        Some(refunded) if refunded.trade_state == TradeState::Refund => Err(invalid(
            "the provider has already refunded this payment",
            "支付平台已退款",
        )),
        _ => Err(invalid(
            "only a paid payment can be refunded: the provider does not have it as paid for that \
             amount",
            "只能退款已支付的订单：支付平台没有该笔金额相符的已支付记录",
        )),
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
