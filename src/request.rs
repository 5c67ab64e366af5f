//! What one check is about: [`CheckRequest`] (who, which endpoint, what cost) and [`UserKey`];
//! and how it becomes a store's [`StoreRequest`]: ids encoded, limits chosen (route overrides,
//! then the user's plan, then the defaults), switched-off tiers left out.

use std::borrow::Cow;
use std::net::IpAddr;
use std::time::Duration;

use crate::config::{HotConfig, RateLimitConfig, RouteLimits};
use crate::key::{encode_id, encode_ip, UNMATCHED_ENDPOINT};
use crate::store::{StoreRequest, TierCheck};
use crate::tier::Tier;

/// Who is asking, for the user tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserKey<'a> {
    /// A user id (from a token, a header, ...). Encoded into the key (see [`crate::key`]).
    Id(&'a str),
    /// No user id: the client's address stands in, in a key no user id can produce.
    Ip(IpAddr),
    /// Neither: the user tier is skipped for this request.
    Anonymous,
}

/// One request to check: who, which endpoint, and how many units it spends.
///
/// ```
/// use tiered_ratelimit::{CheckRequest, UserKey};
///
/// let request = CheckRequest::new(UserKey::Id("alice"), Some("/api/v1/items/{id}"));
/// let anonymous_404 = CheckRequest::new(UserKey::Anonymous, None);
/// # let _ = (request, anonymous_404);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckRequest<'a> {
    pub(crate) user: UserKey<'a>,
    pub(crate) endpoint: Option<&'a str>,
    pub(crate) cost: u64,
}

impl<'a> CheckRequest<'a> {
    /// A request from `user` to `endpoint`: a route template, or `None` when no route matched
    /// (all such requests share one fixed endpoint key). It costs one unit.
    #[inline]
    pub fn new(user: UserKey<'a>, endpoint: Option<&'a str>) -> Self {
        Self {
            user,
            endpoint,
            cost: 1,
        }
    }

    /// The units this request spends in every tier (at least 1: 0 counts as 1). A request is
    /// one entry whatever its cost, in memory and in Redis.
    #[inline]
    pub fn with_cost(mut self, cost: u64) -> Self {
        self.cost = cost.max(1);
        self
    }
}

/// What a request's keys take from a configuration: the default limits, the route overrides,
/// the shadow flags and the window. The whole [`RateLimitConfig`], or the few values of one
/// without overrides that a check reads without loading it ([`HotConfig`]).
pub(crate) trait Limits {
    fn user_limit(&self) -> u64;
    fn endpoint_limit(&self) -> u64;
    fn global_limit(&self) -> u64;
    /// The overrides of `route`, if any.
    fn route(&self, route: &str) -> Option<&RouteLimits>;
    fn is_shadow(&self, tier: Tier) -> bool;
    fn window(&self) -> Duration;
}

impl Limits for RateLimitConfig {
    #[inline]
    fn user_limit(&self) -> u64 {
        RateLimitConfig::user_limit(self)
    }
    #[inline]
    fn endpoint_limit(&self) -> u64 {
        RateLimitConfig::endpoint_limit(self)
    }
    #[inline]
    fn global_limit(&self) -> u64 {
        RateLimitConfig::global_limit(self)
    }
    #[inline]
    fn route(&self, route: &str) -> Option<&RouteLimits> {
        RateLimitConfig::route(self, route)
    }
    #[inline]
    fn is_shadow(&self, tier: Tier) -> bool {
        RateLimitConfig::is_shadow(self, tier)
    }
    #[inline]
    fn window(&self) -> Duration {
        RateLimitConfig::window(self)
    }
}

impl Limits for HotConfig {
    #[inline]
    fn user_limit(&self) -> u64 {
        self.limits[0]
    }
    #[inline]
    fn endpoint_limit(&self) -> u64 {
        self.limits[1]
    }
    #[inline]
    fn global_limit(&self) -> u64 {
        self.limits[2]
    }
    #[inline]
    fn route(&self, _: &str) -> Option<&RouteLimits> {
        None
    }
    #[inline]
    fn is_shadow(&self, tier: Tier) -> bool {
        self.shadow[tier as usize]
    }
    #[inline]
    fn window(&self) -> Duration {
        self.window
    }
}

/// The encoded key parts of one request, before they are borrowed into [`TierCheck`]s.
pub(crate) struct Keys<'a> {
    /// The user tier's key part (empty when the tier does not apply).
    user: Cow<'a, str>,
    /// The endpoint tier's key part (empty when the tier does not apply).
    endpoint: Cow<'a, str>,
    /// Each tier's limit for this request, by tier (0: the tier does not apply).
    limits: [u64; 3],
    pub(crate) cost: u64,
}

pub(crate) const NO_TIER: TierCheck<'static> = TierCheck {
    tier: Tier::Global,
    id: "",
    limit: 0,
    shadow: false,
};

