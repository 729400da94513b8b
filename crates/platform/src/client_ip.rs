//! The client's address, as rate limits and per-client accounting count it.
//!
//! It is the TCP peer, unless the peer is a trusted proxy (`trusted_proxies`): then the
//! `X-Forwarded-For` chain is walked from the right (the entry our proxy appended) past every
//! trusted hop, and the first untrusted address is the client. Entries left of it were written
//! by the client itself and are never believed.
//!
//! An IPv4 client is its address. An IPv6 client is its network of `client_ipv6_prefix` bits
//! (default 64): one subscriber usually holds a whole /64 and can rotate through its addresses at
//! will, so limits keyed on the full address would not hold. The grouping is done here, once,
//! when the extractor [`ClientIp`] is built, so every limit keyed on the client gets it.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::{
    extract::{ConnectInfo, FromRequestParts},
    http::request::Parts,
};
use ipnet::IpNet;

use crate::error::AppError;

pub use crate::config::DEFAULT_IPV6_PREFIX;

/// How the client of a request is found: the proxies whose `X-Forwarded-For` is believed, and
/// how many leading bits of an IPv6 address name one client.
#[derive(Debug, Clone)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
    ipv6_prefix: u8,
}

impl Default for TrustedProxies {
    fn default() -> Self {
        Self::new(Vec::new(), DEFAULT_IPV6_PREFIX)
    }
}

impl TrustedProxies {
    /// Believes `networks`; an IPv6 client is its network of `ipv6_prefix` bits (at most 128).
    pub fn new(networks: Vec<IpNet>, ipv6_prefix: u8) -> Self {
        Self {
            networks,
            ipv6_prefix: ipv6_prefix.min(128),
        }
    }

    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.networks.iter().any(|net| net.contains(ip))
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

    /// The client `ip` stands for: itself (IPv4), or the first address of its IPv6 network of
    /// `ipv6_prefix` bits. An IPv4-mapped IPv6 address is its IPv4 address.
    pub fn client_of(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(_) => ip,
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let bits = u128::from(v6);
                    let mask = u128::MAX
                        .checked_shl(128 - u32::from(self.ipv6_prefix))
                        .unwrap_or(0);
                    IpAddr::V6(Ipv6Addr::from(bits & mask))
                }
            },
        }
    }
}

/// Extracts the client (see the module docs): an IPv4 address, or the first address of an IPv6
/// client's network. Rate limits key on its `to_string()`.
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
        let proxies = state.trusted_proxies();
        Ok(Self(proxies.client_of(proxies.client_ip(peer, forwarded))))
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
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()], DEFAULT_IPV6_PREFIX);
        assert_eq!(
            proxies.client_ip(ip("203.0.113.9"), ["1.2.3.4"].into_iter()),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn trusted_proxies_are_skipped_from_the_right() {
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()], DEFAULT_IPV6_PREFIX);
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

    #[test]
    fn an_ipv6_client_is_its_network_and_an_ipv4_client_its_address() {
        let by_64 = TrustedProxies::default();
        assert_eq!(
            by_64.client_of(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd")),
            ip("2001:db8:1:2::")
        );
        assert_eq!(by_64.client_of(ip("2001:db8:1:2::1")), ip("2001:db8:1:2::"));
        assert_ne!(by_64.client_of(ip("2001:db8:1:3::1")), ip("2001:db8:1:2::"));
        assert_eq!(by_64.client_of(ip("198.51.100.7")), ip("198.51.100.7"));
        assert_eq!(
            by_64.client_of(ip("::ffff:198.51.100.7")),
            ip("198.51.100.7")
        );
        let by_48 = TrustedProxies::new(Vec::new(), 48);
        assert_eq!(
            by_48.client_of(ip("2001:db8:1:ffff::9")),
            ip("2001:db8:1::")
        );
        let whole = TrustedProxies::new(Vec::new(), 128);
        assert_eq!(whole.client_of(ip("2001:db8::9")), ip("2001:db8::9"));
    }
}
