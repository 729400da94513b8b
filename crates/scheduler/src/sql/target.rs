//! Which addresses the `http` executor may call.
//!
//! A job's URL is chosen by whoever may create jobs, and the request goes out from inside the
//! deployment: pointed at `http://169.254.169.254/…` (cloud metadata), loopback or a private
//! network, it would read or poke services that were never meant to face those users. So
//! [`TargetPolicy`] refuses every internal address — loopback, private (RFC 1918), shared
//! (100.64/10), link-local, unique-local, multicast, unspecified, reserved, and IPv4 addresses
//! wrapped in IPv6 — unless an operator's allow-list names its network. It is checked where it
//! cannot be dodged: on the addresses a host name resolves to, at the moment of the call (a
//! name that resolves to an internal address is refused even if it did not when the job was
//! created), on IP literals in the URL, and redirects are not followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// The addresses `http` jobs may call: public ones, and internal ones in the allow-list.
#[derive(Debug, Clone, Default)]
pub struct TargetPolicy {
    allowed: Vec<IpNet>,
}

impl TargetPolicy {
    /// Public addresses only.
    pub fn public_only() -> Self {
        Self::default()
    }

    /// Public addresses and those in `allowed` (operators' internal endpoints).
    pub fn allowing(allowed: Vec<IpNet>) -> Self {
        Self { allowed }
    }

    /// Whether a call to `ip` is allowed.
    pub fn permits(&self, ip: IpAddr) -> bool {
        !is_internal(ip) || self.allowed.iter().any(|net| net.contains(&ip))
    }

    /// `Err` with a message naming `host` and the refused address when `ip` is not allowed.
    pub fn check(&self, host: &str, ip: IpAddr) -> Result<(), String> {
        if self.permits(ip) {
            Ok(())
        } else {
            Err(format!(
                "{host} is the internal address {ip}; http jobs may call internal addresses \
                 only in networks the operator allows"
            ))
        }
    }
}

/// Whether `ip` belongs to a network that is not the public internet.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240 // reserved
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_internal_v4(v4);
    }
    let segments = ip.segments();
    // IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::/96) carry an IPv4 address.
    let embedded_v4 = || {
        Ipv4Addr::new(
            (segments[6] >> 8) as u8,
            segments[6] as u8,
            (segments[7] >> 8) as u8,
            segments[7] as u8,
        )
    };
    if segments[..6] == [0, 0, 0, 0, 0, 0] && !ip.is_loopback() && !ip.is_unspecified() {
        return is_internal_v4(embedded_v4());
    }
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_internal_v4(embedded_v4());
    }
    ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (segments[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (segments[0] & 0xffc0) == 0xfec0 // site-local (deprecated) fec0::/10
        || (segments[0] == 0x2001 && segments[1] == 0x0db8) // documentation
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_refused_and_public_ones_allowed() {
        let policy = TargetPolicy::public_only();
        for internal in [
            "169.254.169.254",
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!policy.permits(ip(internal)), "{internal} allowed");
        }
        for public in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(policy.permits(ip(public)), "{public} refused");
        }
    }

    #[test]
    fn the_allow_list_opens_only_the_networks_it_names() {
        let policy = TargetPolicy::allowing(vec![
            "10.0.0.0/8".parse().unwrap(),
            "127.0.0.1/32".parse().unwrap(),
        ]);
        assert!(policy.permits(ip("10.20.30.40")));
        assert!(policy.permits(ip("127.0.0.1")));
        assert!(!policy.permits(ip("127.0.0.2")));
        assert!(!policy.permits(ip("169.254.169.254")));
        let message = policy.check("metadata", ip("169.254.169.254")).unwrap_err();
        assert!(
            message.contains("169.254.169.254") && message.contains("allows"),
            "{message}"
        );
    }
}
