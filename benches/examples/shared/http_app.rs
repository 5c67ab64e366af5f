//! The ten servers of the HTTP comparison, shared by `bench_http` (served over TCP for wrk)
//! and `count_http` (called in process, for callgrind): an axum hello-world (`GET /` answers
//! `hello`) bare, bare writing our two headers, behind our `RateLimitLayer` (answering its own
//! body, or axum's with `inner_body`; with `route_layer`, or on the handler), behind
//! `tower_governor` (adding no headers, or its own two with `use_headers`; with `route_layer`,
//! or on the handler), with limits never reached, or behind the floor: a layer that checks nothing (see [`Floor`]).

use std::sync::Arc;
use std::time::Duration;

use axum::handler::Handler;
use axum::routing::get;
use axum::Router;
use http::Request;
use tiered_ratelimit::{ManualClock, RateLimitConfig, RateLimitLayer, RateLimiter};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

/// Limits never reached: every request takes the admitted path.
const HUGE: u64 = 1 << 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Bare,
    /// Bare axum whose handler writes the same two headers as ours (the baseline).
    Headers,
    Ours,
    /// Ours answering axum's own body (`RateLimitLayer::inner_body`).
    Inner,
    /// `Inner` on the handler (axum's `Handler::layer`) instead of with `route_layer`.
    InnerHandler,
    Governor,
    /// tower_governor with `use_headers()`: it then writes two headers of its own on every
    /// admitted response (`x-ratelimit-limit`, `x-ratelimit-remaining`), as ours writes two.
    GovernorHeaders,
    /// `Governor` on the handler (axum's `Handler::layer`), as `InnerHandler`.
    GovernorHandler,
    /// The floor of any limiter in ours' place: [`FloorLayer`] with `route_layer`.
    Floor,
    /// The floor on the handler (axum's `Handler::layer`), as `InnerHandler`.
    FloorHandler,
}

impl Mode {
    /// The mode named `name` on the command line.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "bare" => Self::Bare,
            "headers" => Self::Headers,
            "ours" => Self::Ours,
            "inner" => Self::Inner,
            "inner_handler" => Self::InnerHandler,
            "governor" => Self::Governor,
            "governor_headers" => Self::GovernorHeaders,
            "governor_handler" => Self::GovernorHandler,
            "floor" => Self::Floor,
            "floor_handler" => Self::FloorHandler,
            _ => return None,
        })
    }
}

/// The user id for tower_governor: the `x-user-id` header (ours reads the same header with
/// `user_id_header`, borrowed).
fn header_user(headers: &http::HeaderMap) -> Option<String> {
    let id = headers.get("x-user-id")?.to_str().ok()?;
    (!id.is_empty()).then(|| id.to_owned())
}

/// tower_governor's key: the `x-user-id` header, as our user tier sees it.
#[derive(Clone, Copy, Debug)]
struct UserHeader;

impl KeyExtractor for UserHeader {
    type Key = String;

    fn extract<T>(&self, req: &Request<T>) -> Result<String, GovernorError> {
        header_user(req.headers()).ok_or(GovernorError::UnableToExtractKey)
    }
}

