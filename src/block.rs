//! Blocks: an operator refuses a user, a client address or a route for a while, on every
//! instance sharing the store ([`RateLimiter::block`](crate::RateLimiter::block)).
//!
//! A block is kept beside the tier logs it stops, under the same key parts: so a store decides
//! "blocked" in the same atomic step (and, on Redis, the same round trip) as the counts. This
//! module turns a [`BlockTarget`] into those key parts; the stores keep the blocks.

use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use crate::client_ip::{canonical, canonical_net, mask};
use crate::config::RateLimitConfig;
use crate::key::{encode_id, encode_ip};
use crate::store::StoreError;
use crate::tier::Tier;

/// Why a block (or an unblock) did not land.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlockError {
    /// The configuration never counts the target's tier (its limit is 0 everywhere), so no
    /// check would meet the block.
    #[error("the {0} tier is switched off (limit 0) everywhere: a block there would stop nothing")]
    TierOff(crate::Tier),
    /// A block of no time.
    #[error("a block must last longer than zero")]
    ZeroDuration,
    /// A block longer than [`MAX_BLOCK`].
    #[error("a block may last at most {max:?} (a year); asked for {asked:?}")]
    TooLong {
        /// What was asked.
        asked: Duration,
        /// [`MAX_BLOCK`].
        max: Duration,
    },
    /// An IPv4 network wider than one address: the layer keys IPv4 clients one address at a
    /// time, so no bucket is that network (block its addresses, or the route).
    #[error("the layer keys IPv4 clients one address at a time: {0} is no bucket (block a /32)")]
    Ipv4Network(IpNet),
    /// The store failed (Redis unreachable, a timeout) or keeps no blocks (a custom store).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The longest block: 366 days (every store keeps it exactly; Redis's expiry in milliseconds
/// could not take `Duration::MAX`).
pub const MAX_BLOCK: Duration = Duration::from_secs(366 * 24 * 3600);

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
    /// The clients the layer keys as this network: an IPv6 network of the layer's
    /// [`ipv6_prefix`](crate::RateLimitLayer::ipv6_prefix) (a /48 for a layer set to 48), or one
    /// IPv4 address (a /32). This is no range block: a key holds the network's base address,
    /// not its length, so an IPv6 network of another length blocks at most the one bucket
    /// whose base is its own (`2001:db8::/32` under the default /64 blocks `2001:db8::/64`
    /// only; `2001:db8::5/128` blocks nothing).
    Net(IpNet),
    /// A route template (as axum's `MatchedPath` gives it, `/items/{id}`): refused for
    /// everyone.
    Endpoint(&'a str),
}

