//! Exact three-tier sliding-window rate limiting for [tower] services and [axum] routers: **per
//! user, per endpoint and global**, in process memory or on Redis shared by many instances,
//! still answering correctly when Redis fails.
//!
//! - **Exact.** A sliding log, not an approximation: no tier ever admits more than its limit
//!   within any window, however many threads, tasks or instances check at once.
//! - **One layer in axum.** The endpoint is the route *template* (`/api/v1/items/{id}`), never
//!   the raw path; `X-RateLimit-Remaining` and `Retry-After` on every limited response, a 429
//!   with an RFC 9457 problem body when denied.
//! - **Redis when you need it.** One atomic script, one round trip per check; if Redis is
//!   unreachable, errors or hangs, the limiter swaps to memory within the command timeout, and
//!   no request fails because of it.
//!
//! # Quick start
//!
//! ```toml
//! [dependencies]
//! tiered-ratelimit = "0.1"
//! axum = "0.8"
//! tokio = { version = "1", features = ["macros", "rt-multi-thread", "net"] }
//! ```
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use std::time::Duration;
//!
//! use axum::{routing::get, Router};
//! use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let config = RateLimitConfig::builder()
//!         .window(Duration::from_secs(60))
//!         .user_limit(50) // per user id (or client IP), per window
//!         .endpoint_limit(100) // per route template, per window
//!         .global_limit(1000) // in all, per window
//!         .build()?; // a bad value is a ConfigError naming the field
//!
//!     let app = Router::new()
//!         .route("/api/v1/items/{id}", get(|| async { "item" }))
//!         // The user id: a header your authentication in front sets (read without an
//!         // allocation); `.user_id(|parts| ...)` takes a closure instead.
//!         .route_layer(RateLimitLayer::new(config).user_id_header("x-user-id"));
//!
//!     // With the client's address, requests without a user id are limited by client IP.
//!     let listener = tokio::net::TcpListener::bind("0.0.0.0:3000").await?;
//!     axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//!     Ok(())
//! }
//! ```
//!
//! Served without `into_make_service_with_connect_info::<SocketAddr>()`, a request without a
//! user id has no address to be limited by: the user tier is skipped for it, and the layer logs
//! one warning the first time. On Redis (feature `redis`), add
//! [`.redis_url("redis://127.0.0.1:6379")`](RateLimitConfigBuilder::redis_url) to the builder;
//! nothing else changes.
//!
//! # The types you need
//!
//! | you want to | use |
//! |---|---|
//! | set the limits and the window, in code or from a file (serde) | [`RateLimitConfig`] and its [`builder`](RateLimitConfig::builder) |
//! | limit an axum router, or any tower service | [`RateLimitLayer`] |
//! | check without HTTP (a job queue, a test, your own middleware) | [`RateLimiter`] |
//! | read what a check decided, per tier | [`Decision`], [`Tier`] |
//! | operate it live: new limits, anyone's usage, blocks, waiting | [`RateLimiter::reconfigure`], [`RateLimiter::usage`], [`RateLimiter::block`], [`RateLimiter::acquire`] |
//! | admin routes (usage, reset, block) behind a token | [`admin`] (feature `admin`) |
//!
//! In tests, [`ManualClock`] makes every check exact and sleep-free; a custom store implements
//! [`store::Store`].
//!
//! # Guides
//!
//! - [`guides::policies`]: overrides per route and per plan, request cost, the headers (legacy
//!   and IETF), the 429 body, client IP behind proxies, shadow mode, metrics, recovery, gRPC.
//! - [`guides::redis`]: URLs, the script, keys, time, the fallback, TLS, strict start and
//!   configuration errors, Redis Cluster, memory per entry.
//! - [`guides::operations`]: live `reconfigure`, `usage` without recording, blocks that hold on
//!   every instance, `acquire` (waiting), the admin routes.
//! - [`guides::architecture`]: a request's path through layer, limiter, algorithm and store.
//! - [`guides::benchmarks`]: measured against governor, tower_governor and redis-benchmark, with
//!   the commands.
//!
//! # The contract
//!
//! - **Sliding log.** Each key keeps the times (µs) of its admitted requests. A check at `now`
//!   drops entries older than `now - window` (an entry at *exactly* `now - window` still
//!   counts), denies when the count has reached the limit, else admits and records `now`.
//! - **Tiers**, most specific first: user, endpoint, global. The first tier at its limit
//!   blocks; a denied request is recorded in **no** tier. A limit of 0 switches a tier off.
//! - **Headers.** `X-RateLimit-Remaining`: the smallest capacity left over the tiers that
//!   applied; `Retry-After`: whole seconds, rounded up, until the blocking tier has room (`0`
//!   when allowed, at least `1` on a 429, and what enforcement would have said on a request
//!   let through only by [shadow mode](RateLimitConfigBuilder::shadow)). A request no tier
//!   applies to carries no rate-limit header.
//! - **Redis failure.** An error or timeout swaps the limiter, atomically and once, to memory
//!   (or back and forth, with [recovery](RateLimitConfigBuilder::redis_recovery) on); the
//!   request that met the failure is answered from memory.
//! - **Memory.** Idle keys are evicted by the store itself, and the number of tracked keys is
//!   capped: at the cap, new keys are denied (it fails closed, never open).
//!
//! # The public API, deliberately
//!
//! **Names.** The middleware follows tower's convention of a layer and the service it makes:
//! [`RateLimitLayer`] makes [`RateLimit`] services (as `tower_http`'s `TimeoutLayer` makes
//! `Timeout`), so a reader who knows tower knows which is which; the names stay. The logic
//! without HTTP is the [`RateLimiter`], and its settings the [`RateLimitConfig`]. A "reset" is
//! always forgetting a key ([`RateLimiter::reset_user`], [`RateLimiter::reset_endpoint`],
//! [`store::Store::reset`]); how long until a tier has room again is a *retry* or a *wait*
//! ([`Decision::retry_after`]), never a reset.
//!
//! **One path per item.** Everything an application types is at the crate root, and only
//! there; the modules hold what belongs to them alone.
//!
//! | item | what for |
//! |---|---|
//! | [`RateLimitConfig`], [`RateLimitConfigBuilder`], [`ConfigError`] | limits, window, Redis settings; a bad value is an error naming the field |
//! | [`RateLimitLayer`] | the tower/axum middleware (its service [`RateLimit`], future [`ResponseFuture`] and body [`ResponseBody`] are named only in type signatures; [`BodyMode`], [`WrappedBody`] and [`InnerBody`] say which body its responses carry) |
//! | [`RateLimiter`], [`RateLimiterBuilder`] | checking without HTTP; a chosen clock, store, listener or plan resolver; [`RateLimiter::try_connect`] and its [`ConnectError`] for a strict start |
//! | [`Decision`], [`Tier`] | what a check decided, per tier |
//! | [`CheckRequest`], [`UserKey`] | a check with a cost, an IP user, or no user |
//! | [`Usage`], [`BlockTarget`], [`BlockError`] | a caller's usage; what a block refuses, and why one did not land |
//! | [`HeaderStyle`], [`headers`] | which rate-limit headers, and rendering them without the layer |
//! | [`ManualClock`], [`Clock`], [`SystemClock`] | time, and moving it in tests |
//! | [`RedisConfig`], [`TimeSource`], [`Recovery`], [`RouteLimits`], [`Plan`], [`IpNet`], [`Backend`] | settings and values those take |
//!
//! **What a store author implements**: [`store::Store`], deciding a [`store::StoreRequest`]
//! (its [`store::TierCheck`]s) into a [`store::StoreOutcome`] or a [`store::StoreError`]. These
//! types are `#[non_exhaustive]` and built with their constructors, so fields can be added
//! without breaking stores. The built-in stores are there too: [`store::MemoryStore`],
//! [`store::RedisStore`], [`store::FallbackStore`]. ([`Backend`] is also at `store::Backend`,
//! since [`store::Store::backend`] answers one.)
//!
//! **Modules for the rest**: [`config`] (only the bounds, such as
//! [`MAX_LIMIT`](config::MAX_LIMIT), and [`parse_duration`](config::parse_duration) for
//! command lines that follow the file's rule; the configuration types are at the root), [`key`]
//! (how ids become keys, to find them in Redis), [`observe`] (the metric names), [`headers`],
//! [`admin`] (the admin routes) and the [`guides`].
//!
//! # Features
//!
//! | feature | default | brings |
//! |---|---|---|
//! | `axum` | yes | `MatchedPath` route templates and `ConnectInfo` client addresses in the layer |
//! | `redis` | yes | [`store::RedisStore`] (fred 10) and the one-time fallback to memory; Unix sockets on Unix |
//! | `tls` | yes | `rediss://` URLs: rustls with the ring provider, a CA file, mutual TLS (implies `redis`) |
//! | `admin` | yes | [`admin`]: the admin routes (implies `axum`; adds serde_json) |
//!
//! Without `axum` the layer still works on any tower service; name endpoints with
//! [`RateLimitLayer::endpoint`].
//!
//! [tower]: https://docs.rs/tower
//! [axum]: https://docs.rs/axum
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

