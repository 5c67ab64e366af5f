#![doc = include_str!("../README.md")]
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
