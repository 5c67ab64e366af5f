//! [`RateLimiter`]: the three tiers in order, one store call per check.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::clock::Clock;
use crate::config::{Hot, RateLimitConfig};
use crate::connect_error::ConnectError;
use crate::decision::Decision;
use crate::header_style::HeaderStyle;
use crate::key::encode_id;
use crate::observe;
use crate::request::{CheckRequest, UserKey};
use crate::request::{Keys, NO_TIER};
use crate::route_keys::RouteKeys;
use crate::store::{Backend, BackendListener, DynStore, StoreError, StoreOutcome, StoreRequest};
use crate::tier::Tier;

mod acquire;
mod block;
mod builder;
mod live;
mod reconfigure;
mod usage;

pub use self::builder::RateLimiterBuilder;
use self::live::Live;
pub use self::usage::Usage;

/// The decision for a store's answer to `req`, with the tiers that applied and its cost; a
/// failing store lets the request through (and is counted under `backend`'s label).
#[inline]
fn conclude(
    outcome: Result<StoreOutcome, StoreError>,
    backend: impl FnOnce() -> &'static str,
    req: &StoreRequest<'_>,
) -> Decision {
    let mut limits = [0; 3];
    for t in req.tiers {
        limits[t.tier as usize] = t.limit;
    }
    let mut decision = match outcome {
        Ok(StoreOutcome::Admitted {
            remaining,
            binding,
            resets_in,
            shadow_denied: None,
        }) => Decision::admit(remaining, binding, resets_in),
        Ok(StoreOutcome::Admitted {
            shadow_denied: Some((tier, retry_after)),
            ..
        }) => Decision::shadow_deny(tier, retry_after),
        Ok(StoreOutcome::Denied { tier, retry_after }) => Decision::deny(tier, retry_after),
        Ok(StoreOutcome::Blocked { tier, retry_after }) => Decision::block(tier, retry_after),
        Err(error) => store_failed(&error, backend()),
    };
    decision.limits = limits;
    decision.window = req.window;
    decision.set_cost(req.cost);
    decision
}

