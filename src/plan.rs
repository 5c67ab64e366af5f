//! Plans by resolver: user ids to plan names through the user's closure, each answer cached
//! for a while.

use std::sync::Arc;
use std::time::Duration;

use crate::config::RateLimitConfig;

pub(crate) type ResolveFn = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Resolves user ids to plans through the user's closure, caching each answer for a while.
pub(crate) struct PlanResolver {
    pub(crate) resolve: ResolveFn,
    /// user id → (the plan's user limit, or none; until when, in µs of the limiter's clock).
    pub(crate) cache: dashmap::DashMap<Box<str>, (Option<u64>, u64), ahash::RandomState>,
    pub(crate) ttl: Duration,
}

/// At most this many user ids are cached; a full cache is emptied.
const PLAN_CACHE_MAX: usize = 100_000;

impl PlanResolver {
    pub(crate) fn limit(&self, id: &str, config: &RateLimitConfig, now: Duration) -> Option<u64> {
        let now_us = crate::clock::saturating_micros(now);
        if let Some(hit) = self.cache.get(id) {
            let (limit, until) = *hit;
            if now_us < until {
                return limit;
            }
        }
        let limit = (self.resolve)(id)
            .and_then(|plan| config.plan(&plan))
            .map(|plan| plan.user_limit);
        if self.cache.len() >= PLAN_CACHE_MAX {
            self.cache.clear();
        }
        let until = now_us.saturating_add(crate::clock::saturating_micros(self.ttl));
        self.cache.insert(Box::from(id), (limit, until));
        limit
    }
}
