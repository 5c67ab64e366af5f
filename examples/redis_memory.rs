//! Measures what recorded requests cost in Redis memory (`MEMORY USAGE ... SAMPLES 0`).
//!
//! ```text
//! cargo run --release --example redis_memory -- redis://127.0.0.1:6379
//! ```
//!
//! Writes keys under the prefix `tiered-ratelimit-memprobe` only, and deletes them afterwards.

use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config, KeysInterface};
use fred::types::{ClusterHash, CustomCommand};
use tiered_ratelimit::store::{RedisStore, Store, StoreOutcome, StoreRequest, TierCheck};
use tiered_ratelimit::{RateLimitConfig, Tier};

const PREFIX: &str = "tiered-ratelimit-memprobe";

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let config = RateLimitConfig::builder()
        .window(Duration::from_secs(3600))
        .redis_url(&url)
        .redis_command_timeout(Duration::from_secs(5))
        .build()?;
    let store = RedisStore::new(PREFIX, config.redis().expect("redis settings"));
    if !store.wait_connected().await {
        return Err(format!("cannot connect to {url}").into());
    }
    // A connection of our own, to look at the keys the store wrote.
    let client = Builder::from_config(Config::from_url(&url)?).build()?;
    client.init().await?;
    println!("| entries in one key | MEMORY USAGE (bytes) | bytes per entry | encoding |");
    println!("|---:|---:|---:|---|");
    for n in [1u64, 10, 100, 128, 129, 1_000, 10_000, 100_000] {
        let id = format!("user-{n}");
        let tiers = [TierCheck::new(Tier::User, &id, n)];
        for i in 0..n {
            // one request a millisecond, from some time in 2026 (with the default time
            // source the store reads Redis TIME instead)
            let now = Duration::from_secs(1_790_000_000) + Duration::from_millis(i);
            let request = StoreRequest::new(now, config.window(), 1, &tiers);
            let outcome = store.check(&request).await?;
            assert!(matches!(outcome, StoreOutcome::Admitted { .. }));
        }
        let key = store.key(Tier::User, &id);
        let memory = CustomCommand::new("MEMORY", ClusterHash::Offset(1), false);
        let bytes: u64 = client
            .custom(memory, vec!["USAGE", key.as_str(), "SAMPLES", "0"])
            .await?;
        let object = CustomCommand::new("OBJECT", ClusterHash::Offset(1), false);
        let encoding: String = client
            .custom(object, vec!["ENCODING", key.as_str()])
            .await?;
        println!(
            "| {n} | {bytes} | {:.1} | {encoding} |",
            bytes as f64 / n as f64
        );
        let _: i64 = client.del(key).await?;
    }
    client.quit().await?;
    Ok(())
}
