//! Measures the in-memory store's footprint with a counting allocator: bytes per recorded
//! request, and the overhead of each tracked key.
//!
//! ```text
//! cargo run --release --example memory_footprint
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tiered_ratelimit::config::MAX_LIMIT;
use tiered_ratelimit::store::MemoryStore;
use tiered_ratelimit::{ManualClock, RateLimitConfig, RateLimiter};

/// Counts the bytes live on the heap.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn ready<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => unreachable!("the memory store never waits"),
    }
}

fn limiter(user: u64, endpoint: u64, global: u64) -> (RateLimiter, ManualClock) {
    let clock = ManualClock::at(Duration::from_secs(1_790_000_000));
    let config = RateLimitConfig::builder()
        .window(Duration::from_secs(3600))
        .user_limit(user)
        .endpoint_limit(endpoint)
        .global_limit(global)
        .build()
        .expect("valid config");
    let limiter = RateLimiter::builder(config)
        .clock(clock.clone())
        .memory_store(MemoryStore::new())
        .build();
    (limiter, clock)
}

fn main() {
    println!("## Bytes per recorded request (one key, user tier only)\n");
    println!("| entries in the key | heap bytes | bytes per entry |");
    println!("|---:|---:|---:|");
    for n in [1_000u64, 10_000, 100_000, 1_000_000] {
        let (limiter, clock) = limiter(MAX_LIMIT, 0, 0);
        ready(limiter.check("u", "/")); // the key and its first entry
        let before = live();
        for _ in 1..n {
            clock.advance(Duration::from_micros(1));
            assert!(ready(limiter.check("u", "/")).allowed());
        }
        let bytes = live() - before;
        println!("| {n} | {bytes} | {:.1} |", bytes as f64 / (n - 1) as f64);
    }

    println!("\n## Bytes per recorded request at several requests a microsecond (one key)\n");
    println!("| requests in the key | requests a microsecond | heap bytes | bytes per request |");
    println!("|---:|---:|---:|---:|");
    for per_us in [2u64, 8] {
        let n = 1_000_000u64;
        let (limiter, clock) = limiter(MAX_LIMIT, 0, 0);
        ready(limiter.check("u", "/")); // the key and its first entry
        let before = live();
        for i in 1..n {
            if i % per_us == 0 {
                clock.advance(Duration::from_micros(1));
            }
            assert!(ready(limiter.check("u", "/")).allowed());
        }
        let bytes = live() - before;
        println!(
            "| {n} | {per_us} | {bytes} | {:.1} |",
            bytes as f64 / (n - 1) as f64
        );
    }

    println!("\n## Overhead per tracked key (one entry each, user tier only)\n");
    println!("| keys | heap bytes | bytes per key |");
    println!("|---:|---:|---:|");
    for keys in [10_000usize, 100_000, 1_000_000] {
        let ids: Vec<String> = (0..keys).map(|i| format!("user-{i:07}")).collect();
        per_key(&ids, "12-byte ids");
    }

    println!(
        "\n## The worst id: 128 bytes that all need escaping (384 encoded), the longest kept\n"
    );
    println!("| keys | heap bytes | bytes per key |");
    println!("|---:|---:|---:|");
    for keys in [10_000usize, 100_000] {
        let ids: Vec<String> = (0..keys)
            .map(|i| format!("{i:0>128}").replace('0', "%"))
            .collect();
        assert!(ids.iter().all(|id| id.len() == 128));
        per_key(&ids, "128-byte ids, 384 encoded");
    }
}

/// Prints the heap bytes that tracking `ids` (one entry each) costs, in all and per key.
fn per_key(ids: &[String], what: &str) {
    let (limiter, _clock) = limiter(MAX_LIMIT, 0, 0);
    let before = live();
    for id in ids {
        assert!(ready(limiter.check(id, "/")).allowed());
    }
    let bytes = live() - before;
    let keys = ids.len();
    println!(
        "| {keys} | {bytes} | {:.1} ({what}) |",
        bytes as f64 / keys as f64
    );
}
