//! Periodic upkeep of sessions, run by the process's scheduler (see `platform::jobs`).

use async_trait::async_trait;
use scheduler::{Job, JobContext};

use crate::auth::AuthService;

/// Deletes the state of sessions whose every token has expired: rows of `sessions` (both modes)
/// and the in-process map (embedded; Redis expires its own keys).
#[derive(Debug, Clone)]
pub struct PurgeExpiredSessions {
    auth: AuthService,
}

impl PurgeExpiredSessions {
    /// The job's name in logs, metrics and lock keys.
    pub const NAME: &'static str = "purge_expired_sessions";

    /// The job over `auth`'s session store.
    pub fn new(auth: AuthService) -> Self {
        Self { auth }
    }
}

#[async_trait]
impl Job for PurgeExpiredSessions {
    fn name(&self) -> &str {
        Self::NAME
    }

    async fn run(&self, _ctx: JobContext) -> anyhow::Result<()> {
        let deleted = self.auth.purge_expired_sessions().await?;
        tracing::info!(deleted, "purged expired sessions");
        Ok(())
    }
}
