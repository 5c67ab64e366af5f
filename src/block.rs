//! Blocks: an operator refuses a user, a client address or a route for a while, on every
//! instance sharing the store ([`RateLimiter::block`](crate::RateLimiter::block)).
//!
//! A block is kept beside the tier logs it stops, under the same key parts: so a store decides
//! "blocked" in the same atomic step (and, on Redis, the same round trip) as the counts. This
//! module turns a [`BlockTarget`] into those key parts; the stores keep the blocks.

use std::net::IpAddr;

use crate::client_ip::{canonical, mask};
use crate::config::RateLimitConfig;
use crate::key::{encode_id, encode_ip};
use crate::tier::Tier;

/// The prefix an IPv6 client is blocked by: its /64, the layer's default grouping.
pub const IPV6_BLOCK_PREFIX: u8 = 64;

/// What a block refuses.
///
/// ```
/// use std::net::IpAddr;
/// use tiered_ratelimit::BlockTarget;
///
/// let user = BlockTarget::User("mallory");
/// let ip = BlockTarget::Ip("2001:db8::1".parse::<IpAddr>()?); // its whole /64
/// let route = BlockTarget::Endpoint("/api/v1/export");
/// # let _ = (user, ip, route);
/// # Ok::<(), std::net::AddrParseError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockTarget<'a> {
    /// A user id, as the layer's extractor returns it: refused on every route.
    User(&'a str),
    /// A client address, for requests without a user id (the layer keys those by address):
    /// an IPv4 address exactly, an IPv6 address by its /64 network ([`IPV6_BLOCK_PREFIX`]), as
    /// the layer groups them by default. IPv4-mapped IPv6 addresses count as the IPv4 address.
    Ip(IpAddr),
    /// A route template (as axum's `MatchedPath` gives it, `/items/{id}`): refused for
    /// everyone.
    Endpoint(&'a str),
}

impl BlockTarget<'_> {
    /// The tier whose logs the block sits beside: the user tier for a user or an address.
    pub fn tier(&self) -> Tier {
        match self {
            Self::User(_) | Self::Ip(_) => Tier::User,
            Self::Endpoint(_) => Tier::Endpoint,
        }
    }

    /// The encoded key part of the target (see [`crate::key`]).
    fn part(&self) -> String {
        match *self {
            Self::User(id) | Self::Endpoint(id) => encode_id(id).into_owned(),
            Self::Ip(ip) => {
                let ip = match canonical(ip) {
                    v6 @ IpAddr::V6(_) => mask(v6, IPV6_BLOCK_PREFIX),
                    v4 => v4,
                };
                encode_ip(ip)
            }
        }
    }

    /// Every key part a check of this target may count under in `config`: the target's own,
    /// and for a user or an address the bucket of each route with a user limit of its own
    /// (`<user>@<route>`, see [`crate::request`]). Empty when `config` never counts the tier.
    pub(crate) fn key_parts(&self, config: &RateLimitConfig) -> Vec<String> {
        let part = self.part();
        match self.tier() {
            Tier::Endpoint => {
                let off = |route: &str| {
                    config
                        .route(route)
                        .and_then(|r| r.endpoint_limit)
                        .unwrap_or_else(|| config.endpoint_limit())
                        == 0
                };
                match self {
                    Self::Endpoint(route) if off(route) => Vec::new(),
                    _ => vec![part],
                }
            }
            _ => {
                let mut parts = Vec::new();
                if config.user_limit() > 0 || config.has_plans() {
                    parts.push(part.clone());
                }
                for (route, limits) in config.routes() {
                    if limits.user_limit.is_some_and(|l| l > 0) {
                        parts.push(format!("{part}@{}", encode_id(route)));
                    }
                }
                parts
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RouteLimits;

    #[test]
    fn ipv6_is_blocked_by_its_64_and_mapped_ipv4_as_ipv4() {
        let a = BlockTarget::Ip("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = BlockTarget::Ip("2001:db8:1:2:ffff::9".parse().unwrap());
        assert_eq!(a.part(), b.part());
        assert_eq!(a.part(), "@2001:db8:1:2::");
        let mapped = BlockTarget::Ip("::ffff:192.0.2.7".parse().unwrap());
        assert_eq!(mapped.part(), "@192.0.2.7");
    }

    fn limits(user_limit: Option<u64>, endpoint_limit: Option<u64>) -> RouteLimits {
        RouteLimits {
            user_limit,
            endpoint_limit,
        }
    }

    #[test]
    fn a_user_is_blocked_in_every_bucket_a_check_may_use() {
        let config = RateLimitConfig::builder()
            .user_limit(5)
            .endpoint_limit(1)
            .route("/login", limits(Some(3), None))
            .route("/{x}", limits(None, Some(9)))
            .build()
            .unwrap();
        assert_eq!(
            BlockTarget::User("a{b}").key_parts(&config),
            ["a%7Bb%7D", "a%7Bb%7D@/login"]
        );
        let off = RateLimitConfig::builder().user_limit(0).build().unwrap();
        assert!(BlockTarget::User("a").key_parts(&off).is_empty());
        assert_eq!(
            BlockTarget::Endpoint("/{x}").key_parts(&config),
            ["/%7Bx%7D"]
        );
        assert!(BlockTarget::Endpoint("/{x}").key_parts(&off).is_empty());
    }
}
