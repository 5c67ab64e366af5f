//! Which address stands for the client when a request carries no user id: the peer, or,
//! behind trusted proxies, the rightmost untrusted address of the one header the operator names
//! (`X-Forwarded-For` by default; `Forwarded`, `X-Real-IP` or another when configured).
//!
//! Only that header is read, never a mix: a header the proxies do not write passes through
//! them as the client sent it, so reading it would let the client pick its own bucket.
//! The left end of the chain is written by the client and proves nothing; each trusted
//! proxy appends the address it saw. So the chain (header entries, then the peer) is read from
//! the right: trusted proxies are skipped, and the first address that is not one is the
//! client. If the peer itself is not a trusted proxy, the headers are ignored altogether.
//!
//! IPv6 clients are grouped by network prefix (/64 by default: one customer's line or
//! subnet), since a single client can pick among 2^64 addresses. IPv4-mapped IPv6 addresses
//! (`::ffff:a.b.c.d`) are turned back into IPv4 first, so that they are never folded into one
//! `::ffff:0:0/64` bucket (express-rate-limit's CVE-2026-30827).

use std::net::{IpAddr, Ipv6Addr};

use http::HeaderMap;
pub(crate) use ipnet::IpNet;

mod chain;

pub(crate) use self::chain::ChainHeader;

/// Whether `ip` is in `net`, IPv4-mapped addresses (`::ffff:a.b.c.d`) taken as the IPv4
/// address they carry, on either side: `10.0.0.0/8` holds `::ffff:10.1.2.3`, and
/// `::ffff:10.0.0.0/104` holds `10.1.2.3`. An IPv4 network never holds an IPv6 address, nor
/// the other way round.
pub(crate) fn contains(net: &IpNet, ip: IpAddr) -> bool {
    let ip = canonical(ip);
    match (canonical_net(net), ip) {
        (IpNet::V4(net), IpAddr::V4(ip)) => net.contains(&ip),
        (IpNet::V6(net), IpAddr::V6(ip)) => net.contains(&ip),
        _ => false,
    }
}

/// Every address of one family (`0.0.0.0/0` or `::/0`) if `nets` hold it together: one
/// network (`0.0.0.0/0`, `::/0`, `::ffff:0:0/96`, every IPv4-mapped address) or several that
/// add up to it (`0.0.0.0/1` and `128.0.0.0/1`). Trusting it trusts every client to name
/// itself.
pub(crate) fn covers_everything(nets: &[IpNet]) -> Option<IpNet> {
    let canonical: Vec<IpNet> = nets.iter().map(canonical_net).collect();
    IpNet::aggregate(&canonical)
        .into_iter()
        .find(|n| n.prefix_len() == 0)
}

/// An IPv6 network inside `::ffff:0:0/96` becomes the IPv4 network it maps; others are kept.
pub(crate) fn canonical_net(net: &IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(*net, IpNet::V4),
            None => *net,
        },
        _ => *net,
    }
}

/// IPv4-mapped IPv6 addresses become IPv4; everything else is kept.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

pub(crate) fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix))
            };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix))
            };
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

/// Who is trusted to report the client's address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Proxies {
    /// Nobody: the peer is the client (the default).
    #[default]
    None,
    /// Proxies in these networks.
    Networks(Vec<IpNet>),
    /// The last `n` hops of the chain (the peer included) are proxies.
    Hops(usize),
}

/// How the layer finds the client's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ClientIpRule {
    pub(crate) proxies: Proxies,
    pub(crate) header: ChainHeader,
    pub(crate) ipv6_prefix: u8,
}

impl Default for ClientIpRule {
    fn default() -> Self {
        Self {
            proxies: Proxies::None,
            header: ChainHeader::default(),
            ipv6_prefix: 64,
        }
    }
}

