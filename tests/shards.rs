//! `redis.global_shards`: the configuration, a single node (ignored), and the Redis Cluster
//! store with the global tier split over three shard keys (the shared three-master cluster,
//! a key prefix per test, the limiter's clock driving the script).

mod common;

use tiered_ratelimit::shards::ShardLayout;
use tiered_ratelimit::{ConfigError, RateLimitConfig};

#[test]
fn global_shards_is_validated_naming_the_field_in_code_and_in_files() {
    let url = "redis://127.0.0.1:6379";
    let config = RateLimitConfig::builder().redis_url(url).build().unwrap();
    assert_eq!(config.redis().unwrap().global_shards, 1, "the default");
    let config = RateLimitConfig::builder()
        .redis_url(url)
        .redis_global_shards(64)
        .build()
        .unwrap();
    assert_eq!(config.redis().unwrap().global_shards, 64);
    for bad in [0, 65, 1_000] {
        let e = RateLimitConfig::builder()
            .redis_url(url)
            .redis_global_shards(bad)
            .build()
            .unwrap_err();
        assert_eq!(
            e,
            ConfigError::ShardsOutOfRange {
                field: "redis.global_shards",
                value: bad
            }
        );
        assert_eq!(e.field(), "redis.global_shards");
        assert!(e.to_string().starts_with("redis.global_shards: "), "{e}");
    }
    let file: RateLimitConfig =
        toml::from_str("global_limit = 9\n[redis]\nurl = \"redis://h:1\"\nglobal_shards = 3\n")
            .unwrap();
    assert_eq!(file.redis().unwrap().global_shards, 3);
    let e = toml::from_str::<RateLimitConfig>("[redis]\nurl = \"redis://h:1\"\nglobal_shards = 0")
        .unwrap_err();
    assert!(e.to_string().contains("redis.global_shards"), "{e}");
    // The default is not written out: files from before the option read and write the same.
    let written = toml::to_string(&RateLimitConfig::builder().redis_url(url).build().unwrap());
    assert!(!written.unwrap().contains("global_shards"));
}

#[test]
fn three_shard_keys_land_in_three_thirds_of_the_slots() {
    let layout = ShardLayout::new(3);
    let slots: Vec<u16> = (0..3)
        .map(|i| {
            tiered_ratelimit::shards::slot(&format!("rate_limit:global:{{{}}}", layout.tag(i)))
        })
        .collect();
    // `redis-cli --cluster create` with three masters: 0-5460, 5461-10922, 10923-16383.
    assert!(slots[0] <= 5460 && (5461..=10922).contains(&slots[1]) && slots[2] >= 10923);
}

#[cfg(feature = "redis")]
mod redis {
    use std::time::Duration;

    use super::common::{RedisCluster, RedisServer};
    use super::*;
    use tiered_ratelimit::store::{RedisStore, Store, StoreOutcome, StoreRequest, TierCheck};
    use tiered_ratelimit::{Tier, TimeSource};

    const T0: Duration = Duration::from_secs(1_700_000_000);
    const MINUTE: Duration = Duration::from_secs(60);

    fn redis_config(url: String, shards: u32) -> tiered_ratelimit::RedisConfig {
        redis_config_on(url, shards, TimeSource::App)
    }

    fn redis_config_on(
        url: String,
        shards: u32,
        source: TimeSource,
    ) -> tiered_ratelimit::RedisConfig {
        RateLimitConfig::builder()
            .redis_url(url)
            .redis_time_source(source)
            .redis_command_timeout(Duration::from_secs(2))
            .redis_connect_timeout(Duration::from_secs(10))
            .redis_global_shards(shards)
            .build()
            .unwrap()
            .redis()
            .unwrap()
            .clone()
    }

    async fn store(url: String, prefix: &str, shards: u32) -> RedisStore {
        let store = RedisStore::new(prefix, &redis_config(url, shards));
        assert!(store.wait_connected().await);
        store
    }

    /// One check at `now` of the global tier alone (or `user` first, when given).
    async fn check(
        store: &RedisStore,
        now: Duration,
        cost: u64,
        limit: u64,
        shadow: bool,
    ) -> StoreOutcome {
        let tiers = [TierCheck::new(Tier::Global, "", limit).shadow(shadow)];
        store
            .check(&StoreRequest::new(now, MINUTE, cost, &tiers))
            .await
            .unwrap()
    }

