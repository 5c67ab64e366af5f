//! [`RateLimiter`]: the three tiers in order, one store call per check.

use std::fmt;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::clock::Clock;
use crate::config::{Hot, RateLimitConfig};
use crate::connect_error::ConnectError;
use crate::key::encode_id;
use crate::route_keys::RouteKeys;
use crate::store::{Backend, BackendListener, DynStore, MemoryStore, StoreError};
use crate::tier::Tier;

mod acquire;
mod block;
mod builder;
mod check;
mod live;
mod reconfigure;
mod usage;

pub use self::builder::RateLimiterBuilder;
pub(crate) use self::check::Pending;
use self::live::Live;
pub use self::usage::Usage;

/// What every clone of a [`RateLimiter`] shares: its live configuration, clock, store and
/// backend watcher.
struct LimiterParts {
    /// Swapped whole by [`RateLimiter::reconfigure`]: a check loads it once and uses that one
    /// configuration (and its plan cache) throughout.
    live: ArcSwap<Live>,
    clock: Arc<dyn Clock>,
    /// Every store the same way, through the one seam: memory answers through
    /// [`Store::check_now`](crate::store::Store::check_now) (no future, no allocation), the others through a boxed `check`.
    store: Box<dyn DynStore>,
    /// The same store when it is the memory store: a check then takes its answer as the
    /// store makes it ([`MemoryStore::answer`]: no dynamic call, no conversion).
    memory: Option<MemoryStore>,
    /// What a check reads of a configuration without route overrides or plans, published
    /// beside `live` (see [`Hot`]).
    hot: Hot,
    /// Held while a reconfiguration swaps `live` and publishes `hot`: writers one at a time.
    reconfiguring: std::sync::Mutex<()>,
    /// Encoded key parts of the routes that need encoding (`/items/{id}`), kept once.
    route_keys: RouteKeys,
    /// For a store that does not call listeners itself: the listener, and the backend it last
    /// heard of.
    watcher: Option<(BackendListener, std::sync::Mutex<Backend>)>,
}

impl LimiterParts {
    /// Tells the watcher's listener if the backend changed since it last heard.
    fn watch_backend(&self) {
        if let Some((listener, last)) = &self.watcher {
            let now = self.store.backend();
            let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
            if *last != now {
                *last = now;
                drop(last);
                listener(now);
            }
        }
    }
}

/// An exact three-tier sliding-window rate limiter.
///
/// Cheap to clone; clones share one state. Tiers are checked most specific first (user,
/// endpoint, global); the first without room denies, and a denied request is recorded in no
/// tier. A limit of 0 switches a tier off.
///
/// ```
/// use std::time::Duration;
/// use tiered_ratelimit::{ManualClock, RateLimitConfig, RateLimiter, Tier};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = RateLimitConfig::builder()
///     .window(Duration::from_secs(60))
///     .user_limit(2)
///     .build()?;
/// let clock = ManualClock::new();
/// let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
///
/// assert!(limiter.check("alice", "/items").await.allowed());
/// assert!(limiter.check("alice", "/items").await.allowed());
/// let denied = limiter.check("alice", "/items").await;
/// assert_eq!(denied.blocked_by(), Some(Tier::User));
/// assert_eq!(denied.retry_after_secs(), 61); // the first entry still counts at exactly 60 s
///
/// clock.advance(Duration::from_secs(61));
/// assert!(limiter.check("alice", "/items").await.allowed());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<LimiterParts>,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("config", &self.inner.live.load().config)
            .field("backend", &self.backend())
            .finish_non_exhaustive()
    }
}

impl RateLimiter {
    /// A limiter on the system clock. With a Redis URL in the config (feature `redis`) it uses
    /// Redis, connecting in the background, and falls back to memory if Redis fails; otherwise
    /// it uses memory. Needs no `.await`.
    pub fn new(config: RateLimitConfig) -> Self {
        Self::builder(config).build()
    }

