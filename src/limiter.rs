//! [`RateLimiter`]: the three tiers in order, one store call per check.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::config::RateLimitConfig;
use crate::connect_error::ConnectError;
use crate::decision::Decision;
use crate::key::{encode_id, encode_ip, UNMATCHED_ENDPOINT};
use crate::observe;
use crate::store::{
    Backend, BackendListener, DynStore, MemoryStore, Store, StoreError, StoreOutcome, StoreRequest,
    TierCheck,
};
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
    user: UserKey<'a>,
    endpoint: Option<&'a str>,
    cost: u64,
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

/// The encoded key parts of one request, before they are borrowed into [`TierCheck`]s.
struct Keys<'a> {
    user: Option<(Cow<'a, str>, u64)>,
    endpoint: Option<(Cow<'a, str>, u64)>,
    cost: u64,
}

const NO_TIER: TierCheck<'static> = TierCheck {
    tier: Tier::Global,
    id: "",
    limit: 0,
    shadow: false,
};

impl<'a> Keys<'a> {
    /// The key parts and limits of a request: the route's overrides first, then the user's
    /// plan (`plan`: its user limit), then the defaults.
    #[inline]
    fn new(config: &RateLimitConfig, request: CheckRequest<'a>, plan: Option<u64>) -> Self {
        let route = request.endpoint.and_then(|r| config.route(r));
        let route_user_limit = route.and_then(|r| r.user_limit);
        let user_limit = route_user_limit
            .or(plan)
            .unwrap_or_else(|| config.user_limit());
        let user = match request.user {
            _ if user_limit == 0 => None,
            UserKey::Id(id) => Some(encode_id(id)),
            UserKey::Ip(ip) => Some(Cow::Owned(encode_ip(ip))),
            UserKey::Anonymous => None,
        };
        // A route with a user limit of its own counts users in buckets of its own:
        // `<user>@<route>`. Encoded parts never hold `@` (addresses start with it), so the
        // last `@` splits the key unambiguously.
        let user = match (user, route_user_limit, request.endpoint) {
            (Some(u), Some(_), Some(r)) => Some(Cow::Owned(format!("{u}@{}", encode_id(r)))),
            (user, ..) => user,
        };
        let endpoint_limit = route
            .and_then(|r| r.endpoint_limit)
            .unwrap_or_else(|| config.endpoint_limit());
        let endpoint = match request.endpoint {
            _ if endpoint_limit == 0 => None,
            Some(route) => Some(encode_id(route)),
            None => Some(Cow::Borrowed(UNMATCHED_ENDPOINT)),
        };
        Self {
            user: user.map(|u| (u, user_limit)),
            endpoint: endpoint.map(|e| (e, endpoint_limit)),
            cost: request.cost,
        }
    }

    /// Fills `tiers` with the enabled tiers, most specific first; `None` when none applies.
    fn fill<'s>(
        &'s self,
        config: &RateLimitConfig,
        tiers: &mut [TierCheck<'s>; 3],
    ) -> Option<usize> {
        let mut n = 0;
        let mut push = |tier, id, limit| {
            tiers[n] = TierCheck {
                tier,
                id,
                limit,
                shadow: config.is_shadow(tier),
            };
            n += 1;
        };
        if let Some((id, limit)) = &self.user {
            push(Tier::User, id, *limit);
        }
        if let Some((id, limit)) = &self.endpoint {
            push(Tier::Endpoint, id, *limit);
        }
        if config.global_limit() > 0 {
            push(Tier::Global, "", config.global_limit());
        }
        (n > 0).then_some(n)
    }

