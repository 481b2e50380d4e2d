//! Who a request comes from: the socket's peer, unless that peer is a proxy the operator
//! trusts (`SLUICE_TRUSTED_PROXIES`), in which case the nearest address in `X-Forwarded-For`
//! that is not itself a trusted proxy. Behind a load balancer, without this every client
//! would share the balancer's address, and the per-client sign-in budget would be one budget
//! for everyone. A client cannot spoof its address: `X-Forwarded-For` is read only when the
//! peer is trusted, and only the entries the trusted proxies appended count.

use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use axum::http::HeaderMap;

/// An address block: an address and how many leading bits must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    address: IpAddr,
    prefix: u8,
}

impl FromStr for Block {
    type Err = String;

    /// `10.0.0.0/8`, `fd00::/8`, or a single address.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (address, prefix) = match s.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (s, None),
        };
        let address: IpAddr = address
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or block (10.0.0.0/8, fd00::/8)"))?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {bits}"))?,
        };
        Ok(Self { address, prefix })
    }
}

impl Block {
    fn contains(&self, ip: IpAddr) -> bool {
        let matches = |a: u128, b: u128, bits: u32| {
            let shift = bits - u32::from(self.prefix);
            shift >= bits || (a >> shift) == (b >> shift)
        };
        match (self.address, ip) {
            (IpAddr::V4(block), IpAddr::V4(ip)) => {
                matches(u128::from(u32::from(block)), u128::from(u32::from(ip)), 32)
            }
            (IpAddr::V6(block), IpAddr::V6(ip)) => matches(u128::from(block), u128::from(ip), 128),
            _ => false,
        }
    }
}

/// The proxies whose `X-Forwarded-For` is believed. Cloning shares them.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Arc<[Block]>);

impl TrustedProxies {
    pub fn new(blocks: Vec<Block>) -> Self {
        Self(blocks.into())
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|block| block.contains(ip))
    }

    /// The client of a request that came from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        // Each proxy appends the address it received from; walk back from the nearest.
        let mut client = peer;
        for value in headers.get_all("x-forwarded-for").iter().rev() {
            let Ok(value) = value.to_str() else {
                return client;
            };
            for entry in value.rsplit(',') {
                let Ok(ip) = entry.trim().parse::<IpAddr>() else {
                    return client;
                };
                client = ip;
                if !self.trusts(ip) {
                    return client;
                }
            }
        }
        client
    }
}

/// The client address of a request, as the listener worked it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(blocks: &[&str]) -> TrustedProxies {
        TrustedProxies::new(blocks.iter().map(|b| b.parse().unwrap()).collect())
    }

    fn forwarded(values: &[&'static str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("x-forwarded-for", v.parse().unwrap());
        }
        headers
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn blocks_parse_and_contain_what_they_should() {
        let block: Block = "10.0.0.0/8".parse().unwrap();
        assert!(block.contains(ip("10.200.3.4")));
        assert!(!block.contains(ip("11.0.0.1")));
        assert!(!block.contains(ip("::ffff:10.0.0.1")));
        let one: Block = "192.0.2.7".parse().unwrap();
        assert!(one.contains(ip("192.0.2.7")) && !one.contains(ip("192.0.2.8")));
        let v6: Block = "fd00::/8".parse().unwrap();
        assert!(v6.contains(ip("fd12::1")) && !v6.contains(ip("fe80::1")));
        let all: Block = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        for bad in ["10.0.0.0/33", "nope", "10.0.0/8", "::/129"] {
            assert!(bad.parse::<Block>().is_err(), "{bad}");
        }
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let proxies = trusted(&["10.0.0.1"]);
        let spoofed = forwarded(&["203.0.113.9"]);
        assert_eq!(
            proxies.client(ip("198.51.100.2"), &spoofed),
            ip("198.51.100.2")
        );
        assert_eq!(
            TrustedProxies::default().client(ip("10.0.0.1"), &spoofed),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn behind_trusted_proxies_the_nearest_untrusted_address_is_the_client() {
        let proxies = trusted(&["10.0.0.0/8"]);
        // The client claims to be 1.1.1.1; the proxies appended what they saw.
        let chain = forwarded(&["1.1.1.1, 203.0.113.9, 10.0.0.5"]);
        assert_eq!(proxies.client(ip("10.0.0.1"), &chain), ip("203.0.113.9"));
        // Several header lines count as one list, in order.
        let lines = forwarded(&["1.1.1.1", "203.0.113.9", "10.0.0.5"]);
        assert_eq!(proxies.client(ip("10.0.0.1"), &lines), ip("203.0.113.9"));
        // No header: the proxy itself.
        assert_eq!(
            proxies.client(ip("10.0.0.1"), &HeaderMap::new()),
            ip("10.0.0.1")
        );
        // A garbled entry stops the walk at the last good address.
        let garbled = forwarded(&["203.0.113.9, junk, 10.0.0.5"]);
        assert_eq!(proxies.client(ip("10.0.0.1"), &garbled), ip("10.0.0.5"));
    }
}
