//! Shared test support: the test Redis (required — a missing service fails the test loudly),
//! condition polling, unique key prefixes, and a pausable TCP proxy for cutting a client off
//! from Redis without touching the server.

#![allow(dead_code)]

use std::{
    future::Future,
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use scheduler::{InProcessLocks, LockBackend, RedisLocks};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};

/// Environment variable with the test Redis URL (set by `scripts/with-services.sh`).
pub const REDIS_URL_ENV: &str = "SCHEDULER_TEST_REDIS_URL";
/// The longest any awaited condition may take before the test fails.
pub const WAIT_LIMIT: Duration = Duration::from_secs(20);

/// The test Redis URL; panics with instructions when unset.
pub fn redis_url() -> String {
    std::env::var(REDIS_URL_ENV).unwrap_or_else(|_| {
        panic!("{REDIS_URL_ENV} is not set: run the tests through scripts/test.sh or scripts/with-services.sh")
    })
}

/// A key prefix no other test uses.
pub fn unique_prefix() -> String {
    format!("test:{}:", uuid::Uuid::new_v4().simple())
}

/// A managed connection to `url` with short timeouts, as production uses.
pub async fn connect(url: &str) -> ConnectionManager {
    let client = redis::Client::open(url).expect("redis URL");
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_millis(500)))
        .set_number_of_retries(1);
    ConnectionManager::new_with_config(client, config)
        .await
        .expect("connect to the test redis")
}

/// Redis locks on the test server under a fresh prefix.
pub async fn redis_locks() -> Arc<dyn LockBackend> {
    Arc::new(RedisLocks::new(
        connect(&redis_url()).await,
        unique_prefix(),
    ))
}

/// In-process locks.
pub fn in_process_locks() -> Arc<dyn LockBackend> {
    Arc::new(InProcessLocks::new())
}

/// Polls `condition` every 10 ms until it holds; panics naming `what` after [`WAIT_LIMIT`].
pub async fn wait_until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !condition().await {
        assert!(start.elapsed() < WAIT_LIMIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A TCP proxy to an upstream address that can stop forwarding (both directions) while keeping
/// every connection open — a network partition as the client sees it.
pub struct PausableProxy {
    addr: SocketAddr,
    paused: watch::Sender<bool>,
}

impl PausableProxy {
    /// Starts forwarding from a fresh loopback port to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (paused, watcher) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(forward(client_read, server_write, watcher.clone()));
                tokio::spawn(forward(server_read, client_write, watcher.clone()));
            }
        });
        Self { addr, paused }
    }

    /// `redis://` URL through the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// Stops forwarding; bytes sent meanwhile wait in the proxy.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Forwards again.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }
}

async fn forward(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    mut paused: watch::Receiver<bool>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let Ok(read) = from.read(&mut buffer).await else {
            return;
        };
        if read == 0 {
            return;
        }
        if paused.wait_for(|paused| !paused).await.is_err() {
            return;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// The `host:port` of a `redis://host:port/` URL.
pub fn redis_socket_addr(url: &str) -> SocketAddr {
    let parsed = url::Url::parse(url).expect("redis URL");
    let host = parsed.host_str().expect("redis URL host");
    let port = parsed.port().unwrap_or(6379);
    format!("{host}:{port}")
        .parse()
        .expect("redis URL is host:port")
}
