//! `usage`: per enabled tier the limit, the units used (costs included), what is left and when
//! the next unit frees, matching what checks recorded; and it records nothing: the store is
//! left exactly as it was (Redis keys, members, scores and expiry times; memory's keys and
//! entries), and a caller never seen gets no key.

use std::future::Future;
use std::time::Duration;

use tiered_ratelimit::store::{MemoryStore, Store, StoreError, StoreOutcome, StoreRequest};
use tiered_ratelimit::{Backend, ManualClock, RateLimitConfigBuilder, RateLimiter, Tier};

use crate::common::{limits, TestBackend};
use crate::config;

const SEC: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);
const US: Duration = Duration::from_micros(1);

/// A limiter on `b`; on memory, with a store the test can look into.
async fn setup(
    b: &TestBackend,
    builder: RateLimitConfigBuilder,
    clock: &ManualClock,
) -> (RateLimiter, Option<MemoryStore>) {
    let memory = matches!(b, TestBackend::Memory).then(MemoryStore::new);
    let mut limiter = RateLimiter::builder(config(b, builder)).clock(clock.clone());
    if let Some(store) = &memory {
        limiter = limiter.memory_store(store.clone());
    }
    let limiter = limiter.build();
    limiter.wait_connected().await;
    assert_eq!(limiter.backend(), b.expected_backend());
    (limiter, memory)
}

/// (limit, used, remaining, next_free_in) of one tier.
async fn of(
    limiter: &RateLimiter,
    user: &str,
    endpoint: &str,
    tier: Tier,
) -> (u64, u64, u64, Duration) {
    let usage = limiter.usage(user, endpoint).await.expect("usage");
    let t = usage
        .tier(tier)
        .unwrap_or_else(|| panic!("{tier} missing from {usage:?}"));
    (t.limit, t.used, t.remaining, t.next_free_in)
}

pub async fn usage_matches_what_checks_recorded(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let (limiter, _) = setup(&b, limits(5, 10, 20, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/a").await.allowed());
    clock.advance(10 * SEC);
    assert!(limiter.check_n("alice", "/a", 3).await.allowed());
    assert!(limiter.check("bob", "/a").await.allowed());
    assert!(limiter.check_n("bob", "/b", 2).await.allowed());
    clock.advance(10 * SEC);
    // The first entry (at 0 s) frees at 60 s + 1 µs: 40 s from now.
    let first_frees = 40 * SEC + US;
    assert_eq!(
        of(&limiter, "alice", "/a", Tier::User).await,
        (5, 4, 1, first_frees)
    );
    assert_eq!(
        of(&limiter, "alice", "/a", Tier::Endpoint).await,
        (10, 5, 5, first_frees)
    );
    assert_eq!(
        of(&limiter, "alice", "/a", Tier::Global).await,
        (20, 7, 13, first_frees)
    );
    // Bob's entries were all recorded at 10 s.
    assert_eq!(
        of(&limiter, "bob", "/b", Tier::User).await,
        (5, 3, 2, 50 * SEC + US)
    );
    assert_eq!(
        of(&limiter, "bob", "/b", Tier::Endpoint).await,
        (10, 2, 8, 50 * SEC + US)
    );
    // A caller never seen: nothing used, nothing to wait for.
    assert_eq!(
        of(&limiter, "carol", "/c", Tier::User).await,
        (5, 0, 5, Duration::ZERO)
    );
    // A check then agrees: alice has exactly one unit left.
    let d = limiter.check("alice", "/a").await;
    assert_eq!((d.allowed(), d.remaining()), (true, 0));
    assert_eq!(of(&limiter, "alice", "/a", Tier::User).await.1, 5);
    // Past the first entry's window: its unit is no longer used.
    clock.advance(first_frees);
    assert_eq!(of(&limiter, "alice", "/a", Tier::User).await.1, 4);
    // An entry at exactly now - window still counts, as in a check.
    clock.set(Duration::from_secs(1_000_000 + 70));
    let usage = limiter.usage("alice", "/a").await.unwrap();
    assert_eq!(usage.tier(Tier::User).unwrap().used, 4, "{usage:?}");
    clock.advance(US);
    assert_eq!(of(&limiter, "alice", "/a", Tier::User).await.1, 1);
}

pub async fn disabled_tiers_are_left_out_and_it_serializes(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let (limiter, _) = setup(&b, limits(5, 0, 0, MINUTE), &clock).await;
    assert!(limiter.check_n("alice", "/a", 2).await.allowed());
    clock.advance(SEC / 2);
    let usage = limiter.usage("alice", "/a").await.unwrap();
    assert_eq!(usage.tiers.len(), 1, "{usage:?}");
    let json = serde_json::to_value(&usage).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "window_secs": 60.0,
            "tiers": [{"tier": "user", "limit": 5, "used": 2, "remaining": 3,
                       "next_free_in_secs": 59.500001, "shadow": false}]
        })
    );
}

