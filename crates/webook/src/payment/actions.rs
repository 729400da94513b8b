//! The fixes a person makes to what reconciliation and the notification checks found: every
//! discrepancy kind offers its actions ([`Action::for_kind`]) — credit now, refund, or resolve
//! with a note — and [`PaymentService::act`] carries one out, so an operator never needs SQL.
//!
//! Data flow: the console, `POST /payments/discrepancies/{id}/{action}` or `webook payments act`
//! name an open discrepancy, an action and a note. The action's effect is made durable first —
//! credit: the payment is settled as paid (from failed or pending) once the provider confirms it
//! was paid, and the seller credits it from the `payment_succeeded` event; refund: a refund is
//! recorded and asked for ([`super::refund`]) — and only then is the discrepancy closed with
//! who, when, what and why (`acted_by`, `utime`, `action`, `note`). Repeating the same action on
//! a discrepancy it closed answers it again without doing anything twice; another action on a
//! closed one is refused.

use platform::{
    db::now_millis,
    error::{AppError, Msg},
};

use super::{
    model::{Action, Discrepancy, NewRefund, Payment, PaymentStatus, Settled, Settlement},
    parse_time,
    provider::TradeState,
    service::PaymentService,
};

/// The longest note (characters).
pub const MAX_NOTE_CHARS: usize = 1000;

/// What a person asks to do about a discrepancy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Act {
    /// The action.
    pub action: Action,
    /// Why (1–1000 characters); a refund's reason is its first 80 characters.
    pub note: String,
    /// The admin acting.
    pub admin: i64,
    /// For a refund: let a balance go below 0 (see [`super::refund`]).
    pub allow_negative: bool,
}

fn invalid(en: &'static str, zh: &'static str) -> AppError {
    AppError::InvalidInput(Msg::new(en, zh))
}

impl PaymentService {
    /// Carries out `act` on discrepancy `id` and closes it; answers the discrepancy as it
    /// stands after.
    pub async fn act(&self, id: i64, act: &Act) -> Result<Discrepancy, AppError> {
        let note = act.note.trim();
        if note.is_empty() || note.chars().count() > MAX_NOTE_CHARS {
            return Err(invalid(
                "note: say what was done and why, up to 1000 characters",
                "note：请写明处理方式和原因，最多 1000 字",
            ));
        }
        let not_open = || {
            AppError::NotFound(Msg::new(
                "no open discrepancy with that id",
                "没有该待处理的差异",
            ))
        };
        let found = self.store().discrepancy(id).await?.ok_or_else(not_open)?;
        if found.status != "open" {
            // The same action again (a retried request) answers what it did.
            return if found.action == act.action.as_str() {
                Ok(with_actions(found))
            } else {
                Err(not_open())
            };
        }
        if !Action::for_kind(&found.kind).contains(&act.action) {
            return Err(AppError::InvalidInput(Msg::owned(
                format!(
                    "a {} discrepancy cannot be fixed with {}",
                    found.kind,
                    act.action.as_str()
                ),
                format!("{} 类差异不能用 {} 处理", found.kind, act.action.as_str()),
            )));
        }
        match act.action {
            Action::Resolve => {}
            Action::Credit => self.credit(&found.trade_no).await?,
            Action::Refund => self.refund_for(&found, note, act).await?,
        }
        let now = now_millis();
        self.store()
            .close_discrepancy(id, act.action, act.admin, note, now)
            .await?;
        tracing::info!(id, kind = %found.kind, action = act.action.as_str(), admin = act.admin, "payment discrepancy acted on");
        let after = self.store().discrepancy(id).await?.ok_or_else(not_open)?;
        Ok(with_actions(after))
    }

