//! What the layer takes from a request's head: the endpoint (axum's `MatchedPath` template, or
//! the layer's own closure), the peer address, and the user key.

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::request::Parts;
use http::HeaderName;

use super::RateLimitLayer;
use crate::request::UserKey;

/// What the layer needs of a request, taken before the request moves into the future.
pub(crate) enum Endpoint {
    #[cfg(feature = "axum")]
    Matched(axum::extract::MatchedPath),
    Named(String),
    Unmatched,
}

impl Endpoint {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            #[cfg(feature = "axum")]
            Self::Matched(path) => Some(path.as_str()),
            Self::Named(name) => Some(name),
            Self::Unmatched => None,
        }
    }
}

impl RateLimitLayer {
    pub(crate) fn endpoint_of(&self, parts: &Parts) -> Endpoint {
        if let Some(f) = &self.endpoint {
            return f(parts).map_or(Endpoint::Unmatched, Endpoint::Named);
        }
        #[cfg(feature = "axum")]
        if let Some(path) = parts.extensions.get::<axum::extract::MatchedPath>() {
            return Endpoint::Matched(path.clone());
        }
        Endpoint::Unmatched
    }
}

/// The peer's address, from axum's `ConnectInfo` (or `MockConnectInfo`).
#[cfg(feature = "axum")]
pub(crate) fn peer_ip(parts: &Parts) -> Option<IpAddr> {
    use axum::extract::connect_info::{ConnectInfo, MockConnectInfo};
    use std::net::SocketAddr;
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .or_else(|| {
            parts
                .extensions
                .get::<MockConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip())
        })
}

#[cfg(not(feature = "axum"))]
pub(crate) fn peer_ip(_parts: &Parts) -> Option<IpAddr> {
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
    pub(crate) fn of<'p>(&self, parts: &'p Parts) -> Option<Cow<'p, str>> {
        match self {
            Self::Absent => None,
            Self::Header(name) => match parts.headers.get(name)?.to_str() {
                Ok("") | Err(_) => None,
                Ok(id) => Some(Cow::Borrowed(id)),
            },
            Self::Borrowing(f) => f(parts),
            Self::Owning(f) => f(parts).map(Cow::Owned),
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
