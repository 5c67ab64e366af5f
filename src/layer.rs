//! [`RateLimitLayer`] and its service [`RateLimit`]: the limiter as tower middleware.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::request::Parts;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::client_ip::{ClientIpRule, IpNet, Proxies};
use crate::config::RateLimitConfig;
use crate::decision::Decision;
use crate::limiter::{CheckRequest, RateLimiter, UserKey};

type PartsFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;
type RejectFn = Arc<dyn Fn(&Decision) -> Response<Bytes> + Send + Sync>;
type CostFn = Arc<dyn Fn(&Parts) -> u64 + Send + Sync>;

/// Applies a [`RateLimiter`] to every request of the wrapped service.
///
/// - **User:** the [`user_id`](Self::user_id) closure's answer; without one (no closure, or it
///   returns `None`) the client IP stands in, under a key no user id can produce: the peer
///   from axum's `ConnectInfo<SocketAddr>` (or `MockConnectInfo`), or, behind
///   [`trusted_proxies`](Self::trusted_proxies) / [`trusted_hops`](Self::trusted_hops), the
///   rightmost untrusted `Forwarded` / `X-Forwarded-For` address; IPv6 grouped by
///   [`ipv6_prefix`](Self::ipv6_prefix). With no peer address, the user tier is skipped for
///   that request. Serve with `into_make_service_with_connect_info::<SocketAddr>()` to have
///   the address.
/// - **Endpoint:** axum's [`MatchedPath`](axum::extract::MatchedPath), the route *template*
///   (`/api/v1/items/{id}`), never the raw path. A request that matched no route (a 404 under
///   `Router::layer`, or this layer wrapped around a whole router from outside) uses one fixed
///   endpoint key, so random paths never create keys. [`endpoint`](Self::endpoint) replaces
///   this, for services other than axum (a gRPC method, say).
/// - **Allowed:** the inner response, with `X-RateLimit-Remaining` and `Retry-After: 0` added.
/// - **Denied:** `429 Too Many Requests` with `X-RateLimit-Remaining: 0`, `Retry-After: n`
///   (whole seconds, rounded up, at least 1) and a short RFC 9457 `application/problem+json`
///   body naming the violated policy (the tier); [`on_rejection`](Self::on_rejection) replaces
///   it. The inner service is not called. (The headers follow the config's
///   [`HeaderStyle`](crate::HeaderStyle): legacy, IETF or both.)
///
/// Works with `Router::layer`, `Router::route_layer` and any tower service whose response body
/// carries [`Bytes`]. Clones of the layer and of its services share one limiter.
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
#[derive(Clone)]
#[must_use]
pub struct RateLimitLayer {
    limiter: RateLimiter,
    user_id: Option<PartsFn>,
    endpoint: Option<PartsFn>,
    client_ip: Arc<ClientIpRule>,
    rejection: Option<RejectFn>,
    cost: Option<CostFn>,
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .field("user_id", &self.user_id.as_ref().map(|_| "closure"))
            .field("endpoint", &self.endpoint.as_ref().map(|_| "closure"))
            .field("client_ip", &self.client_ip)
            .field("rejection", &self.rejection.as_ref().map(|_| "closure"))
            .field("cost", &self.cost.as_ref().map(|_| "closure"))
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
            limiter,
            user_id: None,
            endpoint: None,
            client_ip: Arc::default(),
            rejection: None,
            cost: None,
        }
    }

    /// How many units a request spends (default 1), from its method, route, declared body
    /// size, ... A cost above a tier's limit is denied with a problem body that says so.
    ///
    /// ```
    /// # use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
    /// # let config = RateLimitConfig::builder().user_limit(1000).build().unwrap();
    /// // One unit per started KiB of declared body, at least 1.
    /// let layer = RateLimitLayer::new(config).cost(|parts| {
    ///     let bytes = parts
    ///         .headers
    ///         .get(http::header::CONTENT_LENGTH)
    ///         .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
    ///         .unwrap_or(0);
    ///     bytes.div_ceil(1024).max(1)
    /// });
    /// ```
    pub fn cost<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> u64 + Send + Sync + 'static,
    {
        self.cost = Some(Arc::new(f));
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
        self.rejection = Some(Arc::new(f));
        self
    }

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
    /// A network of every address (`0.0.0.0/0`, `::/0`) trusts every client to name itself,
    /// so that any client can pick its own bucket: it is logged as an error when the layer is
    /// built this way (the demo server refuses it).
    pub fn trusted_proxies(mut self, networks: impl IntoIterator<Item = IpNet>) -> Self {
        let networks: Vec<IpNet> = networks.into_iter().collect();
        if let Some(all) = networks.iter().find(|n| crate::client_ip::is_everything(n)) {
            tracing::error!(
                network = %all,
                "trusted_proxies: {all} trusts every client to name its own address, so any \
                 client can pick its own rate-limit bucket; name your proxies' networks instead"
            );
        }
        Arc::make_mut(&mut self.client_ip).proxies = Proxies::Networks(networks);
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
        Arc::make_mut(&mut self.client_ip).header = crate::client_ip::ChainHeader::named(name);
        self
    }

    /// Behind exactly `hops` proxies (the peer being the last), the client is the address the
    /// first of them appended: `hops` entries from the right of `Forwarded` /
    /// `X-Forwarded-For`. 0 means no proxy (the default).
    pub fn trusted_hops(mut self, hops: usize) -> Self {
        Arc::make_mut(&mut self.client_ip).proxies = if hops == 0 {
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
        Arc::make_mut(&mut self.client_ip).ipv6_prefix = bits.min(128);
        self
    }

    /// How to find the user id in a request. `None` falls back to the client IP.
    pub fn user_id<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.user_id = Some(Arc::new(f));
        self
    }

    /// How to name the endpoint of a request, replacing axum's `MatchedPath`. `None` means the
    /// fixed "unmatched" key. Return templates, not raw paths, or every path becomes a key.
    pub fn endpoint<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.endpoint = Some(Arc::new(f));
        self
    }

    /// The limiter behind the layer.
    pub fn limiter(&self) -> &RateLimiter {
        &self.limiter
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`RateLimitLayer`].
#[derive(Clone, Debug)]
pub struct RateLimit<S> {
    inner: S,
    layer: RateLimitLayer,
}

