//! The HTTP server: accepts connections, serves the fast paths and the router on each
//! ([`crate::fast_path::Served`]), and keeps clients from holding sockets they do not use.
//!
//! A connection costs a file descriptor and a task, and a client can hold one open by sending
//! nothing, or a header one byte at a time. So each connection is watched:
//! - **header timeout**: from the first byte of a request to the end of its header, at most
//!   `http_header_timeout` (a connection that starts a request and trickles it is closed);
//! - **idle timeout**: a connection with no request in progress and no byte moving in either
//!   direction for `http_idle_timeout` is closed (this also covers a connection that never sends
//!   anything);
//! - **connection cap**: at most `http_max_connections` at once. At the cap the server stops
//!   accepting, so new connections wait in the kernel's listen backlog until one closes
//!   (backpressure rather than failure), and it says so in one log line, repeated at most once a
//!   minute. The cap is kept below the process's file-descriptor limit (raised to its hard limit
//!   when needed) with room left for the database, Redis and files, so accepting can never take
//!   the descriptors the rest of the process needs;
//! - **per-client cap**: at most `http_max_connections_per_client` of them from one client (and
//!   never more than half the connection cap in effect), so one address cannot take every socket
//!   and lock everybody else out. A client is the one the rate limits count: its address, for
//!   IPv6 its network of `client_ipv6_prefix` bits (a /64, which one host usually has whole). A connection over it is closed at once (counted in
//!   [`HTTP_CONNECTIONS_CLOSED_TOTAL`] with reason `per_client_cap`; one log line at most once a
//!   minute). Trusted proxies (`trusted_proxies`) are exempt: every client behind them shares
//!   their address.
//!
//! Each connection's watch looks at it every half of the shorter timeout, so a connection is
//! closed between one and one and a half timeouts after it expired; a timer re-armed on every
//! request would be exact, but it cost a quarter of the throughput of a read/like mix.
//!
//! A request in progress is never cut by these: its bound is the request timeout of
//! [`crate::http`]. Connections are served by hyper (HTTP/1.1, and HTTP/2 with prior
//! knowledge) with Nagle's algorithm off, as nginx does. On shutdown the server stops accepting,
//! asks every connection to finish its request in progress and close, and returns when all have.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, LazyLock, Mutex,
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use hyper::body::Incoming;
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::{client_ip::TrustedProxies, config::Config, fast_path::Served};

/// File descriptors kept free for everything but client connections (pools, Redis, logs,
/// the SQLite files, outgoing job calls).
const RESERVED_DESCRIPTORS: u64 = 256;
/// How often the "at the connection cap" line may repeat.
const CAP_LOG_INTERVAL: Duration = Duration::from_secs(60);
/// Pause after an accept error that is about this process (descriptors, memory) rather than
/// the one connection.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Counter: connections closed by the server, by `reason`: idling (`idle_timeout`), sending their
/// header too slowly (`header_timeout`), or over the per-client cap (`per_client_cap`, closed
/// as soon as accepted).
pub const HTTP_CONNECTIONS_CLOSED_TOTAL: &str = "http_connections_closed_total";
/// Gauge: client connections open.
pub const HTTP_CONNECTIONS_OPEN: &str = "http_connections_open";

/// Limits of client connections (module docs).
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Longest a request's header may take from its first byte.
    pub header_timeout: Duration,
    /// Longest a connection may sit with no request and no traffic.
    pub idle_timeout: Duration,
    /// Most connections at once (before the descriptor limit lowers it).
    pub max_connections: usize,
    /// Most connections at once from one client (0: no such cap); at most half of the cap in
    /// effect.
    pub max_connections_per_client: usize,
}

impl ServeOptions {
    /// How often a connection's watch looks at it: half the shorter timeout (so a connection is
    /// closed at most 1.5 timeouts after it expired), between 50 ms and 5 s.
    fn check_every(&self) -> Duration {
        (self.header_timeout.min(self.idle_timeout) / 2)
            .clamp(Duration::from_millis(50), Duration::from_secs(5))
    }

    /// The limits the config asks for.
    pub fn from_config(config: &Config) -> Self {
        Self {
            header_timeout: config.http_header_timeout,
            idle_timeout: config.http_idle_timeout,
            max_connections: config.http_max_connections,
            max_connections_per_client: config.http_max_connections_per_client,
        }
    }
}

