//! The chain of addresses the trusted proxies wrote: read from the one header the operator
//! names (RFC 7239 `Forwarded`, or a comma-separated list such as `X-Forwarded-For`).

use std::net::IpAddr;

use http::HeaderMap;

use super::{canonical, ClientIpRule};

/// The header that carries the chain of addresses the proxies saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ChainHeader {
    /// RFC 7239 `Forwarded`: the `for=` parameter of each element.
    Forwarded,
    /// A comma-separated list of addresses (`X-Forwarded-For`, `X-Real-IP`, ...).
    List(http::HeaderName),
}

impl ChainHeader {
    /// `Forwarded` for that name, else a list header.
    pub(crate) fn named(name: http::HeaderName) -> Self {
        if name == http::header::FORWARDED {
            Self::Forwarded
        } else {
            Self::List(name)
        }
    }
}

impl Default for ChainHeader {
    fn default() -> Self {
        Self::List(http::HeaderName::from_static("x-forwarded-for"))
    }
}

impl ClientIpRule {
    /// The addresses of the configured header, left to right, across every header line;
    /// `None` for an entry that is not an address.
    pub(super) fn chain(&self, headers: &HeaderMap) -> Vec<Option<IpAddr>> {
        match &self.header {
            ChainHeader::Forwarded => headers
                .get_all(http::header::FORWARDED)
                .iter()
                .flat_map(|v| v.to_str().unwrap_or("").split(','))
                .map(|element| {
                    element
                        .split(';')
                        .find_map(|pair| {
                            let (k, v) = pair.split_once('=')?;
                            k.trim().eq_ignore_ascii_case("for").then_some(v)
                        })
                        .and_then(parse_node)
                })
                .collect(),
            ChainHeader::List(name) => headers
                .get_all(name)
                .iter()
                .flat_map(|v| v.to_str().unwrap_or("").split(','))
                .map(parse_node)
                .collect(),
        }
    }
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `"[2001:db8::1]:4711"`,
/// `2001:db8::1`.
fn parse_node(node: &str) -> Option<IpAddr> {
    let node = node.trim().trim_matches('"');
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Some(rest) = node.strip_prefix('[') {
        let (ip, _) = rest.split_once(']')?;
        return ip.parse::<IpAddr>().ok().map(canonical);
    }
    let (ip, port) = node.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    ip.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}