/// Everything the backend holds, as text: on Redis each key of this test with its members,
/// scores and absolute expiry time (PEXPIRETIME, which time passing does not change); on
/// memory the number of tracked keys and each known key's entries and oldest entry.
fn snapshot(b: &TestBackend, memory: &Option<MemoryStore>, known: &[(Tier, &str)]) -> String {
    let servers: Vec<(&crate::common::RedisServer, String)> = match b {
        TestBackend::Memory => {
            let store = memory.as_ref().expect("memory store");
            let mut out = format!("tracked {}\n", store.tracked_keys());
            for &(tier, id) in known {
                out += &format!(
                    "{tier}:{id} {} {:?}\n",
                    store.entries(tier, id),
                    store.oldest(tier, id)
                );
            }
            return out;
        }
        TestBackend::Redis(server) => vec![(server, "rate_limit*".to_owned())],
        TestBackend::Cluster(cluster, prefix) => cluster
            .nodes
            .iter()
            .map(|n| (n, format!("{prefix}*")))
            .collect(),
    };
    let mut out = String::new();
    for (server, pattern) in servers {
        let mut keys: Vec<String> = server
            .cli(&["KEYS", &pattern])
            .lines()
            .map(str::to_owned)
            .collect();
        keys.sort();
        for key in keys.iter().filter(|k| !k.is_empty()) {
            out += &format!(
                "{key} expires {} type {}\n{}\n",
                server.cli(&["PEXPIRETIME", key]).trim(),
                server.cli(&["TYPE", key]).trim(),
                server.cli(&["ZRANGE", key, "0", "-1", "WITHSCORES"]),
            );
        }
    }
    out
}