impl<'a> Keys<'a> {
    /// The key parts and limits of a request: the route's overrides first, then the user's
    /// plan (`plan`: its user limit), then the defaults.
    #[inline]
    pub(crate) fn new(
        config: &RateLimitConfig,
        request: CheckRequest<'a>,
        plan: Option<u64>,
    ) -> Self {
        Self::with_route_key(config, request, plan, encode_id)
    }

    /// [`new`](Self::new), with the endpoint's key part from `route_key` (called only when the
    /// endpoint tier applies: the limiter's kept encodings, [`encode_id`] or the same).
    #[inline]
    pub(crate) fn with_route_key(
        config: &impl Limits,
        request: CheckRequest<'a>,
        plan: Option<u64>,
        route_key: impl FnOnce(&'a str) -> Cow<'a, str>,
    ) -> Self {
        let (route_user_limit, route_endpoint_limit) =
            match request.endpoint.and_then(|r| config.route(r)) {
                Some(route) => (route.user_limit, route.endpoint_limit),
                None => (None, None),
            };
        let mut user_limit = match route_user_limit.or(plan) {
            Some(limit) => limit,
            None => config.user_limit(),
        };
        let endpoint_limit = match route_endpoint_limit {
            Some(limit) => limit,
            None => config.endpoint_limit(),
        };
        let endpoint = match request.endpoint {
            _ if endpoint_limit == 0 => Cow::Borrowed(""),
            Some(route) => route_key(route),
            None => Cow::Borrowed(UNMATCHED_ENDPOINT),
        };
        let mut user = match request.user {
            _ if user_limit == 0 => Cow::Borrowed(""),
            UserKey::Id(id) => encode_id(id),
            UserKey::Ip(ip) => Cow::Owned(encode_ip(ip)),
            UserKey::Anonymous => {
                user_limit = 0;
                Cow::Borrowed("")
            }
        };
        // A route with a user limit of its own counts users in buckets of its own:
        // `<user>@<route>`. Encoded parts never hold `@` (addresses start with it), so the
        // last `@` splits the key unambiguously. The route's part is the endpoint key's when
        // that tier applies (not encoded twice), else encoded here.
        if let (true, Some(_), Some(route)) = (user_limit > 0, route_user_limit, request.endpoint) {
            user = Cow::Owned(if endpoint_limit > 0 {
                format!("{user}@{endpoint}")
            } else {
                format!("{user}@{}", encode_id(route))
            });
        }
        Self {
            user,
            endpoint,
            limits: [user_limit, endpoint_limit, config.global_limit()],
            cost: request.cost,
        }
    }

    /// Each tier's limit for this request, by tier (0: the tier does not apply): the tiers
    /// [`store_request`](Self::store_request) names.
    #[inline]
    pub(crate) fn limits(&self) -> [u64; 3] {
        self.limits
    }

    /// The user tier's key part (empty when the tier does not apply).
    #[inline]
    pub(crate) fn user_part(&self) -> &str {
        &self.user
    }

    /// The endpoint tier's key part (empty when the tier does not apply).
    #[inline]
    pub(crate) fn endpoint_part(&self) -> &str {
        &self.endpoint
    }

    /// The same keys, owning their text (for a check that waits in a `'static` future).
    pub(crate) fn into_owned(self) -> Keys<'static> {
        Keys {
            user: Cow::Owned(self.user.into_owned()),
            endpoint: Cow::Owned(self.endpoint.into_owned()),
            limits: self.limits,
            cost: self.cost,
        }
    }

    /// Fills `tiers` with the enabled tiers, most specific first; `None` when none applies.
    #[inline]
    fn fill<'s>(&'s self, config: &impl Limits, tiers: &mut [TierCheck<'s>; 3]) -> Option<usize> {
        let mut n = 0;
        for (tier, id) in [
            (Tier::User, &*self.user),
            (Tier::Endpoint, &*self.endpoint),
            (Tier::Global, ""),
        ] {
            let limit = self.limits[tier as usize];
            if limit > 0 {
                tiers[n] = TierCheck {
                    tier,
                    id,
                    limit,
                    shadow: config.is_shadow(tier),
                };
                n += 1;
            }
        }
        (n > 0).then_some(n)
    }

    /// The store request for these keys, its tiers in `tiers`; `None` when no tier applies.
    #[inline]
    pub(crate) fn store_request<'s>(
        &'s self,
        now: Duration,
        config: &impl Limits,
        tiers: &'s mut [TierCheck<'s>; 3],
    ) -> Option<StoreRequest<'s>> {
        let n = self.fill(config, tiers)?;
        Some(StoreRequest {
            now,
            window: config.window(),
            cost: self.cost,
            tiers: &tiers[..n],
        })
    }
}
