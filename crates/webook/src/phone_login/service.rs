//! The rules of signing in by SMS code: sending a code and signing in with it, and retrying
//! sends no provider took. No HTTP, no SQL text.
//!
//! Sending: the phone is checked; the limits count the send — per client and phone, per client,
//! per phone (daily) and the site's budget (per minute) —, a code is drawn and its keyed digest
//! stored — refused with 429001 if the last code to that phone went out less than the resend
//! interval ago — and the message goes through the SMS delivery. If no provider takes it, the
//! send is queued (durably, before answering) and the answer says "queued"; nothing here ever
//! logs a code or answers "sent" for a failure.
//!
//! Only sends that happen are charged: a request refused by one limit gives back what the
//! others counted, and one refused as too soon (or failing to store its code) gives back all.
//! The per-phone limit protects the phone's owner from being flooded with messages; the
//! per-client-and-phone limit, well below it, keeps one client (an IPv4 address, an IPv6 /64)
//! from using up the phone's sends and so locking its owner out of an account that may have no
//! password. The budget caps what the site pays when many clients ask at once;
//! its refusals are counted as `over_budget`.
//!
//! Signing in: the code's digest is checked and consumed atomically (the store); a wrong,
//! expired, used or dead code gets one answer (code 4); the account of the phone is found or
//! created without a password; a session is opened as for a password login.

use std::time::Duration;

use platform::{
    db::{duration_millis, now_millis},
    error::{AppError, Msg},
    rate_limit::{Charge, RateLimiter},
};

use super::{
    code::{draw_code, looks_like_a_code, normalize_phone},
    retry::{QueuedSend, RetryQueue, RetryReport},
    store::{CodeKey, CodeStore, Issued, NewCode},
};
use crate::{
    auth::{AuthService, TokenPair},
    sms::{SmsDelivery, SmsMessage},
    user::UserStore,
};

/// The purpose of login codes (a code for one purpose never serves another).
pub const LOGIN: &str = "login";

/// Counter: SMS login events by `event` (`sent`, `queued`, `too_soon`, `over_limit`,
/// `over_budget`, `accepted`, `refused`, `retry_sent`, `retry_postponed`, `dropped_expired`,
/// `dropped_superseded`, `signup`).
pub const SMS_LOGIN_EVENTS_TOTAL: &str = "sms_login_events_total";

/// The name of the site's budget of codes (`rate_limited_total{limiter}`).
pub const BUDGET_LIMITER: &str = "sms_code_budget";

fn count(event: &'static str) {
    metrics::counter!(SMS_LOGIN_EVENTS_TOTAL, "event" => event).increment(1);
}

/// What happened to a code that was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// A provider accepted the message.
    Sent,
    /// No provider took it now; it is queued and retried until the code would expire.
    Queued,
}

/// How codes behave.
#[derive(Debug, Clone, Copy)]
pub struct CodePolicy {
    /// Validity.
    pub ttl: Duration,
    /// Least time between two codes to one phone.
    pub resend_interval: Duration,
    /// Wrong tries that kill a code.
    pub max_attempts: u32,
}

/// The limits on sending (module docs).
#[derive(Debug, Clone)]
pub struct SendLimits {
    /// Per client and phone, daily.
    pub per_ip_phone: RateLimiter,
    /// Per client, daily.
    pub per_ip: RateLimiter,
    /// Per phone, daily.
    pub per_phone: RateLimiter,
    /// The whole site's, per its window; `None` when turned off.
    pub budget: Option<RateLimiter>,
}

impl SendLimits {
    /// Counts one send of a code to `phone` asked for by `client`: every charge, or none and
    /// the refusal of the first limit that refused.
    async fn charge(&self, phone: &str, client: &str) -> Result<Vec<Charge<'_>>, AppError> {
        let ip_phone = format!("{phone}@{client}");
        let mut wanted: Vec<(&RateLimiter, &str)> = vec![
            (&self.per_ip_phone, &ip_phone),
            (&self.per_ip, client),
            (&self.per_phone, phone),
        ];
        if let Some(budget) = &self.budget {
            wanted.push((budget, "site"));
        }
        let mut charges = Vec::with_capacity(wanted.len());
        for (limiter, key) in wanted {
            match limiter.acquire(key).await {
                Ok(charge) => charges.push(charge),
                Err(refused) => {
                    refund(charges).await;
                    if limiter.name() == BUDGET_LIMITER {
                        tracing::warn!("SMS code refused: the site's budget is used up");
                        count("over_budget");
                    } else {
                        count("over_limit");
                    }
                    return Err(refused);
                }
            }
        }
        Ok(charges)
    }
}

async fn refund(charges: Vec<Charge<'_>>) {
    for charge in charges {
        charge.refund().await;
    }
}

/// SMS-code sign-in; cheap to clone.
#[derive(Debug, Clone)]
pub struct PhoneLoginService {
    codes: CodeStore,
    retries: RetryQueue,
    delivery: SmsDelivery,
    auth: AuthService,
    users: UserStore,
    limits: SendLimits,
    policy: CodePolicy,
}

fn wrong_code() -> AppError {
    AppError::InvalidInput(Msg::field(
        "code",
        "wrong or expired code",
        "验证码错误或已过期",
    ))
}

impl PhoneLoginService {
    /// Assembles the service.
    pub fn new(
        codes: CodeStore,
        retries: RetryQueue,
        delivery: SmsDelivery,
        auth: AuthService,
        users: UserStore,
        limits: SendLimits,
        policy: CodePolicy,
    ) -> Self {
        Self {
            codes,
            retries,
            delivery,
            auth,
            users,
            limits,
            policy,
        }
    }

    fn digest(&self, phone: &str, code: &str) -> String {
        self.auth
            .keyed_digest("sms_code", &format!("{phone}:{code}"))
    }