/// The server of `mode`; ours on `clock` when given (count_http: a manual clock, so that when
/// a log trims does not depend on how fast the harness runs), else on the system clock.
pub fn app_with_clock(mode: Mode, clock: Option<ManualClock>) -> Result<Router, String> {
    let router = Router::new().route("/", get(|| async { "hello" }));
    Ok(match mode {
        Mode::Bare => router,
        Mode::Headers => Router::new().route(
            "/",
            get(|| async {
                // The two headers ours sends on an admitted request, a remaining count of the
                // same size (limits of 2^40, as ours).
                let remaining = http::HeaderValue::from(HUGE - 1);
                (
                    [
                        (
                            http::HeaderName::from_static("x-ratelimit-remaining"),
                            remaining,
                        ),
                        (
                            http::header::RETRY_AFTER,
                            http::HeaderValue::from_static("0"),
                        ),
                    ],
                    "hello",
                )
            }),
        ),
        Mode::Ours | Mode::Inner | Mode::InnerHandler => {
            let config = RateLimitConfig::builder()
                .window(Duration::from_secs(1))
                .user_limit(HUGE)
                .endpoint_limit(HUGE)
                .global_limit(HUGE)
                .build()
                .map_err(|e| format!("config: {e}"))?;
            let limiter = match clock {
                Some(clock) => RateLimiter::builder(config).clock(clock).build(),
                None => RateLimiter::new(config),
            };
            let layer = RateLimitLayer::from_limiter(limiter).user_id_header("x-user-id");
            match mode {
                Mode::Inner => router.route_layer(layer.inner_body()),
                Mode::InnerHandler => {
                    Router::new().route("/", get((|| async { "hello" }).layer(layer.inner_body())))
                }
                _ => router.route_layer(layer),
            }
        }
        Mode::Floor => router.route_layer(FloorLayer),
        Mode::FloorHandler => {
            Router::new().route("/", get((|| async { "hello" }).layer(FloorLayer)))
        }
        Mode::Governor | Mode::GovernorHeaders | Mode::GovernorHandler => {
            // Keyed by the `x-user-id` header; per_nanosecond(1): one cell back every
            // nanosecond (per_second(n) would be one every n seconds); a burst of u32::MAX
            // cells: 4.3 s of credit, never used up.
            let mut builder = GovernorConfigBuilder::default().key_extractor(UserHeader);
            builder.per_nanosecond(1).burst_size(u32::MAX);
            const ZERO_QUOTA: &str = "tower_governor: zero period or burst";
            match mode {
                Mode::GovernorHeaders => {
                    let config = builder.use_headers().finish().ok_or(ZERO_QUOTA)?;
                    router.route_layer(GovernorLayer {
                        config: Arc::new(config),
                    })
                }
                _ => {
                    let layer = GovernorLayer {
                        config: Arc::new(builder.finish().ok_or(ZERO_QUOTA)?),
                    };
                    if mode == Mode::GovernorHandler {
                        Router::new().route("/", get((|| async { "hello" }).layer(layer)))
                    } else {
                        router.route_layer(layer)
                    }
                }
            }
        }
    })
}

/// The floor: a layer that does what a rate limiter in ours' place must do besides its check,
/// and nothing more. It reads what ours reads (the `x-user-id` header, borrowed, and the
/// route's template from `MatchedPath`), checks nothing, and writes the two headers ours writes
/// on an admitted request, as the cheapest values there are: static ones, cloned (ours formats
/// a remaining count of 13 digits, as `headers` does). No limiter that reads the user and the
/// route and writes those headers, with a check of any cost, can take fewer instructions than
/// this in ours' place.
#[derive(Clone, Copy, Debug)]
pub struct FloorLayer;

impl<S> tower::Layer<S> for FloorLayer {
    type Service = Floor<S>;

    fn layer(&self, inner: S) -> Floor<S> {
        Floor { inner }
    }
}

/// [`FloorLayer`]'s service.
#[derive(Clone, Debug)]
pub struct Floor<S> {
    inner: S,
}

impl<S, B, R> tower::Service<Request<B>> for Floor<S>
where
    S: tower::Service<Request<B>, Response = http::Response<R>>,
{
    type Response = http::Response<R>;
    type Error = S::Error;
    type Future = FloorFuture<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // What ours reads, as ours reads it (a header name made once, the value's bytes as
        // UTF-8); `black_box`, so that reading them is not optimised away.
        static USER: http::HeaderName = http::HeaderName::from_static("x-user-id");
        let user = request
            .headers()
            .get(&USER)
            .and_then(|v| std::str::from_utf8(v.as_bytes()).ok());
        let route = request
            .extensions()
            .get::<axum::extract::MatchedPath>()
            .map(|p| p.as_str());
        std::hint::black_box((user, route));
        FloorFuture {
            inner: self.inner.call(request),
        }
    }
}

pin_project_lite::pin_project! {
    /// [`Floor`]'s response future: the inner one, then the two headers.
    pub struct FloorFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F, R, E> std::future::Future for FloorFuture<F>
where
    F: std::future::Future<Output = Result<http::Response<R>, E>>,
{
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        static REMAINING: http::HeaderName = http::HeaderName::from_static("x-ratelimit-remaining");
        static COUNT: http::HeaderValue = http::HeaderValue::from_static("1099511627775");
        static ZERO: http::HeaderValue = http::HeaderValue::from_static("0");
        let mut response = std::task::ready!(self.project().inner.poll(cx))?;
        let headers = response.headers_mut();
        headers.insert(REMAINING.clone(), COUNT.clone());
        headers.insert(http::header::RETRY_AFTER, ZERO.clone());
        std::task::Poll::Ready(Ok(response))
    }
}
