//! The limiter as tower middleware: [`RateLimitLayer`] makes [`RateLimit`] services.
//!
//! A request's path through here: [`extract`] takes the user id (or the client address), the
//! route template and the cost from the request's head; the [`RateLimiter`] decides; an allowed
//! request goes on to the inner service and its response gets the rate-limit [`headers`]; a
//! denied one gets a [`rejection`] (a 429 with an RFC 9457 problem body) without calling the
//! inner service. [`future`] and [`body`] hold the service's future and response body types,
//! `body_mode.rs` which body the responses carry (ours, or with
//! [`inner_body`](RateLimitLayer::inner_body) the inner service's own);
//! `client_address.rs` holds the builder's settings for requests without a user id (whom to
//! trust to name the client's address).
//!
//! ```
//! use axum::{routing::get, Router};
//! use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
//!
//! let config = RateLimitConfig::builder().user_limit(50).build().expect("valid config");
//! let app: Router = Router::new()
//!     .route("/api/v1/items/{id}", get(|| async { "item" }))
//!     .route_layer(RateLimitLayer::new(config).user_id(|parts| {
//!         parts.headers.get("x-user-id")?.to_str().ok().map(str::to_owned)
//!     }));
//! ```

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::Response;
use tower_layer::Layer;

use self::extract::UserIdSource;

use crate::client_ip::ClientIpRule;
use crate::config::RateLimitConfig;
use crate::decision::Decision;
use crate::limiter::RateLimiter;

pub(crate) mod body;
mod body_mode;
mod client_address;
pub(crate) mod extract;
pub(crate) mod future;
pub(crate) mod headers;
pub(crate) mod rejection;
pub(crate) mod service;

pub use self::body::ResponseBody;
pub use self::body_mode::{BodyMode, InnerBody, WrappedBody};
pub use self::future::ResponseFuture;
pub use self::service::RateLimit;

type PartsFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;
pub(crate) type RejectFn = Arc<dyn Fn(&Decision) -> Response<Bytes> + Send + Sync>;
type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;

/// Applies a [`RateLimiter`] to every request of the wrapped service.
///
/// - **User:** the [`user_id`](Self::user_id) closure's answer; without one (no closure, or it
///   returns `None`) the client IP stands in, under a key no user id can produce: the peer
///   from axum's `ConnectInfo<SocketAddr>` (or `MockConnectInfo`), or, behind
///   [`trusted_proxies`](Self::trusted_proxies) / [`trusted_hops`](Self::trusted_hops), the
///   rightmost untrusted address of the [client-IP header](Self::client_ip_header); IPv6 grouped by
///   [`ipv6_prefix`](Self::ipv6_prefix). With no peer address, the user tier is skipped for
///   that request. Serve with `into_make_service_with_connect_info::<SocketAddr>()` to have
///   the address.
/// - **Endpoint:** axum's [`MatchedPath`](axum::extract::MatchedPath), the route *template*
///   (`/api/v1/items/{id}`), never the raw path. A request that matched no route (a 404 under
///   `Router::layer`, a fallback handler's, or this layer wrapped around a whole router from
///   outside) uses one fixed endpoint key, so random paths never create keys.
///   [`endpoint`](Self::endpoint) replaces this, for services other than axum (a gRPC method,
///   say).
/// - **Allowed:** the inner response, with `X-RateLimit-Remaining` and `Retry-After: 0` added
///   (allowed only by [shadow mode](crate::RateLimitConfigBuilder::shadow): `0` and the
///   `Retry-After` enforcement would have sent; no tier applied: no rate-limit header).
/// - **Denied:** `429 Too Many Requests` with `X-RateLimit-Remaining: 0`, `Retry-After: n`
///   (whole seconds, rounded up, at least 1) and a short RFC 9457 `application/problem+json`
///   body naming the violated policy (the tier); [`on_rejection`](Self::on_rejection) replaces
///   it. The inner service is not called. (The headers follow the config's
///   [`HeaderStyle`](crate::HeaderStyle): legacy, IETF or both.)
///
/// Works with `Router::layer`, `Router::route_layer`, axum's `Handler::layer` (one handler,
/// counted under its route's template; a method the route does not serve, a 405, never
/// reaches it; on a router's fallback, which has no template, under the one fixed key) and any
/// tower service whose response body carries [`Bytes`]. Clones of the layer and of its
/// services share one limiter.
///
/// ```
/// use axum::{routing::get, Router};
/// use std::time::Duration;
/// use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
///
/// let config = RateLimitConfig::builder()
///     .window(Duration::from_secs(60))
///     .user_limit(50)
///     .endpoint_limit(100)
///     .global_limit(1000)
///     .build()
///     .expect("valid config");
///
/// let app: Router = Router::new()
///     .route("/api/v1/items/{id}", get(|| async { "item" }))
///     .route_layer(RateLimitLayer::new(config).user_id(|parts| {
///         parts.headers.get("x-user-id")?.to_str().ok().map(str::to_owned)
///     }));
/// ```
///
/// Responses carry [`ResponseBody`] by default, whatever the inner service's body;
/// [`inner_body`](Self::inner_body) answers with the inner body's own type instead (axum's
/// `Body`, say), which under axum saves a box on every allowed response.
#[must_use]
pub struct RateLimitLayer<A = WrappedBody> {
    /// Behind one `Arc`: routers clone the layer's service for every request (and axum makes
    /// it anew per request until the router is finished with `with_state`), so a clone is one
    /// increment.
    settings: Arc<Settings>,
    mode: PhantomData<fn() -> A>,
}

