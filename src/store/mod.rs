//! Where the sliding logs live: [`MemoryStore`] (the default), [`RedisStore`] (feature `redis`)
//! and [`FallbackStore`], which swaps Redis for memory, once, when Redis fails.
//!
//! A store decides one request for all its tiers at once: it trims each tier's log, and admits
//! only if every tier has room, recording the request in every tier; a denied request leaves no
//! entry anywhere. That is why the [`Store`] trait takes the whole [`StoreRequest`] rather than one
//! key at a time.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::connect_error::ConnectError;
use crate::tier::Tier;

#[cfg(feature = "redis")]
mod fallback;
mod memory;
mod outcome;
#[cfg(feature = "redis")]
mod redis;
mod usage;

#[cfg(feature = "redis")]
pub use self::fallback::FallbackStore;
pub(crate) use self::memory::Direct;
pub use self::memory::MemoryStore;
pub(crate) use self::outcome::Answer;
pub use self::outcome::StoreOutcome;
#[cfg(feature = "redis")]
pub use self::redis::RedisStore;
pub(crate) use self::usage::secs as usage_secs;
pub use self::usage::TierUsage;

/// One tier of a [`StoreRequest`]. Fields may be added: build one with [`TierCheck::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TierCheck<'a> {
    /// Which tier.
    pub tier: Tier,
    /// The tier's key part, already encoded (see [`crate::key`]); empty for the global tier.
    pub id: &'a str,
    /// The tier's limit for this request (never 0: switched-off tiers are left out).
    pub limit: u64,
    /// Shadow mode: with room, the tier records the request as usual; when full it does not
    /// deny, and the request is recorded in the tiers that have room (not in this one) and
    /// reported as a shadow denial ([`StoreOutcome::with_shadow_denied`]).
    pub shadow: bool,
}

/// Everything a store needs to decide one request. Fields may be added: build one with
/// [`StoreRequest::new`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct StoreRequest<'a> {
    /// The limiter's `now` since the UNIX epoch (a Redis store set to
    /// [`TimeSource::Redis`](crate::TimeSource::Redis) reads its own).
    pub now: Duration,
    /// The sliding window.
    pub window: Duration,
    /// How many units the request spends (1 for one request).
    pub cost: u64,
    /// The enabled tiers, most specific first (user, endpoint, global), each at most once: the
    /// memory and Redis stores answer any other request with an error.
    pub tiers: &'a [TierCheck<'a>],
}

impl<'a> TierCheck<'a> {
    /// A tier to check: `id` is the tier's key part, already encoded (see [`crate::key`]),
    /// empty for the global tier; `limit` is never 0.
    pub fn new(tier: Tier, id: &'a str, limit: u64) -> Self {
        Self {
            tier,
            id,
            limit,
            shadow: false,
        }
    }

    /// The same tier in shadow mode (or not).
    #[must_use]
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }
}

impl<'a> StoreRequest<'a> {
    /// A request at `now` over `window`, spending `cost` units in each of `tiers` (most
    /// specific first).
    pub fn new(now: Duration, window: Duration, cost: u64, tiers: &'a [TierCheck<'a>]) -> Self {
        Self {
            now,
            window,
            cost,
            tiers,
        }
    }

    /// The tiers the request names, as bits (`1 << tier`: user 1, endpoint 2, global 4);
    /// `None` unless they are named most specific first, each at most once. Every store
    /// answers such a request with [`misordered`].
    #[inline]
    pub(crate) fn tier_bits(&self) -> Option<u8> {
        // In order iff each tier's bit is above every earlier one's.
        let mut bits = 0u8;
        let mut ordered = self.tiers.len() <= 3;
        for t in self.tiers {
            let bit = 1u8 << (t.tier as u8);
            ordered &= bit > bits;
            bits |= bit;
        }
        ordered.then_some(bits)
    }
}

