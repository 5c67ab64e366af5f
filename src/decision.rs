//! The answer to one check: allowed or not, what remains, when to retry, and its headers.

use std::fmt::{self, Write};
use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

/// `X-RateLimit-Remaining`.
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11).
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-11).
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// Which rate-limit headers a response carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeaderStyle {
    /// `X-RateLimit-Remaining` and `Retry-After` (`0` when allowed) on every response (the
    /// default).
    #[default]
    Legacy,
    /// The IETF draft's (draft-ietf-httpapi-ratelimit-headers-11) `RateLimit-Policy` (one
    /// named policy per tier that applied: `"user";q=50;w=60`) and `RateLimit` (the tier
    /// closest to its limit: `"user";r=12;t=30`), and `Retry-After` on a 429.
    Ietf,
    /// Both sets.
    Both,
}

/// The tiers that applied to a request, for `RateLimit-Policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Policies {
    items: [(Tier, u64); 3],
    len: u8,
    window_secs: u64,
}

impl Default for Policies {
    fn default() -> Self {
        Self {
            items: [(Tier::Global, 0); 3],
            len: 0,
            window_secs: 0,
        }
    }
}

impl Policies {
    pub(crate) fn new(tiers: impl IntoIterator<Item = (Tier, u64)>, window: Duration) -> Self {
        let mut p = Self {
            items: [(Tier::Global, 0); 3],
            len: 0,
            window_secs: window.as_secs() + u64::from(window.subsec_nanos() > 0),
        };
        for item in tiers.into_iter().take(3) {
            p.items[usize::from(p.len)] = item;
            p.len += 1;
        }
        p
    }

    fn iter(&self) -> impl Iterator<Item = &(Tier, u64)> {
        self.items[..usize::from(self.len)].iter()
    }
}

/// One of the three tiers, checked in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    /// Per user (or per client IP when there is no user id): `rate_limit:user:<id>`.
    User,
    /// Per endpoint (route template): `rate_limit:endpoint:<route>`.
    Endpoint,
    /// One limit over everything: `rate_limit:global`.
    Global,
}

impl Tier {
    /// The tier's name as used in keys and serde: `user`, `endpoint`, `global`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Endpoint => "endpoint",
            Self::Global => "global",
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one check.
///
/// It serializes (the design note's `as_dict`) as
/// `{"allowed": bool, "remaining": n, "retry_after": secs, "blocked_by": "user" | null}`, where
/// `retry_after` is the whole seconds sent in the `Retry-After` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) retry_after: Duration,
    pub(crate) blocked_by: Option<Tier>,
    pub(crate) shadow_blocked_by: Option<Tier>,
    /// The tier closest to its limit and when it next gains capacity (`RateLimit`).
    pub(crate) binding: Option<(Tier, Duration)>,
    /// Only with the IETF headers on (boxed: it keeps the common decision small to move).
    pub(crate) policies: Option<Box<Policies>>,
    pub(crate) style: HeaderStyle,
    /// The request's cost, and the blocking tier's limit when the cost is above it.
    pub(crate) cost: u64,
    pub(crate) cost_limit: Option<u64>,
    /// Some tier applied (else no rate-limit header is sent: there is nothing to count).
    pub(crate) limited: bool,
}

impl Decision {
    #[inline]
    pub(crate) fn admit(remaining: u64) -> Self {
        Self {
            allowed: true,
            remaining,
            retry_after: Duration::ZERO,
            blocked_by: None,
            shadow_blocked_by: None,
            binding: None,
            policies: None,
            style: HeaderStyle::Legacy,
            cost: 1,
            cost_limit: None,
            limited: true,
        }
    }

    /// No tier applies to a request of `cost`: allowed, nothing to count down, no header.
    #[inline]
    pub(crate) fn unlimited(cost: u64) -> Self {
        Self {
            cost,
            limited: false,
            ..Self::admit(u64::MAX)
        }
    }

    #[inline]
    pub(crate) fn deny(tier: Tier, retry_after: Duration) -> Self {
        Self {
            allowed: false,
            blocked_by: Some(tier),
            shadow_blocked_by: None,
            ..Self::shadow_deny(tier, retry_after)
        }
    }

    /// Allowed only because `tier` is in shadow mode: the headers say what enforcing it would
    /// have said (`X-RateLimit-Remaining: 0`, `Retry-After: n`).
    #[inline]
    pub(crate) fn shadow_deny(tier: Tier, retry_after: Duration) -> Self {
        Self {
            remaining: 0,
            retry_after,
            shadow_blocked_by: Some(tier),
            binding: Some((tier, retry_after)),
            ..Self::admit(0)
        }
    }

    /// The tier closest to its limit, and when it next gains capacity.
    #[inline]
    pub(crate) fn with_binding(mut self, tier: Tier, reset: Duration) -> Self {
        if self.binding.is_none() {
            self.binding = Some((tier, reset));
        }
        self
    }

    /// The request's cost; when the blocking tier's limit is below it, that is the reason.
    #[inline]
    pub(crate) fn with_cost(mut self, req: &crate::store::StoreRequest<'_>) -> Self {
        self.cost = req.cost;
        if let Some(tier) = self.blocked_by {
            self.cost_limit = req
                .tiers
                .iter()
                .find(|t| t.tier == tier && t.limit < req.cost)
                .map(|t| t.limit);
        }
        self
    }

