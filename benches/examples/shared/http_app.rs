//! The seven servers of the HTTP comparison, shared by `bench_http` (served over TCP for wrk)
//! and `count_http` (called in process, for callgrind): an axum hello-world (`GET /` answers
//! `hello`) bare, bare writing our two headers, behind our `RateLimitLayer` (answering its own
//! body, or axum's with `inner_body`; with `route_layer`, or on the handler), or behind
//! `tower_governor` (adding no headers, or its own two with `use_headers`), with limits never
//! reached.

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
        Mode::Governor | Mode::GovernorHeaders => {
            // Keyed by the `x-user-id` header; per_nanosecond(1): one cell back every
            // nanosecond (per_second(n) would be one every n seconds); a burst of u32::MAX
            // cells: 4.3 s of credit, never used up.
            let mut builder = GovernorConfigBuilder::default().key_extractor(UserHeader);
            builder.per_nanosecond(1).burst_size(u32::MAX);
            const ZERO_QUOTA: &str = "tower_governor: zero period or burst";
            if mode == Mode::Governor {
                let config = builder.finish().ok_or(ZERO_QUOTA)?;
                router.route_layer(GovernorLayer {
                    config: Arc::new(config),
                })
            } else {
                let config = builder.use_headers().finish().ok_or(ZERO_QUOTA)?;
                router.route_layer(GovernorLayer {
                    config: Arc::new(config),
                })
            }
        }
    })
}