/// Serves `served` on `listener` until `stop` is cancelled, then lets the connections finish
/// their requests in progress and returns once all are closed (callers bound that wait).
/// A connection counts against its client as the rate limits see it
/// ([`TrustedProxies::client_of`]: an IPv6 client is its network of `client_ipv6_prefix` bits);
/// connections from the trusted proxies themselves are not held to the per-client cap.
pub async fn serve(
    listener: TcpListener,
    served: Served,
    options: ServeOptions,
    proxies: TrustedProxies,
    stop: CancellationToken,
) {
    let cap = connection_cap(options.max_connections);
    let per_client = Arc::new(PerClient::new(
        per_client_cap(options.max_connections_per_client, cap),
        proxies,
    ));
    let permits = Arc::new(Semaphore::new(cap));
    let connections = TaskTracker::new();
    let mut cap_log = CapLog::default();
    let mut client_cap_log = CapLog::default();
    loop {
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                cap_log.reached(cap);
                tokio::select! {
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                    () = stop.cancelled() => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    accept_failed(&err).await;
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        let Some(client) = per_client.admit(peer.ip()) else {
            metrics::counter!(HTTP_CONNECTIONS_CLOSED_TOTAL, "reason" => "per_client_cap")
                .increment(1);
            client_cap_log.client_reached(per_client.cap, peer.ip());
            drop(stream);
            continue;
        };
        without_nagle(&stream);
        let (served, stop) = (served.clone(), stop.clone());
        connections.spawn(async move {
            serve_connection(stream, peer, served, options, stop).await;
            drop(client);
            drop(permit);
        });
    }
    connections.close();
    connections.wait().await;
}

/// Turns Nagle's algorithm off on an accepted connection, as nginx does on keep-alive
/// connections: a response written in more than one piece (a streamed or compressed body) would
/// otherwise have its last small segment held back until the client acknowledges the previous
/// one — up to the client's delayed-ACK timeout over a real network.
fn without_nagle(stream: &TcpStream) {
    if let Err(err) = stream.set_nodelay(true) {
        tracing::debug!(%err, "cannot set TCP_NODELAY on an accepted connection");
    }
}

/// The cap in effect: `wanted`, lowered to what the descriptor limit allows after raising the
/// soft limit as far as the hard one permits.
fn connection_cap(wanted: usize) -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let wanted_u64 = u64::try_from(wanted).unwrap_or(u64::MAX);
    let needed = wanted_u64.saturating_add(RESERVED_DESCRIPTORS);
    let limit = getrlimit(Resource::Nofile);
    let Some(mut soft) = limit.current else {
        return wanted; // unlimited
    };
    if soft < needed {
        let raised = limit.maximum.map_or(needed, |hard| hard.min(needed));
        if raised > soft
            && setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(raised),
                    maximum: limit.maximum,
                },
            )
            .is_ok()
        {
            soft = raised;
        }
    }
    if soft >= needed {
        return wanted;
    }
    let allowed = usize::try_from(soft.saturating_sub(RESERVED_DESCRIPTORS))
        .unwrap_or(wanted)
        .max(1);
    tracing::warn!(
        http_max_connections = wanted,
        open_files_limit = soft,
        effective = allowed,
        "the open-files limit is too low for http_max_connections; serving at most {allowed} \
         connections (raise `ulimit -n`)"
    );
    allowed
}

/// The per-client cap in effect: `wanted` (0: none), at most half of the connection cap in
/// effect `cap`, so other clients always have room.
fn per_client_cap(wanted: usize, cap: usize) -> usize {
    if wanted == 0 {
        return 0;
    }
    let allowed = wanted.min((cap / 2).max(1));
    if allowed < wanted {
        tracing::info!(
            http_max_connections_per_client = wanted,
            effective = allowed,
            "serving at most {allowed} connections per client: half the connection cap in effect"
        );
    }
    allowed
}

/// Connections open per client, for the per-client cap (module docs).
struct PerClient {
    /// Most per client; 0: no cap.
    cap: usize,
    proxies: TrustedProxies,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerClient {
    fn new(cap: usize, proxies: TrustedProxies) -> Self {
        Self {
            cap,
            proxies,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// A connection from `peer`, counted until the returned slot drops; `None` when its client
    /// has `cap` open already.
    fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<ClientSlot> {
        if self.cap == 0 || self.proxies.contains(&peer) {
            return Some(ClientSlot(None));
        }
        let key = self.proxies.client_of(peer);
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = open.entry(key).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(ClientSlot(Some((self.clone(), key))))
    }

    /// Connections counted against `peer`'s client now.
    #[cfg(test)]
    fn open_for(&self, peer: IpAddr) -> usize {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&self.proxies.client_of(peer))
            .copied()
            .unwrap_or(0)
    }
}

/// One connection counted against its client (none for an exempt one); uncounted on drop.
struct ClientSlot(Option<(Arc<PerClient>, IpAddr)>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let Some((per_client, key)) = self.0.take() else {
            return;
        };
        let mut open = per_client
            .open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = open.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&key);
            }
        }
    }
}

/// Logs reaching a connection cap at most once per [`CAP_LOG_INTERVAL`].
#[derive(Default)]
struct CapLog {
    last: Option<Instant>,
}

