//! Live settings: the part of the configuration a running process applies without a restart —
//! rate and write limits, feature switches, the log filter.
//!
//! Data flow: an admin sets a key (API, console or CLI); the feature that stores live settings
//! writes it to the database and bumps a version; every instance's follower reads the version
//! every few seconds and, when it moved, hands all stored values to [`LiveConfig::apply`]. That
//! re-reads the start-up configuration (defaults → file → environment → flags) with the values
//! on top ([`Config::with_live`]: validated as at start-up, so an invalid value gives the same
//! one-line error) and swaps the result in. Removing a value brings the key back to its
//! start-up value.
//!
//! Readers never hold a value read at start-up: they read [`LiveConfig::current`] at the time of
//! use (an atomic pointer load), or through a handle that rebuilds what it derives when the
//! configuration's [`LiveConfig::generation`] moved — [`LiveRateLimiter`] (a limiter whose limit
//! and window are live) and [`Switch`] (a feature switch: a [`Rollout`] to everyone, a stable
//! percentage of users, or listed users, counted per variant in [`FEATURE_SWITCH_TOTAL`]).
//!
//! A stored value this binary cannot apply (a key a newer version knows, a value an older one
//! would refuse) is skipped, logged and counted in [`LIVE_SETTINGS_REFUSED`]; the others apply.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex, PoisonError,
    },
    time::Duration,
};

use arc_swap::ArcSwap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{config::Config, error::AppError, rate_limit::RateLimiter, redis::Redis};

/// Gauge: the version of the stored live settings this instance applied last.
pub const LIVE_SETTINGS_VERSION: &str = "live_settings_version";
/// Gauge: stored live settings this instance could not apply (unknown here, or invalid).
pub const LIVE_SETTINGS_REFUSED: &str = "live_settings_refused";
/// Counter: feature-switch decisions, by `switch` and `variant` (`on`, `off`).
pub const FEATURE_SWITCH_TOTAL: &str = "feature_switch_decisions_total";

/// Describes this module's metrics (the recorder's installation calls it).
pub fn describe_metrics() {
    metrics::describe_gauge!(
        LIVE_SETTINGS_VERSION,
        "Version of the stored live settings this instance applied last"
    );
    metrics::describe_gauge!(
        LIVE_SETTINGS_REFUSED,
        "Stored live settings this instance could not apply (unknown to it, or invalid)"
    );
    metrics::describe_counter!(
        FEATURE_SWITCH_TOTAL,
        "Feature-switch decisions, by switch and variant (on, off)"
    );
}

/// What changed when live settings were applied, for the hooks ([`LiveConfig::on_change`]).
pub type Hook = Box<dyn Fn(&Config, &Config) + Send + Sync>;

/// The configuration in effect: the start-up one with the live settings on top. Cheap to
/// clone (shared).
#[derive(Clone)]
pub struct LiveConfig(Arc<Inner>);

struct Inner {
    start: Arc<Config>,
    current: ArcSwap<Config>,
    generation: AtomicU64,
    applied: Mutex<Applied>,
    hooks: Mutex<Vec<Hook>>,
}

/// The stored live settings an instance applied, and those it could not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// The store's version they were read at (0: none read yet).
    pub version: i64,
    /// The values in effect, by key.
    pub values: BTreeMap<String, serde_json::Value>,
    /// Stored values not applied, by key: why (one line).
    pub refused: BTreeMap<String, String>,
}

impl fmt::Debug for LiveConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveConfig")
            .field("generation", &self.generation())
            .finish_non_exhaustive()
    }
}

impl LiveConfig {
    /// The start-up configuration, with no live settings yet.
    pub fn new(start: Arc<Config>) -> Self {
        Self(Arc::new(Inner {
            current: ArcSwap::new(start.clone()),
            start,
            generation: AtomicU64::new(0),
            applied: Mutex::new(Applied::default()),
            hooks: Mutex::new(Vec::new()),
        }))
    }

    /// The configuration at start-up (defaults → file → environment → flags).
    pub fn start(&self) -> &Arc<Config> {
        &self.0.start
    }

    /// The configuration in effect now.
    pub fn current(&self) -> Arc<Config> {
        self.0.current.load_full()
    }

    /// Moves with every applied change: a reader that derived something from the configuration
    /// compares it to know whether to derive again.
    pub fn generation(&self) -> u64 {
        self.0.generation.load(Ordering::Acquire)
    }

    /// What was applied last.
    pub fn applied(&self) -> Applied {
        self.0
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Calls `hook(old, new)` after every applied change (e.g. to reload the log filter).
    pub fn on_change(&self, hook: impl Fn(&Config, &Config) + Send + Sync + 'static) {
        self.0
            .hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(hook));
    }