    /// The tiers that applied, and which headers to write.
    #[inline]
    pub(crate) fn with_policies(mut self, policies: Option<Policies>, style: HeaderStyle) -> Self {
        self.policies = policies.map(Box::new);
        self.style = style;
        self
    }

    /// Whether the request may go on.
    #[inline]
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The smallest capacity left over the enabled tiers after this request (0 when denied).
    ///
    /// `u64::MAX` when no tier applies (every limit 0, or only a user limit and no user); such a
    /// decision writes no header.
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until the blocking tier has room: zero when allowed.
    ///
    /// Exact to the microsecond. An entry at exactly `now - window` still counts, so room comes
    /// one microsecond after the entry's window ends: a request recorded at `t` in a 60 s window
    /// frees its slot at `t + 60 s + 1 µs`.
    #[inline]
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// The `Retry-After` value: whole seconds rounded up; 0 when allowed, at least 1 when denied
    /// (or allowed only by shadow mode).
    #[inline]
    pub fn retry_after_secs(&self) -> u64 {
        if self.retry_after.is_zero() {
            return 0;
        }
        let secs = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
        secs.max(1)
    }

    /// The tier that denied the request, if any.
    #[inline]
    pub fn blocked_by(&self) -> Option<Tier> {
        self.blocked_by
    }

    /// Whether the request was denied because its cost is above the blocking tier's limit: it
    /// can never be admitted, however long the client waits (`Retry-After` then says one
    /// window).
    #[inline]
    pub fn cost_exceeds_limit(&self) -> bool {
        self.cost_limit.is_some()
    }

    /// The units the request spent (or would have): 1 unless checked with a cost.
    #[inline]
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The shadow-mode tier that would have denied this (allowed) request, if any.
    #[inline]
    pub fn shadow_blocked_by(&self) -> Option<Tier> {
        self.shadow_blocked_by
    }

    /// `X-RateLimit-Remaining` and `Retry-After` for this decision.
    pub fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(2);
        self.write_headers(&mut headers);
        headers
    }

    /// Inserts the rate-limit headers of the configured [`HeaderStyle`] into `headers`,
    /// replacing any there.
    ///
    /// A request to which no tier applied (every limit 0, or only a user limit and no user id
    /// nor client address) gets none: a remaining count of `u64::MAX` is no use to a client.
    pub fn write_headers(&self, headers: &mut HeaderMap) {
        if !self.limited {
            return;
        }
        let legacy = self.style != HeaderStyle::Ietf;
        if legacy {
            headers.insert(X_RATELIMIT_REMAINING.clone(), number(self.remaining));
        }
        if legacy || !self.allowed {
            headers.insert(RETRY_AFTER, number(self.retry_after_secs()));
        }
        let policies = self.policies.as_deref().filter(|p| p.len > 0);
        if let (true, Some(policies)) = (self.style != HeaderStyle::Legacy, policies) {
            let mut policy = String::new();
            for (i, (tier, limit)) in policies.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                let w = policies.window_secs;
                let _ = write!(policy, "{sep}\"{tier}\";q={limit};w={w}");
            }
            if let Ok(value) = HeaderValue::try_from(policy) {
                headers.insert(RATELIMIT_POLICY.clone(), value);
            }
            if let Some((tier, reset)) = self.binding {
                let secs = reset.as_secs() + u64::from(reset.subsec_nanos() > 0);
                let value = format!("\"{tier}\";r={};t={secs}", self.remaining);
                if let Ok(value) = HeaderValue::try_from(value) {
                    headers.insert(RATELIMIT.clone(), value);
                }
            }
        }
    }
}

/// Header values of small numbers, made once: sending one is then a copy, not an allocation.
const CACHED_NUMBERS: u64 = 4096;

fn number(n: u64) -> HeaderValue {
    static CACHE: std::sync::OnceLock<Vec<HeaderValue>> = std::sync::OnceLock::new();
    if n >= CACHED_NUMBERS {
        return HeaderValue::from(n);
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

impl Serialize for Decision {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let shadow = self.shadow_blocked_by.is_some();
        let mut st = s.serialize_struct("Decision", 4 + usize::from(shadow))?;
        st.serialize_field("allowed", &self.allowed)?;
        st.serialize_field("remaining", &self.remaining)?;
        st.serialize_field("retry_after", &self.retry_after_secs())?;
        st.serialize_field("blocked_by", &self.blocked_by)?;
        if shadow {
            st.serialize_field("shadow_blocked_by", &self.shadow_blocked_by)?;
        }
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_numbers_are_exact_on_both_sides_of_the_cache() {
        for n in [0, 1, 9, 10, 99, 100, 4095, 4096, 4097, 1 << 40, u64::MAX] {
            assert_eq!(number(n).to_str().unwrap(), n.to_string());
        }
    }

    #[test]
    fn headers_of_a_denial_round_up() {
        let d = Decision::deny(Tier::User, Duration::from_millis(1500));
        let h = d.headers();
        assert_eq!(h[&X_RATELIMIT_REMAINING], "0");
        assert_eq!(h[RETRY_AFTER], "2");
        let d = Decision::deny(Tier::User, Duration::from_micros(1));
        assert_eq!(d.headers()[RETRY_AFTER], "1");
        let a = Decision::admit(7);
        assert_eq!(a.headers()[RETRY_AFTER], "0");
        assert_eq!(a.headers()[&X_RATELIMIT_REMAINING], "7");
    }
}