    /// Settles `trade_no` as paid — the provider must say it was paid, for its amount — so
    /// its seller credits it.
    async fn credit(&self, trade_no: &str) -> Result<(), AppError> {
        let payment = self.payment(trade_no).await?;
        if payment.status == PaymentStatus::Succeeded {
            return Ok(());
        }
        let provider = self
            .provider_of(&payment)
            .map_err(|err| AppError::Unavailable(err.into()))?;
        let transaction = provider
            .query(trade_no)
            .await
            .map_err(|err| AppError::Unavailable(err.into()))?;
        let Some(paid) = transaction.filter(|paid| {
            paid.trade_state == TradeState::Success && paid.amount.total == payment.amt
        }) else {
            return Err(invalid(
                "the provider does not have this payment as paid for its amount: nothing to \
                 credit",
                "支付平台没有该笔金额相符的已支付记录，无法入账",
            ));
        };
        let now = now_millis();
        let settlement = Settlement {
            status: PaymentStatus::Succeeded,
            txn_id: paid.transaction_id.clone(),
            paid_at: Some(
                paid.success_time
                    .as_deref()
                    .and_then(parse_time)
                    .unwrap_or(now),
            ),
        };
        match self
            .store()
            .settle_from(trade_no, payment.status, &settlement, now)
            .await?
        {
            Settled::Changed(_) => {
                self.outbox().committed();
                Ok(())
            }
            Settled::Already(_) => Ok(()),
            _ => Err(AppError::Conflict(Msg::new(
                "the payment changed meanwhile; look again",
                "该支付状态已变化，请刷新后重试",
            ))),
        }
    }

    /// Refunds the trade of discrepancy `found`: our payment of it, or the provider's amount of
    /// a trade we never made.
    async fn refund_for(&self, found: &Discrepancy, note: &str, act: &Act) -> Result<(), AppError> {
        let request = NewRefund {
            trade_no: found.trade_no.clone(),
            reason: note.chars().take(super::refund::MAX_REASON_CHARS).collect(),
            requested_by: act.admin,
            allow_negative: act.allow_negative,
        };
        if found.kind == "refunded" {
            return self.book_provider_refund(&request).await;
        }
        if found.kind == "refund_failed" {
            // Asked again under a new refund number (the failed one stays as it was).
            return self.refund(&request).await.map(drop);
        }
        match self.store().by_trade_no(&found.trade_no).await? {
            Some(_) => self.refund(&request).await.map(drop),
            None => {
                let amt = found.provider_amt.ok_or_else(|| {
                    invalid(
                        "the discrepancy has no provider amount to refund",
                        "该差异没有可退的金额",
                    )
                })?;
                self.refund_unknown_trade(&request, amt).await.map(drop)
            }
        }
    }

    /// Books a refund the provider made without us (its merchant console): the provider must
    /// report the trade refunded; the refund is recorded and completed at once — payment
    /// `refunded`, the credit reversed — without asking the provider for anything.
    async fn book_provider_refund(&self, request: &NewRefund) -> Result<(), AppError> {
        let payment = self.payment(&request.trade_no).await?;
        let provider = self
            .provider_of(&payment)
            .map_err(|err| AppError::Unavailable(err.into()))?;
        let transaction = provider
            .query(&payment.trade_no)
            .await
            .map_err(|err| AppError::Unavailable(err.into()))?;
        if transaction.map(|t| t.trade_state) != Some(TradeState::Refund) {
            return Err(invalid(
                "the provider does not report this payment refunded",
                "支付平台未显示该笔已退款",
            ));
        }
        let now = now_millis();
        let refund = self
            .store()
            .request_refund(
                request,
                &format!("ext{}", &super::crypto::random_nonce()[..24]),
                (&payment.biz, payment.biz_id, payment.amt),
                now,
            )
            .await?;
        match self
            .store()
            .complete_refund(&refund.refund_no, None, now, now)
            .await
            .map_err(|err| AppError::Internal(err.into()))?
        {
            super::store::RefundCompletion::AwaitingCredit => Err(AppError::Conflict(Msg::new(
                "the payment's credit is still being posted; try again in a moment",
                "该笔支付仍在入账，请稍后再试",
            ))),
            _ => {
                self.outbox().committed();
                Ok(())
            }
        }
    }

    async fn payment(&self, trade_no: &str) -> Result<Payment, AppError> {
        self.store()
            .by_trade_no(trade_no)
            .await?
            .ok_or_else(|| AppError::NotFound(Msg::new("no such payment", "支付不存在")))
    }
}

/// `found` with the actions it offers now (none once closed).
pub fn with_actions(mut found: Discrepancy) -> Discrepancy {
    found.actions = if found.status == "open" {
        Action::for_kind(&found.kind).to_vec()
    } else {
        Vec::new()
    };
    found
}
