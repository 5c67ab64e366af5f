//! What is wrong with a configuration, naming the field at fault.

use std::time::Duration;

/// What is wrong with a configuration. [`field`](Self::field) names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The window is zero (or under the limiter's 1 µs resolution).
    #[error("window: must be at least 1µs")]
    ZeroWindow,
    /// The window is longer than [`MAX_WINDOW`](super::MAX_WINDOW).
    #[error("window: {0:?} is longer than the maximum of 100 years (timestamps would overflow)")]
    WindowTooLarge(Duration),
    /// A default limit is above [`MAX_LIMIT`](super::MAX_LIMIT).
    #[error("{field}: {value} is above the maximum of 2^50 (1125899906842624)")]
    LimitTooLarge {
        /// `user_limit`, `endpoint_limit` or `global_limit`.
        field: &'static str,
        /// The value given.
        value: u64,
    },
    /// A route override's limit is above [`MAX_LIMIT`](super::MAX_LIMIT). The message names
    /// the route, quoted: `routes.user_limit (route "/items/{id}"): ...`.
    #[error(
        "routes.{field} (route {route:?}): {value} is above the maximum of 2^50 (1125899906842624)"
    )]
    RouteLimitTooLarge {
        /// The route's template.
        route: String,
        /// `user_limit` or `endpoint_limit`.
        field: &'static str,
        /// The value given.
        value: u64,
    },
    /// A plan's user limit is above [`MAX_LIMIT`](super::MAX_LIMIT). The message names the
    /// plan, quoted: `plans.user_limit (plan "pro"): ...`.
    #[error(
        "plans.user_limit (plan {plan:?}): {value} is above the maximum of 2^50 (1125899906842624)"
    )]
    PlanLimitTooLarge {
        /// The plan's name.
        plan: String,
        /// The value given.
        value: u64,
    },
    /// The key prefix is empty, too long, or holds a character other than printable ASCII
    /// without spaces and braces.
    #[error("key_prefix: {0}")]
    InvalidKeyPrefix(&'static str),
    /// The cap on tracked keys is below [`MIN_TRACKED_KEYS`](super::MIN_TRACKED_KEYS) (the value
    /// given): a request may need a user key and an endpoint key at once, so a smaller cap
    /// would admit no such request, ever.
    #[error(
        "max_tracked_keys: {0} is below the minimum of {min} (a request may need a user key and \
         an endpoint key at once)",
        min = super::MIN_TRACKED_KEYS
    )]
    MaxTrackedKeysTooSmall(usize),
    /// The Redis URL is empty or not one fred accepts.
    #[error("redis.url: {0}")]
    InvalidRedisUrl(String),
    /// A Redis timeout is zero.
    #[error("{0}: must be greater than zero")]
    ZeroTimeout(&'static str),
    /// A Redis timeout is outside its range: `redis.command_timeout` 1 ms to 60 s,
    /// `redis.connect_timeout` 1 ms to 5 minutes.
    #[error("{field}: {value:?} is outside the accepted range {min:?} to {max:?}")]
    TimeoutOutOfRange {
        /// `redis.command_timeout` or `redis.connect_timeout`.
        field: &'static str,
        /// The value given.
        value: Duration,
        /// The shortest accepted.
        min: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// A TLS URL (`rediss://`, `rediss-cluster://`, `valkeys://`, ...) in a build without the
    /// `tls` feature. Refused rather than connecting in plaintext.
    #[error(
        "redis.url: a TLS URL needs the `tls` feature, which this build lacks \
         (refusing to connect in plaintext)"
    )]
    TlsFeatureDisabled,
    /// A TLS file is set but the URL does not use TLS (it would be ignored, and the
    /// connection be plaintext): use `rediss://`.
    #[error("{0}: set, but redis.url is not a TLS URL (use rediss://, rediss-cluster://, ...)")]
    TlsFileWithoutTls(&'static str),
    /// Only one of the client certificate and its key is set.
    #[error("{0}: missing (mutual TLS needs both redis.tls_cert_file and redis.tls_key_file)")]
    IncompleteClientCert(&'static str),
    /// A user is put on a plan that is not defined.
    #[error("users.{user}: plan {plan:?} is not defined in plans")]
    UnknownPlan {
        /// The user id.
        user: String,
        /// The plan named.
        plan: String,
    },
    /// The recovery's longest backoff is shorter than its first.
    #[error("redis.recovery.max_backoff: must be at least redis.recovery.initial_backoff")]
    BackoffBelowInitial,
    /// A shard count is outside 1 to [`MAX_SHARDS`](super::MAX_SHARDS).
    #[error("{field}: {value} is outside the accepted range 1 to 64")]
    ShardsOutOfRange {
        /// `redis.global_shards`.
        field: &'static str,
        /// The value given.
        value: u32,
    },
    /// A Redis URL was given but the crate was built without the `redis` feature.
    #[error("redis.url: this build of tiered-ratelimit has no `redis` feature")]
    RedisFeatureDisabled,
    /// [`RateLimiter::reconfigure`](crate::RateLimiter::reconfigure) was given a different
    /// store setting (the Redis settings, the key prefix, the key cap): the store is built
    /// once, from the first configuration.
    #[error("{0}: cannot change on a running limiter (its store was built from it); build a new limiter for a new store")]
    NeedsNewLimiter(&'static str),
    /// A route override is named by an empty template: no request is ever counted under an
    /// empty endpoint, so it would never apply.
    #[error("routes: a route's template is empty (it would never match a request)")]
    EmptyRoute,
}

impl ConfigError {
    /// The name of the field at fault, as in the serde form (`window`, `user_limit`, `redis.url`, ...).
    /// For a route's or a plan's limit, the field within any route or plan
    /// (`routes.user_limit`, `plans.user_limit`); the error's message and its `route` or
    /// `plan` name which one.
    pub fn field(&self) -> &'static str {
        match self {
            Self::RouteLimitTooLarge { field, .. } => match *field {
                "endpoint_limit" => "routes.endpoint_limit",
                _ => "routes.user_limit",
            },
            Self::PlanLimitTooLarge { .. } => "plans.user_limit",
            Self::ZeroWindow | Self::WindowTooLarge(_) => "window",
            Self::LimitTooLarge { field, .. } | Self::ShardsOutOfRange { field, .. } => field,
            Self::InvalidKeyPrefix(_) => "key_prefix",
            Self::MaxTrackedKeysTooSmall(_) => "max_tracked_keys",
            Self::InvalidRedisUrl(_) | Self::RedisFeatureDisabled => "redis.url",
            Self::ZeroTimeout(field)
            | Self::TimeoutOutOfRange { field, .. }
            | Self::TlsFileWithoutTls(field)
            | Self::IncompleteClientCert(field)
            | Self::NeedsNewLimiter(field) => field,
            Self::TlsFeatureDisabled => "redis.url",
            Self::BackoffBelowInitial => "redis.recovery.max_backoff",
            Self::UnknownPlan { .. } => "users",
            Self::EmptyRoute => "routes",
        }
    }
}