    fn message(&self, phone: &str, code: String) -> SmsMessage {
        let minutes = self.policy.ttl.as_secs().div_ceil(60).max(1);
        SmsMessage {
            phone: phone.to_owned(),
            params: vec![("code", code), ("minutes", minutes.to_string())],
        }
    }

    /// Sends a login code to `phone` for a request from `client_ip`.
    pub async fn send_code(&self, phone: &str, client_ip: &str) -> Result<Delivery, AppError> {
        let phone = normalize_phone(phone)?;
        if !self.delivery.is_configured() {
            return Err(AppError::Disabled(Msg::new(
                "SMS sign-in is not enabled on this site",
                "本站未开启短信登录",
            )));
        }
        let charges = self.limits.charge(&phone, client_ip).await?;
        let code = match draw_code() {
            Ok(code) => code,
            Err(err) => {
                refund(charges).await;
                return Err(AppError::Internal(err));
            }
        };
        let generation = uuid::Uuid::new_v4().simple().to_string();
        let now = now_millis();
        let key = CodeKey {
            phone: phone.clone(),
            purpose: LOGIN,
        };
        let digest = self.digest(&phone, &code);
        let issued = self
            .codes
            .issue(
                &key,
                &NewCode {
                    digest: &digest,
                    generation: &generation,
                    attempts: self.policy.max_attempts,
                    now,
                    ttl: self.policy.ttl,
                    resend_interval: self.policy.resend_interval,
                },
            )
            .await;
        let wait = match issued {
            Ok(Issued::Stored) => None,
            Ok(Issued::TooSoon(wait)) => Some(wait),
            Err(err) => {
                refund(charges).await;
                return Err(AppError::Unavailable(err));
            }
        };
        if let Some(wait) = wait {
            refund(charges).await;
            count("too_soon");
            return Err(AppError::RateLimited {
                retry_after: wait.max(Duration::from_secs(1)),
            });
        }
        match self.delivery.send(&self.message(&phone, code)).await {
            Ok(provider) => {
                tracing::info!(%provider, "login code sent");
                count("sent");
                Ok(Delivery::Sent)
            }
            Err(undelivered) => {
                let expires_at = now + duration_millis(self.policy.ttl);
                self.retries
                    .enqueue(
                        &phone,
                        LOGIN,
                        &generation,
                        expires_at,
                        &undelivered.to_string(),
                        now,
                    )
                    .await?;
                tracing::warn!(%undelivered, "login code queued for a retry");
                count("queued");
                Ok(Delivery::Queued)
            }
        }
    }

    /// Signs in with the code sent to `phone`: the account of that phone (created without a
    /// password on first login) gets a new session bound to `user_agent`.
    pub async fn login(
        &self,
        phone: &str,
        code: &str,
        user_agent: &str,
    ) -> Result<TokenPair, AppError> {
        let phone = normalize_phone(phone)?;
        let code = code.trim();
        if !looks_like_a_code(code) {
            count("refused");
            return Err(wrong_code());
        }
        let key = CodeKey {
            phone: phone.clone(),
            purpose: LOGIN,
        };
        let accepted = self
            .codes
            .check(&key, &self.digest(&phone, code), now_millis())
            .await
            .map_err(AppError::Unavailable)?;
        if !accepted {
            count("refused");
            return Err(wrong_code());
        }
        count("accepted");
        let (uid, created) = self
            .users
            .find_or_create_by_phone(&phone, now_millis())
            .await?;
        if created {
            count("signup");
        }
        self.auth.open_session(uid, user_agent)
    }

    /// Retries every queued send due at `now` (see [`super::retry`]), while `still_owner()`.
    pub async fn retry_due(
        &self,
        now: i64,
        still_owner: impl Fn() -> bool,
    ) -> anyhow::Result<RetryReport> {
        let mut report = RetryReport::default();
        let mut after = 0;
        loop {
            let batch = self.retries.due(now, after).await?;
            let Some(last) = batch.last() else { break };
            after = last.id;
            for send in batch {
                if !still_owner() {
                    return Ok(report);
                }
                self.retry(&send, &mut report).await?;
            }
        }
        Ok(report)
    }

    async fn retry(&self, send: &QueuedSend, report: &mut RetryReport) -> anyhow::Result<()> {
        let now = now_millis();
        if send.expires_at <= now {
            self.retries.remove(send.id).await?;
            count("dropped_expired");
            report.expired += 1;
            return Ok(());
        }
        let code = draw_code()?;
        let key = CodeKey {
            phone: send.phone.clone(),
            purpose: LOGIN,
        };
        let replaced = self
            .codes
            .reissue(
                &key,
                &send.generation,
                &self.digest(&send.phone, &code),
                now,
            )
            .await?;
        if !replaced {
            self.retries.remove(send.id).await?;
            count("dropped_superseded");
            report.superseded += 1;
            return Ok(());
        }
        match self.delivery.send(&self.message(&send.phone, code)).await {
            Ok(provider) => {
                self.retries.remove(send.id).await?;
                tracing::info!(%provider, attempts = send.attempts + 1, "queued login code sent");
                count("retry_sent");
                report.sent += 1;
            }
            Err(undelivered) => {
                self.retries
                    .postpone(send, &undelivered.to_string(), now)
                    .await?;
                count("retry_postponed");
                report.postponed += 1;
            }
        }
        Ok(())
    }

    /// Deletes expired codes (embedded store); how many.
    pub async fn purge_expired_codes(&self) -> anyhow::Result<u64> {
        self.codes.purge_expired(now_millis()).await
    }

    /// The queued sends (tests, operators).
    pub async fn queued(&self) -> anyhow::Result<Vec<QueuedSend>> {
        Ok(self.retries.all().await?)
    }
}