/// The error for a request whose tiers are not named most specific first, each at most once.
#[cold]
pub(crate) fn misordered() -> StoreError {
    StoreError::new(
        "a request names its tiers most specific first (user, endpoint, global), each at most once",
    )
}

/// Which kind of store serves a limiter now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The in-process store.
    Memory,
    /// Redis.
    Redis,
    /// A user-supplied [`Store`].
    Custom,
}

impl Backend {
    /// Its metrics label (`backend="..."`).
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            Self::Redis => "redis",
            Self::Custom => "custom",
        }
    }
}

/// A store failed to answer (Redis unreachable, a timeout, a script error).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl StoreError {
    /// A store error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    /// A store error with a message and its cause.
    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// Called with the new backend on every switch (see [`Store::set_backend_listener`]).
pub type BackendListener = Arc<dyn Fn(Backend) + Send + Sync>;

/// A place to keep sliding logs: the one seam between the limiter and its storage.
///
/// Implementations must decide a request atomically across its tiers: however many checks run
/// at once (threads, tasks, processes), no tier may admit more than its limit within any window,
/// and a denied request must leave no entry in any tier. The decision itself is the same for
/// every store; a store gathers each tier's facts and records where the verdict says.
///
/// Only [`check`](Self::check), [`reset`](Self::reset) and [`backend`](Self::backend) are
/// required; the rest have defaults that suit a store that is always ready and never changes
/// backend.
pub trait Store: Send + Sync + 'static {
    /// Decides one request for all its tiers.
    fn check(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send;

    /// The synchronous fast path: the answer at once when this store needs no waiting (memory),
    /// `None` when it must wait (then the limiter awaits [`check`](Self::check)). On `Some`, the
    /// request is decided and recorded exactly as `check` would. Default: `None`.
    #[inline]
    fn check_now(&self, request: &StoreRequest<'_>) -> Option<Result<StoreOutcome, StoreError>> {
        let _ = request;
        None
    }

    /// What each tier of `request` holds now, in the request's tier order, **recording
    /// nothing** (its cost is ignored): no entry, no trim, no new key, no expiry touched.
    /// Default: an error saying that this store does not report usage, so a custom store
    /// written before this method keeps compiling (and [`RateLimiter::usage`] says why it has
    /// no answer).
    ///
    /// [`RateLimiter::usage`]: crate::RateLimiter::usage
    fn usage(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<Vec<TierUsage>, StoreError>> + Send {
        let _ = request;
        std::future::ready(Err(StoreError::new(
            "this store does not report usage (Store::usage is not implemented)",
        )))
    }

    /// Forgets everything recorded for one key (to unblock a user, say).
    fn reset(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Refuses every request counted under one key (`tier`'s key part `id`, as in a
    /// [`TierCheck`]) for `duration` from `now` (the limiter's clock; a store with a clock of its
    /// own, as Redis, may count the duration on that one). A check of a request with a blocked
    /// key answers [`StoreOutcome::Blocked`] and records nothing. Blocking again replaces the
    /// block's end. The block ends by itself and then takes no room. Default: an error saying
    /// that this store does not keep blocks.
    fn block(
        &self,
        tier: Tier,
        id: &str,
        now: Duration,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (tier, id, now, duration);
        std::future::ready(Err(no_blocks()))
    }

    /// Ends the block of `tier`'s key part `id` at once, and the blocks of every bucket of it:
    /// the user tier's per-route buckets `id@<route>` (for routes with a user limit of their
    /// own), whatever the configuration says now (nothing happens where there is none).
    /// Default: an error saying that this store does not keep blocks.
    fn unblock(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (tier, id);
        std::future::ready(Err(no_blocks()))
    }

    /// Which kind of store answers now.
    fn backend(&self) -> Backend;

    /// Waits until the store can answer: its first connection is up, or it has failed and the
    /// store has fallen back (bounded by the store's own connect timeout). Default: at once.
    fn wait_ready(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// The strict start: waits like [`wait_ready`](Self::wait_ready), but returns why the
    /// store cannot use its backend instead of falling back. Default: ready at once.
    fn try_ready(&self) -> impl Future<Output = Result<(), ConnectError>> + Send {
        std::future::ready(Ok(()))
    }

    /// Why the store left its backend, while it has (a fallback's cause). Default: `None`.
    fn fallback_cause(&self) -> Option<ConnectError> {
        None
    }

    /// Asks the store to call `listener` with the new backend on every switch. Returns `false`
    /// (the default) when the store does not: the limiter then compares
    /// [`backend`](Self::backend) before and after each check itself.
    fn set_backend_listener(&self, listener: BackendListener) -> bool {
        let _ = listener;
        false
    }
}

fn no_blocks() -> StoreError {
    StoreError::new("this store does not keep blocks (Store::block is not implemented)")
}

type Boxed<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe twin of [`Store`]: the limiter holds every store as a `Box<dyn DynStore>`.
pub(crate) trait DynStore: Send + Sync + 'static {
    fn check<'a>(
        &'a self,
        request: &'a StoreRequest<'a>,
    ) -> Boxed<'a, Result<StoreOutcome, StoreError>>;
    fn check_now(&self, request: &StoreRequest<'_>) -> Option<Result<StoreOutcome, StoreError>>;
    fn reset<'a>(&'a self, tier: Tier, id: &'a str) -> Boxed<'a, Result<(), StoreError>>;
    fn block<'a>(
        &'a self,
        tier: Tier,
        id: &'a str,
        now: Duration,
        duration: Duration,
    ) -> Boxed<'a, Result<(), StoreError>>;
    fn unblock<'a>(&'a self, tier: Tier, id: &'a str) -> Boxed<'a, Result<(), StoreError>>;
    fn usage<'a>(
        &'a self,
        request: &'a StoreRequest<'a>,
    ) -> Boxed<'a, Result<Vec<TierUsage>, StoreError>>;
    fn backend(&self) -> Backend;
    fn wait_ready(&self) -> Boxed<'_, ()>;
    fn try_ready(&self) -> Boxed<'_, Result<(), ConnectError>>;
    fn fallback_cause(&self) -> Option<ConnectError>;
    fn set_backend_listener(&self, listener: BackendListener) -> bool;
}

impl<S: Store> DynStore for S {
    fn check<'a>(
        &'a self,
        request: &'a StoreRequest<'a>,
    ) -> Boxed<'a, Result<StoreOutcome, StoreError>> {
        Box::pin(Store::check(self, request))
    }
    #[inline]
    fn check_now(&self, request: &StoreRequest<'_>) -> Option<Result<StoreOutcome, StoreError>> {
        Store::check_now(self, request)
    }
    fn reset<'a>(&'a self, tier: Tier, id: &'a str) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(Store::reset(self, tier, id))
    }
    fn block<'a>(
        &'a self,
        tier: Tier,
        id: &'a str,
        now: Duration,
        duration: Duration,
    ) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(Store::block(self, tier, id, now, duration))
    }
    fn unblock<'a>(&'a self, tier: Tier, id: &'a str) -> Boxed<'a, Result<(), StoreError>> {
        Box::pin(Store::unblock(self, tier, id))
    }
    fn usage<'a>(
        &'a self,
        request: &'a StoreRequest<'a>,
    ) -> Boxed<'a, Result<Vec<TierUsage>, StoreError>> {
        Box::pin(Store::usage(self, request))
    }
    fn backend(&self) -> Backend {
        Store::backend(self)
    }
    fn wait_ready(&self) -> Boxed<'_, ()> {
        Box::pin(Store::wait_ready(self))
    }
    fn try_ready(&self) -> Boxed<'_, Result<(), ConnectError>> {
        Box::pin(Store::try_ready(self))
    }
    fn fallback_cause(&self) -> Option<ConnectError> {
        Store::fallback_cause(self)
    }
    fn set_backend_listener(&self, listener: BackendListener) -> bool {
        Store::set_backend_listener(self, listener)
    }
}