impl<A> Clone for RateLimitLayer<A> {
    fn clone(&self) -> Self {
        Self {
            settings: Arc::clone(&self.settings),
            mode: PhantomData,
        }
    }
}

/// What a [`RateLimitLayer`] is made of.
#[derive(Clone)]
struct Settings {
    limiter: RateLimiter,
    user_id: UserIdSource,
    endpoint: Option<PartsFn>,
    client_ip: ClientIpRule,
    rejection: Option<RejectFn>,
    cost: Option<CostFn>,
    /// What requests have shown of axum's `MatchedPath` (see `extract::PathsSeen`).
    #[cfg(feature = "axum")]
    paths: extract::PathsSeen,
}

impl<A> fmt::Debug for RateLimitLayer<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &*self.settings;
        f.debug_struct("RateLimitLayer")
            .field("limiter", &s.limiter)
            .field("user_id", &s.user_id)
            .field("endpoint", &s.endpoint.as_ref().map(|_| "closure"))
            .field("client_ip", &s.client_ip)
            .field("rejection", &s.rejection.as_ref().map(|_| "closure"))
            .field("cost", &s.cost.as_ref().map(|_| "closure"))
            .finish()
    }
}

impl RateLimitLayer {
    /// A layer with a new [`RateLimiter`] for `config` (see [`RateLimiter::new`]).
    pub fn new(config: RateLimitConfig) -> Self {
        Self::from_limiter(RateLimiter::new(config))
    }

    /// A layer on an existing limiter (a clone shares its state).
    pub fn from_limiter(limiter: RateLimiter) -> Self {
        Self {
            settings: Arc::new(Settings {
                limiter,
                user_id: UserIdSource::Absent,
                endpoint: None,
                client_ip: ClientIpRule::default(),
                rejection: None,
                cost: None,
                #[cfg(feature = "axum")]
                paths: extract::PathsSeen::default(),
            }),
            mode: PhantomData,
        }
    }
}

impl<A> RateLimitLayer<A> {
    /// Answers with the inner service's own response body type, instead of wrapping it in
    /// [`ResponseBody`]: an allowed request's response is the inner response as it was, with
    /// the rate-limit headers added, and a rejection's body is made with the body type's
    /// `From<Bytes>`. For inner services whose body has one: axum's `Body` (a `Router`'s
    /// routes, under `route_layer` or `layer`, or a handler's), `http_body_util::Full<Bytes>`,
    /// ... The inner body must implement `From<Bytes>`: hyper's `Incoming` (a proxy's) and
    /// tonic's `Body` do not, and the service then does not compile (keep the default for
    /// those). The statuses, headers and bodies are the same bytes either way.
    ///
    /// axum boxes every response body that is not its own `Body`, so under axum this saves an
    /// allocation and a layer of indirection on every allowed response (a rejection's body is
    /// boxed by axum's `From<Bytes>` instead).
    ///
    /// ```
    /// use axum::{routing::get, Router};
    /// use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
    ///
    /// let config = RateLimitConfig::builder().user_limit(50).build().expect("valid config");
    /// let app: Router = Router::new()
    ///     .route("/api/v1/items/{id}", get(|| async { "item" }))
    ///     .route_layer(
    ///         RateLimitLayer::new(config)
    ///             .user_id_header("x-user-id")
    ///             .inner_body(),
    ///     );
    /// ```
    pub fn inner_body(self) -> RateLimitLayer<InnerBody> {
        RateLimitLayer {
            settings: self.settings,
            mode: PhantomData,
        }
    }