    /// The configuration `values` would give, or the one-line error a start-up with them would
    /// give (checks a change before it is stored).
    pub fn check(&self, values: &BTreeMap<String, serde_json::Value>) -> anyhow::Result<Config> {
        self.0.start.with_live(values)
    }

    /// Applies the stored live settings `values` read at `version`: all of them when they are
    /// valid together, else each one that is valid with those before it (the others are
    /// refused, logged and counted). Unchanged values change nothing.
    pub fn apply(&self, version: i64, values: BTreeMap<String, serde_json::Value>) -> Applied {
        let mut applied = self
            .0
            .applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if applied.version == version && applied.values == values && applied.refused.is_empty() {
            return applied.clone();
        }
        let (config, kept, refused) = match self.0.start.with_live(&values) {
            Ok(config) => (config, values, BTreeMap::new()),
            Err(_) => {
                let mut kept = BTreeMap::new();
                let mut refused = BTreeMap::new();
                let mut config = None;
                for (key, value) in values {
                    kept.insert(key.clone(), value);
                    match self.0.start.with_live(&kept) {
                        Ok(next) => config = Some(next),
                        Err(err) => {
                            kept.remove(&key);
                            tracing::warn!(key, error = %err, "a live setting is not applied");
                            refused.insert(key, err.to_string());
                        }
                    }
                }
                let config = config.unwrap_or_else(|| (*self.0.start).clone());
                (config, kept, refused)
            }
        };
        let changed = kept != applied.values;
        *applied = Applied {
            version,
            values: kept,
            refused,
        };
        metrics::gauge!(LIVE_SETTINGS_VERSION).set(version as f64);
        metrics::gauge!(LIVE_SETTINGS_REFUSED).set(applied.refused.len() as f64);
        if changed {
            let new = Arc::new(config);
            let old = self.0.current.swap(new.clone());
            self.0.generation.fetch_add(1, Ordering::AcqRel);
            tracing::info!(version, keys = ?applied.values.keys().collect::<Vec<_>>(), "live settings applied");
            for hook in self
                .0
                .hooks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
            {
                hook(&old, &new);
            }
        }
        applied.clone()
    }
}

/// Who a feature switch is on for: everyone, a stable share of users, listed users, or nobody.
///
/// Written as text (environment, TOML, API): `on`, `off`, a percentage (`25%`, `0.5%`), user
/// ids, or a percentage and user ids separated by commas (`10%, 1, 42`); TOML and JSON also take
/// `true`/`false` and a table `{ percent = 10, users = [1, 42] }`. A user is in the percentage
/// when the hash of the switch's name and their id falls below it: the same users stay in as
/// long as the percentage does not shrink, a larger percentage keeps them and adds others, and
/// two switches pick independent users. Visitors without an account are in only at 100%.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rollout {
    /// The share of users, in hundredths of a percent (0–10 000).
    basis_points: u16,
    /// Users it is on for whatever the share.
    users: BTreeSet<i64>,
}

/// Buckets a user hashes into: hundredths of a percent.
const BUCKETS: u64 = 10_000;

impl Rollout {
    /// On for everyone.
    pub fn everyone() -> Self {
        Self {
            basis_points: BUCKETS as u16,
            users: BTreeSet::new(),
        }
    }

    /// On for nobody.
    pub fn nobody() -> Self {
        Self::default()
    }

    /// Whether switch `name` is on for user `uid` (`None`: a visitor without an account).
    pub fn on_for(&self, name: &str, uid: Option<i64>) -> bool {
        if u64::from(self.basis_points) >= BUCKETS {
            return true;
        }
        let Some(uid) = uid else {
            return false;
        };
        self.users.contains(&uid) || bucket(name, uid) < u64::from(self.basis_points)
    }

    fn parse(text: &str) -> Result<Self, String> {
        let mut rollout = Self::default();
        let text = text.trim();
        match text.to_ascii_lowercase().as_str() {
            "on" | "true" | "everyone" => return Ok(Self::everyone()),
            "off" | "false" | "nobody" | "" => return Ok(Self::nobody()),
            _ => {}
        }
        for item in text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            if let Some(percent) = item.strip_suffix('%') {
                rollout.basis_points = basis_points(percent.trim().parse::<f64>().ok())?;
            } else {
                let uid = item
                    .parse::<i64>()
                    .ok()
                    .filter(|uid| *uid > 0)
                    .ok_or_else(|| {
                        format!(
                        "expected on, off, a percentage such as 25% or user ids, found {item:?}"
                    )
                    })?;
                rollout.users.insert(uid);
            }
        }
        Ok(rollout)
    }
}

