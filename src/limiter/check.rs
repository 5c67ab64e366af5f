//! The check path of a [`RateLimiter`]: the configuration read once, the request's keys, the
//! store's answer now (memory) or through a future (Redis, custom stores), and the decision
//! built from it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::live::Live;
use super::RateLimiter;
use crate::config::HotConfig;
use crate::decision::Decision;
use crate::header_style::HeaderStyle;
use crate::observe;
use crate::request::{CheckRequest, Keys, UserKey, NO_TIER};
use crate::store::{Answer, Direct, StoreError, StoreRequest};
use crate::tier::Tier;

/// The decision for a store's answer to `req`, with the tiers that applied (`limits`, by
/// tier: the request's keys') and its cost; a failing store lets the request through (and is
/// counted under `backend`'s label).
#[inline]
fn conclude(
    answer: Result<Answer, StoreError>,
    backend: impl FnOnce() -> &'static str,
    req: &StoreRequest<'_>,
    limits: [u64; 3],
) -> Decision {
    let decision = match answer {
        Ok(answer) => decision_of(answer, req),
        Err(error) => store_failed(&error, backend()),
    };
    completed(decision, limits, req.window, req.cost)
}

/// `decision` with the tiers that applied (`limits`, by tier), the window and the cost set.
#[inline]
fn completed(mut decision: Decision, limits: [u64; 3], window: Duration, cost: u64) -> Decision {
    decision.limits = limits;
    decision.window = window;
    decision.set_cost(cost);
    decision
}

/// A store's denial of `req` by `tier`, named instead by the first enforced tier whose limit
/// is below the request's cost if there is one: that request can never be admitted, whatever
/// the logs hold, while the tier that was full first would name a wait after which the request
/// is denied all the same. Its wait is one window, as the algorithm gives such a tier. A
/// denial recorded nothing, so only its name and wait change; blocks (the store's `Blocked`)
/// still answer first.
#[cold]
#[inline(never)]
fn never_fits_or(req: &StoreRequest<'_>, tier: Tier, retry_after_us: u64) -> Decision {
    match req.tiers.iter().find(|t| !t.shadow && t.limit < req.cost) {
        Some(t) => Decision::deny(t.tier, crate::clock::saturating_micros(req.window).max(1)),
        None => Decision::deny(tier, retry_after_us),
    }
}

/// The decision a store's answer to `req` gives (before the tiers, the window and the cost
/// are set).
#[inline]
fn decision_of(answer: Answer, req: &StoreRequest<'_>) -> Decision {
    match answer {
        Answer::Denied {
            tier,
            retry_after_us,
        } if req.cost > 1 => never_fits_or(req, tier, retry_after_us),
        answer => unit_decision_of(answer),
    }
}

/// The decision a store's answer gives to a request of one unit (which fits any tier it
/// applies to), or to any request but a denied one.
#[inline]
fn unit_decision_of(answer: Answer) -> Decision {
    match answer {
        Answer::Admitted {
            remaining,
            binding,
            resets_in_us,
            shadow_denied: None,
        } => Decision::admit(remaining, binding, resets_in_us),
        Answer::Admitted {
            shadow_denied: Some((tier, wait_us)),
            ..
        } => Decision::shadow_deny(tier, wait_us),
        Answer::Denied {
            tier,
            retry_after_us,
        } => Decision::deny(tier, retry_after_us),
        Answer::Blocked {
            tier,
            retry_after_us,
        } => Decision::block(tier, retry_after_us),
    }
}

/// A failing store lets the request through: counted, logged, nothing remaining.
#[cold]
fn store_failed(error: &StoreError, backend: &'static str) -> Decision {
    observe::store_error(backend);
    tracing::error!(%error, backend, "rate limit store failed; request let through");
    Decision::let_through()
}

/// What [`RateLimiter::try_now`] gives: the decision, or what the waiting path needs (the
/// configuration, the time and the request's keys); with the configuration's header style.
type Tried<'a> = (
    Result<Decision, (Arc<Live>, Duration, Keys<'a>)>,
    HeaderStyle,
);

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
impl RateLimiter {
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

