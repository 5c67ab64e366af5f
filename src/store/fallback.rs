//! Redis first; at its first failure, one atomic swap to memory — for good, or (opt-in) until
//! a re-probe finds Redis answering again.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::{
    Answer, Backend, BackendListener, MemoryStore, RedisStore, Store, StoreError, StoreOutcome,
    StoreRequest, TierUsage,
};
use crate::config::RedisConfig;
use crate::connect_error::ConnectError;
use crate::tier::Tier;

enum Active {
    Redis(RedisStore),
    /// A fresh memory store for each fallback, and why Redis was left.
    Memory(MemoryStore, ConnectError),
}

/// A [`RedisStore`] that, at its first failure, is swapped for an empty [`MemoryStore`].
///
/// - Redis unreachable at start, or any error or timeout in a check: the first request to meet
///   it swaps the store (one compare-and-swap, so exactly once however many requests fail at
///   the same moment), logs one `tracing` event, and is itself answered from memory. The
///   event is an ERROR naming the cause and the fix when the settings are at fault (a
///   password, a permission, TLS, a database: [`ConnectError::is_config`]), else a WARN.
/// - No request waits on Redis longer than the command timeout (connecting included).
/// - The memory store starts empty: what Redis had counted is not carried over, so for one
///   window each instance enforces the limits on its own traffic only.
/// - By default the swap is for good. With [`RedisConfig::recovery`] set, a background task
///   re-probes Redis (a new connection, with exponential backoff) and swaps back once it
///   answers; a later failure falls back again, to a fresh memory store.
pub struct FallbackStore {
    /// Shared with a recovery probe, which holds it weakly.
    active: Arc<ArcSwap<Active>>,
    shared: Arc<Shared>,
}

struct Shared {
    prefix: String,
    redis: RedisConfig,
    max_keys: usize,
    listener: std::sync::OnceLock<BackendListener>,
    /// The memory store of the last fallback: a check that met a failure while the store had
    /// already swapped back to Redis, with no time left to ask it, is counted there.
    last_memory: std::sync::Mutex<Option<MemoryStore>>,
    /// The recovery's backoff: the wait before the next probe, and when Redis was last swapped
    /// back in (a fallback soon after goes on from the backoff reached, not from the first).
    recovery: std::sync::Mutex<(Duration, Option<Instant>)>,
}

impl fmt::Debug for FallbackStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FallbackStore")
            .field("backend", &Store::backend(self))
            .field("recovery", &self.shared.redis.recovery)
            .finish_non_exhaustive()
    }
}

impl FallbackStore {
    /// A store on the Redis of `redis` (keys under `prefix`), falling back to a memory store
    /// tracking at most `max_keys` keys.
    pub fn new(prefix: &str, redis: &RedisConfig, max_keys: usize) -> Self {
        Self::with_listener(prefix, redis, max_keys, None)
    }

    /// The same, calling `listener` with the new backend on every switch.
    pub fn with_listener(
        prefix: &str,
        redis: &RedisConfig,
        max_keys: usize,
        listener: Option<BackendListener>,
    ) -> Self {
        Self {
            active: Arc::new(ArcSwap::from_pointee(Active::Redis(RedisStore::new(
                prefix, redis,
            )))),
            shared: Arc::new(Shared {
                prefix: prefix.to_owned(),
                redis: redis.clone(),
                max_keys,
                listener: listener.map(std::sync::OnceLock::from).unwrap_or_default(),
                last_memory: std::sync::Mutex::new(None),
                recovery: std::sync::Mutex::new((
                    redis.recovery.map_or(Duration::ZERO, |r| r.initial_backoff),
                    None,
                )),
            }),
        }
    }

    /// Waits (at most the connect timeout) for the first connection; falls back if it fails.
    async fn wait_connected(&self) {
        let active = self.active.load_full();
        if let Active::Redis(redis) = &*active {
            if !redis.wait_connected().await {
                // The start's own cause, as it is: not sorted as a check's error would be (a
                // wait that ran out while fred was reporting a failed handshake is the start
                // timing out, not a connection lost under a check).
                let cause = redis.start_error().unwrap_or(ConnectError::Timeout {
                    after: self.shared.redis.connect_timeout,
                });
                let error = StoreError::with_source(cause.to_string(), cause.clone());
                self.fall_back_for(&active, &error, cause);
            }
        }
    }