impl BlockTarget<'_> {
    /// The tier whose logs the block sits beside: the user tier for a user or an address.
    pub fn tier(&self) -> Tier {
        match self {
            Self::User(_) | Self::Ip(_) | Self::Net(_) => Tier::User,
            Self::Endpoint(_) => Tier::Endpoint,
        }
    }

    /// The address the layer keys this target's requests by (an IPv6 client by its network),
    /// for an address or a network; `None` for a user or a route.
    pub(crate) fn bucket_address(&self) -> Result<Option<IpAddr>, BlockError> {
        match *self {
            Self::User(_) | Self::Endpoint(_) => Ok(None),
            Self::Ip(ip) => Ok(Some(match canonical(ip) {
                v6 @ IpAddr::V6(_) => mask(v6, IPV6_BLOCK_PREFIX),
                v4 => v4,
            })),
            Self::Net(net) => match canonical_net(&net) {
                IpNet::V4(v4) if v4.prefix_len() < 32 => Err(BlockError::Ipv4Network(net)),
                IpNet::V4(v4) => Ok(Some(IpAddr::V4(v4.addr()))),
                IpNet::V6(v6) => Ok(Some(mask(IpAddr::V6(v6.addr()), v6.prefix_len()))),
            },
        }
    }

    /// The encoded key part of the target itself (see [`crate::key`]).
    pub(crate) fn own_part(&self) -> Result<String, BlockError> {
        Ok(match (*self, self.bucket_address()?) {
            (_, Some(address)) => encode_ip(address),
            (Self::User(id) | Self::Endpoint(id), None) => encode_id(id).into_owned(),
            (Self::Ip(_) | Self::Net(_), None) => unreachable!("an address has one"),
        })
    }

    /// Every key part a check of this target may count under in `config`: the target's own,
    /// and for a user or an address the bucket of each route with a user limit of its own
    /// (`<user>@<route>`, see [`crate::request`]). Empty when `config` never counts the tier.
    pub(crate) fn key_parts(&self, config: &RateLimitConfig) -> Result<Vec<String>, BlockError> {
        let part = self.own_part()?;
        match self.tier() {
            Tier::Endpoint => {
                let off = |route: &str| {
                    config
                        .route(route)
                        .and_then(|r| r.endpoint_limit)
                        .unwrap_or_else(|| config.endpoint_limit())
                        == 0
                };
                Ok(match self {
                    Self::Endpoint(route) if off(route) => Vec::new(),
                    _ => vec![part],
                })
            }
            _ => {
                let mut parts = Vec::new();
                if config.user_limit() > 0 || config.has_plans() {
                    parts.push(part.clone());
                }
                parts.extend(route_buckets(config, &part));
                Ok(parts)
            }
        }
    }
}

/// The key part of `user`'s bucket on each route of `config` with a user limit of its own
/// (`<user>@<route>`, see [`crate::request`]); `user` is already encoded.
pub(crate) fn route_buckets<'a>(
    config: &'a RateLimitConfig,
    user: &'a str,
) -> impl Iterator<Item = String> + 'a {
    config
        .routes()
        .filter(|(_, limits)| limits.user_limit.is_some_and(|l| l > 0))
        .map(move |(route, _)| format!("{user}@{}", encode_id(route)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RouteLimits;

    #[test]
    fn ipv6_is_blocked_by_its_64_and_mapped_ipv4_as_ipv4() {
        let a = BlockTarget::Ip("2001:db8:1:2:aaaa::1".parse().unwrap());
        let b = BlockTarget::Ip("2001:db8:1:2:ffff::9".parse().unwrap());
        assert_eq!(a.own_part().unwrap(), b.own_part().unwrap());
        assert_eq!(a.own_part().unwrap(), "@2001:db8:1:2::");
        let mapped = BlockTarget::Ip("::ffff:192.0.2.7".parse().unwrap());
        assert_eq!(mapped.own_part().unwrap(), "@192.0.2.7");
    }

    #[test]
    fn a_network_is_the_bucket_of_its_prefix_and_ipv4_only_one_address() {
        let net = |s: &str| BlockTarget::Net(s.parse().unwrap());
        assert_eq!(net("2001:db8:7::1/48").own_part().unwrap(), "@2001:db8:7::");
        assert_eq!(net("192.0.2.7/32").own_part().unwrap(), "@192.0.2.7");
        assert_eq!(
            net("::ffff:192.0.2.7/128").own_part().unwrap(),
            "@192.0.2.7"
        );
        assert!(matches!(
            net("192.0.2.0/24").own_part(),
            Err(BlockError::Ipv4Network(_))
        ));
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
            BlockTarget::User("a{b}").key_parts(&config).unwrap(),
            ["a%7Bb%7D", "a%7Bb%7D@/login"]
        );
        let off = RateLimitConfig::builder().user_limit(0).build().unwrap();
        assert!(BlockTarget::User("a").key_parts(&off).unwrap().is_empty());
        assert_eq!(
            BlockTarget::Endpoint("/{x}").key_parts(&config).unwrap(),
            ["/%7Bx%7D"]
        );
        assert!(BlockTarget::Endpoint("/{x}")
            .key_parts(&off)
            .unwrap()
            .is_empty());
    }
}
