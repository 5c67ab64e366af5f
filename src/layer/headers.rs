//! Rendering a [`Decision`] into rate-limit headers, in the configured [`HeaderStyle`]: the
//! legacy `X-RateLimit-Remaining` / `Retry-After`, and the IETF draft's `RateLimit-Policy` /
//! `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11).
//!
//! The layer adds them to every limited response by itself; these functions are for code that
//! uses the [`RateLimiter`](crate::RateLimiter) without the layer.
//!
//! ```
//! use tiered_ratelimit::headers;
//! use tiered_ratelimit::{HeaderStyle, ManualClock, RateLimitConfig, RateLimiter};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tiered_ratelimit::ConfigError> {
//! let config = RateLimitConfig::builder().user_limit(5).build()?;
//! let limiter = RateLimiter::builder(config).clock(ManualClock::new()).build();
//! let decision = limiter.check("alice", "/items").await;
//! let map = headers::to_header_map(&decision, HeaderStyle::Both);
//! assert_eq!(map[&headers::X_RATELIMIT_REMAINING], "4");
//! assert_eq!(map[&headers::RATELIMIT_POLICY], "\"user\";q=5;w=60");
//! assert_eq!(map[&headers::RATELIMIT], "\"user\";r=4;t=61");
//! # Ok(()) }
//! ```

use std::fmt::Write;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::decision::Decision;
use crate::header_style::HeaderStyle;

/// `X-RateLimit-Remaining`.
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11).
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-11).
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// The rate-limit headers of `decision` in `style`, in a new map.
pub fn to_header_map(decision: &Decision, style: HeaderStyle) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(2);
    write(decision, style, &mut headers);
    headers
}

/// Inserts the rate-limit headers of `decision` in `style` into `headers`, replacing any there.
///
/// A request to which no tier applied (every limit 0, or only a user limit and no user id nor
/// client address) gets none: a remaining count of `u64::MAX` is no use to a client.
pub fn write(decision: &Decision, style: HeaderStyle, headers: &mut HeaderMap) {
    put(decision, style, headers, true);
}

/// [`write`] on the response of the service behind the layer: a `Retry-After` it set itself
/// (a 503's, a 429 passed on from upstream) is kept, not replaced by the limiter's.
#[inline]
pub(crate) fn write_on_response(decision: &Decision, style: HeaderStyle, headers: &mut HeaderMap) {
    put(decision, style, headers, false);
}

/// [`write`], replacing a `Retry-After` already in `headers` only if `replace_retry_after`.
#[inline(always)]
fn put(
    decision: &Decision,
    style: HeaderStyle,
    headers: &mut HeaderMap,
    replace_retry_after: bool,
) {
    if !decision.is_limited() {
        return;
    }
    let legacy = style != HeaderStyle::Ietf;
    if legacy {
        headers.insert(X_RATELIMIT_REMAINING.clone(), number(decision.remaining()));
    }
    // On a 429, and on a shadow denial (the wait enforcement would have given), in every style.
    if legacy || !decision.allowed() || decision.shadow_blocked_by().is_some() {
        // Inserted, and the service's own put back if there was one: no lookup of its own on
        // the common path, where there is none.
        let previous = headers.insert(RETRY_AFTER, number(decision.retry_after_secs()));
        if let Some(own) = previous {
            if !replace_retry_after {
                put_back(headers, own);
            }
        }
    }
    if style != HeaderStyle::Legacy {
        let window = decision.window();
        let w = window.as_secs() + u64::from(window.subsec_nanos() > 0);
        let mut policy = String::new();
        for (i, (tier, limit)) in decision.limits().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            let _ = write!(policy, "{sep}\"{tier}\";q={};w={}", sf(limit), sf(w));
        }
        if let Ok(value) = HeaderValue::try_from(policy) {
            headers.insert(RATELIMIT_POLICY.clone(), value);
        }
        if let Some((tier, resets_in)) = decision.binding() {
            let secs = resets_in.as_secs() + u64::from(resets_in.subsec_nanos() > 0);
            let value = format!("\"{tier}\";r={};t={}", sf(decision.remaining()), sf(secs));
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(RATELIMIT.clone(), value);
            }
        }
    }
}

/// Puts the service's own `Retry-After` back in place of the limiter's.
#[cold]
#[inline(never)]
fn put_back(headers: &mut HeaderMap, own: HeaderValue) {
    headers.insert(RETRY_AFTER, own);
}

