//! Delivering one message through the configured providers: the first that accepts it wins.
//!
//! Each provider has a health record (a circuit): `sms_circuit_failures` consecutive failures
//! or timeouts open it, and while open the provider is skipped; after `sms_circuit_open` one
//! message is let through as a trial — accepted closes the circuit, failed opens it again. A
//! provider's own "too many messages" answer does not count against its health (it is up), and
//! our per-provider rate limit (`sms_provider_rate_limit`, shared through Redis in cluster mode)
//! skips a provider before it would say so. The order is `sms_providers` (`failover`), or
//! rotated by one per message (`round_robin`). When every provider failed or was skipped,
//! [`SmsDelivery::send`] says so with each one's reason — it never reports a failure as sent;
//! the caller decides what to do (the phone login queues the message for a retry).
//!
//! Health is per instance (each instance learns a provider is down from its own requests).
//! Every attempt is counted in `sms_send_total{provider, outcome}` and timed in
//! `sms_send_seconds{provider}`; `sms_circuit_open{provider}` is 1 while a circuit is open.

use std::{
    fmt,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use platform::rate_limit::RateLimiter;

use tokio::time::Instant;

use super::provider::{SendError, SmsMessage, SmsProvider};

/// Counter: provider attempts by `provider` and `outcome` (`ok`, `failed`, `timeout`,
/// `rate_limited`, `throttled`, `circuit_open`).
pub const SMS_SEND_TOTAL: &str = "sms_send_total";
/// Histogram: seconds per provider request, by `provider`.
pub const SMS_SEND_SECONDS: &str = "sms_send_seconds";
/// Gauge: 1 while a provider's circuit is open, by `provider`.
pub const SMS_CIRCUIT_OPEN: &str = "sms_circuit_open";

/// How delivery treats failing providers.
#[derive(Debug, Clone, Copy)]
pub struct HealthPolicy {
    /// Consecutive failures that open a circuit.
    pub failures_to_open: u32,
    /// How long an open circuit skips its provider before a trial.
    pub open_for: Duration,
}

/// Sends messages through an ordered list of providers; cheap to clone.
#[derive(Clone)]
pub struct SmsDelivery {
    inner: Arc<Inner>,
}

struct Inner {
    providers: Vec<Tracked>,
    round_robin: bool,
    next_start: AtomicUsize,
    policy: HealthPolicy,
    timeout: Duration,
    rate_limit: Option<RateLimiter>,
}

struct Tracked {
    provider: Arc<dyn SmsProvider>,
    health: Mutex<Health>,
}

/// A provider's circuit.
#[derive(Debug, Default)]
struct Health {
    consecutive_failures: u32,
    /// Set while the circuit is open (until then) or half-open (past it).
    open_until: Option<Instant>,
    /// A half-open circuit's one trial is under way.
    trial_in_flight: bool,
}

/// Why one provider did not take the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// It was asked and refused or failed.
    Failed(SendError),
    /// Its circuit is open.
    CircuitOpen,
    /// Our rate limit for it is reached.
    Throttled,
}

/// No provider took the message: each one's reason, in the order tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undelivered {
    /// `(provider, why)`.
    pub reasons: Vec<(String, Skipped)>,
}

impl fmt::Display for Undelivered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reasons.is_empty() {
            return f.write_str("no SMS provider is configured");
        }
        let reasons = self
            .reasons
            .iter()
            .map(|(provider, why)| match why {
                Skipped::Failed(err) => format!("{provider}: {err}"),
                Skipped::CircuitOpen => format!("{provider}: circuit open"),
                Skipped::Throttled => format!("{provider}: over our rate limit"),
            })
            .collect::<Vec<_>>();
        write!(
            f,
            "no SMS provider took the message ({})",
            reasons.join("; ")
        )
    }
}

impl std::error::Error for Undelivered {}

impl fmt::Debug for SmsDelivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmsDelivery")
            .field("providers", &self.provider_names())
            .field("round_robin", &self.inner.round_robin)
            .finish_non_exhaustive()
    }
}

