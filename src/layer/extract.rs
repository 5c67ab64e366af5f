//! What the layer takes from a request's head: the endpoint (axum's `MatchedPath` template, or
//! the layer's own closure), the peer address, and the user key.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use http::request::Parts;

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

pub(crate) fn user_key(user_id: &Option<String>, ip: Option<IpAddr>) -> UserKey<'_> {
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
