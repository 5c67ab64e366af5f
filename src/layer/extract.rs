//! What the layer takes from a request's head: the endpoint (axum's `MatchedPath` template, or
//! the layer's own closure), the peer address, and the user key.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::request::Parts;
use http::{Extensions, HeaderMap, HeaderName, Request};

use super::RateLimitLayer;
use crate::request::UserKey;

/// A request's head as the layer reads it: the request's own headers and extensions, or its
/// taken-apart [`Parts`] when one of the layer's closures needs them (taking a request apart and
/// putting it back together moves a few hundred bytes, twice).
#[derive(Clone, Copy)]
pub(crate) enum Head<'a> {
    Parts(&'a Parts),
    Fields(&'a HeaderMap, &'a Extensions),
}

impl<'a> Head<'a> {
    /// The head of a whole request, read in place.
    pub(crate) fn of<B>(request: &'a Request<B>) -> Self {
        Self::Fields(request.headers(), request.extensions())
    }

    fn headers(self) -> &'a HeaderMap {
        match self {
            Self::Parts(parts) => &parts.headers,
            Self::Fields(headers, _) => headers,
        }
    }

    fn extensions(self) -> &'a Extensions {
        match self {
            Self::Parts(parts) => &parts.extensions,
            Self::Fields(_, extensions) => extensions,
        }
    }

    /// The `Parts`, for a closure; `None` only if the layer read the request in place, which it
    /// does only when it has no closure that takes `Parts` ([`RateLimitLayer::needs_parts`]).
    fn parts(self) -> Option<&'a Parts> {
        match self {
            Self::Parts(parts) => Some(parts),
            Self::Fields(..) => None,
        }
    }
}

/// The route a request is counted under, borrowed from the request where it can be.
pub(crate) enum Endpoint<'a> {
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    Matched(&'a str),
    Named(String),
    Unmatched,
}

impl Endpoint<'_> {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Self::Matched(path) => Some(path),
            Self::Named(name) => Some(name),
            Self::Unmatched => None,
        }
    }
}

impl<A> RateLimitLayer<A> {
    /// The user id of a request, borrowed from it where the source allows.
    #[inline]
    pub(crate) fn user_id_in<'p>(&self, head: Head<'p>) -> Option<Cow<'p, str>> {
        self.settings.user_id.of(head)
    }

    /// Whether a closure of the layer takes the request's `Parts` (the user id, endpoint or
    /// cost closures); if not, the layer reads the request in place.
    #[inline]
    pub(crate) fn needs_parts(&self) -> bool {
        let s = &*self.settings;
        matches!(
            s.user_id,
            UserIdSource::Borrowing(_) | UserIdSource::Owning(_)
        ) || s.endpoint.is_some()
            || s.cost.is_some()
    }

    pub(crate) fn endpoint_of<'a>(&self, head: Head<'a>) -> Endpoint<'a> {
        if let Some(f) = &self.settings.endpoint {
            // An empty name is none: the unmatched-route key, as for `None`.
            return head
                .parts()
                .and_then(|parts| f(parts))
                .filter(|name| !name.is_empty())
                .map_or(Endpoint::Unmatched, Endpoint::Named);
        }
        #[cfg(feature = "axum")]
        {
            if let Some(path) = head.extensions().get::<axum::extract::MatchedPath>() {
                self.settings.paths.matched();
                return Endpoint::Matched(path.as_str());
            }
            self.unmatched();
        }
        Endpoint::Unmatched
    }

    /// Counts a request without axum's `MatchedPath`; the [`UNMATCHED_BEFORE_WARNING`]th in a
    /// row with none matched before it logs, once per layer, that the layer is outside the
    /// router, if the configuration has per-endpoint limits (an endpoint limit or route
    /// limits), which such requests cannot get. A 404 under `Router::layer`, where matched
    /// requests carry it, is no such sign.
    #[cfg(feature = "axum")]
    #[cold]
    fn unmatched(&self) {
        let paths = &self.settings.paths;
        if paths.seen_matched.load(Ordering::Relaxed)
            || paths.unmatched.load(Ordering::Relaxed) >= UNMATCHED_BEFORE_WARNING
            || paths.unmatched.fetch_add(1, Ordering::Relaxed) + 1 != UNMATCHED_BEFORE_WARNING
        {
            return;
        }
        let config = self.limiter().config();
        if config.endpoint_limit() == 0 && config.routes().next().is_none() {
            return;
        }
        tracing::warn!(
            "{UNMATCHED_BEFORE_WARNING} requests reached the rate-limit layer and none carried \
             axum's MatchedPath: the layer wraps the Router from outside, so every request \
             shares one endpoint key and no route's own limits apply; put the layer on the \
             routes with `Router::route_layer` (or `Router::layer`), or name endpoints with \
             `RateLimitLayer::endpoint`"
        );
    }

    /// The request's cost: the cost closure's answer, else 1.
    pub(crate) fn cost_of(&self, head: Head<'_>) -> u64 {
        match (&self.settings.cost, head.parts()) {
            (Some(f), Some(parts)) => f(parts),
            _ => 1,
        }
    }

    /// The client's address (after the trusted proxies), from the peer's.
    pub(crate) fn client_ip_of(&self, head: Head<'_>) -> Option<IpAddr> {
        peer_ip(head.extensions()).map(|peer| self.settings.client_ip.client(head.headers(), peer))
    }
}

