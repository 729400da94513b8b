//! Locks for one process (embedded mode): a map from key to holder, guarded by a mutex that is
//! never held across an `.await`. Expiry uses tokio's clock, so paused-clock tests see locks
//! expire exactly when they advance time past the ttl.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use async_trait::async_trait;
use tokio::time::Instant;

use super::{Grant, LockBackend, LockError};

/// In-process [`LockBackend`].
#[derive(Debug, Default)]
pub struct InProcessLocks {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    held: HashMap<String, Holder>,
    /// Last fencing token per key; never reset, so tokens only grow.
    fencing: HashMap<String, u64>,
    /// Last claimed fire time per key.
    ticks: HashMap<String, i64>,
}

#[derive(Debug)]
struct Holder {
    owner: String,
    expires_at: Instant,
}

impl InProcessLocks {
    /// An empty lock table.
    pub fn new() -> Self {
        Self::default()
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut state)
    }
}

#[async_trait]
impl LockBackend for InProcessLocks {
    async fn try_acquire(
        &self,
        key: &str,
        ttl: Duration,
        tick: Option<i64>,
    ) -> Result<Option<Grant>, LockError> {
        let now = Instant::now();
        Ok(self.with_state(|state| {
            let held = state
                .held
                .get(key)
                .is_some_and(|holder| holder.expires_at > now);
            let tick_claimed = tick
                .is_some_and(|tick| state.ticks.get(key).is_some_and(|&claimed| claimed >= tick));
            if held || tick_claimed {
                return None;
            }
            if let Some(tick) = tick {
                state.ticks.insert(key.to_owned(), tick);
            }
            let owner = uuid::Uuid::new_v4().to_string();
            let token = state.fencing.entry(key.to_owned()).or_default();
            *token += 1;
            let fencing_token = *token;
            state.held.insert(
                key.to_owned(),
                Holder {
                    owner: owner.clone(),
                    expires_at: now + ttl,
                },
            );
            Some(Grant {
                owner,
                fencing_token,
            })
        }))
    }

    async fn extend(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, LockError> {
        let now = Instant::now();
        Ok(self.with_state(|state| match state.held.get_mut(key) {
            Some(holder) if holder.owner == owner && holder.expires_at > now => {
                holder.expires_at = now + ttl;
                true
            }
            _ => false,
        }))
    }

    async fn release(&self, key: &str, owner: &str) -> Result<bool, LockError> {
        let now = Instant::now();
        Ok(self.with_state(|state| {
            let ours = state
                .held
                .get(key)
                .is_some_and(|holder| holder.owner == owner && holder.expires_at > now);
            if ours {
                state.held.remove(key);
            }
            ours
        }))
    }
}
