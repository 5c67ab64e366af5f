//! A cluster's rollback when a concurrent check renamed the reservation before it (docs/REDIS.md,
//! "Redis Cluster"). On a cluster a request is reserved tier by tier and, when a later tier
//! denies it, removed again from the earlier tiers; a check of the same key in between may
//! rename the reserved member (a plain key taking the totals form, a rebase, an entry moved back
//! from the future). A denied request must still leave nothing behind, and the rollback must
//! never free more than the reservation.
//!
//! Each test makes the race happen, not hope for it: the master owning the denying endpoint key
//! is stopped (SIGSTOP) while request A waits there, after A's user entry is recorded; check B
//! renames that entry on another master; then the master resumes, the endpoint denies A, and A
//! is rolled back. The script alone, case by case: `tests/redis_rollback_script.rs`.
#![cfg(feature = "redis")]

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::script::scored_members;
use common::{RedisCluster, RedisServer};
use tiered_ratelimit::config::MAX_LIMIT;
use tiered_ratelimit::{Backend, Decision, ManualClock, RateLimitConfig, RateLimiter, Tier};
use tokio::sync::{Mutex, MutexGuard};

const MINUTE: Duration = Duration::from_secs(60);
const US: Duration = Duration::from_micros(1);
const T0: Duration = Duration::from_secs(1_700_000_000);

/// A prefix no other test of this binary uses.
fn fresh_prefix() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("rb{}", N.fetch_add(1, Ordering::Relaxed))
}

/// A limiter on the shared cluster with these limits (no global tier), its keys under
/// `prefix`, on `clock`. Its commands wait long enough for a master stopped on purpose.
async fn limiter(prefix: &str, user: u64, endpoint: u64, clock: &ManualClock) -> RateLimiter {
    let config = RateLimitConfig::builder()
        .window(MINUTE)
        .user_limit(user)
        .endpoint_limit(endpoint)
        .global_limit(0)
        .key_prefix(prefix)
        .redis_url(RedisCluster::shared().url())
        .redis_time_source(tiered_ratelimit::TimeSource::App)
        .redis_command_timeout(Duration::from_secs(20))
        .redis_connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), Backend::Redis);
    limiter
}

/// The keys of one race: the user (`user`, its key on a master other than `stopped`), the
/// route whose endpoint key `stopped` owns (`full`), a route on another master (`free`).
struct Race {
    prefix: String,
    stopped: usize,
    user: String,
    /// The master owning the user key (asked before any is stopped: `owner_of` asks them all).
    user_node: usize,
    full: String,
    free: String,
}

/// Resumes the stopped master when dropped, so that a failing test stops nothing for good.
struct Resume(&'static RedisServer);

impl Drop for Resume {
    fn drop(&mut self) {
        self.0.resume();
    }
}

/// One race at a time: a master stopped by one test would stall another's check B, and two
/// tests could each wait for a master the other stopped.
async fn one_at_a_time() -> MutexGuard<'static, ()> {
    static RACES: Mutex<()> = Mutex::const_new(());
    RACES.lock().await
}

impl Race {
    fn new() -> Self {
        let cluster = RedisCluster::shared();
        let prefix = fresh_prefix();
        let key = |tier: &str, id: &str| format!("{prefix}:{tier}:{id}");
        let stopped = cluster.owner_of(&key("endpoint", "/full"));
        let elsewhere = |tier: &str, stem: &str| {
            (0..)
                .map(|i| format!("{stem}{i}"))
                .find(|id| cluster.owner_of(&key(tier, id)) != stopped)
                .unwrap()
        };
        let user = elsewhere("user", "u");
        let user_node = cluster.owner_of(&key("user", &user));
        let free = elsewhere("endpoint", "/free");
        Self {
            prefix,
            stopped,
            user,
            user_node,
            full: "/full".into(),
            free,
        }
    }

    fn user_key(&self) -> String {
        format!("{}:user:{}", self.prefix, self.user)
    }

