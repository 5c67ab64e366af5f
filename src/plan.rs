//! Plans by resolver: user ids to plan names through the user's closure, each answer cached
//! for a while.

use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::config::RateLimitConfig;
use crate::key::MAX_RAW_ID_LEN;

pub(crate) type ResolveFn = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A cached answer: the plan's user limit, or none; until when, in µs of the limiter's clock.
type Cached = (Option<u64>, u64);

/// Resolves user ids to plans through the user's closure, caching each answer for a while.
///
/// The cache holds an id as it is up to [`MAX_RAW_ID_LEN`] bytes, and a longer one by its
/// SHA-256 digest, as the stores' keys do: however long the ids a client sends, an entry stays
/// small, and the cache's [`PLAN_CACHE_MAX`] entries bound its memory.
pub(crate) struct PlanResolver {
    resolve: ResolveFn,
    /// Ids of at most [`MAX_RAW_ID_LEN`] bytes.
    short: dashmap::DashMap<Box<str>, Cached, ahash::RandomState>,
    /// Longer ids, by their SHA-256 digest.
    long: dashmap::DashMap<[u8; 32], Cached, ahash::RandomState>,
    ttl: Duration,
}

/// At most this many user ids are cached; a full cache is emptied.
const PLAN_CACHE_MAX: usize = 100_000;

impl PlanResolver {
    /// A resolver calling `resolve`, its answers cached for `ttl`.
    pub(crate) fn new(resolve: ResolveFn, ttl: Duration) -> Self {
        Self {
            resolve,
            short: dashmap::DashMap::default(),
            long: dashmap::DashMap::default(),
            ttl,
        }
    }

    /// The same closure and time to live, with an empty cache.
    pub(crate) fn emptied(&self) -> Self {
        Self::new(self.resolve.clone(), self.ttl)
    }

    /// The user limit of `id`'s plan, if it has one (from the cache while its answer is fresh).
    pub(crate) fn limit(&self, id: &str, config: &RateLimitConfig, now: Duration) -> Option<u64> {
        let now_us = crate::clock::saturating_micros(now);
        let digest = (id.len() > MAX_RAW_ID_LEN).then(|| <[u8; 32]>::from(Sha256::digest(id)));
        let hit = match &digest {
            None => self.short.get(id).map(|hit| *hit),
            Some(digest) => self.long.get(digest).map(|hit| *hit),
        };
        if let Some((limit, until)) = hit {
            if now_us < until {
                return limit;
            }
        }
        let limit = (self.resolve)(id)
            .and_then(|plan| config.plan(&plan))
            .map(|plan| plan.user_limit);
        if self.short.len() + self.long.len() >= PLAN_CACHE_MAX {
            self.short.clear();
            self.long.clear();
        }
        let until = now_us.saturating_add(crate::clock::saturating_micros(self.ttl));
        match digest {
            None => self.short.insert(Box::from(id), (limit, until)),
            Some(digest) => self.long.insert(digest, (limit, until)),
        };
        limit
    }

    /// How many answers are cached, and the bytes their ids take there.
    #[cfg(test)]
    fn cached(&self) -> (usize, usize) {
        let short: usize = self.short.iter().map(|e| e.key().len()).sum();
        (
            self.short.len() + self.long.len(),
            short + 32 * self.long.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outside audit: the cache kept every raw id, so 3,000 ids of 60 KB through the layer
    /// took 180 MB, and its 100,000 entries could take tens of GB. A long id is now kept by
    /// its digest, and still answered from the cache.
    #[test]
    fn long_ids_are_cached_by_their_digest() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        let resolver = PlanResolver::new(
            Arc::new(move |id: &str| {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                id.ends_with('p').then(|| "pro".to_owned())
            }),
            Duration::from_secs(60),
        );
        let config = RateLimitConfig::builder()
            .user_limit(5)
            .plan("pro", 50)
            .build()
            .unwrap();
        let now = Duration::from_secs(1);
        let ids: Vec<String> = (0..100)
            .map(|i| format!("{}{i}p", "x".repeat(60_000)))
            .collect();
        for id in &ids {
            assert_eq!(resolver.limit(id, &config, now), Some(50));
        }
        assert_eq!(resolver.cached(), (100, 100 * 32));
        for id in &ids {
            assert_eq!(resolver.limit(id, &config, now), Some(50));
        }
        assert_eq!(calls.load(std::sync::atomic::Ordering::Relaxed), 100);
        // An id at the limit is kept as it is, and one byte more by its digest.
        let at = "y".repeat(MAX_RAW_ID_LEN);
        let over = "y".repeat(MAX_RAW_ID_LEN + 1);
        assert_eq!(resolver.limit(&at, &config, now), None);
        assert_eq!(resolver.limit(&over, &config, now), None);
        assert_eq!(resolver.cached(), (102, 100 * 32 + MAX_RAW_ID_LEN + 32));
    }
}