pub async fn usage_records_nothing(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let (limiter, memory) = setup(&b, limits(3, 5, 10, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/a").await.allowed());
    clock.advance(SEC);
    assert!(limiter.check_n("alice", "/a", 2).await.allowed());
    assert!(!limiter.check("alice", "/a").await.allowed());
    let known = [
        (Tier::User, "alice"),
        (Tier::Endpoint, "/a"),
        (Tier::Global, ""),
        (Tier::User, "nobody"),
    ];
    let before = snapshot(&b, &memory, &known);
    assert!(before.contains("alice"), "{before}");
    // Now, and later (past the first entry's window: a check would trim it; usage must not).
    for step in [Duration::ZERO, MINUTE] {
        clock.advance(step);
        for _ in 0..20 {
            limiter.usage("alice", "/a").await.unwrap();
            limiter.usage("nobody", "/never-seen").await.unwrap();
        }
        assert_eq!(
            snapshot(&b, &memory, &known),
            before,
            "usage changed the store"
        );
    }
    if memory.is_none() {
        assert!(
            !before.contains("nobody") && !before.contains("never-seen"),
            "{before}"
        );
    }
    if let Some(server) = b.server() {
        assert_eq!(
            server.cli(&["EXISTS", "rate_limit:user:nobody"]).trim(),
            "0"
        );
    }
    if let Some(store) = &memory {
        assert_eq!(store.tracked_keys(), 2); // alice and /a
    }
}

/// A store written before `usage` existed: it compiles, and `usage` says why it has no answer.
struct OnlyChecks(MemoryStore);

impl Store for OnlyChecks {
    fn check(
        &self,
        request: &StoreRequest<'_>,
    ) -> impl Future<Output = Result<StoreOutcome, StoreError>> + Send {
        Store::check(&self.0, request)
    }
    fn reset(&self, tier: Tier, id: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        Store::reset(&self.0, tier, id)
    }
    fn backend(&self) -> Backend {
        Backend::Custom
    }
}

#[tokio::test]
async fn a_custom_store_without_usage_says_so() {
    let limiter = RateLimiter::builder(limits(5, 0, 0, MINUTE).build().unwrap())
        .store(OnlyChecks(MemoryStore::new()))
        .build();
    assert!(limiter.check("alice", "/a").await.allowed());
    let error = limiter.usage("alice", "/a").await.unwrap_err();
    assert!(
        error.to_string().contains("does not report usage"),
        "{error}"
    );
}

/// docs/OPERATIONS.md: `remaining` is "`limit - used`, never below 0", including after a limit
/// was lowered below what a caller had already used ("Recorded entries stay").
pub async fn remaining_is_never_below_zero_after_a_limit_is_lowered(b: TestBackend) {
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let (limiter, _) = setup(&b, limits(5, 0, 0, MINUTE), &clock).await;
    assert!(limiter.check_n("alice", "/a", 4).await.allowed());
    limiter
        .reconfigure(config(&b, limits(2, 0, 0, MINUTE)))
        .expect("the same store settings");
    let (limit, used, remaining, _) = of(&limiter, "alice", "/a", Tier::User).await;
    assert_eq!((limit, used, remaining), (2, 4, 0));
    assert!(!limiter.check("alice", "/a").await.allowed());
}

crate::on_every_backend!(usage:
    usage_matches_what_checks_recorded,
    disabled_tiers_are_left_out_and_it_serializes,
    usage_records_nothing,
    remaining_is_never_below_zero_after_a_limit_is_lowered,
);

/// One round trip per `usage` on a single Redis: one EVALSHA for all three tiers, nothing else.
#[cfg(feature = "redis")]
#[tokio::test]
async fn usage_is_one_round_trip_on_redis() {
    let b = TestBackend::redis();
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let (limiter, _) = setup(&b, limits(3, 5, 10, MINUTE), &clock).await;
    assert!(limiter.check("alice", "/a").await.allowed());
    limiter.usage("alice", "/a").await.unwrap(); // loads the script
    let server = b.server().unwrap();
    let calls = |c: &str| server.command_calls(c);
    let (evalsha, zadd, del) = (calls("evalsha"), calls("zadd"), calls("zremrangebyscore"));
    for _ in 0..5 {
        limiter.usage("alice", "/a").await.unwrap();
    }
    assert_eq!(calls("evalsha") - evalsha, 5);
    assert_eq!((calls("zadd"), calls("zremrangebyscore")), (zadd, del));
}

/// The script's other member form (a key that has only seen cost-1 requests may hold plain
/// members, one unit each, named by their score): usage counts them too. Written by hand here,
/// as that form of `script.lua` would write them.
#[cfg(feature = "redis")]
#[tokio::test]
async fn usage_reads_plain_members_on_redis() {
    let b = TestBackend::redis();
    let clock = ManualClock::at(Duration::from_secs(1_000_000));
    let (limiter, _) = setup(&b, limits(5, 0, 0, MINUTE), &clock).await;
    let server = b.server().unwrap();
    let key = "rate_limit:user:plain";
    // Two members in the window (one at exactly now - window), one before it.
    for at in [999_939_999_999u64, 999_940_000_000, 999_990_000_000] {
        let at = at.to_string();
        server.cli(&["ZADD", key, &at, &at]);
    }
    server.cli(&["ZADD", key, "999990000000", "999990000000-1"]);
    let usage = limiter.usage("plain", "/a").await.unwrap();
    let user = usage.tier(Tier::User).unwrap();
    assert_eq!((user.used, user.remaining), (3, 2), "{usage:?}");
    assert_eq!(
        user.next_free_in, US,
        "the entry at now - window leaves in 1 µs"
    );
}