    /// The user key's members, oldest first.
    fn user_entries(&self) -> Vec<(String, u64)> {
        let key = self.user_key();
        let node = &RedisCluster::shared().nodes[self.user_node];
        scored_members(&node.cli(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]))
    }

    /// Request A (`cost` units of the user on `rl`, on the route `full`, which denies it)
    /// reserves its user entry, then waits at the stopped master while `b` runs; A's decision,
    /// once the master resumes.
    async fn run(&self, rl: &RateLimiter, cost: u64, b: impl Future<Output = ()>) -> Decision {
        let (rl, user, full) = (rl.clone(), self.user.clone(), self.full.clone());
        let a = async move { rl.check_n(&user, &full, cost).await };
        let node = &RedisCluster::shared().nodes[self.stopped];
        let before = self.user_entries();
        node.pause();
        let resume = Resume(node);
        let a = tokio::spawn(a);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.user_entries() == before {
            assert!(Instant::now() < deadline, "A never reserved its user entry");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        b.await;
        drop(resume);
        let a = a.await.unwrap();
        assert!(!a.allowed(), "A: {a:?}");
        assert_eq!(a.blocked_by(), Some(Tier::Endpoint), "A: {a:?}");
        a
    }
}

/// A plain user key takes the totals form under A's reservation (B costs 2): A's entry is
/// renamed, and still goes; B's two units stay, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_renamed_by_the_totals_form_is_removed() {
    let _one = one_at_a_time().await;
    let race = Race::new();
    let clock = ManualClock::at(T0);
    let rl = limiter(&race.prefix, 10, 10, &clock).await;
    let filled = rl.check_n("filler", &race.full, 10).await;
    assert!(filled.allowed(), "{filled:?}");
    let b = async {
        let b = rl.check_n(&race.user, &race.free, 2).await;
        assert!(b.allowed(), "B: {b:?}");
        // B saw A's unit: it was renamed, not gone.
        assert_eq!(b.remaining(), 10 - 3);
    };
    race.run(&rl, 1, b).await;
    let entries = race.user_entries();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].0.ends_with(":2"), "B's entry stays: {entries:?}");
    // Exactly B's two units are counted: eight more fit, a ninth does not.
    let d = rl.check_n(&race.user, &race.free, 8).await;
    assert!(d.allowed(), "{d:?}");
    let d = rl.check(&race.user, &race.free).await;
    assert_eq!(d.blocked_by(), Some(Tier::User), "{d:?}");
}

/// A clock behind moves A's plain entry back to its own time, under a new name (B, cost 1, of
/// an instance 1 s behind). No entry has A's score any more: nothing stands in, and A's entry
/// stays (stricter until it leaves the window, never looser): B's entry is not taken for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_moved_back_by_a_clock_behind_stays_and_takes_nothing_else() {
    let _one = one_at_a_time().await;
    let race = Race::new();
    let clock = ManualClock::at(T0);
    let rl = limiter(&race.prefix, 10, 10, &clock).await;
    let behind = ManualClock::at(T0 - Duration::from_secs(1));
    let late = limiter(&race.prefix, 10, 10, &behind).await;
    let filled = rl.check_n("filler", &race.full, 10).await;
    assert!(filled.allowed(), "{filled:?}");
    let b = async {
        let b = late.check(&race.user, &race.free).await;
        assert!(b.allowed(), "B: {b:?}");
        assert_eq!(b.remaining(), 10 - 2);
    };
    race.run(&rl, 1, b).await;
    let entries = race.user_entries();
    let b_time = (T0 - Duration::from_secs(1)).as_micros() as u64;
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries.iter().all(|e| e.1 == b_time), "{entries:?}");
}

