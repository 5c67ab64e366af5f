//! [`Live`]: the configuration a limiter runs under now, and what is derived from it.

use std::sync::Arc;
use std::time::Duration;

use crate::config::RateLimitConfig;
use crate::plan::PlanResolver;
use crate::request::UserKey;

/// One configuration and what is derived from it: the plan resolver's cache holds limits
/// from this configuration's plans, so a new configuration starts a new cache.
pub(super) struct Live {
    pub(super) config: Arc<RateLimitConfig>,
    pub(super) plans: Option<PlanResolver>,
}

impl Live {
    /// The user limit of `user`'s plan: the config's `users` map first, then the resolver
    /// (cached); `None` for the default limit.
    #[inline]
    pub(super) fn plan_limit(&self, user: UserKey<'_>, now: Duration) -> Option<u64> {
        let UserKey::Id(id) = user else {
            return None;
        };
        let config = &*self.config;
        if !config.has_plans() {
            return None;
        }
        if let Some(plan) = config.plan_of(id) {
            return Some(plan.user_limit);
        }
        let resolver = self.plans.as_ref()?;
        resolver.limit(id, config, now)
    }
}