/// A failing store lets the request through: counted, logged, nothing remaining.
#[cold]
fn store_failed(error: &StoreError, backend: &'static str) -> Decision {
    observe::store_error(backend);
    tracing::error!(%error, backend, "rate limit store failed; request let through");
    Decision::let_through()
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

/// What every clone of a [`RateLimiter`] shares: its live configuration, clock, store and
/// backend watcher.
struct LimiterParts {
    /// Swapped whole by [`RateLimiter::reconfigure`]: a check loads it once and uses that one
    /// configuration (and its plan cache) throughout.
    live: ArcSwap<Live>,
    clock: Arc<dyn Clock>,
    /// Every store the same way, through the one seam: memory answers through
    /// [`Store::check_now`] (no future, no allocation), the others through a boxed `check`.
    store: Box<dyn DynStore>,
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
        match self.try_now(request) {
            (Ok(decision), _) => CheckFuture::Ready(Some(decision)),
            (Err((live, now, keys)), _) => {
                CheckFuture::Waiting(Box::pin(self.check_remote(live, now, keys)))
            }
        }
    }

    /// The decision, made now, when the store answers without waiting ([`Store::check_now`]:
    /// memory) or no tier applies; else the request's keys, worked out once and owned, for
    /// [`finish`](Self::finish) to take to the store (the layer's path: its request's parts
    /// are gone by the time a waiting store answers). With the header style of the
    /// configuration the check used.
    #[inline]
    pub(crate) fn check_now(
        &self,
        request: CheckRequest<'_>,
    ) -> (Result<Decision, Pending>, HeaderStyle) {
        let (decided, style) = self.try_now(request);
        let decided = decided.map_err(|(live, now, keys)| Pending {
            live,
            now,
            keys: keys.into_owned(),
        });
        (decided, style)
    }

    /// Takes a [`Pending`] check to the store that has to wait for it.
    pub(crate) async fn finish(&self, pending: Pending) -> Decision {
        self.check_remote(pending.live, pending.now, pending.keys)
            .await
    }

    /// The decision now if the store can give it; else the configuration, the time and the
    /// request's keys, worked out once, for the waiting path. With the configuration's header
    /// style: one configuration serves the whole check.
    ///
    /// A configuration without route overrides or plans is read from what the limiter
    /// published of it ([`Hot`], no lock and no shared write); any other, or a store that
    /// must wait, takes [`try_now_loaded`](Self::try_now_loaded)'s path.
    #[inline]
    #[allow(clippy::type_complexity)]
    fn try_now<'a>(
        &self,
        request: CheckRequest<'a>,
    ) -> (
        Result<Decision, (Arc<Live>, Duration, Keys<'a>)>,
        HeaderStyle,
    ) {
        let Some(hot) = self.inner.hot.read() else {
            return self.try_now_loaded(request);
        };
        let now = self.inner.clock.now();
        let mut held = None;
        let route_keys = &self.inner.route_keys;
        let keys = Keys::with_route_key(&hot, request, None, |r| route_keys.key_of(r, &mut held));
        let mut tiers = [NO_TIER; 3];
        let decision = match keys.store_request(now, &hot, &mut tiers) {
            Some(req) => match self.inner.store.check_now(&req) {
                Some(outcome) => conclude(outcome, || self.inner.store.backend().label(), &req),
                None => return self.try_now_loaded(request),
            },
            None => Decision::unlimited(request.cost),
        };
        observe::record(&decision);
        (Ok(decision), hot.style)
    }

    /// [`try_now`](Self::try_now) under the whole configuration, loaded.
    #[inline(never)]
    #[allow(clippy::type_complexity)]
    fn try_now_loaded<'a>(
        &self,
        request: CheckRequest<'a>,
    ) -> (
        Result<Decision, (Arc<Live>, Duration, Keys<'a>)>,
        HeaderStyle,
    ) {
        let live = self.inner.live.load();
        let config = &*live.config;
        let style = config.headers();
        let now = self.inner.clock.now();
        let mut held = None;
        let plan = live.plan_limit(request.user, now);
        let route_keys = &self.inner.route_keys;
        let keys = Keys::with_route_key(config, request, plan, |r| route_keys.key_of(r, &mut held));
        let mut tiers = [NO_TIER; 3];
        let decision = match keys.store_request(now, config, &mut tiers) {
            Some(req) => match self.inner.store.check_now(&req) {
                Some(outcome) => conclude(outcome, || self.inner.store.backend().label(), &req),
                None => {
                    let live = arc_swap::Guard::into_inner(live);
                    return (Err((live, now, keys.into_owned())), style);
                }
            },
            None => Decision::unlimited(request.cost),
        };
        observe::record(&decision);
        (Ok(decision), style)
    }

    /// The waiting path: the store's `check`, for keys [`try_now`](Self::try_now) worked out
    /// under `live`, the configuration it loaded.
    async fn check_remote(&self, live: Arc<Live>, now: Duration, keys: Keys<'_>) -> Decision {
        let config = &*live.config;
        let mut tiers = [NO_TIER; 3];
        let Some(store_request) = keys.store_request(now, config, &mut tiers) else {
            // (try_now answers a request with no tier itself; this is never reached.)
            let decision = Decision::unlimited(keys.cost);
            observe::record(&decision);
            return decision;
        };
        let started = std::time::Instant::now();
        let backend = self.inner.store.backend().label();
        let outcome = self.inner.store.check(&store_request).await;
        observe::store_duration(backend, started.elapsed().as_secs_f64());
        self.inner.watch_backend();
        let decision = conclude(outcome, || backend, &store_request);
        observe::record(&decision);
        decision
    }

    /// Forgets everything recorded for `user`'s general bucket, on every instance sharing the
    /// store. A store failure (Redis unreachable, a timeout) is returned: the key may not have
    /// been forgotten (a reset is safe to repeat); it does not make the limiter fall back.
    pub async fn reset_user(&self, user: &str) -> Result<(), StoreError> {
        self.reset(Tier::User, &encode_id(user)).await
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

/// A check the store could not answer at once: its time and its keys, owned, so that it can
/// wait in a `'static` future.
pub(crate) struct Pending {
    live: Arc<Live>,
    now: Duration,
    keys: Keys<'static>,
}
