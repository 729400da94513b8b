//! The fixes a person makes to what reconciliation and the notification checks found: every
//! discrepancy kind offers its actions ([`Action::for_kind`]) — credit now, refund, or resolve
//! with a note — and [`PaymentService::act`] carries one out, so an operator never needs SQL.
//!
//! Data flow: the console, `POST /payments/discrepancies/{id}/{action}` or `webook payments act`
//! name an open discrepancy, an action and a note. The discrepancy is claimed first (status
//! `acting`, with who and how), so two people cannot both act on it; then the action's effect is
//! made durable — credit: the payment is settled as paid (from failed or pending) once the
//! provider confirms it was paid, and the seller credits it from the `payment_succeeded` event;
//! refund: a refund is recorded and asked for ([`super::refund`]), of the provider's amount when
//! the two differ; a refund the provider made without us is booked, with its reversal, in one
//! transaction — and only then is it closed with the note (who, when, what and why:
//! `acted_by`/`acted_via`, `utime`, `action`, `note`), together with the other open ones of the
//! same kind and trade. An action that fails gives the claim back. Repeating the same action on
//! a discrepancy it closed answers it again without doing anything twice; another action on a
//! closed one is refused.

use std::time::Duration;

use platform::{
    db::{duration_millis, now_millis},
    error::{AppError, Msg},
};

use super::{
    crypto::random_nonce,
    model::{Action, Discrepancy, NewRefund, Payment, PaymentStatus, Settled, Settlement},
    parse_time,
    provider::TradeState,
    refund::{invalid, MAX_REASON_CHARS},
    service::PaymentService,
    store::RefundCompletion,
};

/// The longest note (characters).
pub const MAX_NOTE_CHARS: usize = 1000;
/// A claim older than this is taken as its process having died mid-action.
const STALE_CLAIM: Duration = Duration::from_secs(5 * 60);

/// What a person asks to do about a discrepancy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Act {
    /// The action.
    pub action: Action,
    /// Why (1–1000 characters); a refund's reason is its first 80 characters.
    pub note: String,
    /// The admin acting (0 from the command line).
    pub admin: i64,
    /// Where, outside the admin API: `cli:<user>@<host>` (recorded, never sent to the payer).
    pub via: String,
    /// For a refund: let a balance go below 0 (see [`super::refund`]).
    pub allow_negative: bool,
}

