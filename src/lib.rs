#![doc = include_str!("../README.md")]
//!
//! ## The public API, deliberately
//!
//! **What an application types** (all at the crate root):
//!
//! | item | what for |
//! |---|---|
//! | [`RateLimitConfig`], [`RateLimitConfigBuilder`], [`ConfigError`] | limits, window, Redis settings; a bad value is an error naming the field |
//! | [`RateLimitLayer`] | the tower/axum middleware (its service [`RateLimit`], future [`ResponseFuture`] and body [`ResponseBody`] are named only in type signatures) |
//! | [`RateLimiter`], [`RateLimiterBuilder`] | checking without HTTP; a chosen clock, store, listener or plan resolver; [`RateLimiter::try_connect`] and its [`ConnectError`] for a strict start |
//! | [`Decision`], [`Tier`] | what a check decided, per tier |
//! | [`CheckRequest`], [`UserKey`] | a check with a cost, an IP user, or no user |
//! | [`HeaderStyle`], [`headers`] | which rate-limit headers, and rendering them without the layer |
//! | [`ManualClock`], [`Clock`], [`SystemClock`] | time, and moving it in tests |
//! | [`RedisConfig`], [`TimeSource`], [`Recovery`], [`RouteLimits`], [`Plan`], [`IpNet`], [`Backend`] | settings and values those take |
//!
//! **What a store author implements**: [`store::Store`], deciding a [`store::StoreRequest`]
//! (its [`store::TierCheck`]s) into a [`store::StoreOutcome`] or a [`store::StoreError`]. These
//! types are `#[non_exhaustive]` and built with their constructors, so fields can be added
//! without breaking stores. The built-in stores are there too: [`store::MemoryStore`],
//! [`store::RedisStore`], [`store::FallbackStore`].
//!
//! **Modules for the rest**: [`config`] (bounds such as `MAX_LIMIT`, `parse_duration` for
//! command lines that follow the file's rule), [`key`] (how ids become keys, to find them in
//! Redis), [`observe`] (the metric names).
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

mod algorithm;
mod client_ip;
mod clock;
pub mod config;
mod connect_error;
mod decision;
mod header_style;
pub mod key;
mod layer;
mod limiter;
pub mod observe;
mod plan;
mod redis_url;
mod request;
pub mod store;
mod tier;

/// Rendering a [`Decision`] into rate-limit headers (the layer does it by itself).
pub mod headers {
    #[doc(inline)]
    pub use crate::layer::headers::*;
}

pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use crate::config::{
    ConfigError, Plan, RateLimitConfig, RateLimitConfigBuilder, Recovery, RedisConfig, RouteLimits,
    TimeSource,
};
pub use crate::connect_error::ConnectError;
pub use crate::decision::Decision;
pub use crate::header_style::HeaderStyle;
pub use crate::layer::{RateLimit, RateLimitLayer, ResponseBody, ResponseFuture};
pub use crate::limiter::{RateLimiter, RateLimiterBuilder};
pub use crate::request::{CheckRequest, UserKey};
pub use crate::store::Backend;
pub use crate::tier::Tier;
/// A network of trusted proxies, for
/// [`RateLimitLayer::trusted_proxies`](crate::RateLimitLayer::trusted_proxies): the
/// [`ipnet`](https://docs.rs/ipnet) crate's type, re-exported so that no extra dependency is
/// needed (`"10.0.0.0/8".parse::<IpNet>()`).
pub use ipnet::IpNet;
