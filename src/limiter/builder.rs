//! [`RateLimiterBuilder`]: a limiter with a chosen clock, store, listener or plan resolver.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{LimiterParts, Live, RateLimiter};
use crate::clock::{Clock, SystemClock};
use crate::config::{Hot, RateLimitConfig};
use crate::connect_error::ConnectError;
use crate::plan::PlanResolver;
use crate::store::{Backend, BackendListener, DynStore, MemoryStore, Store};

/// Builds a [`RateLimiter`] with a chosen clock, store, backend listener or plan resolver.
///
/// ```
/// use std::time::Duration;
/// use tiered_ratelimit::store::MemoryStore;
/// use tiered_ratelimit::{Backend, ManualClock, RateLimitConfig, RateLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), tiered_ratelimit::ConfigError> {
/// let config = RateLimitConfig::builder()
///     .user_limit(1)
///     .plan("premium", 3)
///     .build()?;
/// let clock = ManualClock::new();
/// let limiter = RateLimiter::builder(config)
///     .clock(clock.clone()) // time moves only when the test says so
///     .memory_store(MemoryStore::with_max_keys(10_000))
///     .plan_resolver(Duration::from_secs(60), |user| {
///         user.starts_with("vip-").then(|| "premium".to_owned())
///     })
///     .on_backend_change(|backend| eprintln!("now on {backend:?}"))
///     .build();
/// assert_eq!(limiter.backend(), Backend::Memory);
///
/// assert!(limiter.check("bob", "/").await.allowed());
/// assert!(!limiter.check("bob", "/").await.allowed());
/// for _ in 0..3 {
///     assert!(limiter.check("vip-carol", "/").await.allowed()); // on the premium plan
/// }
/// clock.advance(Duration::from_secs(61));
/// assert!(limiter.check("bob", "/").await.allowed());
/// # Ok(()) }
/// ```
#[must_use]
pub struct RateLimiterBuilder {
    config: RateLimitConfig,
    /// `None`: the [`SystemClock`].
    clock: Option<Arc<dyn Clock>>,
    store: Option<Box<dyn DynStore>>,
    /// The store again when it is the memory store (see `LimiterParts::memory`).
    memory: Option<MemoryStore>,
    listener: Option<BackendListener>,
    plans: Option<PlanResolver>,
}

impl fmt::Debug for RateLimiterBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiterBuilder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RateLimiterBuilder {
    pub(super) fn new(config: RateLimitConfig) -> Self {
        Self {
            config,
            clock: None,
            store: None,
            memory: None,
            listener: None,
            plans: None,
        }
    }

    /// The clock to read `now` from (default: [`SystemClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Use this in-memory store (to share one between limiters, or inspect it in tests).
    ///
    /// Limiters that share one store should share one window: the store's sweep forgets a key
    /// idle for the window of the check that runs it, which a limiter with a longer window
    /// would still count.
    pub fn memory_store(self, store: MemoryStore) -> Self {
        self.store(store)
    }

    /// Call `listener` with the new backend whenever the limiter switches: to memory on a Redis
    /// failure, back to Redis on recovery (see [`RedisConfig::recovery`](crate::RedisConfig)).
    /// It runs on the task that switched: keep it short. With a custom [`Store`] that does not
    /// call listeners itself ([`Store::set_backend_listener`]), the limiter calls it when it
    /// sees [`Store::backend`] change, after a check or a reset.
    pub fn on_backend_change(mut self, listener: impl Fn(Backend) + Send + Sync + 'static) -> Self {
        self.listener = Some(Arc::new(listener));
        self
    }

    /// Resolve user ids to plan names (defined in the config's `plans`) with `resolve` — a
    /// lookup in your own user table, say. Each answer is cached for `ttl` (at most 100,000
    /// users at once). The config's `users` map, if it names the user, comes first; an
    /// unknown plan, or `None`, means the default user limit.
    pub fn plan_resolver(
        mut self,
        ttl: Duration,
        resolve: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.plans = Some(PlanResolver::new(Arc::new(resolve), ttl));
        self
    }

    /// Use your own [`Store`].
    pub fn store(mut self, store: impl Store) -> Self {
        self.memory = (&store as &dyn Any).downcast_ref::<MemoryStore>().cloned();
        self.store = Some(Box::new(store));
        self
    }