fn not_open() -> AppError {
    AppError::NotFound(Msg::new(
        "no open discrepancy with that id",
        "没有该待处理的差异",
    ))
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
        let found = self.store().discrepancy(id).await?.ok_or_else(not_open)?;
        if found.status == "resolved" || found.status == "fixed" {
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
        let now = now_millis();
        let claimed = self
            .store()
            .claim_discrepancy(
                id,
                (act.action, act.admin, &act.via),
                now - duration_millis(STALE_CLAIM),
                now,
            )
            .await?;
        if !claimed {
            return Err(AppError::Conflict(Msg::new(
                "another person is acting on this discrepancy; look again",
                "其他人正在处理该差异，请刷新后查看",
            )));
        }
        let done = match act.action {
            Action::Resolve => Ok(()),
            Action::Credit => self.credit(&found.trade_no).await,
            Action::Refund => self.refund_for(&found, note, act).await,
        };
        if let Err(err) = done {
            self.store().release_discrepancy(id, now_millis()).await?;
            return Err(err);
        }
        self.store()
            .close_discrepancy(id, note, now_millis())
            .await?;
        tracing::info!(id, kind = %found.kind, action = act.action.as_str(), admin = act.admin, via = %act.via, "payment discrepancy acted on");
        let after = self.store().discrepancy(id).await?.ok_or_else(not_open)?;
        Ok(with_actions(after))
    }

    /// Settles `trade_no` as paid — the provider must say it was paid, for its amount — so
    /// its seller credits it. Only a failed or pending payment is credited.
    async fn credit(&self, trade_no: &str) -> Result<(), AppError> {
        let payment = self.payment(trade_no).await?;
        match payment.status {
            PaymentStatus::Succeeded => return Ok(()),
            PaymentStatus::Refunded => {
                return Err(invalid(
                    "this payment was refunded: there is nothing to credit",
                    "该笔支付已退款，无法入账",
                ))
            }
            PaymentStatus::Failed | PaymentStatus::Pending => {}
        }
        let paid = self.confirm_paid(&payment, payment.amt).await?;
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

    /// Refunds the trade of discrepancy `found`: our payment of it (of the provider's amount
    /// when the two differ), the provider's amount of a trade we never made, or books a refund
    /// the provider made without us.
    async fn refund_for(&self, found: &Discrepancy, note: &str, act: &Act) -> Result<(), AppError> {
        let request = NewRefund {
            trade_no: found.trade_no.clone(),
            reason: note.chars().take(MAX_REASON_CHARS).collect(),
            requested_by: act.admin,
            requested_via: act.via.clone(),
            allow_negative: act.allow_negative,
        };
        let provider_amt = || {
            found.provider_amt.ok_or_else(|| {
                invalid(
                    "the discrepancy has no provider amount to refund",
                    "该差异没有可退的金额",
                )
            })
        };
        match found.kind.as_str() {
            "refunded" | "refund_after_failure" => self.book_provider_refund(&request).await,
            "amount_mismatch" | "notified_amount_mismatch" => {
                let payment = self.payment_to_refund(&request).await?;
                self.refund_amount(&request, &payment, provider_amt()?)
                    .await
                    .map(drop)
            }
            _ => match self.store().by_trade_no(&found.trade_no).await? {
                Some(_) => self.refund(&request).await.map(drop),
                None => self
                    .refund_unknown_trade(&request, provider_amt()?)
                    .await
                    .map(drop),
            },
        }
    }

    /// Books a refund the provider made without us (its merchant console): the provider must
    /// report the trade refunded; the refund is recorded as succeeded and completed — payment
    /// `refunded`, the credit reversed — in one transaction, without asking the provider for
    /// anything. Refused while a refund of ours of the trade is live.
    async fn book_provider_refund(&self, request: &NewRefund) -> Result<(), AppError> {
        let payment = self.payment(&request.trade_no).await?;
        if self.store().live_refund(&payment.trade_no).await?.is_some() {
            return Err(AppError::Conflict(Msg::new(
                "a refund of ours of this payment is under way: it settles by itself",
                "该笔支付已有进行中的退款，会自动结算",
            )));
        }
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
        let completion = self
            .store()
            .book_external_refund(
                request,
                &format!("ext{}", &random_nonce()[..24]),
                (&payment.biz, payment.biz_id, payment.amt),
                now_millis(),
            )
            .await
            .map_err(|err| AppError::Internal(err.into()))?;
        match completion {
            RefundCompletion::Completed(_) => {
                self.outbox().committed();
                Ok(())
            }
            RefundCompletion::AwaitingCredit => Err(AppError::Conflict(Msg::new(
                "the payment's credit is still being posted; try again in a moment",
                "该笔支付仍在入账，请稍后再试",
            ))),
            RefundCompletion::NotUnderWay => Err(AppError::Conflict(Msg::new(
                "a refund of this payment is under way: it settles by itself",
                "该笔支付已有进行中的退款，会自动结算",
            ))),
        }
    }

    async fn payment(&self, trade_no: &str) -> Result<Payment, AppError> {
        self.store()
            .by_trade_no(trade_no)
            .await?
            .ok_or_else(|| AppError::NotFound(Msg::new("no such payment", "支付不存在")))
    }
}

/// `found` with the actions it offers now (none unless open).
pub fn with_actions(mut found: Discrepancy) -> Discrepancy {
    found.actions = if found.status == "open" {
        Action::for_kind(&found.kind).to_vec()
    } else {
        Vec::new()
    };
    found
}
