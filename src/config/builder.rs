//! [`RateLimitConfigBuilder`]: the configuration in code, with the defaults of the file form.

use std::path::PathBuf;
use std::time::Duration;

use super::{
    ConfigError, Plan, RateLimitConfig, RawConfig, Recovery, RedisConfig, RouteLimits, TimeSource,
};
use crate::header_style::HeaderStyle;
use crate::tier::Tier;

/// Builds a [`RateLimitConfig`]; [`build`](Self::build) validates it.
///
/// It starts from the defaults of the file form (what an empty file gives), and fills in the
/// same raw form serde reads, so a setting means the same in code and in a file.
///
/// ```
/// use std::time::Duration;
/// use tiered_ratelimit::{ConfigError, RateLimitConfig, RouteLimits, Tier};
///
/// let config = RateLimitConfig::builder()
///     .window(Duration::from_secs(60))
///     .user_limit(50)
///     .global_limit(1000)
///     .route("/login", RouteLimits { user_limit: Some(5), endpoint_limit: None })
///     .plan("premium", 500)
///     .user_plan("alice", "premium")
///     .shadow_tier(Tier::Global) // try the global limit out before enforcing it
///     .build()?;
/// assert_eq!(config.route("/login").and_then(|r| r.user_limit), Some(5));
/// assert_eq!(config.plan_of("alice").map(|p| p.user_limit), Some(500));
/// assert!(config.is_shadow(Tier::Global));
///
/// // A bad value fails here, naming the field, not later in a request.
/// let error = RateLimitConfig::builder().window(Duration::ZERO).build().unwrap_err();
/// assert_eq!(error, ConfigError::ZeroWindow);
/// assert_eq!(error.field(), "window");
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct RateLimitConfigBuilder {
    raw: RawConfig,
}

impl RateLimitConfigBuilder {
    /// The sliding window (default 60 s). Must be above zero and at most
    /// [`MAX_WINDOW`](super::MAX_WINDOW).
    pub fn window(mut self, window: Duration) -> Self {
        self.raw.window = window;
        self
    }

    /// Requests per user per window; 0 (the default) switches the tier off.
    pub fn user_limit(mut self, limit: u64) -> Self {
        self.raw.user_limit = limit;
        self
    }

    /// Requests per endpoint per window; 0 (the default) switches the tier off.
    pub fn endpoint_limit(mut self, limit: u64) -> Self {
        self.raw.endpoint_limit = limit;
        self
    }

    /// Requests in all per window; 0 (the default) switches the tier off.
    pub fn global_limit(mut self, limit: u64) -> Self {
        self.raw.global_limit = limit;
        self
    }

