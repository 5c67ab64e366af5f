//! What only Redis has, beside the store contract (`tests/store_contract.rs`): the keys,
//! members, scores and TTLs the limiter writes, read from the server itself. Each test on a
//! `redis-server` of its own.
#![cfg(feature = "redis")]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use tiered_ratelimit::{ManualClock, RateLimiter, Tier};

use common::{limits, RedisServer, TestBackend};

const MINUTE: Duration = Duration::from_secs(60);

fn server(b: &TestBackend) -> &RedisServer {
    b.server().expect("a Redis backend")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_costly_request_is_one_member_and_one_short_script() {
    let b = TestBackend::redis();
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let limiter = b.limiter(limits(1_000_000, 0, 0, MINUTE), &clock).await;
    let before = server(&b).command_calls("zadd");
    assert_eq!(
        limiter.check_n("u", "/", 250_000).await.remaining(),
        750_000
    );
    assert_eq!(limiter.check_n("u", "/", 750_000).await.remaining(), 0);
    assert_eq!(server(&b).cli(&["ZCARD", "rate_limit:user:u"]).trim(), "2");
    assert_eq!(
        server(&b).command_calls("zadd") - before,
        2,
        "one ZADD per request"
    );
    assert!(!limiter.check("u", "/").await.allowed());
}

fn keys(server: &RedisServer) -> BTreeSet<String> {
    server
        .cli(&["KEYS", "*"])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn set(keys: &[&str]) -> BTreeSet<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}

fn int(server: &RedisServer, args: &[&str]) -> i64 {
    let out = server.cli(args);
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{args:?} answered {out:?}"))
}

async fn limiter(b: &TestBackend, user: u64, endpoint: u64, global: u64) -> RateLimiter {
    b.limiter(
        limits(user, endpoint, global, MINUTE),
        &ManualClock::at(Duration::from_secs(1_000)),
    )
    .await
}

#[tokio::test]
async fn keys_follow_the_documented_layout() {
    let b = TestBackend::redis();
    let limiter = limiter(&b, 5, 5, 5).await;
    assert!(limiter.check("alice", "/api/v1/items").await.allowed());
    assert_eq!(
        keys(server(&b)),
        set(&[
            "rate_limit:user:alice",
            "rate_limit:endpoint:/api/v1/items",
            "rate_limit:global",
        ])
    );
    for key in keys(server(&b)) {
        assert_eq!(server(&b).cli(&["TYPE", &key]).trim(), "zset", "{key}");
    }
}

#[tokio::test]
async fn switched_off_tiers_make_no_keys() {
    let b = TestBackend::redis();
    let limiter = limiter(&b, 0, 3, 0).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_eq!(keys(server(&b)), set(&["rate_limit:endpoint:/items"]));
}

#[tokio::test]
async fn custom_key_prefix() {
    let b = TestBackend::redis();
    let config = limits(1, 1, 1, MINUTE).key_prefix("myapp:rl");
    let limiter = b.limiter(config, &ManualClock::new()).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    assert_eq!(
        keys(server(&b)),
        set(&[
            "myapp:rl:user:alice",
            "myapp:rl:endpoint:/items",
            "myapp:rl:global",
        ])
    );
}

#[tokio::test]
async fn braces_are_percent_encoded_so_no_hash_tags() {
    let b = TestBackend::redis();
    let limiter = limiter(&b, 5, 5, 0).await;
    assert!(limiter.check("{x}", "/items/{id}").await.allowed());
    assert!(limiter.check("@1.2.3.4", "/a b\n{c}").await.allowed());
    assert!(limiter.check("ユ", "/items").await.allowed());
    let keys = keys(server(&b));
    for key in &keys {
        assert!(
            !key.contains('{') && !key.contains('}'),
            "hash tag in {key:?}"
        );
    }
    for expected in [
        "rate_limit:user:%7Bx%7D",
        "rate_limit:endpoint:/items/%7Bid%7D",
        "rate_limit:user:%401.2.3.4",
        "rate_limit:endpoint:/a%20b%0A%7Bc%7D",
        "rate_limit:user:%E3%83%A6",
        "rate_limit:endpoint:/items",
    ] {
        assert!(keys.contains(expected), "{expected} not in {keys:?}");
    }
    assert_eq!(keys.len(), 6, "{keys:?}");
}

#[tokio::test]
async fn long_ids_make_bounded_keys() {
    let b = TestBackend::redis();
    let limiter = limiter(&b, 5, 0, 0).await;
    let long = "z".repeat(10 * 1024);
    assert!(limiter.check(&long, "/items").await.allowed());
    let keys = keys(server(&b));
    let key = keys.iter().next().expect("one key");
    assert_eq!(keys.len(), 1);
    let id = key.strip_prefix("rate_limit:user:#").expect("hashed id");
    assert_eq!(id.len(), 64);
    assert!(id.bytes().all(|c| c.is_ascii_hexdigit()), "{key}");
}

#[tokio::test]
async fn every_key_has_a_ttl_after_an_admitted_request() {
    let b = TestBackend::redis();
    let limiter = limiter(&b, 5, 5, 5).await;
    assert!(limiter.check("alice", "/items").await.allowed());
    let keys = keys(server(&b));
    assert_eq!(keys.len(), 3);
    for key in &keys {
        let pttl = int(server(&b), &["PTTL", key]);
        assert!(pttl > 0, "{key} has PTTL {pttl}");
        assert!(
            pttl <= 60_001,
            "{key} lives longer than a window: {pttl} ms"
        );
    }
}

#[tokio::test]
async fn a_long_window_keeps_keys_for_the_whole_window() {
    let b = TestBackend::redis();
    let hour = Duration::from_secs(3_600);
    let limiter = b
        .limiter(
            limits(5, 0, 0, hour),
            &ManualClock::at(Duration::from_secs(1)),
        )
        .await;
    assert!(limiter.check("alice", "/items").await.allowed());
    let pttl = int(server(&b), &["PTTL", "rate_limit:user:alice"]);
    assert!(pttl > 3_590_000 && pttl <= 3_600_001, "PTTL {pttl}");
}

#[tokio::test]
async fn denied_request_adds_no_member_anywhere() {
    let b = TestBackend::redis();
    let limiter = limiter(&b, 3, 3, 2).await;
    assert!(limiter.check("alice", "/a").await.allowed());
    assert!(limiter.check("bob", "/b").await.allowed());
    let before: Vec<i64> = [
        "rate_limit:user:alice",
        "rate_limit:endpoint:/a",
        "rate_limit:global",
    ]
    .iter()
    .map(|k| int(server(&b), &["ZCARD", k]))
    .collect();
    for _ in 0..5 {
        let d = limiter.check("alice", "/a").await;
        assert_eq!(d.blocked_by(), Some(Tier::Global));
    }
    let after: Vec<i64> = [
        "rate_limit:user:alice",
        "rate_limit:endpoint:/a",
        "rate_limit:global",
    ]
    .iter()
    .map(|k| int(server(&b), &["ZCARD", k]))
    .collect();
    assert_eq!(before, vec![1, 1, 2]);
    assert_eq!(after, before);
    // A user denied by the global tier got no key of its own either.
    assert!(!limiter.check("carol", "/c").await.allowed());
    assert_eq!(int(server(&b), &["EXISTS", "rate_limit:user:carol"]), 0);
    assert_eq!(int(server(&b), &["EXISTS", "rate_limit:endpoint:/c"]), 0);
}

#[tokio::test]
async fn same_instant_requests_are_distinct_members_scored_in_microseconds() {
    let b = TestBackend::redis();
    let t = Duration::from_micros(1_717_171_717_171_717);
    let limiter = b
        .limiter(limits(5, 0, 0, MINUTE), &ManualClock::at(t))
        .await;
    for _ in 0..3 {
        assert!(limiter.check("alice", "/items").await.allowed());
    }
    let s = server(&b);
    assert_eq!(int(s, &["ZCARD", "rate_limit:user:alice"]), 3);
    let scores = s.cli(&["ZRANGE", "rate_limit:user:alice", "0", "-1", "WITHSCORES"]);
    let lines: Vec<&str> = scores.lines().collect();
    assert_eq!(lines.len(), 6, "{scores:?}");
    let members: BTreeSet<&str> = lines.iter().step_by(2).copied().collect();
    assert_eq!(members.len(), 3, "members must be unique: {scores:?}");
    for score in lines.iter().skip(1).step_by(2) {
        assert_eq!(
            score.parse::<f64>().unwrap(),
            1_717_171_717_171_717f64,
            "{scores:?}"
        );
    }
}

#[tokio::test]
async fn reset_user_deletes_only_that_key() {
    let b = TestBackend::redis();
    let limiter = limiter(&b, 1, 5, 5).await;
    assert!(limiter.check("{x}", "/items").await.allowed());
    assert!(limiter.check("bob", "/items").await.allowed());
    limiter.reset_user("{x}").await.expect("reset");
    assert_eq!(
        keys(server(&b)),
        set(&[
            "rate_limit:user:bob",
            "rate_limit:endpoint:/items",
            "rate_limit:global",
        ])
    );
    assert!(limiter.check("{x}", "/items").await.allowed());
}

#[tokio::test]
async fn two_limiters_on_one_server_share_the_limits() {
    let b = TestBackend::redis();
    let clock = ManualClock::at(Duration::from_secs(1_000));
    let one = b.limiter(limits(3, 0, 0, MINUTE), &clock).await;
    let two = b.limiter(limits(3, 0, 0, MINUTE), &clock).await;
    assert!(one.check("alice", "/a").await.allowed());
    assert!(two.check("alice", "/a").await.allowed());
    assert_eq!(one.check("alice", "/a").await.remaining(), 0);
    assert_eq!(
        two.check("alice", "/a").await.blocked_by(),
        Some(Tier::User)
    );
}