/// The user's key is deleted (an operator's reset) while A waits, and an instance 1 ms behind
/// records B for the user, at a time before A's. A's entry is gone: the rollback must take
/// nothing, and B's entry, admitted after the reset, stays. With cost 2 both entries have the
/// same name (a key starts its running totals again): B's must not go by that name either.
async fn reset_then_a_clock_behind(cost: u64) {
    let _one = one_at_a_time().await;
    let race = Race::new();
    let clock = ManualClock::at(T0);
    let rl = limiter(&race.prefix, 10, 10, &clock).await;
    let behind = ManualClock::at(T0 - Duration::from_millis(1));
    let late = limiter(&race.prefix, 10, 10, &behind).await;
    let filled = rl.check_n("filler", &race.full, 10).await;
    assert!(filled.allowed(), "{filled:?}");
    let mut a_entry = Vec::new();
    let b = async {
        a_entry = race.user_entries();
        // The DEL of `reset_user`, sent to the user key's master alone (the reset's PUBLISH
        // could go to the stopped one).
        let node = &RedisCluster::shared().nodes[race.user_node];
        assert_eq!(node.cli(&["DEL", &race.user_key()]).trim(), "1");
        let b = late.check_n(&race.user, &race.free, cost).await;
        assert!(b.allowed(), "B: {b:?}");
        assert_eq!(b.remaining(), 10 - cost);
    };
    race.run(&rl, cost, b).await;
    let entries = race.user_entries();
    let b_time = (T0 - Duration::from_millis(1)).as_micros() as u64;
    assert_eq!(entries.len(), 1, "B's entry stays: {entries:?}");
    assert_eq!(entries[0].1, b_time, "{entries:?}");
    if cost > 1 {
        assert_eq!(entries[0].0, a_entry[0].0, "the same name as A's");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_deleted_by_a_reset_takes_nothing_else() {
    reset_then_a_clock_behind(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_deleted_by_a_reset_takes_nothing_else_by_its_name() {
    reset_then_a_clock_behind(2).await;
}

/// B's clock is a window past A's reservation: B trims it (the reservation is gone) and records
/// its own entry (with cost 2, under A's name: the emptied key starts its running totals
/// again). The rollback then finds no entry of A's, and must not take B's for it.
async fn trimmed_by_a_clock_ahead(cost: u64) {
    let _one = one_at_a_time().await;
    let race = Race::new();
    let clock = ManualClock::at(T0);
    let rl = limiter(&race.prefix, 10, 10, &clock).await;
    let ahead = ManualClock::at(T0 + MINUTE + US);
    let early = limiter(&race.prefix, 10, 10, &ahead).await;
    let filled = rl.check_n("filler", &race.full, 10).await;
    assert!(filled.allowed(), "{filled:?}");
    let b = async {
        let b = early.check_n(&race.user, &race.free, cost).await;
        assert!(b.allowed(), "B: {b:?}");
        assert_eq!(b.remaining(), 10 - cost, "A's entry left B's window");
    };
    race.run(&rl, cost, b).await;
    let entries = race.user_entries();
    let b_time = (T0 + MINUTE + US).as_micros() as u64;
    assert_eq!(entries.len(), 1, "B's entry stays: {entries:?}");
    assert_eq!(entries[0].1, b_time, "{entries:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_trimmed_by_a_clock_ahead_takes_nothing_else() {
    trimmed_by_a_clock_ahead(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_trimmed_by_a_clock_ahead_takes_nothing_else_by_its_name() {
    trimmed_by_a_clock_ahead(2).await;
}

/// A totals key is rebased under A's reservation (B's total would pass 2^52): every member is
/// renamed; an entry of A's score and cost goes all the same, and the key counts exactly the
/// units of the requests admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_renamed_by_a_rebase_is_removed() {
    const COST: u64 = MAX_LIMIT / 4; // 2^48: a running total passes 2^52 at the 17th
    let _one = one_at_a_time().await;
    let race = Race::new();
    let clock = ManualClock::at(T0);
    let rl = limiter(&race.prefix, MAX_LIMIT, MAX_LIMIT, &clock).await;
    // Fifteen requests of the user, half a window (and 1 µs) apart: each window holds two, and
    // the key is never empty, so its running total only grows (15 · 2^48).
    let step = MINUTE / 2 + US;
    for i in 0..15 {
        if i > 0 {
            clock.advance(step);
        }
        let d = rl.check_n(&race.user, &race.free, COST).await;
        assert!(d.allowed(), "{i}: {d:?}");
    }
    clock.advance(step);
    // The route A asks for is full at this time.
    for _ in 0..4 {
        assert!(rl.check_n("filler", &race.full, COST).await.allowed());
    }
    let b = async {
        // The 15th, A (the 16th, its total exactly 2^52) and B.
        let b = rl.check_n(&race.user, &race.free, COST).await;
        assert!(b.allowed(), "B: {b:?}");
        assert_eq!(b.remaining(), MAX_LIMIT - 3 * COST, "B saw A's entry");
        let total = |m: &str| u64::from_str_radix(&m[..16], 16).unwrap();
        let entries = race.user_entries();
        assert!(
            entries.iter().all(|(m, _)| total(m) <= 3 * COST),
            "rebased: {entries:?}"
        );
    };
    race.run(&rl, COST, b).await;
    // The newest entry at A's score and cost stood in (B, renamed): the 15th and A stay, half
    // a window apart, two units of COST, counted exactly. Two more fit, a third does not.
    let entries = race.user_entries();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(entries[0].1 + step.as_micros() as u64, entries[1].1);
    for _ in 0..2 {
        let d = rl.check_n(&race.user, &race.free, COST).await;
        assert!(d.allowed(), "{d:?}");
    }
    let d = rl.check_n(&race.user, &race.free, COST).await;
    assert_eq!(d.blocked_by(), Some(Tier::User), "{d:?}");
}