    /// Builds the limiter and starts it strictly: see
    /// [`RateLimiter::try_connect`].
    pub async fn try_connect(self) -> Result<RateLimiter, ConnectError> {
        let limiter = self.build();
        limiter.inner.store.try_ready().await?;
        Ok(limiter)
    }

    /// Builds the limiter.
    pub fn build(self) -> RateLimiter {
        crate::config::template::warn_never_matched(&self.config);
        let (store, memory) = match self.store {
            Some(store) => (store, self.memory),
            None => default_store(&self.config),
        };
        let watcher = self.listener.and_then(|listener| {
            if store.set_backend_listener(listener.clone()) {
                None
            } else {
                Some((listener, std::sync::Mutex::new(store.backend())))
            }
        });
        RateLimiter {
            inner: Arc::new(LimiterParts {
                hot: Hot::new(&self.config),
                reconfiguring: std::sync::Mutex::new(()),
                live: arc_swap::ArcSwap::from_pointee(Live {
                    config: Arc::new(self.config),
                    plans: self.plans,
                }),
                clock: self.clock.unwrap_or_else(|| {
                    // The system clock calibrates its counter on first use (under a
                    // millisecond): do it now rather than in the first request.
                    let _ = SystemClock.now();
                    Arc::new(SystemClock)
                }),
                store,
                memory,
                route_keys: Default::default(),
                watcher,
            }),
        }
    }
}

/// The store a configuration names, and the same again when it is the memory store.
fn default_store(config: &RateLimitConfig) -> (Box<dyn DynStore>, Option<MemoryStore>) {
    #[cfg(feature = "redis")]
    if let Some(redis) = config.redis() {
        let fallback =
            crate::store::FallbackStore::new(config.key_prefix(), redis, config.max_tracked_keys());
        return (Box::new(fallback), None);
    }
    let memory = MemoryStore::with_max_keys(config.max_tracked_keys());
    (Box::new(memory.clone()), Some(memory))
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;
    use crate::store::{StoreError, StoreOutcome, StoreRequest};
    use crate::tier::Tier;

    /// A store of the user's own, with a memory store underneath.
    struct Custom(MemoryStore);

    impl Store for Custom {
        fn check(
            &self,
            request: &StoreRequest<'_>,
        ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
            Store::check(&self.0, request)
        }

        fn reset(
            &self,
            tier: Tier,
            id: &str,
        ) -> impl Future<Output = Result<(), StoreError>> + Send {
            Store::reset(&self.0, tier, id)
        }

        fn backend(&self) -> Backend {
            Backend::Custom
        }
    }

    /// A check on the memory store takes the direct path (`LimiterParts::memory`) however the
    /// store was given, and on any other store goes through the `Store` trait: the equality
    /// of the two paths (tests/custom_store.rs) says nothing if the direct one is never taken.
    #[tokio::test]
    async fn the_memory_store_is_reached_directly_however_it_was_given() {
        let config = || RateLimitConfig::builder().global_limit(10).build().unwrap();
        let builder = || RateLimiter::builder(config());
        let direct = |limiter: RateLimiter| limiter.inner.memory.is_some();
        assert!(direct(builder().build()), "the default store");
        assert!(direct(builder().memory_store(MemoryStore::new()).build()));
        assert!(direct(builder().store(MemoryStore::new()).build()));
        assert!(direct(
            builder()
                .store(Custom(MemoryStore::new()))
                .memory_store(MemoryStore::new())
                .build()
        ));
        assert!(!direct(builder().store(Custom(MemoryStore::new())).build()));
        assert!(
            !direct(
                builder()
                    .memory_store(MemoryStore::new())
                    .store(Custom(MemoryStore::new()))
                    .build()
            ),
            "the last store given is the one"
        );
        // The one store, not a copy: what the limiter records, the store given holds.
        let store = MemoryStore::new();
        let limiter = builder().memory_store(store.clone()).build();
        limiter.check("alice", "/").await;
        assert_eq!(store.entries(Tier::Global, ""), 1);
        #[cfg(feature = "redis")]
        {
            // Redis (unreachable here): the fallback store, through the trait.
            let redis = RateLimitConfig::builder()
                .redis_url("redis://127.0.0.1:1")
                .build()
                .unwrap();
            assert!(!direct(RateLimiter::builder(redis).build()));
        }
    }
}
