//! Redis first; at its first failure, one atomic swap to memory for good.

use std::future::Future;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Backend, MemoryStore, RedisStore, Store, StoreError, StoreOutcome, StoreRequest};
use crate::decision::Tier;

#[derive(Debug)]
enum Active {
    Redis(RedisStore),
    Memory,
}

/// A [`RedisStore`] that, at its first failure, is swapped for a [`MemoryStore`] for the rest of
/// the store's life.
///
/// - Redis unreachable at start, or any error or timeout in a check: the first request to meet
///   it swaps the store (one compare-and-swap, so exactly once however many requests fail at
///   the same moment), logs one `tracing` warning, and is itself answered from memory.
/// - No request waits on Redis longer than the command timeout (connecting included).
/// - The memory store starts empty: what Redis had counted is not carried over, so for one
///   window each instance enforces the limits on its own traffic only.
#[derive(Debug)]
pub struct FallbackStore {
    active: ArcSwap<Active>,
    memory: MemoryStore,
    redis: RedisStore,
}

impl FallbackStore {
    /// Serves from `redis` until it fails, then from `memory` (which should be empty).
    pub fn new(redis: RedisStore, memory: MemoryStore) -> Self {
        Self {
            active: ArcSwap::from_pointee(Active::Redis(redis.clone())),
            memory,
            redis,
        }
    }

    /// Waits (at most the connect timeout) for the first connection; falls back if it fails.
    pub async fn wait_connected(&self) {
        if matches!(**self.active.load(), Active::Redis(_)) && !self.redis.wait_connected().await {
            self.fall_back(&StoreError::new("Redis is unreachable at start"));
        }
    }

    /// Decides with the active store; a Redis failure swaps to memory and answers from there.
    pub(crate) async fn check_or_fallback(
        &self,
        request: &StoreRequest<'_>,
    ) -> Result<StoreOutcome, StoreError> {
        let active = self.active.load_full();
        if let Active::Redis(redis) = &*active {
            match Store::check(redis, request).await {
                Ok(outcome) => return Ok(outcome),
                Err(error) => self.fall_back(&error),
            }
        }
        self.memory.check_sync(request)
    }

    fn fall_back(&self, error: &StoreError) {
        crate::observe::store_error("redis");
        let current = self.active.load_full();
        if !matches!(*current, Active::Redis(_)) {
            return;
        }
        let memory = Arc::new(Active::Memory);
        let previous = self.active.compare_and_swap(&current, memory);
        if Arc::ptr_eq(&previous, &current) {
            crate::observe::fallback();
            tracing::warn!(
                %error,
                "Redis failed: rate limiting falls back to in-memory state for good"
            );
            self.redis.shutdown();
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

    async fn reset(&self, tier: Tier, id: &str) -> Result<(), StoreError> {
        let active = self.active.load_full();
        if let Active::Redis(redis) = &*active {
            if let Err(error) = Store::reset(redis, tier, id).await {
                self.fall_back(&error);
            }
        }
        Store::reset(&self.memory, tier, id).await
    }

    fn backend(&self) -> Backend {
        match **self.active.load() {
            Active::Redis(_) => Backend::Redis,
            Active::Memory => Backend::Memory,
        }
    }
}