    /// The prefix of every key (default `rate_limit`): printable ASCII without spaces or braces,
    /// 1 to [`MAX_KEY_PREFIX_LEN`](super::MAX_KEY_PREFIX_LEN) bytes.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.raw.key_prefix = prefix.into();
        self
    }

    /// The cap on keys the in-memory store tracks at once (default 1,000,000), users and
    /// endpoints together. A key costs about 130 to 190 bytes with short ids and up to about
    /// 530 with the longest ids kept (128 bytes, all escaped), so the default cap bounds the
    /// store at roughly 0.2 to 0.5 GB (docs/BENCHMARKS.md, section 7). Redis has no such cap:
    /// bound it with `maxmemory`. At least [`MIN_TRACKED_KEYS`](crate::config::MIN_TRACKED_KEYS)
    /// (2): a request may need a new user key and a new endpoint key at once.
    pub fn max_tracked_keys(mut self, max: usize) -> Self {
        self.raw.max_tracked_keys = max;
        self
    }

    /// Limits of their own for one route (its template, as axum matched it).
    pub fn route(mut self, route: impl Into<String>, limits: RouteLimits) -> Self {
        self.raw.routes.insert(route.into(), limits);
        self
    }

    /// A plan: the user limit of the users on it.
    pub fn plan(mut self, name: impl Into<String>, user_limit: u64) -> Self {
        self.raw.plans.insert(name.into(), Plan { user_limit });
        self
    }

    /// Puts `user` on the plan `plan` (see also the limiter's
    /// [`plan_resolver`](crate::RateLimiterBuilder::plan_resolver)).
    pub fn user_plan(mut self, user: impl Into<String>, plan: impl Into<String>) -> Self {
        self.raw.users.insert(user.into(), plan.into());
        self
    }

    /// Which rate-limit headers responses carry: legacy (the default), IETF, or both.
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.raw.headers = style;
        self
    }

    /// Shadow mode for the whole limiter (`true`) or none of it (`false`, the default): no
    /// request is blocked, and headers, metrics and the [`Decision`](crate::Decision) say what
    /// enforcing would have done. The way to roll out a new limit safely.
    ///
    /// A shadow tier with room records the request as usual. A *full* shadow tier lets it
    /// through without recording it (as enforcement would have denied it, so the tier keeps
    /// showing what enforcement would do); the tiers with room still record it, since it was
    /// served. The decision then carries
    /// [`shadow_blocked_by`](crate::Decision::shadow_blocked_by), remaining 0 and the
    /// `Retry-After` enforcement would have sent.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.raw.shadow = if shadow {
            vec![Tier::User, Tier::Endpoint, Tier::Global]
        } else {
            Vec::new()
        };
        self
    }

    /// Shadow mode for one tier (see [`shadow`](Self::shadow) for what a full shadow tier
    /// does); the other tiers still block.
    pub fn shadow_tier(mut self, tier: Tier) -> Self {
        if !self.raw.shadow.contains(&tier) {
            self.raw.shadow.push(tier);
        }
        self
    }

    /// Share the limits through Redis at this URL (needs the `redis` feature).
    pub fn redis_url(mut self, url: impl Into<String>) -> Self {
        self.redis_mut().url = url.into();
        self
    }

    /// How long a check may wait on Redis before falling back to memory (default 100 ms; 1 ms
    /// to 60 s).
    pub fn redis_command_timeout(mut self, timeout: Duration) -> Self {
        self.redis_mut().command_timeout = timeout;
        self
    }

    /// How long the first connection to Redis may take (default 1 s; 1 ms to 5 minutes).
    pub fn redis_connect_timeout(mut self, timeout: Duration) -> Self {
        self.redis_mut().connect_timeout = timeout;
        self
    }

    /// Where the Redis store takes `now` from (default: Redis `TIME`; see [`TimeSource`]).
    pub fn redis_time_source(mut self, source: TimeSource) -> Self {
        self.redis_mut().time_source = source;
        self
    }

    /// TLS (`rediss://`): trust the CA certificate(s) in this PEM file instead of the system's
    /// trust store, for a Redis whose certificate a private CA signed.
    pub fn redis_tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.redis_mut().tls_ca_file = Some(path.into());
        self
    }

    /// Mutual TLS (`rediss://` to a server with `tls-auth-clients yes`): the client certificate
    /// (chain) and its private key, both PEM files.
    pub fn redis_tls_client_cert(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> Self {
        let redis = self.redis_mut();
        redis.tls_cert_file = Some(cert_file.into());
        redis.tls_key_file = Some(key_file.into());
        self
    }

    /// Redis Cluster only: split the global tier's budget over `shards` keys spread over the
    /// masters (default 1, one exact key; 1 to [`MAX_SHARDS`](super::MAX_SHARDS)). Never
    /// admits more than the global limit; see [the scale guide](crate::guides::scale).
    pub fn redis_global_shards(mut self, shards: u32) -> Self {
        self.redis_mut().global_shards = shards;
        self
    }

    fn redis_mut(&mut self) -> &mut RedisConfig {
        self.raw.redis.get_or_insert_with(RedisConfig::default)
    }

    /// Opt-in: after a fallback to memory, re-probe Redis (first after `initial_backoff`, then
    /// doubling up to `max_backoff`) and switch back when it answers.
    pub fn redis_recovery(mut self, initial_backoff: Duration, max_backoff: Duration) -> Self {
        self.redis_mut().recovery = Some(Recovery {
            initial_backoff,
            max_backoff,
        });
        self
    }

    /// Treat the Redis URL as a Redis Cluster (also implied by `redis-cluster://` URLs and by
    /// `?node=` parameters naming further nodes).
    pub fn redis_cluster(mut self, cluster: bool) -> Self {
        self.redis_mut().cluster = cluster;
        self
    }

    /// Validates the configuration.
    pub fn build(self) -> Result<RateLimitConfig, ConfigError> {
        RateLimitConfig::try_from(self.raw)
    }
}