impl<S> RateLimit<S> {
    /// The limiter behind the service.
    pub fn limiter(&self) -> &RateLimiter {
        &self.layer.limiter
    }
}

/// What the layer needs of a request, taken before the request moves into the future.
enum Endpoint {
    #[cfg(feature = "axum")]
    Matched(axum::extract::MatchedPath),
    Named(String),
    Unmatched,
}

impl Endpoint {
    fn as_str(&self) -> Option<&str> {
        match self {
            #[cfg(feature = "axum")]
            Self::Matched(path) => Some(path.as_str()),
            Self::Named(name) => Some(name),
            Self::Unmatched => None,
        }
    }
}

impl RateLimitLayer {
    fn endpoint_of(&self, parts: &Parts) -> Endpoint {
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
fn peer_ip(parts: &Parts) -> Option<IpAddr> {
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
fn peer_ip(_parts: &Parts) -> Option<IpAddr> {
    None
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let user_id = self.layer.user_id.as_ref().and_then(|f| f(&parts));
        let ip = if user_id.is_none() {
            peer_ip(&parts).map(|peer| self.layer.client_ip.client(&parts, peer))
        } else {
            None
        };
        let endpoint = self.layer.endpoint_of(&parts);
        let cost = self.layer.cost.as_ref().map_or(1, |f| f(&parts));
        let request = Request::from_parts(parts, body);
        let span = tracing::debug_span!(
            "rate_limit",
            tier = tracing::field::Empty,
            decision = tracing::field::Empty
        );
        // In memory the decision is made here and now: no boxed future, no service clone.
        let check = CheckRequest::new(user_key(&user_id, ip), endpoint.as_str()).with_cost(cost);
        let decided = span.in_scope(|| self.layer.limiter.check_now(check));
        if let Some(decision) = decided {
            record_on(&span, &decision);
            if !decision.allowed() {
                return ResponseFuture::rejected(reject(&decision, self.layer.rejection.as_ref()));
            }
            return ResponseFuture::inner(self.inner.call(request), decision);
        }
        // A store that waits (Redis): keep the service that poll_ready made ready, leave a
        // fresh clone in its place, and decide in a boxed future.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limiter = self.layer.limiter.clone();
        let rejection = self.layer.rejection.clone();
        let recorder = span.clone();
        let future = async move {
            let decision = limiter
                .check_request(
                    CheckRequest::new(user_key(&user_id, ip), endpoint.as_str()).with_cost(cost),
                )
                .await;
            record_on(&recorder, &decision);
            if !decision.allowed() {
                return Ok(reject(&decision, rejection.as_ref()));
            }
            let response = inner.call(request).await?;
            Ok(with_headers(response, &decision))
        };
        ResponseFuture::waiting(Box::pin(tracing::Instrument::instrument(future, span)))
    }
}

fn record_on(span: &tracing::Span, decision: &Decision) {
    let (d, tier) = crate::observe::labels(decision);
    span.record("decision", d);
    span.record("tier", tier);
}

fn user_key(user_id: &Option<String>, ip: Option<IpAddr>) -> UserKey<'_> {
    match (user_id, ip) {
        (Some(id), _) => UserKey::Id(id),
        (None, Some(ip)) => UserKey::Ip(ip),
        (None, None) => UserKey::Anonymous,
    }
}

fn with_headers<B>(response: Response<B>, decision: &Decision) -> Response<ResponseBody<B>> {
    let (mut parts, body) = response.into_parts();
    decision.write_headers(&mut parts.headers);
    Response::from_parts(parts, ResponseBody::inner(body))
}

/// The 429 (or the user's own rejection), with the rate-limit headers.
fn reject<B>(decision: &Decision, custom: Option<&RejectFn>) -> Response<ResponseBody<B>> {
    let response = match custom {
        Some(f) => f(decision),
        None => problem(decision),
    };
    let (mut parts, body) = response.into_parts();
    decision.write_headers(&mut parts.headers);
    Response::from_parts(parts, ResponseBody::rejection(body))
}

/// RFC 9457 `application/problem+json`, naming the violated policy (the tier).
fn problem(decision: &Decision) -> Response<Bytes> {
    let tier = decision.blocked_by().map_or("rate", |t| t.as_str());
    let retry = decision.retry_after_secs();
    let detail = match decision.cost_limit {
        Some(limit) => format!(
            "This request costs {} units, more than the {tier} limit of {limit}: \
             it can never be admitted.",
            decision.cost()
        ),
        None => format!("The {tier} rate limit is reached; retry after {retry} s."),
    };
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\
         \"detail\":\"{detail}\",\"policy\":\"{tier}\",\"retry_after\":{retry},\
         \"cost\":{}}}",
        decision.cost()
    );
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

pin_project! {
    /// The future of [`RateLimit`]: the inner service's future (the check is already made, in
    /// memory), a ready 429, or, with a store that waits, the check and then the inner service.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: FutureKind<F, B, E>,
    }
}

