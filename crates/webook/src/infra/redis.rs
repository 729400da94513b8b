//! The Redis connection of cluster mode: one auto-reconnecting multiplexed connection
//! ([`redis::aio::ConnectionManager`]) shared by every task. Commands on a broken connection fail
//! fast (bounded timeouts) and the manager reconnects in the background, so a Redis outage shows
//! up as errors and a failing `/readyz`, never as a hung request.

use std::time::Duration;

use anyhow::Context;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::infra::redact_url;

/// How long connecting or one command may take before it fails.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// A shared Redis connection, cheap to clone.
#[derive(Clone)]
pub struct Redis {
    connection: ConnectionManager,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redis")
    }
}

impl Redis {
    /// Connects to `url`; fails with a message naming the setting when Redis cannot be reached.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let context = || {
            format!(
                "cannot connect to redis_url (WEBOOK_REDIS_URL) {}",
                redact_url(url)
            )
        };
        let client = redis::Client::open(url).with_context(context)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(IO_TIMEOUT))
            .set_response_timeout(Some(IO_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let connection = ConnectionManager::new_with_config(client, config)
            .await
            .with_context(context)?;
        Ok(Self { connection })
    }

    /// A handle for issuing commands (clones share the one underlying connection).
    pub fn connection(&self) -> ConnectionManager {
        self.connection.clone()
    }

    /// Checks that Redis answers `PING` within `timeout`.
    pub async fn ping(&self, timeout: Duration) -> anyhow::Result<()> {
        let mut connection = self.connection();
        let pong: String =
            tokio::time::timeout(timeout, redis::cmd("PING").query_async(&mut connection))
                .await
                .context("redis did not answer in time")??;
        anyhow::ensure!(pong == "PONG", "redis answered PING with {pong:?}");
        Ok(())
    }
}