/// The largest integer of a structured field (RFC 9651: at most 15 digits).
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// `n` as a structured-field integer: limits and counts above 15 digits (the config allows
/// 2^50) are written as the largest one, so that the field stays valid.
#[inline]
fn sf(n: u64) -> u64 {
    n.min(SF_INTEGER_MAX)
}

/// Header values of small numbers, made once: sending one is then a copy, not an allocation.
const CACHED_NUMBERS: u64 = 4096;

fn number(n: u64) -> HeaderValue {
    static CACHE: std::sync::OnceLock<Vec<HeaderValue>> = std::sync::OnceLock::new();
    if n >= CACHED_NUMBERS {
        return uncached_number(n);
    }
    let cache = CACHE.get_or_init(|| {
        // One leaked string of every digit sequence: static header values clone for free.
        let mut all = String::new();
        let mut ends = Vec::with_capacity(CACHED_NUMBERS as usize);
        for i in 0..CACHED_NUMBERS {
            all.push_str(&i.to_string());
            ends.push(all.len());
        }
        let all: &'static str = Box::leak(all.into_boxed_str());
        let mut start = 0;
        ends.into_iter()
            .map(|end| {
                let value = HeaderValue::from_static(&all[start..end]);
                start = end;
                value
            })
            .collect()
    });
    cache[n as usize].clone()
}

/// A number's header value in one allocation of its own length. http's `From<u64>` writes
/// into a 20-byte buffer and, freezing it shorter, allocates a second time to share it (two
/// allocations and two frees a response).
#[inline(never)]
fn uncached_number(n: u64) -> HeaderValue {
    let mut buffer = itoa::Buffer::new();
    // Digits are always a valid value; `from` is the (unreached) answer all the same.
    HeaderValue::from_bytes(buffer.format(n).as_bytes()).unwrap_or_else(|_| HeaderValue::from(n))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tier::Tier;

    #[test]
    fn header_numbers_are_exact_on_both_sides_of_the_cache() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            4095,
            4096,
            4097,
            10_000,
            1 << 40,
            u64::MAX - 1,
            u64::MAX,
        ] {
            assert_eq!(number(n).to_str().unwrap(), n.to_string());
        }
    }

    /// RFC 9651 integers have at most 15 digits; a strict parser drops a field with a longer
    /// one. The config accepts limits up to 2^50 (16 digits): an outside review's
    /// `user_limit = MAX_LIMIT` sent `q=1125899906842624`.
    #[test]
    fn ietf_integers_stay_within_fifteen_digits() {
        let max = crate::config::MAX_LIMIT;
        let window = crate::config::MAX_WINDOW;
        let mut d = Decision::admit(max - 1, Tier::User, crate::clock::micros_up(window));
        d.set_tiers([(Tier::User, max), (Tier::Global, 7)], window);
        let h = to_header_map(&d, HeaderStyle::Ietf);
        let policy = h[&RATELIMIT_POLICY].to_str().unwrap();
        let limit = h[&RATELIMIT].to_str().unwrap();
        assert_eq!(
            policy,
            "\"user\";q=999999999999999;w=3155760000, \"global\";q=7;w=3155760000"
        );
        assert_eq!(limit, "\"user\";r=999999999999999;t=3155760000");
        for field in [policy, limit] {
            for n in field
                .split(|c: char| !c.is_ascii_digit())
                .filter(|n| !n.is_empty())
            {
                assert!(n.len() <= 15, "{field}");
            }
        }
        // The legacy header is not a structured field: it stays exact.
        let h = to_header_map(&d, HeaderStyle::Legacy);
        assert_eq!(h[&X_RATELIMIT_REMAINING], (max - 1).to_string().as_str());
    }

    #[test]
    fn headers_of_a_denial_round_up() {
        let window = Duration::from_secs(60);
        let limited = |mut d: Decision| {
            d.set_tiers([(Tier::User, 5)], window);
            d
        };
        let d = limited(Decision::deny(Tier::User, 1_500_000));
        let h = to_header_map(&d, HeaderStyle::Legacy);
        assert_eq!(h[&X_RATELIMIT_REMAINING], "0");
        assert_eq!(h[RETRY_AFTER], "2");
        let d = limited(Decision::deny(Tier::User, 1));
        assert_eq!(to_header_map(&d, HeaderStyle::Legacy)[RETRY_AFTER], "1");
        let a = to_header_map(
            &limited(Decision::admit(7, Tier::User, 0)),
            HeaderStyle::Legacy,
        );
        assert_eq!(a[RETRY_AFTER], "0");
        assert_eq!(a[&X_RATELIMIT_REMAINING], "7");
        assert!(to_header_map(&Decision::unlimited(1), HeaderStyle::Both).is_empty());
    }
}