    fn admitted(outcome: &StoreOutcome) -> bool {
        matches!(outcome, StoreOutcome::Admitted { .. })
    }

    fn shard_keys(prefix: &str) -> Vec<String> {
        let layout = ShardLayout::new(3);
        (0..3)
            .map(|i| format!("{prefix}:global:{{{}}}", layout.tag(i)))
            .collect()
    }

    fn zcard(cluster: &RedisCluster, key: &str) -> u64 {
        cluster
            .cli_for(key, &["ZCARD", key])
            .trim()
            .parse()
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_instances_admit_exactly_the_limit_over_three_masters() {
        let cluster = RedisCluster::shared();
        let prefix = "shards-exact";
        let a = store(cluster.url(), prefix, 3).await;
        let b = store(cluster.url(), prefix, 3).await;
        let at = |ms: u64| T0 + Duration::from_millis(ms);
        let mut admitted_count = 0;
        for i in 0..14 {
            let s = if i % 2 == 0 { &a } else { &b };
            admitted_count += u64::from(admitted(&check(s, at(i), 1, 10, false).await));
        }
        assert_eq!(admitted_count, 10, "exactly the limit");
        let keys = shard_keys(prefix);
        let mut owners: Vec<usize> = keys.iter().map(|k| cluster.owner_of(k)).collect();
        let counts: Vec<u64> = keys.iter().map(|k| zcard(cluster, k)).collect();
        assert_eq!(counts, [4, 3, 3], "each shard holds its cap");
        owners.sort_unstable();
        owners.dedup();
        assert_eq!(owners.len(), 3, "one shard per master");
        // Both instances have seen every shard full: denied with no round trip, with the wait
        // until the first entry leaves. (Proof that Redis is not asked: the keys are deleted
        // behind the stores' backs, with no invalidation; asked, Redis would admit.)
        for key in &keys {
            cluster.cli_for(key, &["DEL", key]);
        }
        for s in [&a, &b] {
            match check(s, at(20), 1, 10, false).await {
                StoreOutcome::Denied {
                    tier, retry_after, ..
                } => {
                    assert_eq!(tier, Tier::Global);
                    assert!(
                        retry_after <= MINUTE && retry_after > MINUTE - at(20).saturating_sub(T0)
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        // A window later the first entries have left: admitted again.
        assert!(admitted(&check(&a, at(1) + MINUTE, 1, 10, false).await));
    }

    /// docs/OPERATIONS.md: a remembered full shard is forgotten when Redis admits into it
    /// under another window (a live reconfiguration that trimmed it for good). A second outside
    /// review's instance kept denying for a minute what a fresh instance admitted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shard_remembered_full_is_forgotten_when_a_shorter_window_admits_into_it() {
        let cluster = RedisCluster::shared();
        let s = store(cluster.url(), "shards-window", 3).await;
        let tiers = [TierCheck::new(Tier::Global, "", 6)];
        let at =
            |ms: u64, window| StoreRequest::new(T0 + Duration::from_millis(ms), window, 1, &tiers);
        for i in 0..6 {
            assert!(admitted(&s.check(&at(i, MINUTE)).await.unwrap()));
        }
        assert!(!admitted(&s.check(&at(10, MINUTE)).await.unwrap()));
        // 2 s later under a 1 s window: every entry is trimmed for good.
        let second = Duration::from_secs(1);
        assert!(admitted(&s.check(&at(2_000, second)).await.unwrap()));
        // Back to the minute: one entry counts, so there is room.
        let d = s.check(&at(2_001, MINUTE)).await.unwrap();
        assert!(admitted(&d), "{d:?}");
    }

    /// `usage` of a sharded global tier sums its shard keys (an outside audit: it read the
    /// unsharded key, never written, and said 0 used of 30 with 21 recorded).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn usage_of_a_sharded_global_tier_sums_its_shards() {
        let cluster = RedisCluster::shared();
        let s = store(cluster.url(), "shards-usage", 3).await;
        let tiers = [
            TierCheck::new(Tier::User, "u", 100),
            TierCheck::new(Tier::Global, "", 30),
        ];
        for i in 0..20 {
            let at = T0 + Duration::from_millis(i);
            let d = s.check(&StoreRequest::new(at, MINUTE, 1, &tiers)).await;
            assert!(admitted(&d.unwrap()));
        }
        let now = T0 + Duration::from_millis(100);
        let usage = s
            .usage(&StoreRequest::new(now, MINUTE, 1, &tiers))
            .await
            .unwrap();
        let recorded: u64 = shard_keys("shards-usage")
            .iter()
            .map(|k| zcard(cluster, k))
            .sum();
        assert_eq!(recorded, 20);
        for u in &usage {
            assert_eq!((u.used, u.remaining), (20, u.limit - 20), "{u:?}");
            // The oldest entry, at T0, frees a window and 1 µs after it.
            let left = MINUTE + Duration::from_micros(1) - Duration::from_millis(100);
            assert_eq!(u.next_free_in, left, "{u:?}");
        }
        assert_eq!(usage[1].tier, Tier::Global);
    }

    /// On Redis's clock (each master's `TIME`) the shards known full are remembered on the
    /// store's own monotonic clock, not on the request's `now`: here a `now` that never moves
    /// once kept every shard "full" for good, while the masters had long freed them (docs/
    /// REDIS.md, "The cache's clock").
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_redis_time_shards_known_full_free_with_the_window_whatever_now_says() {
        let cluster = RedisCluster::shared();
        let config = redis_config_on(cluster.url(), 3, TimeSource::Redis);
        let s = RedisStore::new("shards-redis-time", &config);
        assert!(s.wait_connected().await);
        let window = Duration::from_millis(800);
        let tiers = [TierCheck::new(Tier::Global, "", 6)];
        let request = StoreRequest::new(T0, window, 1, &tiers);
        for _ in 0..6 {
            assert!(admitted(&s.check(&request).await.unwrap()));
        }
        assert!(!admitted(&s.check(&request).await.unwrap()));
        tokio::time::sleep(window + Duration::from_millis(300)).await;
        let d = s.check(&request).await.unwrap();
        assert!(admitted(&d), "the masters' window has passed: {d:?}");
    }

    /// A wait given for shards known full is never shorter than Redis's: it is by when the
    /// request fits, counted from when each shard's answer came (a review: after a 1.5 s pause
    /// of the masters, the cached wait was 16.96 s where a fresh instance was told 18.45 s).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_for_shards_known_full_is_never_shorter_than_redis_says() {
        let cluster = RedisCluster::start();
        let config = redis_config_on(cluster.url(), 3, TimeSource::Redis);
        let connect = || async {
            let s = RedisStore::new("shards-wait", &config);
            assert!(s.wait_connected().await);
            s
        };
        let (a, fresh) = (connect().await, connect().await);
        let tiers = [TierCheck::new(Tier::Global, "", 3)];
        let request = StoreRequest::new(T0, Duration::from_secs(20), 1, &tiers);
        for _ in 0..3 {
            assert!(admitted(&a.check(&request).await.unwrap()));
        }
        // The denial that is remembered meets paused masters.
        let slow = tokio::spawn({
            let a = a.clone();
            let tiers = tiers.to_vec();
            async move {
                let request = StoreRequest::new(T0, Duration::from_secs(20), 1, &tiers);
                a.check(&request).await.unwrap()
            }
        });
        for node in &cluster.nodes {
            node.pause();
        }
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        for node in &cluster.nodes {
            node.resume();
        }
        assert!(!admitted(&slow.await.unwrap()));
        let calls = cluster.command_calls("evalsha");
        let cached = a.check(&request).await.unwrap();
        assert_eq!(cluster.command_calls("evalsha"), calls, "from the cache");
        let told = fresh.check(&request).await.unwrap();
        match (cached, told) {
            (
                StoreOutcome::Denied {
                    retry_after: cached,
                    ..
                },
                StoreOutcome::Denied {
                    retry_after: told, ..
                },
            ) => assert!(cached >= told, "cached {cached:?}, Redis after it {told:?}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_denial_by_every_shard_rolls_the_user_tier_back() {
        let cluster = RedisCluster::shared();
        let s = store(cluster.url(), "shards-tiers", 3).await;
        let tiers = [
            TierCheck::new(Tier::User, "u1", 100),
            TierCheck::new(Tier::Global, "", 6),
        ];
        let mut outcomes = Vec::new();
        for i in 0..9 {
            let now = T0 + Duration::from_millis(i);
            let req = StoreRequest::new(now, MINUTE, 1, &tiers);
            outcomes.push(s.check(&req).await.unwrap());
        }
        assert!(outcomes[..6].iter().all(admitted), "{outcomes:?}");
        for o in &outcomes[6..] {
            assert!(
                matches!(
                    o,
                    StoreOutcome::Denied {
                        tier: Tier::Global,
                        ..
                    }
                ),
                "{o:?}"
            );
        }
        // The first denial walked every shard and rolled its user entry back; the next ones
        // were denied before any tier was reserved.
        assert_eq!(zcard(cluster, "shards-tiers:user:u1"), 6);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cost_no_single_shard_has_room_for_is_split_over_several() {
        // Caps 4, 3, 3. A cost of 4 fits only the first shard whole; the next cost of 4 is
        // recorded as 3 + 1 in the other two; then the 2 units left take a cost of 2, never 3.
        let cluster = RedisCluster::shared();
        let prefix = "shards-cost";
        let s = store(cluster.url(), prefix, 3).await;
        assert!(admitted(&check(&s, T0, 4, 10, false).await));
        assert!(admitted(&check(&s, T0, 4, 10, false).await), "split");
        let keys = shard_keys(prefix);
        let units = |key: &str| -> u64 {
            let members = cluster.cli_for(key, &["ZRANGE", key, "0", "-1"]);
            members
                .lines()
                // The totals form (a ':' at byte 16) ends in the entry's cost, in hex; a
                // plain member (a key that only saw unit costs) is one unit.
                .map(|m| match m.as_bytes().get(16) {
                    Some(b':') => u64::from_str_radix(m.rsplit(':').next().unwrap(), 16).unwrap(),
                    _ => 1,
                })
                .sum()
        };
        assert_eq!(keys.iter().map(|k| units(k)).collect::<Vec<_>>(), [4, 3, 1]);
        assert!(
            !admitted(&check(&s, T0, 3, 10, false).await),
            "2 units left"
        );
        assert!(admitted(&check(&s, T0, 2, 10, false).await));
        assert!(!admitted(&check(&s, T0, 1, 10, false).await), "10 of 10");
        // A cost above every cap (but within the limit) is split too.
        let s = store(cluster.url(), "shards-big", 3).await;
        assert!(admitted(&check(&s, T0, 9, 10, false).await));
        assert!(!admitted(&check(&s, T0, 2, 10, false).await));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reset_on_one_instance_frees_every_shard_on_every_instance() {
        let cluster = RedisCluster::shared();
        let prefix = "shards-reset";
        let a = store(cluster.url(), prefix, 3).await;
        let b = store(cluster.url(), prefix, 3).await;
        for _ in 0..6 {
            assert!(admitted(&check(&a, T0, 1, 6, false).await));
        }
        assert!(!admitted(&check(&a, T0, 1, 6, false).await));
        b.reset(Tier::Global, "").await.unwrap();
        for key in shard_keys(prefix) {
            assert_eq!(zcard(cluster, &key), 0, "{key}");
        }
        // `a` had every shard cached as full: the invalidations reach it through pub/sub.
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !admitted(&check(&a, T0, 1, 6, false).await) {
            assert!(
                std::time::Instant::now() < deadline,
                "still denied after the reset"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_shadow_global_tier_walks_every_shard_and_never_records_past_its_limit() {
        let cluster = RedisCluster::shared();
        let prefix = "shards-shadow";
        let s = store(cluster.url(), prefix, 3).await;
        for i in 0..5 {
            match check(&s, T0, 1, 3, true).await {
                StoreOutcome::Admitted { shadow_denied, .. } => {
                    assert_eq!(
                        shadow_denied.map(|(t, _)| t),
                        (i >= 3).then_some(Tier::Global)
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        let total: u64 = shard_keys(prefix).iter().map(|k| zcard(cluster, k)).sum();
        assert_eq!(total, 3);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_single_node_ignores_the_option_and_keeps_one_exact_key() {
        let server = RedisServer::start();
        let s = store(server.url(), "single", 3).await;
        for _ in 0..4 {
            assert!(admitted(&check(&s, T0, 1, 5, false).await));
        }
        assert_eq!(server.cli(&["ZCARD", "single:global"]).trim(), "4");
        assert_eq!(server.cli(&["KEYS", "single:global:*"]).trim(), "");
    }
}