fn basis_points(percent: Option<f64>) -> Result<u16, String> {
    match percent {
        Some(percent) if (0.0..=100.0).contains(&percent) => Ok((percent * 100.0).round() as u16),
        _ => Err("a percentage is 0% to 100%".to_owned()),
    }
}

/// The bucket (0–9 999) of user `uid` for switch `name`: FNV-1a over both, then a 64-bit
/// finaliser, so consecutive ids spread evenly; stable across processes, builds and versions.
fn bucket(name: &str, uid: i64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name
        .bytes()
        .chain([b':'])
        .chain(uid.to_string().into_bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^= hash >> 33;
    hash % BUCKETS
}

impl fmt::Display for Rollout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if u64::from(self.basis_points) >= BUCKETS {
            return f.write_str("on");
        }
        let mut items: Vec<String> = Vec::new();
        if self.basis_points > 0 {
            let percent = f64::from(self.basis_points) / 100.0;
            items.push(format!("{percent}%"));
        }
        items.extend(self.users.iter().map(i64::to_string));
        if items.is_empty() {
            return f.write_str("off");
        }
        f.write_str(&items.join(", "))
    }
}

impl Serialize for Rollout {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rollout {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Flag(bool),
            User(i64),
            Text(String),
            Table {
                #[serde(default)]
                percent: Option<f64>,
                #[serde(default)]
                users: Vec<i64>,
            },
        }
        match Form::deserialize(de)? {
            Form::Flag(true) => Ok(Self::everyone()),
            Form::Flag(false) => Ok(Self::nobody()),
            Form::User(uid) => Self::parse(&uid.to_string()).map_err(serde::de::Error::custom),
            Form::Text(text) => Self::parse(&text).map_err(serde::de::Error::custom),
            Form::Table { percent, users } => {
                if users.iter().any(|uid| *uid <= 0) {
                    return Err(serde::de::Error::custom("user ids are above 0"));
                }
                Ok(Self {
                    basis_points: basis_points(percent.or(Some(0.0)))
                        .map_err(serde::de::Error::custom)?,
                    users: users.into_iter().collect(),
                })
            }
        }
    }
}

/// A feature switch read from the live configuration at each decision.
#[derive(Clone)]
pub struct Switch {
    live: LiveConfig,
    name: &'static str,
    read: fn(&Config) -> Option<&Rollout>,
}

impl fmt::Debug for Switch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Switch").field("name", &self.name).finish()
    }
}

impl Switch {
    /// The switch `name` (its setting's key), whose rollout `read` finds in a configuration.
    pub fn new(
        live: LiveConfig,
        name: &'static str,
        read: fn(&Config) -> Option<&Rollout>,
    ) -> Self {
        Self { live, name, read }
    }

    /// Whether the switch is on for `uid` now (`None`: a visitor), counted per variant.
    pub fn on_for(&self, uid: Option<i64>) -> bool {
        let config = self.live.current();
        let on = (self.read)(&config).is_some_and(|rollout| rollout.on_for(self.name, uid));
        let variant = if on { "on" } else { "off" };
        metrics::counter!(FEATURE_SWITCH_TOTAL, "switch" => self.name, "variant" => variant)
            .increment(1);
        on
    }
}

/// A rate limit whose limit and window are live settings: rebuilt (counts start over for the
/// in-process limiter; Redis keeps them) when an applied change moved them. A limit of 0 is off.
#[derive(Clone)]
pub struct LiveRateLimiter(Arc<LimiterInner>);

/// Reads a limit and its window from a configuration.
pub type LimitOf = fn(&Config) -> anyhow::Result<(u32, Duration)>;

struct LimiterInner {
    live: LiveConfig,
    name: &'static str,
    redis: Option<(Redis, String)>,
    read: LimitOf,
    state: ArcSwap<LimiterState>,
}

struct LimiterState {
    generation: u64,
    limit: (u32, Duration),
    limiter: Option<RateLimiter>,
}

impl fmt::Debug for LiveRateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveRateLimiter")
            .field("name", &self.0.name)
            .finish_non_exhaustive()
    }
}

impl LiveRateLimiter {
    /// The limiter `name`, shared through `redis` (with its key prefix) in cluster mode, whose
    /// limit and window `read` finds in the live configuration.
    pub fn new(
        name: &'static str,
        live: &LiveConfig,
        redis: Option<(&Redis, &str)>,
        read: LimitOf,
    ) -> anyhow::Result<Self> {
        let generation = live.generation();
        let limit = read(&live.current())?;
        let limiter = RateLimiter::unless_off(name, redis, limit.0, limit.1)?;
        Ok(Self(Arc::new(LimiterInner {
            live: live.clone(),
            name,
            redis: redis.map(|(redis, prefix)| (redis.clone(), prefix.to_owned())),
            read,
            state: ArcSwap::from_pointee(LimiterState {
                generation,
                limit,
                limiter,
            }),
        })))
    }

