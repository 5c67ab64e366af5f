//! The script's two member forms (docs/REDIS.md, "The script"): plain members for keys that
//! only saw requests of cost 1, running totals once a costly request is recorded, and what
//! moves between them. Each test runs on a `redis-server` of its own, driven by `ManualClock`s.
#![cfg(feature = "redis")]

mod common;

use std::time::Duration;

use common::{limits, RedisServer};
use tiered_ratelimit::{Backend, ManualClock, RateLimiter, Tier, TimeSource};

const MINUTE: Duration = Duration::from_secs(60);
const US: Duration = Duration::from_micros(1);
const T0: Duration = Duration::from_secs(1_700_000_000);

async fn connected(server: &RedisServer, user_limit: u64, clock: &ManualClock) -> RateLimiter {
    let config = limits(user_limit, 0, 0, MINUTE)
        .redis_url(server.url())
        .redis_time_source(TimeSource::App)
        .redis_command_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), Backend::Redis);
    limiter
}

/// The key's members and scores, oldest first.
fn entries(server: &RedisServer, key: &str) -> Vec<(String, u64)> {
    common::script::scored_members(&server.cli(&["ZRANGE", key, "0", "-1", "WITHSCORES"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_key_takes_running_totals_when_a_costly_request_is_recorded() {
    let server = RedisServer::start();
    let clock = ManualClock::at(T0);
    let limiter = connected(&server, 10, &clock).await;
    let key = "rate_limit:user:u";
    for left in [9, 8, 7] {
        assert_eq!(limiter.check("u", "/").await.remaining(), left);
        clock.advance(Duration::from_millis(1));
    }
    // Plain: each member is its own score.
    for (member, score) in entries(&server, key) {
        assert_eq!(member, score.to_string());
    }
    // A costly request that does not fit changes nothing.
    assert!(!limiter.check_n("u", "/", 8).await.allowed());
    assert_eq!(entries(&server, key).len(), 3);
    // One that fits turns the key into running totals, in recording order.
    assert_eq!(limiter.check_n("u", "/", 4).await.remaining(), 3);
    let members: Vec<String> = entries(&server, key).into_iter().map(|e| e.0).collect();
    assert_eq!(
        members,
        [
            "0000000000000001:1",
            "0000000000000002:1",
            "0000000000000003:1",
            "0000000000000007:4"
        ]
    );
    // Counting goes on exactly, at cost 1 and at larger costs.
    assert!(!limiter.check_n("u", "/", 4).await.allowed());
    for left in [2, 1, 0] {
        assert_eq!(limiter.check("u", "/").await.remaining(), left);
    }
    let d = limiter.check("u", "/").await;
    assert_eq!(d.blocked_by(), Some(Tier::User));
    // The first plain entry (at T0) leaves first: the wait is counted from it.
    let waited = d.retry_after();
    assert_eq!(
        waited,
        MINUTE + US - Duration::from_millis(3),
        "{d:?} after 3 ms"
    );
    // Once every entry has left, the key starts plain again.
    clock.advance(MINUTE * 2);
    assert!(limiter.check("u", "/").await.allowed());
    let now = (T0 + Duration::from_millis(3) + MINUTE * 2)
        .as_micros()
        .to_string();
    assert_eq!(
        entries(&server, key)
            .into_iter()
            .map(|e| e.0)
            .collect::<Vec<_>>(),
        [now]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_entry_from_the_future_is_moved_back_before_it_shapes_an_answer() {
    let server = RedisServer::start();
    let right = ManualClock::at(T0);
    // Ahead by less than a window, so that its trim keeps the others' entries.
    let ahead = ManualClock::at(T0 + Duration::from_secs(30));
    let a = connected(&server, 4, &right).await;
    let b = connected(&server, 4, &ahead).await;
    let key = "rate_limit:user:u";
    assert!(a.check("u", "/").await.allowed());
    // An instance 30 s ahead records behind an older entry: the key's oldest is not from the
    // future, so nothing needs to move yet.
    assert!(b.check("u", "/").await.allowed());
    right.advance(Duration::from_secs(1));
    assert_eq!(a.check("u", "/").await.remaining(), 1);
    assert_eq!(a.check("u", "/").await.remaining(), 0);
    // Full: the entry from the future is moved back to now (and renamed after its new
    // time) before the wait is computed, so no wait is longer than a window.
    let d = a.check("u", "/").await;
    assert_eq!(d.blocked_by(), Some(Tier::User));
    assert_eq!(d.retry_after(), MINUTE + US - Duration::from_secs(1));
    let now = (T0 + Duration::from_secs(1)).as_micros() as u64;
    for (member, score) in entries(&server, key) {
        assert!(score <= now, "{member} at {score} is after {now}");
        let named: u64 = member.split('-').next().unwrap().parse().unwrap();
        assert_eq!(named, score, "a plain member names its score");
    }
    // After a window the moved entry has left with the others recorded then.
    right.advance(MINUTE + US);
    assert_eq!(a.check("u", "/").await.remaining(), 3);
}

/// The script replies with the oldest plain member's name as its time, without parsing it,
/// unless the name holds a `-k` suffix or may be after now: the reset must be right whatever the
/// names' lengths against now's (a `-` sorts below the digits, and a shorter name is older).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_plain_entry_is_read_right_whatever_its_digits() {
    let server = RedisServer::start();
    // 10,000,010 µs: eight digits.
    let now = 10_000_010u64;
    let clock = ManualClock::at(Duration::from_micros(now));
    let a = connected(&server, 4, &clock).await;
    let key = "rate_limit:user:u";
    let resets_in = |d: &tiered_ratelimit::Decision| d.binding().map(|(_, after)| after);
    let until_gone = |at: u64| Some(MINUTE + US - Duration::from_micros(now - at));

    // As long as now, with a suffix, and below it as a string: "100000-1" < "10000010".
    server.cli(&["ZADD", key, "100000", "100000-1", "9999990", "9999990"]);
    let d = a.check("u", "/").await;
    assert_eq!(d.remaining(), 1);
    assert_eq!(resets_in(&d), until_gone(100_000));

    // Shorter than now: older, read as it is.
    server.cli(&["ZREM", key, "100000-1"]);
    let d = a.check("u", "/").await;
    assert_eq!(d.remaining(), 1);
    assert_eq!(resets_in(&d), until_gone(9_999_990));

    // Longer than now: from the future, moved back to now before it shapes the reset.
    server.cli(&["DEL", key]);
    server.cli(&["ZADD", key, "123456789", "123456789"]);
    let d = a.check("u", "/").await;
    assert_eq!(d.remaining(), 2);
    assert_eq!(resets_in(&d), until_gone(now));
    for (member, score) in entries(&server, key) {
        assert!(score <= now, "{member} at {score} is after {now}");
    }
}
