//! The in-memory comparison's cases (issue 11, item 3), set up once and run for any number of
//! checks, for both sides: ours (`RateLimiter::check`, three tiers, limits never reached, the
//! default system clock) and governor's keyed limiter (three `check_key`s, one per tier, on its
//! default clock). Shared by the criterion bench `check` and the example `pair_check`, so that
//! both measure the same work.

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use governor::{DefaultKeyedRateLimiter, Quota};
use tiered_ratelimit::{RateLimitConfig, RateLimiter};

/// Limits never reached in a bench: the admitted path, the one every served request takes.
pub const HUGE: u64 = 1 << 40;

/// The users of the spread cases.
pub const USERS: usize = 100_000;

/// Polls a future that completes without waiting (the memory store never waits).
pub fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("the memory store never waits"),
    }
}

/// Ours: three tiers with limits never reached, on the system clock.
pub fn ours(window: Duration) -> RateLimiter {
    RateLimiter::new(
        RateLimitConfig::builder()
            .window(window)
            .user_limit(HUGE)
            .endpoint_limit(HUGE)
            .global_limit(HUGE)
            .build()
            .expect("valid config"),
    )
}

/// governor's keyed limiter, one per tier, with a quota never reached.
pub struct Governor {
    user: DefaultKeyedRateLimiter<String>,
    endpoint: DefaultKeyedRateLimiter<String>,
    global: DefaultKeyedRateLimiter<String>,
}

impl Default for Governor {
    fn default() -> Self {
        let quota = || Quota::per_second(NonZeroU32::MAX);
        Self {
            user: DefaultKeyedRateLimiter::keyed(quota()),
            endpoint: DefaultKeyedRateLimiter::keyed(quota()),
            global: DefaultKeyedRateLimiter::keyed(quota()),
        }
    }
}

impl Governor {
    /// Three `check_key`s, most specific first, stopping at the first that refuses.
    pub fn check(&self, user: &String, endpoint: &String, global: &String) -> bool {
        self.user.check_key(user).is_ok()
            && self.endpoint.check_key(endpoint).is_ok()
            && self.global.check_key(global).is_ok()
    }
}

/// Runs `per_thread(thread, iters / threads)` on `threads` threads at once; how long they took.
pub fn on_threads(threads: usize, iters: u64, per_thread: impl Fn(usize, u64) + Sync) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let f = &per_thread;
            s.spawn(move || f(t, iters / threads as u64));
        }
    });
    start.elapsed()
}

/// How long `f` takes, run on this thread.
fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// One case of the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// One thread, one user, one route (`hot_keys_1_thread`).
    HotKeys,
    /// Two threads, the same user and route (`two_threads_same_keys`).
    SameKeys,
    /// `threads` threads over 100,000 users, each check another user, one route, a 100 ms
    /// window (`two_threads_100k_users`, `one_thread_100k_users`).
    Users { threads: usize },
}

impl Case {
    /// The criterion group's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::HotKeys => "hot_keys_1_thread",
            Self::SameKeys => "two_threads_same_keys",
            Self::Users { threads: 1 } => "one_thread_100k_users",
            Self::Users { .. } => "two_threads_100k_users",
        }
    }
}

/// A case set up on both sides: their limiters, with every user of a spread case already seen.
pub struct Setup {
    case: Case,
    ours: RateLimiter,
    governor: Governor,
    ids: Vec<String>,
    keys: [String; 3],
}

impl Setup {
    /// `case`, set up.
    pub fn new(case: Case) -> Self {
        let keys = ["alice", "/api/v1/items", "global"].map(str::to_owned);
        let (window, ids) = match case {
            Case::HotKeys | Case::SameKeys => (Duration::from_secs(1), Vec::new()),
            Case::Users { .. } => (
                Duration::from_millis(100),
                (0..USERS).map(|i| format!("user-{i}")).collect(),
            ),
        };
        let setup = Self {
            case,
            ours: ours(window),
            governor: Governor::default(),
            ids,
            keys,
        };
        // Each side's users in a loop of its own, so that neither side's allocations sit
        // between the other's.
        for id in &setup.ids {
            ready(setup.ours.check(id, &setup.keys[1]));
        }
        for id in &setup.ids {
            setup.governor.check(id, &setup.keys[1], &setup.keys[2]);
        }
        setup
    }

    /// The user of check `i` on thread `t` of a spread case.
    fn user(&self, t: usize, i: u64) -> &String {
        &self.ids[(i as usize * 7919 + t * 50_000) % USERS]
    }

    /// How long `iters` checks of ours take (split over the case's threads).
    pub fn ours(&self, iters: u64) -> Duration {
        self.run(iters, |user, route, _| {
            ready(self.ours.check(user, route)).allowed()
        })
    }

    /// How long `iters` checks of governor's take (split over the case's threads).
    pub fn governor(&self, iters: u64) -> Duration {
        self.run(iters, |user, route, global| {
            self.governor.check(user, route, global)
        })
    }

    /// How long `iters` calls of `check(user, route, global)` take, on the case's threads and
    /// users (on hot keys, the keys pass through `black_box`, so that nothing is hoisted out of
    /// the loop).
    fn run(
        &self,
        iters: u64,
        check: impl Fn(&String, &String, &String) -> bool + Sync,
    ) -> Duration {
        let [user, route, global] = &self.keys;
        match self.case {
            Case::HotKeys => timed(|| {
                for _ in 0..iters {
                    black_box(check(black_box(user), black_box(route), black_box(global)));
                }
            }),
            Case::SameKeys => on_threads(2, iters, |_, n| {
                for _ in 0..n {
                    black_box(check(user, route, global));
                }
            }),
            Case::Users { threads } => on_threads(threads, iters, |t, n| {
                for i in 0..n {
                    black_box(check(self.user(t, i), route, global));
                }
            }),
        }
    }
}