impl SmsDelivery {
    /// Delivery through `providers` in order (rotated per message when `round_robin`), each
    /// request bounded by `timeout`, optionally under a per-provider `rate_limit`.
    pub fn new(
        providers: Vec<Arc<dyn SmsProvider>>,
        round_robin: bool,
        policy: HealthPolicy,
        timeout: Duration,
        rate_limit: Option<RateLimiter>,
    ) -> Self {
        let providers = providers
            .into_iter()
            .map(|provider| {
                metrics::gauge!(SMS_CIRCUIT_OPEN, "provider" => provider.name().to_owned())
                    .set(0.0);
                Tracked {
                    provider,
                    health: Mutex::new(Health::default()),
                }
            })
            .collect();
        Self {
            inner: Arc::new(Inner {
                providers,
                round_robin,
                next_start: AtomicUsize::new(0),
                policy,
                timeout,
                rate_limit,
            }),
        }
    }

    /// Whether any provider is configured.
    pub fn is_configured(&self) -> bool {
        !self.inner.providers.is_empty()
    }

    /// The providers' names, in configured order.
    pub fn provider_names(&self) -> Vec<String> {
        self.inner
            .providers
            .iter()
            .map(|tracked| tracked.provider.name().to_owned())
            .collect()
    }

    /// Sends `message` through the first provider that takes it; its name, or why none did.
    pub async fn send(&self, message: &SmsMessage) -> Result<String, Undelivered> {
        let inner = &self.inner;
        let count = inner.providers.len();
        let start = if inner.round_robin && count > 0 {
            inner.next_start.fetch_add(1, Ordering::Relaxed) % count
        } else {
            0
        };
        let mut reasons = Vec::new();
        for offset in 0..count {
            let tracked = &inner.providers[(start + offset) % count];
            let name = tracked.provider.name().to_owned();
            if !tracked.admit() {
                count_attempt(&name, "circuit_open");
                reasons.push((name, Skipped::CircuitOpen));
                continue;
            }
            if let Some(limiter) = &inner.rate_limit {
                if limiter.check(&name).await.is_err() {
                    tracked.release_trial();
                    count_attempt(&name, "throttled");
                    reasons.push((name, Skipped::Throttled));
                    continue;
                }
            }
            let started = Instant::now();
            let result = tokio::time::timeout(inner.timeout, tracked.provider.send(message))
                .await
                .unwrap_or(Err(SendError::Timeout));
            metrics::histogram!(SMS_SEND_SECONDS, "provider" => name.clone())
                .record(started.elapsed().as_secs_f64());
            match result {
                Ok(()) => {
                    tracked.record(true, inner.policy);
                    count_attempt(&name, "ok");
                    return Ok(name);
                }
                Err(err) => {
                    let outcome = match &err {
                        SendError::RateLimited(_) => "rate_limited",
                        SendError::Timeout => "timeout",
                        SendError::Failed(_) => "failed",
                    };
                    // A provider that says "too many" is up: its health is not at stake.
                    let healthy = matches!(err, SendError::RateLimited(_));
                    tracked.record(healthy, inner.policy);
                    count_attempt(&name, outcome);
                    tracing::warn!(provider = %name, %err, ?message, "sms provider did not take a message");
                    reasons.push((name, Skipped::Failed(err)));
                }
            }
        }
        Err(Undelivered { reasons })
    }

    /// Whether `provider`'s circuit is open now (for tests and the console).
    pub fn circuit_open(&self, provider: &str) -> bool {
        self.inner
            .providers
            .iter()
            .filter(|tracked| tracked.provider.name() == provider)
            .any(|tracked| {
                let health = tracked.lock();
                health
                    .open_until
                    .is_some_and(|until| Instant::now() < until || health.trial_in_flight)
            })
    }
}

fn count_attempt(provider: &str, outcome: &'static str) {
    metrics::counter!(SMS_SEND_TOTAL, "provider" => provider.to_owned(), "outcome" => outcome)
        .increment(1);
}

impl Tracked {
    fn lock(&self) -> std::sync::MutexGuard<'_, Health> {
        // A poisoned record is still a record: health is advisory.
        self.health
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a message may go to this provider now; claims the trial of a half-open circuit.
    fn admit(&self) -> bool {
        let mut health = self.lock();
        match health.open_until {
            None => true,
            Some(until) if Instant::now() < until => false,
            Some(_) if health.trial_in_flight => false,
            Some(_) => {
                health.trial_in_flight = true;
                true
            }
        }
    }