pin_project! {
    #[project = FutureKindProj]
    enum FutureKind<F, B, E> {
        Rejected { response: Option<Response<ResponseBody<B>>> },
        Inner { #[pin] future: F, decision: Decision },
        Waiting { future: BoxedResponse<B, E> },
    }
}

type BoxedResponse<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<ResponseBody<B>>, E>> + Send>>;

impl<F, B, E> ResponseFuture<F, B, E> {
    fn rejected(response: Response<ResponseBody<B>>) -> Self {
        Self {
            kind: FutureKind::Rejected {
                response: Some(response),
            },
        }
    }

    fn inner(future: F, decision: Decision) -> Self {
        Self {
            kind: FutureKind::Inner { future, decision },
        }
    }

    fn waiting(future: BoxedResponse<B, E>) -> Self {
        Self {
            kind: FutureKind::Waiting { future },
        }
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            FutureKindProj::Rejected { response } => {
                Poll::Ready(Ok(response.take().expect("polled after completion")))
            }
            FutureKindProj::Inner { future, decision } => {
                let response = std::task::ready!(future.poll(cx))?;
                Poll::Ready(Ok(with_headers(response, decision)))
            }
            FutureKindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

pin_project! {
    /// The response body of [`RateLimit`]: the inner service's body, or the 429's short text.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Rejection { data: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    fn rejection(data: Bytes) -> Self {
        // An empty body is at its end at once (a header-only response, as gRPC statuses are).
        let data = (!data.is_empty()).then_some(data);
        Self {
            kind: Kind::Rejection { data },
        }
    }
}

impl<B: Default> Default for ResponseBody<B> {
    fn default() -> Self {
        Self::inner(B::default())
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Rejection { .. } => "rejection",
        };
        f.debug_struct("ResponseBody").field("kind", &kind).finish()
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Rejection { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Rejection { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Rejection { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
