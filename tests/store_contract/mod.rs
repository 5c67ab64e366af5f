//! The contract's shared helpers; its bodies, by the design note's test table, are the files
//! beside this one.

use std::net::IpAddr;
use std::time::Duration;

use tiered_ratelimit::key::encode_id;
use tiered_ratelimit::{Backend, CheckRequest, Decision, ManualClock, RateLimiter, Tier, UserKey};

use crate::common::{limits, TestBackend};

const MINUTE: Duration = Duration::from_secs(60);
const US: Duration = Duration::from_micros(1);
const SEC: Duration = Duration::from_secs(1);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The rate-limit headers the layer would send for `d`, in `limiter`'s style.
fn headers_of(d: &Decision, limiter: &RateLimiter) -> http::HeaderMap {
    tiered_ratelimit::headers::to_header_map(d, limiter.config().headers())
}

/// The limiter never fell back to memory: the test really ran on its backend.
fn assert_still_on(b: &TestBackend, limiter: &RateLimiter) {
    assert_eq!(
        limiter.backend(),
        b.expected_backend(),
        "the limiter fell back during the test: {:?}",
        limiter.fallback_cause()
    );
}

fn assert_admitted(d: &Decision, remaining: u64) {
    assert!(d.allowed(), "expected admitted, got {d:?}");
    assert_eq!(d.remaining(), remaining, "remaining of {d:?}");
    assert_eq!(d.retry_after(), Duration::ZERO, "{d:?}");
    assert_eq!(d.retry_after_secs(), 0, "{d:?}");
    assert_eq!(d.blocked_by(), None, "{d:?}");
}

fn assert_denied(d: &Decision, tier: Tier, retry_after: Duration) {
    assert!(!d.allowed(), "expected denied, got {d:?}");
    assert_eq!(d.blocked_by(), Some(tier), "{d:?}");
    assert_eq!(d.remaining(), 0, "{d:?}");
    assert_eq!(d.retry_after(), retry_after, "retry_after of {d:?}");
    assert!(d.retry_after_secs() >= 1, "{d:?}");
}

fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("header {name} missing from {headers:?}"))
        .to_str()
        .expect("ASCII header")
}

mod basic;
pub use basic::*;
mod sliding_window;
pub use sliding_window::*;
mod tiers;
pub use tiers::*;
mod retry_after;
pub use retry_after::*;
mod edge_cases;
pub use edge_cases::*;
mod result_type;
pub use result_type::*;
mod keys_and_reset;
pub use keys_and_reset::*;
mod policies;
pub use policies::*;