    /// The settings, to change (copied first if a clone shares them).
    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }

    /// How many units a request spends (default 1), from its method, route, declared body
    /// size, ... A cost above a tier's limit is denied with a problem body that says so.
    ///
    /// The cost is decided from the head, before the body is read: a body's size is only what
    /// `Content-Length` declares (hyper refuses a body longer than that). A body without it
    /// (chunked, or HTTP/2 without the header) can be as long as the service lets it be, so
    /// price it at the body limit you enforce (axum's `DefaultBodyLimit`, 2 MiB by default),
    /// never at 0: an outside review sent 400 KiB chunked through a budget of 4 KiB a minute
    /// priced with `unwrap_or(0)`.
    ///
    /// ```
    /// # use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
    /// # let config = RateLimitConfig::builder().user_limit(10_000).build().unwrap();
    /// // One unit per started KiB of body, at least 1; an undeclared body costs the most the
    /// // service accepts (here axum's default limit of 2 MiB).
    /// const MAX_BODY_KIB: u64 = 2 * 1024;
    /// let layer = RateLimitLayer::new(config).cost(|parts| {
    ///     let declared = parts
    ///         .headers
    ///         .get(http::header::CONTENT_LENGTH)
    ///         .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    ///     match declared {
    ///         Some(bytes) => bytes.div_ceil(1024).clamp(1, MAX_BODY_KIB),
    ///         None if parts.method == http::Method::GET || parts.method == http::Method::HEAD => 1,
    ///         None => MAX_BODY_KIB,
    ///     }
    /// });
    /// ```
    pub fn cost<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> u64 + Send + Sync + 'static,
    {
        self.settings_mut().cost = Some(Arc::new(f));
        self
    }

    /// Replaces the 429 response. The layer still adds the rate-limit headers to what `f`
    /// returns (replacing any of the same names).
    ///
    /// ```
    /// # use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
    /// # let config = RateLimitConfig::builder().user_limit(5).build().unwrap();
    /// let layer = RateLimitLayer::new(config).on_rejection(|decision| {
    ///     http::Response::builder()
    ///         .status(503)
    ///         .body(format!("slow down ({:?})", decision.blocked_by()).into())
    ///         .unwrap()
    /// });
    /// ```
    pub fn on_rejection<F>(mut self, f: F) -> Self
    where
        F: Fn(&Decision) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.settings_mut().rejection = Some(Arc::new(f));
        self
    }

    /// The user id this layer reads from a request whose head is `parts` (its header or
    /// closure, as set with [`user_id_header`](Self::user_id_header), [`user_id`](Self::user_id)
    /// or [`user_id_ref`](Self::user_id_ref)); `None`: the request has none, and the layer
    /// keys it by its [`client_ip`](Self::client_ip).
    pub fn user_id_of<'p>(&self, parts: &'p Parts) -> Option<Cow<'p, str>> {
        self.user_id_in(extract::Head::Parts(parts))
    }

    /// How to find the user id in a request. `None` (or an empty id) falls back to the client
    /// IP.
    ///
    /// The closure returns an owned `String`, one allocation per request;
    /// [`user_id_header`](Self::user_id_header) and [`user_id_ref`](Self::user_id_ref) borrow
    /// the id from the request instead.
    pub fn user_id<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.settings_mut().user_id = UserIdSource::Owning(Arc::new(f));
        self
    }

    /// The user id is the value of this request header, borrowed (no allocation per request).
    /// A missing, empty or non-UTF-8 value is no id: the client address stands in. Any UTF-8
    /// value is an id (`josé` is a user of its own; every id's key is encoded).
    ///
    /// Name only a header that your own authentication writes (a gateway in front, or a
    /// middleware before this layer that replaces whatever the client sent): a client that
    /// can set the header itself picks its own bucket, a fresh one per request.
    ///
    /// ```
    /// # use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
    /// # let config = RateLimitConfig::builder().user_limit(5).build().unwrap();
    /// let layer = RateLimitLayer::new(config).user_id_header("x-user-id");
    /// ```
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name (a programming error, like `HeaderName::from_static`).
    pub fn user_id_header(mut self, name: impl AsRef<str>) -> Self {
        let name = name.as_ref();
        let header = http::HeaderName::try_from(name)
            .unwrap_or_else(|_| panic!("user_id_header: {name:?} is not a valid header name"));
        self.settings_mut().user_id = UserIdSource::Header(header);
        self
    }

    /// How to find the user id in a request, borrowing it from the request where it can
    /// (`Cow::Borrowed`: no allocation per request) or making one (`Cow::Owned`). `None` (or an
    /// empty id) falls back to the client IP.
    ///
    /// ```
    /// # use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
    /// use std::borrow::Cow;
    /// # let config = RateLimitConfig::builder().user_limit(5).build().unwrap();
    /// // The part of a bearer token before its first dot (say, a key id).
    /// let layer = RateLimitLayer::new(config).user_id_ref(|parts| {
    ///     let auth = parts.headers.get("authorization")?.to_str().ok()?;
    ///     let token = auth.strip_prefix("Bearer ")?;
    ///     Some(Cow::Borrowed(token.split('.').next()?))
    /// });
    /// ```
    pub fn user_id_ref<F>(mut self, f: F) -> Self
    where
        F: for<'a> Fn(&'a Parts) -> Option<Cow<'a, str>> + Send + Sync + 'static,
    {
        self.settings_mut().user_id = UserIdSource::Borrowing(Arc::new(f));
        self
    }

    /// How to name the endpoint of a request, replacing axum's `MatchedPath`. `None` (or an
    /// empty name) means the fixed "unmatched" key. Return templates, not raw paths, or every path becomes a key.
    pub fn endpoint<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.settings_mut().endpoint = Some(Arc::new(f));
        self
    }

    /// The limiter behind the layer.
    #[inline]
    pub fn limiter(&self) -> &RateLimiter {
        &self.settings.limiter
    }

    /// The closure that answers a denied request, if the layer has one.
    pub(crate) fn rejection(&self) -> Option<&RejectFn> {
        self.settings.rejection.as_ref()
    }
}

impl<S, A> Layer<S> for RateLimitLayer<A> {
    type Service = RateLimit<S, A>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            layer: self.clone(),
        }
    }
}