    /// The store request for these keys, its tiers in `tiers`; `None` when no tier applies.
    #[inline]
    fn store_request<'s>(
        &'s self,
        now: Duration,
        config: &RateLimitConfig,
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

/// The decision for a store's answer to `req`, with the tiers that applied and its cost.
#[inline]
fn conclude(
    outcome: Result<StoreOutcome, StoreError>,
    backend: &'static str,
    req: &StoreRequest<'_>,
) -> Decision {
    decide(outcome, backend)
        .with_tiers(req.tiers.iter().map(|t| (t.tier, t.limit)), req.window)
        .with_cost(req)
}

/// The decision for a store's answer; a failing store lets the request through.
#[inline]
fn decide(outcome: Result<StoreOutcome, StoreError>, backend: &'static str) -> Decision {
    match outcome {
        Ok(StoreOutcome::Admitted {
            remaining,
            binding,
            reset,
            shadow_denied: None,
        }) => Decision::admit(remaining).with_binding(binding, reset),
        Ok(StoreOutcome::Admitted {
            shadow_denied: Some((tier, retry_after)),
            ..
        }) => Decision::shadow_deny(tier, retry_after),
        Ok(StoreOutcome::Denied { tier, retry_after }) => Decision::deny(tier, retry_after),
        Err(error) => {
            observe::store_error(backend);
            tracing::error!(%error, backend, "rate limit store failed; request let through");
            Decision::admit(0)
        }
    }
}

/// The future of a check: ready at once on memory, boxed when it waits on a store.
enum CheckFuture<'a> {
    Ready(Option<Decision>),
    Waiting(Pin<Box<dyn Future<Output = Decision> + Send + 'a>>),
}

impl Future for CheckFuture<'_> {
    type Output = Decision;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Decision> {
        match self.get_mut() {
            Self::Ready(decision) => Poll::Ready(decision.take().expect("polled after completion")),
            Self::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}

struct Inner {
    config: RateLimitConfig,
    clock: Arc<dyn Clock>,
    /// Every store the same way, through the one seam: memory answers through
    /// [`Store::check_now`] (no future, no allocation), the others through a boxed `check`.
    store: Box<dyn DynStore>,
    plans: Option<PlanResolver>,
    /// For a store that does not call listeners itself: the listener, and the backend it last
    /// heard of.
    watcher: Option<(BackendListener, std::sync::Mutex<Backend>)>,
}

impl Inner {
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

/// The metrics label of a backend.
fn label(backend: Backend) -> &'static str {
    match backend {
        Backend::Memory => "memory",
        Backend::Redis => "redis",
        Backend::Custom => "custom",
    }
}

type ResolveFn = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Resolves user ids to plans through the user's closure, caching each answer for a while.
struct PlanResolver {
    resolve: ResolveFn,
    /// user id → (the plan's user limit, or none; until when, in µs of the limiter's clock).
    cache: dashmap::DashMap<Box<str>, (Option<u64>, u64), ahash::RandomState>,
    ttl: Duration,
}

/// At most this many user ids are cached; a full cache is emptied.
const PLAN_CACHE_MAX: usize = 100_000;

impl PlanResolver {
    fn limit(&self, id: &str, config: &RateLimitConfig, now: Duration) -> Option<u64> {
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
    inner: Arc<Inner>,
}

impl fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("config", &self.inner.config)
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
        RateLimiterBuilder {
            config,
            clock: None,
            store: None,
            listener: None,
            plans: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &RateLimitConfig {
        &self.inner.config
    }

    /// Which store answers now: [`Backend::Redis`] until a Redis failure swaps it for memory.
    pub fn backend(&self) -> Backend {
        self.inner.store.backend()
    }

    /// Checks one request from `user` to `endpoint` (a route template), and records it if allowed.
    ///
    /// On memory the decision is made, and recorded, when this is called; the future is then
    /// ready at once. On Redis it is made when the future is awaited.
    #[inline]
    pub fn check<'a>(
        &'a self,
        user: &'a str,
        endpoint: &'a str,
    ) -> impl Future<Output = Decision> + Send + 'a {
        self.check_request(CheckRequest::new(UserKey::Id(user), Some(endpoint)))
    }

    /// Checks one request that spends `cost` units (a batch, a large upload) in every tier,
    /// and records it if allowed. A cost above a tier's limit can never be admitted: it is
    /// denied, with [`Decision::cost_exceeds_limit`] set.
    #[inline]
    pub fn check_n<'a>(
        &'a self,
        user: &'a str,
        endpoint: &'a str,
        cost: u64,
    ) -> impl Future<Output = Decision> + Send + 'a {
        self.check_request(CheckRequest::new(UserKey::Id(user), Some(endpoint)).with_cost(cost))
    }

    /// Checks one request, and records it if allowed.
    ///
    /// Never fails: a failing Redis store falls back to memory for this request and every later
    /// one, and a failing custom store is logged and lets the request through.
    ///
    /// On memory the decision is made before this returns, and the future is ready at once; it
    /// only waits on Redis or a custom store.
    #[inline]
    pub fn check_request<'a>(
        &'a self,
        request: CheckRequest<'a>,
    ) -> impl Future<Output = Decision> + Send + 'a {
        match self.check_now(request) {
            Some(decision) => CheckFuture::Ready(Some(decision)),
            None => CheckFuture::Waiting(Box::pin(self.check_remote(request))),
        }
    }

    /// The decision, made now, when the store answers without waiting ([`Store::check_now`]:
    /// memory) or no tier applies; `None` when it has to wait (Redis, most custom stores):
    /// then use [`check_request`](Self::check_request).
    #[inline]
    pub(crate) fn check_now(&self, request: CheckRequest<'_>) -> Option<Decision> {
        let config = &self.inner.config;
        let now = self.inner.clock.now();
        let keys = Keys::new(config, request, self.plan_limit(request.user, now));
        let mut tiers = [NO_TIER; 3];
        let decision = match keys.store_request(now, config, &mut tiers) {
            Some(req) => {
                let outcome = self.inner.store.check_now(&req)?;
                conclude(outcome, label(self.inner.store.backend()), &req)
            }
            None => Decision::unlimited(request.cost),
        };
        observe::record(&decision);
        Some(decision)
    }

    async fn check_remote(&self, request: CheckRequest<'_>) -> Decision {
        let config = &self.inner.config;
        let now = self.inner.clock.now();
        let keys = Keys::new(config, request, self.plan_limit(request.user, now));
        let mut tiers = [NO_TIER; 3];
        let Some(store_request) = keys.store_request(now, config, &mut tiers) else {
            let decision = Decision::unlimited(request.cost);
            observe::record(&decision);
            return decision;
        };
        let started = std::time::Instant::now();
        let backend = label(self.inner.store.backend());
        let outcome = self.inner.store.check(&store_request).await;
        observe::store_duration(backend, started.elapsed().as_secs_f64());
        self.inner.watch_backend();
        let decision = conclude(outcome, backend, &store_request);
        observe::record(&decision);
        decision
    }

    /// The user limit of `user`'s plan: the config's `users` map first, then the resolver
    /// (cached); `None` for the default limit.
    #[inline]
    fn plan_limit(&self, user: UserKey<'_>, now: Duration) -> Option<u64> {
        let UserKey::Id(id) = user else {
            return None;
        };
        let config = &self.inner.config;
        if !config.has_plans() {
            return None;
        }
        if let Some(plan) = config.plan_of(id) {
            return Some(plan.user_limit);
        }
        let resolver = self.inner.plans.as_ref()?;
        resolver.limit(id, config, now)
    }

    /// Forgets everything recorded for `user` (to lift a block by hand).
    pub async fn reset_user(&self, user: &str) {
        self.reset(Tier::User, &encode_id(user)).await;
    }

    /// Forgets everything recorded for one endpoint (a route template).
    pub async fn reset_endpoint(&self, route: &str) {
        self.reset(Tier::Endpoint, &encode_id(route)).await;
    }

    async fn reset(&self, tier: Tier, id: &str) {
        let result = self.inner.store.reset(tier, id).await;
        self.inner.watch_backend();
        if let Err(error) = result {
            tracing::warn!(%error, %tier, "rate limit reset failed");
        }
    }
}

