//! Helpers of the in-memory store's tests (`tests/memory_*.rs`): a limiter on a given store,
//! and many threads checking at once.

use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use tiered_ratelimit::store::MemoryStore;
use tiered_ratelimit::{Backend, Decision, ManualClock, RateLimitConfigBuilder, RateLimiter};

pub const MINUTE: Duration = Duration::from_secs(60);
pub const US: Duration = Duration::from_micros(1);
pub const T0: Duration = Duration::from_secs(1_000);

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A limiter on `store`, driven by `clock`.
pub fn limiter_on(
    config: RateLimitConfigBuilder,
    clock: &ManualClock,
    store: &MemoryStore,
) -> RateLimiter {
    let limiter = RateLimiter::builder(config.build().expect("valid config"))
        .clock(clock.clone())
        .memory_store(store.clone())
        .build();
    assert_eq!(limiter.backend(), Backend::Memory);
    limiter
}

/// Runs `per_thread` checks on each of `threads` OS threads, all released at once by a barrier;
/// `request(thread, i)` names the user and endpoint. Returns every (user, endpoint, decision).
pub fn hammer(
    limiter: &RateLimiter,
    threads: usize,
    per_thread: usize,
    request: impl Fn(usize, usize) -> (String, String) + Send + Sync + 'static,
) -> Vec<(String, String, Decision)> {
    let barrier = Arc::new(Barrier::new(threads));
    let request = Arc::new(request);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let limiter = limiter.clone();
            let barrier = barrier.clone();
            let request = request.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime");
                let requests: Vec<(String, String)> =
                    (0..per_thread).map(|i| request(t, i)).collect();
                barrier.wait();
                rt.block_on(async {
                    let mut out = Vec::with_capacity(per_thread);
                    for (user, endpoint) in requests {
                        let d = limiter.check(&user, &endpoint).await;
                        out.push((user, endpoint, d));
                    }
                    out
                })
            })
        })
        .collect();
    handles
        .into_iter()
        .flat_map(|h| h.join().expect("thread panicked"))
        .collect()
}

pub fn admitted_by<'a>(
    results: &'a [(String, String, Decision)],
    key: impl Fn(&'a (String, String, Decision)) -> &'a str,
) -> HashMap<&'a str, usize> {
    let mut map = HashMap::new();
    for r in results.iter().filter(|r| r.2.allowed()) {
        *map.entry(key(r)).or_default() += 1;
    }
    map
}