#[cfg(feature = "admin")]
pub mod admin;
mod algorithm;
mod block;
mod client_ip;
mod clock;
pub mod config;
mod connect_error;
mod decision;
pub mod guides;
mod header_style;
pub mod key;
mod layer;
mod limiter;
pub mod observe;
mod plan;
mod redis_url;
mod request;
mod route_keys;
pub mod shards;
pub mod store;
#[cfg(test)]
mod test_rng;
mod tier;

/// Rendering a [`Decision`] into rate-limit headers (the layer does it by itself).
pub mod headers {
    #[doc(inline)]
    pub use crate::layer::headers::*;
}

#[doc(inline)]
pub use crate::block::{BlockError, BlockTarget, IPV6_BLOCK_PREFIX, MAX_BLOCK};
#[doc(inline)]
pub use crate::clock::{Clock, ManualClock, SystemClock};
#[doc(inline)]
pub use crate::config::builder::RateLimitConfigBuilder;
#[doc(inline)]
pub use crate::config::error::ConfigError;
#[doc(inline)]
pub use crate::config::redis::{Recovery, RedisConfig, TimeSource};
#[doc(inline)]
pub use crate::config::value::{Plan, RateLimitConfig, RouteLimits};
#[doc(inline)]
pub use crate::connect_error::ConnectError;
#[doc(inline)]
pub use crate::decision::Decision;
#[doc(inline)]
pub use crate::header_style::HeaderStyle;
#[doc(inline)]
pub use crate::layer::{
    BodyMode, InnerBody, RateLimit, RateLimitLayer, ResponseBody, ResponseFuture, WrappedBody,
};
#[doc(inline)]
pub use crate::limiter::{RateLimiter, RateLimiterBuilder, Usage};
#[doc(inline)]
pub use crate::request::{CheckRequest, UserKey};
#[doc(inline)]
pub use crate::store::Backend;
#[doc(inline)]
pub use crate::tier::Tier;
/// A network of trusted proxies, for
/// [`RateLimitLayer::trusted_proxies`](crate::RateLimitLayer::trusted_proxies): the
/// [`ipnet`](https://docs.rs/ipnet) crate's type, re-exported so that no extra dependency is
/// needed (`"10.0.0.0/8".parse::<IpNet>()`).
#[doc(inline)]
pub use ipnet::IpNet;