    /// Waits (at most the connect timeout) for the first connection; on failure returns why,
    /// closes the client, and does *not* fall back (the store stays unusable).
    async fn try_wait_connected(&self) -> Result<(), ConnectError> {
        let active = self.active.load_full();
        match &*active {
            Active::Redis(redis) => {
                if redis.wait_connected().await {
                    return Ok(());
                }
                redis.shutdown();
                Err(redis.start_error().unwrap_or(ConnectError::Timeout {
                    after: self.shared.redis.connect_timeout,
                }))
            }
            Active::Memory(_, cause) => Err(cause.clone()),
        }
    }

    /// Decides with the active store; a Redis failure swaps to memory and answers from there.
    ///
    /// Within one command timeout in all: a check that failed on a Redis store the recovery
    /// had already replaced asks the new one with the time left, and if none is left, or it
    /// fails too, is answered from memory. (It once asked the new store for a whole timeout
    /// more, and on a second failure was let through uncounted: an outside audit saw 262
    /// checks wait 3 s at a 1.5 s timeout, all let through.)
    async fn check_or_fallback(
        &self,
        request: &StoreRequest<'_>,
    ) -> Result<StoreOutcome, StoreError> {
        let deadline = Instant::now() + self.shared.redis.command_timeout;
        let mut active = self.active.load_full();
        let mut first = true;
        loop {
            let redis = match &*active {
                Active::Memory(memory, _) => return memory.answer(request).map(Answer::outcome),
                Active::Redis(redis) => redis,
            };
            // The first store asked has the whole timeout (its own); a store swapped in since,
            // what is left of it.
            let answer = if first {
                Ok(Store::check(redis, request).await)
            } else {
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::time::timeout(left, Store::check(redis, request)).await
            };
            first = false;
            match answer {
                Ok(Ok(outcome)) => return Ok(outcome),
                Ok(Err(error)) => {
                    self.fall_back(&active, &error);
                    active = self.active.load_full();
                }
                // No time left for a store that never failed us: the last fallback's memory
                // answers (Redis is not blamed for our wait).
                Err(_) => return self.last_memory(request),
            }
        }
    }

    /// The answer of the last fallback's memory store (a fresh one if there was none).
    fn last_memory(&self, request: &StoreRequest<'_>) -> Result<StoreOutcome, StoreError> {
        let memory = (self
            .shared
            .last_memory
            .lock()
            .unwrap_or_else(|e| e.into_inner()))
        .get_or_insert_with(|| MemoryStore::with_max_keys(self.shared.max_keys))
        .clone();
        memory.answer(request).map(Answer::outcome)
    }

    /// Swaps `failed` (if it is still the active Redis store) for a fresh memory store, after a
    /// check's `error`.
    fn fall_back(&self, failed: &Arc<Active>, error: &StoreError) {
        let Active::Redis(redis) = &**failed else {
            return;
        };
        let cause = redis.cause_of(error, self.shared.redis.command_timeout);
        self.fall_back_for(failed, error, cause);
    }

    /// [`fall_back`](Self::fall_back) with its cause known.
    fn fall_back_for(&self, failed: &Arc<Active>, error: &StoreError, cause: ConnectError) {
        crate::observe::store_error("redis");
        let Active::Redis(redis) = &**failed else {
            return;
        };
        let fresh = MemoryStore::with_max_keys(self.shared.max_keys);
        let memory = Arc::new(Active::Memory(fresh.clone(), cause.clone()));
        let previous = self.active.compare_and_swap(failed, memory);
        if !Arc::ptr_eq(&previous, failed) {
            return; // another request swapped first
        }
        *self
            .shared
            .last_memory
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(fresh);
        crate::observe::fallback(cause.reason());
        redis.shutdown();
        self.shared.changed(Backend::Memory);
        let until = match &self.shared.redis.recovery {
            None => "for good",
            Some(_) => "until Redis answers again",
        };
        if cause.is_config() {
            tracing::error!(
                reason = cause.reason(),
                "Redis is misconfigured: {cause}. Rate limiting falls back to in-memory state {until}."
            );
        } else {
            tracing::warn!(
                reason = cause.reason(),
                %error,
                "Redis failed: rate limiting falls back to in-memory state {until}."
            );
        }
        if let Some(recovery) = &self.shared.redis.recovery {
            // Failed again within the longest backoff of a swap back: the probes go on from
            // the backoff reached, not from the first (or a Redis that fails every check but
            // connects would be swapped in and out at the first backoff's pace).
            let first = {
                let state = self
                    .shared
                    .recovery
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                match state.1 {
                    Some(at) if at.elapsed() < recovery.max_backoff => {
                        state.0.saturating_mul(2).min(recovery.max_backoff)
                    }
                    _ => recovery.initial_backoff,
                }
            };
            self.spawn_probe(first, recovery.max_backoff);
        }
    }

