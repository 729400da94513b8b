//! The client's IP address, for rate limits and logs.
//!
//! It is the TCP peer, unless the peer is a trusted proxy (`trusted_proxies`): then the
//! `X-Forwarded-For` chain is walked from the right (the entry our proxy appended) past every
//! trusted hop, and the first untrusted address is the client. Entries left of it were written
//! by the client itself and are never believed.

use std::net::{IpAddr, SocketAddr};

use axum::{
    extract::{ConnectInfo, FromRequestParts},
    http::request::Parts,
};
use ipnet::IpNet;

use crate::error::AppError;

/// Proxies whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(pub Vec<IpNet>);

impl TrustedProxies {
    fn contains(&self, ip: &IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(ip))
    }

    /// The client address for a request from `peer` carrying `forwarded_for` headers.
    pub fn client_ip<'a>(
        &self,
        peer: IpAddr,
        forwarded_for: impl Iterator<Item = &'a str>,
    ) -> IpAddr {
        if !self.contains(&peer) {
            return peer;
        }
        let hops: Vec<IpAddr> = forwarded_for
            .flat_map(|header| header.split(','))
            .filter_map(|hop| hop.trim().parse().ok())
            .collect();
        hops.iter()
            .rev()
            .find(|hop| !self.contains(hop))
            .or(hops.first())
            .copied()
            .unwrap_or(peer)
    }
}

/// Extracts the client IP (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// The state of routes whose handlers take a [`ClientIp`].
pub trait KnowsProxies: Send + Sync {
    /// The proxies whose `X-Forwarded-For` is believed.
    fn trusted_proxies(&self) -> &TrustedProxies;
}

impl KnowsProxies for TrustedProxies {
    fn trusted_proxies(&self) -> &TrustedProxies {
        self
    }
}

impl<T: KnowsProxies> KnowsProxies for std::sync::Arc<T> {
    fn trusted_proxies(&self) -> &TrustedProxies {
        (**self).trusted_proxies()
    }
}

impl<S: KnowsProxies> FromRequestParts<S> for ClientIp {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(addr)| addr.ip())
            .ok_or_else(|| {
                AppError::Internal(anyhow::anyhow!("server started without peer addresses"))
            })?;
        let forwarded = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|value| value.to_str().ok());
        Ok(Self(state.trusted_proxies().client_ip(peer, forwarded)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peers_are_the_client_whatever_they_claim() {
        let proxies = TrustedProxies(vec!["10.0.0.0/8".parse().unwrap()]);
        assert_eq!(
            proxies.client_ip(ip("203.0.113.9"), ["1.2.3.4"].into_iter()),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn trusted_proxies_are_skipped_from_the_right() {
        let proxies = TrustedProxies(vec!["10.0.0.0/8".parse().unwrap()]);
        // The client forged "6.6.6.6"; our two proxies appended the real client and each other.
        let header = "6.6.6.6, 198.51.100.7, 10.0.0.2";
        assert_eq!(
            proxies.client_ip(ip("10.0.0.1"), [header].into_iter()),
            ip("198.51.100.7")
        );
        // Several headers count as one list, in order.
        assert_eq!(
            proxies.client_ip(ip("10.0.0.1"), ["6.6.6.6", "198.51.100.7"].into_iter()),
            ip("198.51.100.7")
        );
        // No header: the proxy itself.
        assert_eq!(
            proxies.client_ip(ip("10.0.0.1"), std::iter::empty()),
            ip("10.0.0.1")
        );
        // Garbage entries are ignored.
        assert_eq!(
            proxies.client_ip(ip("10.0.0.1"), ["nonsense, 198.51.100.8"].into_iter()),
            ip("198.51.100.8")
        );
    }
}