    /// Gives back a claimed trial that was not used.
    fn release_trial(&self) {
        self.lock().trial_in_flight = false;
    }

    /// Records an answer: `healthy` closes the circuit, a failure counts towards opening it
    /// (and a failed trial opens it again at once).
    fn record(&self, healthy: bool, policy: HealthPolicy) {
        let name = self.provider.name().to_owned();
        let mut health = self.lock();
        let was_open = health.open_until.is_some();
        if healthy {
            *health = Health::default();
            if was_open {
                tracing::info!(provider = %name, "sms provider is back; circuit closed");
                metrics::gauge!(SMS_CIRCUIT_OPEN, "provider" => name).set(0.0);
            }
            return;
        }
        health.consecutive_failures = health.consecutive_failures.saturating_add(1);
        let trial_failed = was_open && health.trial_in_flight;
        if trial_failed || (!was_open && health.consecutive_failures >= policy.failures_to_open) {
            health.open_until = Some(Instant::now() + policy.open_for);
            health.trial_in_flight = false;
            tracing::warn!(
                provider = %name,
                failures = health.consecutive_failures,
                open_for = ?policy.open_for,
                "sms provider failing; circuit opened"
            );
            metrics::gauge!(SMS_CIRCUIT_OPEN, "provider" => name).set(1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use std::sync::atomic::AtomicU32;

    /// A provider whose answer a test sets.
    #[derive(Debug)]
    struct Scripted {
        name: &'static str,
        answer: Mutex<Result<(), SendError>>,
        calls: AtomicU32,
    }

    impl Scripted {
        fn new(name: &'static str) -> Arc<Self> {
            Arc::new(Self {
                name,
                answer: Mutex::new(Ok(())),
                calls: AtomicU32::new(0),
            })
        }
        fn answer(&self, answer: Result<(), SendError>) {
            *self.answer.lock().unwrap() = answer;
        }
        fn calls(&self) -> u32 {
            self.calls.load(Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl SmsProvider for Scripted {
        fn name(&self) -> &str {
            self.name
        }
        async fn send(&self, _message: &SmsMessage) -> Result<(), SendError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let answer = self.answer.lock().unwrap().clone();
            if answer == Err(SendError::Timeout) {
                std::future::pending::<()>().await;
            }
            answer
        }
    }

    fn message() -> SmsMessage {
        SmsMessage {
            phone: "13800000000".to_owned(),
            params: vec![("code", "123456".to_owned())],
        }
    }

    fn delivery(providers: &[Arc<Scripted>], round_robin: bool, open_for: Duration) -> SmsDelivery {
        SmsDelivery::new(
            providers
                .iter()
                .map(|p| p.clone() as Arc<dyn SmsProvider>)
                .collect(),
            round_robin,
            HealthPolicy {
                failures_to_open: 2,
                open_for,
            },
            Duration::from_millis(50),
            None,
        )
    }

    #[tokio::test]
    async fn the_first_healthy_provider_takes_the_message_and_failures_fall_through() {
        let (a, b) = (Scripted::new("a"), Scripted::new("b"));
        let delivery = delivery(&[a.clone(), b.clone()], false, Duration::from_secs(60));
        assert_eq!(delivery.send(&message()).await.unwrap(), "a");
        a.answer(Err(SendError::Failed("down".into())));
        assert_eq!(delivery.send(&message()).await.unwrap(), "b");
        a.answer(Err(SendError::Timeout));
        assert_eq!(delivery.send(&message()).await.unwrap(), "b");
        // Two consecutive failures opened a's circuit: it is no longer asked.
        assert!(delivery.circuit_open("a"));
        let asked = a.calls();
        assert_eq!(delivery.send(&message()).await.unwrap(), "b");
        assert_eq!(a.calls(), asked);
    }

    #[tokio::test]
    async fn when_every_provider_fails_the_answer_says_so_with_each_reason() {
        let (a, b) = (Scripted::new("a"), Scripted::new("b"));
        a.answer(Err(SendError::Failed("500".into())));
        b.answer(Err(SendError::RateLimited("too many".into())));
        let delivery = delivery(&[a.clone(), b.clone()], false, Duration::from_secs(60));
        let undelivered = delivery.send(&message()).await.unwrap_err();
        assert_eq!(
            undelivered.reasons,
            vec![
                (
                    "a".to_owned(),
                    Skipped::Failed(SendError::Failed("500".into()))
                ),
                (
                    "b".to_owned(),
                    Skipped::Failed(SendError::RateLimited("too many".into()))
                ),
            ]
        );
        // Rate limiting is not ill health: b's circuit stays closed however often it says so.
        for _ in 0..3 {
            let _ = delivery.send(&message()).await;
        }
        assert!(!delivery.circuit_open("b"));
        assert!(delivery.circuit_open("a"));
        assert!(SmsDelivery::new(
            vec![],
            false,
            HealthPolicy {
                failures_to_open: 1,
                open_for: Duration::from_secs(1)
            },
            Duration::from_secs(1),
            None
        )
        .send(&message())
        .await
        .is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_circuit_lets_one_trial_through_after_its_time_and_closes_on_success() {
        let (a, b) = (Scripted::new("a"), Scripted::new("b"));
        let delivery = delivery(&[a.clone(), b.clone()], false, Duration::from_millis(200));
        a.answer(Err(SendError::Failed("down".into())));
        delivery.send(&message()).await.unwrap();
        delivery.send(&message()).await.unwrap();
        assert!(delivery.circuit_open("a"));
        // Still open just before its time; still down at the trial: open again, b takes over.
        tokio::time::advance(Duration::from_millis(150)).await;
        let asked = a.calls();
        assert_eq!(delivery.send(&message()).await.unwrap(), "b");
        assert_eq!(a.calls(), asked, "no trial before the circuit's time");
        tokio::time::advance(Duration::from_millis(100)).await;
        let asked = a.calls();
        assert_eq!(delivery.send(&message()).await.unwrap(), "b");
        assert_eq!(a.calls(), asked + 1, "one trial");
        assert!(delivery.circuit_open("a"));
        // Back up at the next trial: closed, first in line again.
        a.answer(Ok(()));
        tokio::time::advance(Duration::from_millis(250)).await;
        assert_eq!(delivery.send(&message()).await.unwrap(), "a");
        assert!(!delivery.circuit_open("a"));
        assert_eq!(delivery.send(&message()).await.unwrap(), "a");
    }

    #[tokio::test]
    async fn round_robin_spreads_messages_and_still_fails_over() {
        let (a, b, c) = (Scripted::new("a"), Scripted::new("b"), Scripted::new("c"));
        let delivery = delivery(
            &[a.clone(), b.clone(), c.clone()],
            true,
            Duration::from_secs(60),
        );
        let mut firsts = Vec::new();
        for _ in 0..6 {
            firsts.push(delivery.send(&message()).await.unwrap());
        }
        assert_eq!(firsts, ["a", "b", "c", "a", "b", "c"]);
        b.answer(Err(SendError::Failed("down".into())));
        // The message that starts at b goes on to c.
        assert_eq!(delivery.send(&message()).await.unwrap(), "a");
        assert_eq!(delivery.send(&message()).await.unwrap(), "c");
    }

    #[tokio::test]
    async fn our_rate_limit_skips_a_provider_without_asking_it() {
        let (a, b) = (Scripted::new("a"), Scripted::new("b"));
        let limiter = RateLimiter::local("sms_test", 1, Duration::from_secs(60)).unwrap();
        let delivery = SmsDelivery::new(
            vec![a.clone(), b.clone()],
            false,
            HealthPolicy {
                failures_to_open: 2,
                open_for: Duration::from_secs(60),
            },
            Duration::from_secs(1),
            Some(limiter),
        );
        assert_eq!(delivery.send(&message()).await.unwrap(), "a");
        assert_eq!(delivery.send(&message()).await.unwrap(), "b");
        assert_eq!((a.calls(), b.calls()), (1, 1));
        let undelivered = delivery.send(&message()).await.unwrap_err();
        assert_eq!(
            undelivered.reasons,
            vec![
                ("a".to_owned(), Skipped::Throttled),
                ("b".to_owned(), Skipped::Throttled)
            ]
        );
    }
}