    /// Re-probes Redis with exponential backoff, and swaps it back in once it answers a check
    /// (see `RedisStore::answers_a_check`), not merely a connection.
    fn spawn_probe(&self, initial: Duration, max: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("no tokio runtime: Redis will not be re-probed");
            return;
        };
        let shared = self.shared.clone();
        // Weakly: the probe must not keep a dropped limiter's store alive.
        let active = Arc::downgrade(&self.active);
        runtime.spawn(async move {
            let mut backoff = initial;
            loop {
                tokio::time::sleep(backoff).await;
                let Some(active) = active.upgrade() else {
                    return; // the limiter is gone
                };
                let redis = RedisStore::new(&shared.prefix, &shared.redis);
                if redis.answers_a_check().await {
                    *shared.recovery.lock().unwrap_or_else(|e| e.into_inner()) =
                        (backoff, Some(Instant::now()));
                    active.store(Arc::new(Active::Redis(redis)));
                    crate::observe::recovered();
                    tracing::info!("Redis answers again: rate limiting is back on Redis");
                    shared.changed(Backend::Redis);
                    return;
                }
                redis.shutdown();
                backoff = backoff.saturating_mul(2).min(max);
            }
        });
    }
}

impl Shared {
    fn changed(&self, backend: Backend) {
        if let Some(listener) = self.listener.get() {
            listener(backend);
        }
    }
}

impl Store for FallbackStore {
    fn check(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
        self.check_or_fallback(request)
    }

    /// On memory (after a fallback) a check is decided at once; on Redis it must wait.
    #[inline]
    fn check_now(&self, request: &StoreRequest<'_>) -> Option<Result<StoreOutcome, StoreError>> {
        match &**self.active.load() {
            Active::Memory(memory, _) => Some(memory.answer(request).map(Answer::outcome)),
            Active::Redis(_) => None,
        }
    }

    fn wait_ready(&self) -> impl Future<Output = ()> + Send {
        self.wait_connected()
    }

    fn try_ready(&self) -> impl Future<Output = Result<(), ConnectError>> + Send {
        self.try_wait_connected()
    }

    /// Why the store is on memory now (`None` while on Redis).
    fn fallback_cause(&self) -> Option<ConnectError> {
        match &**self.active.load() {
            Active::Redis(_) => None,
            Active::Memory(_, cause) => Some(cause.clone()),
        }
    }

    fn set_backend_listener(&self, listener: BackendListener) -> bool {
        // Set once, before the limiter serves (a second listener is ignored).
        let _ = self.shared.listener.set(listener);
        true
    }

    /// On the active store. A Redis failure is returned (the key was not forgotten), and does
    /// not swap to memory: a reset is an operator's act, and the next check decides about that.
    async fn reset(&self, tier: Tier, id: &str) -> Result<(), StoreError> {
        let active = self.active.load_full();
        match &*active {
            Active::Redis(redis) => Store::reset(redis, tier, id).await,
            Active::Memory(memory, _) => Store::reset(memory, tier, id).await,
        }
    }

    /// On the active store. A Redis failure is returned (the block did not land), and does not
    /// swap to memory: the next check decides about that. Blocks kept in Redis stay there: a
    /// limiter that falls back to memory does not see them.
    async fn block(
        &self,
        tier: Tier,
        id: &str,
        now: Duration,
        duration: Duration,
    ) -> Result<(), StoreError> {
        let active = self.active.load_full();
        match &*active {
            Active::Redis(redis) => Store::block(redis, tier, id, now, duration).await,
            Active::Memory(memory, _) => Store::block(memory, tier, id, now, duration).await,
        }
    }

    /// On the active store, like [`block`](Store::block).
    async fn unblock(&self, tier: Tier, id: &str) -> Result<(), StoreError> {
        let active = self.active.load_full();
        match &*active {
            Active::Redis(redis) => Store::unblock(redis, tier, id).await,
            Active::Memory(memory, _) => Store::unblock(memory, tier, id).await,
        }
    }

    /// From the active store. A Redis failure here is returned, and does not swap to memory:
    /// reading usage is an operator's look, and the next check decides about falling back.
    async fn usage(&self, request: &StoreRequest<'_>) -> Result<Vec<TierUsage>, StoreError> {
        let active = self.active.load_full();
        match &*active {
            Active::Redis(redis) => Store::usage(redis, request).await,
            Active::Memory(memory, _) => Ok(memory.usage_sync(request)),
        }
    }

    fn backend(&self) -> Backend {
        match **self.active.load() {
            Active::Redis(_) => Backend::Redis,
            Active::Memory(..) => Backend::Memory,
        }
    }
}