impl ClientIpRule {
    /// The client's address (grouped: IPv6 by prefix) for a request whose peer is `peer`.
    pub(crate) fn client(&self, headers: &HeaderMap, peer: IpAddr) -> IpAddr {
        let peer = canonical(peer);
        let client = match &self.proxies {
            Proxies::None => peer,
            Proxies::Networks(nets) => {
                let trusted = |ip: IpAddr| nets.iter().any(|n| contains(n, ip));
                if trusted(peer) {
                    let mut chosen = peer;
                    for hop in self.chain_from_the_right(headers) {
                        match hop {
                            Some(ip) if trusted(ip) => chosen = ip,
                            Some(ip) => {
                                chosen = ip;
                                break;
                            }
                            // An entry a trusted proxy could not have written: stop at the
                            // last address that is known, so nothing can be spoofed past it.
                            None => break,
                        }
                    }
                    chosen
                } else {
                    peer
                }
            }
            Proxies::Hops(n) => {
                // chain + [peer]: the client is `n` entries left of the peer, the `n`th from
                // the right of the chain; a shorter chain is not what the proxies write.
                match n.checked_sub(1) {
                    Some(i) => self
                        .chain_from_the_right(headers)
                        .nth(i)
                        .flatten()
                        .unwrap_or(peer),
                    None => peer,
                }
            }
        };
        match client {
            IpAddr::V6(_) => mask(client, self.ipv6_prefix),
            v4 => v4,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn parts(headers: &[(&str, &str)]) -> HeaderMap {
        let mut b = http::Request::builder();
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap().into_parts().0.headers
    }

    pub(super) fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    pub(super) fn behind(nets: &[&str]) -> ClientIpRule {
        ClientIpRule {
            proxies: Proxies::Networks(nets.iter().map(|n| n.parse().unwrap()).collect()),
            ..ClientIpRule::default()
        }
    }

    #[test]
    fn networks_parse_and_contain() {
        let net: IpNet = "10.0.0.0/8".parse().unwrap();
        assert!(contains(&net, ip("10.1.2.3")));
        assert!(!contains(&net, ip("11.0.0.1")));
        assert!(
            contains(&net, ip("::ffff:10.9.9.9")),
            "mapped addresses are IPv4"
        );
        // A mapped network holds the IPv4 addresses it maps, and only those.
        let mapped: IpNet = "::ffff:10.0.0.0/104".parse().unwrap();
        assert!(contains(&mapped, ip("10.1.2.3")));
        assert!(contains(&mapped, ip("::ffff:10.1.2.3")));
        assert!(!contains(&mapped, ip("11.0.0.1")));
        // A single host: a bare address converts, a /32 parses.
        let host = IpNet::from(ip("192.0.2.7"));
        assert_eq!(host.to_string(), "192.0.2.7/32");
        assert_eq!(host, "192.0.2.7/32".parse().unwrap());
        let v6: IpNet = "fd00::/8".parse().unwrap();
        assert!(contains(&v6, ip("fd12::1")));
        assert!(!contains(&v6, ip("10.0.0.1")));
        // Families never mix: ::/0 is every IPv6 address, not the IPv4 ones.
        assert!(!contains(&"::/0".parse().unwrap(), ip("10.0.0.1")));
        assert!(!contains(&"0.0.0.0/0".parse().unwrap(), ip("fd12::1")));
        for bad in ["", "10.0.0.0/33", "::/129", "nope", "10.0.0.0/x"] {
            assert!(bad.parse::<IpNet>().is_err(), "{bad}");
        }
    }

    #[test]
    fn without_trusted_proxies_the_headers_are_ignored() {
        let p = parts(&[("x-forwarded-for", "6.6.6.6")]);
        assert_eq!(
            ClientIpRule::default().client(&p, ip("203.0.113.9")),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn the_rightmost_untrusted_address_is_the_client() {
        let rule = behind(&["10.0.0.0/8"]);
        // The client wrote 6.6.6.6 itself; the edge proxy appended the real 198.51.100.4,
        // an inner proxy 10.0.0.2; the peer is another proxy.
        let p = parts(&[("x-forwarded-for", "6.6.6.6, 198.51.100.4, 10.0.0.2")]);
        assert_eq!(rule.client(&p, ip("10.0.0.1")), ip("198.51.100.4"));
        // Several header lines make one chain.
        let p = parts(&[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-for", "198.51.100.4, 10.0.0.2"),
        ]);
        assert_eq!(rule.client(&p, ip("10.0.0.1")), ip("198.51.100.4"));
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let rule = behind(&["10.0.0.0/8"]);
        let p = parts(&[("x-forwarded-for", "10.0.0.3")]);
        assert_eq!(rule.client(&p, ip("198.51.100.4")), ip("198.51.100.4"));
    }

    /// The hardening issue's repro: the proxy appends `X-Forwarded-For`; the client sends its
    /// own `Forwarded`, which the proxy passes through. Only the named header counts.
    #[test]
    fn only_the_named_header_is_read_never_a_mix() {
        let rule = behind(&["127.0.0.1/32"]);
        let p = parts(&[
            ("x-forwarded-for", "10.9.9.8"),
            ("forwarded", "for=6.6.6.1"),
        ]);
        assert_eq!(rule.client(&p, ip("127.0.0.1")), ip("10.9.9.8"));
        let forwarded = ClientIpRule {
            header: ChainHeader::named(http::header::FORWARDED),
            ..rule.clone()
        };
        assert_eq!(forwarded.client(&p, ip("127.0.0.1")), ip("6.6.6.1"));
        let real_ip = ClientIpRule {
            header: ChainHeader::named(http::HeaderName::from_static("x-real-ip")),
            ..rule
        };
        let p = parts(&[
            ("x-real-ip", "198.51.100.7"),
            ("x-forwarded-for", "6.6.6.6"),
            ("forwarded", "for=6.6.6.1"),
        ]);
        assert_eq!(real_ip.client(&p, ip("127.0.0.1")), ip("198.51.100.7"));
        // Absent: the peer stands in.
        assert_eq!(
            real_ip.client(&parts(&[("forwarded", "for=6.6.6.1")]), ip("127.0.0.1")),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn everything_networks_are_recognised_alone_or_together() {
        let all = |nets: &[&str]| {
            let nets: Vec<IpNet> = nets.iter().map(|n| n.parse().unwrap()).collect();
            covers_everything(&nets).map(|n| n.to_string())
        };
        assert_eq!(all(&["0.0.0.0/0"]).as_deref(), Some("0.0.0.0/0"));
        assert_eq!(all(&["::/0"]).as_deref(), Some("::/0"));
        assert_eq!(all(&["::ffff:0:0/96"]).as_deref(), Some("0.0.0.0/0"));
        assert_eq!(
            all(&["0.0.0.0/1", "128.0.0.0/1"]).as_deref(),
            Some("0.0.0.0/0")
        );
        assert_eq!(
            all(&["::ffff:0.0.0.0/97", "10.0.0.0/8", "128.0.0.0/1"]).as_deref(),
            Some("0.0.0.0/0")
        );
        assert_eq!(all(&["::/1", "8000::/1"]).as_deref(), Some("::/0"));
        assert_eq!(all(&["10.0.0.0/8"]), None);
        assert_eq!(all(&["0.0.0.0/1", "::/1"]), None, "halves of two families");
        assert_eq!(all(&["0.0.0.0/1", "128.0.0.0/2"]), None);
        assert_eq!(all(&[]), None);
    }

    #[test]
    fn forwarded_header_is_parsed_when_named() {
        let rule = ClientIpRule {
            header: ChainHeader::Forwarded,
            ..behind(&["10.0.0.0/8"])
        };
        let p = parts(&[
            (
                "forwarded",
                "for=6.6.6.6;proto=http, for=\"[2001:db8:cafe::17]:4711\";by=10.0.0.9",
            ),
            ("x-forwarded-for", "7.7.7.7"),
        ]);
        assert_eq!(rule.client(&p, ip("10.0.0.1")), ip("2001:db8:cafe::"));
        let p = parts(&[("forwarded", "for=192.0.2.60:8080")]);
        assert_eq!(rule.client(&p, ip("10.0.0.1")), ip("192.0.2.60"));
    }

    #[test]
    fn garbage_stops_the_walk_at_the_last_known_address() {
        let rule = behind(&["10.0.0.0/8"]);
        let p = parts(&[("x-forwarded-for", "1.1.1.1, not-an-ip, 10.0.0.2")]);
        assert_eq!(rule.client(&p, ip("10.0.0.1")), ip("10.0.0.2"));
    }

    #[test]
    fn hop_count() {
        let rule = ClientIpRule {
            proxies: Proxies::Hops(2),
            ..ClientIpRule::default()
        };
        let p = parts(&[("x-forwarded-for", "6.6.6.6, 198.51.100.4, 10.0.0.2")]);
        assert_eq!(rule.client(&p, ip("10.0.0.1")), ip("198.51.100.4"));
        // Fewer entries than proxies: the chain is not what the proxies write; the peer (a
        // proxy) stands in, which can be strict but never spoofed.
        let short = parts(&[("x-forwarded-for", "198.51.100.4")]);
        assert_eq!(rule.client(&short, ip("10.0.0.1")), ip("10.0.0.1"));
        let none = parts(&[]);
        assert_eq!(rule.client(&none, ip("10.0.0.1")), ip("10.0.0.1"));
    }

    #[test]
    fn ipv6_is_grouped_by_prefix_and_mapped_ipv4_is_not_folded() {
        let rule = ClientIpRule::default();
        let p = parts(&[]);
        assert_eq!(
            rule.client(&p, ip("2001:db8:1:2:aaaa::1")),
            rule.client(&p, ip("2001:db8:1:2:bbbb::2"))
        );
        assert_ne!(
            rule.client(&p, ip("2001:db8:1:2::1")),
            rule.client(&p, ip("2001:db8:1:3::1"))
        );
        // ::ffff:1.2.3.4 and ::ffff:5.6.7.8 share a /64 as IPv6: they must not share a bucket.
        assert_eq!(rule.client(&p, ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_ne!(
            rule.client(&p, ip("::ffff:1.2.3.4")),
            rule.client(&p, ip("::ffff:5.6.7.8"))
        );
        let wide = ClientIpRule {
            ipv6_prefix: 48,
            ..ClientIpRule::default()
        };
        assert_eq!(
            wide.client(&p, ip("2001:db8:1:2::1")),
            wide.client(&p, ip("2001:db8:1:3::1"))
        );
    }
}