/// Builds a [`RateLimiter`] with a chosen clock or store.
#[must_use]
pub struct RateLimiterBuilder {
    config: RateLimitConfig,
    /// `None`: the [`SystemClock`].
    clock: Option<Arc<dyn Clock>>,
    store: Option<Box<dyn DynStore>>,
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
    /// The clock to read `now` from (default: [`SystemClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Use this in-memory store (to share one between limiters, or inspect it in tests).
    pub fn memory_store(mut self, store: MemoryStore) -> Self {
        self.store = Some(Box::new(store));
        self
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
        self.plans = Some(PlanResolver {
            resolve: Arc::new(resolve),
            cache: dashmap::DashMap::default(),
            ttl,
        });
        self
    }

    /// Use your own [`Store`].
    pub fn store(mut self, store: impl Store) -> Self {
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
        let store = self.store.unwrap_or_else(|| default_store(&self.config));
        let watcher = self.listener.and_then(|listener| {
            if store.set_backend_listener(listener.clone()) {
                None
            } else {
                Some((listener, std::sync::Mutex::new(store.backend())))
            }
        });
        RateLimiter {
            inner: Arc::new(Inner {
                config: self.config,
                clock: self.clock.unwrap_or_else(|| {
                    // The system clock calibrates its counter on first use (under a
                    // millisecond): do it now rather than in the first request.
                    let _ = SystemClock.now();
                    Arc::new(SystemClock)
                }),
                store,
                plans: self.plans,
                watcher,
            }),
        }
    }
}

fn default_store(config: &RateLimitConfig) -> Box<dyn DynStore> {
    #[cfg(feature = "redis")]
    if let Some(redis) = config.redis() {
        return Box::new(crate::store::FallbackStore::new(
            config.key_prefix(),
            redis,
            config.max_tracked_keys(),
        ));
    }
    Box::new(MemoryStore::with_max_keys(config.max_tracked_keys()))
}