impl CapLog {
    fn due(&mut self) -> bool {
        let due = self
            .last
            .is_none_or(|last| last.elapsed() >= CAP_LOG_INTERVAL);
        if due {
            self.last = Some(Instant::now());
        }
        due
    }

    fn reached(&mut self, cap: usize) {
        if self.due() {
            tracing::warn!(
                http_max_connections = cap,
                "connection limit reached; new connections wait in the listen backlog until \
                 one closes (logged at most once a minute)"
            );
        }
    }

    fn client_reached(&mut self, cap: usize, peer: IpAddr) {
        if self.due() {
            tracing::warn!(
                http_max_connections_per_client = cap,
                client = %peer,
                "a client reached the per-client connection cap; its further connections are \
                 closed at once (logged at most once a minute)"
            );
        }
    }
}

/// An accept error: the client's own (reset before accept) is skipped; one of this process
/// (out of descriptors or memory) is logged at most once a second and paused on, so the loop
/// neither spins nor floods the log.
async fn accept_failed(err: &std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        err.kind(),
        ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
    ) {
        return;
    }
    static LAST_LOG: LazyLock<Mutex<Option<Instant>>> = LazyLock::new(|| Mutex::new(None));
    let log_now = LAST_LOG.lock().map_or(true, |mut last| {
        let due = last.is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        if due {
            *last = Some(Instant::now());
        }
        due
    });
    if log_now {
        tracing::error!(%err, "cannot accept connections");
    }
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}

/// Serves one connection until it ends, the watch closes it, or shutdown has let it finish.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    served: Served,
    options: ServeOptions,
    stop: CancellationToken,
) {
    let open = metrics::gauge!(HTTP_CONNECTIONS_OPEN);
    open.increment(1.0);
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: activity.clone(),
    });
    let requests = activity.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let in_progress = requests.request_started();
        let answer = served.call(request, peer);
        async move {
            let response = answer.await;
            drop(in_progress);
            response
        }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(connection);
    let mut stopping = false;
    // A coarse periodic look rather than a timer re-armed per request: re-arming (and being
    // woken to do it) on every request cost a quarter of the throughput of a read/like mix.
    let mut watch = tokio::time::interval_at(
        tokio::time::Instant::now() + options.check_every(),
        options.check_every(),
    );
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(%peer, error = %err, "connection ended with an error");
                }
                break;
            }
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
            _ = watch.tick() => {
                if let Some(reason) = activity.expired(options) {
                    metrics::counter!(HTTP_CONNECTIONS_CLOSED_TOTAL, "reason" => reason).increment(1);
                    tracing::debug!(%peer, reason, "closing connection");
                    break;
                }
            }
        }
    }
    open.decrement(1.0);
}

