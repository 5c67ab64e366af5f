//! The contract's last line, checked from outside on a real Redis: "however many tasks, threads
//! or instances check at once, no tier ever admits more than its limit in any window, whatever
//! the limits, costs and clocks the config accepts". Four instances (a store each) whose own
//! clocks are a day ahead, a day behind, 150 ms ahead and right, on Redis time (the default),
//! many tasks each, mixed costs, windows under a second, so that every window slides many times.
//!
//! Nothing inside the limiter is trusted: each admitted request keeps the wall time just before
//! and just after its check. Redis reads `TIME` from the same host clock in between, so a set of
//! one key's admissions whose whole span fits in one window was counted in one window, and
//! their costs must fit the limit. (An outside attack, with this checker, found the app clock's
//! several-instance promise false: docs/REDIS.md, "Time".)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::rng::Rng;
use crate::common::RedisServer;
use tiered_ratelimit::{Backend, Clock, RateLimitConfig, RateLimiter, SystemClock};

/// The system clock, shifted.
#[derive(Clone)]
struct Skewed(i64);

impl Clock for Skewed {
    fn now(&self) -> Duration {
        let us = SystemClock.now().as_micros() as i64 + self.0;
        Duration::from_micros(us.max(0) as u64)
    }
}

fn wall_us() -> u64 {
    crate::common::wall_clock().as_micros() as u64
}

/// One admitted request: its keys with their limits, its cost, and the wall time around it.
struct Admitted {
    keys: Vec<(String, u64)>,
    cost: u64,
    before: u64,
    after: u64,
}

/// The largest cost any one key admitted within one window by the brackets, less its limit,
/// per key where that is above 0: the keys that certainly admitted more than their limit.
fn over_the_limit(admitted: &[Admitted], window_us: u64, slack: u64) -> Vec<String> {
    let mut by_key: HashMap<&str, (u64, Vec<&Admitted>)> = HashMap::new();
    for a in admitted {
        for (key, limit) in &a.keys {
            by_key.entry(key).or_insert((*limit, Vec::new())).1.push(a);
        }
    }
    let mut over = Vec::new();
    for (key, (limit, mut list)) in by_key {
        let limit = limit.saturating_sub(slack);
        list.sort_by_key(|a| a.before);
        for (i, first) in list.iter().enumerate() {
            let end = first.before + window_us;
            let units: u64 = list[i..]
                .iter()
                .take_while(|a| a.before <= end)
                .filter(|a| a.after <= end)
                .map(|a| a.cost)
                .sum();
            if units > limit {
                over.push(format!(
                    "{key}: {units} units in one window (limit {limit})"
                ));
                break;
            }
        }
    }
    over
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_with_skewed_clocks_never_admit_past_a_limit_in_any_window() {
    const DAY: i64 = 86_400_000_000;
    let server = RedisServer::start();
    let mut seed = Rng(wall_us());
    let mut flagged_one_lower = 0;
    // (user, endpoint, global, window in ms)
    for (round, &(user, endpoint, global, window_ms)) in
        [(2, 4, 5, 300), (3, 5, 0, 500), (0, 0, 6, 1000)]
            .iter()
            .enumerate()
    {
        let window = Duration::from_millis(window_ms);
        let mut limiters = Vec::new();
        for offset in [0, DAY, -DAY, 150_000] {
            let config = RateLimitConfig::builder()
                .window(window)
                .user_limit(user)
                .endpoint_limit(endpoint)
                .global_limit(global)
                .key_prefix(format!("sliding{round}"))
                .redis_url(server.url())
                .redis_command_timeout(Duration::from_secs(2))
                .build()
                .unwrap();
            let limiter = RateLimiter::builder(config).clock(Skewed(offset)).build();
            limiter.wait_connected().await;
            assert_eq!(limiter.backend(), Backend::Redis);
            limiters.push(limiter);
        }
        let admitted = Arc::new(Mutex::new(Vec::new()));
        let until = Instant::now() + Duration::from_millis(1500);
        let mut tasks = Vec::new();
        for (i, limiter) in limiters.iter().enumerate() {
            for t in 0..8u64 {
                let limiter = limiter.clone();
                let admitted = admitted.clone();
                let mut rng = Rng(seed.next() ^ (i as u64) << 8 ^ t);
                tasks.push(tokio::spawn(async move {
                    let mut denied = 0u64;
                    while Instant::now() < until {
                        let (u, e, cost) = (rng.below(3), rng.below(2), rng.range(1, 3));
                        let (id, route) = (format!("u{u}"), format!("/e{e}"));
                        let before = wall_us();
                        let d = limiter.check_n(&id, &route, cost).await;
                        let after = wall_us();
                        if d.allowed() {
                            let keys = [("user", &id, user), ("endpoint", &route, endpoint)]
                                .into_iter()
                                .chain([("global", &String::new(), global)])
                                .filter(|(_, _, limit)| *limit > 0)
                                .map(|(tier, k, limit)| (format!("{tier}:{k}"), limit))
                                .collect();
                            admitted.lock().unwrap().push(Admitted {
                                keys,
                                cost,
                                before,
                                after,
                            });
                        } else {
                            denied += 1;
                        }
                        let pause = rng.below(window_ms * 1000 / 8);
                        tokio::time::sleep(Duration::from_micros(pause)).await;
                    }
                    denied
                }));
            }
        }
        let mut denied = 0;
        for task in tasks {
            denied += task.await.unwrap();
        }
        for limiter in &limiters {
            assert_eq!(limiter.backend(), Backend::Redis, "round {round}");
        }
        let admitted = admitted.lock().unwrap();
        let window_us = window_ms * 1000;
        let over = over_the_limit(&admitted, window_us, 0);
        assert!(over.is_empty(), "round {round}: {over:?}");
        assert!(denied > 0, "round {round}: the tiers never filled");
        // The checker is not blind: at limits one lower, these admissions break some window.
        flagged_one_lower += over_the_limit(&admitted, window_us, 1).len();
    }
    assert!(flagged_one_lower > 0, "the checker saw no full window");
}