    /// Like [`new`](Self::new), but waits (at most the config's connect timeout) until the first
    /// connection to Redis is up, or has failed and the limiter has fallen back to memory.
    /// Returns at once on memory.
    pub async fn connect(config: RateLimitConfig) -> Self {
        let limiter = Self::new(config);
        limiter.wait_connected().await;
        limiter
    }

    /// The strict start: like [`connect`](Self::connect), but if the first connection to Redis
    /// fails, returns why instead of falling back to memory — a wrong password, a missing
    /// permission, a TLS failure or a missing database ([`ConnectError::is_config`]), Redis
    /// unreachable, or no answer within the connect timeout. For services that would rather
    /// not start than enforce per-instance limits. Returns at once on memory.
    ///
    /// It checks what a connection does: the handshake (TLS included), authentication, the
    /// database, and loading the script. Once started, the limiter behaves as any other: a
    /// later failure falls back to memory.
    ///
    /// ```no_run
    /// # use tiered_ratelimit::{RateLimitConfig, RateLimiter};
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = RateLimitConfig::builder()
    ///     .user_limit(50)
    ///     .redis_url("rediss://:secret@redis.internal:6380")
    ///     .redis_tls_ca_file("/etc/redis/ca.pem")
    ///     .build()?;
    /// let limiter = match RateLimiter::try_connect(config).await {
    ///     Ok(limiter) => limiter,
    ///     Err(e) if e.is_config() => panic!("fix the Redis settings: {e}"),
    ///     Err(e) => return Err(e.into()),
    /// };
    /// # let _ = limiter; Ok(()) }
    /// ```
    pub async fn try_connect(config: RateLimitConfig) -> Result<Self, ConnectError> {
        Self::builder(config).try_connect().await
    }

    /// Why the limiter left Redis for memory, while it is on memory after a fallback (`None`
    /// on Redis, and for memory or custom stores).
    pub fn fallback_cause(&self) -> Option<ConnectError> {
        self.inner.store.fallback_cause()
    }

    /// Waits (at most the connect timeout) until the Redis connection is up or has failed (and
    /// the limiter has fallen back to memory). Returns at once on memory.
    pub async fn wait_connected(&self) {
        self.inner.store.wait_ready().await;
        self.inner.watch_backend();
    }

    /// Starts a builder, to set the clock or a store.
    pub fn builder(config: RateLimitConfig) -> RateLimiterBuilder {
        RateLimiterBuilder::new(config)
    }

    /// The configuration in force now (the last one given to
    /// [`reconfigure`](Self::reconfigure), else the first).
    pub fn config(&self) -> Arc<RateLimitConfig> {
        self.inner.live.load_full().config.clone()
    }

    /// Which store answers now: [`Backend::Redis`] until a Redis failure swaps it for memory.
    pub fn backend(&self) -> Backend {
        self.inner.store.backend()
    }

    /// Forgets everything recorded for `user`, on every instance sharing the store: its
    /// general bucket and its bucket on each route of the running configuration with a user
    /// limit of its own. A store failure (Redis unreachable, a timeout) is returned: a key may
    /// not have been forgotten (a reset is safe to repeat); it does not make the limiter fall
    /// back.
    pub async fn reset_user(&self, user: &str) -> Result<(), StoreError> {
        let user = encode_id(user);
        let config = self.config();
        self.reset(Tier::User, &user).await?;
        for bucket in crate::block::route_buckets(&config, &user) {
            self.reset(Tier::User, &bucket).await?;
        }
        Ok(())
    }

    /// Forgets everything recorded for one endpoint (a route template), like
    /// [`reset_user`](Self::reset_user).
    pub async fn reset_endpoint(&self, route: &str) -> Result<(), StoreError> {
        self.reset(Tier::Endpoint, &encode_id(route)).await
    }

    async fn reset(&self, tier: Tier, id: &str) -> Result<(), StoreError> {
        let result = self.inner.store.reset(tier, id).await;
        self.inner.watch_backend();
        if let Err(error) = &result {
            tracing::warn!(%error, %tier, "rate limit reset failed");
        }
        result
    }
}