/// What a connection has been doing, for its watch.
struct Activity {
    /// When it was opened; the times below are milliseconds since then.
    opened: Instant,
    /// Last byte read or written.
    last_traffic: AtomicU64,
    /// First byte of a request header not yet complete, plus one (0: none).
    header_started: AtomicU64,
    /// Requests whose response is not produced yet.
    in_progress: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Self {
            opened: Instant::now(),
            last_traffic: AtomicU64::new(0),
            header_started: AtomicU64::new(0),
            in_progress: AtomicUsize::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn traffic(&self, read: bool) {
        self.traffic_at(self.now(), read);
    }

    fn traffic_at(&self, now: u64, read: bool) {
        self.last_traffic.store(now, Ordering::Relaxed);
        if read && self.in_progress.load(Ordering::Acquire) == 0 {
            // The first bytes after an idle spell start a request header.
            let _ = self.header_started.compare_exchange(
                0,
                now + 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// A header was parsed into a request: it is no longer late, and the connection is busy
    /// until the returned guard drops.
    fn request_started(self: &Arc<Self>) -> InProgress {
        self.in_progress.fetch_add(1, Ordering::AcqRel);
        self.header_started.store(0, Ordering::Release);
        InProgress(self.clone())
    }

    /// Why the connection should close now, if it should.
    fn expired(&self, options: ServeOptions) -> Option<&'static str> {
        self.expired_at(self.now(), options)
    }

    fn expired_at(&self, now: u64, options: ServeOptions) -> Option<&'static str> {
        if self.in_progress.load(Ordering::Acquire) > 0 {
            return None;
        }
        let header_started = self.header_started.load(Ordering::Acquire);
        if header_started > 0 && now + 1 >= header_started + millis(options.header_timeout) {
            return Some("header_timeout");
        }
        let idle_since = self.last_traffic.load(Ordering::Relaxed);
        if header_started == 0 && now >= idle_since + millis(options.idle_timeout) {
            return Some("idle_timeout");
        }
        None
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A request in progress on a connection; it is done when this drops.
struct InProgress(Arc<Activity>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.in_progress.fetch_sub(1, Ordering::AcqRel);
        self.0.traffic(false);
    }
}

/// A socket that tells its [`Activity`] about every byte.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.traffic(true);
        }
        result
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.traffic(false);
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.traffic(false);
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const OPTIONS: ServeOptions = ServeOptions {
        header_timeout: Duration::from_millis(100),
        idle_timeout: Duration::from_millis(300),
        max_connections: 10,
        max_connections_per_client: 4,
    };

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn one_client_holds_at_most_its_cap_and_gets_room_back() {
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()], 64);
        let per_client = Arc::new(PerClient::new(2, proxies));
        let first = per_client.admit(ip("192.0.2.1")).unwrap();
        let _second = per_client.admit(ip("192.0.2.1")).unwrap();
        assert!(per_client.admit(ip("192.0.2.1")).is_none(), "over the cap");
        assert!(
            per_client.admit(ip("192.0.2.2")).is_some(),
            "another client"
        );
        // IPv6: one /64 is one client; an IPv4-mapped address is the IPv4 client.
        let _a = per_client.admit(ip("2001:db8:0:1::1")).unwrap();
        let _b = per_client.admit(ip("2001:db8:0:1:ffff::2")).unwrap();
        assert!(per_client.admit(ip("2001:db8:0:1::3")).is_none());
        assert!(per_client.admit(ip("2001:db8:0:2::1")).is_some());
        assert!(per_client.admit(ip("::ffff:192.0.2.1")).is_none());
        // Trusted proxies carry many clients: not capped, not counted.
        let proxied: Vec<_> = (0..5)
            .map(|_| per_client.admit(ip("10.1.2.3")).unwrap())
            .collect();
        assert_eq!(per_client.open_for(ip("10.1.2.3")), 0);
        drop(proxied);
        drop(first);
        assert_eq!(per_client.open_for(ip("192.0.2.1")), 1);
        assert!(per_client.admit(ip("192.0.2.1")).is_some(), "room again");
    }

    #[test]
    fn the_per_client_cap_stays_below_the_connection_cap() {
        assert_eq!(per_client_cap(64, 10_000), 64);
        assert_eq!(per_client_cap(64, 20), 10);
        assert_eq!(per_client_cap(64, 1), 1);
        assert_eq!(per_client_cap(0, 20), 0, "off");
    }

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(!accepted.nodelay().unwrap(), "sockets start with Nagle on");
        without_nagle(&accepted);
        assert!(accepted.nodelay().unwrap(), "TCP_NODELAY is off");
        drop(client);
    }

    #[test]
    fn the_cap_stays_below_the_open_files_limit() {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let wanted = usize::MAX / 2;
        let cap = connection_cap(wanted);
        match limit.maximum {
            Some(hard) => assert!(
                (cap as u64) + RESERVED_DESCRIPTORS <= hard.max(RESERVED_DESCRIPTORS + 1),
                "cap {cap} with hard limit {hard}"
            ),
            None => assert_eq!(cap, wanted),
        }
        assert_eq!(connection_cap(10), 10, "a small cap is kept");
    }

    // Times are milliseconds since the connection opened.

    #[test]
    fn a_silent_connection_expires_after_the_idle_timeout() {
        let activity = Arc::new(Activity::new());
        assert_eq!(activity.expired_at(299, OPTIONS), None);
        assert_eq!(activity.expired_at(300, OPTIONS), Some("idle_timeout"));
        activity.traffic_at(250, false);
        assert_eq!(
            activity.expired_at(549, OPTIONS),
            None,
            "traffic restarts it"
        );
        assert_eq!(activity.expired_at(550, OPTIONS), Some("idle_timeout"));
    }

    #[test]
    fn a_started_header_must_finish_within_the_header_timeout() {
        let activity = Arc::new(Activity::new());
        activity.traffic_at(10, true);
        assert_eq!(activity.expired_at(109, OPTIONS), None);
        activity.traffic_at(100, true); // one more byte does not restart the header clock
        assert_eq!(activity.expired_at(110, OPTIONS), Some("header_timeout"));
    }

    #[test]
    fn the_watch_looks_often_enough_for_the_shorter_timeout() {
        assert_eq!(OPTIONS.check_every(), Duration::from_millis(50));
        let defaults = ServeOptions {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 1,
            max_connections_per_client: 1,
        };
        assert_eq!(defaults.check_every(), Duration::from_secs(5));
    }

    #[test]
    fn a_request_in_progress_is_never_expired() {
        let activity = Arc::new(Activity::new());
        activity.traffic_at(10, true);
        let in_progress = activity.request_started();
        assert_eq!(activity.expired_at(10_000, OPTIONS), None);
        drop(in_progress);
        assert_eq!(activity.expired(OPTIONS), None, "its end is traffic");
    }
}