    /// The decision, made now, when the store answers without waiting ([`Store::check_now`](crate::store::Store::check_now):
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
    /// published of it ([`Hot`](crate::config::Hot), no lock and no shared write); any other, or a store that
    /// must wait, takes [`try_now_loaded`](Self::try_now_loaded)'s path.
    #[inline]
    fn try_now<'a>(&self, request: CheckRequest<'a>) -> Tried<'a> {
        let Some(hot) = self.inner.hot.read() else {
            return self.try_now_loaded(request);
        };
        let now = self.inner.clock.now();
        let mut held = None;
        let route_keys = &self.inner.route_keys;
        let keys = Keys::with_route_key(&hot, request, None, |r| route_keys.key_of(r, &mut held));
        if let Some(decision) = self.decide_direct(&keys, now, &hot) {
            observe::record(&decision);
            return (Ok(decision), hot.style);
        }
        let mut tiers = [NO_TIER; 3];
        let decision = match keys.store_request(now, &hot, &mut tiers) {
            Some(req) => match self.decide_now(&req, keys.limits()) {
                Some(decision) => decision,
                None => return self.try_now_loaded(request),
            },
            None => Decision::unlimited(request.cost),
        };
        observe::record(&decision);
        (Ok(decision), hot.style)
    }

    /// [`try_now`](Self::try_now) under the whole configuration, loaded.
    #[inline(never)]
    fn try_now_loaded<'a>(&self, request: CheckRequest<'a>) -> Tried<'a> {
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
            Some(req) => match self.decide_now(&req, keys.limits()) {
                Some(decision) => decision,
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

    /// The decision on a unit request of the hot configuration with no tier in shadow mode,
    /// from the memory store's direct path (`store/memory/direct.rs`: plain data in, the
    /// same algorithm on the same logs, no [`StoreRequest`] built), if it takes it: tracked
    /// keys, no block, no sweep due. Else `None`, with nothing recorded, and the request
    /// takes the store's general path.
    #[inline]
    fn decide_direct(&self, keys: &Keys<'_>, now: Duration, hot: &HotConfig) -> Option<Decision> {
        let memory = self.inner.memory.as_ref()?;
        let limits = keys.limits();
        if keys.cost != 1 || hot.shadow != [false; 3] || limits == [0; 3] {
            return None;
        }
        let answer = memory.answer_direct(&Direct {
            user: keys.user_part(),
            endpoint: keys.endpoint_part(),
            limits,
            now: crate::clock::saturating_micros(now),
            window: crate::clock::saturating_micros(hot.window),
        })?;
        Some(completed(unit_decision_of(answer), limits, hot.window, 1))
    }

    /// The decision on `req` (whose tiers' limits, by tier, are `limits`) now, if the store
    /// answers without waiting: the memory store's answer as it makes it, any other's through
    /// [`Store::check_now`](crate::store::Store::check_now).
    #[inline]
    fn decide_now(&self, req: &StoreRequest<'_>, limits: [u64; 3]) -> Option<Decision> {
        let answer = match &self.inner.memory {
            Some(memory) => memory.answer(req),
            None => self.inner.store.check_now(req)?.map(Answer::of_outcome),
        };
        Some(conclude(
            answer,
            || self.inner.store.backend().label(),
            req,
            limits,
        ))
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
        let answer = outcome.map(Answer::of_outcome);
        observe::store_duration(backend, started.elapsed().as_secs_f64());
        self.inner.watch_backend();
        let decision = conclude(answer, || backend, &store_request, keys.limits());
        observe::record(&decision);
        decision
    }
}

/// A check the store could not answer at once: its time and its keys, owned, so that it can
/// wait in a `'static` future.
pub(crate) struct Pending {
    live: Arc<Live>,
    now: Duration,
    keys: Keys<'static>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoreOutcome, TierCheck};

    /// A unit request's decision on a custom store's answer.
    fn decision_of(answer: Answer) -> Decision {
        let tiers = [TierCheck::new(Tier::User, "u", 1)];
        super::decision_of(
            answer,
            &StoreRequest::new(Duration::ZERO, Duration::ZERO, 1, &tiers),
        )
    }

    /// The decision on a custom store's denial by the user tier after `wait`.
    fn denied(wait: Duration) -> Decision {
        decision_of(Answer::of_outcome(StoreOutcome::denied(Tier::User, wait)))
    }

    /// A custom store's wait is kept in whole µs, rounded up: its nanoseconds never make a wait
    /// (or its whole seconds) shorter than the truth.
    #[test]
    fn a_custom_stores_wait_is_kept_in_microseconds_rounded_up() {
        let d = denied(Duration::new(1, 500));
        assert_eq!(d.retry_after(), Duration::from_micros(1_000_001));
        assert_eq!(d.retry_after_secs(), 2);
        let d = denied(Duration::from_nanos(1));
        assert_eq!(
            (d.retry_after(), d.retry_after_secs()),
            (Duration::from_micros(1), 1)
        );
        let d = denied(Duration::MAX);
        assert_eq!(d.retry_after(), Duration::from_micros(u64::MAX));
        let a = decision_of(Answer::of_outcome(StoreOutcome::admitted(
            0,
            Tier::Global,
            Duration::from_nanos(1_001),
        )));
        assert_eq!(a.binding(), Some((Tier::Global, Duration::from_micros(2))));
        let shadow = decision_of(Answer::of_outcome(
            StoreOutcome::admitted(0, Tier::Global, Duration::ZERO)
                .with_shadow_denied(Tier::Endpoint, Duration::from_nanos(1_500)),
        ));
        assert_eq!(
            (shadow.allowed(), shadow.retry_after()),
            (true, Duration::from_micros(2))
        );
        let blocked = decision_of(Answer::of_outcome(StoreOutcome::blocked(
            Tier::User,
            Duration::from_nanos(999),
        )));
        assert_eq!(
            (blocked.by_block(), blocked.retry_after()),
            (true, Duration::from_micros(1))
        );
    }
}