    /// The limiter's name (its metrics label).
    pub fn name(&self) -> &'static str {
        self.0.name
    }

    /// The limiter of the configuration in effect, rebuilt when its limit or window moved.
    fn state(&self) -> Arc<LimiterState> {
        let state = self.0.state.load_full();
        let generation = self.0.live.generation();
        if state.generation == generation {
            return state;
        }
        let limit = match (self.0.read)(&self.0.live.current()) {
            Ok(limit) => limit,
            Err(err) => {
                tracing::warn!(limiter = self.0.name, %err, "the live limit is unreadable; kept");
                state.limit
            }
        };
        let limiter = if limit == state.limit {
            state.limiter.clone()
        } else {
            let redis = self
                .0
                .redis
                .as_ref()
                .map(|(redis, prefix)| (redis, prefix.as_str()));
            match RateLimiter::unless_off(self.0.name, redis, limit.0, limit.1) {
                Ok(limiter) => limiter,
                Err(err) => {
                    tracing::warn!(limiter = self.0.name, %err, "the live limit is invalid; kept");
                    state.limiter.clone()
                }
            }
        };
        let next = Arc::new(LimiterState {
            generation,
            limit,
            limiter,
        });
        self.0.state.store(next.clone());
        next
    }

    /// Whether the limit is on now (not 0).
    pub fn is_on(&self) -> bool {
        self.state().limiter.is_some()
    }

    /// Counts one attempt for `key` for good; `Err(RateLimited)` when over the limit.
    pub async fn check(&self, key: &str) -> Result<(), AppError> {
        let state = self.state();
        match &state.limiter {
            Some(limiter) => limiter.check(key).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollouts_read_every_written_form_and_write_one() {
        for (text, shown) in [
            ("on", "on"),
            ("100%", "on"),
            ("off", "off"),
            ("0%", "off"),
            ("25%", "25%"),
            ("0.5%", "0.5%"),
            ("10%, 42, 1", "10%, 1, 42"),
            ("7", "7"),
        ] {
            let rollout: Rollout = serde_json::from_value(serde_json::json!(text)).unwrap();
            assert_eq!(rollout.to_string(), shown, "{text}");
        }
        let table: Rollout =
            serde_json::from_value(serde_json::json!({"percent": 5, "users": [3]})).unwrap();
        assert_eq!(table.to_string(), "5%, 3");
        let flag: Rollout = serde_json::from_value(serde_json::json!(true)).unwrap();
        assert_eq!(flag, Rollout::everyone());
        for bad in ["101%", "-1%", "x%", "abc", "0", "-4"] {
            assert!(
                serde_json::from_value::<Rollout>(serde_json::json!(bad)).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_percentage_is_near_its_share_of_ten_thousand_users_and_stable_per_user() {
        for percent in [1u16, 10, 25, 50, 90] {
            let rollout = Rollout {
                basis_points: percent * 100,
                users: BTreeSet::new(),
            };
            let on = (1..=10_000)
                .filter(|uid| rollout.on_for("notifications_stream", Some(*uid)))
                .count();
            let expected = usize::from(percent) * 100;
            // Binomial: 4 standard deviations of 10 000 draws at p ≤ 0.5 is at most 200.
            assert!(
                on.abs_diff(expected) <= 200,
                "{percent}%: {on} of 10 000 users"
            );
        }
        let small = Rollout::parse("10%").unwrap();
        let large = Rollout::parse("30%").unwrap();
        for uid in 1..=10_000 {
            let in_small = small.on_for("s", Some(uid));
            assert_eq!(in_small, small.on_for("s", Some(uid)), "stable");
            assert!(
                !in_small || large.on_for("s", Some(uid)),
                "widening keeps {uid}"
            );
        }
        // Two switches pick different users.
        let same = (1..=10_000)
            .filter(|uid| small.on_for("a", Some(*uid)) == small.on_for("b", Some(*uid)))
            .count();
        assert!(same < 9_500, "{same} users decided alike by two switches");
    }

    #[test]
    fn listed_users_are_on_and_visitors_only_for_everyone() {
        let rollout = Rollout::parse("0%, 5").unwrap();
        assert!(rollout.on_for("x", Some(5)));
        assert!(!rollout.on_for("x", Some(6)));
        assert!(!Rollout::parse("99%").unwrap().on_for("x", None));
        assert!(Rollout::everyone().on_for("x", None));
    }
}