/// The peer's address, from axum's `ConnectInfo` (or `MockConnectInfo`).
#[cfg(feature = "axum")]
fn peer_ip(extensions: &Extensions) -> Option<IpAddr> {
    use axum::extract::connect_info::{ConnectInfo, MockConnectInfo};
    use std::net::SocketAddr;
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .or_else(|| {
            extensions
                .get::<MockConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip())
        })
}

#[cfg(not(feature = "axum"))]
fn peer_ip(_extensions: &Extensions) -> Option<IpAddr> {
    None
}

/// Where the layer finds a request's user id.
#[derive(Clone, Default)]
pub(crate) enum UserIdSource {
    /// None: the client address stands in.
    #[default]
    Absent,
    /// A header's value, borrowed from the request (an empty or non-text value is no id).
    Header(HeaderName),
    /// A closure that may borrow from the request.
    Borrowing(BorrowingFn),
    /// A closure that returns an owned id.
    Owning(OwningFn),
}

pub(crate) type BorrowingFn = Arc<dyn for<'a> Fn(&'a Parts) -> Option<Cow<'a, str>> + Send + Sync>;
pub(crate) type OwningFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

impl UserIdSource {
    /// The user id of a request, borrowed from it where the source allows.
    #[inline]
    pub(crate) fn of<'p>(&self, head: Head<'p>) -> Option<Cow<'p, str>> {
        match self {
            Self::Absent => None,
            // Any UTF-8 (`josé` is a user of its own, its key encoded), not only the visible
            // ASCII of `HeaderValue::to_str`.
            Self::Header(name) => match std::str::from_utf8(head.headers().get(name)?.as_bytes()) {
                Ok("") | Err(_) => None,
                Ok(id) => Some(Cow::Borrowed(id)),
            },
            // An empty id is no id, whatever its source (as for a header): the client address
            // stands in, and no request is counted under an empty user.
            Self::Borrowing(f) => f(head.parts()?).filter(|id| !id.is_empty()),
            Self::Owning(f) => f(head.parts()?).filter(|id| !id.is_empty()).map(Cow::Owned),
        }
    }
}

impl fmt::Debug for UserIdSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Absent => f.write_str("Absent"),
            Self::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Self::Borrowing(_) | Self::Owning(_) => f.write_str("Closure"),
        }
    }
}

pub(crate) fn user_key(user_id: Option<&str>, ip: Option<IpAddr>) -> UserKey<'_> {
    match (user_id, ip) {
        (Some(id), _) => UserKey::Id(id),
        (None, Some(ip)) => UserKey::Ip(ip),
        (None, None) => UserKey::Anonymous,
    }
}

/// Requests without axum's `MatchedPath`, and none with it, before a layer warns that it is
/// outside the router.
#[cfg(feature = "axum")]
pub(crate) const UNMATCHED_BEFORE_WARNING: u32 = 16;

/// What a layer has seen of axum's `MatchedPath`, for its warning that it is outside the
/// router. A clone (a builder step, before the layer serves) starts afresh.
#[cfg(feature = "axum")]
#[derive(Debug, Default)]
pub(crate) struct PathsSeen {
    seen_matched: AtomicBool,
    unmatched: std::sync::atomic::AtomicU32,
}

#[cfg(feature = "axum")]
impl PathsSeen {
    /// A request carried `MatchedPath`: the layer is under the router.
    #[inline]
    fn matched(&self) {
        if !self.seen_matched.load(Ordering::Relaxed) {
            self.seen_matched.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(feature = "axum")]
impl Clone for PathsSeen {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// Logs, once per process, that a request had neither a user id nor a client address: its user
/// tier was skipped. The usual cause is serving without `ConnectInfo`.
pub(crate) fn warn_no_user_once() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "a request had neither a user id nor a client address, so the user tier was skipped \
             for it; to limit by client address, serve with \
             `app.into_make_service_with_connect_info::<std::net::SocketAddr>()`"
        );
    }
}
