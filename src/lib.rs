#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

mod client_ip;
mod clock;
pub mod config;
mod connect_error;
mod decision;
pub mod key;
mod layer;
mod limiter;
pub mod observe;
mod redis_url;
pub mod store;

pub use crate::clock::{Clock, ManualClock, SystemClock};
pub use crate::config::{
    ConfigError, Plan, RateLimitConfig, RateLimitConfigBuilder, Recovery, RedisConfig, RouteLimits,
    TimeSource,
};
pub use crate::connect_error::ConnectError;
pub use crate::decision::{
    Decision, HeaderStyle, Tier, RATELIMIT, RATELIMIT_POLICY, X_RATELIMIT_REMAINING,
};
pub use crate::layer::{RateLimit, RateLimitLayer, ResponseBody, ResponseFuture};
pub use crate::limiter::{CheckRequest, RateLimiter, RateLimiterBuilder, UserKey};
pub use crate::store::Backend;
/// A network of trusted proxies, for
/// [`RateLimitLayer::trusted_proxies`](crate::RateLimitLayer::trusted_proxies): the
/// [`ipnet`](https://docs.rs/ipnet) crate's type, re-exported so that no extra dependency is
/// needed (`"10.0.0.0/8".parse::<IpNet>()`).
pub use ipnet::IpNet;
