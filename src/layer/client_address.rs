//! [`RateLimitLayer`]'s client-address settings: whom it trusts to name the client of a request
//! without a user id, and how it groups IPv6 clients.

use std::net::IpAddr;

use super::RateLimitLayer;
use crate::client_ip::{IpNet, Proxies};

impl<A> RateLimitLayer<A> {
    /// Behind proxies in these networks, the client is the rightmost address of the client-IP
    /// header that is not one of them — never the leftmost, which the client writes. The header is
    /// `X-Forwarded-For` unless [`client_ip_header`](Self::client_ip_header) names another;
    /// headers are ignored when the peer is not a trusted proxy.
    ///
    /// ```
    /// # use tiered_ratelimit::{RateLimitConfig, RateLimitLayer, IpNet};
    /// # let config = RateLimitConfig::builder().user_limit(5).build().unwrap();
    /// let layer = RateLimitLayer::new(config).trusted_proxies([
    ///     "10.0.0.0/8".parse::<IpNet>().unwrap(),
    ///     "fd00::/8".parse().unwrap(),
    /// ]);
    /// ```
    ///
    /// Networks that hold every address of a family (`0.0.0.0/0`, `::/0`, or several that add
    /// up to one, such as `0.0.0.0/1` and `128.0.0.0/1`) trust every client to name itself,
    /// so that any client can pick its own bucket: it is logged as an error when the layer is
    /// built this way (the demo server refuses it; see
    /// [`trusts_every_client`](Self::trusts_every_client)).
    pub fn trusted_proxies(mut self, networks: impl IntoIterator<Item = IpNet>) -> Self {
        let networks: Vec<IpNet> = networks.into_iter().collect();
        if let Some(all) = RateLimitLayer::trusts_every_client(&networks) {
            tracing::error!(
                network = %all,
                "trusted_proxies: {all} trusts every client to name its own address, so any \
                 client can pick its own rate-limit bucket; name your proxies' networks instead"
            );
        }
        self.settings_mut().client_ip.proxies = Proxies::Networks(networks);
        self
    }

    /// The one header that carries the addresses the trusted proxies saw (default
    /// `X-Forwarded-For`): `forwarded` for RFC 7239 `Forwarded`, or a comma-separated list
    /// header such as `x-real-ip`. No other header is read: a header your proxies do not write
    /// passes through them as the client sent it.
    ///
    /// ```
    /// # use tiered_ratelimit::{RateLimitConfig, RateLimitLayer, IpNet};
    /// # let config = RateLimitConfig::builder().user_limit(5).build().unwrap();
    /// let layer = RateLimitLayer::new(config)
    ///     .trusted_proxies(["10.0.0.0/8".parse::<IpNet>().unwrap()])
    ///     .client_ip_header(http::header::FORWARDED);
    /// ```
    pub fn client_ip_header(mut self, name: http::HeaderName) -> Self {
        self.settings_mut().client_ip.header = crate::client_ip::ChainHeader::named(name);
        self
    }

    /// Behind exactly `hops` proxies (the peer being the last), the client is the address the
    /// first of them appended: `hops` entries from the right of `Forwarded` /
    /// `X-Forwarded-For`. 0 means no proxy (the default).
    pub fn trusted_hops(mut self, hops: usize) -> Self {
        self.settings_mut().client_ip.proxies = if hops == 0 {
            Proxies::None
        } else {
            Proxies::Hops(hops)
        };
        self
    }

    /// IPv6 clients are grouped by this network prefix (default 64, at most 128): one bucket
    /// per /64, since one client can pick any address in its own. IPv4-mapped IPv6 addresses
    /// are treated as IPv4, one bucket per address.
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.settings_mut().client_ip.ipv6_prefix = bits.min(128);
        self
    }

    /// The address this layer keys a request without a user id by, for a request from `peer`
    /// with `headers`: the peer, or the client named by the [trusted
    /// proxies](Self::trusted_proxies), IPv6 grouped by [`ipv6_prefix`](Self::ipv6_prefix).
    /// With [`user_id_of`](Self::user_id_of), a handler that reports a caller's own usage
    /// asks for the bucket the layer charged.
    pub fn client_ip(&self, headers: &http::HeaderMap, peer: IpAddr) -> IpAddr {
        self.settings.client_ip.client(headers, peer)
    }
}

impl RateLimitLayer {
    /// Every address of one family (`0.0.0.0/0` or `::/0`) if `networks` hold it, alone or
    /// together; `None` for networks that leave some client out. For an application that takes
    /// its proxies from its operator and wants to refuse such a list, as the demo server does.
    ///
    /// ```
    /// use tiered_ratelimit::{IpNet, RateLimitLayer};
    /// let halves: Vec<IpNet> = vec!["0.0.0.0/1".parse().unwrap(), "128.0.0.0/1".parse().unwrap()];
    /// assert_eq!(RateLimitLayer::trusts_every_client(&halves), Some("0.0.0.0/0".parse().unwrap()));
    /// let proxies: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    /// assert_eq!(RateLimitLayer::trusts_every_client(&proxies), None);
    /// ```
    pub fn trusts_every_client(networks: &[IpNet]) -> Option<IpNet> {
        crate::client_ip::covers_everything(networks)
    }
}
